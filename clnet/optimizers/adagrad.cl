// Keras's Adagrad: G += g^2; w -= lr g / sqrt(G + eps), G starting at initial_accumulator_value.
UPDATE_KERNEL void AdaGradUpdate(__global TYPE *weights, __global const TYPE *grads, __global TYPE *accumulator,
                                 const int total, const TYPE lr, const TYPE eps, UPDATE_ARGUMENTS)
{
    SKIP_IF_NOT_FINITE;
    const int i = get_global_id(0) * 4;
    const TYPE4 w0 = ToVect4(weights, i, total);
    const TYPE4 g = keras_gradient(grads, w0, i, total, l1, l2, clip_value GRADIENT_PASS);
    const TYPE4 w = w0 - w0 * decay;
    const TYPE4 G = ToVect4(accumulator, i, total) + g * g;
    D4ToArray(accumulator, G, i, total);
    D4ToArray(weights, w - lr * g / sqrt(G + eps), i, total);
}
