// MultiHeadAttention's CPU form, built after multi_head_attention.cl (its mask, key-count and
// dropout helpers; the GPU form's kernels there stay as they are). A CPU runs a work-item's
// arithmetic on SIMD lanes only where the code names vectors: one work-item per query row (the
// GPU form) left its dot products scalar, and each key and value row it loaded served one
// query. Here a work-item takes LANES query positions of one (sample, head), one per lane of a
// LANE_T: the scores of a key are LANES products at once, with the key's elements broadcast to
// the lanes, the softmax runs down the lanes with no reduction across them, and every key or
// value row loaded serves LANES queries. The loops over a row's elements are unrolled (DIM is a
// build define), so that the row of sums (q, c, dq, or dv and dk) stays in registers: rolled,
// pip's PoCL 3.0 kept it in memory, a load and a store around every multiply-add.
//
// The probabilities and the score gradient are stored lane-major for that, transposed to
// (batch, heads, Tk, tq_p): key j's LANES lanes are consecutive (tq_p = Tq rounded up to LANES, so a
// block's lanes never run into the next key's; the lanes past Tq hold values nobody reads).
// The dropout hash still takes an entry's index in the GPU form's (batch, heads, Tq, Tk), so both
// forms drop the same probabilities.
//
// vec_type_hint(LANE_T) on the kernels, as on the recurrent layers' (recurrent.cl): Intel's CPU
// compiler otherwise vectorizes them across work-items as well, and ran them several times
// slower than PoCL (benchmarks/RESULTS.md, Intel's runtime on a Zen 4 without AVX-512).

// LANES (a build define, 8 or 16): 16 where the dense products' tuner chose vectors of 16 on this
// device (multi_head_attention.lane_width): one AVX-512 register of float32.
#ifndef LANES
#define LANES 8
#endif
#define LANE_T CAT(TYPE, LANES)
#define LANE_ROWS(tq) (((tq) + LANES - 1) / LANES * LANES)  // tq_p
#define CHUNKS(DIM) (((DIM) + LANES - 1) / LANES)            // LANE_Ts in a row of DIM
typedef LANE_T __attribute__((aligned(sizeof(TYPE)))) LANE_T_U;
#define LoadLanes(p) (*(const __global LANE_T_U *)(p))
#define StoreLanes(v, p) (*(__global LANE_T_U *)(p) = (v))
// exp on the lanes; where the builtins take half vectors (HALVED_BUILTINS, common.cl), on halves.
#if LANES == 16 && HALVED_BUILTINS
__attribute__((always_inline)) LANE_T exp_lanes(const LANE_T v) { return (LANE_T)(exp8(v.lo), exp8(v.hi)); }
#elif LANES == 16
#define exp_lanes exp
#else
#define exp_lanes exp8
#endif

// Lane l of a block's column of DIM-element rows `rows` (row l at rows + l * stride) for each
// d < DIM: out[d] holds element d of the block's `valid` rows, 0 in the lanes past them. Lanes
// are reached through a TYPE pointer to a LANE_T copy, here and below: PoCL 3.0 calls vload8 and
// vstore8 out of line (see TYPE4_U in common.cl), and a copy keeps the address of the kernel's
// own vectors untaken, so that they can stay in registers.
#define GATHER_LANES(out, rows, stride, valid, DIM, factor)                           \
    do {                                                                              \
        LANE_T v_[DIM];                                                               \
        TYPE *t_ = (TYPE *)v_;                                                        \
        for (int l_ = 0; l_ < LANES; l_++)                                            \
            for (int d_ = 0; d_ < (DIM); d_++)                                        \
                t_[d_ * LANES + l_] = l_ < (valid) ? (rows)[l_ * (long)(stride) + d_] * (factor) : 0; \
        for (int d_ = 0; d_ < (DIM); d_++)                                            \
            (out)[d_] = v_[d_];                                                       \
    } while (0)

// The inverse: row l of `rows` gets lane l of in[d], d < DIM, for the `valid` rows.
#define SCATTER_LANES(rows, stride, in, valid, DIM, factor)                           \
    do {                                                                              \
        LANE_T v_[DIM];                                                               \
        for (int d_ = 0; d_ < (DIM); d_++)                                            \
            v_[d_] = (in)[d_] * (factor);                                             \
        const TYPE *t_ = (const TYPE *)v_;                                            \
        for (int l_ = 0; l_ < (valid); l_++)                                          \
            for (int d_ = 0; d_ < (DIM); d_++)                                        \
                (rows)[l_ * (long)(stride) + d_] = t_[d_ * LANES + l_];               \
    } while (0)

// s = sum_d lanes[d] row[d] over DIM elements of a global row (each broadcast to the lanes), in
// two running sums, so that two chains of multiply-adds overlap.
#define LANE_DOT(s, lanes, row, DIM)                                                  \
    do {                                                                              \
        LANE_T even_ = (LANE_T)(0), odd_ = (LANE_T)(0);                               \
        int d_ = 0;                                                                   \
        _Pragma("unroll")                                                             \
        for (; d_ + 2 <= (DIM); d_ += 2) {                                            \
            even_ += (lanes)[d_] * (row)[d_];                                         \
            odd_ += (lanes)[d_ + 1] * (row)[d_ + 1];                                  \
        }                                                                             \
        if (d_ < (DIM))                                                               \
            even_ += (lanes)[d_] * (row)[d_];                                         \
        s = even_ + odd_;                                                             \
    } while (0)

// Where the causal mask cuts through a block (key j past some of its queries), or an explicit
// mask is given, the lanes whose query may not attend to key j take `masked`; lanes past Tq are
// left alone.
inline LANE_T mask_lanes(LANE_T s, const TYPE masked, __global const TYPE *mask, const int use_mask,
                         const int causal, const int b, const int i0, const int j, const int tq, const int tk)
{
    if (!use_mask && !(causal && j > i0))
        return s;
    TYPE *t = (TYPE *)&s;
    for (int l = 0; l < LANES && i0 + l < tq; l++)
        if (!attention_kept(mask, use_mask, causal, b, i0 + l, j, tq, tk))
            t[l] = masked;
    return s;
}

// Each lane's weight through dropout.cl's hash: kept ones divided by keep, the others 0. `at` is
// (sample, head, query i0, key j)'s index in (batch, heads, Tq, Tk).
inline LANE_T drop_lanes(LANE_T w, const long at, const int tk, const int valid, __global const int *noise,
                         const int seed, const int step, const TYPE keep)
{
    TYPE *t = (TYPE *)&w;
    for (int l = 0; l < valid; l++)
        t[l] = kept_by_dropout(t[l], (int)(at + (long)l * tk), noise, seed, step, keep);
    return w;
}

// FeedForwardAttention's results for the query positions i0..i0+LANES-1 of (sample b, head h): the
// same formula (scores of the scaled query, masked by -1e9, max-subtracted softmax, dropout,
// weighted sum of the values), probabilities lane-major (see above).
__kernel __attribute__((vec_type_hint(LANE_T))) void FeedForwardAttentionLanes(FEED_FORWARD_ATTENTION_ARGS)
{
    const int i0 = get_global_id(0) * LANES, h = get_global_id(1), b = get_global_id(2);
    const int valid = min_int(LANES, tq - i0), tq_p = LANE_ROWS(tq);
    __global LANE_T *p = (__global LANE_T *)(probabilities + ((long)b * heads + h) * tk * tq_p + i0);  // p[j * tq_p / LANES]
    const int stride = tq_p / LANES;
    LANE_T q[KEY_DIM];  // Keras scales the query, then takes the product
    GATHER_LANES(q, QUERY_ROW(query, (long)b * tq + i0, h), QK_ROW, valid, KEY_DIM, scale);
    int keys = causal ? min_int(i0 + LANES, tk) : tk;  // the block's last query's keys

    LANE_T m = (LANE_T)(-INFINITY);
    for (int j = 0; j < keys; j++) {
        LANE_T s;
        LANE_DOT(s, q, KEY_ROW(key, (long)b * tk + j, h), KEY_DIM);
        s = mask_lanes(s, MASKED_SCORE, mask, use_mask, causal, b, i0, j, tq, tk);
        p[j * stride] = s;
        m = s > m ? s : m;  // (fmax, a library call on pip's PoCL 3.0; see min_int in common.cl)
    }
    // A query masked entirely: Keras's softmax of -1e9 everywhere, future keys too. The block's
    // other queries get exp(-1e9 - max) = 0 there, as for the keys their causal mask cuts off.
    const LANE_T m_lanes = m;
    const TYPE *lanes_m = (const TYPE *)&m_lanes;
    bool lost = false;
    for (int l = 0; l < valid; l++)
        lost |= lanes_m[l] == MASKED_SCORE;
    if (lost) {
        for (int j = keys; j < tk; j++)
            p[j * stride] = (LANE_T)(MASKED_SCORE);
        keys = tk;
    }
    LANE_T sum = (LANE_T)(0);
    for (int j = 0; j < keys; j++) {
        const LANE_T e = exp_lanes(p[j * stride] - m);
        p[j * stride] = e;
        sum += e;
    }
    LANE_T c[VALUE_DIM];
    #pragma unroll
    for (int d = 0; d < VALUE_DIM; d++)
        c[d] = (LANE_T)(0);
    for (int j = 0; j < keys; j++) {
        const LANE_T probability = p[j * stride] / sum;
        p[j * stride] = probability;
        LANE_T w = probability;
        if (dropout)
            w = drop_lanes(w, (((long)b * heads + h) * tq + i0) * tk + j, tk, valid, noise, seed, step, keep);
        const __global TYPE *v = VALUE_ROW(value, (long)b * tk + j, h);
        #pragma unroll
        for (int d = 0; d < VALUE_DIM; d++)
            c[d] += w * v[d];
    }
    for (int j = keys; j < tk; j++)
        p[j * stride] = (LANE_T)(0);
    SCATTER_LANES(context + (((long)b * tq + i0) * heads + h) * VALUE_DIM, heads * VALUE_DIM, c, valid, VALUE_DIM, 1);
    if (!ld)  // no transposed context read (see FeedForwardAttention)
        return;
    const long column = (long)b * tq + i0;
    #pragma unroll
    for (int d = 0; d < VALUE_DIM; d++) {
        __global TYPE *out = context_t + (long)(h * VALUE_DIM + d) * ld + column;
        if (valid == LANES) {
            StoreLanes(c[d], out);
        } else {
            const LANE_T cd = c[d];
            const TYPE *t = (const TYPE *)&cd;
            for (int l = 0; l < valid; l++)
                out[l] = t[l];
        }
    }
}

// CalcHiddenGradientAttention for the query positions i0..i0+LANES-1 of (sample b, head h): dL/dp =
// dL/dcontext . v through the dropout, dL/ds = p (dL/dp - sum_j p_j dL/dp_j), 0 where masked,
// dL/dquery = scale * sum_j dL/ds_j k_j; score_gr lane-major, as the probabilities.
__kernel __attribute__((vec_type_hint(LANE_T))) void CalcHiddenGradientAttentionLanes(HIDDEN_GRADIENT_ATTENTION_ARGS)
{
    const int i0 = get_global_id(0) * LANES, h = get_global_id(1), b = get_global_id(2);
    const int valid = min_int(LANES, tq - i0), tq_p = LANE_ROWS(tq), stride = tq_p / LANES;
    const long block = ((long)b * heads + h) * tk * tq_p + i0;
    const __global LANE_T *p = (const __global LANE_T *)(probabilities + block);
    __global LANE_T *ds = (__global LANE_T *)(score_gr + block);
    LANE_T dc[VALUE_DIM];
    GATHER_LANES(dc, context_gr + (((long)b * tq + i0) * heads + h) * VALUE_DIM, heads * VALUE_DIM, valid,
                 VALUE_DIM, 1);
    const int keys = causal ? min_int(i0 + LANES, tk) : tk;

    LANE_T weighted = (LANE_T)(0);  // sum_j p_j dL/dp_j
    for (int j = 0; j < keys; j++) {
        LANE_T g;
        LANE_DOT(g, dc, VALUE_ROW(value, (long)b * tk + j, h), VALUE_DIM);
        if (dropout)
            g = drop_lanes(g, (((long)b * heads + h) * tq + i0) * tk + j, tk, valid, noise, seed, step, keep);
        ds[j * stride] = g;
        weighted += p[j * stride] * g;
    }
    LANE_T dq[KEY_DIM];
    #pragma unroll
    for (int d = 0; d < KEY_DIM; d++)
        dq[d] = (LANE_T)(0);
    for (int j = 0; j < keys; j++) {
        const LANE_T g = mask_lanes(p[j * stride] * (ds[j * stride] - weighted), 0, mask, use_mask, 0, b, i0, j,
                                    tq, tk);
        ds[j * stride] = g;
        const __global TYPE *k = KEY_ROW(key, (long)b * tk + j, h);
        #pragma unroll
        for (int d = 0; d < KEY_DIM; d++)
            dq[d] += g * k[d];
    }
    for (int j = keys; j < tk; j++)
        ds[j * stride] = (LANE_T)(0);
    SCATTER_LANES(QUERY_ROW(query_gr, (long)b * tq + i0, h), QK_ROW, dq, valid, KEY_DIM, scale);
}

// Row `row` of DIM elements, chunk c of LANES, the elements past DIM read as 0.
__attribute__((always_inline))
LANE_T row_chunk(const __global TYPE *row, const int c, const int dim)
{
    if ((c + 1) * LANES <= dim)
        return LoadLanes(row + c * LANES);
    LANE_T v;
    TYPE *t = (TYPE *)&v;
    for (int l = 0; l < LANES; l++)
        t[l] = c * LANES + l < dim ? row[c * LANES + l] : 0;
    return v;
}

// CalcHiddenGradientAttentionKeyValue for the keys j0..j0+KV_KEYS-1 of (sample b, head h): the
// rows of dL/dvalue and dL/dkey on the lanes, each dL/dcontext and query row loaded once for the
// block's keys, which take their weights (probability and dL/ds, consecutive along the queries)
// one at a time. KV_KEYS (a build define) divides LANES: a query's forward block then wrote all of
// the block's keys that the causal mask lets the query reach, and the zeros past them.
__kernel __attribute__((vec_type_hint(LANE_T))) void CalcHiddenGradientAttentionKeyValueLanes(KEY_VALUE_GRADIENT_ATTENTION_ARGS)
{
    const int j0 = get_global_id(0) * KV_KEYS, h = get_global_id(1), b = get_global_id(2);
    const int keys = min_int(KV_KEYS, tk - j0), tq_p = LANE_ROWS(tq);
    const long block = (((long)b * heads + h) * tk + j0) * tq_p;  // + jj * tq_p + i: (key j0 + jj, query i)
    LANE_T dv[KV_KEYS][CHUNKS(VALUE_DIM)], dk[KV_KEYS][CHUNKS(KEY_DIM)];
    #pragma unroll
    for (int jj = 0; jj < KV_KEYS; jj++) {
        #pragma unroll
        for (int c = 0; c < CHUNKS(VALUE_DIM); c++)
            dv[jj][c] = (LANE_T)(0);
        #pragma unroll
        for (int c = 0; c < CHUNKS(KEY_DIM); c++)
            dk[jj][c] = (LANE_T)(0);
    }
    // A row masked entirely attends to future keys too (see FeedForwardAttention): with an
    // explicit mask every row is read.
    for (int i = causal && !use_mask ? j0 : 0; i < tq; i++) {
        const __global TYPE *dc_row = context_gr + (((long)b * tq + i) * heads + h) * VALUE_DIM;
        const __global TYPE *q_row = QUERY_ROW(query, (long)b * tq + i, h);
        LANE_T dc[CHUNKS(VALUE_DIM)], q[CHUNKS(KEY_DIM)];
        #pragma unroll
        for (int c = 0; c < CHUNKS(VALUE_DIM); c++)
            dc[c] = row_chunk(dc_row, c, VALUE_DIM);
        #pragma unroll
        for (int c = 0; c < CHUNKS(KEY_DIM); c++)
            q[c] = row_chunk(q_row, c, KEY_DIM);
        #pragma unroll
        for (int jj = 0; jj < KV_KEYS; jj++) {
            const long at = block + (long)jj * tq_p + i;
            TYPE w = jj < keys ? probabilities[at] : 0;
            if (dropout && jj < keys)
                w = kept_by_dropout(w, (int)((((long)b * heads + h) * tq + i) * tk + j0 + jj), noise, seed, step,
                                    keep);
            const TYPE g = jj < keys ? score_gr[at] : 0;
            #pragma unroll
            for (int c = 0; c < CHUNKS(VALUE_DIM); c++)
                dv[jj][c] += w * dc[c];
            #pragma unroll
            for (int c = 0; c < CHUNKS(KEY_DIM); c++)
                dk[jj][c] += g * q[c];
        }
    }
    for (int jj = 0; jj < keys; jj++) {
        LANE_T dv_j[CHUNKS(VALUE_DIM)], dk_j[CHUNKS(KEY_DIM)];
        #pragma unroll
        for (int c = 0; c < CHUNKS(VALUE_DIM); c++)
            dv_j[c] = dv[jj][c];
        #pragma unroll
        for (int c = 0; c < CHUNKS(KEY_DIM); c++)
            dk_j[c] = scale * dk[jj][c];
        const TYPE *t = (const TYPE *)dv_j, *u = (const TYPE *)dk_j;
        __global TYPE *out_v = VALUE_ROW(value_gr, (long)b * tk + j0 + jj, h);
        #pragma unroll
        for (int d = 0; d < VALUE_DIM; d++)
            out_v[d] = t[d];
        __global TYPE *out_k = KEY_ROW(key_gr, (long)b * tk + j0 + jj, h);
        #pragma unroll
        for (int d = 0; d < KEY_DIM; d++)
            out_k[d] = u[d];
    }
}
