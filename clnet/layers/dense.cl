// Dense layer: z = x W + b, y = f(z), for a whole mini-batch per launch.
// Layout: x (rows, n_in); W (n_in, units_p) and b (units_p) with units_p = units rounded up to
// VW and zero padding, so that every load of W, b or delta is a whole VW-wide vector.
// Each work-item owns a block of outputs (RM rows x VW columns, or RM x RN for the hidden
// gradient): on a CPU that block lives in SIMD registers; rows past the end are clamped on
// load and skipped on store, so no size needs to be a multiple of anything.

__kernel void PerceptronFeedForward(__global const TYPE *inputs,   // x (rows, n_in)
                                    __global const TYPE *weights,  // W (n_in, units_p)
                                    __global const TYPE *bias,     // b (units_p)
                                    __global TYPE *pre,            // z (rows, units)
                                    __global TYPE *outputs,        // y = f(z) (rows, units)
                                    const int rows, const int n_in, const int units, const int units_p,
                                    const TYPE a, const TYPE b)
{
    const int col = get_global_id(0) * VW;
    const int row = get_global_id(1) * RM;
    if (col >= units || row >= rows)
        return;
    VEC acc[RM];
    const __global TYPE *x[RM];
    for (int r = 0; r < RM; r++) {
        acc[r] = (VEC)(0);
        x[r] = inputs + min(row + r, rows - 1) * n_in;
    }
    const __global TYPE *w = weights + col;
    for (int k = 0; k < n_in; k++, w += units_p) {
        const VEC wk = VLOAD(0, w);
        for (int r = 0; r < RM; r++)
            acc[r] = mad((VEC)(x[r][k]), wk, acc[r]);
    }
    const VEC bv = VLOAD(0, bias + col);
    const int width = min(VW, units - col);
    for (int r = 0; r < RM && row + r < rows; r++) {
        TYPE z[VW];
        VSTORE(acc[r] + bv, 0, z);
        const int o = (row + r) * units + col;
        for (int j = 0; j < width; j++) {
            pre[o + j] = z[j];
            outputs[o + j] = ACT_FORWARD(z[j], a, b);
        }
    }
}

// delta = dL/dz = dL/dy * f'(z) (skipped when a loss already gave dL/dz), padded to units_p
// with zeros (ToVect4 reads the padding of dL/dy as 0); and the bias gradient, the column
// sums of delta. Four columns per work-item.
__kernel void CalcDeltaBias(__global const TYPE *output_gr,   // dL/dy (rows, units)
                            __global const TYPE *outputs,     // y (rows, units)
                            __global const TYPE *pre,         // z (rows, units)
                            __global TYPE *delta,             // dL/dz (rows, units_p)
                            __global TYPE *delta_bias,        // dL/db (units_p)
                            const int rows, const int units, const int units_p,
                            const TYPE a, const TYPE b, const int apply_derivative)
{
    const int col = get_global_id(0) * 4;
    TYPE4 sum = (TYPE4)(0);
    for (int m = 0; m < rows; m++) {
        TYPE4 g = ToVect4(output_gr + m * units, col, units);
        if (apply_derivative) {
            const TYPE4 y = ToVect4(outputs + m * units, col, units);
            const TYPE4 z = ToVect4(pre + m * units, col, units);
            g *= (TYPE4)(ACT_DERIVATIVE(y.s0, z.s0, a, b), ACT_DERIVATIVE(y.s1, z.s1, a, b),
                         ACT_DERIVATIVE(y.s2, z.s2, a, b), ACT_DERIVATIVE(y.s3, z.s3, a, b));
        }
        vstore4(g, 0, delta + m * units_p + col);
        sum += g;
    }
    vstore4(sum, 0, delta_bias + col);
}

// dL/dW = x^T delta: (n_in, rows) x (rows, units_p). RM input rows x VW columns per work-item.
__kernel void CalcDeltaWeights(__global const TYPE *inputs,       // x (rows, n_in)
                               __global const TYPE *delta,        // (rows, units_p)
                               __global TYPE *delta_weights,      // dL/dW (n_in, units_p)
                               const int rows, const int n_in, const int units_p)
{
    const int col = get_global_id(0) * VW;
    const int i0 = get_global_id(1) * RM;
    if (col >= units_p || i0 >= n_in)
        return;
    VEC acc[RM];
    int in[RM];
    for (int r = 0; r < RM; r++) {
        acc[r] = (VEC)(0);
        in[r] = min(i0 + r, n_in - 1);
    }
    for (int m = 0; m < rows; m++) {
        const VEC d = VLOAD(0, delta + m * units_p + col);
        const __global TYPE *x = inputs + m * n_in;
        for (int r = 0; r < RM; r++)
            acc[r] = mad((VEC)(x[in[r]]), d, acc[r]);
    }
    for (int r = 0; r < RM && i0 + r < n_in; r++)
        VSTORE(acc[r], 0, delta_weights + (i0 + r) * units_p + col);
}

// dL/dx = delta W^T: (rows, units_p) x (units_p, n_in). Both operands are read along units,
// VW at a time, and each of the RM x RN outputs is a vector dot product summed at the end.
__kernel void CalcHiddenGradient(__global const TYPE *delta,     // (rows, units_p)
                                 __global const TYPE *weights,   // W (n_in, units_p)
                                 __global TYPE *input_gr,        // dL/dx (rows, n_in)
                                 const int rows, const int n_in, const int units_p)
{
    const int i0 = get_global_id(0) * RN;
    const int row = get_global_id(1) * RM;
    if (i0 >= n_in || row >= rows)
        return;
    VEC acc[RM][RN];
    const __global TYPE *d[RM];
    const __global TYPE *w[RN];
    for (int r = 0; r < RM; r++) {
        d[r] = delta + min(row + r, rows - 1) * units_p;
        for (int j = 0; j < RN; j++)
            acc[r][j] = (VEC)(0);
    }
    for (int j = 0; j < RN; j++)
        w[j] = weights + min(i0 + j, n_in - 1) * units_p;
    for (int k = 0; k < units_p; k += VW) {
        VEC wv[RN];
        for (int j = 0; j < RN; j++)
            wv[j] = VLOAD(0, w[j] + k);
        for (int r = 0; r < RM; r++) {
            const VEC dv = VLOAD(0, d[r] + k);
            for (int j = 0; j < RN; j++)
                acc[r][j] = mad(dv, wv[j], acc[r][j]);
        }
    }
    for (int r = 0; r < RM && row + r < rows; r++)
        for (int j = 0; j < RN && i0 + j < n_in; j++)
            input_gr[(row + r) * n_in + i0 + j] = HSUM(acc[r][j]);
}
