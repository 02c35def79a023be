// Keras's ReLU layer: y = min(x, max_value) for x > threshold, negative_slope (x - threshold)
// otherwise (max_value None is passed as INFINITY). Its three parameters do not fit an
// activation family's (a, b), hence kernels of its own. Four elements per work-item through
// ToVect4/D4ToArray, as activations/elementwise.cl; `total` may be any size.

inline TYPE relu_layer(const TYPE x, const TYPE max_value, const TYPE slope, const TYPE threshold)
{
    return x > threshold ? fmin(x, max_value) : slope * (x - threshold);
}

// dy/dx: 1 between the threshold and max_value, 0 above max_value, negative_slope at or below
// the threshold. Read from x, since y alone cannot tell the pieces apart (y = 0 is both x at
// threshold 0 and any x <= threshold with slope 0).
inline TYPE relu_layer_derivative(const TYPE x, const TYPE max_value, const TYPE slope, const TYPE threshold)
{
    return x > threshold ? (x < max_value ? (TYPE)1 : (TYPE)0) : slope;
}

#define RELU4(f, v) (TYPE4)(f((v).s0, max_value, slope, threshold), f((v).s1, max_value, slope, threshold), \
                            f((v).s2, max_value, slope, threshold), f((v).s3, max_value, slope, threshold))

__kernel void FeedForwardReLU(__global const TYPE *inputs,   // (total,)
                              __global TYPE *outputs,        // (total,)
                              const int total, const TYPE max_value, const TYPE slope, const TYPE threshold)
{
    const int i = get_global_id(0) * 4;
    const TYPE4 x = ToVect4(inputs, i, total);
    D4ToArray(outputs, RELU4(relu_layer, x), i, total);
}

__kernel void CalcHiddenGradientReLU(__global const TYPE *inputs,     // x, (total,)
                                     __global const TYPE *output_gr,  // dL/dy, (total,)
                                     __global TYPE *input_gr,         // dL/dx, (total,)
                                     const int total, const TYPE max_value, const TYPE slope, const TYPE threshold)
{
    const int i = get_global_id(0) * 4;
    const TYPE4 x = ToVect4(inputs, i, total);
    D4ToArray(input_gr, RELU4(relu_layer_derivative, x) * ToVect4(output_gr, i, total), i, total);
}
