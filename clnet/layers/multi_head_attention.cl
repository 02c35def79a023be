// Scaled dot-product attention of MultiHeadAttention, between its projections (Dense products).
// The projections are row-major (batch * time, heads * dim): element d of head h at time t of
// sample b is at ((b * T + t) * heads + h) * dim + d; dim is KEY_DIM or VALUE_DIM (build defines). Probabilities are (batch, heads, Tq, Tk).
// The projections' rows are QK_ROW (query, key) and V_ROW (value) elements apart and start at
// columns Q_FIRST, K_FIRST and V_FIRST, build defines: heads * dim and 0, or where one layer
// makes all three (JoinedDense) its whole row and each part's first column, in the three
// arguments, the same buffer (their gradients alike). Head h of row `row`:
#define QUERY_ROW(X, row, h) ((X) + Q_FIRST + (long)(row) * QK_ROW + (h) * KEY_DIM)
#define KEY_ROW(X, row, h) ((X) + K_FIRST + (long)(row) * QK_ROW + (h) * KEY_DIM)
#define VALUE_ROW(X, row, h) ((X) + V_FIRST + (long)(row) * V_ROW + (h) * VALUE_DIM)
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

// What the context sums for a probability p at index `at` of the probabilities under dropout:
// p / keep where dropout.cl's hash keeps it, else 0. The dL/d(probability) coming back is the same
// function of the gradient through the dropped one.
inline TYPE kept_by_dropout(const TYPE p, const int at, __global const int *noise, const int seed, const int step,
                            const TYPE keep)
{
    return dropout_keep(at, 1, noise, 0, seed, step, keep) ? p / keep : 0;
}

// The global rows the kernels read (a key, value, query or dL/dcontext row of one head) are read
// four elements per load where DIM is a multiple of 4: a row then starts on a TYPE4 boundary (its
// offset is a multiple of DIM), and a GPU issues one load instruction for four multiply-adds
// instead of one each, which had the key/value gradient spend its time issuing loads (the tiny
// GPT on a GPU, where it was a large part of the step).
#define ROW4(row, d) (*(const __global TYPE4 *)((row) + (d)))

// result = sum_d a[d] b[d] over DIM (a build constant) elements of a private row `a` and a global
// row `b`, in eight running sums: independent sums let the compiler turn the unrolled loop into
// SIMD multiply-adds (one running sum would fix the order of the additions and keep it scalar).
// Both loops add the same terms to the same sums in the same order.
#define DOT(result, a, b, DIM)                                                      \
    do {                                                                            \
        TYPE part_[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                   \
        if ((DIM) % 4 == 0)                                                         \
            for (int d_ = 0; d_ < (DIM); d_ += 4) {                                 \
                const TYPE4 r_ = ROW4(b, d_);                                       \
                part_[d_ % 8] += (a)[d_] * r_.s0;                                   \
                part_[d_ % 8 + 1] += (a)[d_ + 1] * r_.s1;                           \
                part_[d_ % 8 + 2] += (a)[d_ + 2] * r_.s2;                           \
                part_[d_ % 8 + 3] += (a)[d_ + 3] * r_.s3;                           \
            }                                                                       \
        else                                                                        \
            for (int d_ = 0; d_ < (DIM); d_++)                                      \
                part_[d_ % 8] += (a)[d_] * (b)[d_];                                 \
        result = ((part_[0] + part_[1]) + (part_[2] + part_[3])) +                  \
                 ((part_[4] + part_[5]) + (part_[6] + part_[7]));                   \
    } while (0)

// acc[d] += w row[d] for d < DIM, `acc` a private row, `row` a global one.
#define AXPY(acc, w, row, DIM)                                                      \
    do {                                                                            \
        if ((DIM) % 4 == 0)                                                         \
            for (int d_ = 0; d_ < (DIM); d_ += 4) {                                 \
                const TYPE4 r_ = ROW4(row, d_);                                     \
                (acc)[d_] += (w) * r_.s0;                                           \
                (acc)[d_ + 1] += (w) * r_.s1;                                       \
                (acc)[d_ + 2] += (w) * r_.s2;                                       \
                (acc)[d_ + 3] += (w) * r_.s3;                                       \
            }                                                                       \
        else                                                                        \
            for (int d_ = 0; d_ < (DIM); d_++)                                      \
                (acc)[d_] += (w) * (row)[d_];                                       \
    } while (0)

// The rows a work-item walks: with the causal mask, key positions past the query's are masked
// (probability 0, gradient 0) and skipped.
inline int attention_keys(const int causal, const int i, const int tk)
{
    return causal ? min(i + 1, tk) : tk;
}

// The attention kernels' arguments, the same in both forms (this file's, a GPU's, and
// multi_head_attention_lanes.cl's, a CPU's); the probabilities and dL/dscores are (batch, heads,
// Tq, Tk) here and lane-major, (batch, heads, Tk, tq_p), in the lanes form. The last ones say
// what to mask and how to drop out, as FeedForwardAttention describes.
#define ATTENTION_FLAGS                                                                               \
    const TYPE scale, const int use_mask, const int causal, const int dropout, const int seed,        \
    const int step, const TYPE keep

#define FEED_FORWARD_ATTENTION_ARGS                                                                   \
    __global const TYPE *query,          /* (batch * Tq, heads * KEY_DIM) */                          \
    __global const TYPE *key,            /* (batch * Tk, heads * KEY_DIM) */                          \
    __global const TYPE *value,          /* (batch * Tk, heads * VALUE_DIM) */                        \
    __global const TYPE *mask,           /* (batch, Tq, Tk) if use_mask */                            \
    __global TYPE *probabilities,                                                                     \
    __global TYPE *context,              /* (batch * Tq, heads * VALUE_DIM) */                        \
    __global TYPE *context_t,            /* (heads * VALUE_DIM, ld) */                                \
    __global const int *noise,           /* dropout.cl's geometry: unused (rank 0) */                  \
    const int tq, const int tk, const int heads, const int ld, ATTENTION_FLAGS

#define HIDDEN_GRADIENT_ATTENTION_ARGS                                                                \
    __global const TYPE *context_gr,     /* (batch * Tq, heads * VALUE_DIM) */                        \
    __global const TYPE *key,            /* (batch * Tk, heads * KEY_DIM) */                          \
    __global const TYPE *value,          /* (batch * Tk, heads * VALUE_DIM) */                        \
    __global const TYPE *mask,                                                                        \
    __global const TYPE *probabilities,                                                               \
    __global TYPE *score_gr,                                                                          \
    __global TYPE *query_gr,             /* (batch * Tq, heads * KEY_DIM) */                          \
    __global const int *noise,           /* dropout.cl's geometry: unused (rank 0) */                  \
    const int tq, const int tk, const int heads, ATTENTION_FLAGS

#define KEY_VALUE_GRADIENT_ATTENTION_ARGS                                                             \
    __global const TYPE *context_gr,     /* (batch * Tq, heads * VALUE_DIM) */                        \
    __global const TYPE *query,          /* (batch * Tq, heads * KEY_DIM) */                          \
    __global const TYPE *probabilities,                                                               \
    __global const TYPE *score_gr,                                                                    \
    __global TYPE *key_gr,               /* (batch * Tk, heads * KEY_DIM) */                          \
    __global TYPE *value_gr,             /* (batch * Tk, heads * VALUE_DIM) */                        \
    __global const int *noise,           /* dropout.cl's geometry: unused (rank 0) */                  \
    const int tq, const int tk, const int heads, ATTENTION_FLAGS

// probabilities = softmax(where(mask, (q / sqrt(key_dim)) . k, -1e9)) over the keys, the same
// max-subtracted formula as SoftMaxActivation; context = dropout(probabilities) . v, written as
// (batch * Tq, heads * value_dim) and, unless ld = 0, transposed, (heads * value_dim, ld), for the
// output projection's weight gradient where it reads that (the CPU form's). Dropout (`dropout` = 1,
// in fit only) keeps a probability where dropout.cl's hash of (seed, step, its index in
// `probabilities`) says so, scaled by 1 / keep. KEY_DIM and VALUE_DIM are build-time constants, so
// that a query row and the context row being summed stay in registers.
__kernel void FeedForwardAttention(FEED_FORWARD_ATTENTION_ARGS)
{
    const int i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (i >= tq)
        return;
    const long row = (((long)b * heads + h) * tq + i) * tk;
    __global TYPE *p = probabilities + row;
    TYPE q[KEY_DIM];
    for (int d = 0; d < KEY_DIM; d++)  // Keras scales the query, then takes the product
        q[d] = QUERY_ROW(query, (long)b * tq + i, h)[d] * scale;
    int keys = attention_keys(causal, i, tk);

    TYPE m = -INFINITY;
    for (int j = 0; j < keys; j++) {
        const __global TYPE *k = KEY_ROW(key, (long)b * tk + j, h);
        TYPE s;
        DOT(s, q, k, KEY_DIM);
        s = attention_kept(mask, use_mask, 0, b, i, j, tq, tk) ? s : MASKED_SCORE;
        p[j] = s;
        m = fmax(m, s);
    }
    if (m == MASKED_SCORE) {  // nothing to attend to: Keras's softmax of -1e9 everywhere, future keys too
        for (int j = keys; j < tk; j++)
            p[j] = MASKED_SCORE;
        keys = tk;
    }
    // exp on eight scores at once: PoCL's scalar exp took a large part of this kernel's time in
    // the tiny GPT, its exp on a vector of 8 costs an element a small fraction of a scalar call.
    TYPE8 sums = (TYPE8)(0);
    int j = 0;
    for (; j + 8 <= keys; j += 8) {
        const TYPE8 e = exp8(Load8(p + j) - m);
        Store8(e, p + j);
        sums += e;
    }
    TYPE sum = Sum8(sums);
    for (; j < keys; j++) {
        const TYPE e = exp(p[j] - m);
        p[j] = e;
        sum += e;
    }
    TYPE c[VALUE_DIM];
    for (int d = 0; d < VALUE_DIM; d++)
        c[d] = 0;
    for (int j = 0; j < keys; j++) {
        const TYPE probability = p[j] / sum;
        p[j] = probability;
        TYPE w = probability;
        if (dropout)
            w = kept_by_dropout(w, (int)(row + j), noise, seed, step, keep);
        AXPY(c, w, VALUE_ROW(value, (long)b * tk + j, h), VALUE_DIM);
    }
    for (int j = keys; j < tk; j++)
        p[j] = 0;
    const long out = (((long)b * tq + i) * heads + h) * VALUE_DIM;
    const long column = (long)b * tq + i;
    for (int d = 0; d < VALUE_DIM; d++) {
        context[out + d] = c[d];
        if (ld)
            context_t[(long)(h * VALUE_DIM + d) * ld + column] = c[d];
    }
}

// Per row (sample, head, query position): dL/d(dropped probability) = dL/dcontext . v, through
// the dropout to dL/dp, through the softmax to dL/ds = p (dL/dp - sum_j p_j dL/dp_j), 0 where
// masked (the score was replaced there); then dL/dquery = scale * sum_j dL/ds_j k_j.
// score_grad keeps dL/ds for CalcHiddenGradientAttentionKeyValue.
__kernel void CalcHiddenGradientAttention(HIDDEN_GRADIENT_ATTENTION_ARGS)
{
    const int i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (i >= tq)
        return;
    TYPE dc[VALUE_DIM];
    for (int d = 0; d < VALUE_DIM; d++)
        dc[d] = context_gr[(((long)b * tq + i) * heads + h) * VALUE_DIM + d];
    const long row = (((long)b * heads + h) * tq + i) * tk;
    const __global TYPE *p = probabilities + row;
    __global TYPE *ds = score_gr + row;
    const int keys = attention_keys(causal, i, tk);

    TYPE weighted = 0;  // sum_j p_j dL/dp_j
    for (int j = 0; j < keys; j++) {
        const __global TYPE *v = VALUE_ROW(value, (long)b * tk + j, h);
        TYPE g;
        DOT(g, dc, v, VALUE_DIM);
        if (dropout)
            g = kept_by_dropout(g, (int)(row + j), noise, seed, step, keep);
        ds[j] = g;
        weighted += p[j] * g;
    }
    TYPE dq[KEY_DIM];
    for (int d = 0; d < KEY_DIM; d++)
        dq[d] = 0;
    for (int j = 0; j < keys; j++) {
        const TYPE g = attention_kept(mask, use_mask, 0, b, i, j, tq, tk) ? p[j] * (ds[j] - weighted) : 0;
        ds[j] = g;
        AXPY(dq, g, KEY_ROW(key, (long)b * tk + j, h), KEY_DIM);
    }
    for (int j = keys; j < tk; j++)
        ds[j] = 0;
    __global TYPE *out = QUERY_ROW(query_gr, (long)b * tq + i, h);
    for (int d = 0; d < KEY_DIM; d++)
        out[d] = scale * dq[d];
}

// Per column (sample, head, key position j): dL/dvalue_j = sum_i dropped p_ij dL/dcontext_i and
// dL/dkey_j = sum_i dL/ds_ij (scale * query_i); under the causal mask alone only rows i >= j reach j.
__kernel void CalcHiddenGradientAttentionKeyValue(KEY_VALUE_GRADIENT_ATTENTION_ARGS)
{
    const int j = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (j >= tk)
        return;
    const long column = ((long)b * heads + h) * tq * tk + j;  // + i * tk: row i's entry for key j
    TYPE dv[VALUE_DIM], dk[KEY_DIM];
    for (int d = 0; d < VALUE_DIM; d++)
        dv[d] = 0;
    for (int d = 0; d < KEY_DIM; d++)
        dk[d] = 0;
    // A row masked entirely attends to future keys too (see FeedForwardAttention): with an
    // explicit mask every row is read.
    for (int i = causal && !use_mask ? j : 0; i < tq; i++) {
        const long at = column + (long)i * tk;
        TYPE w = probabilities[at];
        if (dropout)
            w = kept_by_dropout(w, (int)at, noise, seed, step, keep);
        AXPY(dv, w, context_gr + (((long)b * tq + i) * heads + h) * VALUE_DIM, VALUE_DIM);
        const TYPE g = score_gr[at];
        AXPY(dk, g, QUERY_ROW(query, (long)b * tq + i, h), KEY_DIM);
    }
    __global TYPE *out_v = VALUE_ROW(value_gr, (long)b * tk + j, h);
    for (int d = 0; d < VALUE_DIM; d++)
        out_v[d] = dv[d];
    __global TYPE *out_k = KEY_ROW(key_gr, (long)b * tk + j, h);
    for (int d = 0; d < KEY_DIM; d++)
        out_k[d] = scale * dk[d];
}

#ifdef TILE
// The GPU form (built after products/gpu_tiles.cl, with its local-memory tiles): the same attention as
// products of each (sample, head)'s operands in gpu_tiles.cl's tiled loop, and two row kernels between
// them. A work-item per row left a GPU mostly idle (32 x 4 x 256 rows of the tiny GPT, each
// holding 64 + 64 running sums; the three kernels ran far below the tiles' rate and took a large
// part of the step);
// as products they run at the tiles' rate, the causal half included. Forward: scores = scale Q
// K^T, AttentionSoftmax, context = P V (3 launches); backward: dL/dP = dL/dcontext V^T,
// CalcScoreGradientAttention, dL/dQ = scale dL/ds K, dL/dK = scale dL/ds^T Q, dL/dV = P^T
// dL/dcontext (5 launches). Every operand of (sample b, head h) starts at an offset that is a
// multiple of 4 (the layer uses this form only where dims and lengths are), as gpu_tiles.cl's TYPE4
// loads and stores need.

// Under the causal mask alone, the probabilities and score gradients past a query's position are
// 0, so a product can leave out what they touch (AttentionProduct's `causal`): the blocks of
// (query, key) results wholly above the diagonal (ABOVE_DIAGONAL; nothing reads them), the keys
// past a block's last query (KEYS_UP_TO_QUERIES: M queries by K keys) or the queries before a
// block's first key (QUERIES_FROM_KEYS: M keys by K queries). Under an explicit mask a row masked
// entirely attends to future keys too, and everything is computed.
#define ABOVE_DIAGONAL 1
#define KEYS_UP_TO_QUERIES 2
#define QUERIES_FROM_KEYS 3

// C = scale A B for work-group layer z = (sample b, head h): A is M x K, B is K x N, given as B^T
// (N x K) as tiled_product takes it, each contiguous along k or along m (a_along_k, b_along_k);
// an operand X of (b, h) starts at X + x_first + b x_sample + h x_head (x_first: the column where
// a joined projection's part starts, see JoinedDense). With t_ld, C^T is stored into Ct too (the
// context's transpose, for the output projection's weight gradient).
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void AttentionProduct(__global const TYPE *A, const int a_first, const int a_sample, const int a_head, const int a_ld,
                      const int a_along_k,
                      __global const TYPE *B, const int b_first, const int b_sample, const int b_head, const int b_ld,
                      const int b_along_k,
                      __global TYPE *C, const int c_first, const int c_sample, const int c_head, const int c_ld,
                      __global TYPE *Ct, const int t_sample, const int t_head, const int t_ld,
                      const int M, const int N, const int K, const int heads, const TYPE scale, const int causal)
{
    const int m0 = get_group_id(1) * TILE, n0 = get_group_id(0) * TILE;
    if (causal == ABOVE_DIAGONAL && n0 >= m0 + TILE)  // the whole work-group: no barrier is left waiting
        return;
    const int k_first = causal == QUERIES_FROM_KEYS ? m0 / TK * TK : 0;
    const int k_end = causal == KEYS_UP_TO_QUERIES ? min(K, m0 + TILE) : K;
    TILED_BEGIN
    const long b = get_group_id(2) / heads, h = get_group_id(2) % heads;
    tiled_product(A + a_first + b * a_sample + h * a_head, a_ld, a_along_k,
                  B + b_first + b * b_sample + h * b_head, b_ld, b_along_k, M, N, k_first, k_end, As, Bs, acc, 0);
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++)
        #pragma unroll
        for (int j = 0; j < ACC_COLS; j++)
            acc[i][j] *= scale;
    store_block(C + c_first + b * c_sample + h * c_head, c_ld, M, N, acc, 0);
    if (t_ld)
        store_block(Ct + b * t_sample + h * t_head, t_ld, M, N, acc, 1);
}

// Under the causal mask alone the products read a query's probabilities and score gradients only
// up to the end of its block of TILE queries (KEYS_UP_TO_QUERIES, QUERIES_FROM_KEYS), and the
// scores past it were never written (ABOVE_DIAGONAL): the row kernels stop there too (the tiny
// GPT's rows of 256 in blocks of 64: 160 elements a row on average).
inline int attention_row_end(const int use_mask, const int causal, const int i, const int tk)
{
    return causal && !use_mask ? min(tk, (i / TILE + 1) * TILE) : tk;
}

// Where a query block's keys fit in ROW_TILES blocks of TILE (a build define; the CUDA-core tiles
// or the MMA form's), one work-group computes a block of TILE query rows of (sample b, head h)
// whole, keys up to `end`, into registers, and the row kernel's work follows in the same launch,
// with the rows' reductions across the work-items that share a row: scores and softmax in one
// launch (AttentionScoresSoftmax), dL/dP and the score gradient in another
// (AttentionScoreGradient). The scores never go through global memory, and two launches a layer
// and step go. On a GPU the tiny GPT's (T 256, TILE 64: 4 key tiles) scores' product and
// AttentionSoftmax, and its dL/dP's product and CalcScoreGradientAttention, each take less time as
// one launch than they took as two. A work-group has up to 4 products to make where one had 1
// (starting the query blocks with the most keys first did not change the times), but no row waits
// on a launch of its own. Under a 16-bit policy the products are the MMA form's 16-bit ones (the
// operands rounded as staged, sums, softmax and gradients in float, as the other products).
#ifdef ROW_TILES
#if MMA && !WARP_SHUFFLES
#error "the row blocks in the MMA form reduce a row's quad of lanes by warp shuffles (WARP_SHUFFLES)"
#endif
typedef TYPE RowBlock[ROW_TILES][ACC_ROWS][ACC_COLS];  // this work-item's values: [key tile][row][column]

// s = scale A B^T for this work-group's TILE rows from m0 (A: M x K; B given as N x K; both along
// k) and the key tiles before `end` (the others 0).
inline void row_block_product(const __global TYPE *A, const int a_ld, const __global TYPE *B, const int b_ld,
                              const int M, const int N, const int K, const int m0, const int end, const TYPE scale,
                              __local TYPE4 *As, __local TYPE4 *Bs, RowBlock s)
{
    #pragma unroll
    for (int t = 0; t < ROW_TILES; t++) {
        #pragma unroll
        for (int i = 0; i < ACC_ROWS; i++)
            #pragma unroll
            for (int j = 0; j < ACC_COLS; j++)
                s[t][i][j] = 0;
        if (t * TILE < end)  // the same for the whole work-group: its barriers are all met
            tiled_product_at(A, a_ld, ALONG_K, B, b_ld, ALONG_K, M, N, m0, t * TILE, 0, K, As, Bs, s[t], 0);
        #pragma unroll
        for (int i = 0; i < ACC_ROWS; i++)
            #pragma unroll
            for (int j = 0; j < ACC_COLS; j++)
                s[t][i][j] *= scale;
    }
}

// v[i] = the sum (use_max: the maximum) over the work-group of v[i] for this work-item's row i,
// the same result in every work-item and on every run. In the MMA form a row's columns lie in the
// 4 lanes of a quad (lane % 4) of each of the WARPS_N warps across the block: the quad by
// shuffles, then the warps' results through `partial` (TILE rows x WARPS_N), added in the warps'
// order. On the CUDA cores' tiles the SIDE work-items sharing a row leave their values in
// `partial` (TILE rows x SIDE), and each adds the row's in the same order; with WARP_SHUFFLES
// (neighbours in a warp: local index ty * SIDE + tx) they take it by shuffles instead.
// v[i] = the sum (use_max: the maximum) of the `width` values that the work-items sharing row
// ROW_OWN(i) left in `partial` (TILE rows x width), added in order; `partial` is free again after.
inline void reduce_partial_rows(__local TYPE *partial, const int width, TYPE v[ACC_ROWS], const int use_max)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++) {
        const __local TYPE *row = partial + ROW_OWN(i) * width;
        TYPE r = row[0];
        for (int t = 1; t < width; t++)
            r = use_max ? fmax(r, row[t]) : r + row[t];
        v[i] = r;
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // partial is reused by the next reduction
}

#if MMA
#define PARTIAL_VALUES (TILE * WARPS_N)
inline void row_block_reduce(__local TYPE *partial, TYPE v[ACC_ROWS], const int use_max)
{
    const int warp_col = LOCAL_INDEX / 32 % WARPS_N;
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++) {
        v[i] = lanes_reduce(v[i], 4, use_max);
        if (LOCAL_INDEX % 4 == 0)
            partial[ROW_OWN(i) * WARPS_N + warp_col] = v[i];
    }
    reduce_partial_rows(partial, WARPS_N, v, use_max);
}
#elif WARP_SHUFFLES && SIDE <= 32
#define PARTIAL_VALUES 1
inline void row_block_reduce(__local TYPE *partial, TYPE v[ACC_ROWS], const int use_max)
{
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++)
        v[i] = lanes_reduce(v[i], SIDE, use_max);
}
#else
#define PARTIAL_VALUES (TILE * SIDE)
inline void row_block_reduce(__local TYPE *partial, TYPE v[ACC_ROWS], const int use_max)
{
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++)
        partial[ROW_OWN(i) * SIDE + get_local_id(0)] = v[i];
    reduce_partial_rows(partial, SIDE, v, use_max);
}
#endif

// A run of COL_RUN keys side by side in a row (4 on the CUDA cores' tiles, 2 in the MMA form's
// accumulators), stored and loaded as one vector: RUN_OF(v) of an array v[COL_RUN].
#define RUN CAT(TYPE, COL_RUN)
#if COL_RUN == 4
#define RUN_OF(v) ((RUN)((v)[0], (v)[1], (v)[2], (v)[3]))
#elif COL_RUN == 2
#define RUN_OF(v) ((RUN)((v)[0], (v)[1]))
#endif

// The query (row of the block) and key (column) of this work-item's s[t][i][j].
#define BLOCK_QUERY(m0, i) ((m0) + (int)ROW_OWN(i))
#define BLOCK_KEY(t, j) ((t) * TILE + (int)COL_OWN(j))

// A row-block kernel's start: local memory, the work-group's (sample b, head h), its first query
// m0, the end of the keys it reads, and `values` = scale A B^T (row_block_product).
#define ROW_BLOCK_BEGIN(values, scale_)                                                              \
    __local TYPE4 As[TK * LT / 4], Bs[TK * LT / 4];                                                  \
    __local TYPE partial[PARTIAL_VALUES];                                                            \
    const int m0 = get_group_id(1) * TILE, b = get_group_id(2) / heads, h = get_group_id(2) % heads; \
    const int end = attention_row_end(use_mask, causal, m0, tk);                                     \
    RowBlock values;                                                                                 \
    row_block_product(A + a_first + b * (long)a_sample + h * a_head, a_ld,                           \
                      B + b_first + b * (long)b_sample + h * b_head, b_ld, tq, tk, depth, m0, end, scale_, As, Bs, values)

// Where `query`'s row starts in the scores (batch, heads, Tq, Tk), and the loops over this
// work-item's runs of COL_RUN keys (key tile t, columns j.., from `key`) of a row that hold scores.
#define SCORE_ROW(query) ((((long)b * heads + h) * tq + (query)) * tk)
#define FOR_KEY_RUNS(t, j, key, query)                                                           \
    _Pragma("unroll")                                                                            \
    for (int t = 0; t < ROW_TILES; t++)                                                          \
        _Pragma("unroll")                                                                        \
        for (int j = 0, key = BLOCK_KEY(t, 0); j < ACC_COLS; j += COL_RUN, key = BLOCK_KEY(t, j)) \
            if ((query) < tq && key < end)

// probabilities (and `dropped`) of TILE queries from m0 of (b, h), as AttentionSoftmax computes
// them, from scale A B^T: A the query's projection, B the key's (AttentionProduct's operands).
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void AttentionScoresSoftmax(__global const TYPE *A, const int a_first, const int a_sample, const int a_head,
                            const int a_ld, __global const TYPE *B, const int b_first, const int b_sample,
                            const int b_head, const int b_ld,
                            __global TYPE *probabilities,  // (batch, heads, Tq, Tk)
                            __global TYPE *dropped,        // (batch, heads, Tq, Tk) if dropout
                            __global const TYPE *mask,     // (batch, Tq, Tk) if use_mask
                            __global const int *noise, const int tq, const int tk, const int heads, const int depth,
                            const TYPE scale, const int use_mask, const int causal, const int dropout,
                            const int seed, const int step, const TYPE keep)
{
    ROW_BLOCK_BEGIN(s, scale);
    TYPE m[ACC_ROWS], sum[ACC_ROWS];
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++) {
        m[i] = -INFINITY;
        #pragma unroll
        for (int t = 0; t < ROW_TILES; t++)
            #pragma unroll
            for (int j = 0; j < ACC_COLS; j++) {
                const int key = BLOCK_KEY(t, j);
                if (key < end) {
                    if (!attention_kept(mask, use_mask, causal, b, min(BLOCK_QUERY(m0, i), tq - 1), key, tq, tk))
                        s[t][i][j] = MASKED_SCORE;
                    m[i] = fmax(m[i], s[t][i][j]);
                }
            }
    }
    row_block_reduce(partial, m, 1);
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++) {
        sum[i] = 0;
        #pragma unroll
        for (int t = 0; t < ROW_TILES; t++)
            #pragma unroll
            for (int j = 0; j < ACC_COLS; j++) {
                s[t][i][j] = BLOCK_KEY(t, j) < end ? exp(s[t][i][j] - m[i]) : 0;
                sum[i] += s[t][i][j];
            }
    }
    row_block_reduce(partial, sum, 0);
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++) {
        const int query = BLOCK_QUERY(m0, i);
        const long row = SCORE_ROW(query);
        // Times 1 / sum: 64 divisions a work-item, correctly rounded as clnet builds its
        // programs, made the tiny GPT's launch measurably slower on a GPU.
        const TYPE inverse = 1 / sum[i];
        FOR_KEY_RUNS(t, j, key, query) {
            TYPE p[COL_RUN], kept[COL_RUN];
            #pragma unroll
            for (int e = 0; e < COL_RUN; e++)
                p[e] = s[t][i][j + e] * inverse;
            *(__global RUN *)(probabilities + row + key) = RUN_OF(p);
            if (dropout) {
                #pragma unroll
                for (int e = 0; e < COL_RUN; e++)
                    kept[e] = kept_by_dropout(p[e], (int)(row + key) + e, noise, seed, step, keep);
                *(__global RUN *)(dropped + row + key) = RUN_OF(kept);
            }
        }
    }
}

// dL/ds of TILE queries from m0 of (b, h), as CalcScoreGradientAttention computes it, from
// dL/d(dropped p) = A B^T: A dL/dcontext, B the value's projection.
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void AttentionScoreGradient(__global const TYPE *A, const int a_first, const int a_sample, const int a_head,
                            const int a_ld, __global const TYPE *B, const int b_first, const int b_sample,
                            const int b_head, const int b_ld,
                            __global const TYPE *probabilities,  // (batch, heads, Tq, Tk)
                            __global TYPE *score_gr,             // (batch, heads, Tq, Tk)
                            __global const TYPE *mask, __global const int *noise, const int tq, const int tk,
                            const int heads, const int depth, const int use_mask, const int causal,
                            const int dropout, const int seed, const int step, const TYPE keep)
{
    ROW_BLOCK_BEGIN(g, 1);
    TYPE weighted[ACC_ROWS];  // sum_j p_j g_j
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++) {
        const int query = BLOCK_QUERY(m0, i);
        const long row = SCORE_ROW(query);
        weighted[i] = 0;
        FOR_KEY_RUNS(t, j, key, query) {
            if (dropout) {
                const int at = (int)(row + key);
                #pragma unroll
                for (int e = 0; e < COL_RUN; e++)
                    g[t][i][j + e] = kept_by_dropout(g[t][i][j + e], at + e, noise, seed, step, keep);
            }
            weighted[i] += dot(*(const __global RUN *)(probabilities + row + key), RUN_OF(g[t][i] + j));
        }
    }
    row_block_reduce(partial, weighted, 0);
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++) {
        const int query = BLOCK_QUERY(m0, i);
        const long row = SCORE_ROW(query);
        FOR_KEY_RUNS(t, j, key, query) {
            // (p read again: kept in registers from the first pass, with g, it made the launch slower)
            TYPE p[COL_RUN], d[COL_RUN];
            CAT(vstore, COL_RUN)(*(const __global RUN *)(probabilities + row + key), 0, p);
            #pragma unroll
            for (int e = 0; e < COL_RUN; e++)
                d[e] = attention_kept(mask, use_mask, causal, b, query, key + e, tq, tk)
                       ? p[e] * (g[t][i][j + e] - weighted[i]) : 0;
            *(__global RUN *)(score_gr + row + key) = RUN_OF(d);
        }
    }
}
#endif

// A work-group per row r = (sample, head, query i) of the scores (batch, heads, Tq, Tk), already
// scaled: probabilities = softmax(where(mask, scores, -1e9)) as FeedForwardAttention computes
// them; with dropout, `dropped` = the probabilities dropout.cl's hash keeps, / keep, and 0
// elsewhere (what the context sums; the same hash index as FeedForwardAttention's).
__kernel void AttentionSoftmax(__global const TYPE *scores,   // (batch, heads, Tq, Tk)
                               __global TYPE *probabilities,  // (batch, heads, Tq, Tk)
                               __global TYPE *dropped,        // (batch, heads, Tq, Tk) if dropout
                               __global const TYPE *mask,     // (batch, Tq, Tk) if use_mask
                               __global const int *noise, const int tq, const int tk, const int heads,
                               const int use_mask, const int causal, const int dropout,
                               const int seed, const int step, const TYPE keep)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int r = get_group_id(0), lid = get_local_id(0), size = get_local_size(0);
    const int i = r % tq, b = r / (tq * heads);
    const long row = (long)r * tk;
    const int end = attention_row_end(use_mask, causal, i, tk);
    TYPE m = -INFINITY;
    for (int j = lid; j < end; j += size)
        m = fmax(m, attention_kept(mask, use_mask, causal, b, i, j, tq, tk) ? scores[row + j] : MASKED_SCORE);
    m = group_reduce(scratch, m, 1);
    TYPE sum = 0;
    for (int j = lid; j < end; j += size) {
        const TYPE s = attention_kept(mask, use_mask, causal, b, i, j, tq, tk) ? scores[row + j] : MASKED_SCORE;
        const TYPE e = exp(s - m);
        probabilities[row + j] = e;
        sum += e;
    }
    sum = group_reduce(scratch, sum, 0);
    for (int j = lid; j < end; j += size) {
        const TYPE p = probabilities[row + j] / sum;
        probabilities[row + j] = p;
        if (dropout)
            dropped[row + j] = kept_by_dropout(p, (int)(row + j), noise, seed, step, keep);
    }
}

// A work-group per row, in place: score_gr holds dL/d(dropped probability) (dL/dcontext V^T) and
// becomes dL/ds = p (g - sum_j p_j g_j), g that gradient through the dropout, 0 where masked (the
// score was replaced there), as CalcHiddenGradientAttention computes it.
__kernel void CalcScoreGradientAttention(__global const TYPE *probabilities,  // (batch, heads, Tq, Tk)
                                         __global TYPE *score_gr,             // (batch, heads, Tq, Tk)
                                         __global const TYPE *mask, __global const int *noise,
                                         const int tq, const int tk, const int heads,
                                         const int use_mask, const int causal, const int dropout,
                                         const int seed, const int step, const TYPE keep)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int r = get_group_id(0), lid = get_local_id(0), size = get_local_size(0);
    const int i = r % tq, b = r / (tq * heads);
    const long row = (long)r * tk;
    const int end = attention_row_end(use_mask, causal, i, tk);
    TYPE weighted = 0;  // sum_j p_j g_j
    for (int j = lid; j < end; j += size) {
        // Past the query's position under the causal mask alone, AttentionProduct left score_gr
        // unwritten (p is 0 there).
        TYPE g = causal && !use_mask && j > i ? 0 : score_gr[row + j];
        if (dropout)
            g = kept_by_dropout(g, (int)(row + j), noise, seed, step, keep);
        score_gr[row + j] = g;
        weighted += probabilities[row + j] * g;
    }
    weighted = group_reduce(scratch, weighted, 0);
    for (int j = lid; j < end; j += size)
        score_gr[row + j] = attention_kept(mask, use_mask, causal, b, i, j, tq, tk)
                            ? probabilities[row + j] * (score_gr[row + j] - weighted) : 0;
}
#endif
