// RepeatVector: (rows, features) -> (rows, n, features), each sample's vector n times; the
// backward pass sums the n copies' gradients. Dimension 0 walks the features, dimension 1 the
// output's (rows * n) lines forward and the rows backward.

__kernel void FeedForwardRepeatVector(__global const TYPE *inputs,   // (rows, features)
                                      __global TYPE *outputs,        // (rows, n, features)
                                      const int features, const int n)
{
    const int f = get_global_id(0), line = get_global_id(1);  // f < features, line < rows * n
    if (f >= features)
        return;
    outputs[(long)line * features + f] = inputs[(long)(line / n) * features + f];
}

__kernel void CalcHiddenGradientRepeatVector(__global const TYPE *output_gr,  // (rows, n, features)
                                             __global TYPE *input_gr,         // (rows, features)
                                             const int features, const int n)
{
    const int f = get_global_id(0), row = get_global_id(1);  // f < features, row < rows
    if (f >= features)
        return;
    const __global TYPE *g = output_gr + (long)row * n * features + f;
    TYPE sum = 0;
    for (int i = 0; i < n; i++)
        sum += g[(long)i * features];
    input_gr[(long)row * features + f] = sum;
}
