// Products of operands stored in 16 bits (HALF: 1 bfloat16, 2 float16), summed in float, on
// Hopper's warpgroup tensor cores (pasted after tensor_cores.cl and sixteen_bit_layout.cl). The
// tiled forms read float operands and round them as they stage them, so a 16-bit product there
// fetches twice the bytes a 16-bit operand has, through registers; here both operands are stored
// in 16 bits as wgmma reads them (sixteen_bit_layout.cl's atoms), each slice goes from global to
// local memory untouched by one work-item's cp.async.bulk, and wgmma reads both from local memory.
// Copies of 16 bytes by every work-item (cp.async) were as fast as the L2 cache let their
// instructions be: bulk copies take those instructions away (benchmarks/RESULTS.md).
//
// C (m x n, float, row-major) = A (m x k) B (k x n), A stored as the atoms of an (m x k) matrix
// (A_ALONG_M 0) or of a (k x m) one (A_ALONG_M 1), B of an (n x k) (B_ALONG_N 0) or a (k x n)
// (B_ALONG_N 1): a dense layer's forward x W is A along k, B along n; its weight gradient x^T
// dL/dz both along m and n; its input gradient dL/dz W^T both along k. `a_atom_rows` and
// `b_atom_rows` are the stored matrices' padded rows / 8. Depths past k read the atoms' zero
// pads, but for A along m (the weight gradient: k is the batch's rows, fewer than the copies
// hold), whose last slice is cleared past k (clear_depths). C's blocks may be split along k (chunk
// depths each, a multiple of TK, written to slices of C that SumSlices adds): the weight
// gradient has few blocks.
//
// A work-group of 256 (two warpgroups) computes a 128 x 128 block of C, each warpgroup 64 rows
// with wgmma.m64n128k16, as wgmma.cl's geometry. Slices of TK depths are staged in STAGES buffers
// of local memory, each filled while the slices before it are multiplied; an mbarrier a stage
// says when its copies have landed. With 64 accumulators a work-item, two work-groups share an
// SM: one's barrier runs while the other's wgmmas do.
#if !HALF
#error "sixteen_bit.cl multiplies 16-bit operands: build it with HALF 1 (bfloat16) or 2 (float16)"
#endif
#define BLOCK 128
#define THREADS 256
// Slices 32 deep (the atoms' columns), three stages: 16 KiB a stage, 48 KiB in all, the most
// NVIDIA's OpenCL gives a work-group (two stages ran markedly slower: RESULTS.md).
#define TK 32
#define STAGES 3
#define OPERAND_BYTES (BLOCK * TK * 2)
#define STAGE_BYTES (2 * OPERAND_BYTES)
#define ATOM_BYTES 512

// wgmma's descriptor of an operand's rows first .. first + 63 (A's, a warpgroup's) or 0 .. 127
// (B's), depths 16h .. 16h + 15, in the stage at `at`: start address, leading and stride byte
// offsets, 64-byte swizzle. Along k the slice is 16 atoms down its rows (rows of 64 bytes; the
// leading offset is not used); along m or n four columns of atoms (32 rows each, 2 KiB apart),
// each 4 atoms down its depths (8 each, 512 bytes apart).
inline ulong descriptor(const uint at, const int along_k, const int first, const int h)
{
    const uint start = along_k ? at + first * TK * 2 + h * 32 : at + first / 32 * 2048 + h * 2 * ATOM_BYTES;
    const uint leading = along_k ? 16 : 2048, stride = ATOM_BYTES;
    return (ulong)((start & 0x3FFFF) >> 4) | (ulong)(leading >> 4) << 16 | (ulong)(stride >> 4) << 32 | 2ul << 62;
}

// acc (64 x 128, D(n) as tensor_cores.cl's WGMMA_D) += A (64 x 16 at descriptor a) B (16 x 128 at
// descriptor b); the last two immediates say whether A and B are stored along m and n.
#define ACC(n) acc[n]
#define WGMMA_STORED(a, b)                                                                        \
    asm volatile("{ .reg .pred p; setp.ne.b32 p, 1, 0; "                                           \
                 HOPPER("wgmma.mma_async.sync.aligned.m64n128k16.f32." HALF_PTX_TYPES " " WGMMA_D  \
                        ", %64, %65, p, 1, 1, " STR(A_ALONG_M) ", " STR(B_ALONG_N) ";") " }"       \
                 : WGMMA_D_OPERANDS(ACC) : "l"(a), "l"(b) : "memory")

// `bytes` from global memory at `from` to local memory at `to`, counted on the mbarrier at `bar`.
inline void bulk_copy(const uint to, const __global ushort *from, const int bytes, const uint bar)
{
    asm volatile(HOPPER("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];")
                 :: "r"(to), "l"(from), "r"(bytes), "r"(bar) : "memory");
}

// One operand's slice at depth k0 into `at`: rows (or columns, along m or n) r0 .. r0 + 127 of
// the atoms P of a matrix with atom_rows rows of atoms.
inline void stage_operand(const uint at, const __global ushort *P, const int along_k, const int r0, const int k0,
                          const int atom_rows, const uint bar)
{
    const int atom = ATOM_BYTES / 2;  // (ushorts)
    if (along_k) {
        bulk_copy(at, P + ((long)(k0 / 32) * atom_rows + r0 / 8) * atom, OPERAND_BYTES, bar);
    } else {
        for (int c = 0; c < BLOCK / 32; c++)
            bulk_copy(at + c * 2048, P + ((long)(r0 / 32 + c) * atom_rows + k0 / 8) * atom, 2048, bar);
    }
}

// Slice k0 of both operands into the stage at `at` (one work-item), its mbarrier `bar` told the bytes.
inline void stage(const uint at, const uint bar, const __global ushort *a, const __global ushort *b,
                  const int a_atom_rows, const int b_atom_rows, const int m0, const int n0, const int k0)
{
    asm volatile(HOPPER("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;") :: "r"(bar), "r"(STAGE_BYTES)
                 : "memory");
    stage_operand(at, a, !A_ALONG_M, m0, k0, a_atom_rows, bar);
    stage_operand(at + OPERAND_BYTES, b, !B_ALONG_N, n0, k0, b_atom_rows, bar);
}

// Wait until the mbarrier at `bar` has completed its phase of this parity (a stage's copies landed).
inline void wait_for(const uint bar, const int parity)
{
    asm volatile(HOPPER("{ .reg .pred done; WAIT: mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1; "
                        "@done bra.uni DONE; bra.uni WAIT; DONE: }") :: "r"(bar), "r"(parity) : "memory");
}

// Depths from .. TK - 1 of an operand stored along m or n, in the stage at `at`, set to zero: the
// weight gradient's last slice, where the sum ends inside it, holds rows of x and dL/dz past k,
// the batch's rows (an earlier batch's). Elsewhere the depths past k are the atoms' zero pads (n_in
// or units: columns of an operand along k, rows of W along n), and no slice is cleared (clearing
// in every product cost a few percent of its time: RESULTS.md).
inline void clear_depths(const uint at, const int from)
{
    const int chunks = (TK - from) * 4;  // 16-byte chunks of the depths, in each column of atoms
    for (int c = get_local_id(0); c < BLOCK / 32 * chunks; c += THREADS)
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};"
                     :: "r"(at + c / chunks * 2048 + (from + c % chunks / 4) * 64 + c % 4 * 16), "r"(0) : "memory");
}

// acc = this work-item's 64 of C's 128 x 128 block at (m0, n0), summed over depths first .. end.
inline void block_product(const __global ushort *a, const __global ushort *b, const int a_atom_rows,
                          const int b_atom_rows, const int m0, const int n0, const int first, const int end,
                          const uint base, const uint bars, float acc[64])
{
    const int lid = get_local_id(0), warpgroup = lid / 128, slices = (end - first + TK - 1) / TK;
    for (int i = 0; i < 64; i++)
        acc[i] = 0;
    if (lid == 0) {
        for (int s = 0; s < STAGES; s++)
            asm volatile(HOPPER("mbarrier.init.shared::cta.b64 [%0], 1;") :: "r"(bars + 8 * s) : "memory");
        asm volatile(HOPPER("fence.mbarrier_init.release.cluster;") ::: "memory");
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // (the mbarriers made before anyone waits on one)
    // Slices 0 .. STAGES - 2 on their way. (Issued before the barrier above, by the work-item that
    // made the mbarriers, the products ran markedly slower: RESULTS.md.)
    if (lid == 0)
        for (int s = 0; s < STAGES - 1 && s < slices; s++)
            stage(base + s * STAGE_BYTES, bars + 8 * s, a, b, a_atom_rows, b_atom_rows, m0, n0, first + s * TK);
    for (int s = 0; s < slices; s++) {
        const uint at = base + s % STAGES * STAGE_BYTES;
        wait_for(bars + 8 * (s % STAGES), s / STAGES & 1);
#if A_ALONG_M
        const int left = end - first - s * TK;
        if (left < TK) {
            clear_depths(at, left);
            clear_depths(at + OPERAND_BYTES, left);
            asm volatile(HOPPER("fence.proxy.async.shared::cta;") ::: "memory");  // (for the tensor cores' reads)
        }
#endif
        // Everyone's wgmmas of slice s - 1 done (each waits for its own below): its stage is free
        // for slice s + STAGES - 1.
        barrier(CLK_LOCAL_MEM_FENCE);
        const int next = s + STAGES - 1;
        if (lid == 0 && next < slices)
            stage(base + next % STAGES * STAGE_BYTES, bars + 8 * (next % STAGES), a, b, a_atom_rows, b_atom_rows, m0,
                  n0, first + next * TK);
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

// The stages, on a 1024-byte boundary (the swizzle patterns repeat from there: the descriptors'
// base offset 0), and their mbarriers.
#define STAGES_IN_LOCAL_MEMORY                                                              \
    __local float4 stages[STAGES * STAGE_BYTES / 16] __attribute__((aligned(1024)));       \
    __local ulong stage_bars[STAGES];                                                       \
    const uint base = (uint)(ulong)stages, bars = (uint)(ulong)stage_bars

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
                       const int n, const int k, const int a_atom_rows, const int b_atom_rows, const int panel,
                       const int chunk)
{
    STAGES_IN_LOCAL_MEMORY;
    // Split along k where C has too few blocks to fill the GPU: work-groups z = 0, 1, .. sum
    // depths z chunk .. (z + 1) chunk into slice z of C, row-major (SumSlices adds them and lays
    // them out in C's panels).
    const int m0 = get_group_id(1) * BLOCK, n0 = get_group_id(0) * BLOCK;
    const int first = get_group_id(2) * chunk, end = min(k, first + chunk);
    c += (long)get_group_id(2) * m * n;
    float acc[64];
    block_product(a, b, a_atom_rows, b_atom_rows, m0, n0, first, end, base, bars, acc);
    // (panel is even: a pair of columns lies in one panel, 8 bytes aligned, one store)
    #pragma unroll
    for (int p = 0; p < 32; p++) {
        int i, column;
        result_place(p, m0, n0, &i, &column);
        const float2 pair = (float2)(acc[2 * p], acc[2 * p + 1]);
        // (a uniform branch to row-major C: addressing it as panels cost a few percent of the
        // product's time where C is one panel)
        if (i < m && column + 1 < n)
            *(__global float2 *)(panel == n ? c + (long)i * n + column : PANELLED(c, i, column, m, panel)) = pair;
        else if (i < m && column < n)
            *PANELLED(c, i, column, m, panel) = pair.s0;
    }
}

#ifdef ACT
// A dense layer's forward on 16-bit x (rows, n_in) and W (n_in, units), both as atoms: y = f(x W
// + b) (+ a residual r, a linear layer's, where adding), z or f'(z) kept as tiles.cl's STORE_PRE
// and STORE_SLOPES say, all in float (rows, units) row-major; with `sixteen`, y rounded to 16 bits
// into outputs16 too (as atoms), the next layer's x as its products read it (it then rounds none
// itself). `batch_atom_rows`: the atom rows of the batch's copies (x's, y's), their padded
// capacity / 8; `weights_atom_rows` W's, its padded n_in / 8. Built with the layer's activation (ACT).
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void SixteenBitForward(const __global ushort *inputs, const __global ushort *weights, const __global float *bias,
                       const __global float *residual, __global float *kept, __global float *outputs,
                       __global ushort *outputs16, const int rows, const int n_in, const int units, const int adding,
                       const int sixteen, const int batch_atom_rows, const int weights_atom_rows, const float a,
                       const float b)
{
    STAGES_IN_LOCAL_MEMORY;
    const int m0 = get_group_id(1) * BLOCK, n0 = get_group_id(0) * BLOCK;
    float acc[64];
    block_product(inputs, weights, batch_atom_rows, weights_atom_rows, m0, n0, 0, n_in, base, bars, acc);
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
                *(__global uint *)(outputs16 + atom_index(i, column, batch_atom_rows)) = packed;
            }
        }
    }
}

// A dense layer's dL/dz from dL/dy (output_gr) where apply_derivative, times f'(z) (kept by the
// forward: STORE_SLOPES) or f' of y, else dL/dy itself, rounded to 16 bits for the weight and
// input gradients' products (as atoms, batch_atom_rows of them down), and the bias gradient's
// sums in float over `blocks` blocks of DELTA_ROWS rows (bias_slices, (row slices, units), which
// SumRows adds). A work-group of DELTA_COLUMNS / 2 pairs of columns by DELTA_LANES lanes takes a
// slice: neighbouring work-items read neighbouring pairs, each lane every DELTA_LANES-th row of a
// block, and the lanes' sums are added in local memory. (A work-item a whole column pair's block,
// one after another, left a small layer's GPU mostly waiting on each load; several blocks a slice
// leave a convolution's many rows fewer slices to add.)
#define DELTA_COLUMNS 64
#define DELTA_LANES 8
#define DELTA_ROWS 64
__kernel __attribute__((reqd_work_group_size(DELTA_COLUMNS / 2, DELTA_LANES, 1)))
void SixteenBitDelta(const __global float *output_gr, const __global float *slopes, __global ushort *delta,
                     __global float *bias_slices, const int rows, const int units, const int blocks,
                     const int apply_derivative, const int batch_atom_rows, const float a, const float b)
{
    __local float2 sums[DELTA_LANES][DELTA_COLUMNS / 2];
    const int column = 2 * get_global_id(0), lane = get_local_id(1), slice = get_group_id(1);
    float2 sum = 0;
    for (int block = slice * blocks; block < (slice + 1) * blocks; block++) {
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
            *(__global uint *)(delta + atom_index(i, column, batch_atom_rows)) = packed;
        }
    }
    sums[lane][get_local_id(0)] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane == 0 && column < units) {
        for (int l = 1; l < DELTA_LANES; l++)
            sum += sums[l][get_local_id(0)];
        *(__global float2 *)(bias_slices + (long)slice * units + column) = sum;
    }
}
#endif

// c (columns) = the sums down the columns of x (rows, columns): the bias gradient from
// SixteenBitDelta's row blocks. A work-group of SUM_COLUMNS columns by SUM_LANES lanes, each lane
// every SUM_LANES-th row, the lanes' sums added in local memory. (SumSlices, a work-item a column
// adding the rows one after another, took the larger GPT's 128 row blocks markedly longer.)
#define SUM_COLUMNS 32
#define SUM_LANES 32
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

// y = x rounded to 16 bits (to nearest even), as atoms (sixteen_bit_layout.cl, atom_rows of them
// down): x (count / columns, columns) row-major, or in panels of `panel` columns (PANELLED: a
// joined layer's kernel); eight elements a work-item (two 16-byte loads, one 16-byte store: they
// lie in one row of one panel, and in one 16-byte chunk of an atom), columns and panel multiples
// of 8.
__kernel void RoundToSixteenBits(const __global float *x, __global ushort *y, const int count, const int columns,
                                 const int panel, const int atom_rows)
{
    const int e = 8 * get_global_id(0), i = e / columns, j = e % columns;
    if (e >= count)
        return;
    const __global float4 *source = (const __global float4 *)PANELLED(x, i, j, count / columns, panel);
    const float4 lo = source[0], hi = source[1];
    uint p0, p1, p2, p3;
    PACK(p0, lo.s0, lo.s1);
    PACK(p1, lo.s2, lo.s3);
    PACK(p2, hi.s0, hi.s1);
    PACK(p3, hi.s2, hi.s3);
    *(__global uint4 *)(y + atom_index(i, j, atom_rows)) = (uint4)(p0, p1, p2, p3);
}
