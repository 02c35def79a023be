// The dense products' GPU form, the same kernels as cpu_blocks.cl's (its comments say what each
// computes and why the layouts): here W and delta are one row-major panel, P = units_p, or a joined
// layer's parts' width. Its tensor-core variants (MMA, WGMMA) are chosen by their defines below.
// Products are written "acc += a * b", which OpenCL compilers contract to FMA.

// STORE_PRE: as in cpu_blocks.cl.
#ifndef STORE_PRE
#define STORE_PRE 1
#endif
// STORE_SLOPES = 1 (the GPU form, where f' needs z): the forward stores f'(z) in z's place, and the
// weight gradient multiplies dL/dy by it as it fetches it. It used to fetch y and z there and
// compute f' inside the K loop: the tiny GPT's GELU layer (8192 x 256 -> 1024, WGMMA) took
// markedly longer for its weight gradient than a linear layer's; this way it comes close to the
// linear layer's, while the forward, whose erf f' shares, became only slightly slower
// (benchmarks/RESULTS.md, f'(z) kept by the forward).
#ifndef STORE_SLOPES
#define STORE_SLOPES 0
#endif

// The GPU form of the same three products: a work-group of (TILE/WPT)^2 work-items computes a
// TILE x TILE block of the result, staging TK-deep slices of both operands in local memory; each
// work-item accumulates WPT x WPT outputs in runs of 4 (OWN below), so that it reads local memory
// one TYPE4 at a time and neighbouring work-items read neighbouring TYPE4s. While a slice is
// multiplied, the next one is already on its way from global memory into registers. W and delta
// are row-major here (a single panel, P = units_p). WPT is a multiple of 4.
// Aligned runs of 4 are read and written through TYPE4 pointers, and local memory is declared as
// TYPE4: vload4/vstore4 only promise TYPE alignment, and NVIDIA's compiler splits them into four
// scalar accesses (with them, 4096^3 ran markedly slower than with TYPE4 accesses).
// Buffers start aligned and such a run starts at a multiple of 4 of a row whose length is one.
#define SIDE (TILE / WPT)
#define ITEMS (SIDE * SIDE)
// TYPE4s of one operand's slice that each work-item moves.
#define LOADS (TILE * TK / 4 / ITEMS)
#if TILE * TK % (4 * ITEMS) || WPT % 4
#error "a slice must split into whole TYPE4s per work-item, and WPT be a multiple of 4"
#endif
// The i-th of a work-item's WPT rows (columns) within the block, for local index t.
#define OWN(t, i) (((i) / 4) * 4 * SIDE + (t) * 4 + (i) % 4)
#ifndef MMA
#define MMA 0
#endif
#ifndef WGMMA
#define WGMMA 0
#endif
#if WGMMA
// WGMMA: Hopper's warpgroup products (see slice_product below). Each of the two warpgroups (128
// work-items) computes 64 rows of the block by all its 128 columns with wgmma.m64n128k8: warp w of
// a warpgroup holds its rows 16w .. + 16, and a lane, of those, rows g and g + 8 by columns 8j + 2t
// and 8j + 2t + 1 for j < 16 (g = lane / 4, t = lane % 4): acc[h][2j + e] is row g + 8h, column
// 8j + 2t + e.
#if TILE != 128 || WPT != 8 || TK != 16
#error "the warpgroup form (WGMMA) computes 128 x 128 blocks, 16 deep a slice, with 256 work-items"
#endif
#define LOCAL_INDEX (get_local_id(1) * SIDE + get_local_id(0))
#define ACC_ROWS 2
#define ACC_COLS 32
#define ROW_OWN(i) (LOCAL_INDEX / 128 * 64 + LOCAL_INDEX / 32 % 4 * 16 + LOCAL_INDEX % 32 / 4 + (i) * 8)
#define COL_OWN(j) ((j) / 2 * 8 + LOCAL_INDEX % 4 * 2 + (j) % 2)
#define ROW_RUN 1
#define COL_RUN 2
// A's slice, k rows of TILE: unpadded, for two stages of both operands fill NVIDIA OpenCL's 48 KiB
// of local memory exactly; instead, row k's columns are swizzled by k % 4 (whole runs of 8, so a
// TYPE4 stays whole), which puts a fragment's 32 reads (columns g + const, depths t + const) in
// 32 different banks, and staging along k (neighbouring work-items, neighbouring rows) as well.
#define LT TILE
#define STAGED(k, m) ((k) * TILE + ((m) ^ (k) % 4 * 8))
// Along k, neighbouring work-items fetch neighbouring rows (a TYPE4 of 4 depths each), so that
// staging B's 16-byte rows (and A's columns) hits distinct banks.
#define K_RUN_ROW(e) ((e) % TILE)
#define K_RUN_DEPTH(e) ((e) / TILE * 4)
// Along m, a warp's 32 work-items fetch 4 depths by 8 TYPE4s (128 bytes of each of 4 rows), not
// 32 TYPE4s of one depth: B fetched along n (the weight gradient's x) is staged K-major one
// element at a time (see stage), and only with 4 depths and 8 rows among a warp's stores do they
// fall in 32 distinct banks. A along m keeps whole-TYPE4 stores, 8 banks apart (STAGED's swizzle).
#define M_RUN_ROW(e) ((e) / 4 % (TILE / 4) * 4)
#define M_RUN_DEPTH(e) ((e) / TILE * 4 + (e) % 4)
#define M_RUN_AT(m, k) ((k) / 4 * TILE + (m) / 4 * 4 + (k) % 4)  // the e of (m, k), m a multiple of 4
// wgmma takes float operands from local memory K-major only (B[n][k], k contiguous): the forward
// and the weight gradient, whose B (W, delta) is contiguous along n, compute their results'
// transposes, W^T x^T and delta^T x. The forward's B, x, is then contiguous along k; the weight
// gradient's, x again, along n, which stage() puts K-major one element at a time.
#define TRANSPOSED_PRODUCTS 1
#elif !MMA
// The block's row (column) that a work-item's accumulator acc[i][j] belongs to; the rows (columns)
// a work-item owns come in runs of ROW_RUN (COL_RUN) that are contiguous in the block.
#define ROW_OWN(i) OWN(get_local_id(1), i)
#define COL_OWN(j) OWN(get_local_id(0), j)
#define ROW_RUN 4
#define COL_RUN 4
// Row length of a staged slice in local memory: padded so that the k-th rows start in different
// banks (staging writes columns), kept a multiple of 4 for TYPE4 reads.
#define LT (TILE + 4)
#else
// MMA: the products on NVIDIA's tensor cores (see slice_product). Warp w of the 8 computes the
// block's rows (w / 4) * 64 .. + 64 by columns (w % 4) * 32 .. + 32 as 4 x 4 tiles of 16 x 8, and
// a lane holds, of each tile, rows g and g + 8 by columns 2t and 2t + 1 (g = lane / 4, t = lane
// % 4), as PTX's mma.m16n8k8 lays out its result: acc[2 * mi + h][2 * nj + e] is tile (mi, nj)'s
// row g + 8h, column 2t + e.
#if TILE != 128 || WPT != 8 || TK % 8
#error "the tensor-core form (MMA) computes 128 x 128 blocks with 8 x 8 outputs a work-item, TK a multiple of 8"
#endif
#define LOCAL_INDEX (get_local_id(1) * SIDE + get_local_id(0))
#define ROW_OWN(i) (LOCAL_INDEX / 128 * 64 + (i) / 2 * 16 + LOCAL_INDEX % 32 / 4 + (i) % 2 * 8)
#define COL_OWN(j) (LOCAL_INDEX / 32 % 4 * 32 + (j) / 2 * 8 + LOCAL_INDEX % 4 * 2 + (j) % 2)
#define ROW_RUN 1
#define COL_RUN 2
// LT = 8 (mod 32): a fragment's 32 reads (rows or columns g + const, depths t + const) fall in
// 32 different banks.
#define LT (TILE + 8)
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
#if MMA || WGMMA
// On NVIDIA's tensor cores (compute capability 8.0 on; float only), through inline PTX, since
// OpenCL has no API for them: mma.sync.m16n8k8 on TF32 operands, which keep 10 of float's 23
// mantissa bits. 3xTF32 makes up most of float's accuracy, as CUTLASS's "fast fp32" does: x = big
// + small, each TF32 (big is x cut to its top 11 significant bits, small the rest rounded to
// TF32; x is kept to within 2^-22 |x|, where float's rounding is 2^-24 and mma's own cutting of
// small would be 2^-21), and a b ~ a_small b_big + a_big b_small + a_big b_big. The tensor cores'
// own sums lose bits as they grow (into one accumulator the error grew with K, far past numpy's
// float32 at 4096^3), so each slice is summed from 0 and added to acc in ordinary float (then
// close to numpy's). Against the CUDA-core tiles: as fast or faster at
// the tiny GPT's sizes, and more accurate (benchmarks/tensor_cores.py; benchmarks/RESULTS.md, the
// Dense products' MMA form).
// big and small of x, a float or a vector of them with its bit casts as_u and as_f: small is rounded
// to TF32 (half away from 0).
#define TF32_BIG(x, as_u) (as_u(x) & 0xffffe000u)
#define TF32_SMALL(x, as_u, as_f) ((as_u((x) - as_f(TF32_BIG(x, as_u))) + 0x1000u) & 0xffffe000u)

inline void split_tf32(const TYPE x, uint *big, uint *small)
{
    *big = TF32_BIG(x, as_uint);
    *small = TF32_SMALL(x, as_uint, as_float);
}
#endif

#if WGMMA
// Hopper's wgmma (compute capability 9.0): a warpgroup's asynchronous product, its A operand
// (64 x 8 of TF32) from registers and its B (8 x 128) from local memory, read by the tensor cores
// themselves: its 4096^3 forward ran markedly faster than the MMA form's, which feeds
// every operand through registers (benchmarks/RESULTS.md, Hopper's wgmma). While a slice's wgmmas
// run, the work-items stage the next slice, fetched a slice earlier, into the other half of local
// memory (two stages), and fetch the one after. 3xTF32 and the slice sums as the MMA form's.
// B's two TF32 halves are staged side by side: big as x itself, since wgmma reads only a TF32's
// top 19 bits (cutting, as big does), and small.
// PTX ISA: wgmma is an sm_90a instruction, and NVIDIA's OpenCL compiler writes `.target sm_90`,
// where ptxas refuses it. HOPPER() hides an instruction in a PTX comment, which the runtime
// (Runtime._sm90a_program, for programs built with SM90A=1) uncovers in the compiled PTX and
// rebuilds for sm_90a.
#define HOPPER(instruction) "/*SM90A: " instruction " :SM90A*/"
#define STAGE4 (TK * TILE / 4)  // TYPE4s of one operand's staged slice

// Stage A's slice as As[k][m] (put) and B's as wgmma reads it, K-major "core matrices" of 8 rows
// (n) by 16 bytes (4 depths): depths 4q .. 4q + 3 of row n at TYPE4 q * TILE + n, big then small
// STAGE4 TYPE4s on. Fetched along k, neighbouring work-items hold neighbouring rows (K_RUN_ROW):
// 16-byte stores to consecutive addresses. Fetched along n (the weight gradient's B, x itself
// rather than an x^T written for it), a work-item holds rows n .. n + 3 at one depth: four 4-byte
// stores, each work-item's TYPE4 turned by e / 8 % 4 first, so that store i puts row n + (i + turn)
// % 4: with M_RUN_ROW's 4 depths by 8 rows a warp, the 32 stores of each fall in 32 banks.
inline void stage(const TYPE4 ra[LOADS], const int a_along_k, const TYPE4 rb[LOADS], const int b_along_k,
                  __local TYPE4 *As, __local TYPE4 *Bs, const int lid)
{
    put(ra, a_along_k, As, lid);
    #pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int e = lid + l * ITEMS;
        if (b_along_k) {
            const int at = K_RUN_DEPTH(e) / 4 * TILE + K_RUN_ROW(e);
            Bs[at] = rb[l];
            Bs[STAGE4 + at] = as_float4(TF32_SMALL(rb[l], as_uint4, as_float4));
        } else {
            const int k = M_RUN_DEPTH(e), turn = e / 8 % 4;
            TYPE4 big = rb[l];
            big = turn & 1 ? big.s1230 : big;
            big = turn & 2 ? big.s2301 : big;
            const TYPE4 small = as_float4(TF32_SMALL(big, as_uint4, as_float4));
            __local TYPE *row = (__local TYPE *)Bs + (k / 4 * TILE + M_RUN_ROW(e)) * 4 + k % 4;
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                const int at = (i + turn) % 4 * 4;  // row n + (i + turn) % 4
                row[at] = i == 0 ? big.s0 : i == 1 ? big.s1 : i == 2 ? big.s2 : big.s3;
                row[STAGE4 * 4 + at] = i == 0 ? small.s0 : i == 1 ? small.s1 : i == 2 ? small.s2 : small.s3;
            }
        }
    }
}

// The work-item's A fragments of the staged slice, split into TF32 halves: a[h][half] holds, of
// depths 8h .. 8h + 7, (row g, depth t), (g + 8, t), (g, t + 4), (g + 8, t + 4) of its warp's 16
// rows, as wgmma takes A from registers.
inline void load_fragments(__local const TYPE4 *As4, uint a[TK / 8][2][4])
{
    __local const TYPE *As = (__local const TYPE *)As4;
    const int row = ROW_OWN(0), t = LOCAL_INDEX % 4;
    #pragma unroll
    for (int h = 0; h < TK / 8; h++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            split_tf32(As[STAGED(h * 8 + t + 4 * (r / 2), row + 8 * (r % 2))], &a[h][0][r], &a[h][1][r]);
}

// wgmma's descriptor of a K-major slice in local memory at byte address `at`, no swizzling: the
// core matrices 2048 bytes apart along k (TILE rows of 16 bytes) and 128 apart along n (8 rows).
inline ulong descriptor(const uint at)
{
    return (ulong)((at >> 4) & 0x3FFF) | (ulong)((TILE * 16) >> 4) << 16 | (ulong)(128 >> 4) << 32;
}

// d (64 x 128, as ROW_OWN and COL_OWN lay it out, 4 to each 8 columns) = a (64 x 8) times the
// slice that `b` describes, plus d unless `accumulate` is 0.
#define WGMMA_TF32(d, a, b, accumulate)                                                               \
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %69, 0; "                                            \
                 HOPPER("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "                       \
                        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20," \
                        "%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"   \
                        "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"   \
                        "%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1;") " }"       \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),          \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),        \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),    \
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),    \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),    \
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),    \
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),    \
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),    \
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),    \
                   "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),    \
                   "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate) : "memory")

// Start this slice's 3xTF32 product into d, summed from 0 (B's stage at Bs: big, then small).
inline void start_slice(const uint a[TK / 8][2][4], __local const TYPE4 *Bs, TYPE d[TILE / 2])
{
    const uint big = (uint)(ulong)Bs, small = big + STAGE4 * 16;  // addresses in local memory
    asm volatile(HOPPER("wgmma.fence.sync.aligned;") ::: "memory");
    #pragma unroll
    for (int h = 0; h < TK / 8; h++) {
        const uint depth = h * 2 * TILE * 16;  // bytes: core matrices 2h and 2h + 1 along k
        WGMMA_TF32(d, a[h][1], descriptor(big + depth), h > 0);
        WGMMA_TF32(d, a[h][0], descriptor(small + depth), 1);
        WGMMA_TF32(d, a[h][0], descriptor(big + depth), 1);
    }
    asm volatile(HOPPER("wgmma.commit_group.sync.aligned;") ::: "memory");
}

// Wait for the slice's wgmmas (until then they own d and a: the empty asm keeps the compiler
// from touching either earlier) and add d to acc in float.
inline void finish_slice(uint a[TK / 8][2][4], TYPE d[TILE / 2], TYPE acc[ACC_ROWS][ACC_COLS])
{
    asm volatile(HOPPER("wgmma.wait_group.sync.aligned 0;") ::: "memory");
    #pragma unroll
    for (int i = 0; i < TILE / 2; i++)
        asm volatile("" : "+f"(d[i]) :: "memory");
    #pragma unroll
    for (int h = 0; h < TK / 8; h++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            asm volatile("" : "+r"(a[h][0][r]), "+r"(a[h][1][r]) :: "memory");
    #pragma unroll
    for (int j = 0; j < TILE / 8; j++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            acc[r / 2][2 * j + r % 2] += d[4 * j + r];
}

// Stores to local memory made visible to the tensor cores' reads (the async proxy), then a barrier.
#define STAGED_BARRIER()                                                     \
    asm volatile(HOPPER("fence.proxy.async.shared::cta;") ::: "memory");     \
    barrier(CLK_LOCAL_MEM_FENCE)

// The K loop (TILED_LOOP's contract): As holds two stages of A's slice, Bs two of B's (big and
// small each).
#define TILED_LOOP(first, end, a_along_k, b_along_k)                                                    \
    FETCH_A(first);                                                                                     \
    FETCH_B(first);                                                                                     \
    PREPARE_SLICES(first);                                                                              \
    stage(ra, a_along_k, rb, b_along_k, As, Bs, lid);                                                   \
    if ((first) + TK < (end)) {                                                                         \
        FETCH_A((first) + TK);                                                                          \
        FETCH_B((first) + TK);                                                                          \
    }                                                                                                   \
    STAGED_BARRIER();                                                                                   \
    for (int k0 = (first), st = 0; k0 < (end); k0 += TK, st ^= 1) {                                     \
        uint a[TK / 8][2][4];                                                                           \
        TYPE d[TILE / 2];                                                                               \
        load_fragments(As + st * STAGE4, a);                                                            \
        start_slice(a, Bs + st * 2 * STAGE4, d);                                                        \
        if (k0 + TK < (end)) {                                                                          \
            PREPARE_SLICES(k0 + TK);                                                                    \
            stage(ra, a_along_k, rb, b_along_k, As + (st ^ 1) * STAGE4, Bs + (st ^ 1) * 2 * STAGE4, lid); \
        }                                                                                               \
        if (k0 + 2 * TK < (end)) {                                                                      \
            FETCH_A(k0 + 2 * TK);                                                                       \
            FETCH_B(k0 + 2 * TK);                                                                       \
        }                                                                                               \
        finish_slice(a, d, acc);                                                                        \
        STAGED_BARRIER();                                                                               \
    }

#define TILED_BEGIN                                                      \
    __local TYPE4 As[2 * STAGE4], Bs[4 * STAGE4];  /* 48 KiB */           \
    TYPE acc[ACC_ROWS][ACC_COLS];                                        \
    for (int i = 0; i < ACC_ROWS; i++)                                   \
        for (int j = 0; j < ACC_COLS; j++)                               \
            acc[i][j] = 0;
#elif MMA

// c (a 16 x 8 accumulator fragment) += a (16 x 8) b (8 x 8), fragments as PTX's m16n8k8 lays them out.
#define MMA_TF32(c, a, b)                                                                       \
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
        "{%0,%1,%2,%3};"                                                                        \
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                         \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

inline void slice_product(__local const TYPE4 *As4, __local const TYPE4 *Bs4, TYPE acc[WPT][WPT])
{
    __local const TYPE *As = (__local const TYPE *)As4, *Bs = (__local const TYPE *)Bs4;
    const int lid = LOCAL_INDEX, g = lid % 32 / 4, t = lid % 4;
    const int wm = lid / 128 * 64, wn = lid / 32 % 4 * 32;  // the warp's 64 x 32 of the block
    // B's fragments for the whole slice: b0 = B[t][g], b1 = B[t + 4][g] of each 8 x 8 piece.
    uint b[4][TK / 8][2][2];  // (n tile, 8 of depth, big/small, fragment)
    #pragma unroll
    for (int nj = 0; nj < 4; nj++)
        #pragma unroll
        for (int h = 0; h < TK / 8; h++)
            #pragma unroll
            for (int r = 0; r < 2; r++)
                split_tf32(Bs[(h * 8 + t + 4 * r) * LT + wn + nj * 8 + g], &b[nj][h][0][r], &b[nj][h][1][r]);
    #pragma unroll
    for (int mi = 0; mi < 4; mi++) {
        // A's: a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4].
        uint a[TK / 8][2][4];  // (8 of depth, big/small, fragment)
        #pragma unroll
        for (int h = 0; h < TK / 8; h++)
            #pragma unroll
            for (int r = 0; r < 4; r++)
                split_tf32(As[(h * 8 + t + 4 * (r / 2)) * LT + wm + mi * 16 + g + 8 * (r % 2)], &a[h][0][r], &a[h][1][r]);
        TYPE slice[4][4] = {{0}};  // (n tile, fragment): this slice's sums
        #pragma unroll
        for (int h = 0; h < TK / 8; h++)
            #pragma unroll
            for (int nj = 0; nj < 4; nj++) {
                MMA_TF32(slice[nj], a[h][1], b[nj][h][0]);
                MMA_TF32(slice[nj], a[h][0], b[nj][h][1]);
                MMA_TF32(slice[nj], a[h][0], b[nj][h][0]);
            }
        #pragma unroll
        for (int nj = 0; nj < 4; nj++)
            #pragma unroll
            for (int r = 0; r < 4; r++)
                acc[2 * mi + r / 2][2 * nj + r % 2] += slice[nj][r];
    }
}
#else
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
    TYPE acc[WPT][WPT];                                         \
    for (int i = 0; i < WPT; i++)                               \
        for (int j = 0; j < WPT; j++)                           \
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

__kernel __attribute__((reqd_work_group_size(SIDE, SIDE, 1)))
void PerceptronFeedForward(__global const TYPE *inputs, __global const TYPE *weights,
                           __global const TYPE *bias,
                           __global const TYPE *residual,  // r (rows, units), added to y if adding
                           __global TYPE *kept,  // z (STORE_PRE) or f'(z) (STORE_SLOPES), (rows, units)
                           __global TYPE *outputs, __global TYPE *outputs_t, const int rows, const int n_in,
                           const int units, const int units_p, const int ld, const int adding, const TYPE a,
                           const TYPE b, const int panel)
{
    TILED_BEGIN
    const int m_block = get_group_id(1) * TILE, n_block = get_group_id(0) * TILE;
    result_product(inputs, n_in, ALONG_K, PANEL_BASE(weights, n_block, panel, n_in), panel, ALONG_M, rows, units,
                   m_block, n_block, 0, n_in, 0);
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
