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

// MPIDataParallel(compression="bf16"): each rank's gradients leave its device as bfloat16, the
// upper half of a float's bits rounded to nearest even (a NaN stays a NaN: rounding would carry
// its payload into the exponent, making an infinity), so that half the bytes cross the bus and go
// between the ranks. Written with integer operations, not a half type: every OpenCL device has them.
inline ushort to_bfloat16(const float x)
{
    const uint bits = as_uint(x);
    return isnan(x) ? (ushort)(bits >> 16 | 0x40u) : (ushort)((bits + 0x7fffu + (bits >> 16 & 1u)) >> 16);
}

inline float from_bfloat16(const ushort h)
{
    return as_float((uint)h << 16);
}

// packed[packed_first + i] = x[x_first + i] as bfloat16: a piece of a rank's gradients, rounded
// once on its device before it comes down.
__kernel void PackBfloat16(__global const TYPE *x, const int x_first, __global ushort *packed, const int packed_first,
                           const int n)
{
    const int i = get_global_id(0);
    if (i < n)
        packed[packed_first + i] = to_bfloat16((float)x[x_first + i]);
}

// SumReplicas of gradients that came as bfloat16: own[own_first + i] = sum over replicas r, in
// their order, of weights[r] packed_r[i], every rank's part (this one's too, rounded as the others
// see it) read from `packed`, (replicas, part_size): every rank sums the same terms in the same
// order, so that the ranks' gradients stay the same bits.
__kernel void SumBfloat16Replicas(__global TYPE *own, const int own_first,
                                  __global const ushort *packed, const int packed_first, const int part_size,
                                  __constant TYPE *weights, const int replicas, const int n)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    TYPE sum = 0;
    for (int r = 0; r < replicas; r++) {
        const TYPE term = weights[r] * (TYPE)from_bfloat16(packed[packed_first + (long)r * part_size + i]);
        sum = r ? sum + term : term;
    }
    own[own_first + i] = sum;
}

// MPIDataParallel's check, at each fit's start, that every rank holds the same state: the xor and
// the wrapping sum of a tensor's 32-bit words, each work-group's into partials[2 group] and
// partials[2 group + 1], which the host folds. On the device, so that fit called in a loop does
// not bring the model's whole state down to the host at every call to digest it there.
#define DIGEST_ITEMS 256
__kernel __attribute__((reqd_work_group_size(DIGEST_ITEMS, 1, 1)))
void DigestWords(__global const uint *words, const int count, __global ulong *partials)
{
    __local ulong xors[DIGEST_ITEMS], sums[DIGEST_ITEMS];
    ulong x = 0, s = 0;
    for (int i = get_global_id(0); i < count; i += get_global_size(0)) {  // neighbours read neighbours
        x ^= words[i];
        s += words[i];
    }
    const int l = get_local_id(0);
    xors[l] = x;
    sums[l] = s;
    for (int apart = DIGEST_ITEMS / 2; apart > 0; apart /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (l < apart) {
            xors[l] ^= xors[l + apart];
            sums[l] += sums[l + apart];
        }
    }
    if (l == 0) {
        partials[2 * get_group_id(0)] = xors[0];
        partials[2 * get_group_id(0) + 1] = sums[0];
    }
}
