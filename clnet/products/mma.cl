// The tiled products' MMA form (pasted after tiles.cl and tensor_cores.cl, before gpu_tiles.cl):
// its tile geometry, then its slice product.
// MMA: the products on NVIDIA's tensor cores (see slice_product). The block's 8 warps each compute
// WARP_M rows by 32 columns of it as M_TILES x 4 tiles of 16 x 8: in a 128 x 128 block (8 x 8
// outputs a work-item) warp w takes rows (w / 4) * 64 .., columns (w % 4) * 32 ..; in a 64 x 64
// block (4 x 4), for products 64 wide (attention's, over a head's key dim), rows (w / 2) * 16 ..,
// columns (w % 2) * 32 .., so that no half of a block idles past N. A lane holds, of each tile,
// rows g and g + 8 by columns 2t and 2t + 1 (g = lane / 4, t = lane % 4), as PTX's mma.m16n8k8
// lays out its result: acc[2 * mi + h][2 * nj + e] is tile (mi, nj)'s row g + 8h, column 2t + e.
#if TILE == 128 && WPT == 8
#define WARP_M 64
#elif TILE == 64 && WPT == 4
#define WARP_M 16
#else
#error "the tensor-core form (MMA) computes 128 x 128 blocks with 8 x 8 outputs a work-item, or 64 x 64 with 4 x 4"
#endif
#if TK % 8
#error "the tensor-core form (MMA) takes 8 of depth at a time: TK a multiple of 8"
#endif
#define WARPS_N (TILE / 32)  // warps across the block's columns
#define M_TILES (WARP_M / 16)
#define ACC_ROWS (2 * M_TILES)
#define ACC_COLS 8
#define LOCAL_INDEX (get_local_id(1) * SIDE + get_local_id(0))
#define WARP_ROW (LOCAL_INDEX / 32 / WARPS_N * WARP_M)  // the warp's first row and column in the block
#define WARP_COL (LOCAL_INDEX / 32 % WARPS_N * 32)
#define ROW_OWN(i) (WARP_ROW + (i) / 2 * 16 + LOCAL_INDEX % 32 / 4 + (i) % 2 * 8)
#define COL_OWN(j) (WARP_COL + (j) / 2 * 8 + LOCAL_INDEX % 4 * 2 + (j) % 2)
#define ROW_RUN 1
#define COL_RUN 2
// LT = 8 (mod 32): a fragment's 32 reads (rows or columns g + const, depths t + const) fall in
// 32 different banks.
#define LT (TILE + 8)

// c (a 16 x 8 float accumulator fragment) += a b, PTX's mma.sync of `shape` (m16n8k8 or m16n8k16)
// and operand types: a (16 x k, four registers) and b (k x 8, two), laid out as PTX lays them out.
#define MMA_SYNC(shape_and_types, c, a, b)                                                     \
    asm("mma.sync.aligned." shape_and_types " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" \
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                         \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

#if !HALF  // (mma_half.cl gives the 16-bit products' slice product)
// c += a (16 x 8) b (8 x 8) on TF32 operands.
#define MMA_TF32(c, a, b) MMA_SYNC("m16n8k8.row.col.f32.tf32.tf32.f32", c, a, b)

inline void slice_product(__local const TYPE4 *As4, __local const TYPE4 *Bs4, TYPE acc[ACC_ROWS][ACC_COLS])
{
    __local const TYPE *As = (__local const TYPE *)As4, *Bs = (__local const TYPE *)Bs4;
    const int lid = LOCAL_INDEX, g = lid % 32 / 4, t = lid % 4;
    const int wm = WARP_ROW, wn = WARP_COL;  // the warp's WARP_M x 32 of the block
    // B's fragments for the whole slice: b0 = B[t][g], b1 = B[t + 4][g] of each 8 x 8 piece.
    uint b[4][TK / 8][2][2];  // (n tile, 8 of depth, big/small, fragment)
    #pragma unroll
    for (int nj = 0; nj < 4; nj++)
        #pragma unroll
        for (int h = 0; h < TK / 8; h++)
            #pragma unroll
            for (int r = 0; r < 2; r++)
                split_tf32(Bs[(h * 8 + t + 4 * r) * LT + wn + nj * 8 + g], &b[nj][h][0][r], &b[nj][h][1][r]);
    #pragma unroll
    for (int mi = 0; mi < M_TILES; mi++) {
        // A's: a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4].
        uint a[TK / 8][2][4];  // (8 of depth, big/small, fragment)
        #pragma unroll
        for (int h = 0; h < TK / 8; h++)
            #pragma unroll
            for (int r = 0; r < 4; r++)
                split_tf32(As[(h * 8 + t + 4 * (r / 2)) * LT + wm + mi * 16 + g + 8 * (r % 2)], &a[h][0][r], &a[h][1][r]);
        TYPE slice[4][4] = {{0}};  // (n tile, fragment): this slice's sums
        #pragma unroll
        for (int h = 0; h < TK / 8; h++)
            #pragma unroll
            for (int nj = 0; nj < 4; nj++) {
                MMA_TF32(slice[nj], a[h][1], b[nj][h][0]);
                MMA_TF32(slice[nj], a[h][0], b[nj][h][1]);
                MMA_TF32(slice[nj], a[h][0], b[nj][h][0]);
            }
        #pragma unroll
        for (int nj = 0; nj < 4; nj++)
            #pragma unroll
            for (int r = 0; r < 4; r++)
                acc[2 * mi + r / 2][2 * nj + r % 2] += slice[nj][r];
    }
}
#endif
