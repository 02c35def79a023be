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
