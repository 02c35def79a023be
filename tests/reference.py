"""numpy references for every kernel: the formulas the OpenCL code must reproduce."""
import math
from itertools import combinations

import numpy as np

erf = np.vectorize(math.erf, otypes=[float])

ACTIVATIONS = {
    # name: (forward(x, a, b), derivative(x, a, b)) with the derivative in terms of x
    "linear": (lambda x, a, b: a * x + b, lambda x, a, b: np.full_like(x, a)),
    "sigmoid": (lambda x, a, b: a / (1 + np.exp(-x)) - b,
                lambda x, a, b: a * np.exp(-x) / (1 + np.exp(-x)) ** 2),
    "tanh": (lambda x, a, b: np.tanh(x), lambda x, a, b: 1 - np.tanh(x) ** 2),
    "relu": (lambda x, a, b: np.maximum(x, 0), lambda x, a, b: (x > 0).astype(x.dtype)),
    "lrelu": (lambda x, a, b: np.where(x > 0, x, a * x), lambda x, a, b: np.where(x > 0, 1, a).astype(x.dtype)),
    "swish": (lambda x, a, b: x / (1 + np.exp(-b * x)),
              lambda x, a, b: (s := 1 / (1 + np.exp(-b * x))) + b * x * s * (1 - s)),
    "gelu": (lambda x, a, b: x * (1 + erf(x / np.sqrt(2))) / 2,
             lambda x, a, b: (1 + erf(x / np.sqrt(2))) / 2 + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), lambda x, a, b: 1 / (1 + np.exp(-x))),
}


def sixteen_bits(x: np.ndarray, half: str) -> np.ndarray:
    """The bits (uint16) of x (float32) rounded to `half`, "bfloat16" or "float16", to nearest even,
    as PTX's cvt.rn does; NaN stays NaN."""
    if half == "float16":
        with np.errstate(over="ignore"):  # (past float16's range: infinity, as cvt.rn gives)
            return x.astype(np.float32).astype(np.float16).view(np.uint16)
    bits = x.astype(np.float32).view(np.uint32)
    nan = np.isnan(x)
    bits = np.where(nan, 0x7FFFFFFF, bits + 0x7FFF + ((bits >> 16) & 1))
    return (bits >> 16).astype(np.uint16)


def rounded(x: np.ndarray, half: str) -> np.ndarray:
    """x (float32) rounded to `half` to nearest even (sixteen_bits), in float64."""
    if half == "float16":
        return sixteen_bits(x, half).view(np.float16).astype(np.float64)
    return (sixteen_bits(x, half).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_backward(y, dy):
    return y * (dy - (y * dy).sum(axis=-1, keepdims=True))


EPS = 1e-7


def loss_and_grad(name, p, t):
    """Per-sample loss (rows,) and dL/dp of the batch-mean loss."""
    rows, cols = p.shape
    if name == "mse":
        return ((p - t) ** 2).mean(1), 2 * (p - t) / cols / rows
    if name == "mae":
        return np.abs(p - t).mean(1), np.sign(p - t) / cols / rows
    pc = np.clip(p, EPS, 1 - EPS)
    if name == "categorical_crossentropy":
        return -(t * np.log(pc)).sum(1), np.where(p == pc, -t / pc, 0) / rows
    if name == "binary_crossentropy":
        loss = -(t * np.log(pc) + (1 - t) * np.log(1 - pc)).mean(1)
        return loss, np.where(p == pc, (pc - t) / (pc * (1 - pc)), 0) / cols / rows
    raise KeyError(name)


def accuracy(name, p, t):
    if name == "binary_crossentropy" or (p.shape[1] == 1):
        return ((p > 0.5) == (t > 0.5)).mean(1)
    return (p.argmax(1) == t.argmax(1)).astype(p.dtype)


def schedule_reference(config, step):
    """A learning-rate schedule's value at `step`: Keras 3's formulas (keras/src/optimizers/schedules/
    learning_rate_schedule.py) for the {"class_name", "config"} dict get_config writes."""
    name, c = config["class_name"], config["config"]
    step = np.float64(step)
    if name == "ExponentialDecay":
        p = step / c["decay_steps"]
        if c.get("staircase", False):
            p = np.floor(p)
        return c["initial_learning_rate"] * np.power(c["decay_rate"], p)
    if name == "CosineDecay":
        alpha, decay_steps = c.get("alpha", 0.0), c["decay_steps"]

        def decay(step, start):
            cosine = 0.5 * (1.0 + np.cos(np.pi * (step / decay_steps)))
            return start * ((1 - alpha) * cosine + alpha)
        if c.get("warmup_target") is None:
            return decay(np.minimum(step, decay_steps), c["initial_learning_rate"])
        warmup_steps = c.get("warmup_steps", 0)
        step = np.minimum(step, decay_steps + warmup_steps)
        if step < warmup_steps:
            return (c["warmup_target"] - c["initial_learning_rate"]) * (step / warmup_steps) + c["initial_learning_rate"]
        return decay(step - warmup_steps, c["warmup_target"])
    if name == "PiecewiseConstantDecay":
        b, v = c["boundaries"], c["values"]
        result = (step <= b[0]) * v[0] + (step > b[-1]) * v[-1]
        for low, high, value in zip(b[:-1], b[1:], v[1:-1]):
            result += ((step > low) & (step <= high)) * value
        return result
    raise KeyError(name)


class OptimizerReference:
    """Keras 3's optimizers in numpy float64 (keras/src/optimizers/*.py and base_optimizer.py's
    apply()): one step on a list of flat parameters. The gradient gets clnet's l1/l2 terms (part
    of the loss, so before clipping), then Keras's clipping (clipnorm per parameter,
    global_clipnorm over all, clipvalue), then the decoupled weight decay w -= w * wd * lr, then
    the update; the learning rate, a schedule's value at the iteration count before the step,
    is the same for both. `clip_active` counts the steps whose clipping changed a gradient."""

    def __init__(self, name, sizes, **config):
        self.name, self.h, self.iterations, self.clip_active = name, config, 0, 0
        initial = config.get("initial_accumulator_value", 0.1) if name == "adagrad" else 0.0
        self.s1 = [np.full(n, initial) for n in sizes]
        self.s2 = [np.zeros(n) for n in sizes]
        self.s3 = [np.zeros(n) for n in sizes]

    def learning_rate(self):
        lr = self.h["learning_rate"]
        return schedule_reference(lr, self.iterations) if isinstance(lr, dict) else lr

    def clip(self, grads):
        h = self.h
        if h.get("clipnorm"):
            c, clipped = h["clipnorm"], []
            for g in grads:
                l2sum = np.sum(np.square(g))
                norm = np.sqrt(l2sum) if l2sum > 0 else l2sum
                clipped.append(g * c / np.maximum(norm, c))
            active = any(np.sqrt(np.sum(g * g)) > c for g in grads)
        elif h.get("global_clipnorm"):
            c = h["global_clipnorm"]
            norm = np.sqrt(np.sum([np.sum(np.square(g)) for g in grads]))
            scale = c * np.minimum(1.0 / norm, 1.0 / c) + (norm - norm)
            clipped, active = [g * scale for g in grads], norm > c
        elif h.get("clipvalue"):
            v = h["clipvalue"]
            clipped, active = [np.clip(g, -v, v) for g in grads], any(np.any(np.abs(g) > v) for g in grads)
        else:
            return grads
        self.clip_active += bool(active)
        return clipped

    def step(self, weights, grads):
        h = self.h
        grads = [g + h.get("l1", 0.0) * np.sign(w) + 2 * h.get("l2", 0.0) * w for w, g in zip(weights, grads)]
        grads = self.clip(grads)
        lr = self.learning_rate()
        if h.get("weight_decay") is not None:
            weights = [w - w * h["weight_decay"] * lr for w in weights]
        new = [self.update(i, w, g, lr) for i, (w, g) in enumerate(zip(weights, grads))]
        self.iterations += 1
        return new

    def update(self, i, w, g, lr):
        h = self.h
        if self.name in ("sgd", "momentum"):
            momentum = h["momentum"]
            if momentum == 0:
                return w - g * lr
            self.s1[i] = self.s1[i] * momentum - g * lr
            return w + (self.s1[i] * momentum - g * lr if h["nesterov"] else self.s1[i])
        if self.name == "adagrad":
            self.s1[i] = self.s1[i] + np.square(g)
            return w - (lr * g) / np.sqrt(self.s1[i] + h["epsilon"])
        if self.name == "rmsprop":
            rho = h["rho"]
            self.s1[i] = rho * self.s1[i] + (1 - rho) * np.square(g)
            if h["centered"]:
                self.s2[i] = rho * self.s2[i] + (1 - rho) * g
                denominator = self.s1[i] - np.square(self.s2[i]) + h["epsilon"]
            else:
                denominator = self.s1[i] + h["epsilon"]
            increment = (lr * g) / np.sqrt(denominator)
            if h["momentum"] > 0:
                self.s3[i] = h["momentum"] * self.s3[i] + increment
                return w - self.s3[i]
            return w - increment
        if self.name == "adadelta":
            rho, eps = h["rho"], h["epsilon"]
            self.s1[i] = rho * self.s1[i] + (1 - rho) * np.square(g)
            delta = -(np.sqrt(self.s2[i] + eps) * g) / np.sqrt(self.s1[i] + eps)
            self.s2[i] = rho * self.s2[i] + (1 - rho) * np.square(delta)
            return w + lr * delta
        if self.name in ("adam", "adamw"):
            t = self.iterations + 1
            b1, b2 = h["beta_1"], h["beta_2"]
            alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
            self.s1[i] = self.s1[i] + (g - self.s1[i]) * (1 - b1)
            self.s2[i] = self.s2[i] + (np.square(g) - self.s2[i]) * (1 - b2)
            v = self.s2[i]
            if h["amsgrad"]:
                self.s3[i] = np.maximum(self.s3[i], v)
                v = self.s3[i]
            return w - (self.s1[i] * alpha) / (np.sqrt(v) + h["epsilon"])
        raise KeyError(self.name)


# -- Dropout, BatchNormalization, LayerNormalization, LocallyConnected1D ---------------------------
def mix32(x):
    """dropout.cl's integer hash (Wellons's lowbias32) on uint32 arrays."""
    x = np.asarray(x, np.uint32).copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x


def random_uniform(cells, seed, step, dtype):
    """dropout.cl's uniform numbers in [0, 1) of `cells` at (seed, step)."""
    with np.errstate(over="ignore"):
        h = mix32(mix32(mix32(seed) + np.uint32(step)) + np.asarray(cells, np.uint32))
    return (h >> np.uint32(8)).astype(dtype) * dtype(1.0 / 16777216.0)


def dropout_keep(cells, seed, step, rate, dtype):
    """True where dropout.cl keeps the element of mask cell `cells`."""
    return random_uniform(cells, seed, step, dtype) < dtype(1 - rate)


def gaussian_noise(shape, seed, step):
    """dropout.cl's standard normal numbers of GaussianNoise for a batch of `shape`, in float64:
    Box-Muller of the uniforms of cells 2i (as 1 - u, in (0, 1]) and 2i + 1."""
    i = np.arange(int(np.prod(shape)), dtype=np.uint32)
    u1 = 1 - random_uniform(2 * i, seed, step, np.float64)
    u2 = random_uniform(2 * i + 1, seed, step, np.float64)
    return (np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)).reshape(shape)


def dropout(x, keep, rate):
    """Keras's inverted dropout: x / (1 - rate) where kept, else 0."""
    return np.where(keep, x / x.dtype.type(1 - rate), 0).astype(x.dtype)


def _moved(x, axis):
    """x with the normalised axis last, and the function that puts an array of that shape back."""
    return np.moveaxis(x, axis, -1), lambda y: np.moveaxis(y, -1, axis)


def batch_norm_train(x, gamma, beta, moving_mean, moving_variance, axis, momentum, epsilon):
    """Keras 3 BatchNormalization(training=True): batch mean and biased variance over every axis
    but `axis`; the moving statistics move by `momentum`. Returns (y, new moving mean, variance)."""
    xm, back = _moved(x, axis)
    flat = xm.reshape(-1, xm.shape[-1])
    mean, variance = flat.mean(0), ((flat - flat.mean(0)) ** 2).mean(0)
    y = (xm - mean) / np.sqrt(variance + epsilon) * gamma + beta
    return (back(y), moving_mean * momentum + mean * (1 - momentum),
            moving_variance * momentum + variance * (1 - momentum))


def batch_norm_infer(x, gamma, beta, moving_mean, moving_variance, axis, epsilon):
    xm, back = _moved(x, axis)
    return back((xm - moving_mean) / np.sqrt(moving_variance + epsilon) * gamma + beta)


def batch_norm_backward(x, dy, gamma, axis, epsilon):
    """(dL/dx, dgamma, dbeta) of batch_norm_train's y."""
    xm, back = _moved(x, axis)
    g = np.moveaxis(dy, axis, -1).reshape(-1, xm.shape[-1])
    flat = xm.reshape(-1, xm.shape[-1])
    count = len(flat)
    inv = 1 / np.sqrt(((flat - flat.mean(0)) ** 2).mean(0) + epsilon)
    xhat = (flat - flat.mean(0)) * inv
    dgamma, dbeta = (g * xhat).sum(0), g.sum(0)
    dx = gamma * inv / count * (count * g - dbeta - xhat * dgamma)
    return back(dx.reshape(xm.shape)), dgamma, dbeta


def layer_norm(x, gamma, beta, axis, epsilon):
    """Keras 3 LayerNormalization over one axis: the sample's mean and biased variance."""
    xm, back = _moved(x, axis)
    mean = xm.mean(-1, keepdims=True)
    variance = ((xm - mean) ** 2).mean(-1, keepdims=True)
    return back((xm - mean) / np.sqrt(variance + epsilon) * gamma + beta)


def layer_norm_backward(x, dy, gamma, axis, epsilon):
    """(dL/dx, dgamma, dbeta) of layer_norm's y."""
    xm, back = _moved(x, axis)
    g = np.moveaxis(dy, axis, -1)
    mean = xm.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(((xm - mean) ** 2).mean(-1, keepdims=True) + epsilon)
    xhat = (xm - mean) * inv
    gg = g * gamma
    dx = inv * (gg - gg.mean(-1, keepdims=True) - xhat * (gg * xhat).mean(-1, keepdims=True))
    features = xm.shape[-1]
    return back(dx), (g * xhat).reshape(-1, features).sum(0), g.reshape(-1, features).sum(0)


def locally_connected_1d(x, kernel, bias, strides):
    """Keras 2 LocallyConnected1D (valid padding) before its activation: x (rows, steps, input_dim),
    kernel (output_length, kernel_size * input_dim, filters), bias (output_length, filters)."""
    positions, taps, _ = kernel.shape
    size = taps // x.shape[2]
    windows = np.stack([x[:, i * strides:i * strides + size].reshape(len(x), -1) for i in range(positions)], 1)
    return np.einsum("rpt,ptf->rpf", windows, kernel) + bias


def locally_connected_1d_backward(x, delta, kernel, strides):
    """(dL/dx, dL/dkernel, dL/dbias) given delta = dL/dz, (rows, output_length, filters)."""
    positions, taps, _ = kernel.shape
    size = taps // x.shape[2]
    dx = np.zeros_like(x)
    dkernel = np.zeros_like(kernel)
    for i in range(positions):
        window = x[:, i * strides:i * strides + size].reshape(len(x), -1)
        dkernel[i] = window.T @ delta[:, i]
        dx[:, i * strides:i * strides + size] += (delta[:, i] @ kernel[i].T).reshape(len(x), size, -1)
    return dx, dkernel, delta.sum(0)


def layer_alone(layer, sample_shape, rows, dtype, seed=0):
    """`layer` built on its own store, with batch buffers for `rows` (the kernels' tests drive
    forward/backward directly, without a model)."""
    import clnet
    from clnet.cl.parameters import ParameterStore
    store = ParameterStore(clnet.runtime(), dtype)
    layer.name = layer.name or type(layer).__name__.lower()
    layer.build(tuple(sample_shape), store, np.random.default_rng(seed))
    store.allocate()
    layer.allocate(rows)
    return layer


def device(array, dtype):
    from clnet.cl.tensor import Tensor
    return Tensor.from_numpy(np.asarray(array, dtype))


def built(model, sample_shape):
    """`model`, built for samples of `sample_shape` unless its construction already built it."""
    if not model.built:
        model.build(sample_shape)
    return model
def trains_saves_and_reloads(model, x, y, path, loss):
    """`model`, compiled with Adam and `loss` and fitted an epoch, saved to `path` and loaded back:
    the same config and predictions, and from_config gives the same config."""
    import clnet
    model.compile("adam", loss)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    model.save(path)
    loaded = clnet.load_model(path)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    assert type(model).from_config(model.get_config()).get_config() == model.get_config()


# -- convolution and pooling, channels_last, as Keras (TensorFlow's formulas) computes them --------
def same_padding(length, size, stride, dilation=1):
    """(before, after) padding of Keras's padding='same': ceil(length / stride) outputs, the
    odd pixel after."""
    extent = (size - 1) * dilation + 1
    total = max((-(-length // stride) - 1) * stride + extent - length, 0)
    return total // 2, total - total // 2


def _padded(x, sizes, strides, dilations, padding, value=0.0):
    # Keras's Conv1D 'causal': (k - 1) * d zeros before, then 'valid'.
    pads = [same_padding(n, k, s, d) if padding == "same" else ((k - 1) * d, 0) if padding == "causal" else (0, 0)
            for n, k, s, d in zip(x.shape[1:3], sizes, strides, dilations)]
    return np.pad(x, ((0, 0), *pads, (0, 0)), constant_values=value), pads


def conv2d(x, kernel, bias, strides=(1, 1), padding="valid", dilation=(1, 1)):
    """y[n, oy, ox, f] = sum_{i, j, c} xpad[n, oy*sh + i*dh, ox*sw + j*dw, c] kernel[i, j, c, f] + bias[f]
    with the kernel in Keras layout (kh, kw, in, out)."""
    kh, kw, _, filters = kernel.shape
    xp, _ = _padded(x, (kh, kw), strides, dilation, padding)
    oh = (xp.shape[1] - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (xp.shape[2] - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    y = np.zeros((len(x), oh, ow, filters), np.result_type(x, kernel))
    for i in range(kh):
        for j in range(kw):
            y += _taps(xp, i * dilation[0], j * dilation[1], oh, ow, strides) @ kernel[i, j]
    return y + (0 if bias is None else bias)


def _taps(xp, y0, x0, oh, ow, strides):
    return xp[:, y0:y0 + (oh - 1) * strides[0] + 1:strides[0], x0:x0 + (ow - 1) * strides[1] + 1:strides[1], :]


def conv2d_backward(x, kernel, dy, strides=(1, 1), padding="valid", dilation=(1, 1)):
    """(dL/dx, dL/dkernel, dL/dbias) for dL/dy = dy."""
    kh, kw, _, _ = kernel.shape
    xp, pads = _padded(x, (kh, kw), strides, dilation, padding)
    oh, ow = dy.shape[1:3]
    dxp, dk = np.zeros_like(xp), np.zeros_like(kernel)
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dilation[0], j * dilation[1]
            taps = _taps(xp, y0, x0, oh, ow, strides)
            dk[i, j] = taps.reshape(-1, taps.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])
            _taps(dxp, y0, x0, oh, ow, strides)[...] += dy @ kernel[i, j].T
    (top, _), (left, _) = pads
    return dxp[:, top:top + x.shape[1], left:left + x.shape[2]], dk, dy.sum((0, 1, 2))


def _windows(x, pool, strides, padding):
    """(slices of the padded image, where padding is NaN) per output position."""
    xp, pads = _padded(x, pool, strides, (1, 1), padding, value=np.nan)
    oh = (xp.shape[1] - pool[0]) // strides[0] + 1
    ow = (xp.shape[2] - pool[1]) // strides[1] + 1
    return xp, pads, oh, ow


def pool2d(x, pool, strides, padding, use_max):
    """Max or mean over each window, padded cells ignored (TensorFlow's rule)."""
    xp, _, oh, ow = _windows(x, pool, strides, padding)
    y = np.empty((len(x), oh, ow, x.shape[-1]), x.dtype)
    for oy in range(oh):
        for ox in range(ow):
            w = xp[:, oy * strides[0]:oy * strides[0] + pool[0], ox * strides[1]:ox * strides[1] + pool[1]]
            y[:, oy, ox] = np.nanmax(w, (1, 2)) if use_max else np.nanmean(w, (1, 2))
    return y


def pool2d_backward(x, dy, pool, strides, padding, use_max):
    """dL/dx: a window's gradient goes to its first maximum (in row-major order), or is shared
    by its unpadded cells."""
    xp, pads, oh, ow = _windows(x, pool, strides, padding)
    dxp = np.zeros_like(xp)
    for oy in range(oh):
        for ox in range(ow):
            ys, xs = slice(oy * strides[0], oy * strides[0] + pool[0]), slice(ox * strides[1], ox * strides[1] + pool[1])
            w = xp[:, ys, xs]
            if use_max:
                flat = np.where(np.isnan(w), -np.inf, w).reshape(len(x), -1, x.shape[-1])
                at = flat.argmax(1)  # (n, channels): the first maximum
                hit = np.zeros_like(flat)
                np.put_along_axis(hit, at[:, None], 1.0, 1)
                dxp[:, ys, xs] += hit.reshape(w.shape) * dy[:, oy, ox][:, None, None]
            else:
                valid = ~np.isnan(w)
                dxp[:, ys, xs] += valid * (dy[:, oy, ox] / valid.sum((1, 2)))[:, None, None]
    (top, _), (left, _) = pads
    return dxp[:, top:top + x.shape[1], left:left + x.shape[2]]


# -- recurrent layers, as Keras 3 computes them (keras/src/layers/rnn/{simple_rnn,lstm,gru}.py) ----
def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def recurrent(kind, x, kernel, recurrent_kernel, bias=None, return_sequences=False, go_backwards=False,
              activation=np.tanh, recurrent_activation=_sigmoid, return_state=False, initial_state=None, mask=None):
    """Keras's SimpleRNN/LSTM/GRU (reset_after=True) forward pass over x (batch, steps, features).
    With go_backwards the reversed sequence is fed, and the outputs stay in processing order.
    With return_state, [output, h] (LSTM: [output, h, c]) of the last step processed. The states
    start from zeros, or from initial_state ([h] or [h, c], (batch, units) each). With `mask`
    (batch, steps), Keras's backend.rnn: a step where it is 0 keeps the states and outputs the
    step before's output (zeros before any)."""
    x = x[:, ::-1] if go_backwards else x
    held = np.ones(x.shape[:2], bool) if mask is None else np.asarray(mask, bool)[:, ::-1 if go_backwards else 1]
    units = recurrent_kernel.shape[0]
    h = np.zeros((len(x), units))
    c = np.zeros_like(h)
    if initial_state is not None:
        h, c = (list(initial_state) + [c])[:2]
    input_bias = 0 if bias is None else (bias[0] if kind == "GRU" else bias)
    recurrent_bias = 0 if bias is None or kind != "GRU" else bias[1]
    outputs, output = [], np.zeros_like(h)
    for t in range(x.shape[1]):
        xw = x[:, t] @ kernel + input_bias
        new_c = c
        if kind == "SimpleRNN":
            new_h = activation(xw + h @ recurrent_kernel)
        elif kind == "LSTM":
            z = xw + h @ recurrent_kernel
            i, f, g, o = np.split(z, 4, axis=1)
            new_c = recurrent_activation(f) * c + recurrent_activation(i) * activation(g)
            new_h = recurrent_activation(o) * activation(new_c)
        else:
            u = h @ recurrent_kernel + recurrent_bias
            xz, xr, xh = np.split(xw, 3, axis=1)
            uz, ur, uh = np.split(u, 3, axis=1)
            z, r = recurrent_activation(xz + uz), recurrent_activation(xr + ur)
            new_h = z * h + (1 - z) * activation(xh + r * uh)
        m = held[:, t, None]
        h, c, output = np.where(m, new_h, h), np.where(m, new_c, c), np.where(m, new_h, output)
        outputs.append(output)
    output = np.stack(outputs, axis=1) if return_sequences else output
    return [output, h] + ([c] if kind == "LSTM" else []) if return_state else output


def numeric_gradients(f, arrays, dy, step=1e-6):
    """d sum(f(*arrays) * dy) / d each array, by central differences in float64."""
    arrays = [np.array(a, np.float64) for a in arrays]
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        for index in np.ndindex(a.shape):
            original = a[index]
            a[index] = original + step
            plus = np.sum(f(*arrays) * dy)
            a[index] = original - step
            minus = np.sum(f(*arrays) * dy)
            a[index] = original
            g[index] = (plus - minus) / (2 * step)
        grads.append(g)
    return grads


# Central differences cost two evaluations per value. An array of at most EVERY_ENTRY values is
# differentiated entry by entry; a larger one at SAMPLED entries (its first and last, the rest
# drawn) and along DIRECTIONS random directions through all of it, as PyTorch's fast gradcheck:
# sum(g * d) for a Gaussian d matches (L(w + h d) - L(w - h d)) / 2h only where the whole gradient
# is right (a wrong entry anywhere shows in it), and the sampled entries say where one is wrong.
EVERY_ENTRY = 48
SAMPLED = 16
DIRECTIONS = 4


def gradient_probes(shape) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(unit arrays at the entries checked one by one, random directions) for an array of
    `shape`: every entry and no direction up to EVERY_ENTRY values; the same in every process."""
    size = math.prod(shape)
    unit = lambda i: np.eye(1, size, i).reshape(shape)
    if size <= EVERY_ENTRY:
        return [unit(i) for i in range(size)], []
    draw = np.random.default_rng(size)
    entries = [0, size - 1, *draw.choice(np.arange(1, size - 1), SAMPLED - 2, replace=False)]
    return [unit(i) for i in entries], [draw.normal(size=shape) for _ in range(DIRECTIONS)]


def derivative_along(loss, array, direction, step=1e-6, put=lambda: None) -> float:
    """(loss() at array + step * direction - at array - step * direction) / (2 step); `array` is
    changed in place and restored, `put` makes a change seen."""
    original = array.copy()
    array[...] = original + step * direction
    put()
    plus = loss()
    array[...] = original - step * direction
    put()
    minus = loss()
    array[...] = original
    put()
    return (plus - minus) / (2 * step)


def assert_gradients_close(f, arrays, dy, gradients, rtol, atol):
    """`gradients` (one per array, e.g. a float32 device's) are d sum(f(*arrays) * dy) / d each
    array: at the probed entries within assert_allclose's rtol and atol of central differences in
    float64; along each Gaussian direction d within 4 sqrt(sum(t^2)), t = atol + rtol |g|: for
    any errors e within t entry by entry, sum(d e) is normal with a deviation of at most
    sqrt(sum(t^2)), so a right gradient fails 1 time in 16 000, and an entry off by E fails where
    |d at it| E exceeds the bound (at 77 values, rtol 1e-4, E of 1% of the gradient's norm: every
    entry of test_gradients' example, whose directions are fixed)."""
    arrays = [np.array(a, np.float64) for a in arrays]
    loss = lambda: np.sum(f(*arrays) * dy)
    for number, (array, got) in enumerate(zip(arrays, gradients, strict=True)):
        got = np.asarray(got, np.float64)
        assert got.shape == array.shape, f"gradient {number}: shape {got.shape}, expected {array.shape}"
        entries, directions = gradient_probes(array.shape)
        numeric = [derivative_along(loss, array, probe) for probe in entries]
        np.testing.assert_allclose([np.sum(got * probe) for probe in entries], numeric, rtol=rtol, atol=atol,
                                   err_msg=f"gradient {number} at its probed entries")
        bound = 4 * np.linalg.norm(atol + rtol * np.abs(got))
        for d in directions:
            error = abs(np.sum(got * d) - derivative_along(loss, array, d))
            assert error <= bound, f"gradient {number} along a random direction: off by {error:.3g} (bound {bound:.3g})"


# -- MultiHeadAttention, as Keras 3 computes it (its explicit-scores path) -----------------------
def multi_head_attention(query, value, key, weights, num_heads, mask=None, causal=False, keep=None, rate=0.0):
    """Keras's MultiHeadAttention: projections by einsum, the query scaled by 1/sqrt(key_dim),
    masked scores replaced by -1e9, softmax over the keys, dropout (`keep`: a boolean array of
    the probabilities' shape (batch, heads, Tq, Tk), kept where True) and the output projection.
    `weights` in get_weights() order. Returns (output, probabilities)."""
    wq, bq, wk, bk, wv, bv, wo, bo = weights
    q = np.einsum("btd,dhk->bthk", query, wq) + bq
    k = np.einsum("btd,dhk->bthk", key, wk) + bk
    v = np.einsum("btd,dhk->bthk", value, wv) + bv
    q = q * q.dtype.type(1.0 / math.sqrt(wq.shape[-1]))
    scores = np.einsum("bshk,bthk->bhts", k, q)                       # (batch, heads, Tq, Tk)
    kept = np.ones(scores.shape, bool)
    if causal:
        tq, tk = scores.shape[-2:]
        kept &= np.arange(tk)[None, :] <= np.arange(tq)[:, None]
    if mask is not None:
        kept &= np.asarray(mask)[:, None] > 0.5
    probabilities = softmax(np.where(kept, scores, scores.dtype.type(-1e9)))
    dropped = probabilities if keep is None else dropout(probabilities, keep, rate)
    context = np.einsum("bhts,bshk->bthk", dropped, v)
    return np.einsum("bthk,hko->bto", context, wo) + bo, probabilities


def pairwise_cover(cases: list[dict]) -> list[int]:
    """The indices of a few of `cases` (dicts of the same keys) among which every value of every
    key meets every value of every other key at least once (where there is one key, every value
    appears): greedily, the case covering most pairs not yet covered first, ties to the earlier,
    so that every process picks the same. Values are compared by repr, as some (arrays, dicts) do
    not hash."""
    pairs = [_value_pairs(case) for case in cases]
    uncovered, chosen = set().union(*pairs), []
    while uncovered:
        best = max(range(len(cases)), key=lambda i: len(pairs[i] & uncovered))
        uncovered -= pairs[best]
        chosen.append(best)
    return sorted(chosen)


def _value_pairs(case: dict) -> set:
    values = sorted((key, repr(value)) for key, value in case.items())
    return set(combinations(values, 2)) if len(values) > 1 else set(values)
