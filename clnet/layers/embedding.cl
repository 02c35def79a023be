// Embedding: a lookup in a (input_dim, output_dim) table. Token ids arrive in the model's float
// type (exact below 2^24 in float32, the layer refuses a larger table) and were checked on the
// host when the batch's x was prepared; clamping only keeps a read inside the table.

inline int token_id(const TYPE id, const int input_dim)
{
    return clamp((int)id, 0, input_dim - 1);
}

__kernel void FeedForwardEmbedding(__global const TYPE *ids,      // (tokens,)
                                   __global const TYPE *table,    // (input_dim, output_dim)
                                   __global TYPE *outputs,        // (tokens, output_dim)
                                   const int input_dim, const int output_dim)
{
    const int column = get_global_id(0), token = get_global_id(1);
    const long row = token_id(ids[token], input_dim);
    outputs[(long)token * output_dim + column] = table[row * output_dim + column];
}

// How often each id occurs in the batch, and where first. Integer atomics count exactly and
// the minimum is the minimum, so the order in which work-items arrive changes nothing;
// CalcDeltaWeightsEmbedding sets both back (0 and INT_MAX) for the next step.
__kernel void CountEmbeddingIds(__global const TYPE *ids,         // (tokens,)
                                __global int *counts,             // (input_dim,)
                                __global int *first,              // (input_dim,)
                                const int input_dim)
{
    const int token = get_global_id(0), v = token_id(ids[token], input_dim);
    atomic_inc(&counts[v]);
    atomic_min(&first[v], token);
}

// dL/dtable[v] = the sum of dL/doutputs over the batch's tokens of id v, added in token order
// (the same sums on every run: no float atomics). One work-group per table row. A row whose id
// does not occur is written as zeros at once, so a vocabulary of 50000 costs little more than
// its zeros; for the others item 0 lists the next occurrences (up to the work-group's size) in
// local memory, walking the ids from the first occurrence, and every item adds those tokens'
// gradients to its own columns, until the counted occurrences are all added (the walk ends at
// the last of them: the counts come from the same ids). A row's walk spans its first to its
// last occurrence: with a large vocabulary most ids occur once and take one step. Measured
// (benchmarks/embedding.py, 64 x 128 tokens, 128 columns, 2-core EPYC, PoCL): 2.9 ms at vocabulary
// 100 and 13 ms at 50000, where one work-item per (row, column) reading every id takes 23 ms and
// minutes, np.add.at 12 and 16 ms, and torch's sorted form 1.0 and 5.0 ms; walking from the start
// instead of the first occurrence took 100 ms at 50000, and ids converted to int once beforehand
// changed nothing.
__kernel void CalcDeltaWeightsEmbedding(__global const TYPE *ids,       // (tokens,)
                                        __global const TYPE *gradients, // dL/doutputs (tokens, output_dim)
                                        __global int *counts,           // (input_dim,), back to 0 after
                                        __global int *first,            // (input_dim,), back to INT_MAX after
                                        __global TYPE *table_grad,      // (input_dim, output_dim)
                                        const int input_dim, const int output_dim)
{
    __local int occurrences[LOCAL_SIZE];
    __local int listed, next;
    const int v = get_group_id(0), lid = get_local_id(0), step = get_local_size(0);
    __global TYPE *g = table_grad + (long)v * output_dim;
    const int count = counts[v];
    for (int j = lid; j < output_dim; j += step)
        g[j] = 0;
    if (lid == 0)
        next = first[v];
    for (int added = 0; added < count; added += listed) {
        barrier(CLK_LOCAL_MEM_FENCE);  // every item is done with the previous list
        if (lid == 0) {
            const int wanted = min(step, count - added);
            int n = 0, i = next;
            for (; n < wanted; i++)
                if (token_id(ids[i], input_dim) == v)
                    occurrences[n++] = i;
            listed = n;
            next = i;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = lid; j < output_dim; j += step) {
            TYPE sum = g[j];
            for (int k = 0; k < listed; k++)
                sum += gradients[(long)occurrences[k] * output_dim + j];
            g[j] = sum;
        }
    }
    if (lid == 0) {
        counts[v] = 0;
        first[v] = INT_MAX;
    }
}
