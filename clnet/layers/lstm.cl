// LSTM, Keras's gate order i, f, c, o in blocks of `units` columns (cols = 4 units):
//   i = g(z_i), f = g(z_f), c~ = f(z_c), o = g(z_o), with z = x W + b + h_{s-1} U,
//   c_s = f c_{s-1} + i c~,  h_s = o f(c_s)
// (f the activation, g the recurrent activation; h and c before the first step: zeros, or the
// call's initial_state). FeedForwardRecurrentInput (recurrent.cl) has
// put x W + b in `pre`; each step adds h_{s-1} U in place. The gate math of a step runs on blocks
// of VW units of one batch row, all four gates of them; both forms loop over the steps in one
// launch (see recurrent.cl).
// With GATES_KEPT (see recurrent.cl) each step overwrites z in `pre` with the gates g(z_i), g(z_f),
// f(z_c), g(z_o).

// Step s of batch row `row`, units j0 .. + VW, once `sums` holds the row's h_{s-1} U. A padded
// step (see MaskSteps) keeps c and the state h, and outputs the step before's output.
HELPER void LSTMForwardBlock(__global TYPE *pre, __global const TYPE *sums, __global TYPE *states,
                             __global TYPE *cells, __global const TYPE *initial_h, __global const TYPE *initial_c,
                             __global TYPE *last, __global TYPE *last_cell, const int row, const int s,
                             const int steps, const int units, const int j0, const int with_initial,
                             const int write_last, const TYPE a, const TYPE b, const TYPE ra, const TYPE rb, MASK_ARGS)
{
    const int cols = 4 * units, width = units - j0, k = (row * steps + s) * units + j0;
    const int from = FirstHeld(first, masked, row), holds = Held(held, masked, row, s, steps);
    __global TYPE *zp = pre + (row * steps + s) * cols + j0;
    VEC z[4];
    for (int g = 0; g < 4; g++)
        z[g] = LoadBlock(zp + g * units, width)
               + RecurrentSum(sums, row, row * cols + g * units + j0, width, s, from, with_initial);
    const VEC gates[4] = {RACT_FORWARD_V(z[0], ra, rb), RACT_FORWARD_V(z[1], ra, rb), ACT_FORWARD_V(z[2], a, b),
                          RACT_FORWARD_V(z[3], ra, rb)};
    for (int g = 0; g < 4; g++)
        StoreBlock(GATES_KEPT ? gates[g] : z[g], zp + g * units, width);
    const VEC c_prev = PreviousState(cells, initial_c, row, s, from, steps, units, j0, with_initial);
    const VEC c = holds ? gates[1] * c_prev + gates[0] * gates[2] : c_prev;
    const VEC h = holds ? gates[3] * ACT_FORWARD_V(c, a, b) : PaddedOutput(states, row, s, from, steps, units, j0);
    StoreBlock(c, cells + k, width);
    StoreBlock(h, states + k, width);
    if (write_last & 1)  // (see LAST_IS_OUTPUT)
        StoreBlock(holds || write_last & LAST_IS_OUTPUT
                   ? h : PreviousState(states, initial_h, row, s, from, steps, units, j0, with_initial),
                   last + row * units + j0, width);
    if (write_last & 2)
        StoreBlock(c, last_cell + row * units + j0, width);
}

// Step s of backpropagation through time, once `sums` holds the row's dL/dh_s.
// dL/dc_s = dL/dh_s o f'(c_s) + dL/dc_{s+1} f_{s+1}; `carry` holds the second term, written by
// this same block at step s + 1. At the last step the second term is the final cell state's
// gradient from above, when return_state gives c_T to a later layer (GRAD_CELL). With a mask,
// dL/dh_s also has what the step after passed over (`carry_h`): a padded step passes dL/dh_s
// and dL/dc_s on to the step before whole, and its deltas are zeros.
HELPER void LSTMBackwardBlock(__global const TYPE *pre, __global const TYPE *cells, __global const TYPE *initial_c,
                              __global const TYPE *sums, __global const TYPE *cell_gr, __global TYPE *delta,
                              __global TYPE *step_delta, __global TYPE *carry, __global TYPE *carry_h,
                              const int row, const int s, const int steps, const int units, const int j0,
                              const int grads, const int with_initial, const int capacity, const TYPE a, const TYPE b,
                              const TYPE ra, const TYPE rb, MASK_ARGS)
{
    const int cols = 4 * units, width = units - j0, k = (row * steps + s) * units + j0;
    const int from = FirstHeld(first, masked, row), holds = Held(held, masked, row, s, steps);
    __global const TYPE *zp = pre + (row * steps + s) * cols + j0;
    const VEC dh = LoadBlock(sums + row * cols + j0, width)
                   + (masked && s < steps - 1 ? LoadBlock(carry_h + row * units + j0, width) : (VEC)(0));
    // z, or with GATES_KEPT the gates, which then stand in for z in the derivatives (which do not read it)
    const VEC zi = LoadBlock(zp, width), zf = LoadBlock(zp + units, width);
    const VEC zc = LoadBlock(zp + 2 * units, width), zo = LoadBlock(zp + 3 * units, width);
#if GATES_KEPT
    const VEC gi = zi, gf = zf, gc = zc, go = zo;
#else
    const VEC gi = RACT_FORWARD_V(zi, ra, rb), gf = RACT_FORWARD_V(zf, ra, rb);
    const VEC gc = ACT_FORWARD_V(zc, a, b), go = RACT_FORWARD_V(zo, ra, rb);
#endif
    const VEC c = LoadBlock(cells + k, width);
    const VEC c_prev = PreviousState(cells, initial_c, row, s, from, steps, units, j0, with_initial);
    const VEC fc = ACT_FORWARD_V(c, a, b);
    const VEC later = s < steps - 1 ? LoadBlock(carry + row * units + j0, width)
                      : (grads & GRAD_CELL ? LoadBlock(cell_gr + row * units + j0, width) : (VEC)(0));
    const VEC dc = dh * go * ACT_DERIVATIVE_V(fc, c, a, b) + later;
    StoreBlock(holds ? dc * gf : later, carry + row * units + j0, width);
    if (masked)
        StoreBlock(holds ? (VEC)(0) : dh, carry_h + row * units + j0, width);
    const VEC zero = (VEC)(0);
    const VEC d[4] = {holds ? dc * gc * RACT_DERIVATIVE_V(gi, zi, ra, rb) : zero,
                      holds ? dc * c_prev * RACT_DERIVATIVE_V(gf, zf, ra, rb) : zero,
                      holds ? dc * gi * ACT_DERIVATIVE_V(gc, zc, a, b) : zero,
                      holds ? dh * fc * RACT_DERIVATIVE_V(go, zo, ra, rb) : zero};
    for (int g = 0; g < 4; g++) {
        StoreDeltaBlock(delta, d[g], row, s, g * units + j0, width, steps, capacity);
        StoreStepDeltaBlock(step_delta, d[g], row, s, g * units + j0, width, cols, capacity);
    }
}

// Both forms' arguments.
#define LSTM_FORWARD_ARGS                                                                            \
    __global TYPE *pre,              /* z, (rows, steps, 4 units) */                                 \
    __global const TYPE *recurrent,  /* U, (units, 4 units) */                                       \
    __global TYPE *sums,             /* h_{s-1} U, (capacity, 4 units) */                            \
    __global TYPE *states,           /* h, (rows, steps, units) */                                   \
    __global TYPE *cells,            /* c, (rows, steps, units) */                                   \
    __global const TYPE *initial_h,  /* h_0, (rows, units): read when with_initial */                \
    __global const TYPE *initial_c,  /* c_0, (rows, units): read when with_initial */                \
    __global TYPE *last,             /* h of the last step, (rows, units): write_last & 1 */         \
    __global TYPE *last_cell,        /* c of the last step, (rows, units): write_last & 2 */         \
    const int rows, const int steps, const int units, const TYPE a, const TYPE b, const TYPE ra,     \
    const TYPE rb, const int with_initial, const int write_last, MASK_ARGS

#define LSTM_BACKWARD_ARGS                                                                           \
    __global const TYPE *output_gr,  /* (rows, steps, units) or (rows, units) */                     \
    __global const TYPE *state_gr,   /* dL/dh_T, (rows, units), read when grads & GRAD_STATE */      \
    __global const TYPE *cell_gr,    /* dL/dc_T, (rows, units), read when grads & GRAD_CELL */       \
    __global const TYPE *pre,        /* z, (rows, steps, 4 units) */                                 \
    __global const TYPE *cells,      /* c, (rows, steps, units) */                                   \
    __global const TYPE *initial_c,  /* c_0, (rows, units): read when with_initial */                \
    __global const TYPE *transposed, /* U^T, (4 units, units) */                                     \
    __global TYPE *sums,             /* dL/dh_s, (capacity, 4 units) */                              \
    __global TYPE *delta,            /* dL/dz, panels (see recurrent.cl) */                          \
    __global TYPE *step_delta,       /* (2, capacity, 4 units) */                                    \
    __global TYPE *carry,            /* dL/dc_s f_s, (rows, units) */                                \
    __global TYPE *carry_h,          /* dL/dh_s a padded step passes over, (rows, units): masked */  \
    const int rows, const int steps, const int units, const TYPE a, const TYPE b, const TYPE ra,     \
    const TYPE rb, const int grads, const int with_initial, const int capacity, MASK_ARGS

// The cell's block at (row, s, j) in both forms' loops (recurrent.cl's STEP_FORWARD and the rest).
#define LSTM_FORWARD_BLOCK(row, s, j) LSTMForwardBlock(pre, sums, states, cells, initial_h, initial_c, last, \
                                                       last_cell, row, s, steps, units, j, with_initial,     \
                                                       s == steps - 1 ? write_last : 0, a, b, ra, rb, held,  \
                                                       first, masked)
#define LSTM_BACKWARD_BLOCK(row, s, j) LSTMBackwardBlock(pre, cells, initial_c, sums, cell_gr, delta,         \
                                                         step_delta, carry, carry_h, row, s, steps, units, j, \
                                                         grads, with_initial, capacity, a, b, ra, rb, held,   \
                                                         first, masked)
// The backward block at processing row r reads c there, which the step after loaded as its c_{s-1},
// and c_{s-1}, which no step has (see PrefetchStep).
#define LSTM_PREFETCH_STATES(r, j) PREFETCH(cells + ((r) - 1) * units + (j))

RECURRENT_KERNELS(LSTM, LSTM, 4 * units)
