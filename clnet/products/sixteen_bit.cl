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

// A work-item's chunks of one operand's slice: where each goes in a stage, where its row's first
// depth lies (its row clamped into the operand), its depth within the slice and whether its row
// exists; and how far the operand's next depth lies (`step`: 1 along k, ld along m or n). They
// are the same for every slice but for the depth: found once, so that staging a slice costs an
// address and a predicate a chunk. (`operand`: where a chunk outside it points, copying nothing.)
#define CHUNKS (BLOCK * TK / 8 / THREADS)
typedef struct {
    const __global ushort *operand, *origin[CHUNKS];
    long step;
    int offset[CHUNKS], depth[CHUNKS], live[CHUNKS];
} Chunks;

inline Chunks chunks_of(const __global ushort *P, const int ld, const int along_k, const int r0, const int rows,
                        const int lid)
{
    Chunks c;
    c.operand = P;
    c.step = along_k ? 1 : ld;
    #pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
        int row;
        chunk(lid + i * THREADS, along_k, &c.offset[i], &row, &c.depth[i]);
        row += r0;
        c.live[i] = row < rows;
        const long r = min(row, rows - 1);
        c.origin[i] = along_k ? P + r * ld + c.depth[i] : P + (long)c.depth[i] * ld + r;
    }
    return c;
}

// Copy a work-item's chunks of one operand's slice at depth k0 into local memory at `at`.
inline void stage(const uint at, const Chunks *c, const int k0, const int K)
{
    #pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
        const int inside = c->live[i] && k0 + c->depth[i] < K;
        const __global ushort *source = inside ? c->origin[i] + k0 * c->step : c->operand;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(at + c->offset[i]), "l"(source), "r"(inside ? 16 : 0) : "memory");
    }
}

// acc = this work-item's 64 of C's 128 x 128 block at (m0, n0), summed over depths first .. end.
inline void block_product(const __global ushort *a, const __global ushort *b, const int m, const int n,
                          const int lda, const int ldb, const int m0, const int n0, const int first, const int end,
                          const uint base, float acc[64])
{
    const int lid = get_local_id(0), warpgroup = lid / 128, slices = (end - first + TK - 1) / TK;
    for (int i = 0; i < 64; i++)
        acc[i] = 0;
    const Chunks ca = chunks_of(a, lda, !A_ALONG_M, m0, m, lid), cb = chunks_of(b, ldb, !B_ALONG_N, n0, n, lid);
    // Slices 0 .. STAGES - 2 on their way; one commit group per slice, empty past the last.
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < slices) {
            stage(base + s * STAGE_BYTES, &ca, first + s * TK, end);
            stage(base + s * STAGE_BYTES + OPERAND_BYTES, &cb, first + s * TK, end);
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
            stage(at, &ca, first + next * TK, end);
            stage(at + OPERAND_BYTES, &cb, first + next * TK, end);
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
}

// The stages, on a 1024-byte boundary: the swizzle patterns repeat from there (the descriptors'
// base offset 0).
#define STAGES_IN_LOCAL_MEMORY                                                              \
    __local float4 stages[STAGES * STAGE_BYTES / 16] __attribute__((aligned(1024)));       \
    const uint base = (uint)(ulong)stages

// Where the work-item's results lie: acc[2p] and acc[2p + 1] are row i, columns `column` and
// column + 1 (even) of C, for p = 0 .. 31 (acc[4j + 2h + e]: row g + 8h of the warp's 16, column
// 8j + 2t + e, g = lane / 4, t = lane % 4, as wgmma lays out its accumulator).
inline void result_place(const int p, const int m0, const int n0, int *i, int *column)
{
    const int lid = get_local_id(0), lane = lid % 32;
    *i = m0 + lid / 128 * 64 + lid % 128 / 32 * 16 + lane / 4 + p % 2 * 8;
    *column = n0 + p / 2 * 8 + lane % 4 * 2;
}

// Where C's element (i, j) lies, C laid out in panels of `panel` columns, each row-major (rows,
// panel), back to back (panel = the columns: row-major): a joined layer's kernel and gradient.
#define PANELLED(c, i, j, rows, panel) ((c) + (long)((j) / (panel)) * (panel) * (rows) + (long)(i) * (panel) + (j) % (panel))

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void SixteenBitProduct(const __global ushort *a, const __global ushort *b, __global float *c, const int m,
                       const int n, const int k, const int lda, const int ldb, const int panel, const int chunk)
{
    STAGES_IN_LOCAL_MEMORY;
    // Split along k where C has too few blocks to fill the GPU: work-groups z = 0, 1, .. sum
    // depths z chunk .. (z + 1) chunk into slice z of C, row-major (SumSlices adds them and lays
    // them out in C's panels).
    const int m0 = get_group_id(1) * BLOCK, n0 = get_group_id(0) * BLOCK;
    const int first = get_group_id(2) * chunk, end = min(k, first + chunk);
    c += (long)get_group_id(2) * m * n;
    float acc[64];
    block_product(a, b, m, n, lda, ldb, m0, n0, first, end, base, acc);
    // (panel is even: a pair of columns lies in one panel, 8 bytes aligned, one store)
    #pragma unroll
    for (int p = 0; p < 32; p++) {
        int i, column;
        result_place(p, m0, n0, &i, &column);
        const float2 pair = (float2)(acc[2 * p], acc[2 * p + 1]);
        if (i < m && column + 1 < n)
            *(__global float2 *)PANELLED(c, i, column, m, panel) = pair;
        else if (i < m && column < n)
            *PANELLED(c, i, column, m, panel) = pair.s0;
    }
}

#ifdef ACT
// A dense layer's forward on 16-bit x (rows, n_in) and W (n_in, units), both row-major: y = f(x W
// + b) (+ a residual r, a linear layer's, where adding), z or f'(z) kept as tiles.cl's STORE_PRE
// and STORE_SLOPES say, all in float (rows, units); with `sixteen`, y rounded to 16 bits into
// outputs16 too, the next layer's x as its products read it (it then rounds none itself).
// Built with the layer's activation (ACT).
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void SixteenBitForward(const __global ushort *inputs, const __global ushort *weights, const __global float *bias,
                       const __global float *residual, __global float *kept, __global float *outputs,
                       __global ushort *outputs16, const int rows, const int n_in, const int units, const int adding,
                       const int sixteen, const float a, const float b)
{
    STAGES_IN_LOCAL_MEMORY;
    const int m0 = get_group_id(1) * BLOCK, n0 = get_group_id(0) * BLOCK;
    float acc[64];
    block_product(inputs, weights, rows, units, n_in, units, m0, n0, 0, n_in, base, acc);
    // (units is a multiple of 8: a pair is whole or wholly outside)
    #pragma unroll
    for (int p = 0; p < 32; p++) {
        int i, column;
        result_place(p, m0, n0, &i, &column);
        if (i < rows && column < units) {
            const long at = (long)i * units + column;
            const float2 z = (float2)(acc[2 * p], acc[2 * p + 1]) + *(const __global float2 *)(bias + column);
            float2 y = (float2)(ACT_FORWARD(z.s0, a, b), ACT_FORWARD(z.s1, a, b));
#if STORE_SLOPES
            *(__global float2 *)(kept + at) = (float2)(ACT_DERIVATIVE(y.s0, z.s0, a, b), ACT_DERIVATIVE(y.s1, z.s1, a, b));
#elif STORE_PRE
            *(__global float2 *)(kept + at) = z;
#endif
            if (adding)
                y += *(const __global float2 *)(residual + at);
            *(__global float2 *)(outputs + at) = y;
            if (sixteen) {
                uint packed;
                PACK(packed, y.s0, y.s1);
                *(__global uint *)(outputs16 + at) = packed;
            }
        }
    }
}

// A dense layer's dL/dz from dL/dy (output_gr) where apply_derivative, times f'(z) (kept by the
// forward: STORE_SLOPES) or f' of y, else dL/dy itself, rounded to 16 bits for the weight and
// input gradients' products, and the bias gradient's sums in float over blocks of DELTA_ROWS rows
// (bias_slices, (row blocks, units), which SumRows adds). A work-group of DELTA_COLUMNS / 2
// pairs of columns by DELTA_LANES lanes takes a block: neighbouring work-items read neighbouring
// pairs, each lane every DELTA_LANES-th row of the block, and the lanes' sums are added in local
// memory. (A work-item a whole column pair's block, one after another, left a small layer's GPU
// mostly waiting on each load.)
#define DELTA_COLUMNS 64
#define DELTA_LANES 8
#define DELTA_ROWS 64
__kernel __attribute__((reqd_work_group_size(DELTA_COLUMNS / 2, DELTA_LANES, 1)))
void SixteenBitDelta(const __global float *output_gr, const __global float *slopes, __global ushort *delta,
                     __global float *bias_slices, const int rows, const int units, const int apply_derivative,
                     const float a, const float b)
{
    __local float2 sums[DELTA_LANES][DELTA_COLUMNS / 2];
    const int column = 2 * get_global_id(0), lane = get_local_id(1), block = get_group_id(1);
    float2 sum = 0;
    #pragma unroll
    for (int r = 0; r < DELTA_ROWS / DELTA_LANES; r++) {
        const int i = block * DELTA_ROWS + r * DELTA_LANES + lane;
        if (i >= rows || column >= units)
            break;
        const long at = (long)i * units + column;
        float2 d = *(const __global float2 *)(output_gr + at);
        if (apply_derivative) {
            const float2 s = *(const __global float2 *)(slopes + at);
#if STORE_SLOPES
            d *= s;
#else
            d *= (float2)(ACT_DERIVATIVE(s.s0, s.s0, a, b), ACT_DERIVATIVE(s.s1, s.s1, a, b));
#endif
        }
        sum += d;
        uint packed;
        PACK(packed, d.s0, d.s1);
        *(__global uint *)(delta + at) = packed;
    }
    sums[lane][get_local_id(0)] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane == 0 && column < units) {
        for (int l = 1; l < DELTA_LANES; l++)
            sum += sums[l][get_local_id(0)];
        *(__global float2 *)(bias_slices + (long)block * units + column) = sum;
    }
}
#endif

// c (columns) = the sums down the columns of x (rows, columns): the bias gradient from
// SixteenBitDelta's row blocks. A work-group of SUM_COLUMNS columns by SUM_LANES lanes, each lane
// every SUM_LANES-th row, the lanes' sums added in local memory. (SumSlices, a work-item a column
// adding the rows one after another, took the larger GPT's 128 row blocks markedly longer.)
#define SUM_COLUMNS 32
#define SUM_LANES 8
__kernel __attribute__((reqd_work_group_size(SUM_COLUMNS, SUM_LANES, 1)))
void SumRows(const __global float *x, __global float *c, const int rows, const int columns)
{
    __local float sums[SUM_LANES][SUM_COLUMNS];
    const int j = get_global_id(0), lane = get_local_id(1);
    float sum = 0;
    for (int i = lane; j < columns && i < rows; i += SUM_LANES)
        sum += x[(long)i * columns + j];
    sums[lane][get_local_id(0)] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane == 0 && j < columns) {
        for (int l = 1; l < SUM_LANES; l++)
            sum += sums[l][get_local_id(0)];
        c[j] = sum;
    }
}

// c = the sum of `splits` slices of a (size / columns, columns) row-major matrix, laid out in c's
// panels of `panel` columns (PANELLED): one work-item an element.
__kernel void SumSlices(const __global float *slices, __global float *c, const int splits, const int size,
                        const int columns, const int panel)
{
    const int e = get_global_id(0);
    if (e >= size)
        return;
    float sum = 0;
    #pragma unroll 8
    for (int z = 0; z < splits; z++)
        sum += slices[(long)z * size + e];
    *PANELLED(c, e / columns, e % columns, size / columns, panel) = sum;
}

// y = x rounded to 16 bits (to nearest even), eight elements a work-item (two 16-byte loads, one
// 16-byte store, where the eight lie in one row of one panel): y (count / columns, columns)
// row-major from x in panels of `panel` columns (PANELLED: a joined layer's kernel), columns and
// panel even; or x one row of one panel (columns = panel = count), any count.
__kernel void RoundToSixteenBits(const __global float *x, __global ushort *y, const int count, const int columns,
                                 const int panel)
{
    const int i = 8 * get_global_id(0), rows = count / columns;
    if (i >= count)
        return;
    if (i + 8 <= count && (columns == count || columns % 8 == 0 && panel % 8 == 0)) {
        const __global float4 *source = (const __global float4 *)PANELLED(x, i / columns, i % columns, rows, panel);
        const float4 lo = source[0], hi = source[1];
        uint p0, p1, p2, p3;
        PACK(p0, lo.s0, lo.s1);
        PACK(p1, lo.s2, lo.s3);
        PACK(p2, hi.s0, hi.s1);
        PACK(p3, hi.s2, hi.s3);
        *(__global uint4 *)(y + i) = (uint4)(p0, p1, p2, p3);
        return;
    }
    for (int e = i; e < min(count, i + 8); e++) {
        uint pair;
        PACK(pair, *PANELLED(x, e / columns, e % columns, rows, panel), 0.0f);
        y[e] = pair & 0xffffu;
    }
}
