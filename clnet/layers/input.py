from __future__ import annotations

import numpy as np

from ..cl import runtime as cl_runtime

from .base import TENSOR_OPERATORS, Call, Layer, checked_shape


class PassThrough(Layer, registered=False):
    """A layer that computes nothing: its output is its input's buffer, its input's gradient its
    output's, and it exports as no ONNX node (Input; Lambda's marking call)."""

    def forward(self, x, rows):
        return x

    def backward(self, grad, rows, input_grad, activation_done=False):
        return grad if input_grad else None

    def to_onnx(self, graph, inputs):
        return inputs


class Input(PassThrough):
    """Declares the shape of one sample (without the batch axis); computes nothing.

    The first layer of a Sequential list, or the start of a functional graph:
    `x = Input((28, 28)); y = Dense(10)(Flatten()(x)); Model(x, y)`. `output` is the symbolic
    tensor it stands for, so it can be passed wherever a layer's output can, and Python's
    operators on it are its output's (clnet.ops calls).

    `shape`: the sample's shape, a tuple of positive integers, any of which may be None (a length
    each batch gives; the model builds on its first data, see the models guide). `dtype`:
    Keras's, what the input holds (`"int32"` token ids, `"float32"`, any numeric numpy dtype); it is
    checked and kept in the config, but the values travel in the model's float type (ids exactly
    up to 2^24 in float32). Unlike Keras's, it takes no `batch_size`, `sparse` or `tensor`."""

    name_prefix = "input_layer"  # as Keras's InputLayer
    is_input = True

    def __init__(self, shape, name=None, dtype=None):
        super().__init__(name)
        self.input_shape = checked_shape("Input shape", shape, lengths=True)
        # Keras's dtype says what the input holds (int32 token ids, floats); clnet's values all
        # travel in the model's float type (ids exactly up to 2^24 in float32), so it is checked
        # and kept for the config, not computed in.
        if dtype is not None:
            try:
                kind = np.dtype(dtype)
            except TypeError:
                kind = None
            if kind is None or not (np.issubdtype(kind, np.number) or kind == np.bool_):
                raise ValueError(f"Input dtype must be a numeric dtype such as 'int32' or 'float32', got {dtype!r}")
            dtype = kind.name
        self.input_dtype = dtype
        # What Keras's `Input(...).dtype` says: the declared type, else the float type models compute
        # in by default (a model's own, once built, where the values travel).
        self.dtype = np.dtype(dtype or cl_runtime.floatx())
        Call(self, [], [self.input_shape], batched=True)  # its output, the tensor it stands for

    @property
    def input(self):
        return self.output

    @property
    def shape(self) -> tuple:
        return self.output.shape

    def get_config(self):
        config = {"name": self.name, "shape": list(self.input_shape)}
        return config if self.input_dtype is None else {**config, "dtype": self.input_dtype}


def _forwarded(name: str):
    def method(self, *args):
        return getattr(self.output, name)(*args)
    method.__name__ = name
    return method


# Keras's Input is the tensor itself (`x = Input((4,)); y = x * 2`); clnet's stands for its
# output, so Python's operators on it are its output's (clnet.ops calls). == and != stay
# identity, as on the tensor.
for _name in TENSOR_OPERATORS:
    setattr(Input, _name, _forwarded(_name))
Input.__array_ufunc__ = None  # numpy defers to these (`array * x` calls x.__rmul__)
Input.__iter__ = None
del _name

