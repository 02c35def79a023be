// Convolution, channels_last, in two forms, chosen with the Dense products' tiles
// (clnet/products/forms.py; the weights keep their layout: W (K, filters), K = kh * kw * channels,
// row k = (i * kw + j) * channels + c, in the products' column panels, products/cpu_blocks.cl).
// This file holds what both forms share; a program pastes it before its form's file.
// - The CPU form (no TILE, convolution_blocks.cl): implicit matrix products that read the image
//   where the patch matrix would have been, so no patch matrix is ever written: FeedForwardConv
//   (bias and activation fused; z stored only where f' does not follow from y, as in Dense's CPU
//   form), CalcDeltaWeightsConv (block sums of dL/dW and dL/db over chunks of output positions,
//   delta formed from dL/dy, y and z by the first block) and SumDeltaWeightsConv (the sums of those,
//   and W laid out per input channel for the input gradient), CalcHiddenGradientConv (each input
//   pixel gathers from the windows that cover it). Three launches per training step, four with the
//   input gradient.
// - The GPU form (TILE, convolution_tiles.cl): implicit products in gpu_tiles.cl's local-memory
//   tiles. Row m = (row, oy, ox) of the patch matrix, column k, would hold x[row, oy*sh - pad_top +
//   i*dh, ox*sw - pad_left + j*dw, c] (0 outside the image); its slices are gathered from x as they
//   are staged, so it is never written: FeedForwardConv (bias and activation fused, y and f'(z)
//   stored), CalcDeltaWeightsConv (dL/dW and dL/db in one product, split-K slices added by
//   gpu_tiles.cl's SumSplits; with the input gradient, dL/dz too, in a frame of zeros),
//   CalcHiddenGradientConv (dL/dz gathered per pixel and tap from that frame). Two launches per
//   training step, three with the input gradient, one more where the weight gradient is split.
//   For a 3 x 3 kernel at stride 1 each product has a Winograd form of three launches, which the
//   tuner takes where it measures faster: F(4x4, 3x3) for the forward (winograd_forward.cl) and
//   the input gradient (winograd.cl, from the same frame), F(3x3, 4x4) for the weight gradient
//   (winograd_weights.cl, which writes the frame).
// 1-D convolutions run with height 1.
// Geometry, passed to every kernel as the same int arguments:
#define GEOMETRY const int height, const int width, const int channels, const int out_h, const int out_w, \
                 const int kh, const int kw, const int sh, const int sw, const int dh, const int dw,     \
                 const int pad_top, const int pad_left
#define GEOMETRY_ARGS height, width, channels, out_h, out_w, kh, kw, sh, sw, dh, dw, pad_top, pad_left
