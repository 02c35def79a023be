// Bidirectional: a recurrent layer's outputs forward and backward in time, merged. Both layers'
// outputs are (rows, steps, units) (steps = 1 without return_sequences), the backward layer's in
// its processing order: output step s takes its step steps - 1 - s, as Keras flips it back into
// time order. A work-item per four units of one (row, step): `positions` (row, step) pairs of
// ceil(units / 4) work-items each, in one dimension, so that a GPU runs whole work-groups
// (Runtime.four_per_item); work-items past the end do nothing.
// A merge reads each element once and writes it once: memory-bound launches, small beside the
// layers' own. Bidirectional(LSTM(128), return_sequences) over 64 steps at batch 64 on Debian's
// PoCL 3.1: a small share of a training step's kernel time, both launches together
// (benchmarks/RESULTS.md, the Bidirectional(LSTM) step).

#define MERGE_CONCAT 0
#define MERGE_SUM 1
#define MERGE_AVE 2
#define MERGE_MUL 3
#define MERGE_NONE 4  // no merge: only the backward output flipped into time order

// With a mask (`masked`: (rows, steps) in time order, 1 where a step holds data) the merged output
// is zeros at a padded step, as Keras's Bidirectional sets zero_output_for_mask on its layers where
// they return sequences (each layer outputs its previous output there, which the merge drops);
// the gradient there is zeros too.
inline TYPE Kept(__global const TYPE *mask, const int masked, const int rs)
{
    return masked && mask[rs] == 0 ? 0 : 1;
}

// out: (rows, steps, 2 units) for concat (forward's units first), else (rows, steps, units).
__kernel __attribute__((vec_type_hint(TYPE4)))
void FeedForwardBidirectional(__global const TYPE *forward, __global const TYPE *backward, __global TYPE *out,
                              const int units, const int steps, const int positions, const int mode,
                              __global const TYPE *mask, const int masked)
{
    const int quads = (units + 3) / 4, rs = get_global_id(0) / quads, u = get_global_id(0) % quads * 4;
    if (rs >= positions)
        return;
    const int s = rs % steps, flipped = rs - s + steps - 1 - s;  // (row, steps - 1 - s)
    const TYPE kept = Kept(mask, masked, rs);
    const TYPE4 y_rev = ToVect4(backward + (long)flipped * units, u, units) * kept;
    if (mode == MERGE_NONE) {
        D4ToArray(out + (long)rs * units, y_rev, u, units);
        return;
    }
    const TYPE4 y = ToVect4(forward + (long)rs * units, u, units) * kept;
    if (mode == MERGE_CONCAT) {
        __global TYPE *row = out + (long)rs * 2 * units;
        D4ToArray(row, y, u, units);
        D4ToArray(row + units, y_rev, u, units);
        return;
    }
    const TYPE4 merged = mode == MERGE_SUM ? y + y_rev : mode == MERGE_AVE ? (y + y_rev) * (TYPE)0.5 : y * y_rev;
    D4ToArray(out + (long)rs * units, merged, u, units);
}

// dL/d(each layer's output) from dL/d(out), `grad`: grad_forward in time order, grad_backward in
// the backward layer's processing order. MERGE_NONE: `grad` is dL/d(the flipped backward output),
// and only grad_backward is written.
__kernel __attribute__((vec_type_hint(TYPE4)))
void CalcHiddenGradientBidirectional(__global const TYPE *grad, __global const TYPE *forward,
                                     __global const TYPE *backward, __global TYPE *grad_forward,
                                     __global TYPE *grad_backward, const int units, const int steps, const int positions,
                                     const int mode, __global const TYPE *mask, const int masked)
{
    const int quads = (units + 3) / 4, rs = get_global_id(0) / quads, u = get_global_id(0) % quads * 4;
    if (rs >= positions)
        return;
    const int s = rs % steps, flipped = rs - s + steps - 1 - s;
    const TYPE kept = Kept(mask, masked, rs);
    __global TYPE *to_backward = grad_backward + (long)flipped * units;
    TYPE4 g_forward, g_backward;
    if (mode == MERGE_CONCAT) {
        __global const TYPE *row = grad + (long)rs * 2 * units;
        g_forward = ToVect4(row, u, units) * kept;
        g_backward = ToVect4(row + units, u, units) * kept;
    } else {
        const TYPE4 g = ToVect4(grad + (long)rs * units, u, units) * kept;
        if (mode == MERGE_NONE) {
            D4ToArray(to_backward, g, u, units);
            return;
        }
        if (mode == MERGE_MUL) {  // d(y y_rev): y_rev for y, y for y_rev
            g_forward = g * ToVect4(backward + (long)flipped * units, u, units);
            g_backward = g * ToVect4(forward + (long)rs * units, u, units);
        } else {
            g_forward = g_backward = mode == MERGE_AVE ? g * (TYPE)0.5 : g;
        }
    }
    D4ToArray(grad_forward + (long)rs * units, g_forward, u, units);
    D4ToArray(to_backward, g_backward, u, units);
}
