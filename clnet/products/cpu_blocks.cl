// The dense products' CPU form: z = x W + b, y = f(z), dL/dW with dL/db, and dL/dx, for a whole
// mini-batch per launch, in blocks of SIMD registers. gpu_tiles.cl is the GPU form of the same
// kernels (names and arguments alike); clnet/products/forms.py chooses. Products are written
// "acc += a * b", which OpenCL compilers contract to FMA; mad() on double8 crashes LLVM 14 (PoCL 3.0).
//
// Layouts. units_p = units rounded up to VW, zero-padded. W (n_in, units_p) and delta = dL/dz
// (rows, units_p) are kept in column panels of width P: element (i, c) of W lives at
// (c / P) * n_in * P + i * P + c % P, so a work-item that walks down VW columns of W reads one
// contiguous stream instead of jumping a whole row per step (a row of 2048 floats is 8 KiB: a
// new page and the same cache set every step). The CPU form uses P = VW; the GPU form uses
// P = units_p, which is plain row-major, or, for a layer joining several parts (JoinedDense:
// MultiHeadAttention's query, key and value projections of one input), the parts' width, so that
// each part's weights are one contiguous weight of its own; its tiles then never straddle two
// panels (the width is a multiple of TILE). The bias is a plain (units_p,) vector.
// Each work-item of the CPU form owns FF_NB, DW_NB or HG_NB blocks of outputs stacked down the
// rows, each block FF_RM, DW_RM or HG_RM rows x FF_CN, DW_CN or HG_CN column panels of VW (the
// sizes come from the autotuner, clnet/products/tuner.py): a block lives in SIMD registers while
// it is multiplied, in register_blocks.cl's product (pasted before this file). Rows past the
// end are clamped on load and skipped on store, so no size needs to be a multiple of anything.

// STORE_PRE = 0: the forward does not store z, as the activation's derivative follows from y
// alone (ReLU, linear, tanh, Keras's sigmoid; see Activation.derivative_from_output) and the layer passes y for z.
// One output fewer: measurably faster at 1024^3 on Intel's runtime with y^T left out.
#ifndef STORE_PRE
#define STORE_PRE 1
#endif
// HG_T = 1 (the CPU form): the input gradient reads W^T, which CalcDeltaBias writes from this
// step's W, and is the forward's product: rows of delta times W^T's column panels, delta's rows
// read from its column panels, where a block's rows are one contiguous run in each panel (a
// row-major copy of delta written beside them cost CalcDeltaBias a fifth more stores and the input
// gradient no less time). Without it, it reads W's rows across W's column panels,
// a 128 KiB jump every VW steps of k at 2048 inputs. On Intel's runtime the product's kernel
// alone ran faster with it at 2048^3 and 1024^3 (there faster than numpy too), while writing W^T
// took about what the row panels it replaces took. PoCL 3.0 (VW 8) ran it slower at 1024^3 (wall
// clock). The tuner chooses (benchmarks/RESULTS.md, the input gradient from W^T).
#ifndef HG_T
#define HG_T 0
#endif

// delta = dL/dz = dL/dy * f'(z) (skipped when a loss already gave dL/dz) in column panels of
// width VW, `capacity` rows per panel, and, without HG_T, in row panels, (rows_p / VW, units_p, VW),
// for the input gradient; and the bias gradient, the column sums of delta. One work-item per `panels` column
// panels (the padding of dL/dy reads as 0), walking its columns row after row, f' on VW lanes at
// once (ACT_DERIVATIVE_V: GELU's scalar erf and exp made this kernel a large part of the tiny
// GPT's step on PoCL 3.0). A work-item per panel walked one panel down all rows: reads 1 KiB apart
// for 256 units, four to a page, which the CPU's prefetcher does not follow across pages; the
// GELU layer's time there was stalls, not f' (f' replaced by a product: the same time). (The GPU
// form does all this inside its weight gradient, see CalcDeltaWeights there.)
// Row m of delta, columns col.., in row panels, as the input gradient without HG_T reads it.
__attribute__((always_inline))
void StoreDeltaRow(const VEC g, __global TYPE *delta_rows, const int m, const int col, const int units_p)
{
    __global TYPE *row_panel = delta_rows + (m / VW) * units_p * VW + m % VW;
    const TYPE *lanes = (const TYPE *)&g;
    for (int j = 0; j < VW; j++)
        row_panel[(col + j) * VW] = lanes[j];
}

// W's column panel p as rows p * VW.. of W^T's column panels: each row of the panel read as a
// vector, its elements stored VW apart, down VW rows of W^T that stay in L1 while VW rows of W
// fill them. For W of 2048 x 2048 (16 MiB each way) on Intel's runtime, as long as a VW x VW
// block read and written whole through a private array took. W^T's lanes
// past n_in are never written: zeros from the allocation.
__attribute__((always_inline))
void TransposePanel(const __global TYPE *weights, __global TYPE *weights_t, const int p, const int n_in,
                    const int units_p)
{
    for (int k = 0; k < n_in; k++) {
        const VEC v = LoadBlock(weights + (p * n_in + k) * VW, VW);
        const TYPE *row = (const TYPE *)&v;
        __global TYPE *out = weights_t + (k / VW) * units_p * VW + p * VW * VW + k % VW;
        for (int j = 0; j < VW; j++)
            out[j * VW] = row[j];
    }
}

// The rows DELTA_AHEAD on are asked for ahead (PREFETCH): a work-item's few panels are a short run
// of each row, a row apart (1 KiB for 256 units), a new page every few rows, and the CPU's
// prefetchers left its loads waiting (the tiny GPT's CalcDeltaBias, a sixth of its step on pip's
// PoCL 3.0, took a quarter less time; benchmarks/RESULTS.md, the batch gather on CPUs).
#define DELTA_AHEAD 8
// Where the layer passes its input gradient on (`input_gradient`), with HG_T W^T of this step's
// weights, else delta in row panels too; the first layer's backward writes neither.
__kernel void CalcDeltaBias(__global const TYPE *output_gr,   // dL/dy (rows, units)
                            __global const TYPE *outputs,     // y (rows, units)
                            __global const TYPE *kept,        // z (rows, units), or y (see STORE_PRE)
                            __global TYPE *delta,             // dL/dz in column panels
                            __global TYPE *delta_rows,        // dL/dz in row panels without HG_T (StoreDeltaRow)
                            __global TYPE *delta_bias,        // dL/db (units_p)
                            __global const TYPE *weights,     // W, column panels (units_p / VW, n_in, VW)
                            __global TYPE *weights_t,         // W^T with HG_T, column panels (n_in_p / VW, units_p, VW)
                            const int rows, const int units, const int units_p, const int capacity,
                            const TYPE a, const TYPE b, const int apply_derivative, const int panels,
                            const int n_in, const int input_gradient)
{
    const int first = get_global_id(0) * panels, end = min_int(first + panels, units_p / VW);
#if HG_T
    for (int p = first; p < (input_gradient ? end : first); p++)
        TransposePanel(weights, weights_t, p, n_in, units_p);
#endif
    for (int p = first; p < end; p++)  // summed in place, where its few panels stay in L1
        StoreBlock((VEC)(0), delta_bias + p * VW, VW);
    for (int m = 0; m < rows; m++) {
        for (int p = first; p < end; p++) {
            const int col = p * VW, width = min_int(VW, units - col), o = m * units + col;
            const int ahead = min_int(m + DELTA_AHEAD, rows - 1) * units + col;
            PREFETCH(output_gr + ahead);
            if (apply_derivative) {
                PREFETCH(outputs + ahead);
                PREFETCH(kept + ahead);
            }
            VEC g = LoadBlock(output_gr + o, width);
            if (apply_derivative)
                g *= ACT_DERIVATIVE_V(LoadBlock(outputs + o, width), LoadBlock(kept + o, width), a, b);
            ((__global VEC *)(delta + col * capacity))[m] = g;
#if !HG_T
            if (input_gradient)
                StoreDeltaRow(g, delta_rows, m, col, units_p);
#endif
            StoreBlock(LoadBlock(delta_bias + p * VW, VW) + g, delta_bias + p * VW, VW);
        }
    }
}

// The transposed input x^T (n_in, ld) of x (rows, cols), which the CPU form's weight gradient
// reads along rows, when the layer below did not provide it (Dense layers and the batch gather
// write theirs as they go; the GPU form's weight gradient reads x itself). A work-item per
// element, the first axis along the rows: PoCL runs a work-group's items along it as the lanes of
// one loop, so x^T is written in whole vectors and x gathered, instead of x read in vectors and
// x^T scattered one element at a time (tiny GPT, (2048, 64) on pip PoCL 3.0: well under half the
// time).
__kernel void Transpose(__global const TYPE *x, __global TYPE *xt, const int cols, const int rows, const int ld)
{
    const int row = get_global_id(0), col = get_global_id(1);
    xt[col * ld + row] = x[row * cols + col];
}

// The CPU form: register blocks of wide vectors (register_blocks.cl), no local memory.
#if FF_KB % VW || DW_KB % VW || HG_KB % VW
#error "a K-block must be a multiple of VW deep"
#endif
DEFINE_ROW_BLOCK_PRODUCT(forward_product, FF_RM, FF_CN, 4, FF_NB, FF_KB)
DEFINE_ROW_BLOCK_PRODUCT(weight_product, DW_RM, DW_CN, 4, DW_NB, DW_KB)
#if HG_T
DEFINE_ROW_BLOCK_PRODUCT(input_product, HG_RM, HG_CN, 4, HG_NB, HG_KB)
#else
DEFINE_ROW_BLOCK_PRODUCT(input_product, HG_RM, HG_CN, VW, HG_NB, HG_KB)
#endif

// B[j] = the column panel first + j of `count` panels, `panel` elements apart, from `base`; the
// panels past the last read the last one again (their sums are not stored), so that no size needs
// to be a multiple of CN panels.
#define PANELS(B, CN, base, first, count, panel)                                            \
    const __global TYPE *B[CN];                                                             \
    _Pragma("unroll")                                                                       \
    for (int j = 0; j < CN; j++)                                                            \
        B[j] = (base) + (long)min_int((first) + j, (count) - 1) * (panel);

// z = x W + b, y = f(z), plus a residual r where `adding` (a linear layer's, see
// Layer.adds_to_output); y is also stored transposed, (units, ld), for the next layer's weight
// gradient, unless ld = 0: no layer reads it (see Dense._transposed_input). FF_NB blocks of FF_RM
// rows x FF_CN * VW columns per work-item. z is stored only with STORE_PRE (see STORE_PRE above).
__kernel void PerceptronFeedForward(__global const TYPE *inputs,    // x (rows, n_in)
                                    __global const TYPE *weights,   // W, column panels
                                    __global const TYPE *bias,      // b (units_p)
                                    __global const TYPE *residual,  // r (rows, units), if adding
                                    __global TYPE *kept,            // z (rows, units) with STORE_PRE
                                    __global TYPE *outputs,         // y = f(z) (+ r) (rows, units)
                                    __global TYPE *outputs_t,       // y^T (units, ld)
                                    const int rows, const int n_in, const int units, const int units_p,
                                    const int ld, const int adding, const TYPE a, const TYPE b)
{
    const int first = get_global_id(0) * FF_CN, col0 = first * VW;
    const int row = get_global_id(1) * FF_RM * FF_NB;
    if (col0 >= units || row >= rows)
        return;
    PANELS(B, FF_CN, weights, first, units_p / VW, (long)n_in * VW)
    VEC acc[FF_NB][FF_RM][FF_CN];
    for (int q = 0; q < FF_NB; q++)
        #pragma unroll
        for (int r = 0; r < FF_RM; r++)
            #pragma unroll
            for (int j = 0; j < FF_CN; j++)
                acc[q][r][j] = (VEC)(0);
    forward_product_blocks(inputs, n_in, VW, rows, row, B, n_in, acc);
    const int height = min_int(FF_RM * FF_NB, rows - row);
    #pragma unroll
    for (int j = 0; j < FF_CN; j++) {
        const int col = col0 + j * VW, width = min_int(VW, units - col);
        if (width <= 0)
            break;
        const VEC bv = LoadBlock(bias + col, VW);
        VEC y[FF_RM * FF_NB];  // this block of y, kept to be written down y^T's rows below
        for (int q = 0; q < FF_NB; q++) {
            #pragma unroll
            for (int r = 0; r < FF_RM; r++) {
                const int m = q * FF_RM + r;
                if (m >= height)
                    break;
                const int o = (row + m) * units + col;
                const VEC z = acc[q][r][j] + bv;
                const VEC ym = ACT_FORWARD_V(z, a, b) + (adding ? LoadBlock(residual + o, width) : (VEC)(0));
                y[m] = ym;
#if STORE_PRE
                StoreBlock(z, kept + o, width);
#endif
                StoreBlock(ym, outputs + o, width);
            }
        }
        // y^T in runs of FF_RM * FF_NB consecutive elements per row. Stored element by element as y
        // was computed (a different row of y^T, a different cache line, every store), the epilogue
        // held the forward back measurably at 2048^3 on Intel's runtime (the weight gradient, the
        // same product without this epilogue, is a little faster still).
        for (int c = 0; c < (ld ? width : 0); c++)
            for (int m = 0; m < height; m++)
                outputs_t[(col + c) * ld + row + m] = ((const TYPE *)&y[m])[c];
    }
}

// dL/dW = x^T delta: (n_in, rows) x (rows, units_p), from x^T (n_in, capacity) and delta's
// column panels (`capacity` rows each). DW_NB blocks of DW_RM input rows x DW_CN * VW columns per
// work-item.
__kernel void CalcDeltaWeights(__global const TYPE *inputs_t,     // x^T (n_in, capacity)
                               __global const TYPE *delta,        // dL/dz, column panels
                               __global TYPE *delta_weights,      // dL/dW, column panels
                               const int rows, const int n_in, const int units_p, const int capacity)
{
    const int first = get_global_id(0) * DW_CN;
    const int i0 = get_global_id(1) * DW_RM * DW_NB;
    if (first * VW >= units_p || i0 >= n_in)
        return;
    PANELS(B, DW_CN, delta, first, units_p / VW, (long)capacity * VW)
    VEC acc[DW_NB][DW_RM][DW_CN];
    for (int q = 0; q < DW_NB; q++)
        #pragma unroll
        for (int r = 0; r < DW_RM; r++)
            #pragma unroll
            for (int j = 0; j < DW_CN; j++)
                acc[q][r][j] = (VEC)(0);
    weight_product_blocks(inputs_t, capacity, VW, n_in, i0, B, rows, acc);
    for (int q = 0; q < DW_NB; q++)
        #pragma unroll
        for (int r = 0; r < DW_RM; r++)
            #pragma unroll
            for (int j = 0; j < DW_CN; j++)
                if (i0 + q * DW_RM + r < n_in && (first + j) * VW < units_p)
                    StoreBlock(acc[q][r][j], delta_weights + (first + j) * VW * n_in + (i0 + q * DW_RM + r) * VW, VW);
}

#if HG_T
// dL/dx = delta W^T as the forward computes x W (see HG_T above): HG_NB blocks of HG_RM batch rows x
// HG_CN * VW inputs per work-item.
__kernel void CalcHiddenGradient(__global const TYPE *delta,      // dL/dz, column panels
                                 __global const TYPE *weights_t,  // W^T, column panels
                                 __global TYPE *input_gr,         // dL/dx (rows, n_in)
                                 const int rows, const int n_in, const int units_p, const int capacity)
{
    const int first = get_global_id(0) * HG_CN, col0 = first * VW;
    const int row = get_global_id(1) * HG_RM * HG_NB;
    if (col0 >= n_in || row >= rows)
        return;
    PANELS(B, HG_CN, weights_t, first, (n_in + VW - 1) / VW, (long)units_p * VW)
    VEC acc[HG_NB][HG_RM][HG_CN];
    for (int q = 0; q < HG_NB; q++)
        #pragma unroll
        for (int r = 0; r < HG_RM; r++)
            #pragma unroll
            for (int j = 0; j < HG_CN; j++)
                acc[q][r][j] = (VEC)(0);
    input_product_blocks(delta, VW, capacity * VW, rows, row, B, units_p, acc);
    for (int q = 0; q < HG_NB; q++)
        #pragma unroll
        for (int r = 0; r < HG_RM; r++) {
            const int m = row + q * HG_RM + r;
            if (m >= rows)
                break;
            #pragma unroll
            for (int j = 0; j < HG_CN; j++) {
                const int col = col0 + j * VW;
                if (col < n_in)
                    StoreBlock(acc[q][r][j], input_gr + m * n_in + col, min_int(VW, n_in - col));
            }
        }
}
#else
// dL/dx = delta W^T, computed as its transpose W delta^T: rows of W (read across its column
// panels) times row panels of delta, HG_CN * VW batch rows wide. HG_NB blocks of HG_RM inputs x
// HG_CN * VW batch rows per work-item, written into dL/dx (rows, n_in) at the end in runs of HG_RM *
// HG_NB inputs per batch row rather than element by element down its columns (slightly faster at
// 2048^3, Intel's runtime).
__kernel void CalcHiddenGradient(__global const TYPE *delta_rows, // dL/dz, row panels
                                 __global const TYPE *weights,    // W, column panels
                                 __global TYPE *input_gr,         // dL/dx (rows, n_in)
                                 const int rows, const int n_in, const int units_p)
{
    const int first = get_global_id(0) * HG_CN;
    const int i0 = get_global_id(1) * HG_RM * HG_NB;
    if (first * VW >= rows || i0 >= n_in)
        return;
    PANELS(B, HG_CN, delta_rows, first, (rows + VW - 1) / VW, (long)units_p * VW)
    VEC acc[HG_NB][HG_RM][HG_CN];
    for (int q = 0; q < HG_NB; q++)
        #pragma unroll
        for (int i = 0; i < HG_RM; i++)
            #pragma unroll
            for (int j = 0; j < HG_CN; j++)
                acc[q][i][j] = (VEC)(0);
    input_product_blocks(weights, VW, n_in * VW, n_in, i0, B, units_p, acc);
    const int count = min_int(HG_RM * HG_NB, n_in - i0);
    #pragma unroll
    for (int j = 0; j < HG_CN; j++) {
        const int row = (first + j) * VW, height = min_int(VW, rows - row);
        if (height <= 0)
            break;
        VEC g[HG_RM * HG_NB];  // this block of dL/dx^T, written down dL/dx's rows below
        for (int q = 0; q < HG_NB; q++)
            #pragma unroll
            for (int i = 0; i < HG_RM; i++)
                g[q * HG_RM + i] = acc[q][i][j];
        // A whole block with constant trip counts, which the compiler unrolls (slightly faster at
        // 2048^3 on Intel's runtime with fixed tiles, close to the kernel without any store at all).
        if (height == VW && count == HG_RM * HG_NB) {
            #pragma unroll
            for (int r = 0; r < VW; r++)
                #pragma unroll
                for (int i = 0; i < HG_RM * HG_NB; i++)
                    input_gr[(row + r) * n_in + i0 + i] = ((const TYPE *)&g[i])[r];
            continue;
        }
        for (int r = 0; r < height; r++)
            for (int i = 0; i < count; i++)
                input_gr[(row + r) * n_in + i0 + i] = ((const TYPE *)&g[i])[r];
    }
}
#endif
