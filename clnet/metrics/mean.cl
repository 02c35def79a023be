// The update of every metric that is a mean of one value per position (a family's .cl defines
// metric_value(kind, t, p, cols, parameter) before this file): the batch's sum, added to the
// state. One work-group of LOCAL_SIZE items, each summing positions in turn, then a tree: the
// same order on every run, no atomics. A batch is at most a few thousand positions, and the one
// launch is what it costs.

__kernel void UpdateMean(__global const TYPE *target,   // (tokens, target_width): a class id, or a row
                         __global const TYPE *outputs,  // (tokens, cols)
                         const int tokens, const int cols, const int target_width, const int kind,
                         const TYPE parameter, __global TYPE *state)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int lid = get_local_id(0);
    TYPE sum = 0;
    for (int token = lid; token < tokens; token += LOCAL_SIZE)
        sum += metric_value(kind, target + token * target_width, outputs + token * cols, cols, parameter);
    sum = group_reduce(scratch, sum, 0);
    if (lid == 0)
        state[0] += sum;
}
