// Dropout: each element is kept with probability 1 - rate and scaled by 1 / (1 - rate), or set
// to 0. The mask is a counter-based hash of (seed, step, mask cell): nothing is drawn on the host
// or uploaded per step, the same (seed, step) gives the same mask on any run, and the backward
// pass recomputes the forward's mask instead of storing it.

// Chris Wellons's lowbias32 integer hash: every input bit flips about half of the output bits.
inline uint mix32(uint x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

// The mask cell of element `i` of a (rows, width) batch. With a noise shape (rank > 0) the cell
// is the element's index in the mask, whose broadcast axes have stride 0: `noise` holds the
// sample's dims (rank), then the mask strides of the batch axis and of each sample axis (rank + 1).
inline uint dropout_cell(const int i, const int width, __global const int *noise, const int rank)
{
    if (rank == 0)
        return (uint)i;
    int rest = i % width;
    uint cell = (uint)(i / width) * (uint)noise[rank];
    for (int axis = rank - 1; axis >= 0; axis--) {
        const int dim = noise[axis];
        cell += (uint)(rest % dim) * (uint)noise[rank + 1 + axis];
        rest /= dim;
    }
    return cell;
}

// True where element i is kept: a uniform number in [0, 1) on 24 bits, below `keep` = 1 - rate.
inline bool dropout_keep(const int i, const int width, __global const int *noise, const int rank,
                         const uint seed, const uint step, const TYPE keep)
{
    const uint h = mix32(mix32(mix32(seed) + step) + dropout_cell(i, width, noise, rank));
    return (TYPE)(h >> 8) * (TYPE)(1.0 / 16777216.0) < keep;
}

__kernel void FeedForwardDropout(__global const TYPE *inputs,   // (rows, width)
                                 __global TYPE *outputs,        // (rows, width)
                                 __global const int *noise,     // (2 * rank + 1,), see dropout_cell
                                 const int rank, const int width, const int total,
                                 const int seed, const int step, const TYPE keep)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    // x / keep, as Keras divides (not x * (1 / keep), which can differ in the last bit).
    outputs[i] = dropout_keep(i, width, noise, rank, seed, step, keep) ? inputs[i] / keep : 0;
}

__kernel void CalcHiddenGradientDropout(__global const TYPE *output_gr,  // dL/dy, (rows, width)
                                        __global TYPE *input_gr,         // dL/dx, (rows, width)
                                        __global const int *noise,
                                        const int rank, const int width, const int total,
                                        const int seed, const int step, const TYPE keep)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    input_gr[i] = dropout_keep(i, width, noise, rank, seed, step, keep) ? output_gr[i] / keep : 0;
}
