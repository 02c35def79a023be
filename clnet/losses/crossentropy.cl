// Cross-entropy losses, one work-item per sample (row). Writes dL/dp for the mean loss over the
// batch (scale = 1 / rows), and the sample's loss and accuracy at sample_loss[first + row].
// With fold_activation the gradient is taken with respect to the logits instead: softmax then
// categorical cross-entropy gives p * sum(t) - t, sigmoid then binary cross-entropy gives p - t,
// which is both cheaper and exact where p saturates.

#define CATEGORICAL 0
#define BINARY 1

__kernel void CalcOutputGradient(__global const TYPE *target,     // t (rows, cols)
                                 __global const TYPE *outputs,    // p (rows, cols)
                                 __global TYPE *gradients,        // dL/dp or dL/dlogits (rows, cols)
                                 __global TYPE *sample_loss, __global TYPE *sample_hit,
                                 const int first, const int cols, const int loss_function,
                                 const int fold_activation, const TYPE scale)
{
    const int row = get_global_id(0);
    const __global TYPE *t = target + row * cols;
    const __global TYPE *p = outputs + row * cols;
    __global TYPE *g = gradients + row * cols;
    TYPE loss = 0;
    if (loss_function == CATEGORICAL) {
        TYPE t_sum = 0;
        for (int j = 0; j < cols; j++)
            t_sum += t[j];
        for (int j = 0; j < cols; j++) {
            const TYPE pj = clamp(p[j], EPSILON, 1 - EPSILON);
            loss -= t[j] * log(pj);
            g[j] = scale * (fold_activation ? p[j] * t_sum - t[j]
                                            : (p[j] == pj ? -t[j] / pj : 0));
        }
        sample_hit[first + row] = argmax_hit(p, t, cols);
    } else {
        for (int j = 0; j < cols; j++) {
            const TYPE pj = clamp(p[j], EPSILON, 1 - EPSILON);
            loss -= t[j] * log(pj) + (1 - t[j]) * log(1 - pj);
            g[j] = scale / cols * (fold_activation ? p[j] - t[j]
                                                   : (p[j] == pj ? (pj - t[j]) / (pj * (1 - pj)) : 0));
        }
        loss /= cols;
        sample_hit[first + row] = binary_hit(p, t, cols);
    }
    sample_loss[first + row] = loss;
}
