// A layer called several times (shared weights) writes each extra call's gradients to
// shared_grads; they are added into the owner's: grads[target[i]] += shared_grads[source[i]].
__kernel void AddSharedGradients(__global TYPE *grads, __global const TYPE *shared_grads,
                                 __global const int *source, __global const int *target)
{
    const int i = get_global_id(0);
    grads[target[i]] += shared_grads[source[i]];
}

// DataParallel's reduction on the devices of one context: total[total_first + i] = w_total *
// total[...] + w_other * other[other_first + i], a replica's flat gradients (or non-trainable
// values) added into the first replica's with the shards' weights; then the sum is copied back to
// every replica (data_parallel.py).
__kernel void ReduceReplicas(__global TYPE *total, const int total_first, __global const TYPE *other,
                             const int other_first, const TYPE w_total, const TYPE w_other, const int n)
{
    const int i = get_global_id(0);
    if (i < n)
        total[total_first + i] = w_total * total[total_first + i] + w_other * other[other_first + i];
}
