// Keras's RMSprop: s = rho s + (1 - rho) g^2; step = lr g / sqrt(s + eps) (eps inside the root).
// -D CENTERED=1: also a = rho a + (1 - rho) g, and the root is of s - a^2 + eps.
// -D MOMENTUM=1: m = momentum m + step; w -= m. Otherwise w -= step.
UPDATE_KERNEL void RMSPropUpdate(__global TYPE *weights, __global const TYPE *grads, __global TYPE *mean_square,
#if CENTERED
                                 __global TYPE *mean_grad,
#endif
#if MOMENTUM
                                 __global TYPE *momentum_buffer,
#endif
                                 const int total, const TYPE lr, const TYPE rho, const TYPE eps,
#if MOMENTUM
                                 const TYPE momentum,
#endif
                                 UPDATE_ARGUMENTS)
{
    SKIP_IF_NOT_FINITE;
    const int i = get_global_id(0) * 4;
    const TYPE4 w0 = ToVect4(weights, i, total);
    const TYPE4 g = keras_gradient(grads, w0, i, total, l1, l2, clip_value GRADIENT_PASS);
    const TYPE4 w = w0 - w0 * decay;
    const TYPE4 s = rho * ToVect4(mean_square, i, total) + (1 - rho) * g * g;
    D4ToArray(mean_square, s, i, total);
#if CENTERED
    const TYPE4 a = rho * ToVect4(mean_grad, i, total) + (1 - rho) * g;
    D4ToArray(mean_grad, a, i, total);
    const TYPE4 step = lr * g / sqrt(s - a * a + eps);
#else
    const TYPE4 step = lr * g / sqrt(s + eps);
#endif
#if MOMENTUM
    const TYPE4 m = momentum * ToVect4(momentum_buffer, i, total) + step;
    D4ToArray(momentum_buffer, m, i, total);
    D4ToArray(weights, w - m, i, total);
#else
    D4ToArray(weights, w - step, i, total);
#endif
}
