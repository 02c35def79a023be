// Elementwise ops (ops/elementwise.py): one kernel for every op of one, two or three operands,
// with numpy's broadcasting. The op is a kernel argument, not a build option, so that one program
// serves every op (a PoCL build is slow, a switch on a uniform value costs nothing measurable
// next to the memory traffic). The op codes are build options defined from elementwise.py's
// table (OP_ADD, ...), so Python and OpenCL cannot disagree on them.
//
// Geometry: the output is (rows, width); its sample axes, collapsed (adjacent axes that every
// operand reads alike are one), are described by `dims`, GEOMETRY ints per axis:
//   extent, stride of operand 0, 1, 2 (0 where the operand is broadcast along it), output stride.
// An operand's row stride is `batch0/1/2`: its sample size, or 0 for a constant (no batch axis).
#define GEOMETRY 5
#define EXTENT(k) dims[GEOMETRY * (k)]
#define STRIDE(k, n) dims[GEOMETRY * (k) + 1 + (n)]
#define OUT_STRIDE(k) dims[GEOMETRY * (k) + 4]

// Keras's approximate GELU (keras.ops.gelu's default): x (1 + tanh(√(2/π) (x + 0.044715 x³))) / 2.
#define GELU_C ((TYPE)0.7978845608028654)
#define GELU_K ((TYPE)0.044715)

inline TYPE apply(const int op, const TYPE x0, const TYPE x1, const TYPE x2, const TYPE a, const TYPE b)
{
    switch (op) {
    case OP_ADD: return x0 + x1;
    case OP_SUBTRACT: return x0 - x1;
    case OP_MULTIPLY: return x0 * x1;
    case OP_DIVIDE: return x0 / x1;
    case OP_POWER: return pow(x0, x1);
    case OP_MINIMUM: return fmin(x0, x1);
    case OP_MAXIMUM: return fmax(x0, x1);
    case OP_GREATER: return x0 > x1 ? 1 : 0;
    case OP_GREATER_EQUAL: return x0 >= x1 ? 1 : 0;
    case OP_LESS: return x0 < x1 ? 1 : 0;
    case OP_LESS_EQUAL: return x0 <= x1 ? 1 : 0;
    case OP_EQUAL: return x0 == x1 ? 1 : 0;
    case OP_NOT_EQUAL: return x0 != x1 ? 1 : 0;
    case OP_WHERE: return x0 != 0 ? x1 : x2;
    case OP_NEGATIVE: return -x0;
    case OP_EXP: return exp(x0);
    case OP_LOG: return log(x0);
    case OP_SQRT: return sqrt(x0);
    case OP_ABS: return fabs(x0);
    case OP_SQUARE: return x0 * x0;
    case OP_TANH: return tanh(x0);
    case OP_SIGMOID: return 1 / (1 + exp(-x0));
    case OP_RELU: return fmax(x0, (TYPE)0);
    case OP_GELU: return x0 * (1 + tanh(GELU_C * (x0 + GELU_K * x0 * x0 * x0))) / 2;
    case OP_GELU_ERF: return x0 * (1 + erf(x0 * (TYPE)M_SQRT1_2)) / 2;
    case OP_CLIP: return fmin(fmax(x0, a), b);
    case OP_ONES_LIKE: return 1;
    case OP_ZEROS_LIKE: return 0;
    }
    return NAN;  // an op code this switch lacks: visible in any test
}

// d y / d x_which, given the operands and the output y (ops whose derivative is cheaper from y:
// exp, sqrt, tanh, sigmoid, division, power in its exponent).
inline TYPE derivative(const int op, const int which, const TYPE x0, const TYPE x1, const TYPE x2, const TYPE y,
                       const TYPE a, const TYPE b)
{
    switch (op) {
    case OP_ADD: return 1;
    case OP_SUBTRACT: return which == 0 ? 1 : -1;
    case OP_MULTIPLY: return which == 0 ? x1 : x0;
    case OP_DIVIDE: return which == 0 ? 1 / x1 : -y / x1;
    case OP_POWER: return which == 0 ? x1 * pow(x0, x1 - 1) : y * log(x0);
    // A tie gives the whole gradient to the first operand, as TensorFlow's minimum and maximum.
    case OP_MINIMUM: return (which == 0) == (x0 <= x1) ? 1 : 0;
    case OP_MAXIMUM: return (which == 0) == (x0 >= x1) ? 1 : 0;
    case OP_WHERE: return which == 0 ? 0 : (which == 1) == (x0 != 0) ? 1 : 0;  // none to the condition
    case OP_NEGATIVE: return -1;
    case OP_EXP: return y;
    case OP_LOG: return 1 / x0;
    case OP_SQRT: return (TYPE)0.5 / y;
    case OP_ABS: return x0 > 0 ? 1 : x0 < 0 ? -1 : 0;
    case OP_SQUARE: return 2 * x0;
    case OP_TANH: return 1 - y * y;
    case OP_SIGMOID: return y * (1 - y);
    case OP_RELU: return x0 > 0 ? 1 : 0;
    case OP_GELU: {
        const TYPE t = tanh(GELU_C * (x0 + GELU_K * x0 * x0 * x0));
        return (1 + t) / 2 + x0 * (1 - t * t) * GELU_C * (1 + 3 * GELU_K * x0 * x0) / 2;
    }
    case OP_GELU_ERF:
        return (1 + erf(x0 * (TYPE)M_SQRT1_2)) / 2 + x0 * exp(-x0 * x0 / 2) * (TYPE)(M_2_SQRTPI * M_SQRT1_2 / 2);
    case OP_CLIP: return x0 >= a && x0 <= b ? 1 : 0;
    }
    return 0;  // comparisons, ones_like, zeros_like: no gradient
}

// y (rows, width) = op(x0, x1, x2), each operand read where `dims` maps the output element.
__kernel void Elementwise(const int op, __global const TYPE *x0, __global const TYPE *x1, __global const TYPE *x2,
                          __global TYPE *y, __global const int *dims, const int axes, const int width,
                          const int batch0, const int batch1, const int batch2, const TYPE a, const TYPE b,
                          const int total)
{
    const int i = get_global_id(0);  // i < rows * width
    if (i >= total)
        return;
    const int row = i / width;
    int j = i - row * width;
    long o0 = (long)row * batch0, o1 = (long)row * batch1, o2 = (long)row * batch2;
    for (int k = axes - 1; k >= 0; k--) {  // innermost axis first
        const int e = j % EXTENT(k);
        j /= EXTENT(k);
        o0 += e * STRIDE(k, 0);
        o1 += e * STRIDE(k, 1);
        o2 += e * STRIDE(k, 2);
    }
    y[i] = apply(op, x0[o0], x1[o1], x2[o2], a, b);
}

// dL/d(operand `which`), (rows, its width): for each of its elements, the sum over the output
// elements it was broadcast to of dL/dy * dy/dx. Axes along which the operand is broadcast
// (stride 0) are the ones summed over; the others locate the element. An operand without a batch
// axis (a weight: row stride 0) has one row, summed over the output's `rows_summed` rows (1 for
// any other operand). No atomics, no second pass.
__kernel void ElementwiseGradient(const int op, const int which, __global const TYPE *grad,
                                  __global const TYPE *x0, __global const TYPE *x1, __global const TYPE *x2,
                                  __global const TYPE *y, __global TYPE *dx, __global const int *dims,
                                  const int axes, const int width, const int batch0, const int batch1,
                                  const int batch2, const TYPE a, const TYPE b, const int own_width,
                                  const int rows_summed, const int total)
{
    const int i = get_global_id(0);  // i < rows * own_width
    if (i >= total)
        return;
    const int row = i / own_width;
    int j = i - row * own_width;
    long out = (long)row * width, o0 = (long)row * batch0, o1 = (long)row * batch1, o2 = (long)row * batch2;
    int summed = 1;  // output elements per element of the operand
    for (int k = axes - 1; k >= 0; k--) {
        if (STRIDE(k, which) == 0) {
            summed *= EXTENT(k);
            continue;
        }
        const int e = j % EXTENT(k);
        j /= EXTENT(k);
        out += e * OUT_STRIDE(k);
        o0 += e * STRIDE(k, 0);
        o1 += e * STRIDE(k, 1);
        o2 += e * STRIDE(k, 2);
    }
    TYPE sum = 0;
    for (int r = 0; r < rows_summed; r++) {
        for (int m = 0; m < summed; m++) {
            long p = out + (long)r * width, p0 = o0 + (long)r * batch0, p1 = o1 + (long)r * batch1,
                 p2 = o2 + (long)r * batch2;
            int q = m;
            for (int k = axes - 1; k >= 0; k--) {
                if (STRIDE(k, which) != 0)
                    continue;
                const int e = q % EXTENT(k);
                q /= EXTENT(k);
                p += e * OUT_STRIDE(k);
                p0 += e * STRIDE(k, 0);
                p1 += e * STRIDE(k, 1);
                p2 += e * STRIDE(k, 2);
            }
            sum += grad[p] * derivative(op, which, x0[p0], x1[p1], x2[p2], y[p], a, b);
        }
    }
    dx[i] = sum;
}
