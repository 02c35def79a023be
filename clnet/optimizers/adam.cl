// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), t = 1, 2, ... the step count.
__kernel void AdamUpdate(__global TYPE *weights, __global const TYPE *grads,
                         __global TYPE *first_moment, __global TYPE *second_moment,
                         const int total, const TYPE lr, const TYPE beta1, const TYPE beta2,
                         const TYPE eps, const int t, const TYPE l1, const TYPE l2)
{
    const int i = get_global_id(0) * 4;
    const TYPE4 w = ToVect4(weights, i, total);
    const TYPE4 g = regularized(ToVect4(grads, i, total), w, l1, l2);
    const TYPE4 m = beta1 * ToVect4(first_moment, i, total) + (1 - beta1) * g;
    const TYPE4 v = beta2 * ToVect4(second_moment, i, total) + (1 - beta2) * g * g;
    const TYPE m_correction = 1 - pown(beta1, t), v_correction = 1 - pown(beta2, t);
    D4ToArray(first_moment, m, i, total);
    D4ToArray(second_moment, v, i, total);
    D4ToArray(weights, w - lr * (m / m_correction) / (sqrt(v / v_correction) + eps), i, total);
}
