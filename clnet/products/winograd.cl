// The input gradient of a 3 x 3, stride-1, undilated convolution by Winograd's F(4x4, 3x3) (Lavin and
// Gray, "Fast Algorithms for Convolutional Neural Networks"): the tiled (GPU) form's alternative to
// convolution_tiles.cl's CalcHiddenGradientConv, which the tuner takes where it measures faster.
//
// dL/dx[y, x, c] = sum over taps (i, j) and filters f of dL/dz[y + pad_top - i, x + pad_left - j, f]
// W[i, j, c, f], and dL/dz is stored in its frame of zeros (convolution_tiles.cl's FRAME), so dL/dx
// is the correlation of the frame, from row o_y = frame_top + pad_top - 2 and column o_x =
// frame_left + pad_left - 2 on, with the flipped kernel W'[r, s] = W[2 - r, 2 - s]. F(4x4, 3x3) makes
// each 4 x 4 tile of dL/dx from the 6 x 6 patch of the frame under it with 36 products where the
// direct sum takes 144 (per channel and filter):
//   U = G W' G^T (6 x 6 per channel and filter), V = B^T d B (6 x 6 per tile and filter),
//   M[xi] = V[xi] U[xi]^T (36 matrix products, tiles x filters times filters x channels),
//   dL/dx's tile = A^T M A (4 x 4 per tile and channel),
// with winograd_transforms.cl's B^T, G and A^T (pasted before this file).
// Three launches: WinogradTransforms (V and U: their work-items are independent, so one launch),
// WinogradProducts (the 36 products, one per work-group layer) and WinogradGradient. V and M are
// written out (36 x tiles x filters_p and 36 x tiles x channels): a fused form would keep them in
// local memory, at the cost of 1024 accumulators a work-item. The transforms' constants (4, 5, 1/6,
// 1/24, 8) make the result's rounding error a few times the direct sum's (tests/test_winograd.py
// bounds it; benchmarks/RESULTS.md, the convolution's gradients against cuDNN's FFTs).
// Tiles are numbered t = (row * tiles_h + ty) * tiles_w + tx over dL/dx's rows; tiles past its
// height or width compute from zeros or the frame and are not stored.

// Work-item (f, t) for t < tiles: V[xi][t][f] from tile t's 6 x 6 patch of the frame (zeros past its
// edge). Work-item (f, tiles + c): U[xi][c][f] from W (K, filters_p), row (tap * channels + c). Both
// read and write along f, so neighbouring work-items touch neighbouring addresses.
__kernel void WinogradTransforms(__global const TYPE *delta,    // dL/dz (rows, frame_h, frame_w, filters_p)
                                 __global const TYPE *weights,  // W (9 * channels, filters_p)
                                 __global TYPE *tiles_v,        // V (36, tiles, filters_p)
                                 __global TYPE *filters_u,      // U (36, channels, filters_p)
                                 const int tiles, const int tiles_h, const int tiles_w, const int channels,
                                 const int filters_p, const int frame_h, const int frame_w, const int o_y,
                                 const int o_x)
{
    const int f = get_global_id(0), t = get_global_id(1);
    if (f >= filters_p || t >= tiles + channels)
        return;
    TYPE column[6], out[6];
    if (t < tiles) {
        const int line = t / tiles_w, row = line / tiles_h;
        patch_transform(delta + (long)row * frame_h * frame_w * filters_p + f, frame_h, frame_w, filters_p,
                        o_y + (line - row * tiles_h) * 4, o_x + (t - line * tiles_w) * 4,
                        tiles_v + (long)t * filters_p + f, (long)tiles * filters_p);
        return;
    }
    const int c = t - tiles;
    TYPE g[3][6];
    for (int s = 0; s < 3; s++) {  // G W', a column at a time: W' flipped, W[2 - r, 2 - s]
        for (int r = 0; r < 3; r++)
            column[r] = weights[(((2 - r) * 3 + 2 - s) * (long)channels + c) * filters_p + f];
        FILTER_TRANSFORM(column, out);
        for (int r = 0; r < 6; r++)
            g[s][r] = out[r];
    }
    for (int r = 0; r < 6; r++) {  // (G W') G^T, a row at a time
        const TYPE row[3] = {g[0][r], g[1][r], g[2][r]};
        FILTER_TRANSFORM(row, out);
        for (int s = 0; s < 6; s++)
            filters_u[((long)(r * 6 + s) * channels + c) * filters_p + f] = out[s];
    }
}

// M[xi] (tiles, columns) = V[xi] (tiles, depth) U[xi]^T, U[xi] (columns, depth): work-group
// layer xi, a block of BM tiles by BN = 64 columns, 8 x 8 a work-item (tiles tm + SM i, columns
// tn + 8 j: neighbouring work-items read neighbouring rows of a staged slice); the input gradient's
// columns are channels and its depth filters_p, the forward's (winograd_forward.cl) filters_p and
// channels_p. Both operands are contiguous along the depth, a multiple of 4, so each slice TK deep
// is copied in 16-byte runs, untransposed, into
// STAGES buffers of local memory whose rows are padded by one run (the 8 rows a warp reads then fall
// in different banks); a barrier a slice. With ASYNC_COPIES (an NVIDIA GPU of compute capability 8.0
// or later, float) the runs go by cp.async, STAGES - 1 slices in flight while one is multiplied;
// elsewhere each is loaded and stored by its work-item.
#define BN 64
#define SM (BM / 8)
#define SN (BN / 8)
#define ITEMS (SM * SN)
#define LD (TK + 4)
#define A_STAGE (BM * LD)
#define STAGE (A_STAGE + BN * LD)
#define RUNS (TK / 4)  // 16-byte runs of 4 a staged row holds
#if TK % 4 || BM % 8 || BM * RUNS % ITEMS || BN * RUNS % ITEMS || STAGES < 2
#error "WinogradProducts: TK a multiple of 4, BM of 8, each slice's runs shared evenly, 2 stages or more"
#endif
#if ASYNC_COPIES
#define COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
// (STAGES - 2 younger slices may still be on their way: the build's define, as PTX takes no expression)
#define WAIT_FOR_SLICE() asm volatile("cp.async.wait_group " STR(YOUNGER_SLICES) ";" ::: "memory")
#else
#define COMMIT()
#define WAIT_FOR_SLICE()
#endif

// The run of 4 at `source` into local memory at `target`, or zeros where not `live`.
inline void copy_run(__local TYPE *target, const __global TYPE *source, const int live)
{
#if ASYNC_COPIES
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"((uint)(ulong)target), "l"(source), "r"(live ? 16 : 0) : "memory");
#else
    *(__local TYPE4 *)target = live ? *(const __global TYPE4 *)source : (TYPE4)(0);
#endif
}

// Slice s (depths s TK ..) of both operands into stage s % STAGES.
inline void stage_slice(__local TYPE *stages, const __global TYPE *v, const __global TYPE *u, const int s,
                        const int m0, const int n0, const int tiles, const int columns, const int depth)
{
    __local TYPE *a = stages + s % STAGES * STAGE, *b = a + A_STAGE;
    const int lid = get_local_id(0), k = s * TK;
    #pragma unroll
    for (int q = 0; q < BM * RUNS / ITEMS; q++) {
        const int e = lid + q * ITEMS, r = e / RUNS, d = k + e % RUNS * 4, live = m0 + r < tiles && d < depth;
        copy_run(a + r * LD + e % RUNS * 4, live ? v + (long)(m0 + r) * depth + d : v, live);
    }
    #pragma unroll
    for (int q = 0; q < BN * RUNS / ITEMS; q++) {
        const int e = lid + q * ITEMS, r = e / RUNS, d = k + e % RUNS * 4, live = n0 + r < columns && d < depth;
        copy_run(b + r * LD + e % RUNS * 4, live ? u + (long)(n0 + r) * depth + d : u, live);
    }
}

__kernel __attribute__((reqd_work_group_size(ITEMS, 1, 1)))
void WinogradProducts(__global const TYPE *tiles_v,    // V (36, tiles, depth)
                      __global const TYPE *filters_u,  // U (36, columns, depth)
                      __global TYPE *products,         // M (36, tiles, columns)
                      const int tiles, const int columns, const int depth)
{
    __local TYPE4 stages4[STAGES * STAGE / 4];
    __local TYPE *stages = (__local TYPE *)stages4;
    const int lid = get_local_id(0), tm = lid / SN, tn = lid % SN, xi = get_group_id(2);
    const int m0 = get_group_id(0) * BM, n0 = get_group_id(1) * BN, slices = (depth + TK - 1) / TK;
    const __global TYPE *v = tiles_v + (long)xi * tiles * depth, *u = filters_u + (long)xi * columns * depth;
    TYPE acc[8][8];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            acc[i][j] = 0;
    for (int s = 0; s < STAGES - 1; s++) {  // one commit group a slice, empty past the last
        if (s < slices)
            stage_slice(stages, v, u, s, m0, n0, tiles, columns, depth);
        COMMIT();
    }
    for (int s = 0; s < slices; s++) {
        // Slice s here (this work-item's copies; the barrier, everyone's), and everyone done with
        // slice s - 1, whose stage the copies below overwrite.
        WAIT_FOR_SLICE();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (s + STAGES - 1 < slices)
            stage_slice(stages, v, u, s + STAGES - 1, m0, n0, tiles, columns, depth);
        COMMIT();
        const __local TYPE *a = stages + s % STAGES * STAGE, *b = a + A_STAGE;
        #pragma unroll
        for (int q = 0; q < RUNS; q++) {
            TYPE4 ra[8], rb[8];
            #pragma unroll
            for (int i = 0; i < 8; i++)
                ra[i] = *(const __local TYPE4 *)(a + (tm + SM * i) * LD + q * 4);
            #pragma unroll
            for (int j = 0; j < 8; j++)
                rb[j] = *(const __local TYPE4 *)(b + (tn + SN * j) * LD + q * 4);
            #pragma unroll
            for (int i = 0; i < 8; i++)
                #pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[i][j] = fma(ra[i].s3, rb[j].s3, fma(ra[i].s2, rb[j].s2,
                                fma(ra[i].s1, rb[j].s1, fma(ra[i].s0, rb[j].s0, acc[i][j]))));
        }
    }
    __global TYPE *m = products + (long)xi * tiles * columns;
    for (int i = 0; i < 8; i++) {
        const int t = m0 + tm + SM * i;
        for (int j = 0; j < 8; j++) {
            const int c = n0 + tn + SN * j;
            if (t < tiles && c < columns)
                m[(long)t * columns + c] = acc[i][j];
        }
    }
}

// Work-item (c, t): dL/dx's 4 x 4 tile t, channel c, = A^T M A, the parts inside dL/dx stored.
__kernel void WinogradGradient(__global const TYPE *products,  // M (36, tiles, channels)
                               __global TYPE *input_gr,        // dL/dx (rows, height, width, channels)
                               const int tiles, const int tiles_h, const int tiles_w, const int channels,
                               const int height, const int width)
{
    const int c = get_global_id(0), t = get_global_id(1);
    if (c >= channels || t >= tiles)
        return;
    TYPE rows[4][6], out[4];
    output_rows(products + (long)t * channels + c, (long)tiles * channels, rows);
    const int line = t / tiles_w, row = line / tiles_h, y0 = (line - row * tiles_h) * 4, x0 = (t - line * tiles_w) * 4;
    for (int r = 0; r < 4 && y0 + r < height; r++) {  // (A^T M) A, a row at a time
        OUTPUT_TRANSFORM(rows[r], out);
        for (int s = 0; s < 4 && x0 + s < width; s++)
            input_gr[(((long)row * height + y0 + r) * width + x0 + s) * channels + c] = out[s];
    }
}
