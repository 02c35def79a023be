// Products of operands stored in 16 bits (HALF: 1 bfloat16, 2 float16), summed in float, on
// Hopper's warpgroup tensor cores (pasted after tensor_cores.cl). The tiled forms read float
// operands and round them as they stage them, so a 16-bit product there fetches twice the bytes
// a 16-bit operand has, through registers; here both operands go from global to local memory by
// cp.async, 16 bytes at a time, untouched, and wgmma reads both from local memory itself.
//
// C (m x n, float, row-major, ldc) = A (m x k) B (k x n). A is stored along k (A[i * lda + p],
// A_ALONG_M 0) or along m (A[p * lda + i], A_ALONG_M 1); B along k (B[j * ldb + p], B_ALONG_N 0) or
// along n (B[p * ldb + j], B_ALONG_N 1). So a dense layer's forward x W is A along k, B along n;
// its weight gradient x^T dL/dz both along m and n; its input gradient dL/dz W^T both along k. The
// operands' rows must start on 16 bytes (lda, ldb and the buffers' offsets multiples of 8), and k be
// a multiple of 8 where an operand is stored along k (a 16-byte copy must not cross it); m, n and
// otherwise k are free (edges read as zeros: cp.async's source size 0). C's blocks may be split
// along k (chunk depths each, written to slices of C that SumSlices adds): the weight gradient,
// whose k is the batch's rows, has few blocks.
//
// A work-group of 256 (two warpgroups) computes a 128 x 128 block of C, each warpgroup 64 rows
// with wgmma.m64n128k16, as wgmma.cl's geometry. Slices of TK depths are staged in STAGES buffers
// of local memory, each written while the slices before it are multiplied. With 64 accumulators a
// work-item, two work-groups share an SM: one's barrier and copies run while the other's wgmmas do.
#if !HALF
#error "sixteen_bit.cl multiplies 16-bit operands: build it with HALF 1 (bfloat16) or 2 (float16)"
#endif
#define BLOCK 128
#define THREADS 256
// Slices 32 deep, three stages: 16 KiB a stage, 48 KiB in all, the most NVIDIA's OpenCL gives a
// work-group. An operand stored along k has rows of 64 bytes in a slice, so wgmma's 64-byte
// swizzle; 16 deep (32-byte swizzle) in four stages was markedly slower where both operands are
// stored along k, and within a few percent elsewhere (RESULTS.md).
#define TK 32
#define STAGES 3
#define PENDING "1"  // STAGES - 2, as PTX takes it
#define OPERAND_BYTES (BLOCK * TK * 2)
#define STAGE_BYTES (2 * OPERAND_BYTES)

// Where 16-byte chunk c of an operand's slice (BLOCK rows along m or n, TK depths) goes in local
// memory, and its row and depth. wgmma's swizzled layouts (PTX ISA, "Shared Memory Matrix
// Layout"): each 16-byte chunk's index within its 128-byte line is XORed with the line's index
// within the swizzle atom, so that the 8 rows the tensor cores read together lie in different
// banks (without swizzling, the same products ran at about half the rate: RESULTS.md).
// Along k: a row's TK depths (TK * 2 bytes) then the next row; atoms of 8 rows, 64-byte swizzle.
// Along m or n: atoms of 64 rows by 8 depths (1024 bytes, 128-byte swizzle), BLOCK / 64 of them
// side by side, then the next 8 depths. Neighbouring work-items take neighbouring chunks: 8 of
// them fill a 128-byte line of local memory, and read 128 (along m or n) or TK * 2 (along k)
// contiguous bytes of each row they touch.
inline void chunk(const int c, const int along_k, int *offset, int *row, int *depth)
{
    if (along_k) {
        const int line = c / (TK / 8) * TK * 2 + c % (TK / 8) * 16;
        *offset = line ^ (line >> 3 & (TK / 8 - 1) << 4);
        *row = c / (TK / 8);
        *depth = c % (TK / 8) * 8;
    } else {
        const int j = c % (BLOCK / 8), p = c / (BLOCK / 8), line = p % 8 * 128 + j % 8 * 16;
        *offset = (p / 8 * (BLOCK / 64) + j / 8) * 1024 + (line ^ (line >> 3 & 0x70));
        *row = j * 8;
        *depth = p;
    }
}

// wgmma's descriptor of an operand's rows first .. first + 63 (A's, a warpgroup's) or 0 .. 127
// (B's), depths 16h .. 16h + 15, in the stage at `at`: start address, leading and stride byte
// offsets (along k, the 8-row atoms; along m or n, the next 64 rows and the next 8 depths), swizzle.
inline ulong descriptor(const uint at, const int along_k, const int first, const int h)
{
    uint start, leading, stride;
    ulong swizzle;
    if (along_k) {
        start = at + first * TK * 2 + h * 32;
        leading = 16;  // (not used by swizzled layouts along k)
        stride = 8 * TK * 2;
        swizzle = 2;  // 64-byte (TK * 2)
    } else {
        start = at + first / 64 * 1024 + h * 2 * (BLOCK / 64) * 1024;
        leading = 1024;
        stride = BLOCK / 64 * 1024;
        swizzle = 1;  // 128-byte
    }
    return (ulong)((start & 0x3FFFF) >> 4) | (ulong)(leading >> 4) << 16 | (ulong)(stride >> 4) << 32 | swizzle << 62;
}

#define STR_(x) #x
#define STR(x) STR_(x)
// acc (64 x 128, D(n) as tensor_cores.cl's WGMMA_D) += A (64 x 16 at descriptor a) B (16 x 128 at
// descriptor b); the last two immediates say whether A and B are stored along m and n.
#define ACC(n) acc[n]
#define WGMMA_STORED(a, b)                                                                        \
    asm volatile("{ .reg .pred p; setp.ne.b32 p, 1, 0; "                                           \
                 HOPPER("wgmma.mma_async.sync.aligned.m64n128k16.f32." HALF_PTX_TYPES " " WGMMA_D  \
                        ", %64, %65, p, 1, 1, " STR(A_ALONG_M) ", " STR(B_ALONG_N) ";") " }"       \
                 : WGMMA_D_OPERANDS(ACC) : "l"(a), "l"(b) : "memory")

// Copy this work-item's chunks of one operand's slice at depth k0 into local memory at `at`.
inline void stage(const uint at, const __global ushort *P, const int ld, const int along_k, const int r0,
                  const int rows, const int k0, const int K, const int lid)
{
    #pragma unroll
    for (int i = 0; i < BLOCK * TK / 8 / THREADS; i++) {
        int offset, row, depth;
        chunk(lid + i * THREADS, along_k, &offset, &row, &depth);
        row += r0;
        const int k = k0 + depth, inside = row < rows && k < K;
        const __global ushort *source = !inside ? P : along_k ? P + (long)row * ld + k : P + (long)k * ld + row;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(at + offset), "l"(source), "r"(inside ? 16 : 0) : "memory");
    }
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void SixteenBitProduct(const __global ushort *a, const __global ushort *b, __global float *c, const int m,
                       const int n, const int k, const int lda, const int ldb, const int ldc, const int chunk)
{
    // The stages, on a 1024-byte boundary: the swizzle patterns repeat from there (the
    // descriptors' base offset 0).
    __local float4 stages[STAGES * STAGE_BYTES / 16] __attribute__((aligned(1024)));
    const uint base = (uint)(ulong)stages;
    const int lid = get_local_id(0), warpgroup = lid / 128;
    // Split along k where C has too few blocks to fill the GPU: work-groups z = 0, 1, .. sum
    // depths z chunk .. (z + 1) chunk into slice z of C (SumSlices adds them).
    const int m0 = get_group_id(1) * BLOCK, n0 = get_group_id(0) * BLOCK;
    const int first = get_group_id(2) * chunk, end = min(k, first + chunk), slices = (end - first + TK - 1) / TK;
    c += (long)get_group_id(2) * m * ldc;
    float acc[64];
    for (int i = 0; i < 64; i++)
        acc[i] = 0;
    // Slices 0 .. STAGES - 2 on their way; one commit group per slice, empty past the last.
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < slices) {
            stage(base + s * STAGE_BYTES, a, lda, !A_ALONG_M, m0, m, first + s * TK, end, lid);
            stage(base + s * STAGE_BYTES + OPERAND_BYTES, b, ldb, !B_ALONG_N, n0, n, first + s * TK, end, lid);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int s = 0; s < slices; s++) {
        // This work-item's copies of slice s done (STAGES - 2 younger ones may still run), made
        // visible to the tensor cores' reads; the barrier then waits for everyone's, and for
        // everyone's wgmmas of slice s - 1, whose stage the next copies overwrite.
        asm volatile("cp.async.wait_group " PENDING ";" ::: "memory");
        asm volatile(HOPPER("fence.proxy.async.shared::cta;") ::: "memory");
        barrier(CLK_LOCAL_MEM_FENCE);
        const int next = s + STAGES - 1;
        if (next < slices) {
            const uint at = base + next % STAGES * STAGE_BYTES;
            stage(at, a, lda, !A_ALONG_M, m0, m, first + next * TK, end, lid);
            stage(at + OPERAND_BYTES, b, ldb, !B_ALONG_N, n0, n, first + next * TK, end, lid);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        const uint at = base + s % STAGES * STAGE_BYTES;
        asm volatile(HOPPER("wgmma.fence.sync.aligned;") ::: "memory");
        #pragma unroll
        for (int h = 0; h < TK / 16; h++)
            WGMMA_STORED(descriptor(at, !A_ALONG_M, warpgroup * 64, h), descriptor(at + OPERAND_BYTES, !B_ALONG_N, 0, h));
        asm volatile(HOPPER("wgmma.commit_group.sync.aligned;") ::: "memory");
        asm volatile(HOPPER("wgmma.wait_group.sync.aligned 0;") ::: "memory");
    }
    // (the empty asm: acc belongs to the wgmmas until their wait, so nothing may move it earlier)
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+f"(acc[i]) :: "memory");
    // acc[4j + 2h + e]: row g + 8h of the warp's 16, column 8j + 2t + e (g = lane / 4, t = lane % 4).
    const int lane = lid % 32, row = m0 + warpgroup * 64 + lid % 128 / 32 * 16 + lane / 4;
    #pragma unroll
    for (int j = 0; j < 16; j++) {
        const int column = n0 + j * 8 + lane % 4 * 2;
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            const int i = row + 8 * h;
            __global float *at = c + (long)i * ldc + column;
            const float2 pair = (float2)(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            if (i < m && column + 1 < n) {
                if (ldc % 2 == 0)  // (8-byte aligned: one store, where the depth is short a good part of the time)
                    *(__global float2 *)at = pair;
                else
                    vstore2(pair, 0, at);
            } else if (i < m && column < n) {
                *at = pair.s0;
            }
        }
    }
}

// c = the sum of `splits` slices of `size` floats (SumSlices' geometry: one work-item an element).
__kernel void SumSlices(const __global float *slices, __global float *c, const int splits, const int size)
{
    const int e = get_global_id(0);
    if (e >= size)
        return;
    float sum = 0;
    for (int z = 0; z < splits; z++)
        sum += slices[(long)z * size + e];
    c[e] = sum;
}

// y = x rounded to 16 bits (to nearest even), two elements a work-item.
__kernel void RoundToSixteenBits(const __global float *x, __global ushort *y, const int count)
{
    const int i = 2 * get_global_id(0);
    if (i + 1 < count) {
        uint pair;
        PACK(pair, x[i], x[i + 1]);
        *(__global uint *)(y + i) = pair;
    } else if (i < count) {
        uint pair;
        PACK(pair, x[i], 0.0f);
        y[i] = pair & 0xffffu;
    }
}
