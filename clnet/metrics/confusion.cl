// Confusion-matrix metrics, Keras's: counts of true and false positives summed over the batch
// into the metric's state. One work-group, each item owning some columns (or thresholds) of the
// state, so no two items add to the same number and no atomics are needed; the order of the
// sums is the same on every run.

// Per column: state[0 cols..) true positives, [1 cols..) false positives, [2 cols..) false
// negatives, [3 cols..) the sum of the targets. A prediction is positive where it is above
// `threshold`, or with row_max where it is its row's largest and not 0 (Keras's FBetaScore with
// threshold=None). With labels_as_bool a target counts as 1 where it is not 0 (Precision and
// Recall cast it to bool), else as its value (FBetaScore multiplies by it). The rows' maxima are
// taken a chunk of LOCAL_SIZE rows at a time, each item one row, into local memory. With
// `weighted` every count of a position is its sample's weight (row_weights[token / positions]).
__kernel void UpdateColumns(__global const TYPE *target,   // (tokens, cols)
                            __global const TYPE *outputs,  // (tokens, cols)
                            const int tokens, const int positions, const int cols, const int row_max,
                            const TYPE threshold, const int labels_as_bool, __global const TYPE *row_weights,
                            const int weighted, __global TYPE *state)
{
    __local TYPE maxima[LOCAL_SIZE];
    const int lid = get_local_id(0);
    for (int chunk = 0; chunk < tokens; chunk += LOCAL_SIZE) {
        const int n = min(LOCAL_SIZE, tokens - chunk);
        if (row_max && lid < n) {
            const __global TYPE *p = outputs + (chunk + lid) * cols;
            TYPE top = p[0];
            for (int j = 1; j < cols; j++)
                top = fmax(top, p[j]);
            maxima[lid] = top;
        }
        // (both barriers whether or not row_max: PoCL 3.0's work-group loops have added up sums
        // early at a barrier under a condition, see recurrent.cl's SequenceSums)
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = lid; c < cols; c += LOCAL_SIZE) {
            TYPE tp = 0, fp = 0, fn = 0, positives = 0;
            for (int i = 0; i < n; i++) {
                const int at = (chunk + i) * cols + c;
                const TYPE p = outputs[at], t = target[at];
                const TYPE w = weighted ? row_weights[(chunk + i) / positions] : 1;
                const TYPE label = labels_as_bool ? (TYPE)(t != 0) : t;
                const TYPE predicted = row_max ? (TYPE)(p >= maxima[i] && fabs(p) > (TYPE)1e-9) : (TYPE)(p > threshold);
                tp += w * predicted * label;
                fp += w * predicted * (1 - label);
                fn += w * (1 - predicted) * label;
                positives += w * label;
            }
            state[c] += tp;
            state[cols + c] += fp;
            state[2 * cols + c] += fn;
            state[3 * cols + c] += positives;
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // every item is done with this chunk's maxima
    }
}

// AUC's counts at `thresholds` evenly spaced thresholds over [0, 1] (Keras's bucketed update):
// an element falls in bucket max(ceil(p (thresholds - 1)) - 1, 0) of p clipped to [0, 1], and is
// counted at every threshold up to its bucket: state[i] the positives' count (true positives at
// threshold i), state[thresholds + i] the negatives' (false positives). Threshold 0 counts
// every element: the totals. A target is positive where it is not 0. With `weighted` an element
// counts its sample's weight (row_weights[e / per_row], per_row its sample's elements). With
// `labels` > 1 (multi_label: one curve per output column) column c's elements, every labels-th,
// have counts of their own, state[2 c thresholds ...]; one label is every element's.
__kernel void UpdateThresholds(__global const TYPE *target, __global const TYPE *outputs, const int elements,
                               const int per_row, const int thresholds, const int from_logits,
                               __global const TYPE *row_weights, const int weighted, const int labels,
                               __global TYPE *state)
{
    const int lid = get_local_id(0);
    for (int item = lid; item < thresholds * labels; item += LOCAL_SIZE) {
        const int i = item % thresholds, label = item / thresholds;
        TYPE tp = 0, fp = 0;
        for (int e = label; e < elements; e += labels) {
            TYPE p = outputs[e];
            if (from_logits)
                p = 1 / (1 + exp(-p));
            p = clamp(p, (TYPE)0, (TYPE)1);
            const int bucket = max((int)(ceil(p * (TYPE)(thresholds - 1)) - 1), 0);
            if (bucket >= i) {
                const TYPE w = weighted ? row_weights[e / per_row] : 1;
                const TYPE label = target[e] != 0;
                tp += w * label;
                fp += w * (1 - label);
            }
        }
        state[2 * label * thresholds + i] += tp;
        state[(2 * label + 1) * thresholds + i] += fp;
    }
}
