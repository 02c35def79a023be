// fp32 products on NVIDIA's tensor cores (sm_80 and later) through inline PTX: the measurement
// behind benchmarks/tensor_cores.py, which asks whether clnet's GPU products should use them.
// clnet does not use them yet (RESULTS.md, "Tensor cores for fp32 products"): this kernel is
// not part of clnet, and has none of its edges, epilogues or layouts.
//
// C (M x N) = A (M x K) B (K x N), all row-major, M and N multiples of TILE, K of TK. A work-group
// of 8 warps computes a TILE x TILE block, staging TK-deep slices in local memory as clnet's tiles
// do (As[k][m], Bs[k][n]); a warp computes 64 x 32 of it as 4 x 4 mma tiles of 16 x 8, each
// mma.sync.m16n8k8 adding the product of a 16 x 8 piece of A and an 8 x 8 piece of B.
// FORM 0: one TF32 product per mma (operands cut to 10-bit mantissas; cuBLAS's TF32 mode rounds).
// FORM 1: 3xTF32, as CUTLASS's "fast fp32": x = big + small, both TF32, and
//         a b ~ a_small b_big + a_big b_small + a_big b_big, all three into C's accumulators.
// FORM 2: the same three products, summed per slice on accumulators set to 0 and then added to
//         C's with ordinary fp32 adds: the tensor cores' own accumulation lost precision as K grew.
#define TILE 128
#ifndef TK
#define TK 16
#endif
#define WARPS 8
// Row length of a staged slice: with LT = 8 (mod 32), a fragment's 32 reads (rows g = lane / 4,
// depths t = lane % 4) fall in 32 different banks.
#define LT (TILE + 8)

// x = big + small, each as a 32-bit pattern for mma's "r" operands: big is x cut to TF32 (its top
// 11 significant bits), small the rest rounded to TF32 on its bits (mma would cut it). PTX's
// cvt.rna.tf32.f32 rounds too, but cost 10-15% of the rate.
inline void split(const float x, uint *big, uint *small)
{
    *big = as_uint(x) & 0xffffe000u;
    *small = (as_uint(x - as_float(*big)) + 0x1000u) & 0xffffe000u;  // rounded to TF32 (half away from 0)
}

// c (a 16 x 8 accumulator fragment) += a (16 x 8) b (8 x 8), fragments as PTX's m16n8k8 lays them out.
#define MMA(c, a, b)                                                                            \
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
        "{%0,%1,%2,%3};"                                                                        \
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                         \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

#if FORM == 2
#define SUM slice[j]  // this slice's sum for the tile, added to acc after it
#else
#define SUM acc[i][j]
#endif

__kernel __attribute__((reqd_work_group_size(WARPS * 32, 1, 1)))
void TensorCoreProduct(const __global float *A, const __global float *B, __global float *C,
                       const int M, const int N, const int K)
{
    // float4 arrays: NVIDIA aligns a local float array to 4 bytes, and B's slice is stored by float4s.
    __local float4 As4[TK * LT / 4], Bs4[TK * LT / 4];
    __local float *As = (__local float *)As4, *Bs = (__local float *)Bs4;  // (TK, LT): As[k][m], Bs[k][n]
    const int lid = get_local_id(0), warp = lid / 32, g = lid % 32 / 4, t = lid % 4;
    const int m0 = get_group_id(1) * TILE, n0 = get_group_id(0) * TILE;
    const int wm = warp / 4 * 64, wn = warp % 4 * 32;  // the warp's 64 x 32 within the block
    float acc[4][4][4];  // (m tile, n tile, fragment)
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int r = 0; r < 4; r++)
                acc[i][j][r] = 0;
    // This work-item's share of a slice, LOADS float4s of each operand: the next
    // slice is on its way from global memory while this one is multiplied, as in clnet's tiles.
#define LOADS (TILE * TK / 4 / (WARPS * 32))
    float4 ra[LOADS], rb[LOADS];
#define FETCH(k0)                                                                                   \
    for (int l = 0; l < LOADS; l++) {                                                               \
        const int e = lid + l * WARPS * 32;                                                         \
        ra[l] = *(const __global float4 *)(A + (m0 + e / (TK / 4)) * K + (k0) + e % (TK / 4) * 4);      \
        rb[l] = *(const __global float4 *)(B + ((k0) + e / (TILE / 4)) * N + n0 + e % (TILE / 4) * 4);  \
    }
    FETCH(0)
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int l = 0; l < LOADS; l++) {
            const int e = lid + l * WARPS * 32, m = e / (TK / 4), k = e % (TK / 4) * 4;
            As[k * LT + m] = ra[l].s0;
            As[(k + 1) * LT + m] = ra[l].s1;
            As[(k + 2) * LT + m] = ra[l].s2;
            As[(k + 3) * LT + m] = ra[l].s3;
            Bs4[(e / (TILE / 4) * LT + e % (TILE / 4) * 4) / 4] = rb[l];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + TK < K) {
            FETCH(k0 + TK)
        }
        // B's fragments for the whole slice: b0 = B[t][g], b1 = B[t + 4][g] of each 8 x 8 piece.
        uint b[4][TK / 8][2][2];  // (n tile, depth half, big/small, fragment)
        #pragma unroll
        for (int j = 0; j < 4; j++)
            #pragma unroll
            for (int h = 0; h < TK / 8; h++)
                #pragma unroll
                for (int r = 0; r < 2; r++)
                    split(Bs[(h * 8 + t + 4 * r) * LT + wn + j * 8 + g], &b[j][h][0][r], &b[j][h][1][r]);
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            // A's: a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4].
            uint a[TK / 8][2][4];  // (depth half, big/small, fragment)
            #pragma unroll
            for (int h = 0; h < TK / 8; h++)
                #pragma unroll
                for (int r = 0; r < 4; r++)
                    split(As[(h * 8 + t + 4 * (r / 2)) * LT + wm + i * 16 + g + 8 * (r % 2)], &a[h][0][r], &a[h][1][r]);
            // n tiles innermost: four independent accumulators between a tile's dependent mmas
            // (measured: no faster than tile by tile; the compiler orders them either way).
            float slice[4][4] = {{0}};  // (n tile, fragment)
            #pragma unroll
            for (int h = 0; h < TK / 8; h++) {
#if FORM
                #pragma unroll
                for (int j = 0; j < 4; j++)
                    MMA(SUM, a[h][1], b[j][h][0]);
                #pragma unroll
                for (int j = 0; j < 4; j++)
                    MMA(SUM, a[h][0], b[j][h][1]);
#endif
                #pragma unroll
                for (int j = 0; j < 4; j++)
                    MMA(SUM, a[h][0], b[j][h][0]);
            }
#if FORM == 2
            for (int j = 0; j < 4; j++)
                for (int r = 0; r < 4; r++)
                    acc[i][j][r] += slice[j][r];
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    // c0, c1 = C[g][2t], C[g][2t + 1]; c2, c3 the same 8 rows further.
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int m = m0 + wm + i * 16 + g, n = n0 + wn + j * 8 + 2 * t;
            *(__global float2 *)(C + m * N + n) = (float2)(acc[i][j][0], acc[i][j][1]);
            *(__global float2 *)(C + (m + 8) * N + n) = (float2)(acc[i][j][2], acc[i][j][3]);
        }
}
