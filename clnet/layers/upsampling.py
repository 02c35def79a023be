"""UpSampling1D and UpSampling2D: each step or pixel repeated along the spatial axes (nearest),
as Keras's. A 1-D layer runs as the 2-D one of height 1 (see spatial.py)."""
from __future__ import annotations

import numpy as np

from .base import Layer
from .spatial import CellCopy, check_rank, int_tuple


class _UpSampling(CellCopy, Layer):
    """What UpSampling1D and UpSampling2D share; `factors` holds the repeats per spatial axis."""
    rank = 2
    forward_kernel, backward_kernel = "FeedForwardUpSampling", "CalcHiddenGradientUpSampling"
    factors: tuple[int, ...]

    def compute_output_shape(self, input_shape):
        check_rank(self, input_shape, self.rank)
        *lengths, channels = input_shape
        return (*(length * factor for length, factor in zip(lengths, self.factors)), channels)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        _, width, channels = check_rank(self, self.input_shape, self.rank)
        up_h, up_w = self.factors if self.rank == 2 else (1, *self.factors)
        self.geometry = {"width": width, "channels": channels, "up_h": up_h, "up_w": up_w}
        self.program = self.rt.program(("layers/upsampling.cl",), self.dtype)
        return shape

    def to_onnx(self, graph, inputs):
        graph.require_opset(10, "UpSampling (Resize)")
        scales = graph.constant("scales", [1.0, *self.factors, 1.0], dtype=np.float32)  # (Resize takes float32)
        if graph.opset < 11:
            return [graph.op("Resize", inputs[0], scales, mode="nearest")]
        # Opset 11 made the source cell's placement attributes: asymmetric coordinates x / factor,
        # rounded down, are the repeat (as torch's nn.Upsample writes it). The roi is unused.
        return [graph.op("Resize", inputs[0], graph.constant("roi", []), scales, mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")]


class UpSampling1D(_UpSampling):
    """Keras's `UpSampling1D(size=2)`: `(batch, steps, features) -> (batch, steps · size,
    features)`, each step repeated `size` times in a row (`size` a positive integer); the gradient
    of a step is the sum over its copies."""
    rank = 1

    def __init__(self, size=2, name=None, input_shape=None):
        super().__init__(name, input_shape)
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"UpSampling1D {self.name!r}: size must be a positive integer, got {size!r}")
        self.size = int(size)
        self.factors = (self.size,)

    def get_config(self):
        return {**super().get_config(), "size": self.size}


class UpSampling2D(_UpSampling):
    """(height, width, channels) -> (height * size[0], width * size[1], channels): each pixel
    repeated into a size[0] x size[1] block, as Keras's with interpolation="nearest" (the only one
    clnet computes)."""

    def __init__(self, size=(2, 2), interpolation="nearest", name=None, input_shape=None):
        super().__init__(name, input_shape)
        self.size = self.factors = int_tuple(self, "size", size, 2)
        if not isinstance(interpolation, str) or interpolation.lower() != "nearest":
            raise ValueError(f"UpSampling2D {self.name!r}: clnet computes interpolation='nearest' only, got "
                             f"interpolation={interpolation!r}")
        self.interpolation = "nearest"

    def get_config(self):
        return {**super().get_config(), "size": list(self.size), "interpolation": self.interpolation}
