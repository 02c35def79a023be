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

// A masked output's metrics weigh each position by its mask times its sample's weight (Keras's
// mask, applied as a sample weight): weights[token] = mask[token] * row_weights[token / positions].
__kernel void MaskTimesRowWeights(__global const TYPE *mask, __global const TYPE *row_weights, const int positions,
                                  const int tokens, __global TYPE *weights)
{
    const int token = get_global_id(0);
    if (token < tokens)
        weights[token] = (mask[token] != 0) * row_weights[token / positions];
}

// totals[0] = sum of sample_loss[0..count), totals[1] = sum of sample_hit[0..count), and where
// `counted`, totals[2] = sum of sample_held[0..count). One work-group of LOCAL_SIZE items.
__kernel void ReduceMetrics(__global const TYPE *sample_loss, __global const TYPE *sample_hit,
                            const int count, __global TYPE *totals, __global const TYPE *sample_held,
                            const int counted)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int lid = get_local_id(0);
    TYPE loss = 0, hit = 0, held = 0;
    for (int i = lid; i < count; i += LOCAL_SIZE) {
        loss += sample_loss[i];
        hit += sample_hit[i];
        held += counted ? sample_held[i] : 0;
    }
    loss = group_reduce(scratch, loss, 0);
    hit = group_reduce(scratch, hit, 0);
    held = group_reduce(scratch, held, 0);
    if (lid == 0) {
        totals[0] = loss;
        totals[1] = hit;
        totals[2] = held;
    }
}

// An output's mask (Keras's, on a sequence output: (rows, positions), 1 where a position holds
// data), where `masked`: its padded positions count in neither the loss nor the accuracy, as in
// Keras. The batch's loss is the sum over its held positions divided by their count (Keras's
// weights total / held on the held positions; 0 where none is held), so a held position's weight
// is rows * positions / held beside the unmasked mean's: held_scale. Each work-group sums the
// batch's mask itself, a few reads per item, rather than wait for a launch of its own. A sample's
// accuracy is then its held positions' hits, and sample_held their count, by which the epoch's
// accuracy divides (Keras's mean weighted by the mask).
inline TYPE held_scale(__global const TYPE *mask, const int rows, const int positions, __local TYPE *scratch)
{
    TYPE held = 0;
    for (int i = get_local_id(0); i < rows * positions; i += get_local_size(0))
        held += mask[i] != 0;
    held = group_reduce(scratch, held, 0);
    return held > 0 ? (TYPE)(rows * positions) / held : 0;
}

// What every loss kernel writes for its block of a sample: the loss (its positions' sum, `loss`)
// and the hits as above.
inline void store_sample_stats(__global TYPE *sample_loss, __global TYPE *sample_hit, __global TYPE *sample_held,
                               const int at, const TYPE w, const TYPE loss, const TYPE hits, const TYPE held,
                               const int positions, const int masked, const TYPE scale_held)
{
    sample_loss[at] = w * loss / positions * (masked ? scale_held : 1);
    sample_hit[at] = masked ? hits : hits / positions;
    if (masked)
        sample_held[at] = held;
}
