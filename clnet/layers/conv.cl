// Convolution as a matrix product over patches (im2col): the patch of output position m =
// (row, oy, ox) is the row m of a (rows * out_h * out_w, kh * kw * channels) matrix whose
// column k = (i * kw + j) * channels + c holds x[row, oy*sh - pad_top + i*dh, ox*sw - pad_left
// + j*dw, c] (0 outside the image). Times the kernel in Keras layout (kh, kw, channels, filters)
// seen as a (kh * kw * channels, filters) matrix, that is the channels_last output, which the
// Dense products of dense.cl compute (bias and activation fused); these kernels only move data
// into and out of patches. 1-D convolutions run with height 1.
// Geometry, passed to every kernel as the same int arguments:
#define GEOMETRY const int height, const int width, const int channels, const int out_h, const int out_w, \
                 const int kh, const int kw, const int sh, const int sw, const int dh, const int dw,     \
                 const int pad_top, const int pad_left

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
__kernel void CalcHiddenGradientConv(__global const TYPE *patch_gr,  // dL/d(patches) (rows * out_h * out_w, K)
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
