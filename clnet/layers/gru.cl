// GRU with reset_after=True (Keras's default, CuDNN's form), gate order z, r, h in blocks of
// `units` columns (cols = 3 units), input bias b_x = bias[0] and recurrent bias b_h = bias[1]:
//   u = h_{s-1} U + b_h,  z = g(x W_z + b_xz + u_z),  r = g(x W_r + b_xr + u_r),
//   h~ = f(x W_h + b_xh + r u_h),  h_s = z h_{s-1} + (1 - z) h~
// (f the activation, g the recurrent activation). FeedForwardRecurrentInput (recurrent.cl) has
// put x W + b_x in `pre`; each step completes it in place and keeps u_h, which the backward pass
// needs. One launch per step, a work-item per (VW units, RB batch rows; see recurrent.cl).

__kernel void FeedForwardGRU(__global TYPE *pre,              // z, (rows, steps, 3 units)
                             __global const TYPE *recurrent,  // U, (units, 3 units)
                             __global const TYPE *bias,       // (2, 3 units), read when use_bias
                             __global TYPE *sums,             // h_{s-1} U, (capacity, 3 units)
                             __global TYPE *states,           // h, (rows, steps, units)
                             __global TYPE *candidates,       // u_h, (rows, steps, units)
                             __global TYPE *last,             // h of the last step, (rows, units)
                             const int rows, const int s, const int steps, const int units, const int write_last,
                             const int use_bias, const TYPE a, const TYPE b, const TYPE ra, const TYPE rb)
{
    const int j0 = get_global_id(0) / GATES * VW, row0 = get_global_id(1) * RB;
    if (j0 >= units)
        return;
    const int cols = 3 * units;
    RecurrentProducts(states, recurrent, sums, row0, rows, s, steps, units, j0, cols);
    const int width = units - j0;
    for (int i = get_local_id(0); i < RB && row0 + i < rows; i += GATES) {
        const int row = row0 + i, k = (row * steps + s) * units + j0;
        __global TYPE *zp = pre + (row * steps + s) * cols + j0;
        VEC u[3];
        for (int g = 0; g < 3; g++)
            u[g] = LoadBlock(sums + row * cols + g * units + j0, width)
                   + (use_bias ? LoadBlock(bias + cols + g * units + j0, width) : (VEC)(0));
        const VEC zz = LoadBlock(zp, width) + u[0], zr = LoadBlock(zp + units, width) + u[1];
        const VEC zh = LoadBlock(zp + 2 * units, width) + RACT_FORWARD_V(zr, ra, rb) * u[2];
        StoreBlock(zz, zp, width);
        StoreBlock(zr, zp + units, width);
        StoreBlock(zh, zp + 2 * units, width);
        const VEC gz = RACT_FORWARD_V(zz, ra, rb);
        const VEC h = gz * (s ? LoadBlock(states + k - units, width) : (VEC)(0)) + (1 - gz) * ACT_FORWARD_V(zh, a, b);
        StoreBlock(u[2], candidates + k, width);
        StoreBlock(h, states + k, width);
        if (write_last)
            StoreBlock(h, last + row * units + j0, width);
    }
}

// Step s of backpropagation through time. h_{s-1} reaches h_s directly (through z h_{s-1}) and
// through U: `carry` holds dL/dh_s z_s for step s - 1, written by this same work-item. The
// recurrent deltas differ from the input ones in the candidate block only: u_h is scaled by r.
__kernel void CalcHiddenGradientGRU(__global const TYPE *output_gr,   // (rows, steps, units) or (rows, units)
                                    __global const TYPE *pre,         // z, (rows, steps, 3 units)
                                    __global const TYPE *states,      // h, (rows, steps, units)
                                    __global const TYPE *candidates,  // u_h, (rows, steps, units)
                                    __global const TYPE *transposed,  // U^T, (3 units, units)
                                    __global TYPE *sums,              // dL/dh_s, (capacity, 3 units)
                                    __global TYPE *delta,             // dL/d(x W + b_x), panels (see recurrent.cl)
                                    __global TYPE *delta_rec,         // dL/du, panels
                                    __global TYPE *step_delta,        // (2, capacity, 3 units)
                                    __global TYPE *carry,             // dL/dh_s z_s, (rows, units)
                                    const int rows, const int s, const int steps, const int units,
                                    const int sequences, const int capacity,
                                    const TYPE a, const TYPE b, const TYPE ra, const TYPE rb)
{
    const int j0 = get_global_id(0) * VW, row0 = get_global_id(1) * BB;
    if (j0 >= units)
        return;
    const int cols = 3 * units;
    StepOutputGradients(output_gr, step_delta, transposed, sums, row0, rows, s, j0, steps, units, cols, sequences,
                        capacity);
    const int width = units - j0;
    for (int i = 0; i < BB && row0 + i < rows; i++) {
        const int row = row0 + i, k = (row * steps + s) * units + j0;
        __global const TYPE *zp = pre + (row * steps + s) * cols + j0;
        const VEC dhs = LoadBlock(sums + row * cols + j0, width)
                        + (s < steps - 1 ? LoadBlock(carry + row * units + j0, width) : (VEC)(0));
        const VEC zz = LoadBlock(zp, width), zr = LoadBlock(zp + units, width), zh = LoadBlock(zp + 2 * units, width);
        const VEC gz = RACT_FORWARD_V(zz, ra, rb), gr = RACT_FORWARD_V(zr, ra, rb), gh = ACT_FORWARD_V(zh, a, b);
        const VEC h_prev = s ? LoadBlock(states + k - units, width) : (VEC)(0);
        StoreBlock(dhs * gz, carry + row * units + j0, width);
        const VEC dz = dhs * (h_prev - gh) * RACT_DERIVATIVE_V(gz, zz, ra, rb);
        const VEC dc = dhs * (1 - gz) * ACT_DERIVATIVE_V(gh, zh, a, b);
        const VEC dr = dc * LoadBlock(candidates + k, width) * RACT_DERIVATIVE_V(gr, zr, ra, rb);
        const VEC d[3] = {dz, dr, dc}, d_rec[3] = {dz, dr, dc * gr};
        for (int g = 0; g < 3; g++) {
            StoreDeltaBlock(delta, d[g], row, s, g * units + j0, width, steps, capacity);
            StoreDeltaBlock(delta_rec, d_rec[g], row, s, g * units + j0, width, steps, capacity);
            StoreStepDeltaBlock(step_delta, d_rec[g], row, s, g * units + j0, width, cols, capacity);
        }
    }
}
