from __future__ import annotations

from .base import Layer
from .spatial import CellCopy, check_rank, sides


class ZeroPadding2D(CellCopy, Layer):
    """Zeros around each image of (height, width, channels): `padding` is an int (all sides), a
    pair (symmetric height, width padding) or ((top, bottom), (left, right)), as in Keras."""

    rank = 2
    forward_kernel, backward_kernel = "FeedForwardZeroPadding", "CalcHiddenGradientZeroPadding"

    def __init__(self, padding=(1, 1), name=None, input_shape=None):
        super().__init__(name, input_shape)
        self.padding = sides(self, "padding", padding, 2)

    def compute_output_shape(self, input_shape):
        height, width, channels = check_rank(self, input_shape, 2)
        (top, bottom), (left, right) = self.padding
        return (top + height + bottom, left + width + right, channels)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        height, width, channels = self.input_shape
        self.geometry = {"height": height, "width": width, "channels": channels, "top": self.padding[0][0],
                         "left": self.padding[1][0], "out_h": shape[0], "out_w": shape[1]}
        self.program = self.rt.program(("layers/zero_padding.cl",), self.dtype)
        return shape

    def to_onnx(self, graph, inputs):
        (top, bottom), (left, right) = self.padding
        pads = [0, top, left, 0, 0, bottom, right, 0]  # (batch, height, width, channels): befores, afters
        if graph.opset >= 11:  # opset 11 moved the pads from an attribute to an input
            return [graph.op("Pad", inputs[0], graph.constant("pads", pads))]
        return [graph.op("Pad", inputs[0], pads=pads)]

    def get_config(self):
        return {**super().get_config(), "padding": [list(p) for p in self.padding]}
