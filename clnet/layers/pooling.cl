// Max and average pooling over windows of (ph, pw) every (sh, sw) pixels of a channels_last
// mini-batch, each channel on its own. Windows are clipped to the image ('same' padding): padded
// cells never win a maximum and are not counted in an average (Keras's TensorFlow and JAX
// backends; its torch backend agrees where the padding is symmetric, and elsewhere pads by
// repeating the edge, which an average counts). Global pooling is one window of the whole
// image. 1-D pooling runs with height 1. The geometry is the same int arguments for both kernels:
#define GEOMETRY const int height, const int width, const int channels, const int out_h, const int out_w, \
                 const int ph, const int pw, const int sh, const int sw, const int pad_top, const int pad_left

// One work-item per output position, all its channels (one work-item per channel and position
// ran far slower on PoCL: it pays for every work-item, and the index arithmetic with
// it). Max pooling also records where in the sample's image (y * width + x) each maximum came
// from, for the backward pass.
// The output is also stored transposed, for a Dense layer's weight gradient after a Flatten,
// unless ld = 0 (no layer reads it).
// Where channels is a multiple of 8, eight channels at a time on a vector's lanes: one aligned
// load per window pixel instead of eight strided ones (the CNN's first pooling layer, 128 x 26
// x 26 x 32, ran far faster on Debian's PoCL 3.1); the other channels one at a time.
// Not where a builtin on a 512-bit vector aborts the build (HALVED_BUILTINS, common.cl): the
// conversions of a double8's long8 masks below take the whole vector, so there the channels go
// one at a time, the lane loops left dead.
// On a GPU the channels are shared among get_global_size(1) work-items of a position (groups of
// eight, interleaved: dimension 1): a work-item's 32 bytes lie beside its neighbours' in the
// warp, and a position's channels take several lanes, where one lane looping over a position's
// channels, its neighbours a whole position away, left the CNN's poolings a large part of its step
// on a GPU. A CPU keeps one work-item a position, its channel loops' steps constants, so that
// they compile as they did before. Dimension 0 may be rounded up to the work-group: items past
// `positions` (rows * out_h * out_w) do nothing.
#if CPU_DEVICE
#define CHANNEL_GROUP 0
#define CHANNEL_GROUPS 1
#else
#define CHANNEL_GROUP ((int)get_global_id(1))
#define CHANNEL_GROUPS ((int)get_global_size(1))
#endif
#if HALVED_BUILTINS && defined(CLNET_FP64)
#define EIGHT_CHANNEL_LANES 0
#else
#define EIGHT_CHANNEL_LANES 1
#endif
// A TYPE8 comparison's lanes as int8 (a double8's are long8), and an int8's as TYPE8's, for ?: on
// vectors, which takes a condition of its operands' lane width.
#ifdef CLNET_FP64
#define LANES_INT8(m) convert_int8(m)
#define LANES_TYPE8(m) convert_long8(m)
#else
#define LANES_INT8(m) (m)
#define LANES_TYPE8(m) (m)
#endif
// vec_type_hint, as on the gradient's kernel below: Intel's CPU compiler otherwise vectorizes
// across work-items as well (the CNN's poolings took it several times PoCL's time).
__kernel __attribute__((vec_type_hint(TYPE8)))
void FeedForwardPool(__global const TYPE *inputs,  // x (rows, height, width, channels)
                     __global TYPE *outputs,       // y (rows, out_h, out_w, channels)
                     __global TYPE *outputs_t,     // y^T (out_h * out_w * channels, ld)
                     __global int *argmax,         // (rows, out_h, out_w, channels), max pooling
                     const int ld, GEOMETRY, const int use_max, const int positions)
{
    const int m = get_global_id(0), group = CHANNEL_GROUP, groups = CHANNEL_GROUPS;
    if (m >= positions)
        return;
    const int ox = m % out_w, oy = m / out_w % out_h, row = m / (out_w * out_h);
    const int y0 = max_int(oy * sh - pad_top, 0), y1 = min_int(oy * sh - pad_top + ph, height);
    const int x0 = max_int(ox * sw - pad_left, 0), x1 = min_int(ox * sw - pad_left + pw, width);
    const __global TYPE *image = inputs + (long)row * height * width * channels;
    const TYPE count = (y1 - y0) * (x1 - x0);
    const int lanes = EIGHT_CHANNEL_LANES && channels % 8 == 0 ? channels : 0;  // the channels taken eight at a time
    for (int c = 8 * group; c < lanes; c += 8 * groups) {
        TYPE8 best = (TYPE8)(-INFINITY), sum = (TYPE8)(0);
        int8 at = (int8)(y0 * width + x0);
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) {
                const TYPE8 v = *(const __global TYPE8 *)(image + (y * width + x) * channels + c);
                // As the scalar loop's v > best: a NaN never wins. By ?:, not select() and
                // isgreater(), which pip's PoCL 3.0 calls out of line (see min_int in common.cl).
                at = LANES_INT8(v > best) ? (int8)(y * width + x) : at;
                best = v > best ? v : best;
                sum += v;
            }
        const int o = m * channels + c;
        const TYPE8 y = use_max ? best : sum / count;
        *(__global TYPE8 *)(outputs + o) = y;
        if (ld) {
            union { TYPE8 v; TYPE s[8]; } u;
            u.v = y;
            for (int l = 0; l < 8; l++)
                outputs_t[(m % (out_h * out_w) * channels + c + l) * ld + row] = u.s[l];
        }
        if (use_max)
            *(__global int8 *)(argmax + o) = at;
    }
    for (int c = lanes + group; c < channels; c += groups) {
        TYPE best = -INFINITY, sum = 0;
        int at = y0 * width + x0;
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) {
                const TYPE v = image[(y * width + x) * channels + c];
                if (v > best) {
                    best = v;
                    at = y * width + x;
                }
                sum += v;
            }
        const int o = m * channels + c;
        const TYPE y = use_max ? best : sum / count;
        outputs[o] = y;
        if (ld)
            outputs_t[(m % (out_h * out_w) * channels + c) * ld + row] = y;
        if (use_max)
            argmax[o] = at;
    }
}

// dL/dx: each input element gathers from the windows that contain it (overlapping windows
// add up, without atomics): the whole gradient of a window whose maximum it was, or its share
// of an average. One work-item per input element (dimension 0: channel, 1: pixel).
__kernel void CalcHiddenGradientPool(__global const TYPE *output_gr,  // dL/dy (rows, out_h, out_w, channels)
                                     __global const int *argmax,      // from FeedForwardPool
                                     __global TYPE *input_gr,         // dL/dx (rows, height, width, channels)
                                     GEOMETRY, const int use_max)
{
    const int c = get_global_id(0), p = get_global_id(1);
    const int x = p % width, y = p / width % height, row = p / (width * height);
    // Windows oy with oy * sh - pad_top <= y < oy * sh - pad_top + ph.
    const int ylo = y + pad_top - ph + 1, xlo = x + pad_left - pw + 1;
    const int oy0 = ylo <= 0 ? 0 : (ylo + sh - 1) / sh, oy1 = min_int((y + pad_top) / sh, out_h - 1);
    const int ox0 = xlo <= 0 ? 0 : (xlo + sw - 1) / sw, ox1 = min_int((x + pad_left) / sw, out_w - 1);
    const int here = y * width + x;
    TYPE g = 0;
    for (int oy = oy0; oy <= oy1; oy++)
        for (int ox = ox0; ox <= ox1; ox++) {
            const int o = ((row * out_h + oy) * out_w + ox) * channels + c;
            if (use_max) {
                if (argmax[o] == here)
                    g += output_gr[o];
            } else {
                const int rows_in = min_int(oy * sh - pad_top + ph, height) - max_int(oy * sh - pad_top, 0);
                const int cols_in = min_int(ox * sw - pad_left + pw, width) - max_int(ox * sw - pad_left, 0);
                g += output_gr[o] / (rows_in * cols_in);
            }
        }
    input_gr[p * channels + c] = g;
}

// dL/dx when windows do not overlap (strides >= pool_size, global pooling included): each
// output owns the cell of input pixels from its window's start to the next window's (to the
// image's edge for the last), writes its gradient into it (at the maximum, or its share to each
// pixel of an average's window) and zeros elsewhere, so every input element is written once and
// none has to search the windows around it. One work-item per output (dimension 0: channel, 1:
// output position), as FeedForwardPool, and as there eight channels at a time where channels is
// a multiple of 8, shared among a position's work-items along dimension 1 on a GPU.
// vec_type_hint: Intel's CPU compiler otherwise vectorizes across work-items (see recurrent.cl);
// with channels one at a time, scattered over a lane per output, the CNN's two pooling layers'
// gradients took Intel's runtime far longer than PoCL.
__kernel __attribute__((vec_type_hint(TYPE8)))
void CalcHiddenGradientPoolCells(__global const TYPE *output_gr,  // dL/dy (rows, out_h, out_w, channels)
                                 __global const int *argmax,      // from FeedForwardPool
                                 __global TYPE *input_gr,         // dL/dx (rows, height, width, channels)
                                 GEOMETRY, const int use_max, const int positions)
{
    const int m = get_global_id(0), group = CHANNEL_GROUP, groups = CHANNEL_GROUPS;
    if (m >= positions)
        return;
    const int ox = m % out_w, oy = m / out_w % out_h, row = m / (out_w * out_h);
    const int top = oy * sh - pad_top, left = ox * sw - pad_left;
    const int y0 = max_int(top, 0), y1 = min_int(top + ph, height), x0 = max_int(left, 0), x1 = min_int(left + pw, width);
    const int cy0 = oy ? y0 : 0, cy1 = oy == out_h - 1 ? height : min_int(top + sh, height);
    const int cx0 = ox ? x0 : 0, cx1 = ox == out_w - 1 ? width : min_int(left + sw, width);
    const TYPE count = (y1 - y0) * (x1 - x0);
    const __global TYPE *g = output_gr + (long)m * channels;
    const __global int *at = argmax + (long)m * channels;
    __global TYPE *image = input_gr + (long)row * height * width * channels;
    const int lanes = EIGHT_CHANNEL_LANES && channels % 8 == 0 ? channels : 0;  // the channels taken eight at a time
    for (int y = cy0; y < cy1; y++)
        for (int x = cx0; x < cx1; x++) {
            const int here = y * width + x;
            const int inside = y >= y0 && y < y1 && x >= x0 && x < x1;
            __global TYPE *out = image + (long)here * channels;
            for (int c = 8 * group; c < lanes; c += 8 * groups) {
                const TYPE8 gv = *(const __global TYPE8 *)(g + c);
                *(__global TYPE8 *)(out + c) =
                    use_max ? (LANES_TYPE8(*(const __global int8 *)(at + c) == (int8)(here)) ? gv : (TYPE8)(0))
                            : inside ? gv / count : (TYPE8)(0);
            }
            if (use_max)
                for (int c = lanes + group; c < channels; c += groups)
                    out[c] = at[c] == here ? g[c] : 0;
            else
                for (int c = lanes + group; c < channels; c += groups)
                    out[c] = inside ? g[c] / count : 0;
        }
}

// GlobalAveragePooling1D over a masked input (Keras's: the mean of the steps that hold data, 0/0
// where none does, as Keras's). A work-item per (row, channel) walks the row's steps; y^T as
// FeedForwardPool writes it, unless ld = 0.
__kernel void FeedForwardMaskedAverage(__global const TYPE *inputs,  // (rows, steps, channels)
                                       __global const TYPE *mask,    // (rows, steps), 1 where a step holds data
                                       __global TYPE *outputs,       // (rows, channels)
                                       __global TYPE *outputs_t,     // (channels, ld)
                                       const int ld, const int steps, const int channels)
{
    const int c = get_global_id(0), row = get_global_id(1);
    if (c >= channels)
        return;
    const __global TYPE *x = inputs + (long)row * steps * channels + c;
    const __global TYPE *m = mask + (long)row * steps;
    TYPE sum = 0, count = 0;
    for (int s = 0; s < steps; s++) {
        sum += m[s] != 0 ? x[(long)s * channels] : 0;
        count += m[s] != 0;
    }
    const TYPE mean = sum / count;
    outputs[(long)row * channels + c] = mean;
    if (ld)
        outputs_t[(long)c * ld + row] = mean;
}

// Its gradient: dL/dy / (the row's steps that hold data) at those steps, zeros at the others. A
// work-item per (row, step, channel).
__kernel void CalcHiddenGradientMaskedAverage(__global const TYPE *output_gr,  // (rows, channels)
                                              __global const TYPE *mask,       // (rows, steps)
                                              __global TYPE *input_gr,         // (rows, steps, channels)
                                              const int steps, const int channels)
{
    const int c = get_global_id(0), rs = get_global_id(1), row = rs / steps;
    if (c >= channels)
        return;
    const __global TYPE *m = mask + (long)row * steps;
    TYPE count = 0;
    for (int s = 0; s < steps; s++)
        count += m[s] != 0;
    input_gr[(long)rs * channels + c] = m[rs % steps] != 0 ? output_gr[(long)row * channels + c] / count : 0;
}
