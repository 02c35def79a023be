// Dense layer: z = x W + b, y = f(z), for a whole mini-batch per launch. Products are written
// "acc += a * b", which OpenCL compilers contract to FMA; mad() on double8 crashes LLVM 14 (PoCL 3.0).
// Layout: x (rows, n_in); W (n_in, units_p) and b (units_p) with units_p = units rounded up to
// VW and zero padding, so that every load of W, b or delta is a whole VW-wide vector.
// Each work-item owns a block of outputs (FF_RM rows x VW columns for the forward product,
// DW_RM x VW for the weight gradient, HG_RM x HG_RN for the hidden gradient; the sizes come from
// the autotuner, clnet/cl/tuning.py): on a CPU that block lives in SIMD registers; rows past
// the end are clamped on load and skipped on store, so no size needs to be a multiple of anything.

__kernel void PerceptronFeedForward(__global const TYPE *inputs,   // x (rows, n_in)
                                    __global const TYPE *weights,  // W (n_in, units_p)
                                    __global const TYPE *bias,     // b (units_p)
                                    __global TYPE *pre,            // z (rows, units)
                                    __global TYPE *outputs,        // y = f(z) (rows, units)
                                    const int rows, const int n_in, const int units, const int units_p,
                                    const TYPE a, const TYPE b)
{
    const int col = get_global_id(0) * VW;
    const int row = get_global_id(1) * FF_RM;
    if (col >= units || row >= rows)
        return;
    VEC acc[FF_RM];
    const __global TYPE *x[FF_RM];
    for (int r = 0; r < FF_RM; r++) {
        acc[r] = (VEC)(0);
        x[r] = inputs + min(row + r, rows - 1) * n_in;
    }
    const __global TYPE *w = weights + col;
    int k = 0;
    // Four steps of k at a time: one TYPE4 load per row of x instead of four scalar loads.
    for (; k + 4 <= n_in; k += 4, w += 4 * units_p) {
        const VEC w0 = VLOAD(0, w), w1 = VLOAD(0, w + units_p),
                  w2 = VLOAD(0, w + 2 * units_p), w3 = VLOAD(0, w + 3 * units_p);
        for (int r = 0; r < FF_RM; r++) {
            const TYPE4 xv = vload4(0, x[r] + k);
            acc[r] += (VEC)(xv.s0) * w0;
            acc[r] += (VEC)(xv.s1) * w1;
            acc[r] += (VEC)(xv.s2) * w2;
            acc[r] += (VEC)(xv.s3) * w3;
        }
    }
    for (; k < n_in; k++, w += units_p) {
        const VEC wk = VLOAD(0, w);
        for (int r = 0; r < FF_RM; r++)
            acc[r] += (VEC)(x[r][k]) * wk;
    }
    const VEC bv = VLOAD(0, bias + col);
    const int width = min(VW, units - col);
    for (int r = 0; r < FF_RM && row + r < rows; r++) {
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

// dL/dW = x^T delta: (n_in, rows) x (rows, units_p). DW_RM input rows x VW columns per work-item.
__kernel void CalcDeltaWeights(__global const TYPE *inputs,       // x (rows, n_in)
                               __global const TYPE *delta,        // (rows, units_p)
                               __global TYPE *delta_weights,      // dL/dW (n_in, units_p)
                               const int rows, const int n_in, const int units_p)
{
    const int col = get_global_id(1) * VW;
    const int i0 = get_global_id(0) * DW_RM;
    if (col >= units_p || i0 >= n_in)
        return;
    VEC acc[DW_RM];
    int in[DW_RM];
    for (int r = 0; r < DW_RM; r++) {
        acc[r] = (VEC)(0);
        in[r] = min(i0 + r, n_in - 1);
    }
    for (int m = 0; m < rows; m++) {
        const VEC d = VLOAD(0, delta + m * units_p + col);
        const __global TYPE *x = inputs + m * n_in;
        for (int r = 0; r < DW_RM; r++)
            acc[r] += (VEC)(x[in[r]]) * d;
    }
    for (int r = 0; r < DW_RM && i0 + r < n_in; r++)
        VSTORE(acc[r], 0, delta_weights + (i0 + r) * units_p + col);
}

// dL/dx = delta W^T: (rows, units_p) x (units_p, n_in). Both operands are read along units,
// VW at a time, and each of the HG_RM x HG_RN outputs is a vector dot product summed at the end.
__kernel void CalcHiddenGradient(__global const TYPE *delta,     // (rows, units_p)
                                 __global const TYPE *weights,   // W (n_in, units_p)
                                 __global TYPE *input_gr,        // dL/dx (rows, n_in)
                                 const int rows, const int n_in, const int units_p)
{
    const int i0 = get_global_id(0) * HG_RN;
    const int row = get_global_id(1) * HG_RM;
    if (i0 >= n_in || row >= rows)
        return;
    VEC acc[HG_RM][HG_RN];
    const __global TYPE *d[HG_RM];
    const __global TYPE *w[HG_RN];
    for (int r = 0; r < HG_RM; r++) {
        d[r] = delta + min(row + r, rows - 1) * units_p;
        for (int j = 0; j < HG_RN; j++)
            acc[r][j] = (VEC)(0);
    }
    for (int j = 0; j < HG_RN; j++)
        w[j] = weights + min(i0 + j, n_in - 1) * units_p;
    for (int k = 0; k < units_p; k += VW) {
        VEC wv[HG_RN];
        for (int j = 0; j < HG_RN; j++)
            wv[j] = VLOAD(0, w[j] + k);
        for (int r = 0; r < HG_RM; r++) {
            const VEC dv = VLOAD(0, d[r] + k);
            for (int j = 0; j < HG_RN; j++)
                acc[r][j] += dv * wv[j];
        }
    }
    for (int r = 0; r < HG_RM && row + r < rows; r++)
        for (int j = 0; j < HG_RN && i0 + j < n_in; j++)
            input_gr[(row + r) * n_in + i0 + j] = HSUM(acc[r][j]);
}
