// The tiled products on CUDA cores, and what every tiled form shares after its geometry: the
// staging, the K loop and the kernels (pasted after tiles.cl and a tensor-core form's files, if any;
// see tiles.cl).
#ifndef ROW_OWN  // the CUDA cores' tiles (a tensor-core form defines its own)
// The block's row (column) that a work-item's accumulator acc[i][j] belongs to; the rows (columns)
// a work-item owns come in runs of ROW_RUN (COL_RUN) that are contiguous in the block.
#define ROW_OWN(i) OWN(get_local_id(1), i)
#define COL_OWN(j) OWN(get_local_id(0), j)
#define ROW_RUN 4
#define COL_RUN 4
// Row length of a staged slice in local memory: padded so that the k-th rows start in different
// banks (staging writes columns), kept a multiple of 4 for TYPE4 reads.
#define LT (TILE + 4)
#endif
#ifndef ACC_ROWS
#define ACC_ROWS WPT
#define ACC_COLS WPT
#endif
#ifndef M_RUN_ROW
// Along m, neighbouring work-items read neighbouring TYPE4s of one depth.
#define M_RUN_ROW(e) ((e) % (TILE / 4) * 4)
#define M_RUN_DEPTH(e) ((e) / (TILE / 4))
#define M_RUN_AT(m, k) ((k) * (TILE / 4) + (m) / 4)
#endif
#ifndef STAGED
#define STAGED(k, m) ((k) * LT + (m))
// Along k, neighbouring work-items read neighbouring TYPE4s.
#define K_RUN_ROW(e) ((e) / (TK / 4))
#define K_RUN_DEPTH(e) ((e) % (TK / 4) * 4)
#define TRANSPOSED_PRODUCTS 0
#endif

// An operand P[m][k] (M x K) is contiguous along k (P[m * ld + k], ALONG_K) or along m
// (P[k * ld + m], ALONG_M); the kernels pass these as constants, so each product compiles to
// straight code. fetch() reads this work-item's share of the slice m0.. x k0.. into registers,
// four elements contiguous in memory at a time (one TYPE4 load unless it crosses an edge, where
// elements out of range read as 0); put() writes them to local memory as L[k][m].
#define ALONG_K 1
#define ALONG_M 0

inline void fetch(const __global TYPE *P, const int ld, const int along_k, const int m0, const int k0,
                  const int M, const int K, const int lid, TYPE4 r[LOADS])
{
    #pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int e = lid + l * ITEMS;
        // See K_RUN_ROW and M_RUN_ROW.
        const int m = m0 + (along_k ? K_RUN_ROW(e) : M_RUN_ROW(e));
        const int k = k0 + (along_k ? K_RUN_DEPTH(e) : M_RUN_DEPTH(e));
        const __global TYPE *p = along_k ? P + m * ld + k : P + k * ld + m;
        // The run is p[0..3]: along k if along_k, else along m.
        const int run = along_k ? K - k : M - m, other = along_k ? m < M : k < K;
        if (other && run >= 4 && ld % 4 == 0) {
            r[l] = *(const __global TYPE4 *)p;
        } else {
            r[l] = (TYPE4)(other && run > 0 ? p[0] : 0, other && run > 1 ? p[1] : 0,
                           other && run > 2 ? p[2] : 0, other && run > 3 ? p[3] : 0);
        }
    }
}

#if HALF
// The 16-bit products' staging (mma_half.cl, and A's in wgmma_half.cl): each operand rounded once,
// as it is staged, two depths a uint (STAGED_PAIR, tensor_cores.cl).
inline void put(const TYPE4 r[LOADS], const int along_k, __local TYPE4 *L4, const int lid)
{
    __local uint *L = (__local uint *)L4;
    __local ushort *H = (__local ushort *)L4;  // (a uint's lower half first: the GPU is little-endian)
    #pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int e = lid + l * ITEMS;
        uint low, high;
        if (along_k) {  // depths k .. k + 3 of row m: two pairs
            const int m = K_RUN_ROW(e), k = K_RUN_DEPTH(e);
            PACK(low, r[l].s0, r[l].s1);
            PACK(high, r[l].s2, r[l].s3);
            L[STAGED_PAIR(k, m)] = low;
            L[STAGED_PAIR(k + 2, m)] = high;
        } else {  // rows m .. m + 3 at depth k
#ifdef M_RUN_PAIRS
            const int k = M_RUN_DEPTH(e), odd = k % 2, m = M_RUN_ROW(e) + 2 * odd;
            pair_depths(r[l], odd, &low, &high);
            L[STAGED_PAIR(k, m)] = low;
            L[STAGED_PAIR(k, m + 1)] = high;
#else  // each the half of its pair that k's parity picks
            const int m = M_RUN_ROW(e), k = M_RUN_DEPTH(e), odd = k % 2;
            PACK(low, r[l].s0, r[l].s1);
            PACK(high, r[l].s2, r[l].s3);
            H[2 * STAGED_PAIR(k, m) + odd] = low & 0xffffu;
            H[2 * STAGED_PAIR(k, m + 1) + odd] = low >> 16;
            H[2 * STAGED_PAIR(k, m + 2) + odd] = high & 0xffffu;
            H[2 * STAGED_PAIR(k, m + 3) + odd] = high >> 16;
#endif
        }
    }
}
#else
inline void put(const TYPE4 r[LOADS], const int along_k, __local TYPE4 *L4, const int lid)
{
    __local TYPE *L = (__local TYPE *)L4;
    #pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int e = lid + l * ITEMS;
        if (along_k) {
            const int m = K_RUN_ROW(e), k = K_RUN_DEPTH(e);
            L[STAGED(k, m)] = r[l].s0;
            L[STAGED(k + 1, m)] = r[l].s1;
            L[STAGED(k + 2, m)] = r[l].s2;
            L[STAGED(k + 3, m)] = r[l].s3;
        } else {
            L4[STAGED(M_RUN_DEPTH(e), M_RUN_ROW(e)) / 4] = r[l];
        }
    }
}
#endif

// The weight gradient's B operand, delta = dL/dz, is made from dL/dy as it is fetched (times
// f'(z), unless a loss already gave dL/dz: the stored f'(z) with STORE_SLOPES, else f' of y, where
// f' follows from y; softmax's derivative is applied before); the work-groups of the first block
// row also write it out row-major, (capacity, units_p), for the input gradient, and each
// work-item sums what it fetched down the rows, for the bias gradient (its runs of 4 columns are
// the same in every slice). This is what a separate CalcDeltaBias launch did before the
// products: on a GPU, where an MLP's step at small batches is bound by the host's time per
// launch, one launch per layer fewer.
typedef struct {
    const __global TYPE *slopes;         // f'(z) with STORE_SLOPES, else y (rows, units)
    __global TYPE *delta;                // dL/dz (capacity, units_p); 0: not written by this group
    int units, units_p, apply_derivative;
    TYPE a, b;
    TYPE4 sums[LOADS];                   // this work-item's column sums of delta so far
} DeltaSource;

// Two steps, so that the loads of the first are on their way while a slice is multiplied: fetch
// dL/dy into r, and f'(z) or y into s; make_delta() then forms delta from them, before the slice
// is staged.
inline void fetch_delta(const __global TYPE *output_gr, const DeltaSource *d, const int n0, const int k0,
                        const int K, const int lid, TYPE4 r[LOADS], TYPE4 s[LOADS])
{
    fetch(output_gr, d->units, ALONG_M, n0, k0, d->units, K, lid, r);
    if (d->apply_derivative)
        fetch(d->slopes, d->units, ALONG_M, n0, k0, d->units, K, lid, s);
}

inline void make_delta(DeltaSource *d, const int n0, const int k0, const int K, const int lid, TYPE4 r[LOADS],
                       const TYPE4 s[LOADS])
{
    #pragma unroll
    for (int l = 0; l < LOADS; l++) {
        if (d->apply_derivative)
            r[l] *= STORE_SLOPES ? s[l]
                    : (TYPE4)(ACT_DERIVATIVE(s[l].s0, s[l].s0, d->a, d->b), ACT_DERIVATIVE(s[l].s1, s[l].s1, d->a, d->b),
                              ACT_DERIVATIVE(s[l].s2, s[l].s2, d->a, d->b), ACT_DERIVATIVE(s[l].s3, s[l].s3, d->a, d->b));
        d->sums[l] += r[l];
        const int e = lid + l * ITEMS, n = n0 + M_RUN_ROW(e), k = k0 + M_RUN_DEPTH(e);
        if (d->delta && k < K && n < d->units_p)  // units_p is a multiple of 4: whole, aligned runs
            *(__global TYPE4 *)(d->delta + k * d->units_p + n) = r[l];
    }
}

// acc += the product of the staged slices, As[k][m] and Bs[k][n], for this work-item's WPT x WPT
// outputs (convolution_tiles.cl's implicit products stage theirs with the same put()).
#if !MMA && !WGMMA  // the CUDA cores' slice product (a tensor-core form has its own)
inline void slice_product(__local const TYPE4 *As, __local const TYPE4 *Bs, TYPE acc[WPT][WPT])
{
    const int tx = get_local_id(0), ty = get_local_id(1);
    #pragma unroll
    for (int kk = 0; kk < TK; kk++) {
        TYPE a[WPT], b[WPT];
        #pragma unroll
        for (int q = 0; q < WPT / 4; q++) {
            const TYPE4 av = As[kk * (LT / 4) + q * SIDE + ty], bv = Bs[kk * (LT / 4) + q * SIDE + tx];
            a[q * 4] = av.s0; a[q * 4 + 1] = av.s1; a[q * 4 + 2] = av.s2; a[q * 4 + 3] = av.s3;
            b[q * 4] = bv.s0; b[q * 4 + 1] = bv.s1; b[q * 4 + 2] = bv.s2; b[q * 4 + 3] = bv.s3;
        }
        #pragma unroll
        for (int i = 0; i < WPT; i++)
            #pragma unroll
            for (int j = 0; j < WPT; j++)
                acc[i][j] += a[i] * b[j];
    }
}
#endif

#if !WGMMA
// The K loop of every tiled product, over depths [first, end) (first a multiple of TK): stage
// the slices held in ra and rb as As and Bs, and fetch the next ones while these are multiplied
// into acc. The caller declares ra, rb, As, Bs, lid and acc, and defines FETCH_A(k0) and
// FETCH_B(k0), which fill ra and rb with this work-item's share of the slices at depth k0, laid
// out along k or along m as fetch() lays them out (the same element per work-item), and
// PREPARE_SLICES(k0), which finishes what they fetched before it is staged (or nothing). A macro,
// so that convolution_tiles.cl's implicit products, which gather their slices from an image, run this same loop.
#define TILED_LOOP(first, end, a_along_k, b_along_k)             \
    FETCH_A(first);                                              \
    FETCH_B(first);                                              \
    for (int k0 = (first); k0 < (end); k0 += TK) {               \
        PREPARE_SLICES(k0);                                      \
        put(ra, a_along_k, As, lid);                             \
        put(rb, b_along_k, Bs, lid);                             \
        barrier(CLK_LOCAL_MEM_FENCE);                            \
        if (k0 + TK < (end)) {                                   \
            FETCH_A(k0 + TK);                                    \
            FETCH_B(k0 + TK);                                    \
        }                                                        \
        slice_product(As, Bs, acc);                              \
        barrier(CLK_LOCAL_MEM_FENCE);                            \
    }

#define TILED_BEGIN                                             \
    __local TYPE4 As[TK * LT / 4], Bs[TK * LT / 4];             \
    TYPE acc[ACC_ROWS][ACC_COLS];                               \
    for (int i = 0; i < ACC_ROWS; i++)                          \
        for (int j = 0; j < ACC_COLS; j++)                      \
            acc[i][j] = 0;
#endif

// acc += A B for the block of the M x N result at rows m0.., columns n0.., over k in [k_first, K);
// A is M x K, B is K x N, given as the K x N operand's transpose B^T[n][k] (N x K), so that both
// are "rows times K". k_first is a multiple of TK. With `delta_source`, the operand that is dL/dy
// (B, or A where TRANSPOSED_PRODUCTS turns the weight gradient around) is fetched as
// fetch_delta() and make_delta() make it (its ld and along are then not used).
inline void tiled_product_at(const __global TYPE *A, const int a_ld, const int a_along_k,
                             const __global TYPE *B, const int b_ld, const int b_along_k,
                             const int M, const int N, const int m0, const int n0, const int k_first, const int K,
                             __local TYPE4 *As, __local TYPE4 *Bs, TYPE acc[ACC_ROWS][ACC_COLS],
                             DeltaSource *delta_source)
{
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * SIDE + tx;
    TYPE4 ra[LOADS], rb[LOADS], rs[LOADS];  // rs: f'(z) or y beside dL/dy (fetch_delta)
#if TRANSPOSED_PRODUCTS
#define FETCH_A(k0)                                                  \
    if (delta_source)                                                \
        fetch_delta(A, delta_source, m0, k0, K, lid, ra, rs);        \
    else                                                             \
        fetch(A, a_ld, a_along_k, m0, k0, M, K, lid, ra)
#define FETCH_B(k0) fetch(B, b_ld, b_along_k, n0, k0, N, K, lid, rb)
#define PREPARE_SLICES(k0)                                           \
    if (delta_source)                                                \
        make_delta(delta_source, m0, k0, K, lid, ra, rs)
#else
#define FETCH_A(k0) fetch(A, a_ld, a_along_k, m0, k0, M, K, lid, ra)
#define FETCH_B(k0)                                                  \
    if (delta_source)                                                \
        fetch_delta(B, delta_source, n0, k0, K, lid, rb, rs);        \
    else                                                             \
        fetch(B, b_ld, b_along_k, n0, k0, N, K, lid, rb)
#define PREPARE_SLICES(k0)                                           \
    if (delta_source)                                                \
        make_delta(delta_source, n0, k0, K, lid, rb, rs)
#endif
    TILED_LOOP(k_first, K, a_along_k, b_along_k)
#undef FETCH_A
#undef FETCH_B
#undef PREPARE_SLICES
}

// tiled_product_at for this work-group's block: rows by its second index, columns by its first.
inline void tiled_product(const __global TYPE *A, const int a_ld, const int a_along_k,
                          const __global TYPE *B, const int b_ld, const int b_along_k,
                          const int M, const int N, const int k_first, const int K,
                          __local TYPE4 *As, __local TYPE4 *Bs, TYPE acc[ACC_ROWS][ACC_COLS], DeltaSource *delta_source)
{
    tiled_product_at(A, a_ld, a_along_k, B, b_ld, b_along_k, M, N, get_group_id(1) * TILE, get_group_id(0) * TILE,
                     k_first, K, As, Bs, acc, delta_source);
}

// row[start..start+3] = v, those at or past `size` dropped; one TYPE4 store where the run is
// whole and `aligned` (the row and start are multiples of 4).
inline void store4(__global TYPE *row, const TYPE4 v, const int start, const int size, const int aligned)
{
    if (aligned && start + 4 <= size)
        *(__global TYPE4 *)(row + start) = v;
    else
        D4ToArray(row, v, start, size);
}

// row[start..start+len) = v[0..len) for a run of len 1, 2 or 4, as store4 does.
inline void store_run(__global TYPE *row, const TYPE v[4], const int len, const int start, const int size,
                      const int aligned)
{
    if (len == 4)
        store4(row, (TYPE4)(v[0], v[1], v[2], v[3]), start, size, aligned);
    else if (len == 2 && aligned && start + 2 <= size)
        *(__global TYPE2 *)(row + start) = (TYPE2)(v[0], v[1]);
    else
        for (int e = 0; e < len; e++)
            if (start + e < size)
                row[start + e] = v[e];
}

// Store the block at (m_block, n_block) of the M x N result into C (row-major, rows ldc apart),
// or with `transposed` its transpose into C (N x M), in runs along C's rows (COL_RUN, or ROW_RUN
// transposed) either way.
inline void store_block_at(__global TYPE *C, const int ldc, const int M, const int N, const int m_block,
                           const int n_block, TYPE acc[ACC_ROWS][ACC_COLS], const int transposed)
{
    TYPE run[4];
    if (transposed) {
        #pragma unroll
        for (int j = 0; j < ACC_COLS; j++) {  // a column of the block
            const int n = n_block + COL_OWN(j);
            #pragma unroll
            for (int q = 0; q < ACC_ROWS; q += ROW_RUN) {
                for (int e = 0; e < ROW_RUN; e++)
                    run[e] = acc[q + e][j];
                if (n < N)
                    store_run(C + n * ldc, run, ROW_RUN, m_block + ROW_OWN(q), M, ldc % ROW_RUN == 0);
            }
        }
        return;
    }
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++) {  // a row of the block
        const int m = m_block + ROW_OWN(i);
        #pragma unroll
        for (int q = 0; q < ACC_COLS; q += COL_RUN) {
            for (int e = 0; e < COL_RUN; e++)
                run[e] = acc[i][q + e];
            if (m < M)
                store_run(C + m * ldc, run, COL_RUN, n_block + COL_OWN(q), N, ldc % COL_RUN == 0);
        }
    }
}

// store_block_at for this work-group's block (tiled_product's).
inline void store_block(__global TYPE *C, const int ldc, const int M, const int N, TYPE acc[ACC_ROWS][ACC_COLS],
                        const int transposed)
{
    store_block_at(C, ldc, M, N, get_group_id(1) * TILE, get_group_id(0) * TILE, acc, transposed);
}

// The forward's and the weight gradient's products: acc += A B for the M x N result's block at
// (m_block, n_block) as tiled_product_at() computes it, or with TRANSPOSED_PRODUCTS (the WGMMA
// form) its transpose B^T A^T, the block at (n_block, m_block): tiled_product_at() takes its second
// operand as the transpose, so the two operands just trade places, as they are stored.
// store_result() stores either (acc, or another array of the same layout) into C as the result
// (or, `transposed`, its transpose).
#if TRANSPOSED_PRODUCTS
#define result_product(A, a_ld, a_along_k, B, b_ld, b_along_k, M, N, m_block, n_block, first, end, source) \
    tiled_product_at(B, b_ld, b_along_k, A, a_ld, a_along_k, N, M, n_block, m_block, first, end, As, Bs, acc, source)
#define store_result(C, ldc, M, N, m_block, n_block, values, transposed) \
    store_block_at(C, ldc, N, M, n_block, m_block, values, !(transposed))
#define RESULT_COL(i, j) ROW_OWN(i)  // the result's column that acc[i][j] belongs to, within the block
#define RESULT_ROW(i, j) COL_OWN(j)  // and its row
#else
#define result_product(A, a_ld, a_along_k, B, b_ld, b_along_k, M, N, m_block, n_block, first, end, source) \
    tiled_product_at(A, a_ld, a_along_k, B, b_ld, b_along_k, M, N, m_block, n_block, first, end, As, Bs, acc, source)
#define store_result(C, ldc, M, N, m_block, n_block, values, transposed) \
    store_block_at(C, ldc, M, N, m_block, n_block, values, transposed)
#define RESULT_COL(i, j) COL_OWN(j)
#define RESULT_ROW(i, j) ROW_OWN(i)
#endif

// Where W's panel holding the columns from n (a multiple of `panel`) on would start if W were
// row-major with rows `panel` apart: the panel's element (i, c) is at
// (c / panel) * n_in * panel + i * panel + c % panel = panel_base + i * panel + c.
#define PANEL_BASE(W, n, panel, n_in) ((W) + (long)((n) / (panel)) * (panel) * ((n_in) - 1))

// The forward: y = f(x W + b) (+ r), z or f'(z) kept, y^T where ld. Where its (rows, units) result
// has too few blocks to fill the device (a small batch: the CNN's 128 x 1600 -> 128 layer was one
// to four work-groups, each summing all 1600 depths), the launch is split along n_in as the weight
// gradient is along the rows (work-group layer z sums depths [z chunk, (z + 1) chunk)), each layer
// stores its sums into its slice of `slices` (splits, rows, units), and FinishFeedForward ends it.
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void PerceptronFeedForward(__global const TYPE *inputs, __global const TYPE *weights,
                           __global const TYPE *bias,
                           __global const TYPE *residual,  // r (rows, units), added to y if adding
                           __global TYPE *kept,  // z (STORE_PRE) or f'(z) (STORE_SLOPES), (rows, units)
                           __global TYPE *outputs, __global TYPE *outputs_t, const int rows, const int n_in,
                           const int units, const int units_p, const int ld, const int adding, const TYPE a,
                           const TYPE b, const int panel, __global TYPE *slices, const int chunk)
{
    TILED_BEGIN
    const int m_block = get_group_id(1) * TILE, n_block = get_group_id(0) * TILE;
    const int first = get_group_id(2) * chunk, end = min(n_in, first + chunk);
    result_product(inputs, n_in, ALONG_K, PANEL_BASE(weights, n_block, panel, n_in), panel, ALONG_M, rows, units,
                   m_block, n_block, first, end, 0);
    if (get_num_groups(2) > 1) {  // (the whole launch)
        store_result(slices + (long)get_group_id(2) * rows * units, units, rows, units, m_block, n_block, acc, 0);
        return;
    }
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++)
        #pragma unroll
        for (int j = 0; j < ACC_COLS; j++) {
            const int n = n_block + RESULT_COL(i, j);
            acc[i][j] += n < units_p ? bias[n] : 0;
        }
#if STORE_PRE
    store_result(kept, units, rows, units, m_block, n_block, acc, 0);
#endif
#if STORE_SLOPES
    TYPE slopes[ACC_ROWS][ACC_COLS];
#endif
    #pragma unroll
    for (int i = 0; i < ACC_ROWS; i++)
        #pragma unroll
        for (int j = 0; j < ACC_COLS; j++) {
            const TYPE z = acc[i][j];
            acc[i][j] = ACT_FORWARD(z, a, b);
#if STORE_SLOPES
            slopes[i][j] = ACT_DERIVATIVE(acc[i][j], z, a, b);
#endif
        }
#if STORE_SLOPES
    store_result(kept, units, rows, units, m_block, n_block, slopes, 0);
#endif
    if (adding)
        #pragma unroll
        for (int i = 0; i < ACC_ROWS; i++)
            #pragma unroll
            for (int j = 0; j < ACC_COLS; j++) {
                const int m = m_block + RESULT_ROW(i, j), n = n_block + RESULT_COL(i, j);
                acc[i][j] += m < rows && n < units ? residual[(long)m * units + n] : 0;
            }
    store_result(outputs, units, rows, units, m_block, n_block, acc, 0);
    if (ld)
        store_result(outputs_t, ld, rows, units, m_block, n_block, acc, 1);
}

// The end of a forward split along n_in (see PerceptronFeedForward), an element a work-item: z =
// the slices' sum + b, then what the forward's own end stores.
__kernel void FinishFeedForward(__global const TYPE *slices,    // (splits, rows, units)
                                __global const TYPE *bias,
                                __global const TYPE *residual,  // r (rows, units), added to y if adding
                                __global TYPE *kept,            // z (STORE_PRE) or f'(z) (STORE_SLOPES)
                                __global TYPE *outputs, __global TYPE *outputs_t, const int splits, const int rows,
                                const int units, const int ld, const int adding, const TYPE a, const TYPE b)
{
    const int e = get_global_id(0), size = rows * units;
    if (e >= size)
        return;
    const int m = e / units, n = e % units;
    TYPE z = slices[e];
    for (int s = 1; s < splits; s++)
        z += slices[(long)s * size + e];
    z += bias[n];
#if STORE_PRE
    kept[e] = z;
#endif
    TYPE y = ACT_FORWARD(z, a, b);
#if STORE_SLOPES
    kept[e] = ACT_DERIVATIVE(y, z, a, b);
#endif
    if (adding)
        y += residual[e];
    outputs[e] = y;
    if (ld)
        outputs_t[(long)n * ld + m] = y;
}

// The weight gradient x^T delta, the bias gradient (delta's column sums) and delta itself, from
// dL/dy (see fetch_delta). x^T is x read along m: no transpose of x is made for it (the CPU form's
// does read one). The tiny GPT's Transposes (9 a step) and the y^T its GELU layers stored for
// the next weight gradient went; the WGMMA form's staging of x one element at a time (see stage)
// slowed its weight gradients slightly, and one step's kernels took less time in all
// (benchmarks/RESULTS.md, weight gradients reading x).
// The sums run over the batch's rows; a (n_in, units) block too small to fill the device is split
// along them (split-K): work-group layer z sums rows [z
// chunk, (z + 1) chunk) into its own slices of delta_weights and delta_bias, and SumSplits adds the
// slices. A conv layer's patches have ~86k rows and a 9 x 32 kernel: one work-group walked them all
// (most of the CNN's step on a GPU). A launch may compute only dL/dW's rows from `first_row` (a
// multiple of TILE) on, as many as its work-groups cover: under data-parallel training a large
// layer's rows are computed in parts, each copied off the device while the next computes, so that
// what is left to copy when the backward pass ends is one part, not the layer (see
// Dense.gradient_parts). delta and dL/db come from the part holding row 0.
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void CalcDeltaWeights(__global const TYPE *inputs,       // x (rows, n_in)
                      __global const TYPE *output_gr,    // dL/dy (rows, units)
                      __global const TYPE *slopes,       // f'(z) (STORE_SLOPES), else y (rows, units)
                      __global TYPE *delta,              // dL/dz (capacity, units_p); 0: not wanted
                      __global TYPE *delta_weights,      // dL/dW (splits, n_in, units_p)
                      __global TYPE *delta_bias,         // dL/db (splits, units_p)
                      const int rows, const int n_in, const int units, const int units_p,
                      const int chunk, const TYPE a, const TYPE b, const int apply_derivative, const int panel,
                      const int first_row)
{
    TILED_BEGIN
    const int z_split = get_group_id(2), first = z_split * chunk, end = min(rows, first + chunk);
    const int m_block = first_row + get_group_id(1) * TILE, n_block = get_group_id(0) * TILE;
    const int first_row_of_blocks = m_block == 0;
    DeltaSource source = {slopes, first_row_of_blocks ? delta : 0, units, units_p, apply_derivative, a, b};
    #pragma unroll
    for (int l = 0; l < LOADS; l++)
        source.sums[l] = (TYPE4)(0);
    result_product(inputs, n_in, ALONG_M, output_gr, 0, ALONG_M, n_in, units_p, m_block, n_block, first, end,
                   &source);
    store_result(PANEL_BASE(delta_weights + (long)z_split * n_in * units_p, n_block, panel, n_in), panel, n_in,
                 units_p, m_block, n_block, acc, 0);
    if (!first_row_of_blocks)
        return;
    // The bias gradient: the work-items' column sums, added up per run of 4 columns (a run's
    // partial sums are those of the TK items e = M_RUN_AT(run, depth), as fetch() numbers them).
    const int lid = get_local_id(1) * SIDE + get_local_id(0);
    #pragma unroll
    for (int l = 0; l < LOADS; l++)
        Bs[lid + l * ITEMS] = source.sums[l];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int n = n_block + lid * 4;
    if (lid < TILE / 4 && n < units_p) {
        TYPE4 sum = (TYPE4)(0);
        for (int depth = 0; depth < TK; depth++)
            sum += Bs[M_RUN_AT(lid * 4, depth)];
        *(__global TYPE4 *)(delta_bias + z_split * units_p + n) = sum;
    }
}

// delta_weights = the sum of the split-K slices of the weight gradient (splits, n_in * units_p),
// delta_bias = that of the bias gradient's (splits, units_p): one work-item per element.
__kernel void SumSplits(__global const TYPE *weight_slices, __global const TYPE *bias_slices,
                        __global TYPE *delta_weights, __global TYPE *delta_bias, const int splits,
                        const int weights, const int units_p)
{
    const int e = get_global_id(0);
    const int bias = e >= weights;
    const __global TYPE *slices = bias ? bias_slices + e - weights : weight_slices + e;
    const int stride = bias ? units_p : weights;
    TYPE sum = 0;
    for (int z = 0; z < splits; z++)
        sum += slices[z * stride];
    if (bias)
        delta_bias[e - weights] = sum;
    else
        delta_weights[e] = sum;
}

// dL/dx = delta W^T, summed panel after panel of W (one, unless the layer joins parts). delta is
// (rows, depth): the layer's (rows, units_p), or dL/dy itself, (rows, units), where that is delta
// (see Dense.backward); W's columns from units on are 0, so the depth summed may stop at units.
__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void CalcHiddenGradient(__global const TYPE *delta, __global const TYPE *weights,
                        __global TYPE *input_gr, const int rows, const int n_in, const int depth, const int panel)
{
    TILED_BEGIN
    for (int first = 0; first < depth; first += panel)
        tiled_product(delta, depth, ALONG_K, PANEL_BASE(weights, first, panel, n_in), panel, ALONG_K, rows, n_in,
                      first, min(first + panel, depth), As, Bs, acc, 0);
    store_block(input_gr, n_in, rows, n_in, acc, 0);
}
