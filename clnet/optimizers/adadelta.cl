// Keras's Adadelta (Zeiler 2012): the running mean of squared *updates* sets the step's unit.
// Eg = rho Eg + (1 - rho) g^2; dx = -(sqrt(Ex + eps) g) / sqrt(Eg + eps);
// Ex = rho Ex + (1 - rho) dx^2; w += lr dx (Zeiler's method is lr = 1).
UPDATE_KERNEL void AdaDeltaUpdate(__global TYPE *weights, __global const TYPE *grads,
                                  __global TYPE *mean_square_grad, __global TYPE *mean_square_update,
                                  const int total, const TYPE lr, const TYPE rho, const TYPE eps, UPDATE_ARGUMENTS)
{
    SKIP_IF_NOT_FINITE;
    const int i = get_global_id(0) * 4;
    const TYPE4 w0 = ToVect4(weights, i, total);
    const TYPE4 g = keras_gradient(grads, w0, i, total, l1, l2, clip_value GRADIENT_PASS);
    const TYPE4 w = w0 - w0 * decay;
    const TYPE4 Eg = rho * ToVect4(mean_square_grad, i, total) + (1 - rho) * g * g;
    const TYPE4 Ex = ToVect4(mean_square_update, i, total);
    const TYPE4 dx = -(sqrt(Ex + eps) * g) / sqrt(Eg + eps);
    D4ToArray(mean_square_grad, Eg, i, total);
    D4ToArray(mean_square_update, rho * Ex + (1 - rho) * dx * dx, i, total);
    D4ToArray(weights, w + lr * dx, i, total);
}
