// Regression losses, one work-item per sample (row): the mean over columns of (p - t)^2 (MSE)
// or |p - t| (MAE). Writes dL/dp for the mean loss over the batch (scale = 1 / rows) and the
// sample's loss and accuracy (argmax match, or p and t on the same side of 0.5 for one column).

#define MSE 0
#define MAE 1

__kernel void CalcOutputGradient(__global const TYPE *target,     // t (rows, cols)
                                 __global const TYPE *outputs,    // p (rows, cols)
                                 __global TYPE *gradients,        // dL/dp (rows, cols)
                                 __global TYPE *sample_loss, __global TYPE *sample_hit,
                                 const int first, const int cols, const int loss_function,
                                 const int fold_activation, const TYPE scale)
{
    const int row = get_global_id(0);
    const __global TYPE *t = target + row * cols;
    const __global TYPE *p = outputs + row * cols;
    __global TYPE *g = gradients + row * cols;
    TYPE loss = 0;
    for (int j = 0; j < cols; j++) {
        const TYPE e = p[j] - t[j];
        loss += loss_function == MSE ? e * e : fabs(e);
        g[j] = scale / cols * (loss_function == MSE ? 2 * e : sign(e));
    }
    sample_loss[first + row] = loss / cols;
    sample_hit[first + row] = cols == 1 ? binary_hit(p, t, cols) : argmax_hit(p, t, cols);
}
