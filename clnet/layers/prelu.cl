// Keras's PReLU: y = x for x >= 0, alpha x below, alpha of the sample's shape but 1 along the
// shared axes. Which alpha scales which element is a pair of tables of a sample's size, made once
// on the host: `alpha_of`, each element's alpha, and `members`, each alpha's `share` elements
// (alpha a's at a * share, ...). Any set of shared axes then takes the same kernels, with no
// division per axis.

__kernel void FeedForwardPReLU(__global const TYPE *inputs,   // (rows, width)
                               __global TYPE *outputs,        // (rows, width)
                               __global const TYPE *alpha,    // (alphas,)
                               __global const int *alpha_of,  // (width,)
                               const int width, const int total)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const TYPE x = inputs[i];
    outputs[i] = x >= 0 ? x : alpha[alpha_of[i % width]] * x;
}

// dL/dx = dL/dy above 0, alpha dL/dy below, and 0 at x = 0: Keras computes relu(x) - alpha relu(-x),
// and both relus' derivatives are 0 there.
__kernel void CalcHiddenGradientPReLU(__global const TYPE *inputs,     // x, (rows, width)
                                      __global const TYPE *output_gr,  // dL/dy, (rows, width)
                                      __global TYPE *input_gr,         // dL/dx, (rows, width)
                                      __global const TYPE *alpha,      // (alphas,)
                                      __global const int *alpha_of,    // (width,)
                                      const int width, const int total)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const TYPE x = inputs[i], dy = output_gr[i];
    input_gr[i] = x > 0 ? dy : x < 0 ? alpha[alpha_of[i % width]] * dy : 0;
}

// dL/dalpha[a] = the sum of dL/dy min(x, 0) over the count = rows * share elements alpha a
// scales, term k being element k % share of alpha a's in row k / share. Work-item (a, c) adds
// the terms of chunk c, [c * chunk, (c + 1) * chunk), into sums[c * alphas + a]: with one chunk
// that is the gradient itself, else SumChunksPReLU adds the chunks. The terms are added in a
// fixed order, so a step gives the same gradient on every run. Neighbouring work-items take
// neighbouring alphas, whose elements lie side by side where the shared axes come before the
// others (a Conv2D's height and width, one alpha per channel).
__kernel void CalcDeltaAlphaPReLU(__global const TYPE *inputs,     // x, (rows, width)
                                  __global const TYPE *output_gr,  // dL/dy, (rows, width)
                                  __global const int *members,     // (width,)
                                  __global TYPE *sums,             // (chunks, alphas)
                                  const int alphas, const int share, const int width, const int count,
                                  const int chunk)
{
    const int a = get_global_id(0), c = get_global_id(1);
    if (a >= alphas)
        return;
    const int end = min(count, (c + 1) * chunk);
    TYPE sum = 0;
    for (int k = c * chunk; k < end; k++) {
        const int row = k / share, i = row * width + members[a * share + (k - row * share)];
        sum += output_gr[i] * fmin(inputs[i], (TYPE)0);
    }
    sums[c * alphas + a] = sum;
}

// alpha_gr[a] = the sum of CalcDeltaAlphaPReLU's chunks, in their order.
__kernel void SumChunksPReLU(__global const TYPE *sums,  // (chunks, alphas)
                             __global TYPE *alpha_gr,    // (alphas,)
                             const int alphas, const int chunks)
{
    const int a = get_global_id(0);
    if (a >= alphas)
        return;
    TYPE sum = 0;
    for (int c = 0; c < chunks; c++)
        sum += sums[c * alphas + a];
    alpha_gr[a] = sum;
}
