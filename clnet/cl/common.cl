// Helpers every clnet program starts with. TYPE, TYPE4 and LOCAL_SIZE come from the build options.
#ifdef CLNET_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
// A macro's value as a string literal: a build define as an immediate in inline PTX.
#define STR_(x) #x
#define STR(x) STR_(x)

// Eight elements at once, for the kernels that put rows, features or channels on a CPU's SIMD lanes.
#define TYPE8 CAT(TYPE, 8)
// The builtins those kernels call on a TYPE8. pip's PoCL 3.0 on AMD's Zen 4 compiles for a target
// without AVX-512 but links builtins built with it, and LLVM aborts on a builtin taking a 512-bit
// vector, a double8 (DeviceInfo.builds_without_avx512); there (-D HALVED_BUILTINS=1) each runs on
// the two halves. Arithmetic, comparisons and ?: on a double8 compile there as they are.
#if HALVED_BUILTINS
inline TYPE8 exp8(const TYPE8 v) { return (TYPE8)(exp(v.lo), exp(v.hi)); }
#define VLOAD8(i, p) ((TYPE8)(vload4(2 * (i), p), vload4(2 * (i) + 1, p)))
#define VSTORE8(v, i, p) (vstore4((v).lo, 2 * (i), p), vstore4((v).hi, 2 * (i) + 1, p))
#else
#define exp8 exp
#define VLOAD8 vload8
#define VSTORE8 vstore8
#endif
// Integer minimum and maximum by ?:. pip's PoCL 3.0 calls its min(), max() and clamp() (as its
// fmin(), fmax() and vloadN) as library functions, out of line, and where vector registers are live
// across a call the kernel spills and reloads them around it (`perf` on the tiny GPT's step showed
// _cl_min beside the products' kernels; benchmarks/RESULTS.md, integer min and max by ?:).
__attribute__((always_inline)) int min_int(const int a, const int b) { return a < b ? a : b; }
__attribute__((always_inline)) int max_int(const int a, const int b) { return a > b ? a : b; }
// A cache line asked for ahead of its read (PREFETCH) or its write (PREFETCH_WRITE) on a CPU
// (CPU_DEVICE, which the runtime sets), through clang's builtin: OpenCL's prefetch() compiles to
// nothing in PoCL, and in Intel's runtime it cost far more than the misses it saves
// (benchmarks/RESULTS.md, prefetching on Intel's runtime). (A test for __x86_64__ misses Intel's
// runtime, whose compiler targets SPIR.) On a GPU both do nothing.
#if CPU_DEVICE && defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#define PREFETCH_WRITE(p) __builtin_prefetch(p, 1)
#else
#define PREFETCH(p) ((void)(p))
#define PREFETCH_WRITE(p) ((void)(p))
#endif
// Two: the runs a tensor-core tile's lane holds (products/mma.cl).
#define TYPE2 CAT(TYPE, 2)

// Vector types aligned to one element (TYPE4_U, TYPE8_U, VEC_U): a load or store through a
// pointer to one is one unaligned vector access, whatever the address, where vloadN/vstoreN, which
// do the same, are library functions that pip's PoCL 3.0 calls and never inlines: a call in a
// kernel's body keeps PoCL from running a work-group's items on the vector lanes (the update
// kernels, above all, spent more on the calls than on their arithmetic). Load8 and Store8 are
// vload8 and vstore8 for global memory so.
typedef TYPE4 __attribute__((aligned(sizeof(TYPE)))) TYPE4_U;
typedef TYPE8 __attribute__((aligned(sizeof(TYPE)))) TYPE8_U;
#define Load8(p) (*(const __global TYPE8_U *)(p))
#define Store8(v, p) (*(__global TYPE8_U *)(p) = (v))

// The sum of a TYPE8's lanes, pairwise (the same order wherever it is used).
inline TYPE Sum8(const TYPE8 v)
{
    return ((v.s0 + v.s1) + (v.s2 + v.s3)) + ((v.s4 + v.s5) + (v.s6 + v.s7));
}

// Four consecutive elements array[start..start+3]; those at or past `size` read as 0,
// so a kernel can walk any length four at a time without reading out of bounds.
inline TYPE4 ToVect4(__global const TYPE *array, int start, int size)
{
    if (start + 4 <= size)
        return *(const __global TYPE4_U *)(array + start);
    TYPE4 v = (TYPE4)(0);
    if (start < size)     v.s0 = array[start];
    if (start + 1 < size) v.s1 = array[start + 1];
    if (start + 2 < size) v.s2 = array[start + 2];
    return v;
}

// The inverse of ToVect4: store the lanes that fall before `size`, drop the rest.
inline void D4ToArray(__global TYPE *array, TYPE4 value, int start, int size)
{
    if (start + 4 <= size) {
        *(__global TYPE4_U *)(array + start) = value;
        return;
    }
    if (start < size)     array[start] = value.s0;
    if (start + 1 < size) array[start + 1] = value.s1;
    if (start + 2 < size) array[start + 2] = value.s2;
}

// Smallest probability a loss takes the log of, as Keras clips (representable in float32).
#define EPSILON ((TYPE)1e-7)

// Sum (or, with use_max, maximum) of one value per work-item over the work-group, through
// local memory; the work-group size must be a power of two no larger than LOCAL_SIZE.
inline TYPE group_reduce(__local TYPE *scratch, TYPE value, const int use_max)
{
    const int lid = get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = get_local_size(0) / 2; stride > 0; stride >>= 1) {
        if (lid < stride)
            scratch[lid] = use_max ? fmax(scratch[lid], scratch[lid + stride]) : scratch[lid] + scratch[lid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const TYPE result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // scratch is reused by the next reduction
    return result;
}

// WARP_SHUFFLES (Runtime.warp_shuffles: an NVIDIA GPU, float): v of the lane `lanes` away, by
// the butterfly of PTX's shfl.sync (lanes a power of two below 32; every lane of the warp takes
// part). Adding it to v in every lane gives every lane the same sum, bit for bit (each pair is
// added once, in either order). No local memory and no barriers, where group_reduce has both.
#if WARP_SHUFFLES
inline TYPE shuffle_xor(const TYPE v, const int lanes)
{
    TYPE other;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(other) : "f"(v), "r"(lanes));
    return other;
}

// The sum (use_max: the maximum) of v over each run of `lanes` neighbouring lanes (a power of two
// up to 32, the runs aligned), the same in every lane of the run: group_reduce for a warp.
inline TYPE lanes_reduce(TYPE v, const int lanes, const int use_max)
{
    #pragma unroll
    for (int away = lanes / 2; away > 0; away >>= 1) {
        const TYPE other = shuffle_xor(v, away);
        v = use_max ? fmax(v, other) : v + other;
    }
    return v;
}
#endif

// Elementwise activation chosen at build time (-D ACT=relu): ACT_FORWARD(x, a, b) and
// ACT_DERIVATIVE(y, x, a, b) = d y / d x, given the output y and the input x.
#ifdef ACT
#define ACT_FORWARD CAT(ACT, _forward)
#define ACT_DERIVATIVE CAT(ACT, _derivative)
#endif

// Wide vectors for the matrix kernels (-D VW=4|8|16): PoCL turns these into SIMD code.
#ifdef VW
#if VW == 1  // scalars (a GPU's sequence kernels: its work-items are its lanes)
#define VEC TYPE
#else
#define VEC CAT(TYPE, VW)
#endif
// The activations' vector forms (activations/vector.cl) take AVEC: VEC, or VEC's halves where VEC
// is 64 bytes and a builtin on it would abort the build (HALVED_BUILTINS, above): exp, erf, tanh
// and the like on a float16 or a double8. Arithmetic on VEC compiles there as two 32-byte halves.
#if HALVED_BUILTINS && (VW == 16 || (VW == 8 && defined(CLNET_FP64)))
#define HALVED_VEC 1
#if VW == 16
#define AVEC TYPE8
#else
#define AVEC TYPE4
#endif
#else
#define HALVED_VEC 0
#define AVEC VEC
#endif

typedef VEC __attribute__((aligned(sizeof(TYPE)))) VEC_U;  // (see TYPE4_U)

// VW consecutive elements p[0..VW), those at or past `width` read as 0 (LoadBlock) or left
// unwritten (StoreBlock).
__attribute__((always_inline))
VEC LoadBlock(const __global TYPE *p, const int width)
{
    if (width >= VW)
        return *(const __global VEC_U *)p;
    union { VEC v; TYPE s[VW]; } lanes;
    for (int l = 0; l < VW; l++)
        lanes.s[l] = l < width ? p[l] : (TYPE)0;
    return lanes.v;
}

__attribute__((always_inline))
void StoreBlock(const VEC v, __global TYPE *p, const int width)
{
    if (width >= VW) {
        *(__global VEC_U *)p = v;
        return;
    }
    const TYPE *lanes = (const TYPE *)&v;
    for (int l = 0; l < width; l++)
        p[l] = lanes[l];
}
#endif
