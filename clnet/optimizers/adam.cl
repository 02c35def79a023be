// Keras's Adam: m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2); w -= alpha m / (sqrt(v) + eps), the
// bias correction folded into the step size on the host: alpha = lr sqrt(1 - b2^t) / (1 - b1^t),
// t = 1, 2, ... With -D AMSGRAD=1 the root is of v_max = max(v_max, v) instead of v.
UPDATE_KERNEL void AdamUpdate(__global TYPE *weights, __global const TYPE *grads,
                              __global TYPE *first_moment, __global TYPE *second_moment,
#if AMSGRAD
                              __global TYPE *max_second_moment,
#endif
                              const int total, const TYPE alpha, const TYPE beta1, const TYPE beta2,
                              const TYPE eps, UPDATE_ARGUMENTS)
{
    SKIP_IF_NOT_FINITE;
    const int i = get_global_id(0) * 4;
    const TYPE4 w0 = ToVect4(weights, i, total);
    const TYPE4 g = keras_gradient(grads, w0, i, total, l1, l2, clip_value GRADIENT_PASS);
    const TYPE4 w = w0 - w0 * decay;
    TYPE4 m = ToVect4(first_moment, i, total), v = ToVect4(second_moment, i, total);
    m += (g - m) * (1 - beta1);
    v += (g * g - v) * (1 - beta2);
    D4ToArray(first_moment, m, i, total);
    D4ToArray(second_moment, v, i, total);
#if AMSGRAD
    v = fmax(ToVect4(max_second_moment, i, total), v);
    D4ToArray(max_second_moment, v, i, total);
#endif
    D4ToArray(weights, w - m * alpha / (sqrt(v) + eps), i, total);
}
