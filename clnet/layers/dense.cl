// Dense layer: z = x W + b, y = f(z), for a whole mini-batch per launch. Products are written
// "acc += a * b", which OpenCL compilers contract to FMA; mad() on double8 crashes LLVM 14 (PoCL 3.0).
//
// Layouts. units_p = units rounded up to VW, zero-padded. W (n_in, units_p) and delta = dL/dz
// (rows, units_p) are kept in column panels of width P: element (i, c) of W lives at
// (c / P) * n_in * P + i * P + c % P, so a work-item that walks down VW columns of W reads one
// contiguous stream instead of jumping a whole row per step (a row of 2048 floats is 8 KiB: a
// new page and the same cache set every step). The CPU form uses P = VW; the GPU form uses
// P = units_p, which is plain row-major. The bias is a plain (units_p,) vector.
// Each work-item of the CPU form owns a block of outputs (FF_RM, DW_RM or HG_RM rows x VW
// columns; the sizes come from the autotuner, clnet/layers/dense.py): a block that lives in SIMD
// registers. Rows past the end are clamped on load and skipped on store, so no size needs to be
// a multiple of anything.

// delta = dL/dz = dL/dy * f'(z) (skipped when a loss already gave dL/dz) in column panels of
// width `panel`, `capacity` rows per panel; the CPU form also writes it in row panels,
// (rows_p / VW, units_p, VW), for the input gradient. And the bias gradient, the column sums of
// delta. Four columns per work-item (ToVect4 reads the padding of dL/dy as 0).
__kernel void CalcDeltaBias(__global const TYPE *output_gr,   // dL/dy (rows, units)
                            __global const TYPE *outputs,     // y (rows, units)
                            __global const TYPE *pre,         // z (rows, units)
                            __global TYPE *delta,             // dL/dz in column panels
                            __global TYPE *delta_rows,        // dL/dz in row panels (CPU form)
                            __global TYPE *delta_bias,        // dL/db (units_p)
                            const int rows, const int units, const int units_p, const int panel,
                            const int capacity, const TYPE a, const TYPE b, const int apply_derivative)
{
    const int col = get_global_id(0) * 4;
    __global TYPE *column_panel = delta + (col / panel) * capacity * panel + col % panel;
    TYPE4 sum = (TYPE4)(0);
    for (int m = 0; m < rows; m++) {
        TYPE4 g = ToVect4(output_gr + m * units, col, units);
        if (apply_derivative) {
            const TYPE4 y = ToVect4(outputs + m * units, col, units);
            const TYPE4 z = ToVect4(pre + m * units, col, units);
            g *= (TYPE4)(ACT_DERIVATIVE(y.s0, z.s0, a, b), ACT_DERIVATIVE(y.s1, z.s1, a, b),
                         ACT_DERIVATIVE(y.s2, z.s2, a, b), ACT_DERIVATIVE(y.s3, z.s3, a, b));
        }
        vstore4(g, 0, column_panel + m * panel);
#ifndef TILE
        __global TYPE *row_panel = delta_rows + (m / VW) * units_p * VW + col * VW + m % VW;
        row_panel[0] = g.s0;
        row_panel[VW] = g.s1;
        row_panel[2 * VW] = g.s2;
        row_panel[3 * VW] = g.s3;
#endif
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

// acc[r] += sum_k a[r][k] B[k][0..VW) for r < RM, where B is one column panel (K rows of VW,
// contiguous) and row r of a holds its element k at a[r][(k / VW) * a_panel + k % VW]: a_panel
// = VW for a row stored contiguously (x, x^T), n_in * VW for a row of W in column panels. All
// three products have this form. Four steps of k at a time, so that each row of a is read as
// one TYPE4 (VW is a multiple of 4, so those never straddle panels). Defined once per block
// size, since RM sizes the arrays.
#define DEFINE_ROW_BLOCK_PRODUCT(name, RM)                                                  \
inline void name(const __global TYPE *a[RM], const int a_panel, const __global TYPE *B,     \
                 const int K, VEC acc[RM])                                                  \
{                                                                                           \
    int k = 0;                                                                              \
    for (; k + 4 <= K; k += 4, B += 4 * VW) {                                               \
        const int ak = (k / VW) * a_panel + k % VW;                                         \
        const VEC b0 = VLOAD(0, B), b1 = VLOAD(1, B), b2 = VLOAD(2, B), b3 = VLOAD(3, B);   \
        for (int r = 0; r < RM; r++) {                                                      \
            const TYPE4 av = vload4(0, a[r] + ak);                                          \
            acc[r] += (VEC)(av.s0) * b0;                                                    \
            acc[r] += (VEC)(av.s1) * b1;                                                    \
            acc[r] += (VEC)(av.s2) * b2;                                                    \
            acc[r] += (VEC)(av.s3) * b3;                                                    \
        }                                                                                   \
    }                                                                                       \
    for (; k < K; k++, B += VW) {                                                           \
        const int ak = (k / VW) * a_panel + k % VW;                                         \
        const VEC bk = VLOAD(0, B);                                                         \
        for (int r = 0; r < RM; r++)                                                        \
            acc[r] += (VEC)(a[r][ak]) * bk;                                                 \
    }                                                                                       \
}
DEFINE_ROW_BLOCK_PRODUCT(forward_product, FF_RM)
DEFINE_ROW_BLOCK_PRODUCT(weight_product, DW_RM)
DEFINE_ROW_BLOCK_PRODUCT(input_product, HG_RM)

// z = x W + b, y = f(z); y is also stored transposed, (units, ld), for the next layer's weight
// gradient. FF_RM rows x VW columns per work-item.
__kernel void PerceptronFeedForward(__global const TYPE *inputs,   // x (rows, n_in)
                                    __global const TYPE *weights,  // W, column panels
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
    forward_product(x, VW, weights + col * n_in, n_in, acc);
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

// dL/dW = x^T delta: (n_in, rows) x (rows, units_p), from x^T (n_in, capacity) and delta's
// column panels (`capacity` rows each). DW_RM input rows x VW columns per work-item.
__kernel void CalcDeltaWeights(__global const TYPE *inputs_t,     // x^T (n_in, capacity)
                               __global const TYPE *delta,        // dL/dz, column panels
                               __global TYPE *delta_weights,      // dL/dW, column panels
                               const int rows, const int n_in, const int units_p, const int capacity)
{
    const int col = get_global_id(0) * VW;
    const int i0 = get_global_id(1) * DW_RM;
    if (col >= units_p || i0 >= n_in)
        return;
    VEC acc[DW_RM];
    const __global TYPE *xt[DW_RM];
    for (int r = 0; r < DW_RM; r++) {
        acc[r] = (VEC)(0);
        xt[r] = inputs_t + min(i0 + r, n_in - 1) * capacity;
    }
    weight_product(xt, VW, delta + col * capacity, rows, acc);
    for (int r = 0; r < DW_RM && i0 + r < n_in; r++)
        VSTORE(acc[r], 0, delta_weights + col * n_in + (i0 + r) * VW);
}

// dL/dx = delta W^T, computed as its transpose W delta^T: rows of W (read across its column
// panels) times a row panel of delta, VW batch rows wide. HG_RM inputs x VW batch rows per
// work-item, scattered into dL/dx (rows, n_in) at the end.
__kernel void CalcHiddenGradient(__global const TYPE *delta_rows, // dL/dz, row panels
                                 __global const TYPE *weights,    // W, column panels
                                 __global TYPE *input_gr,         // dL/dx (rows, n_in)
                                 const int rows, const int n_in, const int units_p)
{
    const int row = get_global_id(0) * VW;
    const int i0 = get_global_id(1) * HG_RM;
    if (row >= rows || i0 >= n_in)
        return;
    VEC acc[HG_RM];
    const __global TYPE *w[HG_RM];
    for (int j = 0; j < HG_RM; j++) {
        acc[j] = (VEC)(0);
        w[j] = weights + min(i0 + j, n_in - 1) * VW;
    }
    input_product(w, n_in * VW, delta_rows + row * units_p, units_p, acc);
    const int height = min(VW, rows - row);
    for (int j = 0; j < HG_RM && i0 + j < n_in; j++) {
        TYPE g[VW];
        VSTORE(acc[j], 0, g);
        for (int r = 0; r < height; r++)
            input_gr[(row + r) * n_in + i0 + j] = g[r];
    }
}

#else
// The GPU form of the same three products: a work-group of (TILE/WPT)^2 work-items computes a
// TILE x TILE block of the result, staging TK-deep slices of both operands in local memory; each
// work-item accumulates WPT x WPT outputs in runs of 4 (OWN below), so that it reads local memory
// one TYPE4 at a time and neighbouring work-items read neighbouring TYPE4s. Operands are
// addressed through strides, so one routine serves x W, x^T delta and delta W^T; W and delta are
// row-major here (a single panel, P = units_p). WPT is a multiple of 4.
#define SIDE (TILE / WPT)
// The i-th of a work-item's WPT rows (columns) within the block, for local index t.
#define OWN(t, i) (((i) / 4) * 4 * SIDE + (t) * 4 + (i) % 4)
// Row length of a staged slice in local memory: padded so that the k-th rows start in different
// banks (staging writes columns), kept a multiple of 4 for TYPE4 reads.
#define LT (TILE + 4)

// Stage P[m][k] = P[m * pm + k * pk] for m0 <= m < m0 + TILE, k0 <= k < k0 + TK into L[k][m]
// (TK rows of LT). Whole slices of an operand that is contiguous along k or along m move as TYPE4s;
// at the edges, elements are read one by one and those out of range read as 0.
inline void stage(const __global TYPE *P, const int pm, const int pk, const int m0, const int k0,
                  const int M, const int K, __local TYPE *L, const int lid)
{
    const int whole = m0 + TILE <= M && k0 + TK <= K;
    if (whole && pk == 1 && pm % 4 == 0) {
        for (int e = lid; e < TILE * TK / 4; e += SIDE * SIDE) {
            const int m = e / (TK / 4), k = e % (TK / 4) * 4;
            const TYPE4 v = vload4(0, P + (m0 + m) * pm + k0 + k);
            L[k * LT + m] = v.s0;
            L[(k + 1) * LT + m] = v.s1;
            L[(k + 2) * LT + m] = v.s2;
            L[(k + 3) * LT + m] = v.s3;
        }
    } else if (whole && pm == 1 && pk % 4 == 0) {
        for (int e = lid; e < TILE * TK / 4; e += SIDE * SIDE) {
            const int k = e / (TILE / 4), m = e % (TILE / 4) * 4;
            vstore4(vload4(0, P + (k0 + k) * pk + m0 + m), 0, L + k * LT + m);
        }
    } else {
        for (int e = lid; e < TILE * TK; e += SIDE * SIDE) {
            // Neighbouring work-items read neighbouring addresses: along k where P is
            // contiguous along k, else along m.
            const int m = pk == 1 ? e / TK : e % TILE, k = pk == 1 ? e % TK : e / TILE;
            L[k * LT + m] = m0 + m < M && k0 + k < K ? P[(m0 + m) * pm + (k0 + k) * pk] : 0;
        }
    }
}

// acc += A B for this work-group's block, A[m][k] = A[m * a_row + k * a_col] (M x K),
// B[k][n] = B[k * b_row + n * b_col] (K x N).
inline void tiled_product(const __global TYPE *A, const int a_row, const int a_col,
                          const __global TYPE *B, const int b_row, const int b_col,
                          const int M, const int N, const int K,
                          __local TYPE *As, __local TYPE *Bs, TYPE acc[WPT][WPT])
{
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * SIDE + tx;
    const int m0 = get_group_id(1) * TILE, n0 = get_group_id(0) * TILE;
    for (int k0 = 0; k0 < K; k0 += TK) {
        stage(A, a_row, a_col, m0, k0, M, K, As, lid);
        stage(B, b_col, b_row, n0, k0, N, K, Bs, lid);
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int kk = 0; kk < TK; kk++) {
            TYPE a[WPT], b[WPT];
            #pragma unroll
            for (int q = 0; q < WPT / 4; q++) {
                vstore4(vload4(0, As + kk * LT + q * 4 * SIDE + ty * 4), q, a);
                vstore4(vload4(0, Bs + kk * LT + q * 4 * SIDE + tx * 4), q, b);
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
    __local TYPE As[TK * LT], Bs[TK * LT];                  \
    TYPE acc[WPT][WPT];                                         \
    for (int i = 0; i < WPT; i++)                               \
        for (int j = 0; j < WPT; j++)                           \
            acc[i][j] = 0;                                      \
    const int m_block = get_group_id(1) * TILE, n_block = get_group_id(0) * TILE; \
    const int tx = get_local_id(0), ty = get_local_id(1);

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
            const int m = m_block + OWN(ty, i), n = n_block + OWN(tx, j);
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
                      const int capacity)
{
    TILED_BEGIN
    tiled_product(inputs_t, capacity, 1, delta, units_p, 1, n_in, units_p, rows, As, Bs, acc);
    for (int i = 0; i < WPT; i++)
        for (int j = 0; j < WPT; j++) {
            const int m = m_block + OWN(ty, i), n = n_block + OWN(tx, j);
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
            const int m = m_block + OWN(ty, i), n = n_block + OWN(tx, j);
            if (m < rows && n < n_in)
                input_gr[m * n_in + n] = acc[i][j];
        }
}
#endif
