// Convolution, channels_last, in two forms, chosen with the Dense products' tiles
// (clnet/layers/dense.py; the weights keep that layout: W (K, filters), K = kh * kw * channels,
// row k = (i * kw + j) * channels + c, in dense.cl's column panels).
// - The CPU form (no TILE): implicit matrix products that read the image where the patch matrix
//   would have been, so no patch matrix is ever written: FeedForwardConv (bias and activation
//   fused), CalcDeltaWeightsConv (block sums of dL/dW and dL/db over chunks of output positions,
//   the activation's derivative applied on the fly) and SumDeltaWeightsConv (the sums of those,
//   and W laid out per input channel for the input gradient), CalcHiddenGradientConv (each input
//   pixel gathers from the windows that cover it). Three launches per training step, four with
//   the input gradient.
// - The GPU form (TILE): the patches of output position m = (row, oy, ox) as row m of a (rows *
//   out_h * out_w, K) matrix (im2col) whose column k holds x[row, oy*sh - pad_top + i*dh, ox*sw -
//   pad_left + j*dw, c] (0 outside the image), times W by the tiled Dense products of dense.cl;
//   these kernels only move data into and out of patches.
// 1-D convolutions run with height 1.
// Geometry, passed to every kernel as the same int arguments:
#define GEOMETRY const int height, const int width, const int channels, const int out_h, const int out_w, \
                 const int kh, const int kw, const int sh, const int sw, const int dh, const int dw,     \
                 const int pad_top, const int pad_left

#ifdef TILE
// The patches of a mini-batch, row-major and transposed ((K, ld), for the weight gradient
// x^T delta). One work-item per output position (dimension 0: ox, 1: row * out_h + oy) and
// kernel tap (dimension 2), copying the tap's `channels` contiguous inputs. The divisions
// depend on dimensions 1 and 2 only, so a CPU compiler vectorizing across dimension 0 does them
// once per group.
__kernel void FeedForwardConvPatches(__global const TYPE *inputs,  // x (rows, height, width, channels)
                                     __global TYPE *patches,       // (rows * out_h * out_w, K)
                                     __global TYPE *patches_t,     // (K, ld)
                                     const int ld, GEOMETRY)
{
    const int ox = get_global_id(0), line = get_global_id(1), tap = get_global_id(2);
    const int oy = line % out_h, row = line / out_h, m = line * out_w + ox;
    const int y = oy * sh - pad_top + tap / kw * dh, x = ox * sw - pad_left + tap % kw * dw;
    const int inside = y >= 0 && y < height && x >= 0 && x < width;
    const __global TYPE *source = inputs + ((long)(row * height + y) * width + x) * channels;
    const int K = kh * kw * channels, k0 = tap * channels;
    __global TYPE *patch = patches + (long)m * K + k0;
    for (int c = 0; c < channels; c++) {
        const TYPE v = inside ? source[c] : 0;
        patch[c] = v;
        patches_t[(long)(k0 + c) * ld + m] = v;
    }
}

// dL/dx from dL/d(patches): each input element sums the patch entries it was copied into. One
// work-item per input pixel (dimension 0: x, 1: row * height + y), all its channels; no two
// work-items write the same element, so no atomics.
__kernel void CalcHiddenGradientPatches(__global const TYPE *patch_gr,  // dL/d(patches) (rows * out_h * out_w, K)
                                     __global TYPE *input_gr,        // dL/dx (rows, height, width, channels)
                                     GEOMETRY)
{
    const int x = get_global_id(0), line = get_global_id(1);
    const int y = line % height, row = line / height, p = line * width + x;
    const int K = kh * kw * channels;
    __global TYPE *out = input_gr + (long)p * channels;
    for (int c = 0; c < channels; c++)
        out[c] = 0;
    for (int i = 0; i < kh; i++) {
        const int ty = y + pad_top - i * dh;  // oy * sh, if this tap of some window covers y
        if (ty < 0 || ty % sh || ty / sh >= out_h)
            continue;
        for (int j = 0; j < kw; j++) {
            const int tx = x + pad_left - j * dw;
            if (tx < 0 || tx % sw || tx / sw >= out_w)
                continue;
            const int m = (row * out_h + ty / sh) * out_w + tx / sw;
            const __global TYPE *g = patch_gr + (long)m * K + (i * kw + j) * channels;
            for (int c = 0; c < channels; c++)
                out[c] += g[c];
        }
    }
}
#else
// Row k of W's column panel holding columns col..col+VW (VW contiguous elements).
#define W_ROW(W, K, k, col) (((const __global VEC *)((W) + (long)(col) * (K)))[k])

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

// dL/dz = dL/dy * f'(z) for columns col.. of one output position (f'(z) from the forward pass,
// unless the activation was folded into the loss); zeros past `filters`.
__attribute__((always_inline))
VEC delta_columns(const __global TYPE *dy, const __global TYPE *slope, const int col, const int filters,
                  const int apply_derivative)
{
    const VEC g = load_columns(dy, col, filters);
    return apply_derivative ? g * load_columns(slope, col, filters) : g;
}

// acc[r] += sum_c a[r][c] B[c] for r < RM: `n` contiguous elements of each of RM rows of the
// patch matrix (one kernel tap's channels) times n consecutive rows of a panel of W. As dense.cl's
// row-block product (forced inlining, unrolled rows, a's elements broadcast from memory), so the
// block lives in registers on PoCL 3.0 too.
#define DEFINE_PATCH_PRODUCT(name, RM)                                                      \
__attribute__((always_inline))                                                              \
void name(const __global TYPE *a[RM], const __global VEC *B, const int n, VEC acc[RM])      \
{                                                                                           \
    int c = 0;                                                                              \
    for (; c + 4 <= n; c += 4) {                                                            \
        const VEC b0 = B[c], b1 = B[c + 1], b2 = B[c + 2], b3 = B[c + 3];                   \
        _Pragma("unroll")                                                                   \
        for (int r = 0; r < RM; r++) {                                                      \
            const __global TYPE *ar = a[r] + c;                                             \
            acc[r] += (VEC)(ar[0]) * b0;                                                    \
            acc[r] += (VEC)(ar[1]) * b1;                                                    \
            acc[r] += (VEC)(ar[2]) * b2;                                                    \
            acc[r] += (VEC)(ar[3]) * b3;                                                    \
        }                                                                                   \
    }                                                                                       \
    for (; c < n; c++) {                                                                    \
        const VEC bc = B[c];                                                                \
        _Pragma("unroll")                                                                   \
        for (int r = 0; r < RM; r++)                                                        \
            acc[r] += (VEC)(a[r][c]) * bc;                                                  \
    }                                                                                       \
}
DEFINE_PATCH_PRODUCT(patch_product, FF_RM)

// z = patches W + b, y = f(z) and f'(z), which the backward kernels multiply dL/dy by (so the
// derivative is computed once per element, not once per product that reads it); FF_RM output positions (consecutive m = (row * out_h + oy) *
// out_w + ox) x VW filters per work-item. Per kernel tap each position reads its `channels`
// inputs in place, or `zeros` where the tap falls in the padding.
__kernel void FeedForwardConv(__global const TYPE *inputs,   // x (rows, height, width, channels)
                              __global const TYPE *weights,  // W (K, filters), column panels
                              __global const TYPE *bias,     // b (filters_p)
                              __global const TYPE *zeros,    // (channels) zeros
                              __global TYPE *outputs,        // y = f(z) (rows * out_h * out_w, filters)
                              __global TYPE *slopes,         // f'(z), the same shape
                              const int M, const int filters, const TYPE a, const TYPE b, GEOMETRY)
{
    const int col = get_global_id(0) * VW, m0 = get_global_id(1) * FF_RM;
    if (col >= filters || m0 >= M)
        return;
    const int K = kh * kw * channels;
    int y0[FF_RM], x0[FF_RM];
    const __global TYPE *image[FF_RM], *src[FF_RM];
    VEC acc[FF_RM];
    #pragma unroll
    for (int r = 0; r < FF_RM; r++) {
        const int m = min(m0 + r, M - 1), line = m / out_w;
        y0[r] = line % out_h * sh - pad_top;
        x0[r] = m % out_w * sw - pad_left;
        image[r] = inputs + (long)(line / out_h) * height * width * channels;
        acc[r] = (VEC)(0);
    }
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) {
            #pragma unroll
            for (int r = 0; r < FF_RM; r++) {
                const int y = y0[r] + i * dh, x = x0[r] + j * dw;
                src[r] = y >= 0 && y < height && x >= 0 && x < width ? image[r] + ((long)y * width + x) * channels
                                                                     : zeros;
            }
            patch_product(src, &W_ROW(weights, K, (i * kw + j) * channels, col), channels, acc);
        }
    const VEC bv = *(const __global VEC *)(bias + col);
    const int width_left = min(VW, filters - col);
    #pragma unroll
    for (int r = 0; r < FF_RM; r++) {
        if (m0 + r >= M)
            break;
        union { VEC v; TYPE s[VW]; } z, y, d;
        z.v = acc[r] + bv;
        #pragma unroll
        for (int j = 0; j < VW; j++) {
            y.s[j] = ACT_FORWARD(z.s[j], a, b);
            d.s[j] = ACT_DERIVATIVE(y.s[j], z.s[j], a, b);
        }
        const long o = (long)(m0 + r) * filters + col;
        if (filters % VW == 0) {  // whole aligned vectors (a scalar loop here took most of a first layer's time)
            *(__global VEC *)(outputs + o) = y.v;
            *(__global VEC *)(slopes + o) = d.v;
        } else {
            for (int j = 0; j < width_left; j++) {
                outputs[o + j] = y.s[j];
                slopes[o + j] = d.s[j];
            }
        }
    }
}

// Block sums of dL/dW = patches^T delta and dL/db = sum of delta's rows: the work-item (g, kb,
// ch) sums DW_RM rows k of dL/dW (and, for kb = 0, dL/db) over VW filters col = g * VW and
// the output lines (row * out_h + oy) [ch * chunk, (ch + 1) * chunk), into partials (chunks, K +
// 1, filters_p), row K being dL/db. Splitting the positions keeps both cores busy when K * filters
// is small (the first layer of a CNN: 9 x 32 weights, 86528 positions per batch of 128). delta is
// computed from dL/dy as it is read.
__kernel void CalcDeltaWeightsConv(__global const TYPE *inputs,     // x (rows, height, width, channels)
                                   __global const TYPE *output_gr,  // dL/dy (rows * out_h * out_w, filters)
                                   __global const TYPE *slopes,     // f'(z), the same shape
                                   __global TYPE *partials,         // (chunks, K + 1, filters_p)
                                   const int lines, const int filters, const int filters_p, const int chunk,
                                   const int apply_derivative, GEOMETRY)
{
    const int col = get_global_id(0) * VW, k0 = get_global_id(1) * DW_RM, ch = get_global_id(2);
    const int K = kh * kw * channels;
    if (k0 >= K)
        return;
    // Where row k of the patch matrix reads, relative to the window's corner, per row of the block.
    int dy_[DW_RM], dx_[DW_RM];
    long offset[DW_RM];
    VEC acc[DW_RM];
    #pragma unroll
    for (int r = 0; r < DW_RM; r++) {
        const int k = min(k0 + r, K - 1), tap = k / channels, c = k % channels;
        dy_[r] = tap / kw * dh;
        dx_[r] = tap % kw * dw;
        offset[r] = ((long)dy_[r] * width + dx_[r]) * channels + c;
        acc[r] = (VEC)(0);
    }
    VEC bias_acc = (VEC)(0);
    // Checking each tap against the image's edges cost more than the products (11 of 29 ms for
    // 128 x 13 x 13 x 32 -> 64, 3x3, on pip's PoCL 3.0): it is done only for windows that reach
    // into the padding, those of lines whose rows do and of columns ox outside [lo, hi). Walking
    // whole lines, the next position's data is a pointer step away, without the divisions and
    // carries that finding (row, oy, ox) for each position took.
    const int span_y = (kh - 1) * dh, span_x = (kw - 1) * dw;
    const int lo = min((pad_left + sw - 1) / sw, out_w), right = width - 1 - span_x + pad_left;
    const int hi = right < 0 ? lo : clamp(right / sw + 1, lo, out_w);
    const int last = min((ch + 1) * chunk, lines);
    for (int line = ch * chunk; line < last; line++) {
        const int y = line % out_h * sh - pad_top, row = line / out_h;
        const int rows_inside = y >= 0 && y + span_y < height;
        const int inside_lo = rows_inside ? lo : out_w, inside_hi = rows_inside ? hi : out_w;
        const long first = (long)line * out_w * filters;
        const __global TYPE *dy = output_gr + first, *slope = slopes + first;
        const __global TYPE *corner = inputs + (((long)row * height + y) * width - pad_left) * channels;
        const int step = sw * channels;
        for (int ox = 0; ox < out_w; ox++, dy += filters, slope += filters, corner += step) {
            const VEC d = delta_columns(dy, slope, col, filters, apply_derivative);
            if (ox >= inside_lo && ox < inside_hi) {  // no tap in the padding
                #pragma unroll
                for (int r = 0; r < DW_RM; r++)
                    acc[r] += (VEC)(corner[offset[r]]) * d;
            } else {
                const int x = ox * sw - pad_left;
                #pragma unroll
                for (int r = 0; r < DW_RM; r++) {
                    const int yr = y + dy_[r], xr = x + dx_[r];
                    const TYPE v = yr >= 0 && yr < height && xr >= 0 && xr < width ? corner[offset[r]] : 0;
                    acc[r] += (VEC)(v) * d;
                }
            }
            if (k0 == 0)
                bias_acc += d;
        }
    }
    __global TYPE *out = partials + (long)ch * (K + 1) * filters_p + col;
    #pragma unroll
    for (int r = 0; r < DW_RM; r++)
        if (k0 + r < K)
            *(__global VEC *)(out + (long)(k0 + r) * filters_p) = acc[r];
    if (k0 == 0)
        *(__global VEC *)(out + (long)K * filters_p) = bias_acc;
}

// dL/dW (column panels) and dL/db: the sums of CalcDeltaWeightsConv's `chunks` partials, one
// element per work-item (dimension 0: filter f < filters_p, 1: row k <= K). The same launch lays
// W out per input channel, Wt (kh * kw, filters_p, channels_p), for CalcHiddenGradientConv; W has
// not changed since the forward pass (the optimizer runs after the backward pass).
__kernel void SumDeltaWeightsConv(__global const TYPE *partials,  // (chunks, K + 1, filters_p)
                                  __global const TYPE *weights,   // W, column panels
                                  __global TYPE *delta_weights,   // dL/dW, column panels
                                  __global TYPE *delta_bias,      // dL/db (filters_p)
                                  __global TYPE *weights_t,       // Wt (kh * kw, filters_p, channels_p)
                                  const int chunks, const int filters_p, const int channels_p, GEOMETRY)
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
    weights_t[((long)(k / channels) * filters_p + f) * channels_p + k % channels] = weights[at];
}

// dL/dx = sum over the windows covering each input pixel of delta W^T: HG_RM consecutive pixels
// p = (row * height + y) * width + x times VW channels per work-item. For each kernel tap, a pixel
// is read by at most one output position (the one whose window puts that tap on it); delta's
// row there (zeros if none) times the tap's rows of Wt, VW filters at a time, delta staged in
// private memory so its elements are broadcast from there as in the products above.
__kernel void CalcHiddenGradientConv(__global const TYPE *output_gr,  // dL/dy (rows * out_h * out_w, filters)
                                     __global const TYPE *slopes,     // f'(z), the same shape
                                     __global const TYPE *weights_t,  // Wt (kh * kw, filters_p, channels_p)
                                     __global TYPE *input_gr,         // dL/dx (rows, height, width, channels)
                                     const int P, const int filters, const int filters_p, const int channels_p,
                                     const int apply_derivative, GEOMETRY)
{
    const int c0 = get_global_id(0) * VW, p0 = get_global_id(1) * HG_RM;
    if (c0 >= channels || p0 >= P)
        return;
    int px[HG_RM], py[HG_RM], line0[HG_RM];
    VEC acc[HG_RM];
    #pragma unroll
    for (int r = 0; r < HG_RM; r++) {
        const int p = min(p0 + r, P - 1), line = p / width;
        px[r] = p % width + pad_left;
        py[r] = line % height + pad_top;
        line0[r] = line / height * out_h;   // the sample's first row of outputs
        acc[r] = (VEC)(0);
    }
    union { VEC v; TYPE s[VW]; } delta[HG_RM];
    long m[HG_RM];
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) {
            #pragma unroll
            for (int r = 0; r < HG_RM; r++) {
                const int ty = py[r] - i * dh, tx = px[r] - j * dw;  // oy * sh and ox * sw, if covered
                // Stride 1 skips the divisions (four per pixel and tap took as long as the products).
                const int oy = sh == 1 ? ty : ty / sh, ox = sw == 1 ? tx : tx / sw;
                const int covered = ty >= 0 && tx >= 0 && oy < out_h && ox < out_w &&
                                    (sh == 1 || ty % sh == 0) && (sw == 1 || tx % sw == 0);
                m[r] = covered ? ((long)line0[r] + oy) * out_w + ox : -1;
            }
            const __global VEC *w = (const __global VEC *)(weights_t + (long)(i * kw + j) * filters_p * channels_p
                                                           + c0);
            for (int f0 = 0; f0 < filters; f0 += VW) {
                #pragma unroll
                for (int r = 0; r < HG_RM; r++) {
                    const long o = m[r] * filters;
                    delta[r].v = m[r] < 0 ? (VEC)(0) : delta_columns(output_gr + o, slopes + o, f0, filters,
                                                                             apply_derivative);
                }
                #pragma unroll
                for (int jf = 0; jf < VW; jf++) {
                    const VEC wf = w[(long)(f0 + jf) * (channels_p / VW)];
                    #pragma unroll
                    for (int r = 0; r < HG_RM; r++)
                        acc[r] += (VEC)(delta[r].s[jf]) * wf;
                }
            }
        }
    const int lanes = min(VW, channels - c0);
    #pragma unroll
    for (int r = 0; r < HG_RM; r++) {
        if (p0 + r >= P)
            break;
        union { VEC v; TYPE s[VW]; } g;
        g.v = acc[r];
        for (int l = 0; l < lanes; l++)
            input_gr[(long)(p0 + r) * channels + c0 + l] = g.s[l];
    }
}
#endif
