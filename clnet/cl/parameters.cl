// A layer called several times (shared weights) writes each extra call's gradients to
// shared_grads; they are added into the owner's: grads[target[i]] += shared_grads[source[i]].
__kernel void AddSharedGradients(__global TYPE *grads, __global const TYPE *shared_grads,
                                 __global const int *source, __global const int *target, const int replaces)
{
    const int i = get_global_id(0);
    grads[target[i]] = (replaces ? 0 : grads[target[i]]) + shared_grads[source[i]];
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

// DataParallel's reduction through host memory (reduction="host"), run by every replica on its own
// device: own[own_first + i] = sum over replicas r, in their order, of weights[r] part_r[i], where
// this replica's part is `own` and the others' came from the host into `parts` (their slots in
// replica order, this one's left out). Each product is rounded before it is added (no contraction
// into an fma) and the order is the same everywhere, so that every replica gets the same bits: a
// sum of two products is commutative, an fma is not. Summing on the devices leaves the host only
// copies: numpy's weighted sum of two large replicas was slow even on many host threads
// (benchmarks/RESULTS.md, DataParallel's reduction through pinned memory, summed on the devices).
#pragma OPENCL FP_CONTRACT OFF
__kernel void SumReplicas(__global TYPE *own, const int own_first,
                          __global const TYPE *parts, const int parts_first, const int part_size,  // (replicas - 1, part_size)
                          __constant TYPE *weights, const int self, const int replicas, const int n)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    TYPE sum = 0;
    for (int r = 0; r < replicas; r++) {
        const TYPE part = r == self ? own[own_first + i] : parts[parts_first + (long)(r - (r > self)) * part_size + i];
        const TYPE term = weights[r] * part;
        sum = r ? sum + term : term;
    }
    own[own_first + i] = sum;
}
