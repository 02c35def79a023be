// Merge layers (Add, Multiply, Concatenate). The graph engine uses the same kernels to sum the
// gradients of a tensor read by several layers (Sum) and to split a multi-input batch (CopyBlock).

// out = a + b over `total` elements, four per work-item; out may be a or b. vec_type_hint: Intel's
// CPU compiler otherwise vectorizes across work-items (see recurrent.cl); with it the tiny GPT's
// gradient sums take far less time there (benchmarks/RESULTS.md, vec_type_hint on Intel's runtime).
__kernel __attribute__((vec_type_hint(TYPE4)))
void Sum(__global const TYPE *a, __global const TYPE *b, __global TYPE *out, const int total)
{
    const int i = get_global_id(0) * 4;
    D4ToArray(out, ToVect4(a, i, total) + ToVect4(b, i, total), i, total);
}

// out = a * b over `total` elements; a product of n inputs, or its gradient, is a chain of these.
__kernel __attribute__((vec_type_hint(TYPE4)))
void Product(__global const TYPE *a, __global const TYPE *b, __global TYPE *out, const int total)
{
    const int i = get_global_id(0) * 4;
    D4ToArray(out, ToVect4(a, i, total) * ToVect4(b, i, total), i, total);
}

// A (rows, width) block from one row-major matrix into another: dst[r, dst_offset + c] =
// src[r, src_offset + c]. Concatenation writes each input's block into the output's columns,
// its gradient reads them back out; rows are (batch x the axes before the concatenation axis).
__kernel void CopyBlock(__global const TYPE *src, const int src_stride, const int src_offset,
                        __global TYPE *dst, const int dst_stride, const int dst_offset, const int width)
{
    const int c = get_global_id(0), r = get_global_id(1);
    if (c < width)
        dst[(long)r * dst_stride + dst_offset + c] = src[(long)r * src_stride + src_offset + c];
}
