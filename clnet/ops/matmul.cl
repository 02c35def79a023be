// matmul (ops/matmul.py): c = a @ b over matrices (m, k) @ (k, n), batched over the leading axes
// with numpy's broadcasting; either operand may be a constant (row stride 0). A plain loop per
// output element: these are the small products of models written with ops (attention scores
// over a few steps, a projection by a constant); a layer's large products are Dense's, tuned.
//
// Geometry: the batch axes (collapsed), BATCH ints each: extent, strides of a, b and c there (in
// elements; 0 where the operand is broadcast along the axis).
#define BATCH 4
#define EXTENT(k) dims[BATCH * (k)]
#define A_STRIDE(k) dims[BATCH * (k) + 1]
#define B_STRIDE(k) dims[BATCH * (k) + 2]
#define C_STRIDE(k) dims[BATCH * (k) + 3]

// c (rows, batches, m, n).
__kernel void MatMul(__global const TYPE *a, __global const TYPE *b, __global TYPE *c, __global const int *dims,
                     const int axes, const int batches, const int m, const int k, const int n, const int a_row,
                     const int b_row, const int total)
{
    const int i = get_global_id(0);  // i < rows * batches * m * n
    if (i >= total)
        return;
    const int col = i % n, line = (i / n) % m, t = i / (m * n), row = t / batches;
    int j = t - row * batches;
    long pa = (long)row * a_row, pb = (long)row * b_row;
    for (int x = axes - 1; x >= 0; x--) {
        const int e = j % EXTENT(x);
        j /= EXTENT(x);
        pa += e * A_STRIDE(x);
        pb += e * B_STRIDE(x);
    }
    const __global TYPE *ar = a + pa + (long)line * k, *bc = b + pb + col;
    TYPE sum = 0;
    for (int q = 0; q < k; q++)
        sum += ar[q] * bc[(long)q * n];
    c[i] = sum;
}

// Where operand `own` (0: a, 1: b) is broadcast along batch axis x: its stride there is 0.
#define OWN_STRIDE(x) (own == 0 ? A_STRIDE(x) : B_STRIDE(x))

// dL/da (rows, a's batches, m, k) = dL/dc @ b^T, summed over the batch axes a is broadcast along.
// dL/db (rows, b's batches, k, n) = a^T @ dL/dc, likewise. `own` says which; `own_batches` is the
// number of its own batch matrices, `summed` the product of the axes it is broadcast along. An
// operand without a batch axis (a weight: row stride 0) has one row, summed over the product's
// `rows_summed` rows (1 for a batch operand).
__kernel void MatMulGradient(const int own, __global const TYPE *a, __global const TYPE *b,
                             __global const TYPE *grad, __global TYPE *d, __global const int *dims, const int axes,
                             const int batches, const int own_batches, const int summed, const int m, const int k,
                             const int n, const int a_row, const int b_row, const int rows_summed, const int total)
{
    const int i = get_global_id(0);  // i < rows * own_batches * (m * k or k * n)
    if (i >= total)
        return;
    const int cols = own == 0 ? k : n, lines = own == 0 ? m : k;
    const int col = i % cols, line = (i / cols) % lines, t = i / (lines * cols), row = t / own_batches;
    int j = t - row * own_batches;
    long pa = (long)row * a_row, pb = (long)row * b_row, pc = (long)row * batches * m * n;
    for (int x = axes - 1; x >= 0; x--) {
        if (OWN_STRIDE(x) == 0)
            continue;
        const int e = j % EXTENT(x);
        j /= EXTENT(x);
        pa += e * A_STRIDE(x);
        pb += e * B_STRIDE(x);
        pc += e * C_STRIDE(x);
    }
    TYPE sum = 0;
    for (int s = 0; s < summed * rows_summed; s++) {
        const int over = s / summed;  // the row, for an operand summed over rows
        long qa = pa + (long)over * a_row, qb = pb + (long)over * b_row, qc = pc + (long)over * batches * m * n;
        int r = s - over * summed;
        for (int x = axes - 1; x >= 0; x--) {
            if (OWN_STRIDE(x) != 0)
                continue;
            const int e = r % EXTENT(x);
            r /= EXTENT(x);
            qa += e * A_STRIDE(x);
            qb += e * B_STRIDE(x);
            qc += e * C_STRIDE(x);
        }
        if (own == 0) {  // d[line, col] over (m, k): sum over n of grad[line, p] b[col, p]
            for (int p = 0; p < n; p++)
                sum += grad[qc + (long)line * n + p] * b[qb + (long)col * n + p];
        } else {         // d[line, col] over (k, n): sum over m of a[p, line] grad[p, col]
            for (int p = 0; p < m; p++)
                sum += a[qa + (long)p * k + line] * grad[qc + (long)p * n + col];
        }
    }
    d[i] = sum;
}
