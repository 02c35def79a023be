"""What convolution and pooling layers share: their arguments (Keras's int-or-tuple forms), the
input rank they accept, and the window geometry of 'valid' and 'same' padding.

One-dimensional layers run as two-dimensional ones of height 1: (steps, channels) is laid out as
(1, steps, channels), and a (kernel, in, out) kernel as (1, kernel, in, out), without a copy."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor

SPATIAL = {1: "(steps, channels)", 2: "(height, width, channels)"}


def int_tuple(layer, argument: str, value, rank: int) -> tuple[int, ...]:
    """An int or `rank` ints, each >= 1, as a tuple (Keras's standardize_tuple)."""
    items = value if isinstance(value, (tuple, list)) else (value,) * rank
    if len(items) != rank or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in items):
        raise ValueError(f"{type(layer).__name__} {layer.name!r}: {argument} must be an integer or a tuple of "
                         f"{rank} integers, got {value!r}")
    if any(v < 1 for v in items):
        raise ValueError(f"{type(layer).__name__} {layer.name!r}: {argument} must be >= 1, got {value!r}")
    return tuple(int(v) for v in items)


# Keras's forms of per-side amounts (ZeroPadding2D's padding, Cropping1D/2D's cropping), by rank.
SIDES = {1: "a non-negative int or a pair of them (left, right)",
         2: "a non-negative int, a pair of them or a pair of pairs ((top, bottom), (left, right))"}


def sides(layer, argument: str, value, rank: int) -> tuple[tuple[int, int], ...]:
    """(before, after) along each of `rank` spatial axes, from Keras's forms: an int (every side),
    a pair (rank 1: before and after; rank 2: one amount per axis, both sides) or, rank 2, a
    pair of pairs."""
    integer = lambda v: not isinstance(v, bool) and isinstance(v, (int, np.integer)) and v >= 0
    pair = lambda v: isinstance(v, (tuple, list)) and len(v) == 2
    if integer(value):
        pairs = ((value, value),) * rank
    elif pair(value) and all(integer(v) for v in value):
        pairs = (tuple(value),) if rank == 1 else tuple((v, v) for v in value)
    elif rank == 2 and pair(value) and all(pair(p) and all(integer(v) for v in p) for p in value):
        pairs = tuple(value)
    else:
        raise ValueError(f"{type(layer).__name__} {layer.name!r}: {argument} must be {SIDES[rank]}, got {value!r}")
    return tuple((int(before), int(after)) for before, after in pairs)


def padding_mode(layer, value, causal: bool = False) -> str:
    """'valid' or 'same' (any case), and 'causal' where the layer takes it (Conv1D, as Keras)."""
    mode = value.lower() if isinstance(value, str) else value
    modes = ("valid", "same", "causal") if causal else ("valid", "same")
    if mode not in modes:
        expected = "'valid', 'same' or 'causal'" if causal else "'valid' or 'same'"
        raise ValueError(f"{type(layer).__name__} {layer.name!r}: padding must be {expected}, got {value!r}")
    return mode


def check_rank(layer, input_shape: tuple, rank: int) -> tuple[int, int, int]:
    """(height, width, channels) of an input of `rank` spatial axes, or a ValueError."""
    if len(input_shape) != rank + 1:
        raise ValueError(f"{type(layer).__name__} {layer.name!r} expects inputs of shape {SPATIAL[rank]}, "
                         f"got input_shape {tuple(input_shape)}")
    return (1, *input_shape) if rank == 1 else tuple(input_shape)


def window(layer, axis: str, length: int, size: int, stride: int, dilation: int, padding: str,
           argument: str, input_shape) -> tuple[int, int]:
    """(output length, padding before) along one axis, as Keras computes them: 'same' gives
    ceil(length / stride) outputs and pads size_eff - 1 (stride 1) or what the last window
    needs, pad_before = total // 2, the extra one after; 'causal' pads size_eff - 1 before and
    nothing after (Keras pads, then convolves 'valid': output t sees inputs up to t), which also
    gives ceil(length / stride) outputs; 'valid' needs the window to fit."""
    extent = (size - 1) * dilation + 1
    if padding == "causal":
        return -(-length // stride), extent - 1
    if padding == "same":
        outputs = -(-length // stride)
        return outputs, max((outputs - 1) * stride + extent - length, 0) // 2
    if extent > length:
        raise ValueError(f"{type(layer).__name__} {layer.name!r}: {argument} {size}"
                         f"{f' (dilated to {extent})' if dilation > 1 else ''} along the {axis} axis is larger "
                         f"than the input, whose shape is {tuple(input_shape)} (padding='valid')")
    return (length - extent) // stride + 1, 0



def onnx_pads(layer, sizes, strides, dilations) -> list[int]:
    """ONNX's explicit `pads` (all befores, then all afters) for the layer's padding along its
    spatial axes: Keras's 'same' split, the extra cell after, which ONNX's auto_pad does not
    promise for every case; 'causal' all before."""
    lengths = layer.input_shape[:len(sizes)]
    before, after = [], []
    for length, size, stride, dilation in zip(lengths, sizes, strides, dilations):
        outputs, pad = window(layer, "", length, size, stride, dilation, layer.padding, "", layer.input_shape)
        total = max((outputs - 1) * stride + (size - 1) * dilation + 1 - length, 0) if layer.padding == "same" else pad
        before.append(pad)
        after.append(total - pad)
    return before + after


def onnx_channels_first(graph, x: str, rank: int, op_type: str, *inputs: str, **attributes) -> str:
    """`op_type` (Conv, MaxPool, AveragePool), which reads (batch, channels, *spatial), on the
    channels_last tensor `x`: Transpose in, the op, Transpose back."""
    first = graph.op("Transpose", x, perm=[0, rank + 1, *range(1, rank + 1)])
    y = graph.op(op_type, first, *inputs, **attributes)
    return graph.op("Transpose", y, perm=[0, *range(2, rank + 2), 1])


class CellCopy:
    """What layers that move cells of (height, width, channels) images share (ZeroPadding2D,
    Cropping, UpSampling; a mixin of Layer): their buffers and launches. The forward kernel
    (`forward_kernel` of `self.program`) takes a work-item per output cell, (width x channels,
    rows x height) of the output; the backward one (`backward_kernel`) one per input cell; both
    take `self.geometry`, by name, besides their two buffers, whose names `forward_buffers` and
    `backward_buffers` give (what each reads, then what it writes)."""

    forward_kernel = backward_kernel = ""
    forward_buffers, backward_buffers = ("inputs", "outputs"), ("output_gr", "input_gr")

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt)
        self.input_grad = Tensor((capacity, *self.input_shape), dt, rt)  # dL/dx
        (reads, writes), (grad_reads, grad_writes) = self.forward_buffers, self.backward_buffers
        self._forward = rt.kernel(self.program, self.forward_kernel, dt).bind(
            (reads,), **{writes: self.outputs}, **self.geometry)
        self._hidden = rt.kernel(self.program, self.backward_kernel, dt).bind(
            (grad_reads,), **{grad_writes: self.input_grad}, **self.geometry)

    def forward(self, x, rows):
        out_h, out_w, channels = check_rank(self, self.output_shape, self.rank)
        self._forward((out_w * channels, rows * out_h), None, x)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        height, width, channels = check_rank(self, self.input_shape, self.rank)
        self._hidden((width * channels, rows * height), None, grad)
        return self.input_grad
