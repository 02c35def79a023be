// Permute: each sample's axes reordered. One kernel serves both passes, since the gradient of a
// permutation is the inverse permutation of the output's gradient. A work-item per element of
// the result, which gathers its source element: `geometry` holds the result's sample dims
// (rank), then for each of the result's axes the source's stride along it (rank).

__kernel void PermuteAxes(__global const TYPE *source,        // (rows, width), the sample axes in one order
                          __global TYPE *target,              // (rows, width), in the other
                          __global const int *geometry,       // (2 * rank,)
                          const int rank, const int width, const int total)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    int rest = i % width;
    long from = (long)(i - rest);  // the sample's first element, the same in both orders
    for (int axis = rank - 1; axis >= 0; axis--) {
        const int dim = geometry[axis];
        from += (long)(rest % dim) * geometry[rank + axis];
        rest /= dim;
    }
    target[i] = source[from];
}
