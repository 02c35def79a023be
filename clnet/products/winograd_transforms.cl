// Winograd's transforms at the six points 0, 1, -1, 2, -2 and infinity (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks"), shared by the convolution's two Winograd forms:
// F(4x4, 3x3), the input gradient (winograd.cl), and F(3x3, 4x4), the weight gradient
// (winograd_weights.cl). Both take 6 x 6 patches of data through the same B^T, which depends on the
// points alone: B^T = D V^-T, V the points' 6 x 6 Vandermonde matrix (infinity's row (0 .. 0 1)), and
// D = diag(4, -6, -6, 24, 24, 1) the row scaling that leaves it integers. The other operand's G
// is then V_r / D (V_r the first r columns of V: r = 3 a kernel, r = 4 a block of dL/dz), and the
// output's A^T = V_m^T (m = 4 or 3), so that a correlation y[i] = sum_a d[i + a] g[a] is
// y = A^T [(G g) . (B^T d)], and in two dimensions Y = A^T [(G g G^T) . (B^T d B)] A.

// o = B^T v for a column of 6, B^T's rows (4 0 -5 0 1 0), (0 -4 -4 1 1 0), (0 4 -4 -1 1 0),
// (0 -2 -1 2 1 0), (0 2 -1 -2 1 0), (0 4 0 -5 0 1).
#define INPUT_TRANSFORM(v, o)                          \
    o[0] = 4 * v[0] - 5 * v[2] + v[4];                 \
    o[1] = -4 * (v[1] + v[2]) + v[3] + v[4];           \
    o[2] = 4 * (v[1] - v[2]) - v[3] + v[4];            \
    o[3] = 2 * (v[3] - v[1]) - v[2] + v[4];            \
    o[4] = 2 * (v[1] - v[3]) - v[2] + v[4];            \
    o[5] = 4 * v[1] - 5 * v[3] + v[5];
// o = G v for a column of 3, G's rows (1/4 0 0), (-1/6 -1/6 -1/6), (-1/6 1/6 -1/6), (1/24 1/12 1/6),
// (1/24 -1/12 1/6), (0 0 1).
#define FILTER_TRANSFORM(v, o)                                        \
    o[0] = v[0] / 4;                                                  \
    o[1] = -(v[0] + v[1] + v[2]) / 6;                                 \
    o[2] = -(v[0] - v[1] + v[2]) / 6;                                 \
    o[3] = v[0] / 24 + v[1] / 12 + v[2] / 6;                          \
    o[4] = v[0] / 24 - v[1] / 12 + v[2] / 6;                          \
    o[5] = v[2];
// o = A^T v for a column of 6, A^T's rows (1 1 1 1 1 0), (0 1 -1 2 -2 0), (0 1 1 4 4 0), (0 1 -1 8 -8 1).
#define OUTPUT_TRANSFORM(v, o)                                        \
    o[0] = v[0] + v[1] + v[2] + v[3] + v[4];                          \
    o[1] = v[1] - v[2] + 2 * (v[3] - v[4]);                           \
    o[2] = v[1] + v[2] + 4 * (v[3] + v[4]);                           \
    o[3] = v[1] - v[2] + 8 * (v[3] - v[4]) + v[5];

// F(3x3, 4x4)'s G (6 x 4) = V_4 / D: o = G v for a column of 4, G's rows (1/4 0 0 0),
// (-1/6 -1/6 -1/6 -1/6), (-1/6 1/6 -1/6 1/6), (1/24 1/12 1/6 1/3), (1/24 -1/12 1/6 -1/3), (0 0 0 1).
#define DELTA_TRANSFORM(v, o)                                         \
    o[0] = v[0] / 4;                                                  \
    o[1] = -(v[0] + v[1] + v[2] + v[3]) / 6;                          \
    o[2] = -(v[0] - v[1] + v[2] - v[3]) / 6;                          \
    o[3] = (v[0] + 2 * v[1] + 4 * v[2] + 8 * v[3]) / 24;              \
    o[4] = (v[0] - 2 * v[1] + 4 * v[2] - 8 * v[3]) / 24;              \
    o[5] = v[3];
// F(3x3, 4x4)'s A^T (3 x 6) = V_3^T: o = A^T v for a column of 6, A^T's rows (1 1 1 1 1 0),
// (0 1 -1 2 -2 0), (0 1 1 4 4 1).
#define WEIGHT_OUTPUT_TRANSFORM(v, o)                                 \
    o[0] = v[0] + v[1] + v[2] + v[3] + v[4];                          \
    o[1] = v[1] - v[2] + 2 * (v[3] - v[4]);                           \
    o[2] = v[1] + v[2] + 4 * (v[3] + v[4]) + v[5];

// B^T d B of the 6 x 6 patch d of an image (height x width pixels, `stride` elements apart: one
// channel's of an image or of dL/dz's frame) whose corner is (y0, x0), zeros outside the image,
// into v[xi * point_step] for each of the 36 points xi = 6 r + s.
inline void patch_transform(const __global TYPE *image, const int height, const int width, const int stride,
                            const int y0, const int x0, __global TYPE *v, const long point_step)
{
    TYPE rows[6][6], column[6], out[6];
    for (int s = 0; s < 6; s++) {  // B^T d, a column at a time
        const int x = x0 + s;
        for (int r = 0; r < 6; r++) {
            const int y = y0 + r;
            column[r] = y >= 0 && y < height && x >= 0 && x < width ? image[((long)y * width + x) * stride] : 0;
        }
        INPUT_TRANSFORM(column, out);
        for (int r = 0; r < 6; r++)
            rows[r][s] = out[r];
    }
    for (int r = 0; r < 6; r++) {  // (B^T d) B, a row at a time
        INPUT_TRANSFORM(rows[r], out);
        for (int s = 0; s < 6; s++)
            v[(r * 6 + s) * point_step] = out[s];
    }
}

// F(4x4, 3x3)'s A^T M of one tile and column: M's 36 points m[xi * point_step], xi = 6 r + s, into
// rows[4][6]; (A^T M) A, a row of it at a time, is left to the caller, which stores it.
inline void output_rows(const __global TYPE *m, const long point_step, TYPE rows[4][6])
{
    TYPE column[6], out[4];
    for (int s = 0; s < 6; s++) {  // a column at a time
        for (int r = 0; r < 6; r++)
            column[r] = m[(r * 6 + s) * point_step];
        OUTPUT_TRANSFORM(column, out);
        for (int r = 0; r < 4; r++)
            rows[r][s] = out[r];
    }
}
