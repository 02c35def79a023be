// UpSampling1D/2D: (rows, height, width, channels) -> (rows, height * up_h, width * up_w,
// channels), each pixel repeated up_h x up_w times (nearest); the backward pass sums each
// block's gradients into its pixel. A 1-D layer is the 2-D one of height 1. One work-item per
// element of the larger (forward) or the smaller (backward) tensor; dimension 0 walks a row of
// pixels' channels, so that neighbouring work-items touch neighbouring addresses, dimension 1
// the image rows of the whole batch.

__kernel void FeedForwardUpSampling(__global const TYPE *inputs,   // (rows, height, width, channels)
                                    __global TYPE *outputs,        // (rows, height * up_h, width * up_w, channels)
                                    const int width, const int channels,
                                    const int up_h, const int up_w)
{
    const int e = get_global_id(0), line = get_global_id(1);  // e < out_w * channels, line < rows * height * up_h
    const int out_w = width * up_w;
    if (e >= out_w * channels)
        return;
    // An image's output lines are up_h per input line, so line / up_h is the input line (of the
    // same sample) it repeats.
    const int x = e / channels / up_w;
    outputs[(long)line * out_w * channels + e] =
        inputs[((long)(line / up_h) * width + x) * channels + e % channels];
}

__kernel void CalcHiddenGradientUpSampling(__global const TYPE *output_gr,  // (rows, height * up_h, width * up_w, channels)
                                           __global TYPE *input_gr,         // (rows, height, width, channels)
                                           const int width, const int channels,
                                           const int up_h, const int up_w)
{
    const int e = get_global_id(0), line = get_global_id(1);  // e < width * channels, line < rows * height
    if (e >= width * channels)
        return;
    const int out_w = width * up_w, x = e / channels;
    const __global TYPE *block = output_gr + ((long)line * up_h * out_w + x * up_w) * channels + e % channels;
    TYPE sum = 0;
    for (int i = 0; i < up_h; i++)
        for (int j = 0; j < up_w; j++)
            sum += block[((long)i * out_w + j) * channels];
    input_gr[(long)line * width * channels + e] = sum;
}
