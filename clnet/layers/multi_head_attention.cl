// Scaled dot-product attention of MultiHeadAttention, between its projections (Dense products).
// The projections are row-major (batch * time, heads * dim): element d of head h at time t of
// sample b is at ((b * T + t) * heads + h) * dim + d. Probabilities are (batch, heads, Tq, Tk).
// One work-item per row of attention (sample, head, query position): the rows are short (Tk
// keys), and a row's softmax, its dropout and its weighted sum of values need nothing from the
// others. Built together with dropout.cl, whose hash decides the kept probabilities.

// Keras's masked softmax replaces a masked score by -1e9 (not -inf, so a row masked entirely
// is uniform, as Keras's): exp(-1e9 - max) is exactly 0 beside any unmasked score.
#define MASKED_SCORE ((TYPE)-1e9)

// True where query position i may attend to key position j: the causal mask keeps j <= i, an
// explicit mask (batch, Tq, Tk) keeps entries > 0.5 (Keras's rule for a non-boolean mask).
inline bool attention_kept(__global const TYPE *mask, const int use_mask, const int causal,
                           const int b, const int i, const int j, const int tq, const int tk)
{
    if (causal && j > i)
        return false;
    return !use_mask || mask[((long)b * tq + i) * tk + j] > (TYPE)0.5;
}

// probabilities = softmax(where(mask, (q / sqrt(key_dim)) . k, -1e9)) over the keys, the same
// max-subtracted formula as SoftMaxActivation; context = dropout(probabilities) . v, written as
// (batch * Tq, heads * value_dim) and transposed, (heads * value_dim, ld), for the output
// projection's weight gradient. Dropout (`dropout` = 1, in fit only) keeps a probability where
// dropout.cl's hash of (seed, step, its index in `probabilities`) says so, scaled by 1 / keep.
__kernel void FeedForwardAttention(__global const TYPE *query,       // (batch * Tq, heads * key_dim)
                                   __global const TYPE *key,         // (batch * Tk, heads * key_dim)
                                   __global const TYPE *value,       // (batch * Tk, heads * value_dim)
                                   __global const TYPE *mask,        // (batch, Tq, Tk) if use_mask
                                   __global TYPE *probabilities,     // (batch, heads, Tq, Tk)
                                   __global TYPE *context,           // (batch * Tq, heads * value_dim)
                                   __global TYPE *context_t,         // (heads * value_dim, ld)
                                   __global const int *noise,        // dropout.cl's geometry: unused (rank 0)
                                   const int tq, const int tk, const int heads, const int key_dim,
                                   const int value_dim, const int ld, const TYPE scale,
                                   const int use_mask, const int causal, const int dropout,
                                   const int seed, const int step, const TYPE keep)
{
    const int i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (i >= tq)
        return;
    const __global TYPE *q = query + (((long)b * tq + i) * heads + h) * key_dim;
    const long row = (((long)b * heads + h) * tq + i) * tk;
    __global TYPE *p = probabilities + row;

    TYPE m = -INFINITY;
    for (int j = 0; j < tk; j++) {
        const __global TYPE *k = key + (((long)b * tk + j) * heads + h) * key_dim;
        TYPE s = 0;
        for (int d = 0; d < key_dim; d++)
            s += (q[d] * scale) * k[d];  // Keras scales the query, then takes the product
        s = attention_kept(mask, use_mask, causal, b, i, j, tq, tk) ? s : MASKED_SCORE;
        p[j] = s;
        m = fmax(m, s);
    }
    TYPE sum = 0;
    for (int j = 0; j < tk; j++) {
        const TYPE e = exp(p[j] - m);
        p[j] = e;
        sum += e;
    }
    for (int j = 0; j < tk; j++)
        p[j] /= sum;

    const long out = (((long)b * tq + i) * heads + h) * value_dim;
    const long column = (long)b * tq + i;
    for (int d = 0; d < value_dim; d++) {
        TYPE c = 0;
        for (int j = 0; j < tk; j++) {
            TYPE w = p[j];
            if (dropout)
                w = dropout_keep((int)(row + j), 1, noise, 0, seed, step, keep) ? w / keep : 0;
            c += w * value[(((long)b * tk + j) * heads + h) * value_dim + d];
        }
        context[out + d] = c;
        context_t[(long)(h * value_dim + d) * ld + column] = c;
    }
}

// Per row (sample, head, query position): dL/d(dropped probability) = dL/dcontext . v, through
// the dropout to dL/dp, through the softmax to dL/ds = p (dL/dp - sum_j p_j dL/dp_j), 0 where
// masked (the score was replaced there); then dL/dquery = scale * sum_j dL/ds_j k_j.
// score_grad keeps dL/ds for CalcHiddenGradientAttentionKeyValue.
__kernel void CalcHiddenGradientAttention(__global const TYPE *context_gr,  // (batch * Tq, heads * value_dim)
                                          __global const TYPE *key,         // (batch * Tk, heads * key_dim)
                                          __global const TYPE *value,       // (batch * Tk, heads * value_dim)
                                          __global const TYPE *mask,
                                          __global const TYPE *probabilities,  // (batch, heads, Tq, Tk)
                                          __global TYPE *score_gr,          // (batch, heads, Tq, Tk)
                                          __global TYPE *query_gr,          // (batch * Tq, heads * key_dim)
                                          __global const int *noise,
                                          const int tq, const int tk, const int heads, const int key_dim,
                                          const int value_dim, const TYPE scale,
                                          const int use_mask, const int causal, const int dropout,
                                          const int seed, const int step, const TYPE keep)
{
    const int i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (i >= tq)
        return;
    const __global TYPE *dc = context_gr + (((long)b * tq + i) * heads + h) * value_dim;
    const long row = (((long)b * heads + h) * tq + i) * tk;
    const __global TYPE *p = probabilities + row;
    __global TYPE *ds = score_gr + row;

    TYPE weighted = 0;  // sum_j p_j dL/dp_j
    for (int j = 0; j < tk; j++) {
        const __global TYPE *v = value + (((long)b * tk + j) * heads + h) * value_dim;
        TYPE g = 0;
        for (int d = 0; d < value_dim; d++)
            g += dc[d] * v[d];
        if (dropout)
            g = dropout_keep((int)(row + j), 1, noise, 0, seed, step, keep) ? g / keep : 0;
        ds[j] = g;
        weighted += p[j] * g;
    }
    for (int j = 0; j < tk; j++)
        ds[j] = attention_kept(mask, use_mask, causal, b, i, j, tq, tk) ? p[j] * (ds[j] - weighted) : 0;

    __global TYPE *dq = query_gr + (((long)b * tq + i) * heads + h) * key_dim;
    for (int d = 0; d < key_dim; d++) {
        TYPE g = 0;
        for (int j = 0; j < tk; j++)
            g += ds[j] * key[(((long)b * tk + j) * heads + h) * key_dim + d];
        dq[d] = scale * g;
    }
}

// Per column (sample, head, key position j): dL/dvalue_j = sum_i dropped p_ij dL/dcontext_i and
// dL/dkey_j = sum_i dL/ds_ij (scale * query_i).
__kernel void CalcHiddenGradientAttentionKeyValue(__global const TYPE *context_gr,  // (batch * Tq, heads * value_dim)
                                                  __global const TYPE *query,       // (batch * Tq, heads * key_dim)
                                                  __global const TYPE *probabilities,  // (batch, heads, Tq, Tk)
                                                  __global const TYPE *score_gr,    // (batch, heads, Tq, Tk)
                                                  __global TYPE *key_gr,            // (batch * Tk, heads * key_dim)
                                                  __global TYPE *value_gr,          // (batch * Tk, heads * value_dim)
                                                  __global const int *noise,
                                                  const int tq, const int tk, const int heads, const int key_dim,
                                                  const int value_dim, const TYPE scale, const int dropout,
                                                  const int seed, const int step, const TYPE keep)
{
    const int j = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (j >= tk)
        return;
    const long column = ((long)b * heads + h) * tq * tk + j;  // + i * tk: row i's entry for key j
    __global TYPE *dv = value_gr + (((long)b * tk + j) * heads + h) * value_dim;
    for (int d = 0; d < value_dim; d++)
        dv[d] = 0;
    __global TYPE *dk = key_gr + (((long)b * tk + j) * heads + h) * key_dim;
    for (int d = 0; d < key_dim; d++)
        dk[d] = 0;
    for (int i = 0; i < tq; i++) {
        const long at = column + (long)i * tk;
        TYPE w = probabilities[at];
        if (dropout)
            w = dropout_keep((int)at, 1, noise, 0, seed, step, keep) ? w / keep : 0;
        const __global TYPE *dc = context_gr + (((long)b * tq + i) * heads + h) * value_dim;
        for (int d = 0; d < value_dim; d++)
            dv[d] += w * dc[d];
        const TYPE g = score_gr[at] * scale;
        const __global TYPE *q = query + (((long)b * tq + i) * heads + h) * key_dim;
        for (int d = 0; d < key_dim; d++)
            dk[d] += g * q[d];
    }
}
