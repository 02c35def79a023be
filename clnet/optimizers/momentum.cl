// v = momentum v - lr g; w += v
__kernel void MomentumUpdate(__global TYPE *weights, __global const TYPE *grads, __global TYPE *velocity,
                             const int total, const TYPE lr, const TYPE momentum,
                             const TYPE l1, const TYPE l2)
{
    const int i = get_global_id(0) * 4;
    const TYPE4 w = ToVect4(weights, i, total);
    const TYPE4 g = regularized(ToVect4(grads, i, total), w, l1, l2);
    const TYPE4 v = momentum * ToVect4(velocity, i, total) - lr * g;
    D4ToArray(velocity, v, i, total);
    D4ToArray(weights, w + v, i, total);
}
