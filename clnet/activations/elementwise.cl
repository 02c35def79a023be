// The standalone kernels of an elementwise activation family, named as the book names them
// (-D ACT=sigmoid -D ACT_KERNEL=Sigmoid gives SigmoidActivation and SigmoidDerivative).
// Each work-item handles four elements through ToVect4/D4ToArray; `total` may be any size.

#define APPLY4(f, v, a, b) (TYPE4)(f((v).s0, a, b), f((v).s1, a, b), f((v).s2, a, b), f((v).s3, a, b))

__kernel void CAT(ACT_KERNEL, Activation)(__global const TYPE *inputs,   // (total,)
                                          __global TYPE *outputs,        // (total,)
                                          const int total, const TYPE a, const TYPE b)
{
    const int i = get_global_id(0) * 4;
    const TYPE4 x = ToVect4(inputs, i, total);
    D4ToArray(outputs, APPLY4(ACT_FORWARD, x, a, b), i, total);
}

__kernel void CAT(ACT_KERNEL, Derivative)(__global const TYPE *outputs,    // y = f(x), (total,)
                                          __global const TYPE *inputs,     // x, (total,)
                                          __global const TYPE *output_gr,  // dL/dy, (total,)
                                          __global TYPE *input_gr,         // dL/dx, (total,)
                                          const int total, const TYPE a, const TYPE b)
{
    const int i = get_global_id(0) * 4;
    const TYPE4 y = ToVect4(outputs, i, total);
    const TYPE4 x = ToVect4(inputs, i, total);
    const TYPE4 d = (TYPE4)(ACT_DERIVATIVE(y.s0, x.s0, a, b), ACT_DERIVATIVE(y.s1, x.s1, a, b),
                            ACT_DERIVATIVE(y.s2, x.s2, a, b), ACT_DERIVATIVE(y.s3, x.s3, a, b));
    D4ToArray(input_gr, d * ToVect4(output_gr, i, total), i, total);
}
