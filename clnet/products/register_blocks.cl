// The register-block product of the CPU forms: the dense products (cpu_blocks.cl) and the
// convolution's (convolution_blocks.cl) paste it before their kernels.

// Vectors of columns per work-item (FF_CN, DW_CN, HG_CN): each element of a, broadcast once, feeds
// CN products, one per column panel. Where a vector is one of 32 registers (AVX-512 code), a row
// of one vector leaves the loop as many loads as products; the tuner measures (tuner.py,
// COLUMN_BLOCKS for the dense products, convolution_columns for a convolution's).
#ifndef FF_CN
#define FF_CN 1
#endif
#ifndef DW_CN
#define DW_CN 1
#endif
#ifndef HG_CN
#define HG_CN 1
#endif
// acc[r][j] += sum_{k0 <= k < k1} a[r][k] B[j][k][0..VW) for r < RM, j < CN, where B[j] is a
// column panel (K rows of VW, contiguous) and row r of a holds its element k at
// a[r][(k / VW) * a_panel + k % VW]: a_panel = VW for a row stored contiguously (x, x^T, a pixel's
// channels), n_in * VW for a row of W in column panels.
// The dense layer's three products have this form, and the convolution's CPU form's forward and
// input gradient per kernel tap (convolution_blocks.cl). STEP steps of k at a time (VW and k0
// are multiples of STEP, so those never straddle panels): 4, or VW where a's rows cross panels
// (the dense input gradient without W^T reads W's rows, a jump of n_in * VW elements after every
// VW of k): then each load instruction walks its row with one constant stride, which the CPU's
// stride prefetcher follows (slightly faster at 2048^3 on Intel's runtime; the other two
// products ran slightly slower with the longer step). Defined once per block size, since RM and
// CN size the arrays.
// Written for PoCL 3.0 (LLVM 14) as much as for newer compilers: it defines `inline` away and
// calls vload8 as a library function, so a helper taking acc[] by pointer kept the accumulators
// in memory, a load and a store around every FMA (far slower at 1024^3). Forced
// inlining, plain loads (B's rows through VEC pointers: a panel row starts at a multiple of VW
// elements of an aligned buffer; a's elements one by one, each a broadcast from memory) and
// unrolled loops over the block's rows (constant trip counts) let the block live in registers.
// name##_blocks multiplies the BLOCKS blocks of rows m0.. (row m of a at a + m * a_stride)
// K-block by K-block: each DEPTH-deep slice of the panel (DEPTH rows of at most 64 bytes: <= 16
// KiB at 256) serves all BLOCKS blocks from L1 before the next slice is read, the blocks' sums
// waiting in acc. Without it (BLOCKS = 1, DEPTH = 0: the whole depth at once) a work-item streams
// its whole panel, 128 KiB at K = 2048, and the panels of a work-group outgrow L2: at 2048^3 PoCL
// ran far slower than the blocked form (8 blocks, 256 deep; benchmarks/RESULTS.md, K-blocking on
// three CPU runtimes). At 1024^3 PoCL 3.0 ran faster unblocked, so the tuner chooses, for each
// dense kernel on its own (FF_NB, FF_KB, DW_.., HG_..; cpu_blocks.cl): on Intel's runtime the
// forward and the weight gradient ran slightly faster unblocked at 1024^3 and 2048^3, the input
// gradient slightly slower.
#define ROW_OF_B(j, i) (((const __global VEC *)B[j])[i])
#define DEFINE_ROW_BLOCK_PRODUCT(name, RM, CN, STEP, BLOCKS, DEPTH)                         \
__attribute__((always_inline))                                                              \
void name(const __global TYPE *a[RM], const int a_panel, const __global TYPE *B[CN],        \
          const int k0, const int k1, VEC acc[RM][CN])                                      \
{                                                                                           \
    int k = k0;                                                                             \
    for (; k + STEP <= k1; k += STEP) {                                                     \
        const int ak = (k / VW) * a_panel + k % VW;                                         \
        _Pragma("unroll")                                                                   \
        for (int s = 0; s < STEP; s += 4) {                                                 \
            VEC b0[CN], b1[CN], b2[CN], b3[CN];                                             \
            _Pragma("unroll")                                                               \
            for (int j = 0; j < CN; j++) {                                                  \
                b0[j] = ROW_OF_B(j, k + s); b1[j] = ROW_OF_B(j, k + s + 1);                 \
                b2[j] = ROW_OF_B(j, k + s + 2); b3[j] = ROW_OF_B(j, k + s + 3);             \
            }                                                                               \
            _Pragma("unroll")                                                               \
            for (int r = 0; r < RM; r++) {                                                  \
                const __global TYPE *ar = a[r] + ak + s;                                    \
                _Pragma("unroll")                                                           \
                for (int j = 0; j < CN; j++) {                                              \
                    acc[r][j] += (VEC)(ar[0]) * b0[j];                                      \
                    acc[r][j] += (VEC)(ar[1]) * b1[j];                                      \
                    acc[r][j] += (VEC)(ar[2]) * b2[j];                                      \
                    acc[r][j] += (VEC)(ar[3]) * b3[j];                                      \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    for (; k < k1; k++) {                                                                   \
        const int ak = (k / VW) * a_panel + k % VW;                                         \
        VEC bk[CN];                                                                         \
        _Pragma("unroll")                                                                   \
        for (int j = 0; j < CN; j++)                                                        \
            bk[j] = ROW_OF_B(j, k);                                                         \
        _Pragma("unroll")                                                                   \
        for (int r = 0; r < RM; r++) {                                                      \
            const VEC v = (VEC)(a[r][ak]);                                                  \
            _Pragma("unroll")                                                               \
            for (int j = 0; j < CN; j++)                                                    \
                acc[r][j] += v * bk[j];                                                     \
        }                                                                                   \
    }                                                                                       \
}                                                                                           \
__attribute__((always_inline))                                                              \
void name##_blocks(const __global TYPE *a, const int a_stride, const int a_panel,           \
                   const int M, const int m0, const __global TYPE *B[CN], const int K,      \
                   VEC acc[BLOCKS][RM][CN])                                                 \
{                                                                                           \
    const int depth = DEPTH ? DEPTH : K;                                                    \
    for (int k0 = 0; k0 < K; k0 += depth) {                                                 \
        const int k1 = min_int(k0 + depth, K);                                              \
        for (int q = 0; q < BLOCKS && m0 + q * RM < M; q++) {                               \
            const __global TYPE *rows[RM];                                                  \
            VEC c[RM][CN];                                                                  \
            _Pragma("unroll")                                                               \
            for (int r = 0; r < RM; r++) {                                                  \
                rows[r] = a + min_int(m0 + q * RM + r, M - 1) * a_stride;                   \
                _Pragma("unroll")                                                           \
                for (int j = 0; j < CN; j++)                                                \
                    c[r][j] = acc[q][r][j];                                                 \
            }                                                                               \
            name(rows, a_panel, B, k0, k1, c);                                              \
            _Pragma("unroll")                                                               \
            for (int r = 0; r < RM; r++)                                                    \
                _Pragma("unroll")                                                           \
                for (int j = 0; j < CN; j++)                                                \
                    acc[q][r][j] = c[r][j];                                                 \
        }                                                                                   \
    }                                                                                       \
}
