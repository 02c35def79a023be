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
