"""Standalone activation layers, running the activation family's own kernels."""
from __future__ import annotations

import numpy as np

from .. import activations
from ..cl.tensor import Tensor
from .base import Layer


class Activation(Layer):
    """Applies an activation to every element (softmax: along the last axis)."""

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
        if self.activation.elementwise:
            prefix = self.activation.kernel_prefix
            self._forward = rt.kernel(self.program, prefix + "Activation", dt)
            self._derivative = rt.kernel(self.program, prefix + "Derivative", dt)
        else:
            self._forward = rt.kernel(self.program, "SoftMaxActivation", dt)
            self._derivative = rt.kernel(self.program, "SoftMaxDerivative", dt)

    def _row_group(self) -> int:
        return self.rt.row_group(self.cols)

    def forward(self, x, rows):
        self.x = x
        act = self.activation
        if act.elementwise:
            total = rows * self.width
            self._forward(*self.rt.four_per_item(total), x, self.outputs, total, act.a, act.b)
        else:
            group = self._row_group()
            self._forward((rows * self.width // self.cols * group,), (group,), x, self.outputs, self.cols)
        return self.outputs

    def forward_logits(self, x, rows):
        """The input, for a loss that takes the softmax itself (see Model._forward_loss)."""
        self.x = x
        return x

    def backward(self, grad, rows, input_grad, activation_done=False):
        if activation_done:
            return grad
        act = self.activation
        if act.elementwise:
            total = rows * self.width
            self._derivative(*self.rt.four_per_item(total), self.outputs, self.x, grad, self.input_grad,
                             total, act.a, act.b)
        else:
            group = self._row_group()
            self._derivative((rows * self.width // self.cols * group,), (group,),
                             self.outputs, grad, self.input_grad, self.cols)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        return [self.activation.to_onnx(graph, inputs[0])]

    def get_config(self):
        config = {**super().get_config(), **self.activation.get_config()}
        config["activation"] = config.pop("name")
        config["name"] = self.name
        return config


class Softmax(Activation):
    def __init__(self, name=None, input_shape=None):
        super().__init__("softmax", name, input_shape)

    def get_config(self):
        return Layer.get_config(self)
