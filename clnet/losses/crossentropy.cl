// Cross-entropy losses' position_loss (the kernel: losses/output_gradient.cl): each position's
// last axis is one distribution, as in Keras.
// With fold_activation the gradient is taken with respect to the logits instead: softmax then
// categorical cross-entropy gives p * sum(t) - t, sigmoid then binary cross-entropy gives p - t,
// which is both cheaper and exact where p saturates. fold_activation == SOFTMAX_HERE: the output
// layer left its softmax to this kernel and `outputs` holds its input z (fit and evaluate need
// only the loss: one launch fewer per step); p = softmax(z) is taken here, the loss as on p. With FROM_LOGITS the outputs are logits z
// (a final Dense without activation): the loss takes log softmax(z) itself, the maximum
// subtracted before exp so that no logit overflows, and the gradient is softmax(z) * sum(t) - t;
// the binary loss takes max(z, 0) - t z + log(1 + exp(-|z|)), whose gradient is sigmoid(z) - t.
// SPARSE targets are class ids, one per position (exact in float32 below 2^24 classes).

#define CATEGORICAL 0
#define BINARY 1
#define SPARSE 2
#define SOFTMAX_HERE 2  // a fold_activation value

// The maximum of a row of logits z and log sum_j exp(z_j - max). The exponentials eight at a
// time: PoCL's scalar exp costs many times what its exp of a vector of 8 costs an element (the
// tiny GPT's loss over 2048 positions of 113 classes was slow before).
inline void logit_stats(const __global TYPE *z, const int cols, TYPE *m, TYPE *log_s)
{
    TYPE8 tops = (TYPE8)(-INFINITY);  // (a ?: where fmax would be a library call on pip's PoCL 3.0)
    int j = 0;
    for (; j + 8 <= cols; j += 8) {
        const TYPE8 zj = Load8(z + j);
        tops = zj > tops ? zj : tops;
    }
    TYPE top = -INFINITY;
    for (int l = 0; l < 8; l++)
        top = ((TYPE *)&tops)[l] > top ? ((TYPE *)&tops)[l] : top;
    for (; j < cols; j++)
        top = z[j] > top ? z[j] : top;
    TYPE8 sums = (TYPE8)(0);
    j = 0;
    for (; j + 8 <= cols; j += 8)
        sums += exp8(Load8(z + j) - top);
    TYPE s = Sum8(sums);
    for (; j < cols; j++)
        s += exp(z[j] - top);
    *m = top;
    *log_s = log(s);
}

// g = scale (softmax(z) sum(t) - t) of a row of logits z given logit_stats' m and log_s, the
// exponentials eight at a time (see logit_stats); t[j], or 1 at the label where t == 0.
inline void softmax_gradient(const __global TYPE *t, const int label, const __global TYPE *z, __global TYPE *g,
                             const int cols, const TYPE m, const TYPE log_s, const TYPE t_sum, const TYPE scale)
{
    int j = 0;
    for (; j + 8 <= cols; j += 8) {
        TYPE8 tj = (TYPE8)(0);
        if (t)
            tj = Load8(t + j);
        else if (label >= j && label < j + 8)
            ((TYPE *)&tj)[label - j] = 1;
        Store8(scale * (exp8(Load8(z + j) - m - log_s) * t_sum - tj), g + j);
    }
    for (; j < cols; j++)
        g[j] = scale * (exp(z[j] - m - log_s) * t_sum - (t ? t[j] : (TYPE)(j == label)));
}

// Cross-entropy of one position's distribution; writes its gradient g, returns the loss.
TYPE categorical_position(const __global TYPE *t, const int label, const __global TYPE *p,
                          __global TYPE *g, const int cols, const int fold_activation, const TYPE scale)
{
    // t[j], or 1 at the label for sparse targets (t == 0).
#define TARGET(j) (t ? t[j] : (TYPE)((j) == label))
    TYPE t_sum = 1, loss = 0;
    if (t) {
        t_sum = 0;
        for (int j = 0; j < cols; j++)
            t_sum += t[j];
    }
    TYPE m = 0, log_s = 0;
#if FROM_LOGITS
    logit_stats(p, cols, &m, &log_s);
    for (int j = 0; j < cols; j++)
        loss -= TARGET(j) * (p[j] - m - log_s);
    softmax_gradient(t, label, p, g, cols, m, log_s, t_sum, scale);
#else
    if (fold_activation == SOFTMAX_HERE) {  // p holds z; the loss on softmax(z) clamped, as below
        logit_stats(p, cols, &m, &log_s);
        for (int j = 0; j < cols; j++) {
            const TYPE tj = TARGET(j);
            if (tj != 0)  // an exp and a log for the classes in the target only (one, for a sparse one)
                loss -= tj * log(clamp(exp(p[j] - m - log_s), EPSILON, 1 - EPSILON));
        }
        softmax_gradient(t, label, p, g, cols, m, log_s, t_sum, scale);
    } else {
        for (int j = 0; j < cols; j++) {
            const TYPE tj = TARGET(j);
            const TYPE pj = clamp(p[j], EPSILON, 1 - EPSILON);
            if (tj != 0)  // 0 log(pj) is 0 (pj >= EPSILON): no log for the classes a sparse target is not
                loss -= tj * log(pj);
            g[j] = scale * (fold_activation ? p[j] * t_sum - tj : (p[j] == pj ? -tj / pj : 0));
        }
    }
#endif
#undef TARGET
    return loss;
}

// One position's loss and its gradient g for the family's loss_function: the kernel itself is
// losses/output_gradient.cl's, the same for every family. `target` is the whole batch's (ids for
// SPARSE, one per token), `token` the position's index in it; *hit is its accuracy.
TYPE position_loss(const __global TYPE *target, const __global TYPE *p, __global TYPE *g, const int token,
                   const int cols, const int loss_function, const int fold_activation, const TYPE scale, TYPE *hit)
{
    if (loss_function == SPARSE) {
        const int label = (int)target[token];
        *hit = argmax(p, cols) == label;
        return categorical_position(0, label, p, g, cols, fold_activation, scale);
    }
    const __global TYPE *t = target + token * cols;
    if (loss_function == CATEGORICAL) {
        *hit = argmax_hit(p, t, cols);
        return categorical_position(t, 0, p, g, cols, fold_activation, scale);
    }
    TYPE loss = 0;
    for (int j = 0; j < cols; j++) {
#if FROM_LOGITS
        const TYPE z = p[j];
        loss += fmax(z, (TYPE)0) - t[j] * z + log1p(exp(-fabs(z)));
        g[j] = scale / cols * (1 / (1 + exp(-z)) - t[j]);
#else
        const TYPE pj = clamp(p[j], EPSILON, 1 - EPSILON);
        loss -= t[j] * log(pj) + (1 - t[j]) * log(1 - pj);
        g[j] = scale / cols * (fold_activation ? p[j] - t[j] : (p[j] == pj ? (pj - t[j]) / (pj * (1 - pj)) : 0));
#endif
    }
    *hit = binary_hit(p, t, cols);
    return loss / cols;
}
