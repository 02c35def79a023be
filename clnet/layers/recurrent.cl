// What SimpleRNN, LSTM and GRU share: the products over all time steps at once, and the part
// of a time step's backward pass that goes through the recurrent kernel.
//
// A sequence layer with G gates of `units` columns each has cols = G * units columns. Rows are
// (batch row, step) pairs, r = row * steps + s, with s the step in processing order: with
// go_backwards (reverse = 1) step s reads input time steps - 1 - s, as Keras feeds the reversed
// sequence. Only the products with the input (InputRow) know about that; the time loop and every
// per-step buffer run in processing order.
//
// ACT (-D ACT=hyperbolic_tangent) is the layer's activation, RACT its recurrent activation (the
// gates' sigmoid); both are elementwise families of clnet/activations.
// GATES_KEPT = 1 where both activations' derivatives follow from their outputs alone (tanh, relu,
// linear, Keras's sigmoid; Activation.derivative_from_output): LSTM's and GRU's steps then
// overwrite z in `pre` with the gates, and backpropagation reads them instead of applying the
// activations again, one transcendental function a gate, unit and step fewer.

#define RACT_FORWARD CAT(RACT, _forward)
#define RACT_DERIVATIVE CAT(RACT, _derivative)

// The products over all time steps keep a block of VW columns (a VEC, one or two SIMD registers)
// by RM rows of the result per work-item, so that each load feeds several multiply-adds; the CPU
// form's time loop SV such vectors of units by RB batch rows (see recurrent.py). Columns need not
// be a multiple of VW: the last block reads and writes only its `width` columns, and a time-loop
// vector wholly past them reads the block's first again and stores nothing.

// Written for PoCL 3.0 (LLVM 14), pip's default, as the products' kernels are: it defines `inline` away and calls
// vload8 as a library function, so the helpers are forced inline (their accumulator arrays then
// stay in registers) and whole aligned vectors are read through VEC pointers.
#define HELPER __attribute__((always_inline))

// The input row (batch row, time step) that processing row r reads.
HELPER int InputRow(const int r, const int steps, const int reverse)
{
    if (!reverse)
        return r;
    const int s = r % steps;
    return r - s + steps - 1 - s;
}

// dL/dz is kept in column panels VW wide, (ceil(cols / VW), capacity * steps, VW), so that the
// weight gradients, which sum over all (row, step) pairs a block of VW columns at a time, walk
// contiguous memory: down a row-major (rows * steps, cols) matrix every row is another page. The
// panels' padding lanes are zeros, never written. `stride` = capacity * steps.
HELPER int PanelIndex(const int r, const int c, const int stride)
{
    return ((c / VW) * stride + r) * VW + c % VW;
}

HELPER TYPE SumLanes(VEC v)
{
#if VW == 1
    return v;
#elif VW == 2
    return v.s0 + v.s1;
#elif VW == 4
    return (v.s0 + v.s1) + (v.s2 + v.s3);
#elif VW == 8
    const TYPE4 t = v.lo + v.hi;
    return (t.s0 + t.s1) + (t.s2 + t.s3);
#else  // 16
    const TYPE8 e = v.lo + v.hi;
    const TYPE4 t = e.lo + e.hi;
    return (t.s0 + t.s1) + (t.s2 + t.s3);
#endif
}

// vec_type_hint(VEC) on the products over all steps and on the CPU form's time loops
// (RECURRENT_KERNELS): Intel's CPU compiler otherwise vectorizes across work-items a kernel
// already written in VW-wide vectors, and ran them slowly (LSTM(128) over 64 steps, batch 64: a
// far shorter training step with the hint, while PoCL ran the same either way;
// benchmarks/RESULTS.md, vec_type_hint on Intel's runtime and AVX-512, and Intel's runtime on a
// Zen 4 without AVX-512).

// z = x W + b for every (row, step) of the batch at once, before the time loop: the recurrent
// steps then only add h_{t-1} U. A work-item per VW columns x IN_ROWS processing rows. The
// work-items past the rows' blocks copy U transposed, IN_ROWS rows by VW columns each, for the
// backward steps (StepOutputGradients): U changes only between training steps, and a launch of
// its own would cost more than the copy.
__kernel __attribute__((vec_type_hint(VEC)))
void FeedForwardRecurrentInput(__global const TYPE *inputs,     // (rows, steps, n_in)
                               __global const TYPE *weights,    // W, (n_in, cols)
                               __global const TYPE *bias,       // (cols,), read when use_bias
                               __global TYPE *pre,              // (rows, steps, cols)
                               __global const TYPE *recurrent,  // U, (units, cols)
                               __global TYPE *transposed,       // U^T, (cols, units)
                               const int total, const int cols, const int n_in, const int steps,
                               const int reverse, const int use_bias, const int units)
{
    const int c = get_global_id(0) * VW, r0 = get_global_id(1) * IN_ROWS;
    const int blocks = (total + IN_ROWS - 1) / IN_ROWS;
    if (c >= cols)
        return;
    if (r0 >= blocks * IN_ROWS) {
        const int k0 = r0 - blocks * IN_ROWS;
        for (int k = k0; k < min_int(k0 + IN_ROWS, units); k++)
            for (int l = c; l < min_int(c + VW, cols); l++)
                transposed[l * units + k] = recurrent[k * cols + l];
        return;
    }
    const int width = cols - c;
    const VEC b = use_bias ? LoadBlock(bias + c, width) : (VEC)(0);
    VEC acc[IN_ROWS];
    __global const TYPE *x[IN_ROWS];
    #pragma unroll
    for (int i = 0; i < IN_ROWS; i++) {
        acc[i] = b;
        x[i] = inputs + InputRow(min_int(r0 + i, total - 1), steps, reverse) * n_in;
    }
    for (int d = 0; d < n_in; d++) {
        const VEC w = LoadBlock(weights + d * cols + c, width);
        #pragma unroll
        for (int i = 0; i < IN_ROWS; i++)
            acc[i] += x[i][d] * w;
    }
    for (int i = 0; i < IN_ROWS && r0 + i < total; i++)
        StoreBlock(acc[i], pre + (r0 + i) * cols + c, width);
}

// The CPU form: a work-group owns RB batch rows from row0 and all of their units, and loops over
// the steps alone (one launch each way), a barrier ending each step. Its kernels sum their
// products in VEC registers, as the products over all steps do, each load of U feeding a block
// of rows. Forward, GATES work-items per SV VW units from j0: work-item g sums gate g's h_{s-1} U
// for the block and stores it to `sums`, row-major; after a barrier those GATES work-items share
// out the block's (row, vector) pairs for the gate math, which needs every gate of a unit.
// Backward, a work-item per SV VW units sums dL/dh_s the same way (one "gate"), then runs the
// gate math of its block. The gate math runs on VEC blocks (see ACT_FORWARD_V) and reads the sums
// back from L1; the accumulators are indexed by constants only, so that they stay in registers.
// A work-item holding all four LSTM gates of two rows instead (8 accumulators too, but each load
// of U serving two rows, not eight) left LSTM(128)'s training step further behind PyTorch CPU's
// (benchmarks/RESULTS.md). The kernels return where j0 >= units, which their launches never
// reach: without it PoCL 3.0 ran LSTM(128)'s forward loop far slower.

// A block of VW units of a row of U or U^T. With units a multiple of VW (-D WHOLE_UNITS=1) every
// such block is whole and aligned, and is read as one vector: LoadBlock's other paths call vload8
// out of line in PoCL 3.0, and a call in the loop makes LLVM save the accumulators around it.
#if WHOLE_UNITS
#define UNITS_BLOCK(p, width) (*(const __global VEC *)(p))
#else
#define UNITS_BLOCK(p, width) LoadBlock(p, width)
#endif

// Masks (Keras's: Embedding(mask_zero=True), Masking): a step that is padding carries the
// state over unchanged (h_s = h_{s-1}, LSTM's c too), and outputs the step before's output, or
// zeros before the row's first step that holds data, as Keras's RNN does. MaskSteps writes, from
// the call's mask, `held` (rows, steps) in processing order, 1 where a step holds data, and
// `first` (rows,), each row's first step that does (steps if none). A call without a mask passes
// masked = 0, and neither is read: every step holds data, and the first is step 0.
#define MASK_ARGS __global const TYPE *held, __global const int *first, const int masked

__kernel void MaskSteps(__global const TYPE *mask,  // (rows, steps), in the input's order
                        __global TYPE *held,        // (rows, steps), in processing order
                        __global int *first,        // (rows,)
                        const int steps, const int reverse)
{
    const int row = get_global_id(0);
    int found = steps;
    for (int s = steps - 1; s >= 0; s--) {
        const int m = mask[row * steps + (reverse ? steps - 1 - s : s)] != 0;
        held[row * steps + s] = m;
        found = m ? s : found;
    }
    first[row] = found;
}

HELPER int FirstHeld(__global const int *first, const int masked, const int row)
{
    return masked ? first[row] : 0;
}

HELPER int Held(__global const TYPE *held, const int masked, const int row, const int s, const int steps)
{
    return !masked || held[row * steps + s] != 0;
}

// Whether step s's h_{s-1} U counts: always after the row's first step that holds data (`first`),
// and at or before it only from an initial state (the call's initial_state; without one the state
// there is zeros, whose products the steps leave out).
HELPER int Recurs(const int s, const int first, const int with_initial)
{
    return s > first || with_initial;
}

// Row `row`'s h_{s-1}: the step before's; at or before its first step that holds data, the
// initial state, or where the state is zeros (see Recurs) any of the row's own values, unread.
HELPER __global const TYPE *PreviousRow(__global const TYPE *per_step, __global const TYPE *initial, const int row,
                                        const int s, const int first, const int steps, const int units,
                                        const int with_initial)
{
    if (s > first)
        return per_step + (row * steps + s - 1) * units;
    return with_initial ? initial + row * units : per_step + row * steps * units;
}

// Units j0 .. + VW of row `row`'s h_{s-1} (LSTM: c_{s-1}): zeros where the state is (see Recurs).
HELPER VEC PreviousState(__global const TYPE *per_step, __global const TYPE *initial, const int row, const int s,
                         const int first, const int steps, const int units, const int j0, const int with_initial)
{
    return Recurs(s, first, with_initial)
           ? LoadBlock(PreviousRow(per_step, initial, row, s, first, steps, units, with_initial) + j0, units - j0)
           : (VEC)(0);
}

// Units j0 .. + VW of what step s outputs where it is padding: the step before's output, or
// zeros before the row's first step that holds data (though the state there is the initial one).
// Either way, from the row's first step that holds data on, a step's output is its state h.
HELPER VEC PaddedOutput(__global const TYPE *states, const int row, const int s, const int first, const int steps,
                        const int units, const int j0)
{
    return s > first ? LoadBlock(states + (row * steps + s - 1) * units + j0, units - j0) : (VEC)(0);
}

// The forward kernels' write_last: the last step's h (1; LSTM's c, 2) to buffers of their own; with
// LAST_IS_OUTPUT that h is the layer's output (no return_sequences), which at a padded last step is
// the step before's output (PaddedOutput), not the state carried over: they differ where a row
// holds no data at all and the call has an initial state (clnet refuses a call that returns both).
#define LAST_IS_OUTPUT 4

// Units j0 .. + VW of step s's h_{s-1} U for `row` from `sums`, or zeros where it does not count.
HELPER VEC RecurrentSum(__global const TYPE *sums, const int row, const int at, const int width, const int s,
                        const int first, const int with_initial)
{
    return Recurs(s, first, with_initial) ? LoadBlock(sums + at, width) : (VEC)(0);
}

// Where each of a CPU-form work-item's SV vectors starts in its block of `width` units: v VW, or
// for a vector wholly past the units the block's first (its sums are computed and never stored).
HELPER void VectorOffsets(int *offset, const int width)
{
    #pragma unroll
    for (int v = 0; v < SV; v++)
        offset[v] = v * VW < width ? v * VW : 0;
}

// acc[i][v] += sum over k < count of x[i][k] m[k * stride + offset[v] ..] for the block's RB rows
// and SV vectors of units: a step's products through U (forward) or U^T (backward), CPU form.
HELPER void BlockProducts(VEC acc[RB][SV], __global const TYPE **x, __global const TYPE *m, const int stride,
                          const int count, const int *offset, const int width)
{
    for (int k = 0; k < count; k++, m += stride) {
        VEC u[SV];
        #pragma unroll
        for (int v = 0; v < SV; v++)
            u[v] = UNITS_BLOCK(m + offset[v], width - offset[v]);
        #pragma unroll
        for (int i = 0; i < RB; i++) {
            const VEC xk = (VEC)(x[i][k]);
            #pragma unroll
            for (int v = 0; v < SV; v++)
                acc[i][v] += xk * u[v];
        }
    }
}

// The block's sums to rows row0 .. + RB of `sums` (rows of `cols`), the units that exist.
HELPER void StoreBlocks(VEC acc[RB][SV], __global TYPE *sums, const int row0, const int rows, const int cols,
                        const int width)
{
    #pragma unroll
    for (int i = 0; i < RB; i++)
        #pragma unroll
        for (int v = 0; v < SV; v++)
            if (row0 + i < rows && v * VW < width)
                StoreBlock(acc[i][v], sums + (row0 + i) * cols + v * VW, width - v * VW);
}

// sums[row, g * units + j0 .. + SV VW) = h_{s-1}[row, :] U[:, g * units + j0 .. + SV VW) for the
// rows row0 .. + RB, gate g = get_global_id(0) % GATES's recurrent input (0 at the first step
// without initial state, whose state is zeros); then a barrier, after which the work-group's sums
// are all there.
HELPER void RecurrentProducts(__global const TYPE *states,     // h, (rows, steps, units)
                              __global const TYPE *initial,    // h_0, (rows, units), read when with_initial
                              __global const TYPE *recurrent,  // U, (units, cols)
                              __global TYPE *sums,             // (capacity, cols)
                              const int row0, const int rows, const int s, const int steps, const int units,
                              const int j0, const int cols, const int with_initial, __global const int *first,
                              const int masked)
{
    const int g = get_global_id(0) % GATES, width = units - j0;
    __global const TYPE *h[RB];
    VEC acc[RB][SV];
    int offset[SV];
    VectorOffsets(offset, width);
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        const int row = min_int(row0 + i, rows - 1);
        h[i] = PreviousRow(states, initial, row, s, FirstHeld(first, masked, row), steps, units, with_initial);
        #pragma unroll
        for (int v = 0; v < SV; v++)
            acc[i][v] = (VEC)(0);
    }
    BlockProducts(acc, h, recurrent + g * units + j0, cols, s || with_initial || masked ? units : 0, offset, width);
    StoreBlocks(acc, sums + g * units + j0, row0, rows, cols, width);
    barrier(CLK_GLOBAL_MEM_FENCE);
}

// Which gradients reach a layer from above, the backward kernels' `grads` (a bitmask): its
// output's (GRAD_OUTPUT), which with GRAD_SEQUENCES is every step's h, else the last step's; and
// with return_state the final state's, dL/dh_T (GRAD_STATE) and LSTM's dL/dc_T (GRAD_CELL). A
// state read downstream while the output is not (an encoder's) leaves GRAD_OUTPUT out.
#define GRAD_OUTPUT 1
#define GRAD_SEQUENCES 2
#define GRAD_STATE 4
#define GRAD_CELL 8

// Where the gradients from above of step s's h lie for `row` (a row of `units` each): the
// output's, and at the last step the final state's; 0 for one that gives step s nothing. A step
// before the row's first that holds data outputs zeros, not h: its output's gradient is not h's.
HELPER __global const TYPE *OutputGradientRow(__global const TYPE *output_gr, const int row, const int s,
                                              const int steps, const int units, const int grads, MASK_ARGS)
{
    if (s < FirstHeld(first, masked, row))
        return 0;
    if (grads & GRAD_SEQUENCES)
        return output_gr + (row * steps + s) * units;
    return (grads & GRAD_OUTPUT) && s == steps - 1 ? output_gr + row * units : 0;
}

HELPER __global const TYPE *StateGradientRow(__global const TYPE *state_gr, const int row, const int s,
                                             const int steps, const int units, const int grads)
{
    return (grads & GRAD_STATE) && s == steps - 1 ? state_gr + row * units : 0;
}

// The gradient from above of step s's h, units j0 .. + VW of `row`.
HELPER VEC GradientFromAbove(__global const TYPE *output_gr,  // (rows, steps, units) or (rows, units)
                             __global const TYPE *state_gr,   // dL/dh_T, (rows, units)
                             const int row, const int s, const int j0, const int steps, const int units,
                             const int grads, MASK_ARGS)
{
    __global const TYPE *output = OutputGradientRow(output_gr, row, s, steps, units, grads, held, first, masked);
    __global const TYPE *state = StateGradientRow(state_gr, row, s, steps, units, grads);
    const VEC dh = output ? LoadBlock(output + j0, units - j0) : (VEC)(0);
    return state ? dh + LoadBlock(state + j0, units - j0) : dh;
}

// sums[row, j0 .. + SV VW) = dL/dh_s for the rows row0 .. + RB: the gradient from above plus,
// except at the last step, step s + 1's recurrent deltas through U: sum over c of
// delta_rec[s + 1, c] U^T[c, j0 ..]. The deltas are read from `step_delta`, where each step also
// writes its recurrent deltas row-major (half s % 2; see StoreStepDelta), U^T from the copy
// FeedForwardRecurrentInput made, whose rows hold a unit's weights side by side.
HELPER void StepOutputGradients(__global const TYPE *output_gr,   // (rows, steps, units) or (rows, units)
                                __global const TYPE *state_gr,    // dL/dh_T, (rows, units)
                                __global const TYPE *step_delta,  // (2, capacity, cols)
                                __global const TYPE *transposed,  // U^T, (cols, units)
                                __global TYPE *sums,              // (capacity, cols)
                                const int row0, const int rows, const int s, const int j0, const int steps,
                                const int units, const int cols, const int grads, const int capacity, MASK_ARGS)
{
    const int width = units - j0;
    __global const TYPE *d[RB];
    VEC dh[RB][SV];
    int offset[SV];
    VectorOffsets(offset, width);
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        const int row = min_int(row0 + i, rows - 1);
        #pragma unroll
        for (int v = 0; v < SV; v++)
            dh[i][v] = GradientFromAbove(output_gr, state_gr, row, s, j0 + offset[v], steps, units, grads, held,
                                         first, masked);
        d[i] = step_delta + (((s + 1) & 1) * capacity + row) * cols;
    }
    BlockProducts(dh, d, transposed + j0, units, s < steps - 1 ? cols : 0, offset, width);
    StoreBlocks(dh, sums + j0, row0, rows, cols, width);
}

// The sequence form (a GPU's): one launch runs every step. Step s of batch row r needs only row
// r's h_{s-1}, so a work-group that owns SEQ_ROWS batch rows, and all of their units, can loop
// over the steps alone, with a barrier between steps: work-groups never wait for each other. Its
// work-items share a step's products by columns (a work-item per column of U, SEQ_ROWS
// accumulators, neighbours reading neighbouring columns) and then its gate math by blocks of VW
// units of a row. A launch per step (the CPU form's kernels, as they were) was slow on a GPU
// for LSTM(128) at batch 64 (a few hundred work-items, each a long chain of float8
// multiply-adds): this form trains it far faster (benchmarks/RESULTS.md, the recurrent layers in
// one launch per sequence). The sums stay in `sums`, global
// memory the work-group alone touches, which its barriers (CLK_GLOBAL_MEM_FENCE) make visible to
// its own work-items (in both forms).
//
// A step's products stream all of U (or U^T) from L2 into the work-group's SM: U is too large to
// stay in one SM, and the rate of that stream bounds the step. Hence whole TYPE4 runs of a row of U
// per load (a warp reads 512 contiguous bytes of it), and the work-group's items shared out as
// (column block, part of k) pairs, whose partial sums meet in local memory; and each work-item
// keeps the first rows of its part of U in registers for the whole loop (KeepRows), so that a
// step streams only the rest (benchmarks/RESULTS.md, the sequence form's products in TYPE4 runs).
#define SEQ_LANES 4

// SequenceSums' blocks of SEQ_LANES columns of n, its parts along the rows of m (the work-items
// over per block, at least one), and the row length of its partial sums.
HELPER int ColumnBlocks(const int n) { return (n + SEQ_LANES - 1) / SEQ_LANES; }
HELPER int Parts(const int n) { return max_int(1, (int)get_local_size(0) / ColumnBlocks(n)); }
HELPER int PartsWidth(const int n) { return ColumnBlocks(n) * SEQ_LANES; }

// Whether SequenceSums reads m's rows (n columns, `stride` apart) in whole, aligned TYPE4s.
HELPER int WholeRuns(const int n, const int stride) { return n % SEQ_LANES == 0 && stride % SEQ_LANES == 0; }

// Whether each work-item has one (column block, part) pair of SequenceSums' and reads whole runs:
// then it keeps the first SEQ_KEPT rows of its part of m in registers across the steps (KeepRows).
// The kernels decide once, before their loops.
HELPER int KeepsRows(const int n, const int stride)
{
    return WholeRuns(n, stride) && ColumnBlocks(n) * Parts(n) <= get_local_size(0);
}

// This work-item's first SEQ_KEPT rows of its part of m (columns c .. c + 3), for SequenceSums
// over `depth` rows: read once before the steps, they stay in registers, and each step streams
// only the rest of m from L2.
HELPER void KeepRows(TYPE4 kept[SEQ_KEPT], __global const TYPE *m, const int stride, const int n, const int depth)
{
    const int groups = ColumnBlocks(n), parts = Parts(n), span = (depth + parts - 1) / parts, q = get_local_id(0);
    const int c = q % groups * SEQ_LANES, k0 = q / groups * span, end = min_int(depth, k0 + span);
    #pragma unroll
    for (int t = 0; t < SEQ_KEPT; t++)
        kept[t] = q < groups * parts && k0 + t < end ? *(const __global TYPE4 *)(m + (k0 + t) * stride + c) : (TYPE4)(0);
}

// For columns c < n of U (forward) or U^T (backward) and the work-group's rows row0 + i:
// sum over k < depth of x[i][k] m[k * stride + c], in parts along k. Returns the parts' count:
// with more than one, part p's sums are in partial[(p * SEQ_ROWS + i) * PartsWidth(n) + c], to
// be added up by PartsSum after this function's barrier; with one (a work-item per column block
// leaves no items over) the sums are written to sums[(row0 + i) * cols + c] directly. With
// `keeps`, the first SEQ_KEPT rows of a work-item's part come from `kept` (KeepRows), not m.
HELPER int SequenceSums(__global TYPE *sums, __global const TYPE **x, __global const TYPE *m, const int stride,
                        const int n, const int depth, const int row0, const int rows, const int cols,
                        __local TYPE *partial, const TYPE4 kept[SEQ_KEPT], const int keeps)
{
    const int items = get_local_size(0), groups = ColumnBlocks(n), parts = Parts(n), span = (depth + parts - 1) / parts;
    const int whole = WholeRuns(n, stride);
    for (int q = get_local_id(0); q < groups * parts; q += items) {
        const int c = q % groups * SEQ_LANES, part = q / groups, end = min_int(depth, (part + 1) * span);
        TYPE acc[SEQ_ROWS][SEQ_LANES];
        #pragma unroll
        for (int i = 0; i < SEQ_ROWS; i++)
            #pragma unroll
            for (int v = 0; v < SEQ_LANES; v++)
                acc[i][v] = 0;
        if (keeps) {
            #pragma unroll
            for (int t = 0; t < SEQ_KEPT; t++) {
                const int k = part * span + t;
                #pragma unroll
                for (int i = 0; i < SEQ_ROWS; i++) {
                    const TYPE h = k < end ? x[i][k] : 0;
                    acc[i][0] += h * kept[t].s0;
                    acc[i][1] += h * kept[t].s1;
                    acc[i][2] += h * kept[t].s2;
                    acc[i][3] += h * kept[t].s3;
                }
            }
        }
        if (whole) {
            #pragma unroll 8
            for (int k = part * span + (keeps ? SEQ_KEPT : 0); k < end; k++) {
                const TYPE4 u = *(const __global TYPE4 *)(m + k * stride + c);
                #pragma unroll
                for (int i = 0; i < SEQ_ROWS; i++) {
                    const TYPE h = x[i][k];
                    acc[i][0] += h * u.s0;
                    acc[i][1] += h * u.s1;
                    acc[i][2] += h * u.s2;
                    acc[i][3] += h * u.s3;
                }
            }
        } else {
            #pragma unroll 8
            for (int k = part * span; k < end; k++) {
                TYPE u[SEQ_LANES];
                #pragma unroll
                for (int v = 0; v < SEQ_LANES; v++)
                    u[v] = c + v < n ? m[k * stride + c + v] : 0;
                #pragma unroll
                for (int i = 0; i < SEQ_ROWS; i++) {
                    const TYPE h = x[i][k];
                    #pragma unroll
                    for (int v = 0; v < SEQ_LANES; v++)
                        acc[i][v] += h * u[v];
                }
            }
        }
        #pragma unroll
        for (int i = 0; i < SEQ_ROWS; i++)
            #pragma unroll
            for (int v = 0; v < SEQ_LANES; v++) {
                if (parts > 1)
                    partial[(part * SEQ_ROWS + i) * PartsWidth(n) + c + v] = acc[i][v];
                else if (row0 + i < rows && c + v < n)
                    sums[(row0 + i) * cols + c + v] = acc[i][v];
            }
    }
    // (the sums, partial or whole, written before any work-item reads them: a barrier whether
    // there are parts or not, as PoCL 3.0's work-group loops, given one that depends on the parts,
    // now and then added them up before all were written)
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    return parts;
}

// Row i's sum for column c, from SequenceSums' parts.
HELPER TYPE PartsSum(__local const TYPE *partial, const int parts, const int n, const int i, const int c)
{
    TYPE sum = 0;
    for (int part = 0; part < parts; part++)
        sum += partial[(part * SEQ_ROWS + i) * PartsWidth(n) + c];
    return sum;
}

// sums[row, c] = h_{s-1}[row, :] U[:, c] for the work-group's rows, every column.
HELPER void SequenceProducts(__global const TYPE *states,     // h, (rows, steps, units)
                             __global const TYPE *initial,    // h_0, (rows, units), read when with_initial
                             __global const TYPE *recurrent,  // U, (units, cols)
                             __global TYPE *sums,             // (capacity, cols)
                             const int row0, const int rows, const int s, const int steps, const int units,
                             const int cols, const int with_initial, __global const int *first, const int masked,
                             __local TYPE *partial, const TYPE4 kept[SEQ_KEPT], const int keeps)
{
    __global const TYPE *h[SEQ_ROWS];
    #pragma unroll
    for (int i = 0; i < SEQ_ROWS; i++) {
        const int row = min_int(row0 + i, rows - 1);
        h[i] = PreviousRow(states, initial, row, s, FirstHeld(first, masked, row), steps, units, with_initial);
    }
    const int depth = s || with_initial || masked ? units : 0;
    const int parts = SequenceSums(sums, h, recurrent, cols, cols, depth, row0, rows, cols, partial, kept,
                                   depth && keeps);
    if (parts > 1)
        for (int q = get_local_id(0); q < SEQ_ROWS * cols; q += get_local_size(0))
            if (row0 + q / cols < rows)
                sums[(row0 + q / cols) * cols + q % cols] = PartsSum(partial, parts, cols, q / cols, q % cols);
    barrier(CLK_GLOBAL_MEM_FENCE);
}

// sums[row, j] = dL/dh_s for the work-group's rows: the gradient from above plus, except at the last
// step, step s + 1's recurrent deltas through U (see StepOutputGradients).
HELPER void SequenceOutputGradients(__global const TYPE *output_gr,   // (rows, steps, units) or (rows, units)
                                    __global const TYPE *state_gr,    // dL/dh_T, (rows, units)
                                    __global const TYPE *step_delta,  // (2, capacity, cols)
                                    __global const TYPE *transposed,  // U^T, (cols, units)
                                    __global TYPE *sums,              // (capacity, cols)
                                    const int row0, const int rows, const int s, const int steps,
                                    const int units, const int cols, const int grads, const int capacity,
                                    __local TYPE *partial, const TYPE4 kept[SEQ_KEPT], const int keeps,
                                    MASK_ARGS)
{
    __global const TYPE *d[SEQ_ROWS];
    #pragma unroll
    for (int i = 0; i < SEQ_ROWS; i++)
        d[i] = step_delta + (((s + 1) & 1) * capacity + min_int(row0 + i, rows - 1)) * cols;
    // (no products at the last step: sums over none, zeros, through SequenceSums all the same, for
    // its barrier)
    const int last = s == steps - 1;
    const int parts = SequenceSums(sums, d, transposed, units, units, last ? 0 : cols, row0, rows, cols, partial,
                                   kept, keeps && !last);
    for (int q = get_local_id(0); q < SEQ_ROWS * units; q += get_local_size(0)) {
        const int i = q / units, row = row0 + i, j = q % units;
        if (row >= rows)
            continue;
        __global const TYPE *output = OutputGradientRow(output_gr, row, s, steps, units, grads, held, first, masked);
        __global const TYPE *state = StateGradientRow(state_gr, row, s, steps, units, grads);
        const TYPE through = parts > 1 ? PartsSum(partial, parts, units, i, j) : sums[row * cols + j];
        sums[row * cols + j] = through + (output ? output[j] : 0) + (state ? state[j] : 0);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
}

// The recurrent activation on VW lanes at once, for the gate math on a block of units, as
// activations/vector.cl (built before this file) does for ACT: its vector form where it has one
// (-D RACT_VECTOR=1), else its scalar function lane by lane. PoCL's scalar exp and tanh cost
// LSTM(128) more than its recurrent products.
#if RACT_VECTOR && HALVED_VEC
DEFINE_HALVES(RactHalves, CAT(RACT, _forward_vector), CAT(RACT, _derivative_vector))
#define RACT_FORWARD_V RactHalvesForward
#define RACT_DERIVATIVE_V RactHalvesDerivative
#elif RACT_VECTOR
#define RACT_FORWARD_V CAT(RACT, _forward_vector)
#define RACT_DERIVATIVE_V CAT(RACT, _derivative_vector)
#else
DEFINE_LANES(RactLanes, RACT_FORWARD, RACT_DERIVATIVE)
#define RACT_FORWARD_V RactLanesForward
#define RACT_DERIVATIVE_V RactLanesDerivative
#endif

// A block of step s's deltas, columns c0 .. + width of row `row`: into the panels that the weight
// gradients read, and (recurrent deltas) row-major into step_delta's half s % 2, for step s - 1.
HELPER void StoreDeltaBlock(__global TYPE *panels, const VEC v, const int row, const int s, const int c0,
                            const int width, const int steps, const int capacity)
{
#if WHOLE_UNITS
    *(__global VEC *)(panels + PanelIndex(row * steps + s, c0, capacity * steps)) = v;
#else
    const TYPE *lanes = (const TYPE *)&v;
    for (int l = 0; l < min_int(width, VW); l++)  // width counts to the gate's end, past this block
        panels[PanelIndex(row * steps + s, c0 + l, capacity * steps)] = lanes[l];
#endif
}

HELPER void StoreStepDeltaBlock(__global TYPE *step_delta, const VEC v, const int row, const int s, const int c0,
                                const int width, const int cols, const int capacity)
{
    StoreBlock(v, step_delta + ((s & 1) * capacity + row) * cols + c0, width);
}

// acc[i] += x[k[i]] d and acc2[i] += x[k[i]] d2: one (row, step) pair's terms of the weight gradients.
HELPER void AddOuterProducts(VEC acc[DW_ROWS], VEC acc2[DW_ROWS], __global const TYPE *x, const int *k, const VEC d,
                             const VEC d2)
{
    #pragma unroll
    for (int i = 0; i < DW_ROWS; i++) {
        const VEC xk = (VEC)(x[k[i]]);
        acc[i] += xk * d;
        acc2[i] += xk * d2;
    }
}

// Rows of `a` ahead of the one being read that a work-item asks for: each (row, step) pair reads
// one line of a row `n` elements long, and at a new page the CPU's prefetcher starts again.
#define AHEAD 8

// The weight gradients: sum over (row, step) of a^T delta, with a the input (mode 0, or 1 read
// reversed: go_backwards) for dL/dW, or the previous step's h for dL/dU: mode 2, where the state
// before a row's first step that holds data is zeros (skipped), mode 3, where it is the initial
// state `initial`. (A padded step's delta is zeros.) A work-item sums DW_ROWS rows of the
// gradient by two column panels (2 VW columns: 2 DW_ROWS accumulators, which each pair of loads of
// delta serves DW_ROWS times). The work-items past the last block of DW_ROWS rows of a
// (get_global_id(1) == blocks) write the bias gradient, sum of delta, into bias_gr[bias_offset + c]
// when with_bias.
//
// A CPU sums every batch row in one launch of a few hundred work-items, which its cores share.
// A GPU needs far more work-items than the result's blocks (LSTM(128)'s recurrent kernel: 1056,
// each walking 4096 (row, step) pairs, dominated a GPU's training step), so its
// form cuts the batch rows into `split_rows` chunks, get_global_id(2), each summing into its own
// slice of a scratch buffer, split_stride apart, that SumRecurrentSplits adds up.
__kernel __attribute__((vec_type_hint(VEC)))
void CalcDeltaWeightsRecurrent(__global const TYPE *a,       // x (rows, steps, n) or h (rows, steps, n)
                               __global const TYPE *initial, // h_0 (rows, n), read in mode 3
                               __global const TYPE *delta,   // panels (cols / VW, capacity * steps, VW)
                               __global TYPE *weights_gr,    // (n, cols), from weights_offset
                               __global TYPE *bias_gr,       // written when with_bias
                               const int rows, const int steps, const int cols, const int n,
                               const int mode, const int with_bias, const int bias_offset,
                               const int stride, const int weights_offset, const int split_rows,
                               const int split_stride, __global const int *first, const int masked)
{
    const int c = get_global_id(0) * 2 * VW, k0 = get_global_id(1) * DW_ROWS;
    if (c >= cols)
        return;
    const int split = get_global_id(2), first_row = split * split_rows;
    const int end_row = min_int(rows, first_row + split_rows);
    weights_gr += split * split_stride + weights_offset;
    bias_gr += split * split_stride;
    // The second panel, when there is one; else the first again, its sums not stored.
    const int width = cols - c, second = width > VW;
    __global const VEC *panel = (__global const VEC *)(delta + c * stride);
    __global const VEC *panel2 = second ? panel + stride : panel;
    if (k0 >= n) {
        if (!with_bias)
            return;
        VEC sum = (VEC)(0), sum2 = (VEC)(0);
        for (int r = first_row * steps; r < end_row * steps; r++) {
            sum += panel[r];
            sum2 += panel2[r];
        }
        StoreBlock(sum, bias_gr + bias_offset + c, width);
        if (second)
            StoreBlock(sum2, bias_gr + bias_offset + c + VW, width - VW);
        return;
    }
    VEC acc[DW_ROWS], acc2[DW_ROWS];
    int k[DW_ROWS];
    #pragma unroll
    for (int i = 0; i < DW_ROWS; i++) {
        acc[i] = acc2[i] = (VEC)(0);
        k[i] = min_int(k0 + i, n - 1);
    }
    for (int row = first_row; row < end_row; row++) {
        const int held_from = FirstHeld(first, masked, row), end = (row + 1) * steps;
        int r = row * steps + (mode == 2 ? held_from + 1 : 0);
        // Mode 3's steps up to the row's first that holds data read the initial state (see PreviousRow).
        for (; mode == 3 && r <= min_int(row * steps + held_from, end - 1); r++)
            AddOuterProducts(acc, acc2, initial + row * n, k, panel[r], panel2[r]);
        // The rest read rows of `a` one after another, forward or (go_backwards) backward.
        const int step = mode == 1 ? -n : n;
        __global const TYPE *x = a + (mode >= 2 ? r - 1 : InputRow(r, steps, mode)) * n;
        for (; r < end; r++, x += step) {
            PREFETCH(x + AHEAD * step + k0);
            AddOuterProducts(acc, acc2, x, k, panel[r], panel2[r]);
        }
    }
    #pragma unroll
    for (int i = 0; i < DW_ROWS; i++)
        if (k0 + i < n) {
            StoreBlock(acc[i], weights_gr + (k0 + i) * cols + c, width);
            if (second)
                StoreBlock(acc2[i], weights_gr + (k0 + i) * cols + c + VW, width - VW);
        }
}

// The sequence form's products over every (row, step) pair (a GPU's): the input product z = x W
// + b, the weight gradients and the input's gradient, as tiles of C (SEQ_TM x SEQ_TN) = A B
// summed over slabs of SEQ_TK depths. A work-group stages a slab of A (SEQ_TK x SEQ_TM, as A^T) and of B (SEQ_TK x SEQ_TN) in
// local memory with loads that walk each operand's contiguous runs, the next slab's loads in
// flight while the current one is summed; a work-item keeps 8 rows by 4 columns of C, which each
// depth's three 16-byte local reads serve 32 multiply-adds. The rows of local memory are padded
// by 4 so that runs stored down them land in different banks. (The CPU form's work-items, each a
// block of columns reading its own operands, left a GPU's load instructions, not its
// multiply-adds, setting the pace: down delta's panels, 32 cache lines a warp's load.)
#define SEQ_TM 64
#define SEQ_TN 128
#define SEQ_TK 16
#define SEQ_THREADS 256
#define SEQ_A_ITEMS (SEQ_TK * SEQ_TM / SEQ_THREADS)
#define SEQ_B_ITEMS (SEQ_TK * SEQ_TN / SEQ_THREADS)
#define SEQ_A_ROW (SEQ_TM + 4)
#define SEQ_B_ROW (SEQ_TN + 4)

// The work-group's start: local memory, this work-item's place, its accumulators (zeros) and the
// registers that carry a slab from global to local memory.
#define SEQ_TILES_BEGIN                                                                          \
    __local TYPE4 As[SEQ_TK * SEQ_A_ROW / 4], Bs[SEQ_TK * SEQ_B_ROW / 4];                        \
    __local TYPE *as = (__local TYPE *)As, *bs = (__local TYPE *)Bs;                             \
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * (SEQ_TN / 4) + tx;         \
    const int c0 = get_group_id(0) * SEQ_TN, c = c0 + tx * 4;                                    \
    TYPE a_next[SEQ_A_ITEMS], b_next[SEQ_B_ITEMS];                                               \
    TYPE4 acc[8];                                                                                \
    _Pragma("unroll")                                                                            \
    for (int i = 0; i < 8; i++)                                                                  \
        acc[i] = (TYPE4)(0)

// acc += the slabs of depths first .. end: FETCH(d0) fills a_next and b_next with this work-item's
// share of the slab from depth d0 (zeros past end); a_at(i) and b_at(i) say where item i goes
// in the slab's local arrays.
#define SEQ_TILES_SUM(first, end, FETCH, a_at, b_at)                                             \
    FETCH(first);                                                                                \
    for (int d0 = (first); d0 < (end); d0 += SEQ_TK) {                                           \
        barrier(CLK_LOCAL_MEM_FENCE); /* the slab before summed by everyone */                  \
        _Pragma("unroll")                                                                        \
        for (int e = 0; e < SEQ_A_ITEMS; e++)                                                    \
            as[a_at(lid + e * SEQ_THREADS)] = a_next[e];                                         \
        _Pragma("unroll")                                                                        \
        for (int e = 0; e < SEQ_B_ITEMS; e++)                                                    \
            bs[b_at(lid + e * SEQ_THREADS)] = b_next[e];                                         \
        barrier(CLK_LOCAL_MEM_FENCE);                                                            \
        if (d0 + SEQ_TK < (end))                                                                 \
            FETCH(d0 + SEQ_TK);                                                                  \
        SlabProducts(As, Bs, tx, ty, acc);                                                       \
    }

// acc[i] += A[p][8 ty + i] B[p][4 tx .. 4 tx + 3] over the slab's depths p.
HELPER void SlabProducts(__local const TYPE4 *As, __local const TYPE4 *Bs, const int tx, const int ty, TYPE4 acc[8])
{
    #pragma unroll
    for (int p = 0; p < SEQ_TK; p++) {
        const TYPE4 x0 = As[(p * SEQ_A_ROW + ty * 8) / 4], x1 = As[(p * SEQ_A_ROW + ty * 8) / 4 + 1];
        const TYPE4 d = Bs[p * SEQ_B_ROW / 4 + tx];
        acc[0] += x0.s0 * d;
        acc[1] += x0.s1 * d;
        acc[2] += x0.s2 * d;
        acc[3] += x0.s3 * d;
        acc[4] += x1.s0 * d;
        acc[5] += x1.s1 * d;
        acc[6] += x1.s2 * d;
        acc[7] += x1.s3 * d;
    }
}

// p[0 .. 3], those at or past `width` read as 0 (all four where width >= 4); p need not be aligned.
HELPER TYPE4 LoadFour(const __global TYPE *p, const int width)
{
    if (width >= 4)
        return vload4(0, p);
    return (TYPE4)(p[0], width > 1 ? p[1] : 0, width > 2 ? p[2] : 0, 0);
}

// v's first `width` lanes (all four where width >= 4) to p, which need not be aligned.
HELPER void StoreFour(const TYPE4 v, __global TYPE *p, const int width)
{
    if (width >= 4) {
        vstore4(v, 0, p);
        return;
    }
    p[0] = v.s0;
    if (width > 1)
        p[1] = v.s1;
    if (width > 2)
        p[2] = v.s2;
}

// The input product's slab from depth (input feature) d0: x's rows by runs of features, W's by
// runs of columns.
HELPER void FetchInputSlab(__global const TYPE *inputs, __global const TYPE *weights, const int d0, const int m0,
                           const int c0, const int total, const int cols, const int n_in, const int steps,
                           const int reverse, const int lid, TYPE a_next[SEQ_A_ITEMS], TYPE b_next[SEQ_B_ITEMS])
{
    #pragma unroll
    for (int e = 0; e < SEQ_A_ITEMS; e++) {
        const int i = lid + e * SEQ_THREADS, d = d0 + i % SEQ_TK, r = m0 + i / SEQ_TK;
        a_next[e] = r < total && d < n_in ? inputs[InputRow(r, steps, reverse) * n_in + d] : 0;
    }
    #pragma unroll
    for (int e = 0; e < SEQ_B_ITEMS; e++) {
        const int i = lid + e * SEQ_THREADS, d = d0 + i / SEQ_TN, c = c0 + i % SEQ_TN;
        b_next[e] = d < n_in && c < cols ? weights[d * cols + c] : 0;
    }
}
#define INPUT_A_AT(i) ((i) % SEQ_TK * SEQ_A_ROW + (i) / SEQ_TK)
#define INPUT_B_AT(i) ((i) / SEQ_TN * SEQ_B_ROW + (i) % SEQ_TN)

// FeedForwardRecurrentInput's products as tiles (see above), with its arguments, which the layer
// binds by name to either: C = x W + b, SEQ_TM processing rows by SEQ_TN columns a work-group; the
// work-groups past the rows' tiles copy U transposed, a block of SEQ_TM rows by SEQ_TN columns each.
__kernel __attribute__((reqd_work_group_size(SEQ_TN / 4, SEQ_THREADS / (SEQ_TN / 4), 1)))
void FeedForwardRecurrentInputTiles(__global const TYPE *inputs,     // (rows, steps, n_in)
                                    __global const TYPE *weights,    // W, (n_in, cols)
                                    __global const TYPE *bias,       // (cols,), read when use_bias
                                    __global TYPE *pre,              // (rows, steps, cols)
                                    __global const TYPE *recurrent,  // U, (units, cols)
                                    __global TYPE *transposed,       // U^T, (cols, units)
                                    const int total, const int cols, const int n_in, const int steps,
                                    const int reverse, const int use_bias, const int units)
{
    SEQ_TILES_BEGIN;
    const int row_tiles = (total + SEQ_TM - 1) / SEQ_TM, m0 = get_group_id(1) * SEQ_TM;
    if (m0 >= row_tiles * SEQ_TM) {
        // (all the loads, then all the stores: in one loop, each store waited for its load)
        const int k0 = m0 - row_tiles * SEQ_TM;
        TYPE block[SEQ_TM * SEQ_TN / SEQ_THREADS];
        #pragma unroll
        for (int e = 0; e < SEQ_TM * SEQ_TN / SEQ_THREADS; e++) {
            const int i = lid + e * SEQ_THREADS, k = k0 + i / SEQ_TN, l = c0 + i % SEQ_TN;
            block[e] = k < units && l < cols ? recurrent[k * cols + l] : 0;
        }
        #pragma unroll
        for (int e = 0; e < SEQ_TM * SEQ_TN / SEQ_THREADS; e++) {
            const int i = lid + e * SEQ_THREADS, k = k0 + i / SEQ_TN, l = c0 + i % SEQ_TN;
            if (k < units && l < cols)
                transposed[l * units + k] = block[e];
        }
        return;
    }
#define FETCH_INPUT(d0) \
    FetchInputSlab(inputs, weights, d0, m0, c0, total, cols, n_in, steps, reverse, lid, a_next, b_next)
    SEQ_TILES_SUM(0, n_in, FETCH_INPUT, INPUT_A_AT, INPUT_B_AT)
    if (c >= cols)
        return;
    const TYPE4 b = use_bias ? LoadFour(bias + c, cols - c) : (TYPE4)(0);
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        const int r = m0 + ty * 8 + i;
        if (r < total)
            StoreFour(acc[i] + b, pre + r * cols + c, cols - c);
    }
}

// Pair r's value of the weight gradients' A^T at column k (k < n: a feature of x or h_{s-1}, as
// CalcDeltaWeightsRecurrent reads it, zeros where it skips the pair; n: 1 where with_bias, so
// that C's row n is the bias gradient).
HELPER TYPE WeightGradientOperand(__global const TYPE *a, __global const TYPE *initial, __global const int *first,
                                  const int r, const int k, const int n, const int steps, const int mode,
                                  const int with_bias, const int masked)
{
    if (k >= n)
        return k == n && with_bias ? 1 : 0;
    if (mode < 2)
        return a[InputRow(r, steps, mode) * n + k];
    const int row = r / steps, s = r % steps, held_from = FirstHeld(first, masked, row);
    if (s > held_from)
        return a[(r - 1) * n + k];
    return mode == 3 ? initial[row * n + k] : 0;
}

// The weight gradients' slab of (row, step) pairs from r0: A's by runs of its columns (a row's
// contiguous values), delta's by runs of a panel's pairs (VW lanes each, contiguous).
HELPER void FetchGradientSlab(__global const TYPE *a, __global const TYPE *initial, __global const TYPE *delta,
                              __global const int *first, const int r0, const int r_end, const int k0, const int c0,
                              const int n, const int steps, const int cols, const int mode, const int with_bias,
                              const int stride, const int masked, const int lid, TYPE a_next[SEQ_A_ITEMS],
                              TYPE b_next[SEQ_B_ITEMS])
{
    #pragma unroll
    for (int e = 0; e < SEQ_A_ITEMS; e++) {
        const int i = lid + e * SEQ_THREADS, r = r0 + i / SEQ_TM;
        a_next[e] = r < r_end ? WeightGradientOperand(a, initial, first, r, k0 + i % SEQ_TM, n, steps, mode, with_bias,
                                                      masked) : 0;
    }
    #pragma unroll
    for (int e = 0; e < SEQ_B_ITEMS; e++) {
        const int i = lid + e * SEQ_THREADS, r = r0 + i / VW % SEQ_TK, c = c0 + i / (VW * SEQ_TK) * VW + i % VW;
        b_next[e] = r < r_end && c < cols ? delta[PanelIndex(r, c, stride)] : 0;
    }
}
#define GRADIENT_A_AT(i) ((i) / SEQ_TM * SEQ_A_ROW + (i) % SEQ_TM)
#define GRADIENT_B_AT(i) ((i) / VW % SEQ_TK * SEQ_B_ROW + (i) / (VW * SEQ_TK) * VW + (i) % VW)

// CalcDeltaWeightsRecurrent's sums as tiles (see above), with its arguments, into the same slices:
// C (n x cols) = A^T delta over the split's (row, step) pairs, C's rows k0 .. + SEQ_TM by SEQ_TN
// columns a work-group.
__kernel __attribute__((reqd_work_group_size(SEQ_TN / 4, SEQ_THREADS / (SEQ_TN / 4), 1)))
void CalcDeltaWeightsRecurrentTiles(__global const TYPE *a, __global const TYPE *initial, __global const TYPE *delta,
                                    __global TYPE *weights_gr, __global TYPE *bias_gr, const int rows, const int steps,
                                    const int cols, const int n, const int mode, const int with_bias,
                                    const int bias_offset, const int stride, const int weights_offset,
                                    const int split_rows, const int split_stride, __global const int *first,
                                    const int masked)
{
    SEQ_TILES_BEGIN;
    const int k0 = get_group_id(1) * SEQ_TM, split = get_group_id(2);
    const int r_first = split * split_rows * steps, r_end = min_int(rows, (split + 1) * split_rows) * steps;
#define FETCH_GRADIENT(r0) FetchGradientSlab(a, initial, delta, first, r0, r_end, k0, c0, n, steps, cols, mode, \
                                             with_bias, stride, masked, lid, a_next, b_next)
    SEQ_TILES_SUM(r_first, r_end, FETCH_GRADIENT, GRADIENT_A_AT, GRADIENT_B_AT)
    if (c >= cols)
        return;
    weights_gr += split * split_stride + weights_offset;
    bias_gr += split * split_stride + bias_offset;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        const int k = k0 + ty * 8 + i;
        if (k < n)
            StoreFour(acc[i], weights_gr + k * cols + c, cols - c);
        else if (k == n && with_bias)
            StoreFour(acc[i], bias_gr + c, cols - c);
    }
}

// The input gradient's slab of depths (delta's columns) from d0: delta's by runs of a panel's
// pairs (VW lanes each, contiguous), W's rows by runs of columns.
HELPER void FetchInputGradientSlab(__global const TYPE *delta, __global const TYPE *weights, const int d0, const int m0,
                                   const int k0, const int total, const int cols, const int n_in, const int stride,
                                   const int lid, TYPE a_next[SEQ_A_ITEMS], TYPE b_next[SEQ_B_ITEMS])
{
    #pragma unroll
    for (int e = 0; e < SEQ_A_ITEMS; e++) {
        const int i = lid + e * SEQ_THREADS, r = m0 + i / VW % SEQ_TM, c = d0 + i / (VW * SEQ_TM) * VW + i % VW;
        a_next[e] = r < total && c < cols ? delta[PanelIndex(r, c, stride)] : 0;
    }
    #pragma unroll
    for (int e = 0; e < SEQ_B_ITEMS; e++) {
        const int i = lid + e * SEQ_THREADS, c = d0 + i % SEQ_TK, k = k0 + i / SEQ_TK;
        b_next[e] = c < cols && k < n_in ? weights[k * cols + c] : 0;
    }
}
#define INPUT_GRADIENT_A_AT(i) (((i) / (VW * SEQ_TM) * VW + (i) % VW) * SEQ_A_ROW + (i) / VW % SEQ_TM)
#define INPUT_GRADIENT_B_AT(i) ((i) % SEQ_TK * SEQ_B_ROW + (i) / SEQ_TK)

// CalcHiddenGradientRecurrentInput's products as tiles (see above), with its arguments: C (total x
// n_in) = delta W^T, SEQ_TM processing rows by SEQ_TN input features a work-group, each row
// written to the input time step it read.
__kernel __attribute__((reqd_work_group_size(SEQ_TN / 4, SEQ_THREADS / (SEQ_TN / 4), 1)))
void CalcHiddenGradientRecurrentInputTiles(__global const TYPE *delta,   // panels (cols / VW, capacity * steps, VW)
                                           __global const TYPE *weights, // W, (n_in, cols)
                                           __global TYPE *input_gr,      // (rows, steps, n_in)
                                           const int cols, const int n_in, const int steps, const int reverse,
                                           const int stride, const int total)
{
    SEQ_TILES_BEGIN;
    const int m0 = get_group_id(1) * SEQ_TM, k = c;  // (this work-item's input features k .. k + 3)
#define FETCH_INPUT_GRADIENT(d0) \
    FetchInputGradientSlab(delta, weights, d0, m0, c0, total, cols, n_in, stride, lid, a_next, b_next)
    SEQ_TILES_SUM(0, cols, FETCH_INPUT_GRADIENT, INPUT_GRADIENT_A_AT, INPUT_GRADIENT_B_AT)
    if (k >= n_in)
        return;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        const int r = m0 + ty * 8 + i;
        if (r < total)
            StoreFour(acc[i], input_gr + InputRow(r, steps, reverse) * n_in + k, n_in - k);
    }
}

// The GPU form's weight gradients, added up over the splits of CalcDeltaWeightsRecurrent: slice
// rows 0 .. n_in - 1 are dL/dW, row n_in its bias, then units rows of dL/dU and one of the
// recurrent bias (GRU's). A work-item per element, coalesced along the columns.
__kernel void SumRecurrentSplits(__global const TYPE *splits,     // (splits, n_in + 1 + units + 1, cols)
                                 __global TYPE *kernel_gr,        // (n_in, cols)
                                 __global TYPE *recurrent_gr,     // (units, cols)
                                 __global TYPE *bias_gr,          // (cols,) or GRU's (2, cols)
                                 const int count, const int n_in, const int units, const int cols,
                                 const int use_bias, const int recurrent_bias)
{
    const int c = get_global_id(0), k = get_global_id(1), height = n_in + units + 2;
    if (c >= cols)
        return;
    TYPE sum = 0;
    for (int split = 0; split < count; split++)
        sum += splits[(split * height + k) * cols + c];
    if (k < n_in)
        kernel_gr[k * cols + c] = sum;
    else if (k == n_in) {
        if (use_bias)
            bias_gr[c] = sum;
    } else if (k <= n_in + units)
        recurrent_gr[(k - n_in - 1) * cols + c] = sum;
    else if (recurrent_bias)
        bias_gr[cols + c] = sum;
}

// dL/dx = delta W^T, written to the input time step each processing row read: RM input features
// of HG_ROWS processing rows per work-item, each a dot product of rows along the columns. Each
// step of the columns loads HG_ROWS blocks of deltas (contiguous in their panel) and RM of W, for
// RM x HG_ROWS multiply-adds.
__kernel __attribute__((vec_type_hint(VEC)))
void CalcHiddenGradientRecurrentInput(__global const TYPE *delta,   // panels (cols / VW, capacity * steps, VW)
                                      __global const TYPE *weights, // W, (n_in, cols)
                                      __global TYPE *input_gr,      // (rows, steps, n_in)
                                      const int cols, const int n_in, const int steps, const int reverse,
                                      const int stride, const int total)
{
    const int d0 = get_global_id(0) * RM, r0 = get_global_id(1) * HG_ROWS;
    if (d0 >= n_in || r0 >= total)
        return;
    __global const TYPE *g[HG_ROWS];  // (rows past total read the last again, and are not stored)
    __global const TYPE *w[RM];
    VEC acc[HG_ROWS][RM];
    #pragma unroll
    for (int j = 0; j < HG_ROWS; j++)
        g[j] = delta + min_int(r0 + j, total - 1) * VW;
    #pragma unroll
    for (int i = 0; i < RM; i++) {
        w[i] = weights + min_int(d0 + i, n_in - 1) * cols;
        #pragma unroll
        for (int j = 0; j < HG_ROWS; j++)
            acc[j][i] = (VEC)(0);
    }
    for (int c = 0; c < cols; c += VW) {
        VEC v[HG_ROWS];
        #pragma unroll
        for (int j = 0; j < HG_ROWS; j++)
            v[j] = *(const __global VEC *)(g[j] + c * stride);
        #pragma unroll
        for (int i = 0; i < RM; i++) {
            const VEC wi = LoadBlock(w[i] + c, cols - c);
            #pragma unroll
            for (int j = 0; j < HG_ROWS; j++)
                acc[j][i] += v[j] * wi;
        }
    }
    for (int j = 0; j < HG_ROWS && r0 + j < total; j++) {
        __global TYPE *out = input_gr + InputRow(r0 + j, steps, reverse) * n_in;
        for (int i = 0; i < RM && d0 + i < n_in; i++)
            out[d0 + i] = SumLanes(acc[j][i]);
    }
}

// dL/dh_0, the initial state's gradient, once the backward steps are done: step 0's recurrent
// deltas through U (which step_delta's half 0 and U^T hold, as for StepOutputGradients), plus
// GRU's direct path z_0 dL/dh_0, which its step 0 left in `carry` (add_carry). LSTM's dL/dc_0
// needs no launch: it is the carry its step 0 wrote. A work-item per (unit, batch row).
__kernel void CalcInitialStateGradient(__global const TYPE *step_delta,  // (2, capacity, cols)
                                       __global const TYPE *transposed,  // U^T, (cols, units)
                                       __global const TYPE *carry,       // (rows, units), read when add_carry
                                       __global TYPE *initial_gr,        // dL/dh_0, (rows, units)
                                       const int units, const int cols, const int add_carry)
{
    const int j = get_global_id(0), row = get_global_id(1);
    if (j >= units)
        return;
    __global const TYPE *d = step_delta + row * cols;  // half 0: capacity rows from the start
    TYPE sum = add_carry ? carry[row * units + j] : 0;
    for (int c = 0; c < cols; c++)
        sum += d[c] * transposed[c * units + j];
    initial_gr[row * units + j] = sum;
}

// The CPU form asks, after a block's gate math, for the lines the block's gate math at the next
// step will read (every gate's z of its units) and, backward, write (the deltas' panels): each
// (row, step) row of them is touched once a step, a sequence apart from the row's next, so no
// prefetcher follows them, and the gate math waited on memory for them (its loads were the
// loops' hottest instructions under perf). Asked for a step ahead, they arrive while the next
// step's products run. Backward, each cell's <CELL>_PREFETCH_STATES(r, j) asks for the rows of its
// states that its block at processing row r (the next step's) reads and this step's did not: the
// state before it (LSTM's c_{s-1}, GRU's h_{s-1}) or its own (SimpleRNN's h_s). (LSTM's load of
// c_{s-1} was a quarter of its backward loop's samples under perf on Intel's runtime, Zen 4.)
HELPER void PrefetchStep(__global const TYPE *pre, __global const TYPE *delta, const int row, const int s,
                         const int j, const int steps, const int units, const int cols, const int capacity)
{
    const int r = row * steps + s;
    for (int c = j; c < cols; c += units) {
        PREFETCH(pre + r * cols + c);
        if (delta)
            PREFETCH_WRITE(delta + PanelIndex(r, c, capacity * steps));
    }
}

// Every cell's four kernels run these loops over the steps and over its (row, units block)
// pairs; the cells differ in their gates' count (cols = gates * units) and in the block function
// that BLOCK(row, s, j) calls for `row`'s units j .. + VW at step s. In the step form (a CPU's) a
// work-item owns RB rows by SV vectors of units; in the sequence form (a GPU's) a work-group owns
// SEQ_ROWS rows and all of their units (see SequenceProducts).
#define STEP_FORWARD(cols, BLOCK)                                                                     \
    const int j0 = get_global_id(0) / GATES * SV * VW, row0 = get_global_id(1) * RB;                  \
    if (j0 >= units)                                                                                  \
        return;                                                                                       \
    for (int s = 0; s < steps; s++) {                                                                 \
        RecurrentProducts(states, initial_h, recurrent, sums, row0, rows, s, steps, units, j0, cols,   \
                          with_initial, first, masked);                                               \
        for (int q = get_global_id(0) % GATES; q < RB * SV; q += GATES) { /* (row, vector) pairs */  \
            const int row = row0 + q / SV, j = j0 + q % SV * VW;                                      \
            if (row < rows && j < units) {                                                            \
                BLOCK(row, s, j);                                                                     \
                if (s + 1 < steps)                                                                    \
                    PrefetchStep(pre, 0, row, s + 1, j, steps, units, cols, 0);                       \
            }                                                                                         \
        }                                                                                             \
        barrier(CLK_GLOBAL_MEM_FENCE); /* h_s whole before step s + 1's products read it */          \
    }

#define SEQUENCE_FORWARD(cols, BLOCK)                                                                 \
    __local TYPE partial[SEQ_ITEMS * SEQ_ROWS * SEQ_LANES];                                           \
    TYPE4 kept[SEQ_KEPT];                                                                             \
    const int keeps = KeepsRows(cols, cols);                                                          \
    if (keeps)                                                                                        \
        KeepRows(kept, recurrent, cols, cols, units);                                                 \
    const int row0 = get_group_id(0) * SEQ_ROWS, blocks = (units + VW - 1) / VW;                      \
    for (int s = 0; s < steps; s++) {                                                                 \
        SequenceProducts(states, initial_h, recurrent, sums, row0, rows, s, steps, units, cols,        \
                         with_initial, first, masked, partial, kept, keeps);                          \
        for (int q = get_local_id(0); q < SEQ_ROWS * blocks; q += get_local_size(0))                  \
            if (row0 + q / blocks < rows)                                                             \
                BLOCK(row0 + q / blocks, s, q % blocks * VW);                                         \
        barrier(CLK_GLOBAL_MEM_FENCE);                                                                \
    }

#define STEP_BACKWARD(cols, BLOCK, PREFETCH_STATES)                                                   \
    const int j0 = get_global_id(0) * SV * VW, row0 = get_global_id(1) * RB;                          \
    if (j0 >= units)                                                                                  \
        return;                                                                                       \
    for (int s = steps - 1; s >= 0; s--) {                                                            \
        StepOutputGradients(output_gr, state_gr, step_delta, transposed, sums, row0, rows, s, j0,      \
                            steps, units, cols, grads, capacity, held, first, masked);                \
        for (int q = 0; q < RB * SV; q++) {                                                           \
            const int row = row0 + q / SV, j = j0 + q % SV * VW;                                      \
            if (row < rows && j < units) {                                                            \
                BLOCK(row, s, j);                                                                     \
                if (s > 0)                                                                            \
                    PrefetchStep(pre, delta, row, s - 1, j, steps, units, cols, capacity);            \
                if (s > 1)                                                                            \
                    PREFETCH_STATES(row * steps + s - 1, j);                                          \
            }                                                                                         \
        }                                                                                             \
        barrier(CLK_GLOBAL_MEM_FENCE); /* step s's deltas whole before step s - 1 reads them */      \
    }

#define SEQUENCE_BACKWARD(cols, BLOCK)                                                                \
    __local TYPE partial[SEQ_ITEMS * SEQ_ROWS * SEQ_LANES];                                           \
    TYPE4 kept[SEQ_KEPT];                                                                             \
    const int keeps = KeepsRows(units, units);                                                        \
    if (keeps)                                                                                        \
        KeepRows(kept, transposed, units, units, cols);                                               \
    const int row0 = get_group_id(0) * SEQ_ROWS, blocks = (units + VW - 1) / VW;                      \
    for (int s = steps - 1; s >= 0; s--) {                                                            \
        SequenceOutputGradients(output_gr, state_gr, step_delta, transposed, sums, row0, rows, s,      \
                                steps, units, cols, grads, capacity, partial, kept, keeps, held, first,    \
                                masked);                                                              \
        for (int q = get_local_id(0); q < SEQ_ROWS * blocks; q += get_local_size(0))                  \
            if (row0 + q / blocks < rows)                                                             \
                BLOCK(row0 + q / blocks, s, q % blocks * VW);                                         \
        barrier(CLK_GLOBAL_MEM_FENCE);                                                                \
    }

// A cell's four kernels, FeedForward<NAME>, FeedForward<NAME>Sequence, CalcHiddenGradient<NAME> and
// CalcHiddenGradient<NAME>Sequence, from its CELL_FORWARD_ARGS, CELL_BACKWARD_ARGS, block macros and
// CELL_PREFETCH_STATES.
#define RECURRENT_KERNELS(NAME, CELL, cols)                                                           \
    __kernel __attribute__((vec_type_hint(VEC))) void FeedForward##NAME(CELL##_FORWARD_ARGS)          \
    {                                                                                                 \
        STEP_FORWARD(cols, CELL##_FORWARD_BLOCK)                                                      \
    }                                                                                                 \
    __kernel void FeedForward##NAME##Sequence(CELL##_FORWARD_ARGS)                                    \
    {                                                                                                 \
        SEQUENCE_FORWARD(cols, CELL##_FORWARD_BLOCK)                                                  \
    }                                                                                                 \
    __kernel __attribute__((vec_type_hint(VEC))) void CalcHiddenGradient##NAME(CELL##_BACKWARD_ARGS)  \
    {                                                                                                 \
        STEP_BACKWARD(cols, CELL##_BACKWARD_BLOCK, CELL##_PREFETCH_STATES)                            \
    }                                                                                                 \
    __kernel void CalcHiddenGradient##NAME##Sequence(CELL##_BACKWARD_ARGS)                            \
    {                                                                                                 \
        SEQUENCE_BACKWARD(cols, CELL##_BACKWARD_BLOCK)                                                \
    }
