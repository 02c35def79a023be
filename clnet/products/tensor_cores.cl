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

// Hopper's warpgroup products (wgmma.cl, sixteen_bit.cl). PTX ISA: wgmma is an sm_90a instruction,
// and NVIDIA's OpenCL compiler writes `.target sm_90`, where ptxas refuses it. HOPPER() hides an
// instruction in a PTX comment, which the runtime (Runtime._sm90a_program, for programs built with
// SM90A=1) uncovers in the compiled PTX and rebuilds for sm_90a.
#define HOPPER(instruction) "/*SM90A: " instruction " :SM90A*/"
// A 64 x 128 float accumulator of a wgmma, as its asm's first 64 operands: D(n) its n-th float,
// 4 to each 8 columns (the work-item's rows g and g + 8, columns 2t and 2t + 1 of each 8).
#define WGMMA_D "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define WGMMA_D_OPERANDS(D) \
    "+f"(D(0)), "+f"(D(1)), "+f"(D(2)), "+f"(D(3)), "+f"(D(4)), "+f"(D(5)), \
    "+f"(D(6)), "+f"(D(7)), "+f"(D(8)), "+f"(D(9)), "+f"(D(10)), "+f"(D(11)), \
    "+f"(D(12)), "+f"(D(13)), "+f"(D(14)), "+f"(D(15)), "+f"(D(16)), "+f"(D(17)), \
    "+f"(D(18)), "+f"(D(19)), "+f"(D(20)), "+f"(D(21)), "+f"(D(22)), "+f"(D(23)), \
    "+f"(D(24)), "+f"(D(25)), "+f"(D(26)), "+f"(D(27)), "+f"(D(28)), "+f"(D(29)), \
    "+f"(D(30)), "+f"(D(31)), "+f"(D(32)), "+f"(D(33)), "+f"(D(34)), "+f"(D(35)), \
    "+f"(D(36)), "+f"(D(37)), "+f"(D(38)), "+f"(D(39)), "+f"(D(40)), "+f"(D(41)), \
    "+f"(D(42)), "+f"(D(43)), "+f"(D(44)), "+f"(D(45)), "+f"(D(46)), "+f"(D(47)), \
    "+f"(D(48)), "+f"(D(49)), "+f"(D(50)), "+f"(D(51)), "+f"(D(52)), "+f"(D(53)), \
    "+f"(D(54)), "+f"(D(55)), "+f"(D(56)), "+f"(D(57)), "+f"(D(58)), "+f"(D(59)), \
    "+f"(D(60)), "+f"(D(61)), "+f"(D(62)), "+f"(D(63))

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
