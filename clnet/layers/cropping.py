"""Cropping1D and Cropping2D: cells cut off both ends of the spatial axes, as Keras's.

Cropping is ZeroPadding2D transposed: the cropped image is the one that padding would surround
with the cut cells. Both passes launch zero_padding.cl's kernels with their roles swapped: the
forward pass is ZeroPadding2D's backward crop, and the backward pass its forward pad, which
writes the gradient into the kept cells and zeros into the cut ones. A 1-D layer runs as the 2-D
one of height 1 (see spatial.py)."""
from __future__ import annotations

from .base import Layer
from .spatial import CellCopy, check_rank, sides

AXES = {1: ("steps",), 2: ("height", "width")}
INT64_MAX = 2**63 - 1  # a Slice's end "to the end of the axis", whatever its extent


class _Cropping(CellCopy, Layer):
    """What Cropping1D and Cropping2D share; `sides` holds (before, after) per spatial axis."""
    rank = 2
    # zero_padding.cl's kernels (and their buffers), their roles swapped: its gradient's crop, then
    # its pad with zeros.
    forward_kernel, backward_kernel = "CalcHiddenGradientZeroPadding", "FeedForwardZeroPadding"
    forward_buffers, backward_buffers = ("output_gr", "input_gr"), ("inputs", "outputs")

    def __init__(self, cropping, name=None, input_shape=None):
        super().__init__(name, input_shape)
        self.sides = sides(self, "cropping", cropping, self.rank)

    @property
    def cropping(self):
        """Keras's form: (left, right) for Cropping1D, ((top, bottom), (left, right)) for Cropping2D."""
        return self.sides[0] if self.rank == 1 else self.sides

    def compute_output_shape(self, input_shape):
        check_rank(self, input_shape, self.rank)
        *lengths, channels = input_shape
        for axis, length, (before, after) in zip(AXES[self.rank], lengths, self.sides):
            if before + after >= length:
                raise ValueError(f"{type(self).__name__} {self.name!r}: cropping {self.cropping} leaves nothing of the "
                                 f"{axis} axis of input_shape {tuple(input_shape)}")
        return (*(length - before - after for length, (before, after) in zip(lengths, self.sides)), channels)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        height, width, channels = check_rank(self, self.input_shape, self.rank)
        out_h, out_w, _ = check_rank(self, shape, self.rank)
        (top, _), (left, _) = ((0, 0),) * (2 - self.rank) + self.sides
        # zero_padding.cl's geometry: the image it pads is the cropped one, the padded one the input.
        self.geometry = {"height": out_h, "width": out_w, "channels": channels, "top": top, "left": left,
                         "out_h": height, "out_w": width}
        self.program = self.rt.program(("layers/zero_padding.cl",), self.dtype)
        return shape

    def to_onnx(self, graph, inputs):
        # Ends counted from the end, -after (or the end itself for none), as Keras's x[:, a:-b]
        # and x[:, a:] are written: the importer reads such a Slice as a Cropping, and one of ends
        # counted from the start (ops.slice's) as ops.slice.
        cut = [(axis + 1, before, -after if after else INT64_MAX)
               for axis, (before, after) in enumerate(self.sides) if before or after]
        if not cut:
            return [inputs[0]]
        axes, starts, ends = zip(*cut)
        return [graph.slice(inputs[0], starts, ends, axes)]

    def get_config(self):
        cropping = list(self.cropping) if self.rank == 1 else [list(p) for p in self.cropping]
        return {**super().get_config(), "cropping": cropping}


class Cropping1D(_Cropping):
    """(steps, features) -> (steps - left - right, features): `cropping` is an int (both ends) or
    (left, right), as in Keras."""
    rank = 1

    def __init__(self, cropping=(1, 1), name=None, input_shape=None):
        super().__init__(cropping, name, input_shape)


class Cropping2D(_Cropping):
    """(height, width, channels) -> (height - top - bottom, width - left - right, channels):
    `cropping` is an int (all sides), a pair (symmetric height, width cropping) or ((top, bottom),
    (left, right)), as in Keras."""

    def __init__(self, cropping=((0, 0), (0, 0)), name=None, input_shape=None):
        super().__init__(cropping, name, input_shape)
