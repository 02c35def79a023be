// Regression losses, `blocks` work-groups per sample whose items take its positions in turn (see
// crossentropy.cl): the mean over the last axis of (p - t)^2 (MSE) or |p - t| (MAE), averaged
// over positions. Writes dL/dp for the mean loss over the batch (scale = 1 / (rows * positions))
// and the sample's loss and accuracy (argmax match, or p and t on the same side of 0.5 for one column).

#define MSE 0
#define MAE 1

__kernel void CalcOutputGradient(__global const TYPE *target,     // t (rows, positions, cols)
                                 __global const TYPE *outputs,    // p (rows, positions, cols)
                                 __global TYPE *gradients,        // dL/dp (rows, positions, cols)
                                 __global TYPE *sample_loss, __global TYPE *sample_hit,
                                 const int first, const int positions, const int blocks, const int cols,
                                 const int loss_function, const int fold_activation, const TYPE unweighted_scale,
                                 __global const TYPE *row_weights, const int weighted,
                                 __global const TYPE *mask, const int masked, __global TYPE *sample_held)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int row = get_group_id(0) / blocks, block = get_group_id(0) % blocks, lid = get_local_id(0);
    const int size = get_local_size(0);
    // A sample's weight (fit's sample_weight or class_weight) scales its gradient and its loss:
    // Keras's loss is the weighted sum over the batch's samples divided by their count. Its
    // metrics (compile's `metrics`) are not weighted, as Keras's. A mask (see metrics.cl) weighs
    // each position too.
    const TYPE w = weighted ? row_weights[row] : 1;
    const TYPE scale_held = masked ? held_scale(mask, get_num_groups(0) / blocks, positions, scratch) : 1;
    TYPE loss = 0, hits = 0, held = 0;
    for (int position = block * size + lid; position < positions; position += blocks * size) {
        const int token = row * positions + position;
        const TYPE m = masked ? mask[token] != 0 : 1;
        const TYPE scale = unweighted_scale * w * m * scale_held;
        const __global TYPE *t = target + token * cols;
        const __global TYPE *p = outputs + token * cols;
        __global TYPE *g = gradients + token * cols;
        TYPE position_loss = 0;
        for (int j = 0; j < cols; j++) {
            const TYPE e = p[j] - t[j];
            position_loss += loss_function == MSE ? e * e : fabs(e);
            g[j] = scale / cols * (loss_function == MSE ? 2 * e : sign(e));
        }
        loss += m * position_loss / cols;
        hits += m * (cols == 1 ? binary_hit(p, t, cols) : argmax_hit(p, t, cols));
        held += m;
    }
    loss = group_reduce(scratch, loss, 0);
    hits = group_reduce(scratch, hits, 0);
    held = group_reduce(scratch, held, 0);
    if (lid == 0)
        store_sample_stats(sample_loss, sample_hit, sample_held, (first + row) * blocks + block, w, loss, hits, held,
                           positions, masked, scale_held);
}
