// Keras's LossScaleOptimizer on the device, so that a step reads nothing back. Its state:
// loss_scale (TYPE): [0] the dynamic scale, which the loss kernel multiplies the output gradient by
// (losses/output_gradient.cl) and the inner optimizer's kernels divide the gradients by (base.cl);
// [1] nonzero once CheckFinite found a non-finite gradient this step, which makes those kernels
// skip the step. step_counter (int): [0] Keras's step_counter, the finite steps since the scale
// last changed. A step: CheckFinite per parameter range, the inner optimizer's launches, then
// UpdateLossScale.

// Flags the step if any of the range's `total` gradients is infinite or NaN. Every writer writes
// the same 1, so no atomic is needed.
__kernel void CheckFinite(__global const TYPE *grads, const int total, __global TYPE *loss_scale)
{
    const TYPE4 g = ToVect4(grads, get_global_id(0) * 4, total);
    if (any(isinf(g) | isnan(g)))
        loss_scale[1] = 1;
}

// One work-item, after the update: Keras's rule. A non-finite step halves the scale; a finite
// one doubles it after dynamic_growth_steps of them in a row. The flag is cleared for the next step.
__kernel void UpdateLossScale(__global TYPE *loss_scale, __global int *step_counter, const int growth_steps)
{
    if (loss_scale[1] != 0) {
        loss_scale[0] *= (TYPE)0.5;
        step_counter[0] = 0;
    } else if (step_counter[0] == growth_steps - 1) {
        loss_scale[0] *= 2;
        step_counter[0] = 0;
    } else {
        step_counter[0] += 1;
    }
    loss_scale[1] = 0;
}
