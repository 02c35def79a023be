// Shared by every update kernel. Parameters, gradients and moments are flat arrays of `total`
// elements; each work-item updates four of them through ToVect4/D4ToArray.
// UPDATE_KERNEL declares one: vec_type_hint(TYPE4) says its work-items already hold vectors, so
// that Intel's CPU compiler does not vectorize across them as well (its guarded four-element loads
// then become gathers): on a Zen 4 with AVX-512 the README MLP's Adam update took several times
// longer without the hint; PoCL ignores it (benchmarks/RESULTS.md, the update kernels'
// vec_type_hint on Intel's runtime).
#define UPDATE_KERNEL __kernel __attribute__((vec_type_hint(TYPE4)))
//
// Every update kernel ends with UPDATE_ARGUMENTS and starts the way Keras's apply() does:
// the gradient of loss + l1 |w| + l2 w^2 (the regularization is a term of the loss, so it is in
// the gradient that gets clipped), then clipped by value or by norm, then the decoupled weight
// decay w -= decay w (decay = weight_decay * learning rate), then the optimizer's own step.
// Built with -D CLIP_NORM=1 (clipnorm or global_clipnorm) the kernel also reads the factor
// CalcClipScale wrote for each parameter; `starts` holds the parameters' offsets, in order.
// Built with -D LOSS_SCALE=1 (inside a LossScaleOptimizer) it reads that optimizer's state,
// `loss_scale` (its layout: loss_scale.cl): the gradients are of the loss times the dynamic scale,
// so they are divided by it first, as Keras's unscaling, and where CheckFinite found a non-finite
// one the kernel returns at once (SKIP_IF_NOT_FINITE): Keras skips the whole step.
#if CLIP_NORM
#define CLIP_ARGUMENTS , __global const TYPE *clip_scale, __global const int *starts, const int parameters
#define CLIP_PASS , clip_scale, starts, parameters
#else
#define CLIP_ARGUMENTS
#define CLIP_PASS
#endif
#if LOSS_SCALE
#define LOSS_SCALE_ARGUMENTS , __global const TYPE *loss_scale
#define LOSS_SCALE_PASS , loss_scale
#define UNSCALED(g) ((g) / loss_scale[0])
#define SKIP_IF_NOT_FINITE if (loss_scale[1] != 0) return
#else
#define LOSS_SCALE_ARGUMENTS
#define LOSS_SCALE_PASS
#define UNSCALED(g) (g)
#define SKIP_IF_NOT_FINITE
#endif
#define UPDATE_ARGUMENTS const TYPE l1, const TYPE l2, const TYPE clip_value, const TYPE decay CLIP_ARGUMENTS \
    LOSS_SCALE_ARGUMENTS
// What an update kernel passes on to keras_gradient after clip_value.
#define GRADIENT_PASS CLIP_PASS LOSS_SCALE_PASS

// (sign() only where l1 is set: pip's PoCL 3.0 calls it as a library function, see TYPE4_U in common.cl.)
#define REGULARIZED(g, w, l1, l2) ((g) + ((l1) != 0 ? (l1) * sign(w) : 0) + 2 * (l2) * (w))

#if CLIP_NORM
// The clip factor of element i's parameter: the last p with starts[p] <= i.
inline TYPE lane_scale(__global const TYPE *clip_scale, __global const int *starts, const int parameters,
                       const int i)
{
    int low = 0, high = parameters - 1;
    while (low < high) {
        const int middle = (low + high + 1) / 2;
        if (starts[middle] <= i) low = middle; else high = middle - 1;
    }
    return clip_scale[low];
}
#endif

// The gradient the optimizer's step sees: regularized, then clipped as Keras's _clip_gradients.
inline TYPE4 keras_gradient(__global const TYPE *grads, const TYPE4 w, const int i, const int total,
                            const TYPE l1, const TYPE l2, const TYPE clip_value CLIP_ARGUMENTS LOSS_SCALE_ARGUMENTS)
{
    TYPE4 g = REGULARIZED(UNSCALED(ToVect4(grads, i, total)), w, l1, l2);
#if CLIP_NORM
    // Parameters start on the sub-buffer alignment, which may be less than four elements in
    // float64, so each lane looks up its own parameter.
    g *= (TYPE4)(lane_scale(clip_scale, starts, parameters, i), lane_scale(clip_scale, starts, parameters, i + 1),
                 lane_scale(clip_scale, starts, parameters, i + 2), lane_scale(clip_scale, starts, parameters, i + 3));
#endif
    if (clip_value > 0)
        g = clamp(g, -clip_value, clip_value);
    return g;
}

// Clipping by norm, first pass: one work-group per block of one parameter (`blocks` holds each
// block's [start, end) in the flat buffer) writes the block's sum of squared, regularized gradients
// (unscaled first under LOSS_SCALE: Keras clips the gradients its inner optimizer gets).
__kernel void CalcGradientNorm(__global const TYPE *weights, __global const TYPE *grads,
                               __global const int *blocks, const TYPE l1, const TYPE l2,
                               __global TYPE *partial LOSS_SCALE_ARGUMENTS)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int block = get_group_id(0);
    const int end = blocks[2 * block + 1];
    TYPE sum = 0;
    for (int i = blocks[2 * block] + get_local_id(0); i < end; i += get_local_size(0)) {
        const TYPE g = REGULARIZED(UNSCALED(grads[i]), weights[i], l1, l2);
        sum += g * g;
    }
    sum = group_reduce(scratch, sum, 0);
    if (get_local_id(0) == 0)
        partial[block] = sum;
}

// Second pass, one work-group: each parameter's norm from its blocks (first_block[p] up to
// first_block[p + 1]), then the factor its gradient is multiplied by. clipnorm (Keras's
// _clip_by_norm): clip_norm / max(norm, clip_norm) per parameter; global_clipnorm (Keras's
// clip_by_global_norm): clip_norm * min(1 / norm, 1 / clip_norm) for all, NaN if norm is not finite.
__kernel void CalcClipScale(__global const TYPE *partial, __global const int *first_block,
                            const int parameters, const TYPE clip_norm, const int global_norm,
                            __global TYPE *clip_scale)
{
    __local TYPE scratch[LOCAL_SIZE];
    const int lid = get_local_id(0);
    TYPE total = 0;
    for (int p = 0; p < parameters; p++) {
        TYPE sum = 0;
        for (int b = first_block[p] + lid; b < first_block[p + 1]; b += get_local_size(0))
            sum += partial[b];
        sum = group_reduce(scratch, sum, 0);
        total += sum;
        if (!global_norm && lid == 0)
            clip_scale[p] = clip_norm / fmax(sqrt(sum), clip_norm);
    }
    if (global_norm) {
        const TYPE norm = sqrt(total);
        const TYPE scale = clip_norm * fmin(1 / norm, 1 / clip_norm) + (norm - norm);
        for (int p = lid; p < parameters; p += get_local_size(0))
            clip_scale[p] = scale;
    }
}
