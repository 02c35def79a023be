// The WGMMA form's 16-bit products (pasted after wgmma.cl, whose geometry and K loop they share):
// built with HALF = 1 a slice multiplies bfloat16 operands, with HALF = 2 float16 ones, on
// Hopper's warpgroup tensor cores with float accumulators (wgmma.m64n128k16), as mma_half.cl does
// with mma.sync. The operands stay float in global memory and are rounded once as they are staged
// (put() for A, stage() below for B). A 16-deep wgmma takes what 3xTF32 takes six 8-deep ones
// for, and a slice of local memory holds twice the depth: TK 16 or 32. The products are summed into
// acc on the tensor cores (in float, as cuBLAS's are), not slice by slice as wgmma.cl's: what the
// tensor cores' sums lose is far below the operands' rounding here (tests/test_kernels.py holds
// them to 1e-5 of the rounded operands' product), and it saved the adds and the registers of d.

// A pair of depths (k, k + 1; k even) of B's row n, in uints from a staged slice's start: wgmma's
// K-major core matrices as wgmma.cl lays them out, 8 rows by 16 bytes, here 8 depths a row.
#define CORE_PAIR(k, n) (((k) / 8 * TILE + (n)) * 4 + (k) % 8 / 2)

// Stage A's slice (put: STAGED_PAIR, two depths a uint) and B's in core matrices. Fetched along k
// (the forward's x, the input gradient's W), a work-item holds depths k .. k + 3 of row n: one
// 8-byte store. Fetched along n (the weight gradient's x), rows n .. n + 3 at depth k, and its
// neighbour the same rows at k ^ 1: two rows' pairs each (pair_depths).
inline void stage(const TYPE4 ra[LOADS], const int a_along_k, const TYPE4 rb[LOADS], const int b_along_k,
                  __local TYPE4 *As, __local TYPE4 *Bs, const int lid)
{
    put(ra, a_along_k, As, lid);
    __local uint *B = (__local uint *)Bs;
    #pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int e = lid + l * ITEMS;
        if (b_along_k) {
            const int n = K_RUN_ROW(e), k = K_RUN_DEPTH(e);
            uint low, high;
            PACK(low, rb[l].s0, rb[l].s1);
            PACK(high, rb[l].s2, rb[l].s3);
            *(__local uint2 *)(B + CORE_PAIR(k, n)) = (uint2)(low, high);
        } else {
            const int k = M_RUN_DEPTH(e), odd = k % 2, n = M_RUN_ROW(e) + 2 * odd;
            uint low, high;
            pair_depths(rb[l], odd, &low, &high);
            B[CORE_PAIR(k, n)] = low;
            B[CORE_PAIR(k, n + 1)] = high;
        }
    }
}

// The work-item's A registers of the staged slice, as wgmma takes A (64 x 16) from registers: of
// each 16 of depth h, a[4h ..] = (row g, depths 2t, 2t + 1), (g + 8, 2t ..), (g, 2t + 8 ..),
// (g + 8, 2t + 8 ..) of its warp's 16 rows, one 32-bit load each.
inline void load_fragments(__local const TYPE4 *As4, uint a[FRAGMENTS])
{
    __local const uint *As = (__local const uint *)As4;
    const int row = ROW_OWN(0), t = LOCAL_INDEX % 4;
    #pragma unroll
    for (int h = 0; h < TK / 16; h++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            a[h * 4 + r] = As[STAGED_PAIR(h * 16 + 2 * t + 8 * (r / 2), row + 8 * (r % 2))];
}

// A (64 x 16, 16-bit) times B (16 x 128, 16-bit, K-major: the last argument, B not transposed).
#define WGMMA_16(D, a, i, b, accumulate) \
    WARPGROUP_MMA("m64n128k16.f32." HALF_PTX_TYPES, ", 0", D, a, i, b, accumulate)

// Start this slice's product, summed into acc (d is not used).
inline void start_slice(const uint a[FRAGMENTS], __local const TYPE4 *Bs, TYPE d[TILE / 2],
                        TYPE acc[ACC_ROWS][ACC_COLS])
{
    const uint at = (uint)(ulong)Bs;  // its address in local memory
    asm volatile(HOPPER("wgmma.fence.sync.aligned;") ::: "memory");
    #pragma unroll
    for (int h = 0; h < TK / 16; h++)
        WGMMA_16(ACCUMULATOR, a, h * 4, descriptor(at + h * 2 * TILE * 16), 1);  // core matrices 2h, 2h + 1 along k
    asm volatile(HOPPER("wgmma.commit_group.sync.aligned;") ::: "memory");
}
