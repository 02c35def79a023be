// Masking, as Keras's: a time step whose features all equal mask_value is padding. Its output is
// the input where a step holds data and zeros where it is padding, and Keras's mask, 1 and 0 per
// step, goes with it to the layers after (see Layer.mask_handling).

// A work-item per (row, step) reads the step's features once to decide, then writes them and the
// step's mask: the decision needs every feature of the step, so one pass of its own would read
// them twice.
__kernel void FeedForwardMasking(__global const TYPE *inputs,  // (rows, steps, features)
                                 __global TYPE *outputs,       // (rows, steps, features)
                                 __global TYPE *mask,          // (rows, steps)
                                 const int features, const TYPE mask_value)
{
    const long step = get_global_id(0);
    __global const TYPE *x = inputs + step * features;
    __global TYPE *y = outputs + step * features;
    int keep = 0;
    for (int f = 0; f < features; f++)
        keep |= x[f] != mask_value;
    for (int f = 0; f < features; f++)
        y[f] = keep ? x[f] : 0;
    mask[step] = keep;
}

// dL/dx: dL/dy where the step holds data, zeros where it is padding. A work-item per element.
__kernel void CalcHiddenGradientMasking(__global const TYPE *output_gr,  // (rows, steps, features)
                                        __global const TYPE *mask,       // (rows, steps)
                                        __global TYPE *input_gr,         // (rows, steps, features)
                                        const int features)
{
    const long i = get_global_id(0);
    input_gr[i] = mask[i / features] != 0 ? output_gr[i] : 0;
}
