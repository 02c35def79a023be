// Indexing ops (ops/indexing.py): basic slices of the sample axes (x[:, 1:], x[..., 0], split)
// and take along one axis with constant indices.

// Slice geometry, SLICE ints per input sample axis (collapsed: an axis taken whole merges with the
// one before it): extent, start, length, input stride, output stride (0 for an axis an integer
// index removes, whose length is 1).
#define SLICE 5
#define EXTENT(k) dims[SLICE * (k)]
#define START(k) dims[SLICE * (k) + 1]
#define LENGTH(k) dims[SLICE * (k) + 2]
#define IN_STRIDE(k) dims[SLICE * (k) + 3]
#define OUT_STRIDE(k) dims[SLICE * (k) + 4]

// y (rows, out_width): each output element's input element.
__kernel void Slice(__global const TYPE *x, __global TYPE *y, __global const int *dims, const int axes,
                    const int in_width, const int out_width, const int total)
{
    const int i = get_global_id(0);  // i < rows * out_width
    if (i >= total)
        return;
    const int row = i / out_width;
    int j = i - row * out_width;
    long p = (long)row * in_width;
    for (int k = axes - 1; k >= 0; k--) {
        const int e = j % LENGTH(k);
        j /= LENGTH(k);
        p += (START(k) + e) * IN_STRIDE(k);
    }
    y[i] = x[p];
}

// dL/dx (rows, in_width): the output's gradient inside the slice, 0 outside it; one pass, with no
// separate zeroing of the buffer.
__kernel void SliceGradient(__global const TYPE *grad, __global TYPE *dx, __global const int *dims, const int axes,
                            const int in_width, const int out_width, const int total)
{
    const int i = get_global_id(0);  // i < rows * in_width
    if (i >= total)
        return;
    const int row = i / in_width;
    int j = i - row * in_width;
    long o = (long)row * out_width;
    int inside = 1;
    for (int k = axes - 1; k >= 0; k--) {
        const int e = j % EXTENT(k) - START(k);
        j /= EXTENT(k);
        inside &= e >= 0 && e < LENGTH(k);
        o += e * OUT_STRIDE(k);
    }
    dx[i] = inside ? grad[o] : 0;
}

// take: x (rows, outer, n, inner) -> y (rows, outer, count, inner), y[r, a, p, b] = x[r, a, indices[p], b].
__kernel void Take(__global const TYPE *x, __global TYPE *y, __global const int *indices, const int n,
                   const int count, const int inner, const int total)
{
    const int i = get_global_id(0);  // i < rows * outer * count * inner
    if (i >= total)
        return;
    const int b = i % inner, p = (i / inner) % count, line = i / (inner * count);  // line: (row, a)
    y[i] = x[((long)line * n + indices[p]) * inner + b];
}

// dL/dx (rows, outer, n, inner): for each element, the sum of the gradients of the output elements
// that took it (an index may appear several times, or not at all: 0).
__kernel void TakeGradient(__global const TYPE *grad, __global TYPE *dx, __global const int *indices, const int n,
                           const int count, const int inner, const int total)
{
    const int i = get_global_id(0);  // i < rows * outer * n * inner
    if (i >= total)
        return;
    const int b = i % inner, q = (i / inner) % n, line = i / (inner * n);
    TYPE sum = 0;
    for (int p = 0; p < count; p++)
        if (indices[p] == q)
            sum += grad[((long)line * count + p) * inner + b];
    dx[i] = sum;
}
