// GRU with reset_after=True (Keras's default, CuDNN's form), gate order z, r, h in blocks of
// `units` columns (cols = 3 units), input bias b_x = bias[0] and recurrent bias b_h = bias[1]:
//   u = h_{s-1} U + b_h,  z = g(x W_z + b_xz + u_z),  r = g(x W_r + b_xr + u_r),
//   h~ = f(x W_h + b_xh + r u_h),  h_s = z h_{s-1} + (1 - z) h~
// (f the activation, g the recurrent activation). FeedForwardRecurrentInput (recurrent.cl) has
// put x W + b_x in `pre`; each step completes it in place and keeps u_h, which the backward pass
// needs. One launch per step, one work-item per (unit, batch row).

__kernel void FeedForwardGRU(__global TYPE *pre,              // z, (rows, steps, 3 units)
                             __global const TYPE *recurrent,  // U, (units, 3 units)
                             __global const TYPE *bias,       // (2, 3 units), read when use_bias
                             __global TYPE *states,           // h, (rows, steps, units)
                             __global TYPE *candidates,       // u_h, (rows, steps, units)
                             __global TYPE *last,             // h of the last step, (rows, units)
                             const int s, const int steps, const int units, const int write_last,
                             const int use_bias, const TYPE a, const TYPE b, const TYPE ra, const TYPE rb)
{
    const int j = get_global_id(0), row = get_global_id(1);
    if (j >= units)
        return;
    const int cols = 3 * units, i = (row * steps + s) * units + j;
    __global TYPE *z = pre + (row * steps + s) * cols + j;
    __global const TYPE *h_prev = s ? states + (row * steps + s - 1) * units : 0;
    TYPE u[3];
    for (int g = 0; g < 3; g++)
        u[g] = RecurrentProduct(h_prev, recurrent, g * units + j, cols, units) + (use_bias ? bias[cols + g * units + j] : 0);
    z[0] += u[0];
    z[units] += u[1];
    z[2 * units] += RACT_FORWARD(z[units], ra, rb) * u[2];
    const TYPE gz = RACT_FORWARD(z[0], ra, rb);
    const TYPE h = gz * (s ? h_prev[j] : (TYPE)0) + (1 - gz) * ACT_FORWARD(z[2 * units], a, b);
    candidates[i] = u[2];
    states[i] = h;
    if (write_last)
        last[row * units + j] = h;
}

// Step s of backpropagation through time. h_{s-1} reaches h_s directly (through z h_{s-1}) and
// through U: `carry` holds dL/dh_s z_s for step s - 1, written by this same work-item. The
// recurrent deltas differ from the input ones in the candidate block only: u_h is scaled by r.
__kernel void CalcHiddenGradientGRU(__global const TYPE *output_gr,   // (rows, steps, units) or (rows, units)
                                    __global const TYPE *pre,         // z, (rows, steps, 3 units)
                                    __global const TYPE *states,      // h, (rows, steps, units)
                                    __global const TYPE *candidates,  // u_h, (rows, steps, units)
                                    __global const TYPE *recurrent,   // U, (units, 3 units)
                                    __global TYPE *delta,             // dL/d(x W + b_x), (rows, steps, 3 units)
                                    __global TYPE *delta_rec,         // dL/du, (rows, steps, 3 units)
                                    __global TYPE *carry,             // dL/dh_s z_s, (rows, units)
                                    const int s, const int steps, const int units, const int sequences,
                                    const TYPE a, const TYPE b, const TYPE ra, const TYPE rb)
{
    const int j = get_global_id(0), row = get_global_id(1);
    if (j >= units)
        return;
    const int cols = 3 * units, i = (row * steps + s) * units + j, k = (row * steps + s) * cols + j;
    const TYPE dh = StepOutputGradient(output_gr, delta_rec, recurrent, row, s, j, steps, units, cols, sequences)
                    + (s < steps - 1 ? carry[row * units + j] : (TYPE)0);
    const TYPE zz = pre[k], zr = pre[k + units], zh = pre[k + 2 * units];
    const TYPE gz = RACT_FORWARD(zz, ra, rb), gr = RACT_FORWARD(zr, ra, rb), gh = ACT_FORWARD(zh, a, b);
    const TYPE h_prev = s ? states[i - units] : (TYPE)0;
    carry[row * units + j] = dh * gz;
    const TYPE dz = dh * (h_prev - gh) * RACT_DERIVATIVE(gz, zz, ra, rb);
    const TYPE dc = dh * (1 - gz) * ACT_DERIVATIVE(gh, zh, a, b);
    const TYPE dr = dc * candidates[i] * RACT_DERIVATIVE(gr, zr, ra, rb);
    delta[k] = delta_rec[k] = dz;
    delta[k + units] = delta_rec[k + units] = dr;
    delta[k + 2 * units] = dc;
    delta_rec[k + 2 * units] = dc * gr;
}
