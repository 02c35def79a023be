// What every loss program shares: accuracy of one sample, and the reduction of the per-sample
// loss and accuracy that the host reads once per progress update.

// The column of the largest value (the first, on ties).
inline int argmax(__global const TYPE *v, const int cols)
{
    int best = 0;
    for (int j = 1; j < cols; j++)
        best = v[j] > v[best] ? j : best;
    return best;
}

// 1 if the largest prediction and the largest target are in the same column.
inline TYPE argmax_hit(__global const TYPE *p, __global const TYPE *t, const int cols)
{
    return argmax(p, cols) == argmax(t, cols);
}

// The share of columns where prediction and target fall on the same side of 0.5.
inline TYPE binary_hit(__global const TYPE *p, __global const TYPE *t, const int cols)
{
    TYPE hits = 0;
    for (int j = 0; j < cols; j++)
        hits += (p[j] > (TYPE)0.5) == (t[j] > (TYPE)0.5);
    return hits / cols;
}

// totals[0] = sum of sample_loss[0..count), totals[1] = sum of sample_hit[0..count).
// One work-group of LOCAL_SIZE items.
__kernel void ReduceMetrics(__global const TYPE *sample_loss, __global const TYPE *sample_hit,
                            const int count, __global TYPE *totals)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int lid = get_local_id(0);
    TYPE loss = 0, hit = 0;
    for (int i = lid; i < count; i += LOCAL_SIZE) {
        loss += sample_loss[i];
        hit += sample_hit[i];
    }
    loss = group_reduce(scratch, loss, 0);
    hit = group_reduce(scratch, hit, 0);
    if (lid == 0) {
        totals[0] = loss;
        totals[1] = hit;
    }
}
