// Dropout: each element is kept with probability 1 - rate and scaled by 1 / (1 - rate), or set
// to 0; GaussianNoise: each element gets stddev times a standard normal number added. Their
// randomness is a counter-based hash of (seed, step, cell): nothing is drawn on the host or
// uploaded per step, the same (seed, step) gives the same numbers on any run (a resumed fit
// too), and Dropout's backward pass recomputes the forward's mask instead of storing it.

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

// A uniform number k / 2^24, k in [0, 2^24), for `cell` at (seed, step): 24 bits, which float
// holds exactly.
inline TYPE random_uniform(const uint seed, const uint step, const uint cell)
{
    return (TYPE)(mix32(mix32(mix32(seed) + step) + cell) >> 8) * (TYPE)(1.0 / 16777216.0);
}

// True where element i is kept: its cell's uniform number below `keep` = 1 - rate.
inline bool dropout_keep(const int i, const int width, __global const int *noise, const int rank,
                         const uint seed, const uint step, const TYPE keep)
{
    return random_uniform(seed, step, dropout_cell(i, width, noise, rank)) < keep;
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

// y = x + stddev z, z a standard normal number by Box-Muller from the uniforms of cells 2i and
// 2i + 1: u1 in (0, 1] (so that its log is finite) and u2 in [0, 1). On 24 bits, |z| stays within
// sqrt(2 log 2^24), about 5.8: a tail that a normal reaches about once in 10^8 draws is cut.
// (The gradient passes through unchanged: the layer launches nothing for it.)
__kernel void FeedForwardGaussianNoise(__global const TYPE *inputs,  // (total,)
                                       __global TYPE *outputs,       // (total,)
                                       const int total, const int seed, const int step, const TYPE stddev)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const TYPE u1 = (TYPE)1 - random_uniform(seed, step, 2 * (uint)i);
    const TYPE u2 = random_uniform(seed, step, 2 * (uint)i + 1);
    outputs[i] = inputs[i] + stddev * (sqrt(-2 * log(u1)) * cospi(2 * u2));
}
