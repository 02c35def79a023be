// A layer called several times (shared weights) writes each extra call's gradients to
// shared_grads; they are added into the owner's: grads[target[i]] += shared_grads[source[i]].
__kernel void AddSharedGradients(__global TYPE *grads, __global const TYPE *shared_grads,
                                 __global const int *source, __global const int *target)
{
    const int i = get_global_id(0);
    grads[target[i]] += shared_grads[source[i]];
}
