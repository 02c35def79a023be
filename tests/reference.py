"""numpy references for every kernel: the formulas the OpenCL code must reproduce."""
import math

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
