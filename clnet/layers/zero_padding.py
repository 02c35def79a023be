from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import Layer
from .spatial import check_rank


class ZeroPadding2D(Layer):
    """Zeros around each image of (height, width, channels): `padding` is an int (all sides), a
    pair (symmetric height, width padding) or ((top, bottom), (left, right)), as in Keras."""

    def __init__(self, padding=(1, 1), name=None, input_shape=None):
        super().__init__(name, input_shape)
        integer = lambda v: not isinstance(v, bool) and isinstance(v, (int, np.integer)) and v >= 0
        pair = lambda v: isinstance(v, (tuple, list)) and len(v) == 2
        if integer(padding):
            sides = ((padding, padding), (padding, padding))
        elif pair(padding) and all(integer(v) for v in padding):
            sides = ((padding[0], padding[0]), (padding[1], padding[1]))
        elif pair(padding) and all(pair(p) and all(integer(v) for v in p) for p in padding):
            sides = tuple(tuple(p) for p in padding)
        else:
            raise ValueError(f"ZeroPadding2D {name!r}: padding must be a non-negative int, a pair of them or a "
                             f"pair of pairs ((top, bottom), (left, right)), got {padding!r}")
        self.padding = tuple(tuple(int(v) for v in p) for p in sides)

    def compute_output_shape(self, input_shape):
        height, width, channels = check_rank(self, input_shape, 2)
        (top, bottom), (left, right) = self.padding
        return (top + height + bottom, left + width + right, channels)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        height, width, channels = self.input_shape
        self.geometry = (height, width, channels, self.padding[0][0], self.padding[1][0], *shape[:2])
        self.program = self.rt.program(("layers/zero_padding.cl",), self.dtype)
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt)    # (capacity, out_h, out_w, channels)
        self.input_grad = Tensor((capacity, *self.input_shape), dt, rt)  # dL/dx
        self._forward = rt.kernel(self.program, "FeedForwardZeroPadding", dt)
        self._hidden = rt.kernel(self.program, "CalcHiddenGradientZeroPadding", dt)

    def forward(self, x, rows):
        out_h, out_w, channels = self.output_shape
        self._forward((out_w * channels, rows * out_h), None, x, self.outputs, *self.geometry)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        height, width, channels = self.input_shape
        self._hidden((width * channels, rows * height), None, grad, self.input_grad, *self.geometry)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        (top, bottom), (left, right) = self.padding
        pads = [0, top, left, 0, 0, bottom, right, 0]  # (batch, height, width, channels): befores, afters
        if graph.opset >= 11:  # opset 11 moved the pads from an attribute to an input
            return [graph.op("Pad", inputs[0], graph.constant("pads", pads))]
        return [graph.op("Pad", inputs[0], pads=pads)]

    def get_config(self):
        return {**super().get_config(), "padding": [list(p) for p in self.padding]}
