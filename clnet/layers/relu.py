"""Keras 3's ReLU-like activation layers: ReLU(max_value, negative_slope, threshold), which runs
kernels of its own (relu.cl: three parameters), and LeakyReLU and ELU, which run their activation
families' kernels ("lrelu", "elu") as Activation layers do."""
from __future__ import annotations

import math

import numpy as np

from .. import activations
from .activation import Activation
from .base import BufferedLayer, Layer, layer_label


def _number(kind: str, name, argument: str, value, non_negative: bool = True, expected: str = "") -> float:
    """`value` as a float: a finite number, non-negative unless told otherwise."""
    if (isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating))
            or not math.isfinite(value) or (non_negative and value < 0)):
        expected = expected or ("a non-negative number" if non_negative else "a finite number")
        raise ValueError(f"{layer_label(kind, name)}: {argument} must be {expected}, got {value!r}")
    return float(value)


class ReLU(BufferedLayer):
    """y = min(x, max_value) for x > threshold, else negative_slope (x - threshold), as Keras's
    ReLU layer; all three non-negative (Keras refuses negative ones too), max_value None for none."""
    mask_handling = "propagate"  # (a step at a time: the input's mask goes on)


    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, name=None, input_shape=None):
        super().__init__(name, input_shape)
        self.max_value = None if max_value is None else _number("ReLU", name, "max_value", max_value,
                                                                expected="None or a non-negative number")
        self.negative_slope = _number("ReLU", name, "negative_slope", negative_slope)
        self.threshold = _number("ReLU", name, "threshold", threshold)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.width = int(np.prod(shape))  # elements per sample
        program = self.rt.program(("layers/relu.cl",), self.dtype)
        self._kernels = {name: self.rt.kernel(program, name, self.dtype)  # bound in allocate
                         for name in ("FeedForwardReLU", "CalcHiddenGradientReLU")}
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        relu = {"max_value": math.inf if self.max_value is None else self.max_value, "slope": self.negative_slope,
                "threshold": self.threshold}
        self._forward = self._kernels["FeedForwardReLU"].bind(("inputs", "total"), outputs=self.outputs, **relu)
        self._backward = self._kernels["CalcHiddenGradientReLU"].bind(("inputs", "output_gr", "total"),
                                                                      input_gr=self.input_grad, **relu)

    def forward(self, x, rows):
        self.x = x  # the derivative reads x (see relu.cl)
        total = rows * self.width
        self._forward(*self.rt.four_per_item(total), x, total)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        total = rows * self.width
        self._backward(*self.rt.four_per_item(total), self.x, grad, total)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        x, slope, top = inputs[0], self.negative_slope, self.max_value
        if self.threshold == 0 and top is None:  # Relu, or LeakyRelu as the "lrelu" activation writes it
            return [activations.get("lrelu", a=slope).to_onnx(graph, x) if slope else graph.op("Relu", x)]
        if self.threshold == 0 and slope == 0:
            if graph.opset >= 11:  # opset 11 moved Clip's bounds from attributes to inputs
                return [graph.op("Clip", x, graph.constant("min", 0.0), graph.constant("max", top))]
            return [graph.op("Clip", x, min=0.0, max=top)]
        graph.require_opset(9, "ReLU with a threshold, or with both max_value and negative_slope (Where)")
        threshold = graph.constant("threshold", self.threshold)
        above = x if top is None else graph.op("Min", x, graph.constant("max_value", top))
        below = graph.op("Mul", graph.op("Sub", x, threshold), graph.constant("negative_slope", slope))
        return [graph.op("Where", graph.op("Greater", x, threshold), above, below)]

    def get_config(self):
        return {**super().get_config(), "max_value": self.max_value, "negative_slope": self.negative_slope,
                "threshold": self.threshold}


class LeakyReLU(Activation):
    """Keras's `LeakyReLU(negative_slope=0.3)`: y = x for x > 0, else `negative_slope` · x, on any
    shape; `negative_slope` a non-negative number, as Keras requires (the `"lrelu"` activation's
    kernels)."""

    def __init__(self, negative_slope=0.3, name=None, input_shape=None):
        super().__init__("lrelu", name, input_shape,
                         a=_number("LeakyReLU", name, "negative_slope", negative_slope))

    def get_config(self):
        return {**Layer.get_config(self), "negative_slope": self.activation.a}


class ELU(Activation):
    """Keras's `ELU(alpha=1.0)`: y = x for x > 0, else `alpha` · (exp(x) - 1), on any shape; `alpha`
    any finite number (the `"elu"` activation's kernels)."""

    def __init__(self, alpha=1.0, name=None, input_shape=None):
        super().__init__("elu", name, input_shape, a=_number("ELU", name, "alpha", alpha, non_negative=False))

    def get_config(self):
        return {**Layer.get_config(self), "alpha": self.activation.a}
