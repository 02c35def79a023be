// The convolution's GPU form (see convolution.cl, pasted before this file).
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
