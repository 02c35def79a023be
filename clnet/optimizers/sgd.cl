// w -= lr g
__kernel void SGDUpdate(__global TYPE *weights, __global const TYPE *grads, const int total,
                        const TYPE lr, const TYPE l1, const TYPE l2)
{
    const int i = get_global_id(0) * 4;
    const TYPE4 w = ToVect4(weights, i, total);
    const TYPE4 g = regularized(ToVect4(grads, i, total), w, l1, l2);
    D4ToArray(weights, w - lr * g, i, total);
}
