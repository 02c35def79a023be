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

#define RACT_FORWARD CAT(RACT, _forward)
#define RACT_DERIVATIVE CAT(RACT, _derivative)

// The products over all time steps keep a block of VW columns (a VEC, one or two SIMD registers)
// by RM rows of the result per work-item, so that each load feeds several multiply-adds. Columns
// need not be a multiple of VW: the last block reads and writes only its `width` columns.

// Written for PoCL 3.0 (LLVM 14), pip's default, as dense.cl is: it defines `inline` away and calls
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

HELPER VEC LoadBlock(__global const TYPE *p, const int width)
{
    if (width >= VW)
        return ((ulong)p & (sizeof(VEC) - 1)) ? VLOAD(0, p) : *(const __global VEC *)p;
    TYPE lanes[VW];
    for (int l = 0; l < VW; l++)
        lanes[l] = l < width ? p[l] : (TYPE)0;
    return VLOAD(0, lanes);
}

HELPER void StoreBlock(VEC v, __global TYPE *p, const int width)
{
    if (width >= VW) {
        VSTORE(v, 0, p);
        return;
    }
    TYPE lanes[VW];
    VSTORE(v, 0, lanes);
    for (int l = 0; l < width; l++)
        p[l] = lanes[l];
}

HELPER TYPE SumLanes(VEC v)  // VW = 8
{
    const TYPE4 t = v.lo + v.hi;
    return (t.s0 + t.s1) + (t.s2 + t.s3);
}

// z = x W + b for every (row, step) of the batch at once, before the time loop: the recurrent
// steps then only add h_{t-1} U. A work-item per VW columns x RM processing rows.
__kernel void FeedForwardRecurrentInput(__global const TYPE *inputs,  // (rows, steps, n_in)
                                        __global const TYPE *weights, // W, (n_in, cols)
                                        __global const TYPE *bias,    // (cols,), read when use_bias
                                        __global TYPE *pre,           // (rows, steps, cols)
                                        const int total, const int cols, const int n_in, const int steps,
                                        const int reverse, const int use_bias)
{
    const int c = get_global_id(0) * VW, r0 = get_global_id(1) * RM;
    if (c >= cols || r0 >= total)
        return;
    const int width = cols - c;
    const VEC b = use_bias ? LoadBlock(bias + c, width) : (VEC)(0);
    VEC acc[RM];
    __global const TYPE *x[RM];
    #pragma unroll
    for (int i = 0; i < RM; i++) {
        acc[i] = b;
        x[i] = inputs + InputRow(min(r0 + i, total - 1), steps, reverse) * n_in;
    }
    for (int d = 0; d < n_in; d++) {
        const VEC w = LoadBlock(weights + d * cols + c, width);
        #pragma unroll
        for (int i = 0; i < RM; i++)
            acc[i] += x[i][d] * w;
    }
    for (int i = 0; i < RM && r0 + i < total; i++)
        StoreBlock(acc[i], pre + (r0 + i) * cols + c, width);
}

// The step kernels: a work-item per (unit j, RB batch rows from row0 = get_global_id(1) * RB), so
// that each element of U it reads serves RB rows.

// acc[i] = sum over k of h_{s-1}[row0 + i, k] U[k, c], a gate's recurrent input for the
// work-item's rows; 0 at the first step, whose state is zeros.
HELPER void RecurrentProducts(__global const TYPE *states,     // h, (rows, steps, units)
                              __global const TYPE *recurrent,  // U, (units, cols)
                              const int row0, const int rows, const int s, const int steps, const int units,
                              const int c, const int cols, TYPE *acc)
{
    __global const TYPE *h[RB];
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        acc[i] = 0;
        h[i] = states + (min(row0 + i, rows - 1) * steps + max(s - 1, 0)) * units;
    }
    if (!s)
        return;
    for (int k = 0; k < units; k++) {
        const TYPE w = recurrent[k * cols + c];
        #pragma unroll
        for (int i = 0; i < RB; i++)
            acc[i] += h[i][k] * w;
    }
}

// dh[i] = dL/dh_s for (row0 + i, unit j): the output gradient (every step's with return_sequences,
// else the last step's) plus, except at the last step, step s + 1's recurrent deltas through U:
// sum over c of delta_rec[s + 1, c] U[j, c]. Those are read from `step_delta`, where each step
// also writes its recurrent deltas row-major (half s % 2; see StoreStepDelta), so that the
// product reads contiguous rows rather than a lane of every panel.
HELPER void StepOutputGradients(__global const TYPE *output_gr,   // (rows, steps, units) or (rows, units)
                                __global const TYPE *step_delta,  // (2, capacity, cols)
                                __global const TYPE *recurrent,   // (units, cols)
                                const int row0, const int rows, const int s, const int j, const int steps,
                                const int units, const int cols, const int sequences, const int capacity,
                                TYPE *dh)
{
    __global const TYPE *d[RB];
    VEC acc[RB];
    #pragma unroll
    for (int i = 0; i < RB; i++) {
        const int row = min(row0 + i, rows - 1);
        dh[i] = sequences ? output_gr[(row * steps + s) * units + j]
                          : (s == steps - 1 ? output_gr[row * units + j] : (TYPE)0);
        d[i] = step_delta + (((s + 1) & 1) * capacity + row) * cols;
        acc[i] = (VEC)(0);
    }
    if (s == steps - 1)
        return;
    __global const TYPE *w = recurrent + j * cols;
    for (int c = 0; c < cols; c += VW) {
        const VEC u = LoadBlock(w + c, cols - c);
        #pragma unroll
        for (int i = 0; i < RB; i++)
            acc[i] += LoadBlock(d[i] + c, cols - c) * u;
    }
    #pragma unroll
    for (int i = 0; i < RB; i++)
        dh[i] += SumLanes(acc[i]);
}

// Step s's delta for (row, column c): into the panels that the weight gradients read.
HELPER void StoreDelta(__global TYPE *panels, const TYPE value, const int row, const int s, const int c,
                       const int steps, const int capacity)
{
    panels[PanelIndex(row * steps + s, c, capacity * steps)] = value;
}

// ... and a recurrent delta also row-major into step_delta's half s % 2, for step s - 1.
HELPER void StoreStepDelta(__global TYPE *step_delta, const TYPE value, const int row, const int s, const int c,
                           const int cols, const int capacity)
{
    step_delta[((s & 1) * capacity + row) * cols + c] = value;
}

// The weight gradients: sum over (row, step) of a^T delta, with a the input (mode 0, or 1 read
// reversed: go_backwards) for dL/dW, or the previous step's h (mode 2; the first step's is the
// zero state) for dL/dU. The work-items past the last block of RM rows of a (get_global_id(1) ==
// blocks) write the bias gradient, sum of delta, into bias_gr[bias_offset + c] when with_bias.
__kernel void CalcDeltaWeightsRecurrent(__global const TYPE *a,       // x (rows, steps, n) or h (rows, steps, n)
                                        __global const TYPE *delta,   // panels (cols / VW, capacity * steps, VW)
                                        __global TYPE *weights_gr,    // (n, cols)
                                        __global TYPE *bias_gr,       // written when with_bias
                                        const int rows, const int steps, const int cols, const int n,
                                        const int mode, const int with_bias, const int bias_offset,
                                        const int stride)
{
    const int c = get_global_id(0) * VW, k0 = get_global_id(1) * RM;
    if (c >= cols)
        return;
    const int width = cols - c, first = mode == 2 ? 1 : 0;
    __global const TYPE *panel = delta + c * stride;
    if (k0 >= n) {
        if (!with_bias)
            return;
        VEC sum = (VEC)(0);
        for (int r = 0; r < rows * steps; r++)
            sum += ((const __global VEC *)panel)[r];
        StoreBlock(sum, bias_gr + bias_offset + c, width);
        return;
    }
    VEC acc[RM];
    int k[RM];
    #pragma unroll
    for (int i = 0; i < RM; i++) {
        acc[i] = (VEC)(0);
        k[i] = min(k0 + i, n - 1);
    }
    for (int row = 0; row < rows; row++)
        for (int s = first; s < steps; s++) {
            const int r = row * steps + s;
            __global const TYPE *x = a + (mode == 2 ? r - 1 : InputRow(r, steps, mode)) * n;
            const VEC d = ((const __global VEC *)panel)[r];
            #pragma unroll
            for (int i = 0; i < RM; i++)
                acc[i] += x[k[i]] * d;
        }
    for (int i = 0; i < RM && k0 + i < n; i++)
        StoreBlock(acc[i], weights_gr + (k0 + i) * cols + c, width);
}

// dL/dx = delta W^T, written to the input time step each processing row read: RM input features
// of one processing row per work-item, each a dot product of rows along the columns.
__kernel void CalcHiddenGradientRecurrentInput(__global const TYPE *delta,   // panels (cols / VW, capacity * steps, VW)
                                               __global const TYPE *weights, // W, (n_in, cols)
                                               __global TYPE *input_gr,      // (rows, steps, n_in)
                                               const int cols, const int n_in, const int steps, const int reverse,
                                               const int stride)
{
    const int d0 = get_global_id(0) * RM, r = get_global_id(1);
    if (d0 >= n_in)
        return;
    __global const TYPE *g = delta + r * VW;
    __global const TYPE *w[RM];
    VEC acc[RM];
    #pragma unroll
    for (int i = 0; i < RM; i++) {
        acc[i] = (VEC)(0);
        w[i] = weights + min(d0 + i, n_in - 1) * cols;
    }
    for (int c = 0; c < cols; c += VW) {
        const VEC v = *(const __global VEC *)(g + c * stride);
        #pragma unroll
        for (int i = 0; i < RM; i++)
            acc[i] += v * LoadBlock(w[i] + c, cols - c);
    }
    __global TYPE *out = input_gr + InputRow(r, steps, reverse) * n_in;
    for (int i = 0; i < RM && d0 + i < n_in; i++)
        out[d0 + i] = SumLanes(acc[i]);
}
