// The convolution's CPU form (see convolution.cl, pasted before this file).

// VW columns col.. of a row of n, zeros past n. A row starts at a multiple of VW elements when n
// is one, so then it is one aligned vector load (PoCL 3.0 calls vloadn as a library function).
__attribute__((always_inline))
VEC load_columns(const __global TYPE *row, const int col, const int n)
{
    if (n % VW == 0)
        return *(const __global VEC *)(row + col);
    union { VEC v; TYPE s[VW]; } u;
    for (int j = 0; j < VW; j++)
        u.s[j] = col + j < n ? row[col + j] : 0;
    return u.v;
}

// Stores v's lanes as columns col.. of a row of n, those before n.
__attribute__((always_inline))
void store_columns(__global TYPE *row, const VEC v, const int col, const int n)
{
    if (n % VW == 0) {
        *(__global VEC *)(row + col) = v;
        return;
    }
    union { VEC v; TYPE s[VW]; } u;
    u.v = v;
    for (int j = 0; j < VW && col + j < n; j++)
        row[col + j] = u.s[j];
}

// dL/dz = dL/dy * f'(z) for columns col.. of one output position, f' on the VW lanes at once from
// y and z (z is y where the derivative follows from y, see STORE_PRE in products/cpu_blocks.cl), unless the
// activation was folded into the loss; zeros past `filters`.
__attribute__((always_inline))
VEC delta_columns(const __global TYPE *dy, const __global TYPE *y, const __global TYPE *z, const int col,
                  const int filters, const TYPE a, const TYPE b, const int apply_derivative)
{
    const VEC g = load_columns(dy, col, filters);
    if (!apply_derivative)
        return g;
    const VEC yv = load_columns(y, col, filters);
#if STORE_PRE
    return g * ACT_DERIVATIVE_V(yv, load_columns(z, col, filters), a, b);
#else
    return g * ACT_DERIVATIVE_V(yv, yv, a, b);
#endif
}

// The forward's and the input gradient's products per kernel tap: `channels` (or `filters`)
// contiguous elements of each of FF_RM rows of the patch matrix times as many rows of FF_CN (HG_CN)
// column panels of W (Wt), in register_blocks.cl's form (each element of a row, broadcast once,
// feeds CN products: the tuner's choice per convolution, convolution_columns). Their block is the
// forward's FF_RM rows, see CalcHiddenGradientConv.
DEFINE_ROW_BLOCK_PRODUCT(patch_product, FF_RM, FF_CN, 4, 1, 0)
DEFINE_ROW_BLOCK_PRODUCT(gradient_product, FF_RM, HG_CN, 4, 1, 0)

// z = patches W + b and y = f(z), z stored only with STORE_PRE (for a derivative that does not
// follow from y: the first layer of the CNN, 86528 x 32 outputs per batch, spent most of its
// forward storing f'(z) beside y); FF_RM output positions (consecutive m = (row * out_h + oy) *
// out_w + ox) x FF_CN * VW filters per work-item. Per kernel tap each position reads its `channels`
// inputs in place, or `zeros` where the tap falls in the padding. vec_type_hint, here and on the
// input gradient: Intel's CPU compiler otherwise vectorizes across work-items code already in
// VW-wide vectors (see recurrent.cl); with it the CNN's forward convolutions took far less time
// on Intel's runtime (PoCL, which ignores it, was faster still; benchmarks/RESULTS.md,
// vec_type_hint on Intel's runtime).
__kernel __attribute__((vec_type_hint(VEC)))
void FeedForwardConv(__global const TYPE *inputs,   // x (rows, height, width, channels)
                     __global const TYPE *weights,  // W (K, filters), column panels
                     __global const TYPE *bias,     // b (filters_p)
                     __global const TYPE *zeros,    // (max(channels, filters)) zeros
                     __global TYPE *outputs,        // y = f(z) (rows * out_h * out_w, filters)
                     __global TYPE *pre,            // z, the same shape (STORE_PRE)
                     const int M, const int filters, const TYPE a, const TYPE b, GEOMETRY)
{
    const int col = get_global_id(0) * VW * FF_CN, m0 = get_global_id(1) * FF_RM;
    if (col >= filters || m0 >= M)
        return;
    const int K = kh * kw * channels;
    int y0[FF_RM], x0[FF_RM];
    const __global TYPE *image[FF_RM], *src[FF_RM];
    VEC acc[FF_RM][FF_CN];
    #pragma unroll
    for (int r = 0; r < FF_RM; r++) {
        const int m = min_int(m0 + r, M - 1), line = m / out_w;
        y0[r] = line % out_h * sh - pad_top;
        x0[r] = m % out_w * sw - pad_left;
        image[r] = inputs + (long)(line / out_h) * height * width * channels;
        #pragma unroll
        for (int j = 0; j < FF_CN; j++)
            acc[r][j] = (VEC)(0);
    }
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) {
            #pragma unroll
            for (int r = 0; r < FF_RM; r++) {
                const int y = y0[r] + i * dh, x = x0[r] + j * dw;
                src[r] = y >= 0 && y < height && x >= 0 && x < width ? image[r] + ((long)y * width + x) * channels
                                                                     : zeros;
            }
            const __global TYPE *B[FF_CN];  // the tap's rows of W in each panel
            #pragma unroll
            for (int p = 0; p < FF_CN; p++)
                B[p] = weights + (long)(col + p * VW) * K + (long)(i * kw + j) * channels * VW;
            patch_product(src, VW, B, 0, channels, acc);
        }
    #pragma unroll
    for (int j = 0; j < FF_CN; j++) {
        const VEC bv = *(const __global VEC *)(bias + col + j * VW);
        #pragma unroll
        for (int r = 0; r < FF_RM; r++) {
            if (m0 + r >= M)
                break;
            // Whole aligned vectors where they can be (a scalar loop here took most of a first layer's time).
            const VEC z = acc[r][j] + bv;
            store_columns(outputs + (long)(m0 + r) * filters, ACT_FORWARD_V(z, a, b), col + j * VW, filters);
#if STORE_PRE
            store_columns(pre + (long)(m0 + r) * filters, z, col + j * VW, filters);
#endif
        }
    }
}

// The weight gradient's vectors of filters per work-item (the tuner's DW_CN): each element of the
// patch matrix, broadcast once, feeds DW_CN products.

// One block of DW_RM rows k0.. of dL/dW over DW_CN * VW filters col.. and the output lines [first, last)
// of a chunk, into its rows of `out`. The first block (`forms_delta`) forms delta from dL/dy (f'
// from y and z), stores it with `write_delta` and sums dL/db; the later ones read delta back (or
// dL/dy, where a loss applied the derivative): `source`. Inlined with a constant
// `forms_delta`, so that the blocks' loop carries no derivative (PoCL 3.0's vector select, inside
// the loop of every block, cost it half its speed: spilled accumulators).
__attribute__((always_inline))
void delta_weights_block(const int forms_delta, const int k0, const __global TYPE *inputs,
                         const __global TYPE *output_gr, const __global TYPE *outputs, const __global TYPE *pre,
                         __global TYPE *delta, const __global TYPE *source, __global TYPE *out,
                         VEC bias_acc[DW_CN],
                         const int first, const int last, const int col, const int filters, const int filters_p,
                         const TYPE a, const TYPE b, const int apply_derivative, const int write_delta, GEOMETRY)
{
    const int K = kh * kw * channels;
    // Where row k of the patch matrix reads, relative to the window's corner, per row of the block.
    int dy_[DW_RM], dx_[DW_RM];
    long offset[DW_RM];
    VEC acc[DW_RM][DW_CN];
    #pragma unroll
    for (int r = 0; r < DW_RM; r++) {
        const int k = min_int(k0 + r, K - 1), tap = k / channels, c = k % channels;
        dy_[r] = tap / kw * dh;
        dx_[r] = tap % kw * dw;
        offset[r] = ((long)dy_[r] * width + dx_[r]) * channels + c;
        #pragma unroll
        for (int j = 0; j < DW_CN; j++)
            acc[r][j] = (VEC)(0);
    }
    // Checking each tap against the image's edges cost more than the products (measured for
    // 128 x 13 x 13 x 32 -> 64, 3x3, on pip's PoCL 3.0): it is done only for windows that reach
    // into the padding, those of lines whose rows do and of columns ox outside [lo, hi). Walking
    // whole lines, the next position's data is a pointer step away, without the divisions and
    // carries that finding (row, oy, ox) for each position took.
    const int span_y = (kh - 1) * dh, span_x = (kw - 1) * dw;
    const int lo = min_int((pad_left + sw - 1) / sw, out_w), right = width - 1 - span_x + pad_left;
    const int hi = right < 0 ? lo : min_int(max_int(right / sw + 1, lo), out_w);
    for (int line = first; line < last; line++) {
        const int y = line % out_h * sh - pad_top, row = line / out_h;
        const int rows_inside = y >= 0 && y + span_y < height;
        const int inside_lo = rows_inside ? lo : out_w, inside_hi = rows_inside ? hi : out_w;
        const long o = (long)line * out_w * filters;
        const __global TYPE *corner = inputs + (((long)row * height + y) * width - pad_left) * channels;
        const int step = sw * channels;
        for (int ox = 0; ox < out_w; ox++, corner += step) {
            const long at = o + (long)ox * filters;
            VEC d[DW_CN];
            #pragma unroll
            for (int j = 0; j < DW_CN; j++) {
                if (forms_delta) {
                    d[j] = delta_columns(output_gr + at, outputs + at, pre + at, col + j * VW, filters, a, b,
                                         apply_derivative);
                    bias_acc[j] += d[j];
                    if (write_delta)
                        store_columns(delta + at, d[j], col + j * VW, filters);
                } else {
                    d[j] = load_columns(source + at, col + j * VW, filters);
                }
            }
            if (ox >= inside_lo && ox < inside_hi) {  // no tap in the padding
                #pragma unroll
                for (int r = 0; r < DW_RM; r++) {
                    const VEC v = (VEC)(corner[offset[r]]);
                    #pragma unroll
                    for (int j = 0; j < DW_CN; j++)
                        acc[r][j] += v * d[j];
                }
            } else {
                const int x = ox * sw - pad_left;
                #pragma unroll
                for (int r = 0; r < DW_RM; r++) {
                    const int yr = y + dy_[r], xr = x + dx_[r];
                    const VEC v = (VEC)(yr >= 0 && yr < height && xr >= 0 && xr < width ? corner[offset[r]] : 0);
                    #pragma unroll
                    for (int j = 0; j < DW_CN; j++)
                        acc[r][j] += v * d[j];
                }
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < DW_RM; r++)
        if (k0 + r < K) {
            #pragma unroll
            for (int j = 0; j < DW_CN; j++)
                *(__global VEC *)(out + (long)(k0 + r) * filters_p + j * VW) = acc[r][j];
        }
}

// Block sums of dL/dW = patches^T delta and dL/db = sum of delta's rows: the work-item (g, ch)
// sums, block by block of DW_RM rows, all K rows of dL/dW and dL/db over VW filters col = g * VW
// and the output lines (row * out_h + oy) [ch * chunk, (ch + 1) * chunk), into partials (chunks,
// K + 1, filters_p), row K being dL/db. Splitting the positions keeps both cores busy when K *
// filters is small (the first layer of a CNN: 9 x 32 weights, 86528 positions per batch of 128).
// delta = dL/dz is formed once, by the first block, and stored with `write_delta` (which must be
// set where the derivative is applied and K > DW_RM; the input gradient reads delta too): the
// later blocks load it, one load per position where forming it took dL/dy, y and f' (when every
// block formed it, the CNN's second layer ran measurably slower on pip's PoCL 3.0).
__kernel void CalcDeltaWeightsConv(__global const TYPE *inputs,     // x (rows, height, width, channels)
                                   __global const TYPE *output_gr,  // dL/dy (rows * out_h * out_w, filters)
                                   __global const TYPE *outputs,    // y, the same shape
                                   __global const TYPE *pre,        // z (y where not STORE_PRE), the same shape
                                   __global TYPE *partials,         // (chunks, K + 1, filters_p)
                                   __global TYPE *delta,            // dL/dz (rows * out_h * out_w, filters)
                                   const int lines, const int filters, const int filters_p, const int chunk,
                                   const TYPE a, const TYPE b, const int apply_derivative, const int write_delta,
                                   GEOMETRY)
{
    const int col = get_global_id(0) * VW * DW_CN, ch = get_global_id(1);
    const int K = kh * kw * channels;
    const int first = ch * chunk, last = min_int(first + chunk, lines);
    __global TYPE *out = partials + (long)ch * (K + 1) * filters_p + col;
    const __global TYPE *source = apply_derivative ? delta : output_gr;
    VEC bias_acc[DW_CN];
    #pragma unroll
    for (int j = 0; j < DW_CN; j++)
        bias_acc[j] = (VEC)(0);
    delta_weights_block(1, 0, inputs, output_gr, outputs, pre, delta, source, out, bias_acc, first, last, col,
                        filters, filters_p, a, b, apply_derivative, write_delta, GEOMETRY_ARGS);
    for (int k0 = DW_RM; k0 < K; k0 += DW_RM)
        delta_weights_block(0, k0, inputs, output_gr, outputs, pre, delta, source, out, bias_acc, first, last, col,
                            filters, filters_p, a, b, apply_derivative, write_delta, GEOMETRY_ARGS);
    #pragma unroll
    for (int j = 0; j < DW_CN; j++)
        *(__global VEC *)(out + (long)K * filters_p + j * VW) = bias_acc[j];
}

// dL/dW (column panels) and dL/db: the sums of CalcDeltaWeightsConv's `chunks` partials, one
// element per work-item (dimension 0: filter f < filters_p, 1: row k <= K). The same launch lays
// W out for CalcHiddenGradientConv as Wt, column panels of VW input channels: panel c / VW holds
// row tap * filters_p + f = W[tap * channels + c][f] for c in the panel (its padding stays 0). W
// has not changed since the forward pass (the optimizer runs after the backward pass).
__kernel void SumDeltaWeightsConv(__global const TYPE *partials,  // (chunks, K + 1, filters_p)
                                  __global const TYPE *weights,   // W, column panels
                                  __global TYPE *delta_weights,   // dL/dW, column panels
                                  __global TYPE *delta_bias,      // dL/db (filters_p)
                                  __global TYPE *weights_t,       // Wt (channels_p / VW, kh * kw * filters_p, VW)
                                  const int chunks, const int filters_p, GEOMETRY)
{
    const int f = get_global_id(0), k = get_global_id(1);
    const int K = kh * kw * channels;
    TYPE sum = 0;
    for (int ch = 0; ch < chunks; ch++)
        sum += partials[((long)ch * (K + 1) + k) * filters_p + f];
    if (k == K) {
        delta_bias[f] = sum;
        return;
    }
    const long at = (long)(f / VW) * K * VW + (long)k * VW + f % VW;
    delta_weights[at] = sum;
    const int tap = k / channels, c = k - tap * channels;
    weights_t[((long)(c / VW) * kh * kw * filters_p + (long)tap * filters_p + f) * VW + c % VW] = weights[at];
}

// dL/dx = sum over the windows covering each input pixel of delta W^T: FF_RM consecutive pixels
// p = (row * height + y) * width + x times HG_CN * VW channels per work-item. For each kernel tap a
// pixel is read by at most one output position (the one whose window puts that tap on it), so the
// input gradient is a product of the same form as the forward's: per tap, each pixel's row of
// delta (`zeros` if no window puts the tap on it) times the tap's filters_p rows of Wt, in
// gradient_product (patch_product's form, HG_CN vectors wide). delta = dL/dz was stored by the
// weight gradient (or is dL/dy where a loss already applied the derivative), so each of its
// elements is one load, broadcast from memory, not the two loads and a product per tap that
// forming it here took (with its elements taken out of a vector register, which ran the CNN's
// second layer slower). Its block is the forward's
// (FF_RM rows), not the Dense input gradient's HG_RM: on pip's PoCL 3.0 (VW 16, AVX2) the tuner's
// 6 rows left 12 accumulators and patch_product's 4 rows of Wt more than the 16 vector registers,
// and ran the CNN's second layer far slower than the forward's 4 (benchmarks/RESULTS.md, the CNN
// step's input gradient as the forward's product).
__kernel __attribute__((vec_type_hint(VEC)))
void CalcHiddenGradientConv(__global const TYPE *delta,      // dL/dz (rows * out_h * out_w, filters)
                            __global const TYPE *weights_t,  // Wt (channels_p / VW, kh * kw * filters_p, VW)
                            __global const TYPE *zeros,      // (max(channels, filters)) zeros
                            __global TYPE *input_gr,         // dL/dx (rows, height, width, channels)
                            const int P, const int filters, const int filters_p, GEOMETRY)
{
    const int c0 = get_global_id(0) * VW * HG_CN, p0 = get_global_id(1) * FF_RM;
    if (c0 >= channels || p0 >= P)
        return;
    int px[FF_RM], py[FF_RM], line0[FF_RM];
    VEC acc[FF_RM][HG_CN];
    #pragma unroll
    for (int r = 0; r < FF_RM; r++) {
        const int p = min_int(p0 + r, P - 1), line = p / width;
        px[r] = p - line * width + pad_left;
        py[r] = line % height + pad_top;
        line0[r] = line / height * out_h;   // the sample's first row of outputs
        #pragma unroll
        for (int j = 0; j < HG_CN; j++)
            acc[r][j] = (VEC)(0);
    }
    const long panel_size = (long)kh * kw * filters_p;  // VECs of Wt per panel of channels
    const __global VEC *panel = (const __global VEC *)weights_t + (long)(c0 / VW) * panel_size;
    const __global TYPE *src[FF_RM];
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) {
            #pragma unroll
            for (int r = 0; r < FF_RM; r++) {
                const int ty = py[r] - i * dh, tx = px[r] - j * dw;  // oy * sh and ox * sw, if covered
                // Stride 1 skips the divisions (four per pixel and tap took as long as the products).
                const int oy = sh == 1 ? ty : ty / sh, ox = sw == 1 ? tx : tx / sw;
                const int covered = ty >= 0 && tx >= 0 && oy < out_h && ox < out_w &&
                                    (sh == 1 || ty % sh == 0) && (sw == 1 || tx % sw == 0);
                src[r] = covered ? delta + (((long)line0[r] + oy) * out_w + ox) * filters : zeros;
            }
            const __global TYPE *B[HG_CN];  // the tap's rows of Wt in each panel
            #pragma unroll
            for (int p = 0; p < HG_CN; p++)
                B[p] = (const __global TYPE *)(panel + p * panel_size + (i * kw + j) * filters_p);
            gradient_product(src, VW, B, 0, filters, acc);
        }
    #pragma unroll
    for (int j = 0; j < HG_CN; j++)
        #pragma unroll
        for (int r = 0; r < FF_RM; r++) {
            if (p0 + r >= P)
                break;
            store_columns(input_gr + (long)(p0 + r) * channels, acc[r][j], c0 + j * VW, channels);
        }
}
