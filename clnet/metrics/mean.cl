// The update of every metric that is a mean of one value per position (a family's .cl defines
// metric_value(kind, t, p, cols, parameter) before this file): the batch's sum, added to the
// state. One work-group of LOCAL_SIZE items, each summing positions in turn, then a tree: the
// same order on every run, no atomics. A batch is at most a few thousand positions, and the one
// launch is what it costs.

// state[0] sums the values, state[1] their weights: with `weighted` (compile's weighted_metrics
// and a batch of sample weights) each position counts its sample's weight, else 1, and the
// metric is state[0] / state[1], Keras's weighted mean.
__kernel void UpdateMean(__global const TYPE *target,   // (tokens, target_width): a class id, or a row
                         __global const TYPE *outputs,  // (tokens, cols)
                         const int tokens, const int positions, const int cols, const int target_width,
                         const int kind, const TYPE parameter, __global const TYPE *row_weights,
                         const int weighted, __global TYPE *state)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int lid = get_local_id(0);
    TYPE sum = 0, weights = 0;
    for (int token = lid; token < tokens; token += LOCAL_SIZE) {
        const TYPE w = weighted ? row_weights[token / positions] : 1;
        sum += w * metric_value(kind, target + token * target_width, outputs + token * cols, cols, parameter);
        weights += w;
    }
    sum = group_reduce(scratch, sum, 0);
    weights = group_reduce(scratch, weights, 0);
    if (lid == 0) {
        state[0] += sum;
        state[1] += weights;
    }
}
