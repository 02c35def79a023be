// What SimpleRNN, LSTM and GRU share: the products over all time steps at once, and the part
// of a time step's backward pass that goes through the recurrent kernel.
//
// A sequence layer with G gates of `units` columns each has cols = G * units columns. Rows are
// (batch row, step) pairs, r = row * steps + s, with s the step in processing order: with
// go_backwards (reverse = 1) step s reads input time steps - 1 - s, as Keras feeds the reversed
// sequence. Only the products with the input (InputRow) know about that; the time loop and every
// per-step buffer run in processing order.
//
// ACT (-D ACT=hyperbolic_tangent) is the layer's activation, RACT its recurrent activation (the
// gates' sigmoid); both are elementwise families of clnet/activations.

#define RACT_FORWARD CAT(RACT, _forward)
#define RACT_DERIVATIVE CAT(RACT, _derivative)

// The input row (batch row, time step) that processing row r reads.
inline int InputRow(const int r, const int steps, const int reverse)
{
    if (!reverse)
        return r;
    const int s = r % steps;
    return r - s + steps - 1 - s;
}

// z = x W + b for every (row, step) of the batch at once, before the time loop: the recurrent
// steps then only add h_{t-1} U. One work-item per (column, processing row).
__kernel void FeedForwardRecurrentInput(__global const TYPE *inputs,  // (rows, steps, n_in)
                                        __global const TYPE *weights, // W, (n_in, cols)
                                        __global const TYPE *bias,    // (cols,), read when use_bias
                                        __global TYPE *pre,           // (rows, steps, cols)
                                        const int cols, const int n_in, const int steps,
                                        const int reverse, const int use_bias)
{
    const int c = get_global_id(0), r = get_global_id(1);
    if (c >= cols)
        return;
    __global const TYPE *x = inputs + InputRow(r, steps, reverse) * n_in;
    TYPE z = use_bias ? bias[c] : 0;
    for (int d = 0; d < n_in; d++)
        z += x[d] * weights[d * cols + c];
    pre[r * cols + c] = z;
}

// sum over k of h_{t-1}[k] U[k, c]: a gate's recurrent input for one (row, unit); 0 at the first
// step, whose state is zeros. `h_prev` is the row's state before step s.
inline TYPE RecurrentProduct(__global const TYPE *h_prev, __global const TYPE *recurrent, const int c,
                             const int cols, const int units)
{
    TYPE z = 0;
    if (h_prev)
        for (int k = 0; k < units; k++)
            z += h_prev[k] * recurrent[k * cols + c];
    return z;
}

// dL/dh_s for (row, unit j): the output gradient (every step's with return_sequences, else the
// last step's) plus, except at the last step, step s + 1's recurrent deltas through U:
// sum over c of delta_rec[s + 1, c] U[j, c].
inline TYPE StepOutputGradient(__global const TYPE *output_gr,  // (rows, steps, units) or (rows, units)
                               __global const TYPE *delta_rec,  // (rows, steps, cols)
                               __global const TYPE *recurrent,  // (units, cols)
                               const int row, const int s, const int j, const int steps, const int units,
                               const int cols, const int sequences)
{
    TYPE dh = sequences ? output_gr[(row * steps + s) * units + j]
                        : (s == steps - 1 ? output_gr[row * units + j] : (TYPE)0);
    if (s < steps - 1) {
        __global const TYPE *d = delta_rec + (row * steps + s + 1) * cols;
        __global const TYPE *w = recurrent + j * cols;
        for (int c = 0; c < cols; c++)
            dh += d[c] * w[c];
    }
    return dh;
}

// dL/dW = sum over (row, step) of x^T delta, and (d == n_in) the input bias's gradient, sum of
// delta. One work-item per (column, kernel row).
__kernel void CalcDeltaWeightsRecurrent(__global const TYPE *inputs,  // (rows, steps, n_in)
                                        __global const TYPE *delta,   // (rows, steps, cols)
                                        __global TYPE *kernel_gr,     // (n_in, cols)
                                        __global TYPE *bias_gr,       // (cols,), written when use_bias
                                        const int total, const int cols, const int n_in, const int steps,
                                        const int reverse, const int use_bias)
{
    const int c = get_global_id(0), d = get_global_id(1);
    if (c >= cols || (d == n_in && !use_bias))
        return;
    TYPE sum = 0;
    if (d == n_in) {
        for (int r = 0; r < total; r++)
            sum += delta[r * cols + c];
        bias_gr[c] = sum;
        return;
    }
    for (int r = 0; r < total; r++)
        sum += inputs[InputRow(r, steps, reverse) * n_in + d] * delta[r * cols + c];
    kernel_gr[d * cols + c] = sum;
}

// dL/dU = sum over (row, step > 0) of h_{s-1}^T delta_rec, and (k == units, with_bias: GRU's
// recurrent bias) sum of delta_rec into bias_gr[bias_offset + c]. One work-item per (column, row of U).
__kernel void CalcDeltaRecurrentWeights(__global const TYPE *states,     // h, (rows, steps, units)
                                        __global const TYPE *delta_rec,  // (rows, steps, cols)
                                        __global TYPE *recurrent_gr,     // (units, cols)
                                        __global TYPE *bias_gr,          // written when with_bias
                                        const int total, const int cols, const int units, const int steps,
                                        const int with_bias, const int bias_offset)
{
    const int c = get_global_id(0), k = get_global_id(1);
    if (c >= cols || (k == units && !with_bias))
        return;
    TYPE sum = 0;
    if (k == units) {
        for (int r = 0; r < total; r++)
            sum += delta_rec[r * cols + c];
        bias_gr[bias_offset + c] = sum;
        return;
    }
    for (int r = 0; r < total; r++)
        if (r % steps)  // h_{s-1} of the first step is the zero state
            sum += states[(r - 1) * units + k] * delta_rec[r * cols + c];
    recurrent_gr[k * cols + c] = sum;
}

// dL/dx = delta W^T, written to the input time step each processing row read. One work-item per
// (input feature, processing row).
__kernel void CalcHiddenGradientRecurrentInput(__global const TYPE *delta,   // (rows, steps, cols)
                                               __global const TYPE *weights, // W, (n_in, cols)
                                               __global TYPE *input_gr,      // (rows, steps, n_in)
                                               const int cols, const int n_in, const int steps, const int reverse)
{
    const int d = get_global_id(0), r = get_global_id(1);
    if (d >= n_in)
        return;
    __global const TYPE *g = delta + r * cols;
    __global const TYPE *w = weights + d * cols;
    TYPE sum = 0;
    for (int c = 0; c < cols; c++)
        sum += g[c] * w[c];
    input_gr[InputRow(r, steps, reverse) * n_in + d] = sum;
}
