"""Reductions over sample axes (sum, mean, max, min, with Keras's `axis` and `keepdims`; argmax
and argmin along one or all) and softmax along one. The batch axis is never reduced: axis=None means every sample axis, and
naming axis 0 raises."""
from __future__ import annotations

import builtins

import numpy as np

from ..cl.tensor import Tensor
from ..layers.activation import Softmax
from .base import (Op, check_axis, eager_array, eager_axis, geometry, is_symbolic, launch, op_name, row_major,
                   run_eagerly, size, symbolic)

REDUCTIONS = ["sum", "mean", "max", "min", "argmax", "argmin"]  # reduction.cl's REDUCE_* codes, in order
INDICES = ("argmax", "argmin")  # (no gradient)


def axes_of(op: str, axis, rank: int) -> tuple[int, ...]:
    """`axis` (an int, a tuple of them or None) as sorted, distinct sample axes of a tensor of
    `rank` axes counting the batch; None is every sample axis."""
    if axis is None:
        return tuple(range(1, rank))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = sorted(check_axis(op, a, rank) for a in items)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: axis {axis!r} names an axis twice")
    return tuple(axes)


class Reduction(Op):
    """sum, mean, max, min, argmax or argmin of each sample over `axis` (sample axes, counted as
    Keras counts them: 1 is the first after the batch); `keepdims` keeps them as axes of 1."""

    def __init__(self, op, axis=None, keepdims=False, name=None):
        if op not in REDUCTIONS:
            raise ValueError(f"Reduction: op must be one of {REDUCTIONS}, got {op!r}")
        super().__init__(op_name(op) if name is None else name)
        self.op, self.keepdims = op, bool(keepdims)
        self.axis = None if axis is None else tuple(axis) if isinstance(axis, (tuple, list)) else axis

    def compute_output_shape(self, input_shapes, tensors=None):
        (shape,) = input_shapes
        self.reduced_axes = [a - 1 for a in axes_of(self.op, self.axis, len(shape) + 1)]  # sample axes
        if self.keepdims:
            return tuple(1 if k in self.reduced_axes else e for k, e in enumerate(shape))
        return tuple(e for k, e in enumerate(shape) if k not in self.reduced_axes)

    def setup(self):
        shape = self.input_shape
        kept = [e for k, e in enumerate(shape) if k not in self.reduced_axes]
        out_strides = iter(row_major(kept))
        axes = []  # (extent, input stride, output stride) per axis, extent-1 axes dropped, neighbours merged
        for k, (extent, stride) in enumerate(zip(shape, row_major(shape))):
            out = 0 if k in self.reduced_axes else next(out_strides)
            if extent == 1:
                continue
            if axes and (axes[-1][2] == 0) == (out == 0):
                axes[-1] = [axes[-1][0] * extent, stride, out]
            else:
                axes.append([extent, stride, out])
        self.axes, self.dims = len(axes), geometry(self.rt, axes)
        self.in_width, self.reduced = size(shape), size([shape[k] for k in self.reduced_axes])
        program = self.rt.program(("ops/reduction.cl",), self.dtype)
        # Every argument given by each launch (the input differs per call), its name checked once.
        self._forward = self.rt.kernel(program, "Reduce", self.dtype).bind(
            ("op", "x", "y", "ties", "dims", "axes", "in_width", "out_width", "reduced", "total"))
        self._gradient = self.rt.kernel(program, "ReduceGradient", self.dtype).bind(
            ("op", "x", "y", "ties", "grad", "dx", "dims", "axes", "in_width", "out_width", "reduced", "total"))
        self.code = REDUCTIONS.index(self.op)

    def allocate(self, capacity):
        super().allocate(capacity)
        self.ties = Tensor((capacity, *self.output_shape), self.dtype, self.rt) if self.op in ("max", "min") else None
        self.input_grad = Tensor((capacity, *self.input_shape), self.dtype, self.rt)

    def forward(self, xs, rows):
        self.x = xs[0]
        total = rows * self.width
        self._forward(*launch(total), self.code, self.x, self.outputs, self.ties or self.outputs, self.dims, self.axes,
                      self.in_width, self.width, self.reduced, total)
        return self.outputs

    def backward(self, grad, rows, input_grads):
        if not input_grads[0]:
            return [None]
        if self.op in INDICES:  # an index is constant where it is defined
            return [self.zeros_for(0)]
        total = rows * self.in_width
        self._gradient(*launch(total), self.code, self.x, self.outputs, self.ties or self.outputs, grad,
                       self.input_grad, self.dims, self.axes, self.in_width, self.width, self.reduced, total)
        return [self.input_grad]

    def to_onnx(self, graph, inputs):
        if self.op in INDICES:  # ONNX's ArgMax takes one axis: every sample axis is one once flattened
            x, axis = inputs[0], self.reduced_axes[0] + 1
            if len(self.reduced_axes) > 1:
                x, axis = graph.op("Flatten", x, axis=1), 1
            index = graph.op("ArgMax" if self.op == "argmax" else "ArgMin", x, axis=axis,
                             keepdims=int(self.keepdims and len(self.reduced_axes) == 1))
            if self.keepdims and len(self.reduced_axes) > 1:
                index = graph.op("Reshape", index, graph.constant("shape", np.array([-1, *self.output_shape], np.int64)))
            return [graph.cast(index, graph.dtype)]
        # The sample axes reduced, + 1 for ONNX's batch axis (ReduceSum's axes an input from opset
        # 13, the others' from 18: GraphBuilder.reduce writes the form the opset takes).
        op = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin"}[self.op]
        return [graph.reduce(op, inputs[0], [a + 1 for a in self.reduced_axes], self.keepdims)]

    def get_config(self):
        axis = list(self.axis) if isinstance(self.axis, tuple) else self.axis
        return {"name": self.name, "op": self.op, "axis": axis, "keepdims": self.keepdims}


def reduce(op: str, x, axis, keepdims):
    if not isinstance(keepdims, (bool, np.bool_)):
        raise TypeError(f"{op}: keepdims must be True or False, got {keepdims!r}")
    if is_symbolic(x):
        return Reduction(op, axis, keepdims)([symbolic(x)])
    array = eager_array(op, "x", x)
    if array.ndim == 0:  # numpy reduces a number to itself
        array = array.reshape(1)
        axis = None if axis is None else 0 if axis in (0, -1, (0,), (-1,)) else axis
    return run_eagerly(Reduction(op, eager_axis(axis), keepdims), [array])


def sum(x, axis=None, keepdims=False):  # noqa: A001 (Keras's name)
    """The sum of `x`'s elements over `axis`, as `keras.ops.sum`. `axis`: an int, a tuple of them,
    or None (every sample axis), counted as Keras counts (the batch is axis 0, which a symbolic
    tensor's reduction refuses); `keepdims` keeps the reduced axes as axes of 1."""
    return reduce("sum", x, axis, keepdims)


def mean(x, axis=None, keepdims=False):
    """The mean of `x`'s elements over `axis`, as `keras.ops.mean`. `axis`: an int, a tuple of them,
    or None (every sample axis), counted as Keras counts (the batch is axis 0, which a symbolic
    tensor's reduction refuses); `keepdims` keeps the reduced axes as axes of 1."""
    return reduce("mean", x, axis, keepdims)


def max(x, axis=None, keepdims=False):  # noqa: A001
    """The maximum of `x`'s elements over `axis`, as `keras.ops.max` (also `amax`); where several
    elements tie for it, they share its gradient equally. `axis`: an int, a tuple of them, or None
    (every sample axis), counted as Keras counts (the batch is axis 0, which a symbolic tensor's
    reduction refuses); `keepdims` keeps the reduced axes as axes of 1."""
    return reduce("max", x, axis, keepdims)


def min(x, axis=None, keepdims=False):  # noqa: A001
    """The minimum of `x`'s elements over `axis`, as `keras.ops.min` (also `amin`); where several
    elements tie for it, they share its gradient equally. `axis`: an int, a tuple of them, or None
    (every sample axis), counted as Keras counts (the batch is axis 0, which a symbolic tensor's
    reduction refuses); `keepdims` keeps the reduced axes as axes of 1."""
    return reduce("min", x, axis, keepdims)


amax, amin = max, min


def argmax(x, axis=None, keepdims=False):
    """The index of the largest element along `axis` (one axis, or None: every sample axis, the
    index in the flattened sample), the first where several tie, as a float; no gradient."""
    return _index("argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """The index of the smallest element along `axis`, as `keras.ops.argmin`: one axis, or None (every
    sample axis, the index in the flattened sample); the first where several tie, as a float in the
    model's float type; no gradient."""
    return _index("argmin", x, axis, keepdims)


def _index(op: str, x, axis, keepdims):
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, (int, np.integer))):
        raise TypeError(f"{op}: axis must be an integer or None, got {axis!r}")
    if is_symbolic(x) or axis is not None:
        return reduce(op, x, axis, keepdims)
    result = reduce(op, x, axis, False)  # numpy's: the index in the flattened array
    return result.reshape((1,) * np.ndim(x)) if keepdims else result


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along `axis` (one sample axis): the Softmax layer's kernels, so that a
    cross-entropy loss takes over a softmax along the last axis at a model's output, as it does the
    layer's."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"softmax: axis must be an integer, got {axis!r}")
    if is_symbolic(x):
        x = symbolic(x)
        axis = check_axis("softmax", axis, len(x.shape))
        return Softmax(axis, name=op_name("softmax"))(x)
    array = eager_array("softmax", "x", x)
    check_axis("softmax", axis, builtins.max(array.ndim, 1), allow_batch=True)
    return run_eagerly(Softmax(eager_axis(axis), name=op_name("softmax")), [array])
