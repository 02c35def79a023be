// Assembles a mini-batch on the device: the rows index[first..first+rows) of the resident
// inputs and targets (or, with index 0, 1, 2, ..., a streamed batch's staging slot) are copied
// into the batch buffers, four columns of `per_item` rows per work-item (1 or 4).
// x_batch is also written transposed, (x_cols, ld), for the first layer's weight gradient where
// it reads x^T (the CPU form of Dense); ld = 0: not written (x^T's stores were most of the README
// MLP's gather on a GPU, where nothing read them; benchmarks/RESULTS.md, the batch gather's x^T).
// Four rows a work-item there, so that each of x^T's rows gets four consecutive elements in one
// store: a CPU runtime puts neighbouring work-items (four columns apart, so 4 * ld elements apart
// in x^T) in one vector, and 4-byte stores that far apart were a scatter of single elements. A
// CPU takes four rows a work-item without x^T too: a quarter of the work-items for the same
// copies, each a work-item's overhead on a CPU (the LSTM's batch of 64 rows of 2048); a GPU one
// (data.py's gather_rows_per_item). vec_type_hint(TYPE4): a work-item already moves whole TYPE4s;
// Intel's CPU compiler otherwise vectorizes across work-items, four columns apart, and took several
// times PoCL's time for the LSTM's batch (benchmarks/RESULTS.md, the batch gather on CPUs).
// Each row's elements GATHER_AHEAD on are asked for ahead (PREFETCH: on CPUs): the rows are random
// ones of the whole data set, read from memory in runs too short for the CPU's prefetchers to
// learn (the README MLP's batch on a 2-core Zen 4: about half the time on Intel's runtime, a
// quarter less on pip's PoCL 3.0; benchmarks/RESULTS.md, the batch gather on CPUs).
#define GATHER_AHEAD 64
__kernel __attribute__((vec_type_hint(TYPE4)))
void GatherRows(__global const TYPE *x, __global const TYPE *y, __global const int *index, const int first,
                const int rows, const int x_cols, const int y_cols,
                __global TYPE *x_batch,    // (rows, x_cols)
                __global TYPE *x_batch_t,  // (x_cols, ld)
                const int ld, const int per_item,
                __global TYPE *y_batch)    // (rows, y_cols)
{
    const int col = get_global_id(0) * 4;
    const int row0 = get_global_id(1) * per_item;
    const int count = min_int(per_item, rows - row0);
    TYPE4 v[4] = {(TYPE4)(0), (TYPE4)(0), (TYPE4)(0), (TYPE4)(0)};  // (row, column)
    for (int i = 0; i < count; i++) {
        const long source = index[first + row0 + i];
        if (col < x_cols) {
            PREFETCH(x + source * x_cols + min_int(col + GATHER_AHEAD, x_cols - 1));
            v[i] = ToVect4(x + source * x_cols, col, x_cols);
            D4ToArray(x_batch + (row0 + i) * x_cols, v[i], col, x_cols);
        }
        if (col < y_cols)
            D4ToArray(y_batch + (row0 + i) * y_cols, ToVect4(y + source * y_cols, col, y_cols), col, y_cols);
    }
    if (!ld || col >= x_cols)
        return;
    const TYPE4 t[4] = {(TYPE4)(v[0].s0, v[1].s0, v[2].s0, v[3].s0), (TYPE4)(v[0].s1, v[1].s1, v[2].s1, v[3].s1),
                        (TYPE4)(v[0].s2, v[1].s2, v[2].s2, v[3].s2), (TYPE4)(v[0].s3, v[1].s3, v[2].s3, v[3].s3)};
    for (int j = 0; j < 4 && col + j < x_cols; j++)  // x^T's row col + j, columns row0..row0+count
        D4ToArray(x_batch_t + (col + j) * ld + row0, t[j], 0, count);
}
