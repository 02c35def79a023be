// G += g^2; w -= lr g / (sqrt(G) + eps)
__kernel void AdaGradUpdate(__global TYPE *weights, __global const TYPE *grads, __global TYPE *accumulator,
                            const int total, const TYPE lr, const TYPE eps,
                            const TYPE l1, const TYPE l2)
{
    const int i = get_global_id(0) * 4;
    const TYPE4 w = ToVect4(weights, i, total);
    const TYPE4 g = regularized(ToVect4(grads, i, total), w, l1, l2);
    const TYPE4 G = ToVect4(accumulator, i, total) + g * g;
    D4ToArray(accumulator, G, i, total);
    D4ToArray(weights, w - lr * g / (sqrt(G) + eps), i, total);
}
