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


def dropout_keep(cells, seed, step, rate, dtype):
    """True where dropout.cl keeps the element of mask cell `cells`."""
    with np.errstate(over="ignore"):
        h = mix32(mix32(mix32(seed) + np.uint32(step)) + np.asarray(cells, np.uint32))
    return (h >> np.uint32(8)).astype(dtype) * dtype(1.0 / 16777216.0) < dtype(1 - rate)


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
