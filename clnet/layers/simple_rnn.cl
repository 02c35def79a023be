// SimpleRNN: h_s = f(x_s W + b + h_{s-1} U). FeedForwardRecurrentInput (recurrent.cl) has put
// x_s W + b in `pre`; each step adds h_{s-1} U in place, keeping z for the backward pass. The
// activation runs on blocks of VW units of one batch row, in one launch over every step (the CPU
// form or the sequence form; see recurrent.cl).

// Step s of batch row `row`, units j0 .. + VW, once `sums` holds the row's h_{s-1} U. A padded
// step (see MaskSteps) outputs the step before's output and leaves the state as it was.
HELPER void SimpleRNNForwardBlock(__global TYPE *pre, __global const TYPE *sums, __global TYPE *states,
                                  __global const TYPE *initial_h, __global TYPE *last, const int row, const int s,
                                  const int steps, const int units, const int j0, const int write_last,
                                  const int with_initial, const TYPE a, const TYPE b, MASK_ARGS)
{
    const int width = units - j0, k = (row * steps + s) * units + j0, from = FirstHeld(first, masked, row);
    const VEC z = LoadBlock(pre + k, width) + RecurrentSum(sums, row, row * units + j0, width, s, from, with_initial);
    const int holds = Held(held, masked, row, s, steps);
    const VEC h = holds ? ACT_FORWARD_V(z, a, b) : PaddedOutput(states, row, s, from, steps, units, j0);
    StoreBlock(z, pre + k, width);
    StoreBlock(h, states + k, width);
    if (write_last)  // (see LAST_IS_OUTPUT)
        StoreBlock(holds || write_last & LAST_IS_OUTPUT
                   ? h : PreviousState(states, initial_h, row, s, from, steps, units, j0, with_initial),
                   last + row * units + j0, width);
}

// Step s of backpropagation through time: delta_s = dL/dh_s f'(z_s), once `sums` holds dL/dh_s.
// With a mask, dL/dh_s also has what the step after passed over (`carry`, written by this same
// block): a padded step passes all of dL/dh_s to h_{s-1}, and its delta is zeros.
HELPER void SimpleRNNBackwardBlock(__global const TYPE *pre, __global const TYPE *states, __global const TYPE *sums,
                                   __global TYPE *delta, __global TYPE *step_delta, __global TYPE *carry,
                                   const int row, const int s, const int steps, const int units, const int j0,
                                   const int capacity, const TYPE a, const TYPE b, MASK_ARGS)
{
    const int width = units - j0, k = (row * steps + s) * units + j0, holds = Held(held, masked, row, s, steps);
    const VEC dh = LoadBlock(sums + row * units + j0, width)
                   + (masked && s < steps - 1 ? LoadBlock(carry + row * units + j0, width) : (VEC)(0));
    const VEC dz = holds ? dh * ACT_DERIVATIVE_V(LoadBlock(states + k, width), LoadBlock(pre + k, width), a, b)
                         : (VEC)(0);
    if (masked)
        StoreBlock(holds ? (VEC)(0) : dh, carry + row * units + j0, width);
    StoreDeltaBlock(delta, dz, row, s, j0, width, steps, capacity);
    StoreStepDeltaBlock(step_delta, dz, row, s, j0, width, units, capacity);
}

// Both forms' arguments.
#define SIMPLE_RNN_FORWARD_ARGS                                                                      \
    __global TYPE *pre,              /* z, (rows, steps, units) */                                   \
    __global const TYPE *recurrent,  /* U, (units, units) */                                         \
    __global TYPE *sums,             /* h_{s-1} U, (capacity, units) */                              \
    __global TYPE *states,           /* h, (rows, steps, units) */                                   \
    __global const TYPE *initial_h,  /* h_0, (rows, units): read when with_initial */                \
    __global TYPE *last,             /* h of the last step, (rows, units) */                         \
    const int rows, const int steps, const int units, const TYPE a, const TYPE b,                    \
    const int with_initial, const int write_last, MASK_ARGS

#define SIMPLE_RNN_BACKWARD_ARGS                                                                     \
    __global const TYPE *output_gr,  /* (rows, steps, units) or (rows, units) */                     \
    __global const TYPE *state_gr,   /* dL/dh_T, (rows, units), read when grads & GRAD_STATE */      \
    __global const TYPE *pre,        /* z, (rows, steps, units) */                                   \
    __global const TYPE *states,     /* h, (rows, steps, units) */                                   \
    __global const TYPE *transposed, /* U^T, (units, units) */                                       \
    __global TYPE *sums,             /* dL/dh_s, (capacity, units) */                                \
    __global TYPE *delta,            /* dL/dz, panels (see recurrent.cl) */                          \
    __global TYPE *step_delta,       /* (2, capacity, units) */                                      \
    __global TYPE *carry,            /* dL/dh_s a padded step passes over, (rows, units): masked */  \
    const int rows, const int steps, const int units, const TYPE a, const TYPE b, const int grads,     \
    const int capacity, MASK_ARGS

// The cell's block at (row, s, j) in both forms' loops (recurrent.cl's STEP_FORWARD and the rest).
#define SIMPLE_RNN_FORWARD_BLOCK(row, s, j) SimpleRNNForwardBlock(pre, sums, states, initial_h, last, row, s, \
                                                                  steps, units, j,                            \
                                                                  s == steps - 1 ? write_last : 0,            \
                                                                  with_initial, a, b, held, first, masked)
#define SIMPLE_RNN_BACKWARD_BLOCK(row, s, j) SimpleRNNBackwardBlock(pre, states, sums, delta, step_delta,     \
                                                                    carry, row, s, steps, units, j, capacity, \
                                                                    a, b, held, first, masked)
// The backward block at processing row r reads h there (f'(z) from y; see PrefetchStep).
#define SIMPLE_RNN_PREFETCH_STATES(r, j) PREFETCH(states + (r) * units + (j))

RECURRENT_KERNELS(SimpleRNN, SIMPLE_RNN, units)
