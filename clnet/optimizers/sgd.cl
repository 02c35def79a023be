// Keras's SGD. Plain: w -= lr g. With -D MOMENTUM=1: v = momentum v - lr g, then w += v, or with
// nesterov w += momentum v - lr g (the new v).
UPDATE_KERNEL void SGDUpdate(__global TYPE *weights, __global const TYPE *grads,
#if MOMENTUM
                             __global TYPE *velocity,
#endif
                             const int total, const TYPE lr,
#if MOMENTUM
                             const TYPE momentum, const int nesterov,
#endif
                             UPDATE_ARGUMENTS)
{
    SKIP_IF_NOT_FINITE;
    const int i = get_global_id(0) * 4;
    const TYPE4 w0 = ToVect4(weights, i, total);
    const TYPE4 g = keras_gradient(grads, w0, i, total, l1, l2, clip_value GRADIENT_PASS);
    const TYPE4 w = w0 - w0 * decay;
#if MOMENTUM
    const TYPE4 v = momentum * ToVect4(velocity, i, total) - lr * g;
    D4ToArray(velocity, v, i, total);
    D4ToArray(weights, w + (nesterov ? momentum * v - lr * g : v), i, total);
#else
    D4ToArray(weights, w - lr * g, i, total);
#endif
}
