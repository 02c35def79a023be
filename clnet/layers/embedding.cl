// Embedding: a lookup in a (input_dim, output_dim) table. Token ids arrive in the model's float
// type (exact below 2^24 in float32, the layer refuses a larger table) and were checked on the
// host when the batch's x was prepared; clamping only keeps a read inside the table.

inline int token_id(const TYPE id, const int input_dim)
{
    return max_int(min_int((int)id, input_dim - 1), 0);  // clamp(), a library call on pip's PoCL 3.0
}

// With mask_zero, column 0's work-items also write Keras's mask, 1 where the id is not 0: in this
// launch rather than one of its own, which would read the ids again.
__kernel void FeedForwardEmbedding(__global const TYPE *ids,      // (tokens,)
                                   __global const TYPE *table,    // (input_dim, output_dim)
                                   __global TYPE *outputs,        // (tokens, output_dim)
                                   __global TYPE *mask,           // (tokens,), written when mask_zero
                                   const int input_dim, const int output_dim, const int mask_zero)
{
    const int column = get_global_id(0), token = get_global_id(1);
    const TYPE id = ids[token];
    const long row = token_id(id, input_dim);
    outputs[(long)token * output_dim + column] = table[row * output_dim + column];
    if (mask_zero && column == 0)
        mask[token] = id != 0;
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
// its zeros, and an id that occurs once is its first occurrence, added without a look at the
// ids. For the others the work-group lists the occurrences a window at a time, starting at the
// first: each item checks IDS_PER_ITEM consecutive ids of the window (keeping its hits as bits),
// an inclusive scan of the items' hit counts (Hillis-Steele in local memory, one barrier a
// round, for any group size; OpenCL 1.2 has no work_group_scan, NVIDIA's OpenCL no sub-groups)
// gives each hit its slot, so the list is in token order and holds every hit of the window (at
// most LOCAL_SIZE * IDS_PER_ITEM), and every item adds the listed tokens' gradients to its own
// columns, until the counted occurrences are all added (the counts come from the same ids; no
// window reads past `tokens`). Before, item 0 alone walked the ids from the first occurrence
// while the others waited: on a GPU the tiny GPT's step (8192 tokens, vocabulary 113, 256
// columns) spent a noticeable share of its time here, ~8192 dependent loads by one thread per
// row. With 32 ids per item a group of 256 covers those 8192 ids in one window: a row takes one
// scan and one list, and the launch ran far faster (the row of the most frequent id, with the
// longest list to add, is then the slowest; benchmarks/RESULTS.md, the tiny GPT's non-product
// kernels). Measured with benchmarks/embedding.py (64 x 128 tokens, 128 columns, groups of 128,
// PoCL on a CPU) at vocabularies of 100 and 50000, against item 0's walk, windows of 4, 16, 32
// and 64 ids per item, one work-item per (row, column) reading every id (far slower,
// impractically so at 50000), np.add.at and torch's sorted form: 32 ids per item did as well as
// any window (64 about the same), at least as well as the walk at both sizes and better than
// np.add.at; only torch's sorted form was faster. The tiny GPT's shape (113, 8192 tokens, 256
// columns) ran faster too. Small groups lose: at 1 and 4 columns a window is 32 and 128 ids, a
// row spread over the batch takes many, and the windows took longer than the walk (at both
// vocabularies); at 16 columns, less. Walking from the start instead of the first occurrence was
// far slower at 50000, and ids converted to int once beforehand changed nothing.
#if IDS_PER_ITEM > 64
#error "IDS_PER_ITEM: an item keeps its hits as the bits of a ulong"
#endif
__kernel void CalcDeltaWeightsEmbedding(__global const TYPE *ids,       // (tokens,)
                                        __global const TYPE *gradients, // dL/doutputs (tokens, output_dim)
                                        __global int *counts,           // (input_dim,), back to 0 after
                                        __global int *first,            // (input_dim,), back to INT_MAX after
                                        __global TYPE *table_grad,      // (input_dim, output_dim)
                                        const int input_dim, const int output_dim, const int tokens)
{
    __local int occurrences[LOCAL_SIZE * IDS_PER_ITEM];
    __local int scan[2 * LOCAL_SIZE];  // the rounds' inclusive sums, read from one half, written to the other
    const int v = get_group_id(0), lid = get_local_id(0), step = get_local_size(0);
    __global TYPE *g = table_grad + (long)v * output_dim;
    const int count = counts[v];
    int from = first[v];  // where the next window starts
    for (int j = lid; j < output_dim; j += step)
        g[j] = 0;
    for (int added = 0, listed; added < count; added += listed) {
        barrier(CLK_LOCAL_MEM_FENCE);  // every item is done with the previous list and scan
        if (count == 1) {
            if (lid == 0)
                occurrences[0] = from;
            listed = 1;
        } else {
            const int begin = from + lid * IDS_PER_ITEM;
            ulong found = 0;  // bit s: ids[begin + s] is v
            int hits = 0;
            for (int s = 0; s < IDS_PER_ITEM; s++) {
                const int hit = begin + s < tokens && token_id(ids[begin + s], input_dim) == v;
                found |= (ulong)hit << s;
                hits += hit;
            }
            __local int *in = scan, *out = scan + LOCAL_SIZE;
            in[lid] = hits;
            for (int d = 1; d < step; d <<= 1) {
                barrier(CLK_LOCAL_MEM_FENCE);
                out[lid] = in[lid] + (lid >= d ? in[lid - d] : 0);
                __local int *t = in;
                in = out;
                out = t;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            listed = in[step - 1];
            for (int i = begin, slot = in[lid] - hits; found; i++, found >>= 1)
                if (found & 1)
                    occurrences[slot++] = i;
            from += step * IDS_PER_ITEM;
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
