"""What a subclassed layer's call() computes with besides its inputs: its own weights (add_weight,
as Keras's) and constants (a layer called on an array while tracing, `pos_emb(ops.arange(n))`).
Each is a layer of no inputs whose output has no batch axis (see KerasTensor): the same for every
sample, one row per step, broadcast over the batch by the ops that read it.

`Variable` is the handle Keras code holds (`self.w = self.add_weight(...)`): an operand of ops
inside call(), and outside it a weight to read (`numpy()`) and write (`assign`). Built-in layers'
weights have the same handles (`layer.weights`), for reading and writing only."""
from __future__ import annotations

import numpy as np

from .. import initializers
from ..cl import runtime as cl_runtime
from ..cl.tensor import Tensor
from .base import TENSOR_OPERATORS, Layer, checked_shape, tracing


class Weight(Layer):
    """A weight of a subclassed layer (Layer.add_weight): its output is the weight, and the
    gradient its readers give it (summed over the batch) is the weight's gradient. Made by
    `add_weight`, not by hand.

    `shape`: the weight's, a tuple of positive integers or `()`. `initializer="glorot_uniform"`: a
    name `clnet.initializers.get` knows or a callable (a model whose weight has a callable cannot
    be saved). `trainable=True`: add_weight's, fixed when it is made (False: a statistic the
    optimizer leaves). `frozen=False`: the layer's own `trainable` set False, as a frozen owner's
    config restores it."""
    multi_input = True  # of no inputs

    def __init__(self, shape, initializer="glorot_uniform", trainable=True, name=None, frozen=False):
        super().__init__(name)
        self.weight_shape = checked_shape("add_weight: shape", shape, scalar=True)
        initializers.get(initializer)  # an unknown name raises here, naming the ones there are
        self.initializer = initializer
        if not isinstance(trainable, (bool, np.bool_)):
            raise TypeError(f"trainable must be True or False, got {trainable!r}")
        # add_weight's `trainable` (fixed when it is made); the layer's `trainable`, set False
        # with its owner's (`frozen` in its config), stops fit training it for now.
        self._weight_trainable = bool(trainable)
        if frozen:
            self.trainable = False

    def compute_output_shape(self, input_shapes, tensors=None):
        return self.weight_shape

    def build(self, input_shapes, store, rng):
        self.input_shapes, self.input_shape = [], None
        self.rt, self.dtype = store.rt, store.dtype
        initial = initializers.draw(initializers.get(self.initializer), self.weight_shape, rng, None)
        self.parameter = store.add(np.asarray(initial, np.float64).reshape(self.weight_shape),
                                   trainable=self._weight_trainable)
        self.output_shape = self.weight_shape
        self.built = True
        return self.output_shape

    @property
    def parameters(self):
        return [self.parameter] if self.built else []

    def forward(self, xs, rows):
        return self.parameter.value

    def backward(self, grad, rows, input_grads):
        # The readers' gradient, already summed over the batch, is the weight's: one copy.
        cl_runtime.cl.enqueue_copy(self.rt.queue, self.parameter.grad.buffer, grad.buffer,
                                   byte_count=self.parameter.size * self.dtype.itemsize)
        return []

    def to_onnx(self, graph, inputs):
        return [graph.constant("value", self.get_weights()[0])]

    def get_config(self):
        if callable(self.initializer):
            raise TypeError(f"{self.describe()} has the initializer {self.initializer!r}, a function, which a "
                            "config cannot hold; give add_weight an initializer by name ('zeros', 'glorot_uniform', ...)")
        return {"name": self.name, "shape": list(self.weight_shape), "initializer": self.initializer,
                "trainable": self._weight_trainable, **({} if self.trainable else {"frozen": True})}


class Constant(Layer):
    """An array a traced call() gave a layer (`self.pos_emb(ops.arange(maxlen))`): its output,
    without a batch axis, is the array in the model's float type; no gradient. Made by the trace,
    not by hand: `value` is an array (or nested list) of finite numbers or bools."""
    multi_input = True  # of no inputs

    def __init__(self, value, name=None):
        super().__init__(name)
        array = np.asarray(value)
        if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
            raise TypeError(f"a constant must be an array of numbers, got {type(value).__name__}")
        if not np.all(np.isfinite(array)):
            raise ValueError("a constant must hold finite numbers")
        self.value = array.astype(np.float64)

    def compute_output_shape(self, input_shapes, tensors=None):
        return self.value.shape

    def build(self, input_shapes, store, rng):
        self.input_shapes, self.input_shape = [], None
        self.rt, self.dtype = store.rt, store.dtype
        self.output_shape = self.value.shape
        self.tensor = Tensor.from_numpy(self.value.astype(self.dtype).reshape(1, *self.value.shape), self.dtype, self.rt)
        self.built = True
        return self.output_shape

    def forward(self, xs, rows):
        return self.tensor

    def backward(self, grad, rows, input_grads):
        return []

    def to_onnx(self, graph, inputs):
        return [graph.constant("value", self.value)]

    def get_config(self):
        return {"name": self.name, "value": self.value.tolist()}


class Variable:
    """A layer's weight, as Keras's Variable: `shape`, `trainable`, `name`, `path`, `numpy()`,
    `assign(value)`. A subclass's own (add_weight) is also an operand of ops in its call()
    (`ops.matmul(x, self.w) + self.b`); out of a trace its operators compute on its value.

    Made by `add_weight` and `layer.weights`, not by hand: `layer` holds the value (its
    `get_weights()[index]`), `name` is the weight's own name and `owner` the layer whose weight
    it is (`path` is `owner.name/name`, as Keras's)."""
    is_variable = True

    def __init__(self, layer: Layer, index: int, name: str, owner: Layer):
        self.layer, self.index = layer, index  # where the value is: layer.get_weights()[index]
        self.name = name
        self.owner = owner  # the layer whose weight it is (Keras's path: owner/name)
        # A weight of add_weight is a call of its Weight layer: the graph's tensor for it.
        self.tensor = layer([]) if isinstance(layer, Weight) else None
        if isinstance(layer, Weight):
            layer._weight_views = [self]  # (its `weights`: this Variable, not a view of its own)

    @property
    def path(self) -> str:
        return f"{self.owner.name}/{self.name}"

    @property
    def shape(self) -> tuple:
        if isinstance(self.layer, Weight):
            return self.layer.weight_shape
        return tuple(self.layer.parameters[self.index].keras_index.shape)

    @property
    def trainable(self) -> bool:
        """Whether fit trains it now: declared trainable, and its layer not set trainable = False."""
        declared = (self.layer._weight_trainable if isinstance(self.layer, Weight)
                    else self.layer.parameters[self.index].trainable)
        return declared and self.layer.trainable

    @property
    def dtype(self) -> str:
        return self.layer.dtype.name if self.layer.built else cl_runtime.floatx()

    def numpy(self) -> np.ndarray:
        if not self.layer.built:
            raise ValueError(f"weight {self.path!r} has no value yet: weights are made when a model (or a call of "
                             f"{self.owner.describe()} on arrays) first builds the layer")
        return self.layer.get_weights()[self.index]

    @property
    def value(self) -> np.ndarray:
        return self.numpy()

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def assign(self, value) -> None:
        if tracing():
            raise TypeError(f"weight {self.path!r}: assign() inside a traced call() cannot be traced (clnet's call() "
                            "computes tensors; weights change by training, or by assign() outside call())")
        array = np.asarray(value, np.float64)
        if array.shape != self.shape:
            raise ValueError(f"weight {self.path!r} has shape {self.shape}, got a value of shape {array.shape}")
        weights = self.layer.get_weights()
        weights[self.index] = array
        self.layer.set_weights(weights)

    def assign_add(self, value) -> None:
        self.assign(self.numpy() + np.asarray(value))

    def assign_sub(self, value) -> None:
        self.assign(self.numpy() - np.asarray(value))

    def __repr__(self) -> str:
        return f"<Variable path={self.path}, shape={self.shape}, dtype={self.dtype}>"

    # Operators as a tensor's: graph ops while tracing, numpy's on the value otherwise.
    __array_ufunc__ = None


def _operator(name: str):
    def method(self, *args):
        if tracing():
            if self.tensor is None:
                raise TypeError(f"weight {self.path!r} of a built-in layer cannot be an operand in a traced call(); "
                                "call the layer, or declare the weight with add_weight")
            return getattr(self.tensor, name)(*args)
        return getattr(self.numpy(), name)(*(np.asarray(a) if isinstance(a, Variable) else a for a in args))
    method.__name__ = name
    return method


for _name in TENSOR_OPERATORS:
    setattr(Variable, _name, _operator(_name))
del _name
