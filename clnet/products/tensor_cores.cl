// What the tiled products' two tensor-core forms (mma.cl, wgmma.cl) share, pasted before either.
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

// HALF: a 16-bit form's operands, 1 bfloat16, 2 float16 (mma_half.cl, wgmma_half.cl): each float
// operand is rounded (to nearest even) as gpu_tiles.cl's put() stages it, two depths packed in a
// uint, the lower in the lower half, as the tensor cores take them from a register: L[k / 2][m],
// so that the slice product reads a register's pair in one 32-bit load.
#ifndef HALF
#define HALF 0
#endif
#if HALF == 1
#define PACK(d, lo, hi) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo))
#define HALF_PTX_TYPES "bf16.bf16"
#elif HALF == 2
#define PACK(d, lo, hi) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo))
#define HALF_PTX_TYPES "f16.f16"
#endif
#define STAGED_PAIR(k, m) ((k) / 2 * LT + (m))

#if HALF
// Where a form's geometry has M_RUN_PAIRS (a lane holds rows m .. m + 3 at depth k, its neighbour
// lane ^ 1 the same rows at k ^ 1): the two trade halves, so that each packs two rows' pairs of
// depths (k & ~1, k | 1), the even lane rows m and m + 1, the odd m + 2 and m + 3, and stages
// them as two 32-bit stores rather than four 16-bit ones.
inline void pair_depths(const TYPE4 v, const int odd, uint *first, uint *second)
{
    const TYPE other0 = shuffle_xor(odd ? v.s0 : v.s2, 1), other1 = shuffle_xor(odd ? v.s1 : v.s3, 1);
    if (odd) {
        PACK(*first, other0, v.s2);
        PACK(*second, other1, v.s3);
    } else {
        PACK(*first, v.s0, other0);
        PACK(*second, v.s1, other1);
    }
}
#endif
