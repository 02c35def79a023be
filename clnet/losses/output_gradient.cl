// The loss kernel every family shares, compiled after the family's .cl, which defines
// position_loss for its loss_function values. `blocks` work-groups per sample, whose items take
// its positions (the tokens of a (time, classes) output; one for a (classes,) output) in turn.
// Writes dL/dp (or dL/dlogits, see crossentropy.cl) for the mean loss over every position of the
// batch (scale = 1 / (rows * positions)), and each block's share of the sample's mean loss and
// accuracy over its positions at sample_loss[(first + row) * blocks + block] (equal-length
// samples: their mean is the mean over all tokens). A single work-group per sample left most of a
// GPU idle (the tiny GPT's 32 samples of 256 positions). vec_type_hint(TYPE8): the softmax losses
// take their classes eight lanes at a time (crossentropy.cl), and Intel's CPU compiler otherwise
// vectorizes across work-items as well, as with the recurrent layers' loops (recurrent.cl).
__kernel __attribute__((vec_type_hint(TYPE8))) void CalcOutputGradient(__global const TYPE *target,     // t (rows, positions, cols), SPARSE: ids (rows, positions)
                                 __global const TYPE *outputs,    // p (rows, positions, cols), FROM_LOGITS: z
                                 __global TYPE *gradients,        // dL/dp or dL/dlogits (rows, positions, cols)
                                 __global TYPE *sample_loss, __global TYPE *sample_hit,
                                 const int first, const int positions, const int blocks, const int cols,
                                 const int loss_function, const int fold_activation, const TYPE unweighted_scale,
                                 __global const TYPE *row_weights, const int weighted,
                                 __global const TYPE *mask, const int masked, __global TYPE *sample_held
#if LOSS_SCALE
                                 , __global const TYPE *loss_scale, const int scaled
#endif
                                 )
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
#if LOSS_SCALE
    // A training step (`scaled`) under a LossScaleOptimizer: the gradient is of the loss times its
    // dynamic scale (optimizers/loss_scale.cl), the loss recorded is not (Keras logs it unscaled).
    const TYPE gradient_scale = scaled ? unweighted_scale * loss_scale[0] : unweighted_scale;
#else
    const TYPE gradient_scale = unweighted_scale;
#endif
    TYPE loss = 0, hits = 0, held = 0;
    for (int position = block * size + lid; position < positions; position += blocks * size) {
        const int token = row * positions + position;
        const TYPE m = masked ? mask[token] != 0 : 1;
        TYPE hit = 0;
        loss += m * position_loss(target, outputs + token * cols, gradients + token * cols, token, cols,
                                  loss_function, fold_activation, gradient_scale * w * m * scale_held, &hit);
        hits += m * hit;
        held += m;
    }
    loss = group_reduce(scratch, loss, 0);
    hits = group_reduce(scratch, hits, 0);
    held = group_reduce(scratch, held, 0);
    if (lid == 0)
        store_sample_stats(sample_loss, sample_hit, sample_held, (first + row) * blocks + block, w, loss, hits, held,
                           positions, masked, scale_held);
}
