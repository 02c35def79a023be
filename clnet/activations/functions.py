"""Keras's activation functions (keras.activations.relu(x), ...), as call() code uses them: each
applies an Activation layer (a ReLU layer where relu has its options) to x, a symbolic tensor or
an array (then computed now, as any layer called on arrays)."""
from __future__ import annotations


def _apply(name: str, x, **params):
    from ..layers import Activation  # (the layers are above the activation families on the ladder)
    return Activation(name, **params)(x)


def relu(x, negative_slope=0.0, max_value=None, threshold=0.0):
    """As `keras.activations.relu`: the `"relu"` activation applied to `x`, a symbolic tensor (a layer
    call of the graph) or an array (computed now, a numpy array back). With any of Keras's options
    set, a `ReLU` layer of them: `max_value`, `negative_slope` and `threshold` must be non-negative."""
    if negative_slope == 0.0 and max_value is None and threshold == 0.0:
        return _apply("relu", x)
    from ..layers import ReLU
    return ReLU(max_value=max_value, negative_slope=negative_slope, threshold=threshold)(x)


def leaky_relu(x, negative_slope=0.2):
    """As `keras.activations.leaky_relu`: x for x > 0, else `negative_slope` x (the `"lrelu"`
    activation; Keras's function's default slope 0.2, not the layer's 0.3), applied to a symbolic
    tensor or an array (computed now)."""
    return _apply("lrelu", x, a=negative_slope)


def elu(x, alpha=1.0):
    """As `keras.activations.elu`: x for x > 0, else `alpha` (exp(x) - 1) (the `"elu"` activation),
    applied to a symbolic tensor or an array (computed now)."""
    return _apply("elu", x, a=alpha)


def gelu(x, approximate=False):
    """As `keras.activations.gelu`: x Φ(x), the exact (erf) form by default (the `"gelu"` activation),
    applied to a symbolic tensor or an array (computed now); `approximate=True` is
    `clnet.ops.gelu`'s tanh approximation."""
    if approximate:  # (the tanh form is ops.gelu's default)
        from .. import ops
        return ops.gelu(x, approximate=True)
    return _apply("gelu", x)


def sigmoid(x):
    """As `keras.activations.sigmoid`: 1 / (1 + exp(-x)) (the `"sigmoid"` activation), applied to a
    symbolic tensor or an array (computed now)."""
    return _apply("sigmoid", x)


def tanh(x):
    """As `keras.activations.tanh`: tanh(x) (the `"tanh"` activation), applied to a symbolic tensor or
    an array (computed now)."""
    return _apply("tanh", x)


def softplus(x):
    """As `keras.activations.softplus`: log(1 + exp(x)) (the `"softplus"` activation), applied to a
    symbolic tensor or an array (computed now)."""
    return _apply("softplus", x)


def silu(x):
    """As `keras.activations.silu` (also `swish`): x sigmoid(x) (the `"swish"` activation), applied
    to a symbolic tensor or an array (computed now)."""
    return _apply("swish", x)


swish = silu


def softmax(x, axis=-1):
    """As `keras.activations.softmax`: exp(x) / sum(exp(x)) along `axis` (a sample axis, the last by
    default), applied to a symbolic tensor or an array (computed now). Along the last axis it is the
    `"softmax"` activation, which a cross-entropy loss may take over; along another,
    `clnet.ops.softmax`."""
    if axis != -1:
        from .. import ops
        return ops.softmax(x, axis=axis)
    return _apply("softmax", x)


def linear(x):
    """`clnet.activations.linear(x)`, as `keras.activations.linear`: the identity, `x` itself (a
    symbolic tensor or an array), with no layer added."""
    return x
