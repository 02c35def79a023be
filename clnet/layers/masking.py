"""Masking: marks the time steps whose features all equal `mask_value` as padding, as Keras's."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import BufferedLayer, layer_label


class Masking(BufferedLayer):
    """(batch, steps, ..., features): a step whose features all equal `mask_value` is padding; its
    output is the input there zeroed, and carries Keras's mask, 1 where a step holds data and 0
    where it is padding, which the layers after it read (a recurrent layer carries its state over
    the padding) or pass on (see Layer.mask_handling). Its own mask replaces one on its input."""

    mask_handling = "propagate"  # (it takes a masked input without a warning, as Keras's)

    def __init__(self, mask_value=0.0, name=None, input_shape=None):
        super().__init__(name, input_shape)
        if isinstance(mask_value, bool) or not isinstance(mask_value, (int, float, np.integer, np.floating)) \
                or not np.isfinite(mask_value):
            raise ValueError(f"{layer_label('Masking', name)}: mask_value must be a finite number, got {mask_value!r}")
        self.mask_value = float(mask_value)

    def compute_output_shape(self, input_shape):
        if len(input_shape) < 2:
            raise ValueError(f"{self.describe()} expects samples of shape (timesteps, ..., features), got "
                             f"input_shape {tuple(input_shape)}")
        return input_shape

    def makes_mask(self):
        return True

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        program = self.rt.program(("layers/masking.cl",), self.dtype)
        self._kernels = {name: self.rt.kernel(program, name, self.dtype) for name in (  # bound in allocate
            "FeedForwardMasking", "CalcHiddenGradientMasking")}
        self.features = input_shape[-1]
        self.positions = int(np.prod(input_shape[:-1]))  # steps per sample
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        self.output_mask = Tensor((capacity, *self.input_shape[:-1]), self.dtype, self.rt)  # (rows, steps)
        self._forward = self._kernels["FeedForwardMasking"].bind(
            ("inputs",), outputs=self.outputs, mask=self.output_mask, features=self.features,
            mask_value=self.mask_value)
        self._hidden = self._kernels["CalcHiddenGradientMasking"].bind(
            ("output_gr",), mask=self.output_mask, input_gr=self.input_grad, features=self.features)

    def forward(self, x, rows):
        self._forward((rows * self.positions,), None, x)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        self._hidden((rows * self.positions * self.features,), None, grad)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        """x * (whether any feature of the step differs from mask_value): |x - mask_value| > 0 as
        0 and 1, ReduceMax over the features, Mul. The mask itself is not exported (a model whose
        layers read it is not)."""
        value = graph.constant("mask_value", np.array(self.mask_value, graph.dtype))
        differs = graph.op("Greater", graph.op("Abs", graph.op("Sub", inputs[0], value)),
                           graph.constant("zero", np.array(0, graph.dtype)))
        held = graph.reduce("ReduceMax", graph.cast(differs, graph.dtype), [len(self.input_shape)], True)
        return [graph.op("Mul", inputs[0], held)]

    def get_config(self):
        return {**super().get_config(), "mask_value": self.mask_value}
