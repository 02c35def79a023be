// Assembles a mini-batch on the device: the rows index[first..first+rows) of the resident
// inputs and targets (or, with index 0, 1, 2, ..., a streamed batch's staging slot) are copied
// into the batch buffers, four columns per work-item.
// x_batch is also written transposed, (x_cols, ld), for the first layer's weight gradient where
// it reads x^T (the CPU form of Dense); ld = 0: not written (x^T's 4-byte stores, a row apart,
// were most of the README MLP's gather on a GPU, where nothing read them; benchmarks/RESULTS.md,
// the batch gather's x^T).
__kernel void GatherRows(__global const TYPE *x, __global const TYPE *y, __global const int *index,
                         const int first, const int x_cols, const int y_cols,
                         __global TYPE *x_batch,    // (rows, x_cols)
                         __global TYPE *x_batch_t,  // (x_cols, ld)
                         const int ld,
                         __global TYPE *y_batch)    // (rows, y_cols)
{
    const int col = get_global_id(0) * 4;
    const int row = get_global_id(1);
    const long source = index[first + row];
    if (col < x_cols) {
        const TYPE4 v = ToVect4(x + source * x_cols, col, x_cols);
        D4ToArray(x_batch + row * x_cols, v, col, x_cols);
        const TYPE lanes[4] = {v.s0, v.s1, v.s2, v.s3};
        for (int j = 0; ld && j < 4 && col + j < x_cols; j++)
            x_batch_t[(col + j) * ld + row] = lanes[j];
    }
    if (col < y_cols)
        D4ToArray(y_batch + row * y_cols, ToVect4(y + source * y_cols, col, y_cols), col, y_cols);
}
