// GRU with reset_after=True (Keras's default, CuDNN's form), gate order z, r, h in blocks of
// `units` columns (cols = 3 units), input bias b_x = bias[0] and recurrent bias b_h = bias[1]:
//   u = h_{s-1} U + b_h,  z = g(x W_z + b_xz + u_z),  r = g(x W_r + b_xr + u_r),
//   h~ = f(x W_h + b_xh + r u_h),  h_s = z h_{s-1} + (1 - z) h~
// (f the activation, g the recurrent activation; h before the first step: zeros, or the
// call's initial_state). FeedForwardRecurrentInput (recurrent.cl) has put x W + b_x in `pre`;
// each step completes it in place (with GATES_KEPT, see recurrent.cl, the gates g(z_z), g(z_r),
// f(z_h) in place of z) and keeps u_h, which the backward pass needs. The gate math runs on
// blocks of VW units of one batch row, in one launch over every step (the CPU form or the
// sequence form; see recurrent.cl).

// Step s of batch row `row`, units j0 .. + VW, once `sums` holds the row's h_{s-1} U. A padded
// step (see MaskSteps) keeps the state h and outputs the step before's output.
HELPER void GRUForwardBlock(__global TYPE *pre, __global const TYPE *bias, __global const TYPE *sums,
                            __global TYPE *states, __global const TYPE *initial_h, __global TYPE *candidates,
                            __global TYPE *last, const int row, const int s, const int steps, const int units,
                            const int j0, const int use_bias, const int with_initial, const int write_last,
                            const TYPE a, const TYPE b, const TYPE ra, const TYPE rb, MASK_ARGS)
{
    const int cols = 3 * units, width = units - j0, k = (row * steps + s) * units + j0;
    const int from = FirstHeld(first, masked, row), holds = Held(held, masked, row, s, steps);
    __global TYPE *zp = pre + (row * steps + s) * cols + j0;
    VEC u[3];
    for (int g = 0; g < 3; g++)
        u[g] = RecurrentSum(sums, row, row * cols + g * units + j0, width, s, from, with_initial)
               + (use_bias ? LoadBlock(bias + cols + g * units + j0, width) : (VEC)(0));
    const VEC zz = LoadBlock(zp, width) + u[0], zr = LoadBlock(zp + units, width) + u[1];
    const VEC gz = RACT_FORWARD_V(zz, ra, rb), gr = RACT_FORWARD_V(zr, ra, rb);
    StoreBlock(GATES_KEPT ? gz : zz, zp, width);
    StoreBlock(GATES_KEPT ? gr : zr, zp + units, width);
    const VEC zh = LoadBlock(zp + 2 * units, width) + gr * u[2];
    const VEC gh = ACT_FORWARD_V(zh, a, b);
    StoreBlock(GATES_KEPT ? gh : zh, zp + 2 * units, width);
    const VEC h_prev = PreviousState(states, initial_h, row, s, from, steps, units, j0, with_initial);
    const VEC h = holds ? gz * h_prev + (1 - gz) * gh : PaddedOutput(states, row, s, from, steps, units, j0);
    StoreBlock(u[2], candidates + k, width);
    StoreBlock(h, states + k, width);
    if (write_last)  // (see LAST_IS_OUTPUT)
        StoreBlock(holds || write_last & LAST_IS_OUTPUT ? h : h_prev, last + row * units + j0, width);
}

// Step s of backpropagation through time, once `sums` holds the row's dL/dh_s through U. h_{s-1}
// reaches h_s directly (through z h_{s-1}) and through U: `carry` holds dL/dh_s z_s for step
// s - 1, written by this same block. The recurrent deltas differ from the input ones in the
// candidate block only: u_h is scaled by r. A padded step is a step of z = 1: it passes all of
// dL/dh_s on, and its deltas are zeros.
HELPER void GRUBackwardBlock(__global const TYPE *pre, __global const TYPE *states, __global const TYPE *initial_h,
                             __global const TYPE *candidates, __global const TYPE *sums, __global TYPE *delta,
                             __global TYPE *delta_rec, __global TYPE *step_delta, __global TYPE *carry,
                             const int row, const int s, const int steps, const int units, const int j0,
                             const int with_initial, const int capacity, const TYPE a, const TYPE b, const TYPE ra,
                             const TYPE rb, MASK_ARGS)
{
    const int cols = 3 * units, width = units - j0, k = (row * steps + s) * units + j0;
    const int from = FirstHeld(first, masked, row), holds = Held(held, masked, row, s, steps);
    __global const TYPE *zp = pre + (row * steps + s) * cols + j0;
    const VEC dhs = LoadBlock(sums + row * cols + j0, width)
                    + (s < steps - 1 ? LoadBlock(carry + row * units + j0, width) : (VEC)(0));
    // z, or with GATES_KEPT the gates, which then stand in for z in the derivatives (which do not read it)
    const VEC zz = LoadBlock(zp, width), zr = LoadBlock(zp + units, width), zh = LoadBlock(zp + 2 * units, width);
#if GATES_KEPT
    const VEC gz = zz, gr = zr, gh = zh;
#else
    const VEC gz = RACT_FORWARD_V(zz, ra, rb), gr = RACT_FORWARD_V(zr, ra, rb), gh = ACT_FORWARD_V(zh, a, b);
#endif
    const VEC h_prev = PreviousState(states, initial_h, row, s, from, steps, units, j0, with_initial);
    StoreBlock(holds ? dhs * gz : dhs, carry + row * units + j0, width);
    const VEC dz = holds ? dhs * (h_prev - gh) * RACT_DERIVATIVE_V(gz, zz, ra, rb) : (VEC)(0);
    const VEC dc = holds ? dhs * (1 - gz) * ACT_DERIVATIVE_V(gh, zh, a, b) : (VEC)(0);
    const VEC dr = dc * LoadBlock(candidates + k, width) * RACT_DERIVATIVE_V(gr, zr, ra, rb);
    const VEC d[3] = {dz, dr, dc}, d_rec[3] = {dz, dr, dc * gr};
    for (int g = 0; g < 3; g++) {
        StoreDeltaBlock(delta, d[g], row, s, g * units + j0, width, steps, capacity);
        StoreDeltaBlock(delta_rec, d_rec[g], row, s, g * units + j0, width, steps, capacity);
        StoreStepDeltaBlock(step_delta, d_rec[g], row, s, g * units + j0, width, cols, capacity);
    }
}

// Both forms' arguments.
#define GRU_FORWARD_ARGS                                                                             \
    __global TYPE *pre,              /* z, (rows, steps, 3 units) */                                 \
    __global const TYPE *recurrent,  /* U, (units, 3 units) */                                       \
    __global const TYPE *bias,       /* (2, 3 units), read when use_bias */                          \
    __global TYPE *sums,             /* h_{s-1} U, (capacity, 3 units) */                            \
    __global TYPE *states,           /* h, (rows, steps, units) */                                   \
    __global const TYPE *initial_h,  /* h_0, (rows, units): read when with_initial */                \
    __global TYPE *candidates,       /* u_h, (rows, steps, units) */                                 \
    __global TYPE *last,             /* h of the last step, (rows, units) */                         \
    const int rows, const int steps, const int units, const int use_bias, const TYPE a, const TYPE b, \
    const TYPE ra, const TYPE rb, const int with_initial, const int write_last, MASK_ARGS

#define GRU_BACKWARD_ARGS                                                                            \
    __global const TYPE *output_gr,   /* (rows, steps, units) or (rows, units) */                    \
    __global const TYPE *state_gr,    /* dL/dh_T, (rows, units), read when grads & GRAD_STATE */     \
    __global const TYPE *pre,         /* z, (rows, steps, 3 units) */                                \
    __global const TYPE *states,      /* h, (rows, steps, units) */                                  \
    __global const TYPE *initial_h,   /* h_0, (rows, units): read when with_initial */               \
    __global const TYPE *candidates,  /* u_h, (rows, steps, units) */                                \
    __global const TYPE *transposed,  /* U^T, (3 units, units) */                                    \
    __global TYPE *sums,              /* dL/dh_s, (capacity, 3 units) */                             \
    __global TYPE *delta,             /* dL/d(x W + b_x), panels (see recurrent.cl) */               \
    __global TYPE *delta_rec,         /* dL/du, panels */                                            \
    __global TYPE *step_delta,        /* (2, capacity, 3 units) */                                   \
    __global TYPE *carry,             /* dL/dh_s z_s, (rows, units) */                               \
    const int rows, const int steps, const int units, const TYPE a, const TYPE b, const TYPE ra,     \
    const TYPE rb, const int grads, const int with_initial, const int capacity, MASK_ARGS

// The cell's block at (row, s, j) in both forms' loops (recurrent.cl's STEP_FORWARD and the rest).
#define GRU_FORWARD_BLOCK(row, s, j) GRUForwardBlock(pre, bias, sums, states, initial_h, candidates, last, \
                                                     row, s, steps, units, j, use_bias, with_initial,      \
                                                     s == steps - 1 ? write_last : 0, a, b, ra, rb, held,  \
                                                     first, masked)
#define GRU_BACKWARD_BLOCK(row, s, j) GRUBackwardBlock(pre, states, initial_h, candidates, sums, delta,       \
                                                       delta_rec, step_delta, carry, row, s, steps, units, j, \
                                                       with_initial, capacity, a, b, ra, rb, held, first,     \
                                                       masked)
// The backward block at processing row r reads h_{s-1} and the candidate's row (see PrefetchStep).
#define GRU_PREFETCH_STATES(r, j) (PREFETCH(states + ((r) - 1) * units + (j)), PREFETCH(candidates + (r) * units + (j)))

RECURRENT_KERNELS(GRU, GRU, 3 * units)
