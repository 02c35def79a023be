// Convolution, channels_last, in two forms, chosen with the Dense products' tiles
// (clnet/layers/dense.py; the weights keep that layout: W (K, filters), K = kh * kw * channels,
// row k = (i * kw + j) * channels + c, in the products' column panels, products/cpu_blocks.cl).
// - The CPU form (no TILE): implicit matrix products that read the image where the patch matrix
//   would have been, so no patch matrix is ever written: FeedForwardConv (bias and activation
//   fused; z stored only where f' does not follow from y, as in Dense's CPU form),
//   CalcDeltaWeightsConv (block sums of dL/dW and dL/db over chunks of output positions, delta
//   formed from dL/dy, y and z by the first block) and SumDeltaWeightsConv (the sums of those,
//   and W laid out per input channel for the input gradient), CalcHiddenGradientConv (each input
//   pixel gathers from the windows that cover it). Three launches per training step, four with
//   the input gradient.
// - The GPU form (TILE): implicit products in products/gpu_tiles.cl's local-memory tiles. Row m = (row, oy,
//   ox) of the patch matrix, column k, would hold x[row, oy*sh - pad_top + i*dh, ox*sw - pad_left
//   + j*dw, c] (0 outside the image); its slices are gathered from x as they are staged, so it is
//   never written: FeedForwardConv (bias and activation fused, y and f'(z) stored),
//   CalcDeltaWeightsConv (dL/dW and dL/db in one product, split-K slices added by gpu_tiles.cl's
//   SumSplits; with the input gradient, dL/dz too, in a frame of zeros), CalcHiddenGradientConv
//   (dL/dz gathered per pixel and tap from that frame). Two launches per training step, three
//   with the input gradient, one more where the weight gradient is split.
// 1-D convolutions run with height 1.
// Geometry, passed to every kernel as the same int arguments:
#define GEOMETRY const int height, const int width, const int channels, const int out_h, const int out_w, \
                 const int kh, const int kw, const int sh, const int sw, const int dh, const int dw,     \
                 const int pad_top, const int pad_left
#define GEOMETRY_ARGS height, width, channels, out_h, out_w, kh, kw, sh, sw, dh, dw, pad_top, pad_left

#ifdef TILE
// Built after products/gpu_tiles.cl: its tiles (TILE, WPT, TK, SIDE, LOADS, OWN), TILED_LOOP, put(),
// slice_product(), fetch(), store4(), store_block() and SumSplits serve here as they do the
// Dense products. A work-group computes a TILE x TILE block of the result from TK-deep slices of
// two operands staged in local memory; the operand that was the patch matrix is gathered from
// the image (or from dL/dy) as each slice is fetched (each kernel's FETCH_A and FETCH_B in
// TILED_LOOP), four elements at a time: one aligned TYPE4 where they are one tap's contiguous
// channels (channels a multiple of 4), else element by element, and staged as fetched
// (TILED_LOOP's PREPARE_SLICES does nothing). The gathers along m number their runs as put()
// stages them in the CUDA cores' tiles, the only ones a convolution takes (M_RUN_ROW's default).
#define PREPARE_SLICES(k0)
// A slice fetched along k gives a work-item the same columns (depths) in each of its LOADS runs,
// so where those columns read is worked out once per slice, not once per run.
#if ITEMS % (TK / 4)
#error "the work-items of a work-group must cover whole rows of a slice along k"
#endif

// dL/dz as the weight gradient writes it for the input gradient, (rows, frame_h, frame_w,
// filters_p): output (oy, ox) at (frame_top + oy, frame_left + ox), in a frame of zeros that is
// never written. At stride 1 the frame is wide enough that every tap of every input pixel lands
// on it (on a zero where no output covers the pixel), so the input gradient's gather is one
// load at a fixed offset per tap, with no bounds to test; rows of filters_p keep its loads
// aligned TYPE4s. At larger strides the frame is empty (frame_h = out_h, frame_w = out_w).
#define FRAME const int frame_h, const int frame_w, const int frame_top, const int frame_left
#define FRAME_ARGS frame_h, frame_w, frame_top, frame_left

// Where output position m = (row * out_h + oy) * out_w + ox sits in that frame.
inline long framed(const int m, const int out_h, const int out_w, FRAME)
{
    const int line = m / out_w, row = line / out_h;
    return (((long)row * frame_h + frame_top + line - row * out_h) * frame_w + frame_left + m - line * out_w);
}

// Output position m = (row * out_h + oy) * out_w + ox: its sample's image, and where its
// window's first tap falls (*y0, *x0; in the padding if negative).
inline const __global TYPE *window_of(const __global TYPE *inputs, const int m, int *y0, int *x0, GEOMETRY)
{
    const int line = m / out_w;
    *y0 = line % out_h * sh - pad_top;
    *x0 = (m - line * out_w) * sw - pad_left;
    return inputs + (long)(line / out_h) * height * width * channels;
}

// image[y, x, c..c+3] (c a multiple of 4, channels too), 0 in the padding.
inline TYPE4 pixel_run(const __global TYPE *image, const int y, const int x, const int c, GEOMETRY)
{
    return y >= 0 && y < height && x >= 0 && x < width
           ? *(const __global TYPE4 *)(image + (y * width + x) * channels + c) : (TYPE4)(0);
}

// Depth k = (i * kw + j) * run + c, stepped `by` deeper without dividing: the tap (i, j) and the
// offset c within its run of `run` (channels, or filters_p) follow along.
inline void step_tap(int *i, int *j, int *c, const int by, const int run, const int kw)
{
    for (*c += by; *c >= run; *c -= run)
        if (++*j == kw) {
            *j = 0;
            ++*i;
        }
}

// Columns col..col+3 (a multiple of 4) of a patch-matrix row: column k = (i * kw + j) *
// channels + c is image[y0 + i dh, x0 + j dw, c], 0 in the padding and past K; with `ones`,
// column K is 1 (the bias's column of the weight gradient).
inline TYPE4 patch_run(const __global TYPE *image, const int y0, const int x0, const int col, const int K,
                       const int ones, GEOMETRY)
{
    if (channels % 4 == 0 && col + 4 <= K) {  // one tap's channels c..c+3
        const int tap = col / channels;
        return pixel_run(image, y0 + tap / kw * dh, x0 + tap % kw * dw, col - tap * channels, GEOMETRY_ARGS);
    }
    TYPE v[4];
    #pragma unroll
    for (int t = 0; t < 4; t++) {
        const int k = col + t, tap = k / channels, c = k - tap * channels;
        const int y = y0 + tap / kw * dh, x = x0 + tap % kw * dw;
        const int inside = k < K && y >= 0 && y < height && x >= 0 && x < width;
        v[t] = inside ? image[(y * width + x) * channels + c] : ones && k == K ? 1 : 0;
    }
    return (TYPE4)(v[0], v[1], v[2], v[3]);
}

// delta = dL/dz = dL/dy f'(z) (f'(z) skipped when a loss already gave dL/dz) at output position
// m, filters n..n+3 (n a multiple of 4), zeros past `filters`.
inline TYPE4 delta_run(const __global TYPE *output_gr, const __global TYPE *slopes, const int m, const int n,
                       const int filters, const int apply_derivative)
{
    const long o = (long)m * filters;
    if (filters % 4 == 0) {
        if (n >= filters)
            return (TYPE4)(0);
        const TYPE4 g = *(const __global TYPE4 *)(output_gr + o + n);
        return apply_derivative ? g * *(const __global TYPE4 *)(slopes + o + n) : g;
    }
    const TYPE4 g = ToVect4(output_gr + o, n, filters);
    return apply_derivative ? g * ToVect4(slopes + o, n, filters) : g;
}

// z = patches W + b, y = f(z) and f'(z), which the backward kernels multiply dL/dy by. The
// patch slices are along k: each work-item fetches the same LOADS rows (output positions) at
// every depth, so their windows are found once, and where channels are a multiple of 4 its
// columns' tap (i, j) and channel c are stepped TK deeper per slice, not divided out.
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void FeedForwardConv(__global const TYPE *inputs,   // x (rows, height, width, channels)
                     __global const TYPE *weights,  // W (K, filters_p), row-major
                     __global const TYPE *bias,     // b (filters_p)
                     __global TYPE *outputs,        // y = f(z) (rows * out_h * out_w, filters)
                     __global TYPE *slopes,         // f'(z), the same shape
                     const int M, const int filters, const int filters_p, const TYPE a, const TYPE b, GEOMETRY)
{
    TILED_BEGIN
    const int K = kh * kw * channels;
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * SIDE + tx;
    const int m0 = get_group_id(1) * TILE, n0 = get_group_id(0) * TILE;
    const int col = lid % (TK / 4) * 4;
    const __global TYPE *image[LOADS];
    int y0[LOADS], x0[LOADS], inside[LOADS];
    #pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int m = m0 + (lid + l * ITEMS) / (TK / 4);
        inside[l] = m < M;
        image[l] = window_of(inputs, min(m, M - 1), &y0[l], &x0[l], GEOMETRY_ARGS);
    }
    const int whole = channels % 4 == 0;  // a run of 4 columns is one tap's channels
    int i = 0, j = 0, c = 0;
    step_tap(&i, &j, &c, whole ? col : 0, channels, kw);
    TYPE4 ra[LOADS], rb[LOADS];
#define FETCH_A(k0)                                                                                  \
    _Pragma("unroll")                                                                                \
    for (int l = 0; l < LOADS; l++)                                                                  \
        ra[l] = !inside[l] ? (TYPE4)(0)                                                              \
                : !whole ? patch_run(image[l], y0[l], x0[l], (k0) + col, K, 0, GEOMETRY_ARGS)         \
                : i < kh ? pixel_run(image[l], y0[l] + i * dh, x0[l] + j * dw, c, GEOMETRY_ARGS) : (TYPE4)(0); \
    if (whole)                                                                                       \
        step_tap(&i, &j, &c, TK, channels, kw);
#define FETCH_B(k0) fetch(weights, filters_p, ALONG_M, n0, k0, filters_p, K, lid, rb)
    TILED_LOOP(0, K, ALONG_K, ALONG_M)
#undef FETCH_A
#undef FETCH_B
    #pragma unroll
    for (int q = 0; q < WPT / 4; q++) {
        const int n = n0 + OWN(tx, q * 4);
        const TYPE4 bv = n < filters_p ? *(const __global TYPE4 *)(bias + n) : (TYPE4)(0);
        #pragma unroll
        for (int i = 0; i < WPT; i++) {
            const int m = m0 + OWN(ty, i);
            TYPE4 z = (TYPE4)(acc[i][q * 4], acc[i][q * 4 + 1], acc[i][q * 4 + 2], acc[i][q * 4 + 3]) + bv, y, d;
            y = (TYPE4)(ACT_FORWARD(z.s0, a, b), ACT_FORWARD(z.s1, a, b), ACT_FORWARD(z.s2, a, b),
                        ACT_FORWARD(z.s3, a, b));
            d = (TYPE4)(ACT_DERIVATIVE(y.s0, z.s0, a, b), ACT_DERIVATIVE(y.s1, z.s1, a, b),
                        ACT_DERIVATIVE(y.s2, z.s2, a, b), ACT_DERIVATIVE(y.s3, z.s3, a, b));
            if (m < M) {
                store4(outputs + (long)m * filters, y, n, filters, filters % 4 == 0);
                store4(slopes + (long)m * filters, d, n, filters, filters % 4 == 0);
            }
        }
    }
}

// [dL/dW; dL/db] = [patches, 1]^T delta, (K + 1, filters_p), summed over the output positions
// [z chunk, (z + 1) chunk) of work-group layer z (split-K, as gpu_tiles.cl's CalcDeltaWeights: the
// weights are a few tiles, the positions hundreds of thousands) into slice z of delta_weights
// (K, filters_p) and delta_bias (filters_p), which SumSplits adds when there are several. The
// bias is the patch matrix's extra column of ones, so it costs no launch of its own; delta is
// formed from dL/dy as it is read, and with `write_delta` the work-groups of the first block row
// store it, framed (FRAME above), for the input gradient. Both slices are along m: at each depth
// (position) a work-item fetches patch columns and filters that stay the same, from a new
// window; the columns' tap and channel are found once, and the positions stepped TK further per
// slice, not divided into (sample, oy, ox) each time.
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void CalcDeltaWeightsConv(__global const TYPE *inputs,     // x (rows, height, width, channels)
                          __global const TYPE *output_gr,  // dL/dy (rows * out_h * out_w, filters)
                          __global const TYPE *slopes,     // f'(z), the same shape
                          __global TYPE *delta_weights,    // dL/dW (splits, K, filters_p), row-major
                          __global TYPE *delta_bias,       // dL/db (splits, filters_p)
                          __global TYPE *delta,            // dL/dz (rows, frame_h, frame_w, filters_p)
                          const int M, const int filters, const int filters_p, const int chunk,
                          const int apply_derivative, const int write_delta, GEOMETRY, FRAME)
{
    TILED_BEGIN
    const int K = kh * kw * channels;
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * SIDE + tx;
    const int m0 = get_group_id(1) * TILE, n0 = get_group_id(0) * TILE, split = get_group_id(2);
    const int first = split * chunk, end = min(M, first + chunk);
    // This work-item's columns (the same in every run: ITEMS is a multiple of TILE / 4), and
    // where they read in a window when they are one tap's channels.
    const int col = m0 + lid % (TILE / 4) * 4, whole = channels % 4 == 0 && col + 4 <= K;
    const int tap = whole ? col / channels : 0, tap_y = tap / kw * dh, tap_x = tap % kw * dw;
    const int tap_c = col - tap * channels;
    // Each run's output position (sample, oy, ox), stepped TK positions per slice.
    int row[LOADS], oy[LOADS], ox[LOADS];
    #pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int m = first + (lid + l * ITEMS) / (TILE / 4), line = m / out_w;
        ox[l] = m - line * out_w;
        oy[l] = line % out_h;
        row[l] = line / out_h;
    }
    TYPE4 ra[LOADS], rb[LOADS];
#define FETCH_A(k0)                                                                                  \
    _Pragma("unroll")                                                                                \
    for (int l = 0; l < LOADS; l++) {                                                                \
        const __global TYPE *image = inputs + (long)row[l] * height * width * channels;             \
        const int y0 = oy[l] * sh - pad_top, x0 = ox[l] * sw - pad_left;                            \
        ra[l] = (k0) + (lid + l * ITEMS) / (TILE / 4) >= end ? (TYPE4)(0)                            \
                : whole ? pixel_run(image, y0 + tap_y, x0 + tap_x, tap_c, GEOMETRY_ARGS)             \
                : patch_run(image, y0, x0, col, K, 1, GEOMETRY_ARGS);                                \
        for (ox[l] += TK; ox[l] >= out_w; ox[l] -= out_w)                                            \
            if (++oy[l] == out_h) {                                                                  \
                oy[l] = 0;                                                                           \
                row[l]++;                                                                            \
            }                                                                                        \
    }
#define FETCH_B(k0)                                                                                  \
    _Pragma("unroll")                                                                                \
    for (int l = 0; l < LOADS; l++) {                                                                \
        const int e = lid + l * ITEMS, m = (k0) + e / (TILE / 4), n = n0 + e % (TILE / 4) * 4;      \
        rb[l] = m < end ? delta_run(output_gr, slopes, m, n, filters, apply_derivative) : (TYPE4)(0); \
        if (write_delta && m0 == 0 && m < end && n < filters_p)                                      \
            *(__global TYPE4 *)(delta + framed(m, out_h, out_w, FRAME_ARGS) * filters_p + n) = rb[l];   \
    }
    TILED_LOOP(first, end, ALONG_M, ALONG_M)
#undef FETCH_A
#undef FETCH_B
    delta_weights += (long)split * K * filters_p;
    delta_bias += split * filters_p;
    #pragma unroll
    for (int i = 0; i < WPT; i++) {
        const int k = m0 + OWN(ty, i);
        #pragma unroll
        for (int q = 0; q < WPT / 4; q++) {
            const int n = n0 + OWN(tx, q * 4);
            const TYPE4 run = (TYPE4)(acc[i][q * 4], acc[i][q * 4 + 1], acc[i][q * 4 + 2], acc[i][q * 4 + 3]);
            if (n < filters_p && k <= K)
                *(__global TYPE4 *)(k < K ? delta_weights + (long)k * filters_p + n : delta_bias + n) = run;
        }
    }
}

// o if t = o * s for an output index 0 <= o < n, else -1 (no division at stride 1).
inline int output_index(const int t, const int s, const int n)
{
    const int o = s == 1 ? t : t / s;
    return t >= 0 && o < n && o * s == t ? o : -1;
}

// dL/dx = D Wt, (rows * height * width, channels): row p of D (one input pixel) holds, per
// kernel tap (i, j), delta's row at the output position whose window puts that tap on the pixel,
// zeros if there is none (y + pad_top - i dh = oy sh must hold for an oy in range, and likewise
// across); Wt[(tap, f)][c] = W[tap * channels + c][f]. Depth kh * kw * filters_p, in runs of four
// filters of one tap; both slices are along k, and each work-item fetches the same pixels at
// every depth. At stride 1 a pixel's row of D is delta's framed rows at one offset per tap from
// the pixel's own (FRAME): a load with nothing to test or divide (the bounds and divisions of the
// general gather held back the input gradient of benchmarks/conv.py's layer on a GPU).
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void CalcHiddenGradientConv(__global const TYPE *delta,    // dL/dz (rows, frame_h, frame_w, filters_p)
                            __global const TYPE *weights,  // W (K, filters_p), row-major
                            __global TYPE *input_gr,       // dL/dx (rows, height, width, channels)
                            const int P, const int filters_p, GEOMETRY, FRAME)
{
    TILED_BEGIN
    const int depth = kh * kw * filters_p, unit_stride = sh == 1 && sw == 1;
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * SIDE + tx;
    const int m0 = get_group_id(1) * TILE, n0 = get_group_id(0) * TILE;
    const int col = lid % (TK / 4) * 4;
    // Per pixel: at stride 1, where its tap (0, 0) reads in the frame; else its position plus the
    // padding and its sample's first frame row.
    long at[LOADS];
    int py[LOADS], px[LOADS];
    #pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int p = min(m0 + (lid + l * ITEMS) / (TK / 4), P - 1), line = p / width, row = line / height;
        px[l] = p - line * width + pad_left;
        py[l] = line - row * height + pad_top;
        at[l] = unit_stride ? (((long)row * frame_h + frame_top + py[l]) * frame_w + frame_left + px[l]) * filters_p
                            : (long)row * frame_h;
    }
    TYPE4 ra[LOADS], rb[LOADS];
    // This work-item's depth k = (i * kw + j) * filters_p + f, the same in every run and stepped TK
    // deeper per slice without dividing.
    int i = 0, j = 0, f = 0;
    step_tap(&i, &j, &f, col, filters_p, kw);
#define FETCH_A(k0)                                                                                  \
    _Pragma("unroll")                                                                                \
    for (int l = 0; l < LOADS; l++) {                                                                \
        if (unit_stride) {                                                                           \
            ra[l] = i < kh ? *(const __global TYPE4 *)(delta + at[l] + f - (long)(i * dh * frame_w + j * dw) * filters_p) \
                           : (TYPE4)(0);                                                             \
        } else {                                                                                     \
            const int oy = output_index(py[l] - i * dh, sh, out_h), ox = output_index(px[l] - j * dw, sw, out_w); \
            ra[l] = i < kh && oy >= 0 && ox >= 0                                                     \
                    ? *(const __global TYPE4 *)(delta + ((at[l] + oy) * frame_w + ox) * filters_p + f) \
                    : (TYPE4)(0);                                                                    \
        }                                                                                            \
    }
// W's rows of tap (i, j), at the same filters f as the patch runs (FETCH_A, called first); then
// the next slice's depth.
#define FETCH_B(k0)                                                                                  \
    _Pragma("unroll")                                                                                \
    for (int l = 0; l < LOADS; l++) {                                                                \
        const int c = n0 + (lid + l * ITEMS) / (TK / 4);                                             \
        rb[l] = c < channels && i < kh                                                               \
                ? *(const __global TYPE4 *)(weights + ((long)(i * kw + j) * channels + c) * filters_p + f) \
                : (TYPE4)(0);                                                                        \
    }                                                                                                \
    step_tap(&i, &j, &f, TK, filters_p, kw);
    TILED_LOOP(0, depth, ALONG_K, ALONG_K)
#undef FETCH_A
#undef FETCH_B
    store_block(input_gr, channels, P, channels, acc, 0);
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

// acc[r] += sum_c a[r][c] B[c] for r < RM: `n` contiguous elements of each of RM rows of the
// patch matrix (one kernel tap's channels) times n consecutive rows of a panel of W. As cpu_blocks.cl's
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

// z = patches W + b and y = f(z), z stored only with STORE_PRE (for a derivative that does not
// follow from y: the first layer of the CNN, 86528 x 32 outputs per batch, spent most of its
// forward storing f'(z) beside y); FF_RM output positions (consecutive m = (row * out_h + oy) *
// out_w + ox) x VW filters per work-item. Per kernel tap each position reads its `channels`
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
    #pragma unroll
    for (int r = 0; r < FF_RM; r++) {
        if (m0 + r >= M)
            break;
        // Whole aligned vectors where they can be (a scalar loop here took most of a first layer's time).
        const VEC z = acc[r] + bv;
        store_columns(outputs + (long)(m0 + r) * filters, ACT_FORWARD_V(z, a, b), col, filters);
#if STORE_PRE
        store_columns(pre + (long)(m0 + r) * filters, z, col, filters);
#endif
    }
}

// One block of DW_RM rows k0.. of dL/dW over VW filters col.. and the output lines [first, last)
// of a chunk, into its rows of `out`. The first block (`forms_delta`) forms delta from dL/dy (f'
// from y and z), stores it with `write_delta` and sums dL/db; the later ones read delta back (or
// dL/dy, where a loss applied the derivative): `source`. Inlined with a constant
// `forms_delta`, so that the blocks' loop carries no derivative (PoCL 3.0's vector select, inside
// the loop of every block, cost it half its speed: spilled accumulators).
__attribute__((always_inline))
void delta_weights_block(const int forms_delta, const int k0, const __global TYPE *inputs,
                         const __global TYPE *output_gr, const __global TYPE *outputs, const __global TYPE *pre,
                         __global TYPE *delta, const __global TYPE *source, __global TYPE *out, VEC *bias_acc,
                         const int first, const int last, const int col, const int filters, const int filters_p,
                         const TYPE a, const TYPE b, const int apply_derivative, const int write_delta, GEOMETRY)
{
    const int K = kh * kw * channels;
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
    // Checking each tap against the image's edges cost more than the products (measured for
    // 128 x 13 x 13 x 32 -> 64, 3x3, on pip's PoCL 3.0): it is done only for windows that reach
    // into the padding, those of lines whose rows do and of columns ox outside [lo, hi). Walking
    // whole lines, the next position's data is a pointer step away, without the divisions and
    // carries that finding (row, oy, ox) for each position took.
    const int span_y = (kh - 1) * dh, span_x = (kw - 1) * dw;
    const int lo = min((pad_left + sw - 1) / sw, out_w), right = width - 1 - span_x + pad_left;
    const int hi = right < 0 ? lo : clamp(right / sw + 1, lo, out_w);
    for (int line = first; line < last; line++) {
        const int y = line % out_h * sh - pad_top, row = line / out_h;
        const int rows_inside = y >= 0 && y + span_y < height;
        const int inside_lo = rows_inside ? lo : out_w, inside_hi = rows_inside ? hi : out_w;
        const long o = (long)line * out_w * filters;
        const __global TYPE *corner = inputs + (((long)row * height + y) * width - pad_left) * channels;
        const int step = sw * channels;
        for (int ox = 0; ox < out_w; ox++, corner += step) {
            const long at = o + (long)ox * filters;
            VEC d;
            if (forms_delta) {
                d = delta_columns(output_gr + at, outputs + at, pre + at, col, filters, a, b, apply_derivative);
                *bias_acc += d;
                if (write_delta)
                    store_columns(delta + at, d, col, filters);
            } else {
                d = load_columns(source + at, col, filters);
            }
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
        }
    }
    #pragma unroll
    for (int r = 0; r < DW_RM; r++)
        if (k0 + r < K)
            *(__global VEC *)(out + (long)(k0 + r) * filters_p) = acc[r];
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
    const int col = get_global_id(0) * VW, ch = get_global_id(1);
    const int K = kh * kw * channels;
    const int first = ch * chunk, last = min(first + chunk, lines);
    __global TYPE *out = partials + (long)ch * (K + 1) * filters_p + col;
    const __global TYPE *source = apply_derivative ? delta : output_gr;
    VEC bias_acc = (VEC)(0);
    delta_weights_block(1, 0, inputs, output_gr, outputs, pre, delta, source, out, &bias_acc, first, last, col,
                        filters, filters_p, a, b, apply_derivative, write_delta, GEOMETRY_ARGS);
    for (int k0 = DW_RM; k0 < K; k0 += DW_RM)
        delta_weights_block(0, k0, inputs, output_gr, outputs, pre, delta, source, out, &bias_acc, first, last, col,
                            filters, filters_p, a, b, apply_derivative, write_delta, GEOMETRY_ARGS);
    *(__global VEC *)(out + (long)K * filters_p) = bias_acc;
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
// p = (row * height + y) * width + x times VW channels per work-item. For each kernel tap a pixel
// is read by at most one output position (the one whose window puts that tap on it), so the
// input gradient is a product of the same form as the forward's: per tap, each pixel's row of
// delta (`zeros` if no window puts the tap on it) times the tap's filters_p rows of Wt, in
// patch_product. delta = dL/dz was stored by the weight gradient (or is dL/dy where a loss
// already applied the derivative), so each of its elements is one load, broadcast from memory,
// not the two loads and a product per tap that forming it here took (with its elements taken
// out of a vector register, which ran the CNN's second layer slower). Its block is the forward's
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
    const int c0 = get_global_id(0) * VW, p0 = get_global_id(1) * FF_RM;
    if (c0 >= channels || p0 >= P)
        return;
    int px[FF_RM], py[FF_RM], line0[FF_RM];
    VEC acc[FF_RM];
    #pragma unroll
    for (int r = 0; r < FF_RM; r++) {
        const int p = min(p0 + r, P - 1), line = p / width;
        px[r] = p - line * width + pad_left;
        py[r] = line % height + pad_top;
        line0[r] = line / height * out_h;   // the sample's first row of outputs
        acc[r] = (VEC)(0);
    }
    const __global VEC *panel = (const __global VEC *)weights_t + (long)(c0 / VW) * kh * kw * filters_p;
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
            patch_product(src, panel + (i * kw + j) * filters_p, filters, acc);
        }
    const int lanes = min(VW, channels - c0);
    #pragma unroll
    for (int r = 0; r < FF_RM; r++) {
        if (p0 + r >= P)
            break;
        const long o = (long)(p0 + r) * channels + c0;
        if (channels % VW == 0) {
            *(__global VEC *)(input_gr + o) = acc[r];
        } else {
            union { VEC v; TYPE s[VW]; } g;
            g.v = acc[r];
            for (int l = 0; l < lanes; l++)
                input_gr[o + l] = g.s[l];
        }
    }
}
#endif
