"""numpy references for every kernel: the formulas the OpenCL code must reproduce."""
import numpy as np

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
}


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


class OptimizerReference:
    """One update of each optimizer, in numpy, on flat float64 arrays."""

    def __init__(self, name, size, **hyper):
        self.name, self.h, self.t = name, hyper, 0
        init = {"adagrad": 0.1}.get(name, 0.0)
        self.s1 = np.full(size, init)
        self.s2 = np.zeros(size)

    def step(self, w, g):
        h = self.h
        self.t += 1
        g = g + h["l1"] * np.sign(w) + 2 * h["l2"] * w
        lr = h["learning_rate"]
        if self.name == "sgd":
            return w - lr * g
        if self.name == "momentum":
            self.s1 = h["momentum"] * self.s1 - lr * g
            return w + self.s1
        if self.name == "adagrad":
            self.s1 = self.s1 + g * g
            return w - lr * g / (np.sqrt(self.s1) + h["epsilon"])
        if self.name == "rmsprop":
            self.s1 = h["rho"] * self.s1 + (1 - h["rho"]) * g * g
            return w - lr * g / (np.sqrt(self.s1) + h["epsilon"])
        if self.name == "adadelta":
            self.s1 = h["rho"] * self.s1 + (1 - h["rho"]) * g * g
            dx = -np.sqrt(self.s2 + h["epsilon"]) / np.sqrt(self.s1 + h["epsilon"]) * g
            self.s2 = h["rho"] * self.s2 + (1 - h["rho"]) * dx * dx
            return w + lr * dx
        if self.name == "adam":
            self.s1 = h["beta_1"] * self.s1 + (1 - h["beta_1"]) * g
            self.s2 = h["beta_2"] * self.s2 + (1 - h["beta_2"]) * g * g
            m_hat = self.s1 / (1 - h["beta_1"] ** self.t)
            v_hat = self.s2 / (1 - h["beta_2"] ** self.t)
            return w - lr * m_hat / (np.sqrt(v_hat) + h["epsilon"])
        raise KeyError(self.name)


# -- convolution and pooling, channels_last, as Keras (TensorFlow's formulas) computes them --------
def same_padding(length, size, stride, dilation=1):
    """(before, after) padding of Keras's padding='same': ceil(length / stride) outputs, the
    odd pixel after."""
    extent = (size - 1) * dilation + 1
    total = max((-(-length // stride) - 1) * stride + extent - length, 0)
    return total // 2, total - total // 2


def _padded(x, sizes, strides, dilations, padding, value=0.0):
    pads = [same_padding(n, k, s, d) if padding == "same" else (0, 0)
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
