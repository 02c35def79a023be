// SimpleRNN: h_s = f(x_s W + b + h_{s-1} U). FeedForwardRecurrentInput (recurrent.cl) has put
// x_s W + b in `pre`; each step adds h_{s-1} U in place, keeping z for the backward pass. One
// launch per step, a work-item per (unit, RB batch rows).

__kernel void FeedForwardSimpleRNN(__global TYPE *pre,              // z, (rows, steps, units)
                                   __global const TYPE *recurrent,  // U, (units, units)
                                   __global TYPE *states,           // h, (rows, steps, units)
                                   __global TYPE *last,             // h of the last step, (rows, units)
                                   const int rows, const int s, const int steps, const int units,
                                   const int write_last, const TYPE a, const TYPE b)
{
    const int j = get_global_id(0), row0 = get_global_id(1) * RB;
    if (j >= units)
        return;
    TYPE u[RB];
    RecurrentProducts(states, recurrent, row0, rows, s, steps, units, j, units, u);
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        if (row0 + i >= rows)
            break;
        const int row = row0 + i, k = (row * steps + s) * units + j;
        const TYPE z = pre[k] + u[i];
        const TYPE h = ACT_FORWARD(z, a, b);
        pre[k] = z;
        states[k] = h;
        if (write_last)
            last[row * units + j] = h;
    }
}

// Step s of backpropagation through time (s = steps - 1 down to 0): delta_s = dL/dh_s f'(z_s).
__kernel void CalcHiddenGradientSimpleRNN(__global const TYPE *output_gr,  // (rows, steps, units) or (rows, units)
                                          __global const TYPE *pre,        // z, (rows, steps, units)
                                          __global const TYPE *states,     // h, (rows, steps, units)
                                          __global const TYPE *recurrent,  // U, (units, units)
                                          __global TYPE *delta,            // dL/dz, panels (see recurrent.cl)
                                          __global TYPE *step_delta,       // (2, capacity, units)
                                          const int rows, const int s, const int steps, const int units,
                                          const int sequences, const int capacity, const TYPE a, const TYPE b)
{
    const int j = get_global_id(0), row0 = get_global_id(1) * RB;
    if (j >= units)
        return;
    TYPE dh[RB];
    StepOutputGradients(output_gr, step_delta, recurrent, row0, rows, s, j, steps, units, units, sequences, capacity, dh);
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        if (row0 + i >= rows)
            break;
        const int row = row0 + i, k = (row * steps + s) * units + j;
        const TYPE dz = dh[i] * ACT_DERIVATIVE(states[k], pre[k], a, b);
        StoreDelta(delta, dz, row, s, j, steps, capacity);
        StoreStepDelta(step_delta, dz, row, s, j, units, capacity);
    }
}
