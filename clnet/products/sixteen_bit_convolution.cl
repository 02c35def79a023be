// A convolution's products on operands stored in 16 bits (sixteen_bit_convolution.py): the patch
// matrix is written once, in 16 bits, as sixteen_bit.cl's dense products read their x, and they
// compute the layer's step as a dense layer's over (samples x positions) rows of kh * kw *
// channels (pasted after tensor_cores.cl, sixteen_bit_layout.cl and convolution.cl). The implicit
// products of the float forms gather x as they stage it; the tensor cores' bulk copies take whole
// atoms, so here the patches are written out: twice the bytes of x per tap in 16 bits, read at the
// tensor cores' rate.

// Work-item e's eight columns of a patch matrix of `rows` rows by kh * kw * `depth` columns: row m,
// first column k, tap (i, j) and first channel (or filter) d of the tap; false past the matrix.
// In 32 bits (a matrix's chunks number fewer than 2^31): a GPU divides 64-bit integers in software.
inline bool patch_chunk(const int e, const int rows, const int depth, const int kh, const int kw, int *m, int *k,
                        int *i, int *j, int *d)
{
    const int chunks = kh * kw * depth / 8;
    if (e >= rows * chunks)
        return false;
    *m = e / chunks;
    *k = 8 * (e - *m * chunks);
    const int tap = *k / depth;
    *d = *k - tap * depth;
    *i = tap / kw;
    *j = tap - *i * kw;
    return true;
}

// (sample, y, x) of row m of an image's rows (sample, y, x) of `height` x `width`.
inline int3 image_place(const int m, const int height, const int width)
{
    const int pixel = m % (height * width), y = pixel / width;
    return (int3)(m / (height * width), y, pixel - y * width);
}

// The patch matrix of x (samples, height, width, channels) in 16 bits, as atoms (`atom_rows` of
// them down): row m = (sample, oy, ox), column k = (i * kw + j) * channels + c holds x[sample, oy *
// sh - pad_top + i * dh, ox * sw - pad_left + j * dw, c], 0 outside the image (convolution.cl's
// layout of W's rows). Eight columns a work-item: with channels a multiple of 8 they are eight
// channels of one tap, two 16-byte loads of x (or none) and one 16-byte store, into one chunk of an
// atom, as RoundToSixteenBits stores.
__kernel void PatchesToSixteenBits(const __global float *x, __global ushort *patches, const int rows,
                                   const int atom_rows, GEOMETRY)
{
    int m, k, i, j, c;
    if (!patch_chunk(get_global_id(0), rows, channels, kh, kw, &m, &k, &i, &j, &c))
        return;
    const int3 at = image_place(m, out_h, out_w);  // (sample, oy, ox)
    const int sample = at.s0, y = at.s1 * sh - pad_top + i * dh, xx = at.s2 * sw - pad_left + j * dw;
    float4 lo = 0, hi = 0;
    if (y >= 0 && y < height && xx >= 0 && xx < width) {
        const __global float4 *source =
            (const __global float4 *)(x + (((long)sample * height + y) * width + xx) * channels + c);
        lo = source[0];
        hi = source[1];
    }
    uint p0, p1, p2, p3;
    PACK(p0, lo.s0, lo.s1);
    PACK(p1, lo.s2, lo.s3);
    PACK(p2, hi.s0, hi.s1);
    PACK(p3, hi.s2, hi.s3);
    *(__global uint4 *)(patches + atom_index(m, k, atom_rows)) = (uint4)(p0, p1, p2, p3);
}

// At stride 1, dL/dx is the forward's product over the patches of dL/dz: dx[n, y, x, c] = sum over
// taps (i, j) and filters f of dz[n, y + pad_top - i * dh, x + pad_left - j * dw, f] W[i, j, c, f]
// (0 outside the outputs). Row m = (sample, y, x) of the input image, column k = (i * kw + j) *
// filters + f: the 16-bit dL/dz the weight gradient's launch wrote (`delta`, atoms of (samples x
// positions, filters), `delta_atom_rows` down) copied a 16-byte chunk (eight filters) at a time
// into `patches` (`atom_rows` down): half the bytes of the patch matrix's float gradient, which
// the gather below adds at larger strides.
__kernel void DeltaPatchesToSixteenBits(const __global ushort *delta, __global ushort *patches, const int rows,
                                        const int filters, const int delta_atom_rows, const int atom_rows, GEOMETRY)
{
    int m, k, i, j, f;
    if (!patch_chunk(get_global_id(0), rows, filters, kh, kw, &m, &k, &i, &j, &f))
        return;
    const int3 at = image_place(m, height, width);  // (sample, y, x)
    const int sample = at.s0, oy = at.s1 + pad_top - i * dh, ox = at.s2 + pad_left - j * dw;
    uint4 chunk = 0;
    if (oy >= 0 && oy < out_h && ox >= 0 && ox < out_w)
        chunk = *(const __global uint4 *)(delta + atom_index((sample * out_h + oy) * out_w + ox, f, delta_atom_rows));
    *(__global uint4 *)(patches + atom_index(m, k, atom_rows)) = chunk;
}

// The other operand of that product: W (kh * kw * channels, filters; row (i * kw + j) * channels +
// c, `panel` floats apart) rounded to 16 bits as the atoms of (kh * kw * filters, channels), row (i
// * kw + j) * filters + f. Eight channels a work-item (eight loads `panel` apart, one 16-byte store).
__kernel void TransposedWeightsToSixteenBits(const __global float *weights, __global ushort *transposed,
                                             const int filters, const int panel, const int atom_rows, GEOMETRY)
{
    const int chunks = channels / 8, e = get_global_id(0);
    if (e >= kh * kw * filters * chunks)
        return;
    const int row = e / chunks, c = 8 * (e - row * chunks), tap = row / filters, f = row - tap * filters;
    const __global float *w = weights + (long)(tap * channels + c) * panel + f;
    uint p0, p1, p2, p3;
    PACK(p0, w[0], w[panel]);
    PACK(p1, w[2 * panel], w[3 * panel]);
    PACK(p2, w[4 * panel], w[5 * panel]);
    PACK(p3, w[6 * panel], w[7 * panel]);
    *(__global uint4 *)(transposed + atom_index(row, c, atom_rows)) = (uint4)(p0, p1, p2, p3);
}

// dL/dx (samples, height, width, channels) from the patch matrix's gradient (float, rows of kh *
// kw * channels, row-major): each input element sums the columns of the windows that cover it.
// Four channels a work-item, channels innermost (neighbouring work-items read neighbouring
// columns, 16 bytes each), indices in 32 bits (the quads number fewer than 2^31). Every element
// is written, 0 where no window covers it.
__kernel void PatchGradientsToInputs(const __global float *patch_gr, __global float *input_gr, const int samples,
                                     GEOMETRY)
{
    const int quads = channels / 4, e = get_global_id(0);
    if (e >= samples * height * width * quads)
        return;
    const int pixel = e / quads, c = 4 * (e - pixel * quads);
    const int row = pixel / width, xx = pixel - row * width, sample = row / height, y = row - sample * height;
    const int patch = kh * kw * channels;
    float4 sum = 0;
    for (int i = 0; i < kh; i++) {
        const int ty = y + pad_top - i * dh;  // oy * sh, if this tap of a window covers y
        const int oy = ty / sh;
        if (ty < 0 || oy * sh != ty || oy >= out_h)
            continue;
        for (int j = 0; j < kw; j++) {
            const int tx = xx + pad_left - j * dw, ox = tx / sw;
            if (tx < 0 || ox * sw != tx || ox >= out_w)
                continue;
            sum += vload4(0, patch_gr + (((long)sample * out_h + oy) * out_w + ox) * patch + (i * kw + j) * channels
                                + c);
        }
    }
    vstore4(sum, 0, input_gr + 4 * (long)e);
}
