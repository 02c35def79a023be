// Regression losses' position_loss (the kernel: losses/output_gradient.cl): the mean over the last
// axis of (p - t)^2 (MSE) or |p - t| (MAE); the accuracy is the argmax match, or p and t on the
// same side of 0.5 for one column.

#define MSE 0
#define MAE 1

// One position's loss and its gradient g (the kernel: losses/output_gradient.cl); *hit is its
// accuracy.
TYPE position_loss(const __global TYPE *target, const __global TYPE *p, __global TYPE *g, const int token,
                   const int cols, const int loss_function, const int fold_activation, const TYPE scale, TYPE *hit)
{
    const __global TYPE *t = target + token * cols;
    TYPE loss = 0;
    for (int j = 0; j < cols; j++) {
        const TYPE e = p[j] - t[j];
        loss += loss_function == MSE ? e * e : fabs(e);
        g[j] = scale / cols * (loss_function == MSE ? 2 * e : sign(e));
    }
    *hit = cols == 1 ? binary_hit(p, t, cols) : argmax_hit(p, t, cols);
    return loss / cols;
}
