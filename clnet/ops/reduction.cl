// Reductions over sample axes (ops/reduction.py): sum, mean, max, min, argmax, argmin. One work-item per output
// element walks the elements it reduces; the batch axis is never reduced, so every output row
// reads its own input row.
//
// Geometry: the input's sample axes, collapsed (neighbours both kept or both reduced are one),
// GEOMETRY ints per axis: extent, input stride, output stride (0 for a reduced axis).
#define GEOMETRY 3
#define EXTENT(k) dims[GEOMETRY * (k)]
#define IN_STRIDE(k) dims[GEOMETRY * (k) + 1]
#define OUT_STRIDE(k) dims[GEOMETRY * (k) + 2]

#define REDUCE_SUM 0
#define REDUCE_MEAN 1
#define REDUCE_MAX 2
#define REDUCE_MIN 3
#define REDUCE_ARGMAX 4
#define REDUCE_ARGMIN 5

// y (rows, out_width) and, for max and min, ties (rows, out_width): how many elements equal the
// extreme, among which the backward pass shares the gradient (as TensorFlow's and PyTorch's amax).
// argmax and argmin give the row-major index among the reduced elements of the first extreme,
// as numpy's, as a float (the graph's type); they have no gradient.
__kernel void Reduce(const int op, __global const TYPE *x, __global TYPE *y, __global TYPE *ties,
                     __global const int *dims, const int axes, const int in_width, const int out_width,
                     const int reduced, const int total)
{
    const int i = get_global_id(0);  // i < rows * out_width
    if (i >= total)
        return;
    const int row = i / out_width;
    int j = i - row * out_width;
    long base = (long)row * in_width;
    for (int k = axes - 1; k >= 0; k--) {  // the kept axes locate the output element
        if (OUT_STRIDE(k) == 0)
            continue;
        const int e = j % EXTENT(k);
        j /= EXTENT(k);
        base += e * IN_STRIDE(k);
    }
    TYPE acc = op == REDUCE_MAX || op == REDUCE_ARGMAX ? -INFINITY
             : op == REDUCE_MIN || op == REDUCE_ARGMIN ? INFINITY : 0;
    TYPE count = 0;  // ties, or the extreme's index
    for (int m = 0; m < reduced; m++) {  // the reduced axes walk its elements
        long p = base;
        int q = m;
        for (int k = axes - 1; k >= 0; k--) {
            if (OUT_STRIDE(k) != 0)
                continue;
            const int e = q % EXTENT(k);
            q /= EXTENT(k);
            p += e * IN_STRIDE(k);
        }
        const TYPE v = x[p];
        if (op == REDUCE_SUM || op == REDUCE_MEAN) {
            acc += v;
        } else if (op >= REDUCE_ARGMAX) {
            if (m == 0 || (op == REDUCE_ARGMAX ? v > acc : v < acc)) {
                acc = v;
                count = m;
            }
        } else if (v == acc) {
            count += 1;
        } else if (op == REDUCE_MAX ? v > acc : v < acc) {
            acc = v;
            count = 1;
        }
    }
    y[i] = op == REDUCE_MEAN ? acc / reduced : op >= REDUCE_ARGMAX ? count : acc;
    if (op == REDUCE_MAX || op == REDUCE_MIN)
        ties[i] = count;
}

// dL/dx (rows, in_width): each element's output's gradient, over `reduced` for a mean, or shared
// among the ties for max and min (0 for the elements that are not the extreme).
__kernel void ReduceGradient(const int op, __global const TYPE *x, __global const TYPE *y,
                             __global const TYPE *ties, __global const TYPE *grad, __global TYPE *dx,
                             __global const int *dims, const int axes, const int in_width, const int out_width,
                             const int reduced, const int total)
{
    const int i = get_global_id(0);  // i < rows * in_width
    if (i >= total)
        return;
    const int row = i / in_width;
    int j = i - row * in_width;
    long o = (long)row * out_width;
    for (int k = axes - 1; k >= 0; k--) {
        const int e = j % EXTENT(k);
        j /= EXTENT(k);
        o += e * OUT_STRIDE(k);
    }
    const TYPE g = grad[o];
    if (op == REDUCE_SUM)
        dx[i] = g;
    else if (op == REDUCE_MEAN)
        dx[i] = g / reduced;
    else
        dx[i] = x[i] == y[o] ? g / ties[o] : 0;
}
