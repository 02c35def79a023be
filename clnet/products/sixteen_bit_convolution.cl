// A convolution's products on operands stored in 16 bits (sixteen_bit_convolution.py): the patch
// matrix is written once, in 16 bits, as sixteen_bit.cl's dense products read their x, and they
// compute the layer's step as a dense layer's over (samples x positions) rows of kh * kw *
// channels (pasted after tensor_cores.cl, sixteen_bit_layout.cl and convolution.cl). The implicit
// products of the float forms gather x as they stage it; the tensor cores' bulk copies take whole
// atoms, so here the patches are written out: twice the bytes of x per tap in 16 bits, read at the
// tensor cores' rate.

// The patch matrix of x (samples, height, width, channels) in 16 bits, as atoms (`atom_rows` of
// them down): row m = (sample, oy, ox), column k = (i * kw + j) * channels + c holds x[sample, oy *
// sh - pad_top + i * dh, ox * sw - pad_left + j * dw, c], 0 outside the image (convolution.cl's
// layout of W's rows). Eight columns a work-item: with channels a multiple of 8 they are eight
// channels of one tap, two 16-byte loads of x (or none) and one 16-byte store, into one chunk of an
// atom, as RoundToSixteenBits stores. Indices in 32 bits (the chunks number fewer than 2^31): a
// GPU divides 64-bit integers in software.
__kernel void PatchesToSixteenBits(const __global float *x, __global ushort *patches, const int rows,
                                   const int atom_rows, GEOMETRY)
{
    const int chunks = kh * kw * channels / 8, e = get_global_id(0);
    if (e >= rows * chunks)
        return;
    const int m = e / chunks, k = 8 * (e - m * chunks);
    const int tap = k / channels, c = k - tap * channels, i = tap / kw, j = tap - i * kw;
    const int position = m % (out_h * out_w), sample = m / (out_h * out_w);
    const int oy = position / out_w, ox = position - oy * out_w;
    const int y = oy * sh - pad_top + i * dh, xx = ox * sw - pad_left + j * dw;
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
