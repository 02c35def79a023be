// LocallyConnected1D: a 1-D convolution without weight sharing. Output position i sees the input
// window [i * stride, i * stride + kernel_size) and has its own (kernel_size * input_dim, filters)
// weights. With `outs` = output_length * filters output values per sample, the device keeps the
// kernel as (kernel_size * input_dim, outs): for a fixed tap, neighbouring outputs' weights are
// neighbours in memory, so work-items over outputs read them in whole vectors / coalesced lines.
// ACT (-D ACT=sigmoid ...) is the fused elementwise activation, as in the products' kernels (products/cpu_blocks.cl).

// z = b + sum over the window of x w; y = f(z). One work-item per (output value, sample).
__kernel void FeedForwardLocallyConnected(__global const TYPE *inputs,   // (rows, steps, input_dim)
                                          __global const TYPE *weights,  // (kernel_size * input_dim, outs)
                                          __global const TYPE *bias,     // (outs,)
                                          __global TYPE *pre,            // z, (rows, outs)
                                          __global TYPE *outputs,        // y, (rows, outs)
                                          const int outs, const int filters, const int steps,
                                          const int input_dim, const int kernel_size, const int stride,
                                          const TYPE a, const TYPE b)
{
    const int n = get_global_id(0), row = get_global_id(1);
    if (n >= outs)
        return;
    const int taps = kernel_size * input_dim;
    // The window is contiguous in the input: kernel_size steps of input_dim values.
    __global const TYPE *x = inputs + (row * steps + (n / filters) * stride) * input_dim;
    TYPE z = bias[n];
    for (int t = 0; t < taps; t++)
        z += x[t] * weights[t * outs + n];
    pre[row * outs + n] = z;
    outputs[row * outs + n] = ACT_FORWARD(z, a, b);
}

// delta = dL/dy f'(z) (or dL/dz as given, when the loss folded the activation), and the bias
// gradient, the sum of delta over the batch. One work-item per output value.
__kernel void CalcDeltaBiasLocallyConnected(__global const TYPE *output_gr,  // (rows, outs)
                                            __global const TYPE *outputs,    // y, (rows, outs)
                                            __global const TYPE *pre,        // z, (rows, outs)
                                            __global TYPE *delta,            // dL/dz, (rows, outs)
                                            __global TYPE *bias_gr,          // (outs,)
                                            const int rows, const int outs, const TYPE a, const TYPE b,
                                            const int apply_derivative)
{
    const int n = get_global_id(0);
    if (n >= outs)
        return;
    TYPE sum = 0;
    for (int row = 0; row < rows; row++) {
        const int i = row * outs + n;
        const TYPE d = apply_derivative ? output_gr[i] * ACT_DERIVATIVE(outputs[i], pre[i], a, b) : output_gr[i];
        delta[i] = d;
        sum += d;
    }
    bias_gr[n] = sum;
}

// dL/dw[t, n] = sum over the batch of x[window(n) + t] delta[n]: a work-item per weight.
__kernel void CalcDeltaWeightsLocallyConnected(__global const TYPE *inputs,  // (rows, steps, input_dim)
                                               __global const TYPE *delta,   // (rows, outs)
                                               __global TYPE *weights_gr,    // (kernel_size * input_dim, outs)
                                               const int rows, const int outs, const int filters,
                                               const int steps, const int input_dim, const int stride)
{
    const int n = get_global_id(0), t = get_global_id(1);
    if (n >= outs)
        return;
    const int first = (n / filters) * stride * input_dim + t;  // x's index within a sample
    TYPE sum = 0;
    for (int row = 0; row < rows; row++)
        sum += inputs[row * steps * input_dim + first] * delta[row * outs + n];
    weights_gr[t * outs + n] = sum;
}

// dL/dx[s, d] = sum over the output positions i whose window holds step s (tap k = s - i stride)
// of sum_f w[k * input_dim + d, (i, f)] delta[(i, f)]. One work-item per (input value, sample).
__kernel void CalcHiddenGradientLocallyConnected(__global const TYPE *delta,    // (rows, outs)
                                                 __global const TYPE *weights,  // (kernel_size * input_dim, outs)
                                                 __global TYPE *input_gr,       // (rows, steps, input_dim)
                                                 const int outs, const int filters, const int steps,
                                                 const int input_dim, const int kernel_size, const int stride)
{
    const int v = get_global_id(0), row = get_global_id(1);
    if (v >= steps * input_dim)
        return;
    const int s = v / input_dim, d = v - s * input_dim;
    const int positions = outs / filters;
    const int first = s < kernel_size ? 0 : (s - kernel_size) / stride + 1;  // ceil((s - K + 1) / stride)
    const int last = min(s / stride, positions - 1);
    TYPE sum = 0;
    for (int i = first; i <= last; i++) {
        __global const TYPE *w = weights + ((s - i * stride) * input_dim + d) * outs + i * filters;
        __global const TYPE *g = delta + row * outs + i * filters;
        for (int f = 0; f < filters; f++)
            sum += w[f] * g[f];
    }
    input_gr[row * steps * input_dim + v] = sum;
}
