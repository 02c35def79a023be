// SimpleRNN: h_s = f(x_s W + b + h_{s-1} U). FeedForwardRecurrentInput (recurrent.cl) has put
// x_s W + b in `pre`; each step adds h_{s-1} U in place, keeping z for the backward pass. One
// launch per step, one work-item per (unit, batch row).

__kernel void FeedForwardSimpleRNN(__global TYPE *pre,              // z, (rows, steps, units)
                                   __global const TYPE *recurrent,  // U, (units, units)
                                   __global TYPE *states,           // h, (rows, steps, units)
                                   __global TYPE *last,             // h of the last step, (rows, units)
                                   const int s, const int steps, const int units, const int write_last,
                                   const TYPE a, const TYPE b)
{
    const int j = get_global_id(0), row = get_global_id(1);
    if (j >= units)
        return;
    const int i = (row * steps + s) * units + j;
    __global const TYPE *h_prev = s ? states + (row * steps + s - 1) * units : 0;
    const TYPE z = pre[i] + RecurrentProduct(h_prev, recurrent, j, units, units);
    const TYPE h = ACT_FORWARD(z, a, b);
    pre[i] = z;
    states[i] = h;
    if (write_last)
        last[row * units + j] = h;
}

// Step s of backpropagation through time (s = steps - 1 down to 0): delta_s = dL/dh_s f'(z_s).
__kernel void CalcHiddenGradientSimpleRNN(__global const TYPE *output_gr,  // (rows, steps, units) or (rows, units)
                                          __global const TYPE *pre,        // z, (rows, steps, units)
                                          __global const TYPE *states,     // h, (rows, steps, units)
                                          __global const TYPE *recurrent,  // U, (units, units)
                                          __global TYPE *delta,            // dL/dz, (rows, steps, units)
                                          const int s, const int steps, const int units, const int sequences,
                                          const TYPE a, const TYPE b)
{
    const int j = get_global_id(0), row = get_global_id(1);
    if (j >= units)
        return;
    const int i = (row * steps + s) * units + j;
    const TYPE dh = StepOutputGradient(output_gr, delta, recurrent, row, s, j, steps, units, units, sequences);
    delta[i] = dh * ACT_DERIVATIVE(states[i], pre[i], a, b);
}
