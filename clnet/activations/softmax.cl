// Row-wise softmax, one work-group per row. The work-group (a power of two, at most LOCAL_SIZE)
// strides over the row, then reduces in local memory (group_reduce): first the maximum, which
// is subtracted before exp so that large logits cannot overflow, then the sum of exponentials.

__kernel void SoftMaxActivation(__global const TYPE *inputs,   // (rows, cols)
                                __global TYPE *outputs,        // (rows, cols)
                                const int cols)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int lid = get_local_id(0), step = get_local_size(0);
    const __global TYPE *x = inputs + get_group_id(0) * cols;
    __global TYPE *y = outputs + get_group_id(0) * cols;

    TYPE m = -INFINITY;
    for (int j = lid; j < cols; j += step)
        m = fmax(m, x[j]);
    m = group_reduce(scratch, m, 1);

    TYPE s = 0;
    for (int j = lid; j < cols; j += step) {
        const TYPE e = exp(x[j] - m);
        y[j] = e;
        s += e;
    }
    s = group_reduce(scratch, s, 0);
    for (int j = lid; j < cols; j += step)
        y[j] /= s;
}

// dL/dx_i = y_i (dL/dy_i - sum_j y_j dL/dy_j): the softmax Jacobian applied to the row's gradient.
__kernel void SoftMaxDerivative(__global const TYPE *outputs,    // y, (rows, cols)
                                __global const TYPE *output_gr,  // dL/dy, (rows, cols)
                                __global TYPE *input_gr,         // dL/dx, (rows, cols)
                                const int cols)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int lid = get_local_id(0), step = get_local_size(0);
    const int offset = get_group_id(0) * cols;

    TYPE s = 0;
    for (int j = lid; j < cols; j += step)
        s += outputs[offset + j] * output_gr[offset + j];
    s = group_reduce(scratch, s, 0);
    for (int j = lid; j < cols; j += step)
        input_gr[offset + j] = outputs[offset + j] * (output_gr[offset + j] - s);
}

// The Softmax layer along an axis other than the last: the batch seen as (outer, n, inner), the
// axis of n elements `inner` apart. One work-item per (outer, inner) column, which walks its n
// elements (no reduction across work-items: the axes a model normalises that way are short).
__kernel void SoftMaxAxisActivation(__global const TYPE *inputs,   // (outer, n, inner)
                                    __global TYPE *outputs,        // (outer, n, inner)
                                    const int n, const int inner, const int columns)
{
    const int c = get_global_id(0);  // c < columns = outer * inner
    if (c >= columns)
        return;
    const long first = (long)(c / inner) * n * inner + c % inner;
    TYPE m = -INFINITY;
    for (int k = 0; k < n; k++)
        m = fmax(m, inputs[first + (long)k * inner]);
    TYPE s = 0;
    for (int k = 0; k < n; k++) {
        const TYPE e = exp(inputs[first + (long)k * inner] - m);
        outputs[first + (long)k * inner] = e;
        s += e;
    }
    for (int k = 0; k < n; k++)
        outputs[first + (long)k * inner] /= s;
}

// dL/dx_k = y_k (dL/dy_k - sum_j y_j dL/dy_j) along the column, as SoftMaxDerivative along a row.
__kernel void SoftMaxAxisDerivative(__global const TYPE *outputs,    // y, (outer, n, inner)
                                    __global const TYPE *output_gr,  // dL/dy
                                    __global TYPE *input_gr,         // dL/dx
                                    const int n, const int inner, const int columns)
{
    const int c = get_global_id(0);
    if (c >= columns)
        return;
    const long first = (long)(c / inner) * n * inner + c % inner;
    TYPE s = 0;
    for (int k = 0; k < n; k++)
        s += outputs[first + (long)k * inner] * output_gr[first + (long)k * inner];
    for (int k = 0; k < n; k++) {
        const long i = first + (long)k * inner;
        input_gr[i] = outputs[i] * (output_gr[i] - s);
    }
}
