// The weight gradient of a 3 x 3, stride-1, undilated convolution by Winograd's F(3x3, 4x4): the
// tiled (GPU) form's alternative to convolution_tiles.cl's CalcDeltaWeightsConv, which the tuner
// takes where it measures faster. Pasted after gpu_tiles.cl (its tiles and products), convolution.cl
// and convolution_tiles.cl (GEOMETRY, FRAME) and winograd_transforms.cl (B^T, G and A^T).
//
// dL/dW[i, j, c, f] = sum over samples and output positions (oy, ox) of x[oy - pad_top + i,
// ox - pad_left + j, c] dL/dz[oy, ox, f]: per channel and filter, the correlation of the image with
// dL/dz, 3 x 3 values from out_h x out_w. Cut dL/dz into 4 x 4 blocks (tiles) and each block's share
// is the correlation of the 6 x 6 patch of x under it with the block, which F(3x3, 4x4) makes with 36
// products where the direct sum takes 144:
//   V = B^T d B (6 x 6 per tile and channel), U = G g G^T (6 x 6 per tile and filter),
//   M[xi] = V[xi]^T U[xi] summed over the tiles (36 matrix products, channels x tiles times tiles x
//   filters: the sum over tiles is the products' depth, so it costs nothing on its own),
//   dL/dW = A^T M A (3 x 3 per channel and filter).
// The bias gradient, dL/dz's sum, is U at the point (1, 1) summed over the tiles, times 36 (G's row
// for the point 1 is -(1 1 1 1) / 6): a 37th product of a row of ones with U[7].
// Three launches: WinogradWeightTransforms (V of x; dL/dz = dL/dy f'(z), its U, and dL/dz into its
// frame for the input gradient: one launch), WinogradWeightProducts (the 37 products on gpu_tiles.cl's
// tiles, each split along the tiles into `splits` slices of M, as its weight gradient splits the
// batch: 36 products of 64 x 64 would not fill a GPU) and WinogradWeightGradient (the slices summed,
// A^T M A, and the bias). V and U are written out, 36 x tiles x channels and 36 x tiles x filters_p;
// the transforms' constants make the result's rounding error a few times the direct sum's
// (tests/test_winograd_weights.py bounds it).
// Tiles are numbered t = (row * tiles_h + ty) * tiles_w + tx over dL/dz's rows; a tile's positions
// past out_h or out_w hold zeros.
#define POINTS 36
#define BIAS_POINT 7  // the point (1, 1), row 1 and column 1 of the 6 x 6

// Work-item (e, t): for e < channels_g (channels rounded up to the work-groups' width), V[xi][t][e]
// from tile t's 6 x 6 patch of x (zeros in the padding); past it, U[xi][t][f] of filter f = e -
// channels_g from tile t's 4 x 4 block of dL/dz, formed from dL/dy as it is read and, with
// `write_delta`, stored into delta's frame. Both read and write along channels or filters, so
// neighbouring work-items touch neighbouring addresses.
__kernel void WinogradWeightTransforms(__global const TYPE *inputs,     // x (rows, height, width, channels)
                                       __global const TYPE *output_gr,  // dL/dy (rows, out_h, out_w, filters)
                                       __global const TYPE *slopes,     // f'(z), as dL/dy
                                       __global TYPE *delta,            // dL/dz (rows, frame_h, frame_w, filters_p)
                                       __global TYPE *tiles_v,          // V (36, tiles, channels)
                                       __global TYPE *deltas_u,         // U (36, tiles, filters_p)
                                       const int tiles, const int tiles_h, const int tiles_w, const int channels_g,
                                       const int filters, const int filters_p, const int apply_derivative,
                                       const int write_delta, GEOMETRY, FRAME)
{
    const int e = get_global_id(0), t = get_global_id(1);
    if (t >= tiles)
        return;
    const int line = t / tiles_w, row = line / tiles_h;
    const int oy0 = (line - row * tiles_h) * 4, ox0 = (t - line * tiles_w) * 4;
    if (e < channels_g) {
        if (e < channels)
            patch_transform(inputs + (long)row * height * width * channels + e, height, width, channels,
                            oy0 - pad_top, ox0 - pad_left, tiles_v + (long)t * channels + e, (long)tiles * channels);
        return;
    }
    const int f = e - channels_g;
    if (f >= filters_p)
        return;
    TYPE block[4][4], rows[6][4], out[6];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            const int oy = oy0 + a, ox = ox0 + b, inside = oy < out_h && ox < out_w;
            const long o = (((long)row * out_h + oy) * out_w + ox) * filters + f;
            TYPE d = inside && f < filters ? output_gr[o] : 0;
            if (apply_derivative && inside && f < filters)
                d *= slopes[o];
            block[a][b] = d;
            if (write_delta && inside)  // zeros in the columns past `filters`, as the direct form writes
                delta[(((long)row * frame_h + frame_top + oy) * frame_w + frame_left + ox) * filters_p + f] = d;
        }
    for (int b = 0; b < 4; b++) {  // G g, a column at a time
        const TYPE run[4] = {block[0][b], block[1][b], block[2][b], block[3][b]};
        DELTA_TRANSFORM(run, out);
        for (int r = 0; r < 6; r++)
            rows[r][b] = out[r];
    }
    for (int r = 0; r < 6; r++) {  // (G g) G^T, a row at a time
        DELTA_TRANSFORM(rows[r], out);
        for (int s = 0; s < 6; s++)
            deltas_u[((long)(r * 6 + s) * tiles + t) * filters_p + f] = out[s];
    }
}

// Work-group layer z = point * splits + split: slice `split` of M[point] (channels, filters_p), the
// sum over tiles [split chunk, (split + 1) chunk) of V[point][t]^T U[point][t], on gpu_tiles.cl's
// tiles with both operands read along m (a row of channels, or of filters, at each depth t). Layer
// point 36 sums U[BIAS_POINT] down the tiles into its first row, the bias's: its first operand is one
// row of ones, read at every depth (ld 0), and its other row blocks have nothing to do.
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void WinogradWeightProducts(__global const TYPE *tiles_v,   // V (36, tiles, channels)
                            __global const TYPE *deltas_u,  // U (36, tiles, filters_p)
                            __global const TYPE *ones,      // (4): 1s
                            __global TYPE *products,        // M's slices (splits, 37, channels, filters_p)
                            const int tiles, const int channels, const int filters_p, const int chunk,
                            const int splits)
{
    TILED_BEGIN
    const int z = get_group_id(2), point = z / splits, split = z - point * splits, bias = point == POINTS;
    const int m_block = get_group_id(1) * TILE, n_block = get_group_id(0) * TILE;
    if (bias && m_block)
        return;
    const int first = split * chunk, end = min(tiles, first + chunk), rows = bias ? 1 : channels;
    const __global TYPE *v = bias ? ones : tiles_v + (long)point * tiles * channels;
    const __global TYPE *u = deltas_u + (long)(bias ? BIAS_POINT : point) * tiles * filters_p;
    result_product(v, bias ? 0 : channels, ALONG_M, u, filters_p, ALONG_M, rows, filters_p, m_block, n_block, first,
                   end, 0);
    store_result(products + ((long)split * (POINTS + 1) + point) * channels * filters_p, filters_p, rows, filters_p,
                 m_block, n_block, acc, 0);
}

// Work-item (f, c): dL/dW's 3 x 3 taps of channel c and filter f, A^T M A from M's slices summed;
// work-item (f, channels): dL/db[f], 36 times the sum of the bias row's slices.
__kernel void WinogradWeightGradient(__global const TYPE *products,  // M's slices (splits, 37, channels, filters_p)
                                     __global TYPE *delta_weights,   // dL/dW (9 * channels, filters_p)
                                     __global TYPE *delta_bias,      // dL/db (filters_p)
                                     const int channels, const int filters_p, const int splits)
{
    const int f = get_global_id(0), c = get_global_id(1);
    if (f >= filters_p || c > channels)
        return;
    const long point_size = (long)channels * filters_p, split_size = (POINTS + 1) * point_size;
    if (c == channels) {
        TYPE sum = 0;
        for (int s = 0; s < splits; s++)
            sum += products[s * split_size + POINTS * point_size + f];
        delta_bias[f] = 36 * sum;
        return;
    }
    TYPE m[6][6], rows[3][6], column[6], out[3];
    const __global TYPE *own = products + (long)c * filters_p + f;
    for (int r = 0; r < 6; r++)
        for (int s = 0; s < 6; s++)
            m[r][s] = 0;
    for (int split = 0; split < splits; split++, own += split_size)  // a slice's 36 loads at once
        #pragma unroll
        for (int p = 0; p < POINTS; p++)
            m[p / 6][p % 6] += own[p * point_size];
    for (int s = 0; s < 6; s++) {  // A^T M, a column at a time
        for (int r = 0; r < 6; r++)
            column[r] = m[r][s];
        WEIGHT_OUTPUT_TRANSFORM(column, out);
        for (int r = 0; r < 3; r++)
            rows[r][s] = out[r];
    }
    for (int r = 0; r < 3; r++) {  // (A^T M) A, a row at a time
        WEIGHT_OUTPUT_TRANSFORM(rows[r], out);
        for (int s = 0; s < 3; s++)
            delta_weights[((long)(r * 3 + s) * channels + c) * filters_p + f] = out[s];
    }
}
