// LSTM, Keras's gate order i, f, c, o in blocks of `units` columns (cols = 4 units):
//   i = g(z_i), f = g(z_f), c~ = f(z_c), o = g(z_o), with z = x W + b + h_{s-1} U,
//   c_s = f c_{s-1} + i c~,  h_s = o f(c_s)
// (f the activation, g the recurrent activation). FeedForwardRecurrentInput (recurrent.cl) has
// put x W + b in `pre`; each step adds h_{s-1} U in place. One launch per step, a work-item per
// (unit, RB batch rows), which computes all four gates of its unit.

__kernel void FeedForwardLSTM(__global TYPE *pre,              // z, (rows, steps, 4 units)
                              __global const TYPE *recurrent,  // U, (units, 4 units)
                              __global TYPE *states,           // h, (rows, steps, units)
                              __global TYPE *cells,            // c, (rows, steps, units)
                              __global TYPE *last,             // h of the last step, (rows, units)
                              const int rows, const int s, const int steps, const int units, const int write_last,
                              const TYPE a, const TYPE b, const TYPE ra, const TYPE rb)
{
    const int j = get_global_id(0), row0 = get_global_id(1) * RB;
    if (j >= units)
        return;
    const int cols = 4 * units;
    TYPE u[4][RB];
    for (int g = 0; g < 4; g++)
        RecurrentProducts(states, recurrent, row0, rows, s, steps, units, g * units + j, cols, u[g]);
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        if (row0 + i >= rows)
            break;
        const int row = row0 + i, k = (row * steps + s) * units + j;
        __global TYPE *z = pre + (row * steps + s) * cols + j;
        for (int g = 0; g < 4; g++)
            z[g * units] += u[g][i];
        const TYPE c_prev = s ? cells[k - units] : (TYPE)0;
        const TYPE c = RACT_FORWARD(z[units], ra, rb) * c_prev
                       + RACT_FORWARD(z[0], ra, rb) * ACT_FORWARD(z[2 * units], a, b);
        const TYPE h = RACT_FORWARD(z[3 * units], ra, rb) * ACT_FORWARD(c, a, b);
        cells[k] = c;
        states[k] = h;
        if (write_last)
            last[row * units + j] = h;
    }
}

// Step s of backpropagation through time. dL/dc_s = dL/dh_s o f'(c_s) + dL/dc_{s+1} f_{s+1};
// `carry` holds the second term, written by this same work-item at step s + 1.
__kernel void CalcHiddenGradientLSTM(__global const TYPE *output_gr,  // (rows, steps, units) or (rows, units)
                                     __global const TYPE *pre,        // z, (rows, steps, 4 units)
                                     __global const TYPE *cells,      // c, (rows, steps, units)
                                     __global const TYPE *recurrent,  // U, (units, 4 units)
                                     __global TYPE *delta,            // dL/dz, panels (see recurrent.cl)
                                     __global TYPE *step_delta,       // (2, capacity, 4 units)
                                     __global TYPE *carry,            // dL/dc_s f_s, (rows, units)
                                     const int rows, const int s, const int steps, const int units,
                                     const int sequences, const int capacity,
                                     const TYPE a, const TYPE b, const TYPE ra, const TYPE rb)
{
    const int j = get_global_id(0), row0 = get_global_id(1) * RB;
    if (j >= units)
        return;
    const int cols = 4 * units;
    TYPE dh[RB];
    StepOutputGradients(output_gr, step_delta, recurrent, row0, rows, s, j, steps, units, cols, sequences, capacity, dh);
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        if (row0 + i >= rows)
            break;
        const int row = row0 + i, k = (row * steps + s) * units + j;
        __global const TYPE *z = pre + (row * steps + s) * cols + j;
        const TYPE zi = z[0], zf = z[units], zc = z[2 * units], zo = z[3 * units];
        const TYPE gi = RACT_FORWARD(zi, ra, rb), gf = RACT_FORWARD(zf, ra, rb);
        const TYPE gc = ACT_FORWARD(zc, a, b), go = RACT_FORWARD(zo, ra, rb);
        const TYPE c = cells[k], c_prev = s ? cells[k - units] : (TYPE)0, fc = ACT_FORWARD(c, a, b);
        const TYPE dc = dh[i] * go * ACT_DERIVATIVE(fc, c, a, b) + (s < steps - 1 ? carry[row * units + j] : (TYPE)0);
        carry[row * units + j] = dc * gf;
        const TYPE d[4] = {dc * gc * RACT_DERIVATIVE(gi, zi, ra, rb), dc * c_prev * RACT_DERIVATIVE(gf, zf, ra, rb),
                           dc * gi * ACT_DERIVATIVE(gc, zc, a, b), dh[i] * fc * RACT_DERIVATIVE(go, zo, ra, rb)};
        for (int g = 0; g < 4; g++) {
            StoreDelta(delta, d[g], row, s, g * units + j, steps, capacity);
            StoreStepDelta(step_delta, d[g], row, s, g * units + j, cols, capacity);
        }
    }
}
