// ZeroPadding2D: (rows, height, width, channels) -> (rows, top + height + bottom, left + width
// + right, channels), zeros around; the backward pass crops the gradient back. One work-item per
// element of the larger (forward) or the smaller (backward) tensor; dimension 0 walks a row of
// pixels' channels, dimension 1 the image rows of the whole batch.

__kernel void FeedForwardZeroPadding(__global const TYPE *inputs,   // (rows, height, width, channels)
                                     __global TYPE *outputs,        // (rows, out_h, out_w, channels)
                                     const int height, const int width, const int channels,
                                     const int top, const int left, const int out_h, const int out_w)
{
    const int e = get_global_id(0), line = get_global_id(1);  // e < out_w * channels, line < rows * out_h
    if (e >= out_w * channels)
        return;
    const int y = line % out_h - top, x = e / channels - left, row = line / out_h;
    const int inside = y >= 0 && y < height && x >= 0 && x < width;
    outputs[(long)line * out_w * channels + e] =
        inside ? inputs[((long)(row * height + y) * width + x) * channels + e % channels] : 0;
}

__kernel void CalcHiddenGradientZeroPadding(__global const TYPE *output_gr,  // (rows, out_h, out_w, channels)
                                            __global TYPE *input_gr,         // (rows, height, width, channels)
                                            const int height, const int width, const int channels,
                                            const int top, const int left, const int out_h, const int out_w)
{
    const int e = get_global_id(0), line = get_global_id(1);  // e < width * channels, line < rows * height
    if (e >= width * channels)
        return;
    const int y = line % height + top, row = line / height;
    input_gr[(long)line * width * channels + e] =
        output_gr[((long)(row * out_h + y) * out_w + left) * channels + e];
}
