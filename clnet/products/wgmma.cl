// The tiled products' WGMMA form (pasted after tiles.cl and tensor_cores.cl, before gpu_tiles.cl):
// its tile geometry, then its slice product and K loop.
// WGMMA: Hopper's warpgroup products (see slice_product below). Each of the two warpgroups (128
// work-items) computes 64 rows of the block by all its 128 columns with wgmma.m64n128k8 (k16 in 16
// bits, HALF: wgmma_half.cl): warp w of a warpgroup holds its rows 16w .. + 16, and a lane, of
// those, rows g and g + 8 by columns 8j + 2t and 8j + 2t + 1 for j < 16 (g = lane / 4, t = lane %
// 4): acc[h][2j + e] is row g + 8h, column 8j + 2t + e.
#if TILE != 128 || WPT != 8 || !(TK == 16 || HALF && TK == 32)
#error "the warpgroup form (WGMMA) computes 128 x 128 blocks, 16 deep a slice (32 with HALF), with 256 work-items"
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
#define STAGED(k, m) ((k) * TILE + ((m) ^ (k) % 4 * 8))
#if HALF
// Along k, a row's TK depths come from TK / 4 neighbouring work-items: whole lines of 64 or 128
// bytes of each row. (The 16-bit slices' stores are half as many; fetching rows 16 bytes apart, as
// below, made the 16-bit forward and input gradient markedly slower: benchmarks/RESULTS.md.)
#define K_RUN_ROW(e) ((e) / (TK / 4))
#define K_RUN_DEPTH(e) ((e) % (TK / 4) * 4)
#else
// Along k, neighbouring work-items fetch neighbouring rows (a TYPE4 of 4 depths each), so that
// staging B's 16-byte rows (and A's columns) hits distinct banks.
#define K_RUN_ROW(e) ((e) % TILE)
#define K_RUN_DEPTH(e) ((e) / TILE * 4)
#endif
// Along m, a warp's 32 work-items fetch 4 depths by 8 TYPE4s (128 bytes of each of 4 rows), not
// 32 TYPE4s of one depth: B fetched along n (the weight gradient's x) is staged K-major one
// element at a time (see stage), and only with 4 depths and 8 rows among a warp's stores do they
// fall in 32 distinct banks. A along m keeps whole-TYPE4 stores, 8 banks apart (STAGED's swizzle).
#define M_RUN_ROW(e) ((e) / 4 % (TILE / 4) * 4)
#define M_RUN_DEPTH(e) ((e) / TILE * 4 + (e) % 4)
#define M_RUN_AT(m, k) ((k) / 4 * TILE + (m) / 4 * 4 + (k) % 4)  // the e of (m, k), m a multiple of 4
#define M_RUN_PAIRS 1  // work-items e and e ^ 1, neighbouring lanes, hold the same rows at depths k and k ^ 1
// wgmma takes float operands from local memory K-major only (B[n][k], k contiguous): the forward
// and the weight gradient, whose B (W, delta) is contiguous along n, compute their results'
// transposes, W^T x^T and delta^T x. The forward's B, x, is then contiguous along k; the weight
// gradient's, x again, along n, which stage() puts K-major one element at a time.
#define TRANSPOSED_PRODUCTS 1
#define STAGE4 (TK * TILE / 4)  // TYPE4s of one float operand's staged slice
#if HALF
// The 16-bit slices (wgmma_half.cl) take half of that: A's in put()'s STAGED_PAIR layout, rows LT
// = 8 (mod 32) uints apart, so that a fragment's 32 reads (rows g + const, depth pairs t + const)
// fall in 32 banks (there is room: two stages of both take 33 KiB); B's in wgmma's core matrices.
#define LT (TILE + 8)
#define A_STAGE4 (TK / 2 * LT / 4)
#define B_STAGE4 (STAGE4 / 2)
#define FRAGMENTS (TK / 16 * 4)  // a work-item's A registers of a slice: 4 per 16 of depth
#else
#define LT TILE
#define A_STAGE4 STAGE4
#define B_STAGE4 (2 * STAGE4)  // B's TF32 halves, big and small
#define FRAGMENTS (TK / 8 * 2 * 4)  // 4 per 8 of depth, big and small
#endif

// Defined in gpu_tiles.cl, pasted after this file: the staging, which follows the geometry above.
void put(const TYPE4 r[LOADS], const int along_k, __local TYPE4 *L4, const int lid);

// Hopper's wgmma (compute capability 9.0): a warpgroup's asynchronous product, its A operand
// (64 x 8 of TF32) from registers and its B (8 x 128) from local memory, read by the tensor cores
// themselves: its 4096^3 forward ran markedly faster than the MMA form's, which feeds
// every operand through registers (benchmarks/RESULTS.md, Hopper's wgmma). While a slice's wgmmas
// run, the work-items stage the next slice, fetched a slice earlier, into the other half of local
// memory (two stages), and fetch the one after. 3xTF32 and the slice sums as the MMA form's.
// B's two TF32 halves are staged side by side: big as x itself, since wgmma reads only a TF32's
// top 19 bits (cutting, as big does), and small.

// wgmma's descriptor of a K-major slice in local memory at byte address `at`, no swizzling: the
// core matrices (8 rows by 16 bytes) 2048 bytes apart along k (TILE rows of 16 bytes) and 128
// apart along n (8 rows).
inline ulong descriptor(const uint at)
{
    return (ulong)((at >> 4) & 0x3FFF) | (ulong)((TILE * 16) >> 4) << 16 | (ulong)(128 >> 4) << 32;
}

// D (64 x 128: D(n) its n-th float, 4 to each 8 columns as ROW_OWN and COL_OWN lay them out) = A
// (64 x k, in registers a[i] .. a[i + 3]) times the slice that `b` describes, plus D unless
// `accumulate` is 0: wgmma of `shape_and_types`, `tail` its arguments after the scales of A and B.
// D(n) is d[n], the slice's sums, or ACCUMULATOR(n), acc's element.
#define SLICE_SUM(n) d[n]
#define ACCUMULATOR(n) acc[(n) % 4 / 2][(n) / 4 * 2 + (n) % 2]
#define WARPGROUP_MMA(shape_and_types, tail, D, a, i, b, accumulate)                                \
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %69, 0; "                                            \
                 HOPPER("wgmma.mma_async.sync.aligned." shape_and_types " " WGMMA_D                  \
                        ", {%64,%65,%66,%67}, %68, p, 1, 1" tail ";") " }"                           \
                 : WGMMA_D_OPERANDS(D)                                                               \
                 : "r"(a[(i)]), "r"(a[(i) + 1]), "r"(a[(i) + 2]), "r"(a[(i) + 3]), "l"(b), "r"(accumulate) \
                 : "memory")

#if !HALF  // (wgmma_half.cl stages and multiplies the 16-bit slices)

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

// The work-item's A fragments of the staged slice, split into TF32 halves: a[8h + 4 half ..] holds, of
// depths 8h .. 8h + 7, (row g, depth t), (g + 8, t), (g, t + 4), (g + 8, t + 4) of its warp's 16
// rows, as wgmma takes A from registers.
inline void load_fragments(__local const TYPE4 *As4, uint a[FRAGMENTS])
{
    __local const TYPE *As = (__local const TYPE *)As4;
    const int row = ROW_OWN(0), t = LOCAL_INDEX % 4;
    #pragma unroll
    for (int h = 0; h < TK / 8; h++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            split_tf32(As[STAGED(h * 8 + t + 4 * (r / 2), row + 8 * (r % 2))], &a[h * 8 + r], &a[h * 8 + 4 + r]);
}

// A (64 x 8 of TF32) times B (8 x 128 of TF32).
#define WGMMA_TF32(D, a, i, b, accumulate) WARPGROUP_MMA("m64n128k8.f32.tf32.tf32", "", D, a, i, b, accumulate)

// Start this slice's 3xTF32 product into d, summed from 0 (B's stage at Bs: big, then small).
inline void start_slice(const uint a[FRAGMENTS], __local const TYPE4 *Bs, TYPE d[TILE / 2],
                        TYPE acc[ACC_ROWS][ACC_COLS])
{
    const uint big = (uint)(ulong)Bs, small = big + STAGE4 * 16;  // addresses in local memory
    asm volatile(HOPPER("wgmma.fence.sync.aligned;") ::: "memory");
    #pragma unroll
    for (int h = 0; h < TK / 8; h++) {
        const uint depth = h * 2 * TILE * 16;  // bytes: core matrices 2h and 2h + 1 along k
        WGMMA_TF32(SLICE_SUM, a, h * 8 + 4, descriptor(big + depth), h > 0);
        WGMMA_TF32(SLICE_SUM, a, h * 8, descriptor(small + depth), 1);
        WGMMA_TF32(SLICE_SUM, a, h * 8, descriptor(big + depth), 1);
    }
    asm volatile(HOPPER("wgmma.commit_group.sync.aligned;") ::: "memory");
}
#endif

// Wait for the slice's wgmmas (until then they own d and a, or acc: the empty asm keeps the
// compiler from touching them earlier) and add d to acc in float.
inline void finish_slice(uint a[FRAGMENTS], TYPE d[TILE / 2], TYPE acc[ACC_ROWS][ACC_COLS])
{
    asm volatile(HOPPER("wgmma.wait_group.sync.aligned 0;") ::: "memory");
    #pragma unroll
    for (int i = 0; i < FRAGMENTS; i++)
        asm volatile("" : "+r"(a[i]) :: "memory");
#if HALF  // (the 16-bit products sum into acc itself: see wgmma_half.cl)
    #pragma unroll
    for (int i = 0; i < TILE / 2; i++)
        asm volatile("" : "+f"(ACCUMULATOR(i)) :: "memory");
#else
    #pragma unroll
    for (int i = 0; i < TILE / 2; i++)
        asm volatile("" : "+f"(d[i]) :: "memory");
    #pragma unroll
    for (int j = 0; j < TILE / 8; j++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            acc[r / 2][2 * j + r % 2] += d[4 * j + r];
#endif
}

// Stores to local memory made visible to the tensor cores' reads (the async proxy), then a barrier.
#define STAGED_BARRIER()                                                     \
    asm volatile(HOPPER("fence.proxy.async.shared::cta;") ::: "memory");     \
    barrier(CLK_LOCAL_MEM_FENCE)

// The K loop (TILED_LOOP's contract): As holds two stages of A's slice, Bs two of B's.
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
        uint a[FRAGMENTS];                                                                              \
        TYPE d[TILE / 2];                                                                               \
        load_fragments(As + st * A_STAGE4, a);                                                          \
        start_slice(a, Bs + st * B_STAGE4, d, acc);                                                     \
        if (k0 + TK < (end)) {                                                                          \
            PREPARE_SLICES(k0 + TK);                                                                    \
            stage(ra, a_along_k, rb, b_along_k, As + (st ^ 1) * A_STAGE4, Bs + (st ^ 1) * B_STAGE4, lid); \
        }                                                                                               \
        if (k0 + 2 * TK < (end)) {                                                                      \
            FETCH_A(k0 + 2 * TK);                                                                       \
            FETCH_B(k0 + 2 * TK);                                                                       \
        }                                                                                               \
        finish_slice(a, d, acc);                                                                        \
        STAGED_BARRIER();                                                                               \
    }

#define TILED_BEGIN                                                      \
    __local TYPE4 As[2 * A_STAGE4], Bs[2 * B_STAGE4];                    \
    TYPE acc[ACC_ROWS][ACC_COLS];                                        \
    for (int i = 0; i < ACC_ROWS; i++)                                   \
        for (int j = 0; j < ACC_COLS; j++)                               \
            acc[i][j] = 0;
