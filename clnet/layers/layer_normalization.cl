// LayerNormalization over the features of axis `axis`: a sample is seen as (outer, features,
// inner), so each of the rows * outer * inner groups normalises `features` elements at stride
// `inner`, starting at ln_start(group). On a GPU a work-group of a power of two no larger than
// LOCAL_SIZE items handles a group and reduces in local memory (with WARP_SHUFFLES a warp, see
// below); on a CPU (built with ROWS) a work-item (see LN_ROW_LOOP).

// WARP_SHUFFLES (NVIDIA GPUs, float): a warp per group instead, 8 to a work-group of 256, its
// sums added across the warp's 32 lanes by shuffles (common.cl): no local memory, no barriers.
// The tiny GPT's 9 norms of (8192, 256) ran measurably faster this way, forward and input
// gradient, than before in groups of 64 with group_reduce's 7 barriers; one barrier and every
// item adding the 64 partials itself was slower still (benchmarks/RESULTS.md, LayerNormalization
// by warps).
#ifndef ROWS
#define ROWS 0
#endif
#if WARP_SHUFFLES
#define GROUP_SUM(scratch, v) lanes_reduce(v, 32, 0)
#define GROUP_INDEX (get_global_id(0) / 32)
#define GROUP_ITEM (get_local_id(0) % 32)
#define GROUP_ITEMS 32
#else
#define GROUP_SUM(scratch, v) group_reduce(scratch, v, 0)
#define GROUP_INDEX get_group_id(0)
#define GROUP_ITEM get_local_id(0)
#define GROUP_ITEMS get_local_size(0)
#endif

inline int ln_start(const int group, const int features, const int inner)
{
    const int o = group / inner;
    return o * features * inner + (group - o * inner);
}

// ROWS, the CPU form of the two kernels below: a work-item per group, no local memory and no
// barriers, in work-groups the runtime sizes. A work-group per group, one item each, paid the
// runtime's cost of a work-group per row (2048 of them in a tiny GPT block's norm), and its sums
// ran one element at a time, each add waiting for the one before; where the features are
// contiguous (inner == 1) they run eight at a time on a vector's lanes, eight chains at once, the
// rest (the tail, or all of them at another stride) one by one.
#define LN_ROW_LOOP(n, whole, simd, scalar)                        \
    {                                                              \
        int n = 0;                                                 \
        for (; (whole) && n + 8 <= features; n += 8) { simd; }     \
        for (; n < features; n++) { scalar; }                      \
    }
// The kernels with that loop are declared LN_ROW_KERNEL: vec_type_hint(TYPE8) says a work-item
// already holds vectors, so that Intel's CPU compiler does not vectorize across work-items as well
// (the tiny GPT's norms ran several times longer on Intel's runtime than on pip's PoCL without it;
// benchmarks/RESULTS.md, the update kernels' hint on Intel's runtime).
#define LN_ROW_KERNEL __kernel __attribute__((vec_type_hint(TYPE8)))

// x rounded to 16 bits, to nearest even, as a 16-bit policy's products read their operands
// (products/sixteen_bit.cl, whose PTX conversions round the same way): `format` 1 bfloat16
// (the float's upper half, rounded; a NaN stays one), 2 float16.
inline void store_sixteen_bits(const float x, __global ushort *y, const int format)
{
    if (format == 2) {
        vstore_half_rte(x, 0, (__global half *)y);
        return;
    }
    const uint u = as_uint(x);
    *y = isnan(x) ? 0x7fc0u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// Where y's element i (feature n of `group`) lies in a 16-bit copy (FeedForwardLayerNorm's
// outputs16): at its reader's row i / columns16 and column i % columns16, which are the group and n
// where the groups are the reader's rows (a norm over the last axis), found then without a division
// an element (with one, the larger GPT's norms ran markedly longer: RESULTS.md).
#define SIXTEEN_AT(i, group, n)                                                             \
    (inner == 1 && features == columns16 ? atom_index(group, n, atom_rows16)                 \
                                         : atom_index((i) / columns16, (i) % columns16, atom_rows16))

// y = (x - mean) inv_std gamma + beta, with the group's mean and biased variance (as Keras);
// the mean and inv_std are kept for the backward pass. With `sixteen` (1 bfloat16, 2 float16),
// y in those 16 bits into outputs16 too: the next layer's input as its 16-bit products read it
// (Layer.writes_sixteen_bits), which then rounds none itself; that reader's matrix has columns16
// columns, stored as atoms (products/sixteen_bit_layout.cl, atom_rows16 of them down).
LN_ROW_KERNEL void FeedForwardLayerNorm(__global const TYPE *inputs,   // (rows, outer, features, inner)
                                        __global TYPE *outputs,        // (rows, outer, features, inner)
                                        __global ushort *outputs16,    // the same in 16 bits, with sixteen
                                        __global const TYPE *gamma,    // (features,)
                                        __global const TYPE *beta,     // (features,)
                                        __global TYPE *group_mean,     // (rows * outer * inner,)
                                        __global TYPE *group_inv_std,  // (rows * outer * inner,)
                                        const int groups, const int features, const int inner, const TYPE epsilon,
                                        const int sixteen, const int columns16, const int atom_rows16)
{
#if ROWS
    const int group = get_global_id(0);
    if (group >= groups)
        return;
    const int start = ln_start(group, features, inner);
    const __global TYPE *x = inputs + start;
    __global TYPE *y = outputs + start;
    const int rows8 = inner == 1;
    TYPE8 sums = (TYPE8)(0);
    TYPE sum = 0;
    LN_ROW_LOOP(n, rows8, sums += Load8(x + n), sum += x[n * inner])
    const TYPE mean = (Sum8(sums) + sum) / features;
    TYPE8 squares8 = (TYPE8)(0);
    TYPE squares = 0;
    LN_ROW_LOOP(n, rows8, const TYPE8 d = Load8(x + n) - mean; squares8 += d * d,
                const TYPE d = x[n * inner] - mean; squares += d * d)
    const TYPE inv_std = 1 / sqrt((Sum8(squares8) + squares) / features + epsilon);
    LN_ROW_LOOP(n, rows8, Store8((Load8(x + n) - mean) * inv_std * Load8(gamma + n) + Load8(beta + n), y + n),
                y[n * inner] = (x[n * inner] - mean) * inv_std * gamma[n] + beta[n])
    for (int n = 0; sixteen && n < features; n++) {
        const int i = start + n * inner;
        store_sixteen_bits(y[n * inner], outputs16 + SIXTEEN_AT(i, group, n), sixteen);
    }
    group_mean[group] = mean;
    group_inv_std[group] = inv_std;
#else
    __local TYPE scratch[LOCAL_SIZE];
    const int group = GROUP_INDEX, lid = GROUP_ITEM, step = GROUP_ITEMS;
    if (WARP_SHUFFLES && group >= groups)  // a whole warp past the last group (a work-group's are whole)
        return;
    const int start = ln_start(group, features, inner);
    TYPE sum = 0;
    for (int n = lid; n < features; n += step)
        sum += inputs[start + n * inner];
    const TYPE mean = GROUP_SUM(scratch, sum) / features;
    TYPE squares = 0;
    for (int n = lid; n < features; n += step) {
        const TYPE d = inputs[start + n * inner] - mean;
        squares += d * d;
    }
    const TYPE inv_std = 1 / sqrt(GROUP_SUM(scratch, squares) / features + epsilon);
    for (int n = lid; n < features; n += step) {
        const int i = start + n * inner;
        const TYPE y = (inputs[i] - mean) * inv_std * gamma[n] + beta[n];
        outputs[i] = y;
        if (sixteen)
            store_sixteen_bits(y, outputs16 + SIXTEEN_AT(i, group, n), sixteen);
    }
    if (lid == 0) {
        group_mean[group] = mean;
        group_inv_std[group] = inv_std;
    }
#endif
}

// dx = inv_std (g - mean(g) - x^ mean(g x^)) per group, with g = dy gamma and x^ = (x - mean) inv_std;
// with `adding`, dx + add_to: the gradient that the input's other readers gave (Layer.adds_to_input_grad).
LN_ROW_KERNEL void CalcHiddenGradientLayerNorm(__global const TYPE *inputs,         // x, (rows, outer, features, inner)
                                               __global const TYPE *output_gr,      // dL/dy, same shape
                                               __global TYPE *input_gr,             // dL/dx, same shape
                                               __global const TYPE *add_to,         // same shape, if adding
                                               __global const TYPE *gamma,          // (features,)
                                               __global const TYPE *group_mean,     // (rows * outer * inner,)
                                               __global const TYPE *group_inv_std,  // (rows * outer * inner,)
                                               const int groups, const int features, const int inner, const int adding)
{
#if ROWS
    const int group = get_global_id(0);
    if (group >= groups)
        return;
    const int start = ln_start(group, features, inner);
    const __global TYPE *x = inputs + start, *dy = output_gr + start;
    const TYPE mean = group_mean[group], inv_std = group_inv_std[group];
    const int rows8 = inner == 1;
    TYPE8 g_sums = (TYPE8)(0), g_xhat_sums = (TYPE8)(0);
    TYPE g_sum = 0, g_xhat_sum = 0;
    LN_ROW_LOOP(n, rows8,
                const TYPE8 g = Load8(dy + n) * Load8(gamma + n); g_sums += g; g_xhat_sums += g * (Load8(x + n) - mean),
                const TYPE g = dy[n * inner] * gamma[n]; g_sum += g; g_xhat_sum += g * (x[n * inner] - mean))
    const TYPE g_mean = (Sum8(g_sums) + g_sum) / features;
    const TYPE g_xhat_mean = (Sum8(g_xhat_sums) + g_xhat_sum) * inv_std / features;
    __global TYPE *dx = input_gr + start;
    LN_ROW_LOOP(n, rows8,
                TYPE8 d = inv_std * (Load8(dy + n) * Load8(gamma + n) - g_mean - (Load8(x + n) - mean) * inv_std * g_xhat_mean);
                Store8(adding ? d + Load8(add_to + start + n) : d, dx + n),
                const TYPE d = inv_std * (dy[n * inner] * gamma[n] - g_mean - (x[n * inner] - mean) * inv_std * g_xhat_mean);
                dx[n * inner] = adding ? d + add_to[start + n * inner] : d)
#else
    __local TYPE scratch[LOCAL_SIZE];
    const int group = GROUP_INDEX, lid = GROUP_ITEM, step = GROUP_ITEMS;
    if (WARP_SHUFFLES && group >= groups)  // a whole warp past the last group (a work-group's are whole)
        return;
    const int start = ln_start(group, features, inner);
    const TYPE mean = group_mean[group], inv_std = group_inv_std[group];
    TYPE g_sum = 0, g_xhat_sum = 0;
    for (int n = lid; n < features; n += step) {
        const int i = start + n * inner;
        const TYPE g = output_gr[i] * gamma[n];
        g_sum += g;
        g_xhat_sum += g * (inputs[i] - mean) * inv_std;
    }
    const TYPE g_mean = GROUP_SUM(scratch, g_sum) / features;
    const TYPE g_xhat_mean = GROUP_SUM(scratch, g_xhat_sum) / features;
    for (int n = lid; n < features; n += step) {
        const int i = start + n * inner;
        const TYPE dx = inv_std * (output_gr[i] * gamma[n] - g_mean - (inputs[i] - mean) * inv_std * g_xhat_mean);
        input_gr[i] = adding ? dx + add_to[i] : dx;
    }
#endif
}
#undef LN_ROW_LOOP

// Two (slices, lanes) arrays in local memory: each lane's slices added into slice 0's, halving
// the slices each round (a fixed order: the same sums on every run); an item's own entries are
// last written by itself.
inline void add_slices(__local TYPE *a, __local TYPE *b, const int own, const int slice, const int slices,
                       const int lanes)
{
    for (int stride = slices / 2; stride > 0; stride /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (slice < stride) {
            a[own] += a[own + stride * lanes];
            b[own] += b[own + stride * lanes];
        }
    }
}

// dgamma[n] = sum over groups of dy x^, dbeta[n] = sum of dy, on a GPU in two launches. First a
// work-group of (lanes, slices) items per block of `lanes` features and chunk of `chunk` groups:
// item (l, s) walks the chunk's groups s, s + slices, ... for feature block + l, so that a warp
// reads neighbouring features of a group at once, and the slices' sums are added in local memory
// into `partials`; then SumChunksLayerNorm adds the chunks. A work-group per feature over all the
// groups read 4 bytes to a warp's 32-byte sector, which made a launch slow for the tiny GPT's
// (8192, 256) norms on a GPU.
__kernel void CalcDeltaWeightsLayerNorm(__global const TYPE *inputs,         // x, (rows, outer, features, inner)
                                        __global const TYPE *output_gr,      // dL/dy, same shape
                                        __global const TYPE *group_mean,     // (groups,)
                                        __global const TYPE *group_inv_std,  // (groups,)
                                        __global TYPE *partials,             // (chunks, 2, features): dy x^, dy
                                        const int groups, const int features, const int inner, const int chunk)
{
    __local TYPE dy_xhat[LOCAL_SIZE], dy[LOCAL_SIZE];
    const int lane = get_local_id(0), slice = get_local_id(1);
    const int lanes = get_local_size(0), slices = get_local_size(1);  // slices: a power of two
    const int n = get_global_id(0), c = get_group_id(1), own = slice * lanes + lane;
    const int end = min_int(groups, (c + 1) * chunk);
    TYPE dy_sum = 0, dy_xhat_sum = 0;
    if (n < features)
        for (int group = c * chunk + slice; group < end; group += slices) {
            const int i = ln_start(group, features, inner) + n * inner;
            const TYPE g = output_gr[i];
            dy_sum += g;
            dy_xhat_sum += g * (inputs[i] - group_mean[group]) * group_inv_std[group];
        }
    dy[own] = dy_sum;
    dy_xhat[own] = dy_xhat_sum;
    add_slices(dy_xhat, dy, own, slice, slices, lanes);
    if (slice == 0 && n < features) {  // its own sums, last written by itself
        partials[(2 * c) * features + n] = dy_xhat[own];
        partials[(2 * c + 1) * features + n] = dy[own];
    }
}

// gamma_gr, beta_gr = the sums over CalcDeltaWeightsLayerNorm's chunks, by work-groups of (lanes,
// slices) items as that kernel's: item (l, s) adds chunks s, s + slices, ... of feature block +
// l, and the slices' sums are added in local memory (in a fixed order: the same sums every run).
// A work-item per feature walking all the chunks waited on 2 x 64 dependent loads (measured on
// the tiny GPT's norms; benchmarks/RESULTS.md, the norm's chunk sums in work-groups).
__kernel void SumChunksLayerNorm(__global const TYPE *partials,  // (chunks, 2, features)
                                 __global TYPE *gamma_gr,        // (features,)
                                 __global TYPE *beta_gr,         // (features,)
                                 const int chunks, const int features)
{
    __local TYPE dgamma[LOCAL_SIZE], dbeta[LOCAL_SIZE];
    const int lane = get_local_id(0), slice = get_local_id(1);
    const int lanes = get_local_size(0), slices = get_local_size(1);  // slices: a power of two
    const int n = get_global_id(0), own = slice * lanes + lane;
    TYPE dgamma_sum = 0, dbeta_sum = 0;
    if (n < features)
        for (int c = slice; c < chunks; c += slices) {
            dgamma_sum += partials[(2 * c) * features + n];
            dbeta_sum += partials[(2 * c + 1) * features + n];
        }
    dgamma[own] = dgamma_sum;
    dbeta[own] = dbeta_sum;
    add_slices(dgamma, dbeta, own, slice, slices, lanes);
    if (slice == 0 && n < features) {  // its own sums, last written by itself
        gamma_gr[n] = dgamma[own];
        beta_gr[n] = dbeta[own];
    }
}

// The CPU form of the weight gradient, in one launch: a work-item per eight features n0..n0+7, on the
// lanes of a TYPE8, walking the groups with no reduction across work-items. A work-item per
// feature walked its column one element per row (slow for the tiny GPT's five norms on PoCL
// 3.0); with the features contiguous (inner = 1) a group's eight are one load.
LN_ROW_KERNEL void CalcDeltaWeightsLayerNormLanes(__global const TYPE *inputs,         // x, (rows, outer, features, inner)
                                                  __global const TYPE *output_gr,      // dL/dy, same shape
                                                  __global const TYPE *group_mean,     // (groups,)
                                                  __global const TYPE *group_inv_std,  // (groups,)
                                                  __global TYPE *gamma_gr,             // (features,)
                                                  __global TYPE *beta_gr,              // (features,)
                                                  const int groups, const int features, const int inner)
{
    const int n0 = get_global_id(0) * 8, width = min_int(8, features - n0);
    TYPE8 dy_sum = (TYPE8)(0), dy_xhat_sum = (TYPE8)(0);
    for (int group = 0; group < groups; group++) {
        const int start = ln_start(group, features, inner) + n0 * inner;
        TYPE8 dy, x;
        if (inner == 1 && width == 8) {
            dy = Load8(output_gr + start);
            x = Load8(inputs + start);
        } else {
            TYPE t[8], u[8];
            for (int l = 0; l < 8; l++) {
                t[l] = l < width ? output_gr[start + l * inner] : 0;
                u[l] = l < width ? inputs[start + l * inner] : 0;
            }
            dy = VLOAD8(0, t);
            x = VLOAD8(0, u);
        }
        dy_sum += dy;
        dy_xhat_sum += dy * ((x - group_mean[group]) * group_inv_std[group]);
    }
    TYPE t[8], u[8];
    VSTORE8(dy_xhat_sum, 0, t);
    VSTORE8(dy_sum, 0, u);
    for (int l = 0; l < width; l++) {
        gamma_gr[n0 + l] = t[l];
        beta_gr[n0 + l] = u[l];
    }
}
