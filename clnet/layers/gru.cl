// GRU with reset_after=True (Keras's default, CuDNN's form), gate order z, r, h in blocks of
// `units` columns (cols = 3 units), input bias b_x = bias[0] and recurrent bias b_h = bias[1]:
//   u = h_{s-1} U + b_h,  z = g(x W_z + b_xz + u_z),  r = g(x W_r + b_xr + u_r),
//   h~ = f(x W_h + b_xh + r u_h),  h_s = z h_{s-1} + (1 - z) h~
// (f the activation, g the recurrent activation). FeedForwardRecurrentInput (recurrent.cl) has
// put x W + b_x in `pre`; each step completes it in place and keeps u_h, which the backward pass
// needs. One launch per step, a work-item per (unit, RB batch rows).

__kernel void FeedForwardGRU(__global TYPE *pre,              // z, (rows, steps, 3 units)
                             __global const TYPE *recurrent,  // U, (units, 3 units)
                             __global const TYPE *bias,       // (2, 3 units), read when use_bias
                             __global TYPE *states,           // h, (rows, steps, units)
                             __global TYPE *candidates,       // u_h, (rows, steps, units)
                             __global TYPE *last,             // h of the last step, (rows, units)
                             const int rows, const int s, const int steps, const int units, const int write_last,
                             const int use_bias, const TYPE a, const TYPE b, const TYPE ra, const TYPE rb)
{
    const int j = get_global_id(0), row0 = get_global_id(1) * RB;
    if (j >= units)
        return;
    const int cols = 3 * units;
    TYPE u[3][RB];
    for (int g = 0; g < 3; g++)
        RecurrentProducts(states, recurrent, row0, rows, s, steps, units, g * units + j, cols, u[g]);
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        if (row0 + i >= rows)
            break;
        const int row = row0 + i, k = (row * steps + s) * units + j;
        __global TYPE *z = pre + (row * steps + s) * cols + j;
        for (int g = 0; g < 3; g++)
            u[g][i] += use_bias ? bias[cols + g * units + j] : 0;
        z[0] += u[0][i];
        z[units] += u[1][i];
        z[2 * units] += RACT_FORWARD(z[units], ra, rb) * u[2][i];
        const TYPE gz = RACT_FORWARD(z[0], ra, rb);
        const TYPE h = gz * (s ? states[k - units] : (TYPE)0) + (1 - gz) * ACT_FORWARD(z[2 * units], a, b);
        candidates[k] = u[2][i];
        states[k] = h;
        if (write_last)
            last[row * units + j] = h;
    }
}

// Step s of backpropagation through time. h_{s-1} reaches h_s directly (through z h_{s-1}) and
// through U: `carry` holds dL/dh_s z_s for step s - 1, written by this same work-item. The
// recurrent deltas differ from the input ones in the candidate block only: u_h is scaled by r.
__kernel void CalcHiddenGradientGRU(__global const TYPE *output_gr,   // (rows, steps, units) or (rows, units)
                                    __global const TYPE *pre,         // z, (rows, steps, 3 units)
                                    __global const TYPE *states,      // h, (rows, steps, units)
                                    __global const TYPE *candidates,  // u_h, (rows, steps, units)
                                    __global const TYPE *recurrent,   // U, (units, 3 units)
                                    __global TYPE *delta,             // dL/d(x W + b_x), panels (see recurrent.cl)
                                    __global TYPE *delta_rec,         // dL/du, panels
                                    __global TYPE *step_delta,        // (2, capacity, 3 units)
                                    __global TYPE *carry,             // dL/dh_s z_s, (rows, units)
                                    const int rows, const int s, const int steps, const int units,
                                    const int sequences, const int capacity,
                                    const TYPE a, const TYPE b, const TYPE ra, const TYPE rb)
{
    const int j = get_global_id(0), row0 = get_global_id(1) * RB;
    if (j >= units)
        return;
    const int cols = 3 * units;
    TYPE dh[RB];
    StepOutputGradients(output_gr, step_delta, recurrent, row0, rows, s, j, steps, units, cols, sequences, capacity, dh);
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        if (row0 + i >= rows)
            break;
        const int row = row0 + i, k = (row * steps + s) * units + j, p = (row * steps + s) * cols + j;
        const TYPE dhs = dh[i] + (s < steps - 1 ? carry[row * units + j] : (TYPE)0);
        const TYPE zz = pre[p], zr = pre[p + units], zh = pre[p + 2 * units];
        const TYPE gz = RACT_FORWARD(zz, ra, rb), gr = RACT_FORWARD(zr, ra, rb), gh = ACT_FORWARD(zh, a, b);
        const TYPE h_prev = s ? states[k - units] : (TYPE)0;
        carry[row * units + j] = dhs * gz;
        const TYPE dz = dhs * (h_prev - gh) * RACT_DERIVATIVE(gz, zz, ra, rb);
        const TYPE dc = dhs * (1 - gz) * ACT_DERIVATIVE(gh, zh, a, b);
        const TYPE dr = dc * candidates[k] * RACT_DERIVATIVE(gr, zr, ra, rb);
        const TYPE d[3] = {dz, dr, dc}, d_rec[3] = {dz, dr, dc * gr};
        for (int g = 0; g < 3; g++) {
            StoreDelta(delta, d[g], row, s, g * units + j, steps, capacity);
            StoreDelta(delta_rec, d_rec[g], row, s, g * units + j, steps, capacity);
            StoreStepDelta(step_delta, d_rec[g], row, s, g * units + j, cols, capacity);
        }
    }
}
