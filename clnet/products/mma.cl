// The tiled products' MMA form (pasted after tiles.cl and tensor_cores.cl, before gpu_tiles.cl):
// its tile geometry, then its slice product.
// MMA: the products on NVIDIA's tensor cores (see slice_product). Warp w of the 8 computes the
// block's rows (w / 4) * 64 .. + 64 by columns (w % 4) * 32 .. + 32 as 4 x 4 tiles of 16 x 8, and
// a lane holds, of each tile, rows g and g + 8 by columns 2t and 2t + 1 (g = lane / 4, t = lane
// % 4), as PTX's mma.m16n8k8 lays out its result: acc[2 * mi + h][2 * nj + e] is tile (mi, nj)'s
// row g + 8h, column 2t + e.
#if TILE != 128 || WPT != 8 || TK % 8
#error "the tensor-core form (MMA) computes 128 x 128 blocks with 8 x 8 outputs a work-item, TK a multiple of 8"
#endif
#define LOCAL_INDEX (get_local_id(1) * SIDE + get_local_id(0))
#define ROW_OWN(i) (LOCAL_INDEX / 128 * 64 + (i) / 2 * 16 + LOCAL_INDEX % 32 / 4 + (i) % 2 * 8)
#define COL_OWN(j) (LOCAL_INDEX / 32 % 4 * 32 + (j) / 2 * 8 + LOCAL_INDEX % 4 * 2 + (j) % 2)
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

inline void slice_product(__local const TYPE4 *As4, __local const TYPE4 *Bs4, TYPE acc[WPT][WPT])
{
    __local const TYPE *As = (__local const TYPE *)As4, *Bs = (__local const TYPE *)Bs4;
    const int lid = LOCAL_INDEX, g = lid % 32 / 4, t = lid % 4;
    const int wm = lid / 128 * 64, wn = lid / 32 % 4 * 32;  // the warp's 64 x 32 of the block
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
    for (int mi = 0; mi < 4; mi++) {
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
