// Accuracy metrics, Keras's: the value of one position for metrics/mean.cl's UpdateMean. `t` is
// the position's target row, or (SPARSE_*) its class id; argmax comes from losses/metrics.cl.

#define BINARY_ACCURACY 0
#define CATEGORICAL_ACCURACY 1
#define SPARSE_CATEGORICAL_ACCURACY 2
#define TOP_K_CATEGORICAL_ACCURACY 3
#define SPARSE_TOP_K_CATEGORICAL_ACCURACY 4

// 1 if fewer than k classes score higher than the label's: the label is among the k largest,
// ties counting in its favour (Keras's in_top_k: its value >= the k-th largest).
inline TYPE in_top_k(__global const TYPE *p, const int label, const int cols, const int k)
{
    int above = 0;
    for (int j = 0; j < cols; j++)
        above += p[j] > p[label];
    return above < k;
}

inline TYPE metric_value(const int kind, __global const TYPE *t, __global const TYPE *p, const int cols,
                         const TYPE parameter)
{
    if (kind == BINARY_ACCURACY) {  // parameter: the threshold; each column's (p > threshold) == t
        TYPE hits = 0;
        for (int j = 0; j < cols; j++)
            hits += (TYPE)(p[j] > parameter) == t[j];
        return hits / cols;
    }
    if (kind == CATEGORICAL_ACCURACY)
        return argmax(p, cols) == argmax(t, cols);
    if (kind == SPARSE_CATEGORICAL_ACCURACY)
        return argmax(p, cols) == (int)t[0];
    // top-k, parameter k
    return in_top_k(p, kind == TOP_K_CATEGORICAL_ACCURACY ? argmax(t, cols) : (int)t[0], cols, (int)parameter);
}
