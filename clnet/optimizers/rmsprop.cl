// s = rho s + (1 - rho) g^2; w -= lr g / (sqrt(s) + eps)
__kernel void RMSPropUpdate(__global TYPE *weights, __global const TYPE *grads, __global TYPE *mean_square,
                            const int total, const TYPE lr, const TYPE rho, const TYPE eps,
                            const TYPE l1, const TYPE l2)
{
    const int i = get_global_id(0) * 4;
    const TYPE4 w = ToVect4(weights, i, total);
    const TYPE4 g = regularized(ToVect4(grads, i, total), w, l1, l2);
    const TYPE4 s = rho * ToVect4(mean_square, i, total) + (1 - rho) * g * g;
    D4ToArray(mean_square, s, i, total);
    D4ToArray(weights, w - lr * g / (sqrt(s) + eps), i, total);
}
