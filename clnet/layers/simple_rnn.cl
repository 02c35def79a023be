// SimpleRNN: h_s = f(x_s W + b + h_{s-1} U). FeedForwardRecurrentInput (recurrent.cl) has put
// x_s W + b in `pre`; each step adds h_{s-1} U in place, keeping z for the backward pass. One
// launch per step, a work-item per (VW units, RB batch rows; see recurrent.cl).

__kernel void FeedForwardSimpleRNN(__global TYPE *pre,              // z, (rows, steps, units)
                                   __global const TYPE *recurrent,  // U, (units, units)
                                   __global TYPE *sums,             // h_{s-1} U, (capacity, units)
                                   __global TYPE *states,           // h, (rows, steps, units)
                                   __global TYPE *last,             // h of the last step, (rows, units)
                                   const int rows, const int s, const int steps, const int units,
                                   const int write_last, const TYPE a, const TYPE b)
{
    const int j0 = get_global_id(0) / GATES * VW, row0 = get_global_id(1) * RB;
    if (j0 >= units)
        return;
    RecurrentProducts(states, recurrent, sums, row0, rows, s, steps, units, j0, units);
    const int width = units - j0;
    for (int i = get_local_id(0); i < RB && row0 + i < rows; i += GATES) {
        const int row = row0 + i, k = (row * steps + s) * units + j0;
        const VEC z = LoadBlock(pre + k, width) + LoadBlock(sums + row * units + j0, width);
        const VEC h = ACT_FORWARD_V(z, a, b);
        StoreBlock(z, pre + k, width);
        StoreBlock(h, states + k, width);
        if (write_last)
            StoreBlock(h, last + row * units + j0, width);
    }
}

// Step s of backpropagation through time (s = steps - 1 down to 0): delta_s = dL/dh_s f'(z_s).
__kernel void CalcHiddenGradientSimpleRNN(__global const TYPE *output_gr,  // (rows, steps, units) or (rows, units)
                                          __global const TYPE *pre,        // z, (rows, steps, units)
                                          __global const TYPE *states,     // h, (rows, steps, units)
                                          __global const TYPE *transposed, // U^T, (units, units)
                                          __global TYPE *sums,             // dL/dh_s, (capacity, units)
                                          __global TYPE *delta,            // dL/dz, panels (see recurrent.cl)
                                          __global TYPE *step_delta,       // (2, capacity, units)
                                          const int rows, const int s, const int steps, const int units,
                                          const int sequences, const int capacity, const TYPE a, const TYPE b)
{
    const int j0 = get_global_id(0) * VW, row0 = get_global_id(1) * BB;
    if (j0 >= units)
        return;
    StepOutputGradients(output_gr, step_delta, transposed, sums, row0, rows, s, j0, steps, units, units, sequences,
                        capacity);
    const int width = units - j0;
    for (int i = 0; i < BB && row0 + i < rows; i++) {
        const int row = row0 + i, k = (row * steps + s) * units + j0;
        const VEC dz = LoadBlock(sums + row * units + j0, width)
                       * ACT_DERIVATIVE_V(LoadBlock(states + k, width), LoadBlock(pre + k, width), a, b);
        StoreDeltaBlock(delta, dz, row, s, j0, width, steps, capacity);
        StoreStepDeltaBlock(step_delta, dz, row, s, j0, width, units, capacity);
    }
}
