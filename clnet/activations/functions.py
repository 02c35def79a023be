"""Keras's activation functions (keras.activations.relu(x), ...), as call() code uses them: each
applies an Activation layer (a ReLU layer where relu has its options) to x, a symbolic tensor or
an array (then computed now, as any layer called on arrays)."""
from __future__ import annotations


def _apply(name: str, x, **params):
    from ..layers import Activation  # (the layers are above the activation families on the ladder)
    return Activation(name, **params)(x)


def relu(x, negative_slope=0.0, max_value=None, threshold=0.0):
    if negative_slope == 0.0 and max_value is None and threshold == 0.0:
        return _apply("relu", x)
    from ..layers import ReLU
    return ReLU(max_value=max_value, negative_slope=negative_slope, threshold=threshold)(x)


def leaky_relu(x, negative_slope=0.2):
    return _apply("lrelu", x, a=negative_slope)


def elu(x, alpha=1.0):
    return _apply("elu", x, a=alpha)


def gelu(x, approximate=False):
    if approximate:  # (the tanh form is ops.gelu's default)
        from .. import ops
        return ops.gelu(x, approximate=True)
    return _apply("gelu", x)


def sigmoid(x):
    return _apply("sigmoid", x)


def tanh(x):
    return _apply("tanh", x)


def softplus(x):
    return _apply("softplus", x)


def silu(x):
    return _apply("swish", x)


swish = silu


def softmax(x, axis=-1):
    if axis != -1:
        from .. import ops
        return ops.softmax(x, axis=axis)
    return _apply("softmax", x)


def linear(x):
    return x
