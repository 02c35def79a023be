"""Standalone activation layers, running the activation family's own kernels."""
from __future__ import annotations

import numpy as np

from .. import activations
from ..cl.tensor import Tensor
from .base import Layer, layer_label


class Activation(Layer):
    """Keras's `Activation(activation)`: applies an activation to every element, or softmax along
    the last axis; any shape, `(batch, *shape) -> (batch, *shape)`, the input's mask goes on.

    `activation` is anything `clnet.activations.get` takes: None (the identity), a name (`"relu"`,
    `"gelu"`, `"softmax"`, ...), a config dict or an Activation; further keyword arguments
    (`params`) are the family's parameters by name, `Activation("lrelu", a=0.1)`. Unlike Keras's, a
    Python function is not taken (use `Lambda` or `clnet.ops`). It runs the activation family's own
    kernels; at a model's output a cross-entropy loss may take over its softmax."""
    mask_handling = "propagate"  # (a step at a time: the input's mask goes on)


    def __init__(self, activation, name=None, input_shape=None, **params):
        super().__init__(name, input_shape)
        self.activation = activations.get(activation, **params)
        self.output_activation = self.activation

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.width = int(np.prod(shape))       # elements per sample
        self.cols = shape[-1]                  # softmax normalises along the last axis
        self.program = self.activation.program(self.rt, self.dtype)
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        shape = (capacity, *self.output_shape)
        self.outputs = Tensor(shape, dt, rt)
        self.input_grad = Tensor(shape, dt, rt)
        # Each kernel's arguments named once; a launch gives those that change, in the order bound.
        act = self.activation
        if act.elementwise:
            prefix = act.kernel_prefix
            self._forward = rt.kernel(self.program, prefix + "Activation", dt).bind(
                ("inputs", "total"), outputs=self.outputs, a=act.a, b=act.b)
            self._derivative = rt.kernel(self.program, prefix + "Derivative", dt).bind(
                ("inputs", "output_gr", "total"), outputs=self.outputs, input_gr=self.input_grad, a=act.a, b=act.b)
        else:
            self._forward, self._derivative = act.launches(rt, dt, self.cols, self.outputs, self.input_grad)

    def _row_group(self) -> int:
        return self.rt.row_group(self.cols)

    def forward(self, x, rows):
        self.x = x
        act = self.activation
        if act.elementwise:
            total = rows * self.width
            self._forward(*self.rt.four_per_item(total), x, total)
        else:
            group = self._row_group()
            self._forward((rows * self.width // self.cols * group,), (group,), x)
        return self.outputs

    def forward_logits(self, x, rows):
        """The input, for a loss that takes the softmax itself (see Step._forward_loss)."""
        self.x = x
        return x

    def backward(self, grad, rows, input_grad, activation_done=False):
        if activation_done:
            return grad
        act = self.activation
        if act.elementwise:
            total = rows * self.width
            self._derivative(*self.rt.four_per_item(total), self.x, grad, total)
        else:
            group = self._row_group()
            self._derivative((rows * self.width // self.cols * group,), (group,), grad)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        return [self.activation.to_onnx(graph, inputs[0])]

    def get_config(self):
        config = {**super().get_config(), **self.activation.get_config()}
        config["activation"] = config.pop("name")
        config["name"] = self.name
        return config


class Softmax(Activation):
    """Softmax along `axis`, as Keras's layer: the last by default, or any sample axis, counted as
    Keras counts them (the batch is axis 0). Along the last it runs the "softmax" activation's row
    kernels, which a cross-entropy loss may take over; along another, SoftMaxAxis* (softmax.cl)."""

    def __init__(self, axis=-1, name=None, input_shape=None):
        super().__init__("softmax", name, input_shape)
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or axis == 0:
            raise ValueError(f"{layer_label('Softmax', name)}: axis must be a nonzero integer, one axis of the samples (0 is the "
                             f"batch), got {axis!r}")
        self.axis = int(axis)

    def compute_output_shape(self, input_shape):
        if not -len(input_shape) <= self.axis <= len(input_shape):
            raise ValueError(f"Softmax {self.name!r}: axis {self.axis} is not a sample axis of inputs of shape "
                             f"{(None, *input_shape)}")
        return tuple(input_shape)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        along = self.axis - 1 if self.axis > 0 else len(shape) + self.axis
        self.cols, self.inner = shape[along], int(np.prod(shape[along + 1:]))
        if self.inner > 1:
            self.output_activation = None  # a loss takes over a softmax along the last axis only
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        if self.inner > 1:
            sizes = {"n": self.cols, "inner": self.inner}
            self._forward = self.rt.kernel(self.program, "SoftMaxAxisActivation", self.dtype).bind(
                ("inputs", "columns"), outputs=self.outputs, **sizes)
            self._derivative = self.rt.kernel(self.program, "SoftMaxAxisDerivative", self.dtype).bind(
                ("output_gr", "columns"), outputs=self.outputs, input_gr=self.input_grad, **sizes)

    def _columns(self, rows) -> tuple[int, tuple[int]]:
        columns = rows * self.width // self.cols
        return columns, (-(-columns // 64) * 64,)

    def forward(self, x, rows):
        if self.inner == 1:
            return super().forward(x, rows)
        self.x = x
        columns, size = self._columns(rows)
        self._forward(size, None, x, columns)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if self.inner == 1:
            return super().backward(grad, rows, input_grad, activation_done)
        columns, size = self._columns(rows)
        self._derivative(size, None, grad, columns)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        graph.require_opset(13, "Softmax normalising along one axis alone")
        return [graph.op("Softmax", inputs[0], axis=self.axis)]

    def get_config(self):
        return {**Layer.get_config(self), "axis": self.axis}
