// BatchNormalization over the channels of axis `axis`: a sample is seen as (outer, channels,
// inner), so a channel's values in a batch are the `count` = rows * outer * inner elements at
// bn_index(j, c) for j < count. A training kernel's work-group is (block, lanes), block * lanes
// = LOCAL_SIZE, both powers of two: `block` neighbouring channels, each with `lanes` work-items
// that stride over its elements and then reduce in local memory. With channels last, the
// work-items of one lane read `block` neighbouring values: whole vectors or memory lines, where
// one channel per work-group would read one value of each line it touches.

inline int bn_index(const int j, const int c, const int channels, const int inner)
{
    if (inner == 1)                  // channels last: the common case, no division
        return j * channels + c;
    const int o = j / inner;
    return (o * channels + c) * inner + (j - o * inner);
}

// The sum of `value` over the lanes of this work-item's channel, for every lane.
inline TYPE channel_lanes_sum(__local TYPE *scratch, const TYPE value)
{
    const int c = get_local_id(0), lane = get_local_id(1), block = get_local_size(0);
    scratch[lane * block + c] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = get_local_size(1) / 2; stride > 0; stride >>= 1) {
        if (lane < stride)
            scratch[lane * block + c] += scratch[(lane + stride) * block + c];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const TYPE result = scratch[c];
    barrier(CLK_LOCAL_MEM_FENCE);  // scratch is reused by the next reduction
    return result;
}

// Training: normalise with the batch's mean and biased variance, as Keras, keep them for the
// backward pass, and move the moving statistics towards them:
// moving = moving * momentum + batch * (1 - momentum).
__kernel void FeedForwardBatchNorm(__global const TYPE *inputs,      // (rows, outer, channels, inner)
                                   __global TYPE *outputs,           // (rows, outer, channels, inner)
                                   __global const TYPE *gamma,       // (channels,)
                                   __global const TYPE *beta,        // (channels,)
                                   __global TYPE *moving_mean,       // (channels,)
                                   __global TYPE *moving_variance,   // (channels,)
                                   __global TYPE *batch_mean,        // (channels,)
                                   __global TYPE *batch_inv_std,     // (channels,) 1 / sqrt(var + eps)
                                   const int count, const int channels, const int inner,
                                   const TYPE momentum, const TYPE epsilon)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int c = get_global_id(0), lane = get_local_id(1), lanes = get_local_size(1);
    const int rows = c < channels ? count : 0;  // a block's channels past the last only reduce
    TYPE sum = 0;
    for (int j = lane; j < rows; j += lanes)
        sum += inputs[bn_index(j, c, channels, inner)];
    const TYPE mean = channel_lanes_sum(scratch, sum) / count;
    TYPE squares = 0;  // a second pass: sum (x - mean)^2 loses nothing to cancellation
    for (int j = lane; j < rows; j += lanes) {
        const TYPE d = inputs[bn_index(j, c, channels, inner)] - mean;
        squares += d * d;
    }
    const TYPE variance = channel_lanes_sum(scratch, squares) / count;
    if (c >= channels)
        return;
    const TYPE inv_std = 1 / sqrt(variance + epsilon);
    const TYPE g = gamma[c], b = beta[c];
    for (int j = lane; j < rows; j += lanes) {
        const int i = bn_index(j, c, channels, inner);
        outputs[i] = (inputs[i] - mean) * inv_std * g + b;
    }
    if (lane == 0) {
        batch_mean[c] = mean;
        batch_inv_std[c] = inv_std;
        moving_mean[c] = moving_mean[c] * momentum + mean * (1 - momentum);
        moving_variance[c] = moving_variance[c] * momentum + variance * (1 - momentum);
    }
}

// Inference: normalise with the moving statistics; one work-item per element.
__kernel void FeedForwardBatchNormInference(__global const TYPE *inputs,          // (total,)
                                            __global TYPE *outputs,               // (total,)
                                            __global const TYPE *gamma,           // (channels,)
                                            __global const TYPE *beta,            // (channels,)
                                            __global const TYPE *moving_mean,     // (channels,)
                                            __global const TYPE *moving_variance, // (channels,)
                                            const int total, const int channels, const int inner,
                                            const TYPE epsilon)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const int c = (i / inner) % channels;
    outputs[i] = (inputs[i] - moving_mean[c]) * (1 / sqrt(moving_variance[c] + epsilon)) * gamma[c] + beta[c];
}

// The gradients through the batch statistics, with x^ = (x - mean) inv_std:
// dgamma = sum dy x^, dbeta = sum dy, and (if wanted)
// dx = gamma inv_std / count (count dy - dbeta - x^ dgamma).
__kernel void CalcHiddenGradientBatchNorm(__global const TYPE *inputs,         // x, (rows, outer, channels, inner)
                                          __global const TYPE *output_gr,      // dL/dy, same shape
                                          __global TYPE *input_gr,             // dL/dx, same shape
                                          __global const TYPE *gamma,          // (channels,)
                                          __global const TYPE *batch_mean,     // (channels,)
                                          __global const TYPE *batch_inv_std,  // (channels,)
                                          __global TYPE *gamma_gr,             // (channels,)
                                          __global TYPE *beta_gr,              // (channels,)
                                          const int count, const int channels, const int inner,
                                          const int want_input_gr)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int c = get_global_id(0), lane = get_local_id(1), lanes = get_local_size(1);
    const int rows = c < channels ? count : 0;
    const TYPE mean = c < channels ? batch_mean[c] : 0, inv_std = c < channels ? batch_inv_std[c] : 0;
    TYPE dy_sum = 0, dy_xhat_sum = 0;
    for (int j = lane; j < rows; j += lanes) {
        const int i = bn_index(j, c, channels, inner);
        dy_sum += output_gr[i];
        dy_xhat_sum += output_gr[i] * (inputs[i] - mean) * inv_std;
    }
    const TYPE dbeta = channel_lanes_sum(scratch, dy_sum);
    const TYPE dgamma = channel_lanes_sum(scratch, dy_xhat_sum);
    if (c >= channels)
        return;
    if (lane == 0) {
        gamma_gr[c] = dgamma;
        beta_gr[c] = dbeta;
    }
    if (!want_input_gr)
        return;
    const TYPE scale = gamma[c] * inv_std / count;
    for (int j = lane; j < rows; j += lanes) {
        const int i = bn_index(j, c, channels, inner);
        input_gr[i] = scale * (count * output_gr[i] - dbeta - (inputs[i] - mean) * inv_std * dgamma);
    }
}
