// The MMA form's 16-bit products (pasted after mma.cl, whose geometry they share): built with
// HALF = 1 the slice product multiplies bfloat16 operands, with HALF = 2 float16 ones, on the
// tensor cores with float accumulators (mma.sync.m16n8k16), what a mixed-precision policy asks of a
// matrix product. The operands stay float in global memory: gpu_tiles.cl's put() rounds each to 16
// bits (to nearest even) as it stages it, as PyTorch's autocast rounds a float32 tensor before its
// product, two depths a uint (its STAGED_PAIR layout). One 16-deep mma takes what 3xTF32 takes six
// 8-deep ones for, at the tensor cores' 16-bit rate. As in mma.cl each slice is summed from 0 and
// added to acc in float.
#if TK % 16
#error "the 16-bit products (HALF) take 16 of depth at a time: TK a multiple of 16"
#endif
// c (a 16 x 8 accumulator fragment) += a (16 x 16) b (16 x 8), two 16-bit values a register, the
// lower depth in the lower half.
#define MMA_16(c, a, b) MMA_SYNC("m16n8k16.row.col.f32." HALF_PTX_TYPES ".f32", c, a, b)

inline void slice_product(__local const TYPE4 *As4, __local const TYPE4 *Bs4, TYPE acc[ACC_ROWS][ACC_COLS])
{
    // (pairs of depths, see put(): As[k / 2][m], a fragment register each)
    __local const uint *As = (__local const uint *)As4, *Bs = (__local const uint *)Bs4;
    const int lid = LOCAL_INDEX, g = lid % 32 / 4, t = lid % 4;
    const int wm = WARP_ROW, wn = WARP_COL;  // the warp's WARP_M x 32 of the block
    // B's fragments for the whole slice: b0 = B[2t, 2t + 1][g], b1 = B[2t + 8, 2t + 9][g] of each 16 x 8 piece.
    uint b[4][TK / 16][2];  // (n tile, 16 of depth, fragment)
    #pragma unroll
    for (int nj = 0; nj < 4; nj++)
        #pragma unroll
        for (int h = 0; h < TK / 16; h++)
            #pragma unroll
            for (int r = 0; r < 2; r++)
                b[nj][h][r] = Bs[(h * 8 + t + 4 * r) * LT + wn + nj * 8 + g];
    #pragma unroll
    for (int mi = 0; mi < M_TILES; mi++) {
        // A's: a0 = A[g][2t, 2t + 1], a1 = A[g + 8][2t, 2t + 1], a2 = A[g][2t + 8, 2t + 9], a3 = A[g + 8][2t + 8, 2t + 9].
        uint a[TK / 16][4];  // (16 of depth, fragment)
        #pragma unroll
        for (int h = 0; h < TK / 16; h++)
            #pragma unroll
            for (int r = 0; r < 4; r++)
                a[h][r] = As[(h * 8 + t + 4 * (r / 2)) * LT + wm + mi * 16 + g + 8 * (r % 2)];
        TYPE slice[4][4] = {{0}};  // (n tile, fragment): this slice's sums
        #pragma unroll
        for (int h = 0; h < TK / 16; h++)
            #pragma unroll
            for (int nj = 0; nj < 4; nj++)
                MMA_16(slice[nj], a[h], b[nj][h]);
        #pragma unroll
        for (int nj = 0; nj < 4; nj++)
            #pragma unroll
            for (int r = 0; r < 4; r++)
                acc[2 * mi + r / 2][2 * nj + r % 2] += slice[nj][r];
    }
}
