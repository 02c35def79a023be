// LayerNormalization over the features of axis `axis`: a sample is seen as (outer, features,
// inner), so each of the rows * outer * inner groups normalises `features` elements at stride
// `inner`, starting at ln_start(group). A work-group of a power of two no larger than LOCAL_SIZE
// items handles a group (or, for the weight gradients, a feature) and reduces in local memory.

inline int ln_start(const int group, const int features, const int inner)
{
    const int o = group / inner;
    return o * features * inner + (group - o * inner);
}

// y = (x - mean) inv_std gamma + beta, with the group's mean and biased variance (as Keras);
// the mean and inv_std are kept for the backward pass.
__kernel void FeedForwardLayerNorm(__global const TYPE *inputs,   // (rows, outer, features, inner)
                                   __global TYPE *outputs,        // (rows, outer, features, inner)
                                   __global const TYPE *gamma,    // (features,)
                                   __global const TYPE *beta,     // (features,)
                                   __global TYPE *group_mean,     // (rows * outer * inner,)
                                   __global TYPE *group_inv_std,  // (rows * outer * inner,)
                                   const int features, const int inner, const TYPE epsilon)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int group = get_group_id(0), lid = get_local_id(0), step = get_local_size(0);
    const int start = ln_start(group, features, inner);
    TYPE sum = 0;
    for (int n = lid; n < features; n += step)
        sum += inputs[start + n * inner];
    const TYPE mean = group_reduce(scratch, sum, 0) / features;
    TYPE squares = 0;
    for (int n = lid; n < features; n += step) {
        const TYPE d = inputs[start + n * inner] - mean;
        squares += d * d;
    }
    const TYPE inv_std = 1 / sqrt(group_reduce(scratch, squares, 0) / features + epsilon);
    for (int n = lid; n < features; n += step) {
        const int i = start + n * inner;
        outputs[i] = (inputs[i] - mean) * inv_std * gamma[n] + beta[n];
    }
    if (lid == 0) {
        group_mean[group] = mean;
        group_inv_std[group] = inv_std;
    }
}

// dx = inv_std (g - mean(g) - x^ mean(g x^)) per group, with g = dy gamma and x^ = (x - mean) inv_std.
__kernel void CalcHiddenGradientLayerNorm(__global const TYPE *inputs,         // x, (rows, outer, features, inner)
                                          __global const TYPE *output_gr,      // dL/dy, same shape
                                          __global TYPE *input_gr,             // dL/dx, same shape
                                          __global const TYPE *gamma,          // (features,)
                                          __global const TYPE *group_mean,     // (rows * outer * inner,)
                                          __global const TYPE *group_inv_std,  // (rows * outer * inner,)
                                          const int features, const int inner)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int group = get_group_id(0), lid = get_local_id(0), step = get_local_size(0);
    const int start = ln_start(group, features, inner);
    const TYPE mean = group_mean[group], inv_std = group_inv_std[group];
    TYPE g_sum = 0, g_xhat_sum = 0;
    for (int n = lid; n < features; n += step) {
        const int i = start + n * inner;
        const TYPE g = output_gr[i] * gamma[n];
        g_sum += g;
        g_xhat_sum += g * (inputs[i] - mean) * inv_std;
    }
    const TYPE g_mean = group_reduce(scratch, g_sum, 0) / features;
    const TYPE g_xhat_mean = group_reduce(scratch, g_xhat_sum, 0) / features;
    for (int n = lid; n < features; n += step) {
        const int i = start + n * inner;
        input_gr[i] = inv_std * (output_gr[i] * gamma[n] - g_mean - (inputs[i] - mean) * inv_std * g_xhat_mean);
    }
}

// dgamma[n] = sum over groups of dy x^, dbeta[n] = sum of dy: a work-group per feature n.
__kernel void CalcDeltaWeightsLayerNorm(__global const TYPE *inputs,         // x, (rows, outer, features, inner)
                                        __global const TYPE *output_gr,      // dL/dy, same shape
                                        __global const TYPE *group_mean,     // (groups,)
                                        __global const TYPE *group_inv_std,  // (groups,)
                                        __global TYPE *gamma_gr,             // (features,)
                                        __global TYPE *beta_gr,              // (features,)
                                        const int groups, const int features, const int inner)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int n = get_group_id(0), lid = get_local_id(0), step = get_local_size(0);
    TYPE dy_sum = 0, dy_xhat_sum = 0;
    for (int group = lid; group < groups; group += step) {
        const int i = ln_start(group, features, inner) + n * inner;
        dy_sum += output_gr[i];
        dy_xhat_sum += output_gr[i] * (inputs[i] - group_mean[group]) * group_inv_std[group];
    }
    const TYPE dbeta = group_reduce(scratch, dy_sum, 0);
    const TYPE dgamma = group_reduce(scratch, dy_xhat_sum, 0);
    if (lid == 0) {
        gamma_gr[n] = dgamma;
        beta_gr[n] = dbeta;
    }
}

// The CPU form of CalcDeltaWeightsLayerNorm: a work-item per eight features n0..n0+7, on the
// lanes of a TYPE8, walking the groups with no reduction across work-items. A work-item per
// feature walked its column one element per row (the tiny GPT's five norms: 1.2 ms a step on
// PoCL 3.0); with the features contiguous (inner = 1) a group's eight are one load.
__kernel void CalcDeltaWeightsLayerNormLanes(__global const TYPE *inputs,         // x, (rows, outer, features, inner)
                                             __global const TYPE *output_gr,      // dL/dy, same shape
                                             __global const TYPE *group_mean,     // (groups,)
                                             __global const TYPE *group_inv_std,  // (groups,)
                                             __global TYPE *gamma_gr,             // (features,)
                                             __global TYPE *beta_gr,              // (features,)
                                             const int groups, const int features, const int inner)
{
    const int n0 = get_global_id(0) * 8, width = min(8, features - n0);
    TYPE8 dy_sum = (TYPE8)(0), dy_xhat_sum = (TYPE8)(0);
    for (int group = 0; group < groups; group++) {
        const int start = ln_start(group, features, inner) + n0 * inner;
        TYPE8 dy, x;
        if (inner == 1 && width == 8) {
            dy = vload8(0, output_gr + start);
            x = vload8(0, inputs + start);
        } else {
            TYPE t[8], u[8];
            for (int l = 0; l < 8; l++) {
                t[l] = l < width ? output_gr[start + l * inner] : 0;
                u[l] = l < width ? inputs[start + l * inner] : 0;
            }
            dy = vload8(0, t);
            x = vload8(0, u);
        }
        dy_sum += dy;
        dy_xhat_sum += dy * ((x - group_mean[group]) * group_inv_std[group]);
    }
    TYPE t[8], u[8];
    vstore8(dy_xhat_sum, 0, t);
    vstore8(dy_sum, 0, u);
    for (int l = 0; l < width; l++) {
        gamma_gr[n0 + l] = t[l];
        beta_gr[n0 + l] = u[l];
    }
}
