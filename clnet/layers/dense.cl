// Dense layer: z = x W + b, y = f(z), for a whole mini-batch per launch. Products are written
// "acc += a * b", which OpenCL compilers contract to FMA; mad() on double8 crashes LLVM 14 (PoCL 3.0).
// Layout: x (rows, n_in); W (n_in, units_p) and b (units_p) with units_p = units rounded up to
// VW and zero padding, so that every load of W, b or delta is a whole VW-wide vector.
// Each work-item owns a block of outputs (FF_RM rows x VW columns for the forward product,
// DW_RM x VW for the weight gradient, HG_RM x HG_RN for the hidden gradient; the sizes come from
// the autotuner, clnet/cl/tuning.py): on a CPU that block lives in SIMD registers; rows past
// the end are clamped on load and skipped on store, so no size needs to be a multiple of anything.

// delta = dL/dz = dL/dy * f'(z) (skipped when a loss already gave dL/dz), padded to units_p
// with zeros (ToVect4 reads the padding of dL/dy as 0); and the bias gradient, the column
// sums of delta. Four columns per work-item.
__kernel void CalcDeltaBias(__global const TYPE *output_gr,   // dL/dy (rows, units)
                            __global const TYPE *outputs,     // y (rows, units)
                            __global const TYPE *pre,         // z (rows, units)
                            __global TYPE *delta,             // dL/dz (rows, units_p)
                            __global TYPE *delta_bias,        // dL/db (units_p)
                            const int rows, const int units, const int units_p,
                            const TYPE a, const TYPE b, const int apply_derivative)
{
    const int col = get_global_id(0) * 4;
    TYPE4 sum = (TYPE4)(0);
    for (int m = 0; m < rows; m++) {
        TYPE4 g = ToVect4(output_gr + m * units, col, units);
        if (apply_derivative) {
            const TYPE4 y = ToVect4(outputs + m * units, col, units);
            const TYPE4 z = ToVect4(pre + m * units, col, units);
            g *= (TYPE4)(ACT_DERIVATIVE(y.s0, z.s0, a, b), ACT_DERIVATIVE(y.s1, z.s1, a, b),
                         ACT_DERIVATIVE(y.s2, z.s2, a, b), ACT_DERIVATIVE(y.s3, z.s3, a, b));
        }
        vstore4(g, 0, delta + m * units_p + col);
        sum += g;
    }
    vstore4(sum, 0, delta_bias + col);
}

// The transposed input x^T (n_in, ld), which the weight gradient reads along rows, when the
// layer below did not provide it (Dense layers and the batch gather write theirs as they go).
__kernel void Transpose(__global const TYPE *x, __global TYPE *xt, const int cols, const int ld)
{
    const int col = get_global_id(0), row = get_global_id(1);
    xt[col * ld + row] = x[row * cols + col];
}

#ifndef TILE
// The CPU form: register blocks of wide vectors, no local memory.

// acc[r] += sum_k a[r][k] B[k][0..VW) for r < RM, where a[r] are contiguous rows of length K and
// B's rows are ldb apart: the forward product (a = rows of x, B = W) and the weight gradient
// (a = rows of x^T, B = delta) both have this form. Four steps of k at a time, so that each row
// of a is read as one TYPE4. Defined once per block size, since RM sizes the arrays.
#define DEFINE_ROW_BLOCK_PRODUCT(name, RM)                                                  \
inline void name(const __global TYPE *a[RM], const __global TYPE *B, const int ldb,         \
                 const int K, VEC acc[RM])                                                  \
{                                                                                           \
    int k = 0;                                                                              \
    for (; k + 4 <= K; k += 4, B += 4 * ldb) {                                              \
        const VEC b0 = VLOAD(0, B), b1 = VLOAD(0, B + ldb),                                 \
                  b2 = VLOAD(0, B + 2 * ldb), b3 = VLOAD(0, B + 3 * ldb);                   \
        for (int r = 0; r < RM; r++) {                                                      \
            const TYPE4 av = vload4(0, a[r] + k);                                           \
            acc[r] += (VEC)(av.s0) * b0;                                                    \
            acc[r] += (VEC)(av.s1) * b1;                                                    \
            acc[r] += (VEC)(av.s2) * b2;                                                    \
            acc[r] += (VEC)(av.s3) * b3;                                                    \
        }                                                                                   \
    }                                                                                       \
    for (; k < K; k++, B += ldb) {                                                          \
        const VEC bk = VLOAD(0, B);                                                         \
        for (int r = 0; r < RM; r++)                                                        \
            acc[r] += (VEC)(a[r][k]) * bk;                                                  \
    }                                                                                       \
}
DEFINE_ROW_BLOCK_PRODUCT(forward_product, FF_RM)
DEFINE_ROW_BLOCK_PRODUCT(weight_product, DW_RM)

// z = x W + b, y = f(z); y is also stored transposed, (units, ld), for the next layer's weight
// gradient. FF_RM rows x VW columns per work-item.
__kernel void PerceptronFeedForward(__global const TYPE *inputs,   // x (rows, n_in)
                                    __global const TYPE *weights,  // W (n_in, units_p)
                                    __global const TYPE *bias,     // b (units_p)
                                    __global TYPE *pre,            // z (rows, units)
                                    __global TYPE *outputs,        // y = f(z) (rows, units)
                                    __global TYPE *outputs_t,      // y^T (units, ld)
                                    const int rows, const int n_in, const int units, const int units_p,
                                    const int ld, const TYPE a, const TYPE b)
{
    const int col = get_global_id(0) * VW;
    const int row = get_global_id(1) * FF_RM;
    if (col >= units || row >= rows)
        return;
    VEC acc[FF_RM];
    const __global TYPE *x[FF_RM];
    for (int r = 0; r < FF_RM; r++) {
        acc[r] = (VEC)(0);
        x[r] = inputs + min(row + r, rows - 1) * n_in;
    }
    forward_product(x, weights + col, units_p, n_in, acc);
    const VEC bv = VLOAD(0, bias + col);
    const int width = min(VW, units - col);
    for (int r = 0; r < FF_RM && row + r < rows; r++) {
        TYPE z[VW];
        VSTORE(acc[r] + bv, 0, z);
        const int o = (row + r) * units + col;
        for (int j = 0; j < width; j++) {
            const TYPE y = ACT_FORWARD(z[j], a, b);
            pre[o + j] = z[j];
            outputs[o + j] = y;
            outputs_t[(col + j) * ld + row + r] = y;
        }
    }
}

// dL/dW = x^T delta: (n_in, rows) x (rows, units_p), from x^T (n_in, ld). DW_RM input rows x
// VW columns per work-item.
__kernel void CalcDeltaWeights(__global const TYPE *inputs_t,     // x^T (n_in, ld)
                               __global const TYPE *delta,        // (rows, units_p)
                               __global TYPE *delta_weights,      // dL/dW (n_in, units_p)
                               const int rows, const int n_in, const int units_p, const int ld)
{
    const int col = get_global_id(0) * VW;
    const int i0 = get_global_id(1) * DW_RM;
    if (col >= units_p || i0 >= n_in)
        return;
    VEC acc[DW_RM];
    const __global TYPE *xt[DW_RM];
    for (int r = 0; r < DW_RM; r++) {
        acc[r] = (VEC)(0);
        xt[r] = inputs_t + min(i0 + r, n_in - 1) * ld;
    }
    weight_product(xt, delta + col, units_p, rows, acc);
    for (int r = 0; r < DW_RM && i0 + r < n_in; r++)
        VSTORE(acc[r], 0, delta_weights + (i0 + r) * units_p + col);
}

// dL/dx = delta W^T: (rows, units_p) x (units_p, n_in). Both operands are read along units,
// VW at a time, and each of the HG_RM x HG_RN outputs is a vector dot product summed at the end.
__kernel void CalcHiddenGradient(__global const TYPE *delta,     // (rows, units_p)
                                 __global const TYPE *weights,   // W (n_in, units_p)
                                 __global TYPE *input_gr,        // dL/dx (rows, n_in)
                                 const int rows, const int n_in, const int units_p)
{
    const int i0 = get_global_id(0) * HG_RN;
    const int row = get_global_id(1) * HG_RM;
    if (i0 >= n_in || row >= rows)
        return;
    VEC acc[HG_RM][HG_RN];
    const __global TYPE *d[HG_RM];
    const __global TYPE *w[HG_RN];
    for (int r = 0; r < HG_RM; r++) {
        d[r] = delta + min(row + r, rows - 1) * units_p;
        for (int j = 0; j < HG_RN; j++)
            acc[r][j] = (VEC)(0);
    }
    for (int j = 0; j < HG_RN; j++)
        w[j] = weights + min(i0 + j, n_in - 1) * units_p;
    for (int k = 0; k < units_p; k += VW) {
        VEC wv[HG_RN];
        for (int j = 0; j < HG_RN; j++)
            wv[j] = VLOAD(0, w[j] + k);
        for (int r = 0; r < HG_RM; r++) {
            const VEC dv = VLOAD(0, d[r] + k);
            for (int j = 0; j < HG_RN; j++)
                acc[r][j] += dv * wv[j];
        }
    }
    for (int r = 0; r < HG_RM && row + r < rows; r++)
        for (int j = 0; j < HG_RN && i0 + j < n_in; j++)
            input_gr[(row + r) * n_in + i0 + j] = HSUM(acc[r][j]);
}

#else
// The GPU form of the same three products: a work-group of (TILE/WPT)^2 work-items computes a
// TILE x TILE block of the result, staging TK-deep slices of both operands in local memory; each
// work-item accumulates WPT x WPT outputs, strided by TILE/WPT so that neighbouring work-items
// read neighbouring local-memory words. Operands are addressed through strides, so one routine
// serves x W, x^T delta and delta W^T.
#define SIDE (TILE / WPT)

// acc += A B for this work-group's block, A[m][k] = A[m * a_row + k * a_col] (M x K),
// B[k][n] = B[k * b_row + n * b_col] (K x N); out-of-range elements read as 0.
inline void tiled_product(const __global TYPE *A, const int a_row, const int a_col,
                          const __global TYPE *B, const int b_row, const int b_col,
                          const int M, const int N, const int K,
                          __local TYPE *As, __local TYPE *Bs, TYPE acc[WPT][WPT])
{
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * SIDE + tx;
    const int m0 = get_group_id(1) * TILE, n0 = get_group_id(0) * TILE;
    for (int k0 = 0; k0 < K; k0 += TK) {
        // Neighbouring work-items load neighbouring addresses: along k where A's rows (B's
        // columns) are contiguous, else along m (n).
        for (int e = lid; e < TILE * TK; e += SIDE * SIDE) {
            const int mm = a_col == 1 ? e / TK : e % TILE, kk = a_col == 1 ? e % TK : e / TILE;
            const int m = m0 + mm, k = k0 + kk;
            As[kk * TILE + mm] = m < M && k < K ? A[m * a_row + k * a_col] : 0;
            const int nn = b_col == 1 ? e % TILE : e / TK, kb = b_col == 1 ? e / TILE : e % TK;
            const int n = n0 + nn, k2 = k0 + kb;
            Bs[kb * TILE + nn] = n < N && k2 < K ? B[k2 * b_row + n * b_col] : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int kk = 0; kk < TK; kk++) {
            TYPE a[WPT], b[WPT];
            #pragma unroll
            for (int i = 0; i < WPT; i++) {
                a[i] = As[kk * TILE + ty + i * SIDE];
                b[i] = Bs[kk * TILE + tx + i * SIDE];
            }
            #pragma unroll
            for (int i = 0; i < WPT; i++)
                #pragma unroll
                for (int j = 0; j < WPT; j++)
                    acc[i][j] += a[i] * b[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

#define TILED_BEGIN                                             \
    __local TYPE As[TK * TILE], Bs[TK * TILE];                  \
    TYPE acc[WPT][WPT];                                         \
    for (int i = 0; i < WPT; i++)                               \
        for (int j = 0; j < WPT; j++)                           \
            acc[i][j] = 0;                                      \
    const int m_first = get_group_id(1) * TILE + get_local_id(1); \
    const int n_first = get_group_id(0) * TILE + get_local_id(0);

__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void PerceptronFeedForward(__global const TYPE *inputs, __global const TYPE *weights,
                           __global const TYPE *bias, __global TYPE *pre, __global TYPE *outputs,
                           __global TYPE *outputs_t, const int rows, const int n_in, const int units,
                           const int units_p, const int ld, const TYPE a, const TYPE b)
{
    TILED_BEGIN
    tiled_product(inputs, n_in, 1, weights, units_p, 1, rows, units, n_in, As, Bs, acc);
    for (int i = 0; i < WPT; i++)
        for (int j = 0; j < WPT; j++) {
            const int m = m_first + i * SIDE, n = n_first + j * SIDE;
            if (m < rows && n < units) {
                const TYPE z = acc[i][j] + bias[n], y = ACT_FORWARD(z, a, b);
                pre[m * units + n] = z;
                outputs[m * units + n] = y;
                outputs_t[n * ld + m] = y;
            }
        }
}

__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void CalcDeltaWeights(__global const TYPE *inputs_t, __global const TYPE *delta,
                      __global TYPE *delta_weights, const int rows, const int n_in, const int units_p,
                      const int ld)
{
    TILED_BEGIN
    tiled_product(inputs_t, ld, 1, delta, units_p, 1, n_in, units_p, rows, As, Bs, acc);
    for (int i = 0; i < WPT; i++)
        for (int j = 0; j < WPT; j++) {
            const int m = m_first + i * SIDE, n = n_first + j * SIDE;
            if (m < n_in && n < units_p)
                delta_weights[m * units_p + n] = acc[i][j];
        }
}

__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void CalcHiddenGradient(__global const TYPE *delta, __global const TYPE *weights,
                        __global TYPE *input_gr, const int rows, const int n_in, const int units_p)
{
    TILED_BEGIN
    tiled_product(delta, units_p, 1, weights, 1, units_p, rows, n_in, units_p, As, Bs, acc);
    for (int i = 0; i < WPT; i++)
        for (int j = 0; j < WPT; j++) {
            const int m = m_first + i * SIDE, n = n_first + j * SIDE;
            if (m < rows && n < n_in)
                input_gr[m * n_in + n] = acc[i][j];
        }
}
#endif
