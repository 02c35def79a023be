// The forward of a 3 x 3, stride-1, undilated convolution by Winograd's F(4x4, 3x3): the tiled (GPU)
// form's alternative to convolution_tiles.cl's FeedForwardConv, which the tuner takes where it
// measures faster. Pasted after the fused activation, convolution.cl (GEOMETRY),
// winograd_transforms.cl and winograd.cl (whose WinogradProducts it runs).
//
// z[oy, ox, f] = b[f] + sum over taps (i, j) and channels c of x[oy - pad_top + i, ox - pad_left + j, c]
// W[i, j, c, f]: per channel and filter the correlation of x with the kernel, so F(4x4, 3x3) makes each
// 4 x 4 tile of z from the 6 x 6 patch of x under it with 36 products where the direct sum takes 144:
//   V = B^T d B (6 x 6 per tile and channel), U = G W G^T (6 x 6 per filter and channel),
//   M[xi] = V[xi] U[xi]^T (WinogradProducts: tiles x channels_p times channels_p x filters_p),
//   z's tile = A^T M A + b, and y = f(z) and f'(z) stored as FeedForwardConv stores them.
// V and U run along the channels, the products' depth, padded with zeros to channels_p, a multiple
// of 4 (the products copy runs of 4). Three launches: WinogradForwardTransforms (V and U),
// WinogradProducts, WinogradForward. Tiles are numbered t = (row * tiles_h + ty) * tiles_w + tx over
// z's rows; a tile's positions past out_h or out_w are computed from zeros and not stored.

// Work-item (c, t) for t < tiles: V[xi][t][c] from tile t's 6 x 6 patch of x (zeros in the padding and
// past `channels`). Work-item (f, tiles + c): U[xi][f][c] from W (K, filters_p), row (tap * channels +
// c). Both read along c or f, so neighbouring work-items read neighbouring addresses; U, a few
// kilobytes, is written across.
__kernel void WinogradForwardTransforms(__global const TYPE *inputs,   // x (rows, height, width, channels)
                                        __global const TYPE *weights,  // W (9 * channels, filters_p)
                                        __global TYPE *tiles_v,        // V (36, tiles, channels_p)
                                        __global TYPE *filters_u,      // U (36, filters_p, channels_p)
                                        const int tiles, const int tiles_h, const int tiles_w, const int channels_p,
                                        const int filters_p, GEOMETRY)
{
    const int e = get_global_id(0), t = get_global_id(1);
    if (t < tiles) {
        if (e >= channels_p)
            return;
        const long step = (long)tiles * channels_p;
        __global TYPE *v = tiles_v + (long)t * channels_p + e;
        if (e >= channels) {
            for (int xi = 0; xi < 36; xi++)
                v[xi * step] = 0;
            return;
        }
        const int line = t / tiles_w, row = line / tiles_h;
        patch_transform(inputs + (long)row * height * width * channels + e, height, width, channels,
                        (line - row * tiles_h) * 4 - pad_top, (t - line * tiles_w) * 4 - pad_left, v, step);
        return;
    }
    const int c = t - tiles, f = e;
    if (c >= channels_p || f >= filters_p)
        return;
    __global TYPE *u = filters_u + (long)f * channels_p + c;
    const long step = (long)filters_p * channels_p;
    if (c >= channels) {
        for (int xi = 0; xi < 36; xi++)
            u[xi * step] = 0;
        return;
    }
    TYPE g[3][6], column[6], out[6];
    for (int s = 0; s < 3; s++) {  // G W, a column at a time
        for (int r = 0; r < 3; r++)
            column[r] = weights[((r * 3 + s) * (long)channels + c) * filters_p + f];
        FILTER_TRANSFORM(column, out);
        for (int r = 0; r < 6; r++)
            g[s][r] = out[r];
    }
    for (int r = 0; r < 6; r++) {  // (G W) G^T, a row at a time
        const TYPE row[3] = {g[0][r], g[1][r], g[2][r]};
        FILTER_TRANSFORM(row, out);
        for (int s = 0; s < 6; s++)
            u[(r * 6 + s) * step] = out[s];
    }
}

// Work-item (f, t): z's 4 x 4 tile t of filter f, A^T M A + b, and y = f(z) and f'(z) stored where
// they fall inside z.
__kernel void WinogradForward(__global const TYPE *products,  // M (36, tiles, filters_p)
                              __global const TYPE *bias,      // b (filters_p)
                              __global TYPE *outputs,         // y = f(z) (rows, out_h, out_w, filters)
                              __global TYPE *slopes,          // f'(z), the same shape
                              const int tiles, const int tiles_h, const int tiles_w, const int filters,
                              const int filters_p, const int out_h, const int out_w, const TYPE a, const TYPE b)
{
    const int f = get_global_id(0), t = get_global_id(1);
    if (f >= filters || t >= tiles)
        return;
    TYPE rows[4][6], out[4];
    output_rows(products + (long)t * filters_p + f, (long)tiles * filters_p, rows);
    const int line = t / tiles_w, row = line / tiles_h;
    const int oy0 = (line - row * tiles_h) * 4, ox0 = (t - line * tiles_w) * 4;
    const TYPE shift = bias[f];
    for (int r = 0; r < 4 && oy0 + r < out_h; r++) {  // (A^T M) A, a row at a time
        OUTPUT_TRANSFORM(rows[r], out);
        for (int s = 0; s < 4 && ox0 + s < out_w; s++) {
            const TYPE z = out[s] + shift, y = ACT_FORWARD(z, a, b);
            const long o = (((long)row * out_h + oy0 + r) * out_w + ox0 + s) * filters + f;
            outputs[o] = y;
            slopes[o] = ACT_DERIVATIVE(y, z, a, b);
        }
    }
}
