"""Indexing: basic slicing of the sample axes (what x[...] calls), split (a slice per part) and
take with constant integer indices. The batch axis is taken whole: an index or a slice of it
raises, as does a step, which basic slicing of a contiguous copy does not need."""
from __future__ import annotations

import builtins

import numpy as np

from ..cl.tensor import Tensor
from .base import (Op, check_axis, eager_array, geometry, is_symbolic, launch, op_name, row_major,
                   run_eagerly, size, symbolic)


def program(rt, dtype):
    return rt.program(("ops/indexing.cl",), dtype)


class _Copy(Op):
    """An op that copies some of its one input's elements (Slice, Take): `_copy` writes the outputs,
    `_gradient` the input's gradient, both given `kernel_args` (set by setup) after their two
    tensors and before the count of elements they write (bound by setup, every argument given by
    each launch)."""

    def allocate(self, capacity):
        super().allocate(capacity)
        self.input_grad = Tensor((capacity, *self.input_shape), self.dtype, self.rt)

    def forward(self, xs, rows):
        total = rows * self.width
        self._copy(*launch(total), xs[0], self.outputs, *self.kernel_args, total)
        return self.outputs

    def backward(self, grad, rows, input_grads):
        if not input_grads[0]:
            return [None]
        total = rows * self.in_width
        self._gradient(*launch(total), grad, self.input_grad, *self.kernel_args, total)
        return [self.input_grad]


class Slice(_Copy):
    """A block of each sample: `spec` has per sample axis [start, length, keep]; an axis with keep
    false is an integer index (length 1), which the output drops."""
    op = "slice"

    def __init__(self, spec, name=None):
        super().__init__(op_name("slice") if name is None else name)
        self.spec = [[int(s), int(n), bool(k)] for s, n, k in spec]

    def compute_output_shape(self, input_shapes, tensors=None):
        (shape,) = input_shapes
        if len(shape) != len(self.spec):
            raise ValueError(f"ops.slice: {len(self.spec)} axes given for samples of shape {tuple(shape)}")
        for k, ((start, length, _), extent) in enumerate(zip(self.spec, shape)):
            if start < 0 or length < 1 or start + length > extent:
                raise ValueError(f"ops.slice: axis {k + 1} takes [{start}, {start + length}), outside its extent "
                                 f"{extent} (shape {(None, *shape)})")
        return tuple(n for _, n, keep in self.spec if keep)

    def setup(self):
        shape = self.input_shape
        lengths = [n for _, n, _ in self.spec]
        out_strides = row_major(lengths)  # a dropped axis has length 1: its stride is never stepped
        axes = []  # extent, start, length, input stride, output stride
        for (start, length, keep), extent, stride, out in zip(self.spec, shape, row_major(shape), out_strides):
            if extent == 1:
                continue
            whole = start == 0 and length == extent
            if axes and whole:  # merges with the axis before it
                e, s, n, _, _ = axes[-1]
                axes[-1] = [e * extent, s * extent, n * extent, stride, out if keep else 0]
            else:
                axes.append([extent, start, length, stride, out if keep else 0])
        self.axes, self.dims, self.in_width = len(axes), geometry(self.rt, axes), size(shape)
        self.kernel_args = (self.dims, self.axes, self.in_width, self.width)
        self._copy = self.rt.kernel(program(self.rt, self.dtype), "Slice", self.dtype).bind(
            ("x", "y", "dims", "axes", "in_width", "out_width", "total"))
        self._gradient = self.rt.kernel(program(self.rt, self.dtype), "SliceGradient", self.dtype).bind(
            ("grad", "dx", "dims", "axes", "in_width", "out_width", "total"))

    def to_onnx(self, graph, inputs):
        """A Slice of the axes not taken whole, then a Squeeze of those indexed by an integer."""
        x = inputs[0]
        cut = [(k + 1, start, start + length) for k, ((start, length, _), extent) in
               enumerate(zip(self.spec, self.input_shape)) if (start, length) != (0, extent)]
        if cut:
            axes, starts, ends = zip(*cut)
            x = graph.slice(x, starts, ends, axes)
        dropped = [k + 1 for k, (_, _, keep) in enumerate(self.spec) if not keep]
        return [graph.squeeze(x, dropped) if dropped else x]

    def get_config(self):
        return {"name": self.name, "spec": self.spec}


def slice_spec(key, shape: tuple, batched: bool) -> list[list]:
    """Python's basic indexing `key` of a tensor of full `shape` (batch axis first where `batched`)
    as Slice's spec of the sample axes."""
    items = list(key) if isinstance(key, tuple) else [key]
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError(f"an index can only have a single ellipsis ('...'), got {key!r}")
    named = sum(item is not Ellipsis for item in items)
    if named > len(shape):
        raise IndexError(f"too many indices: {named} for a tensor of shape {shape}")
    if Ellipsis in items:
        at = next(i for i, item in enumerate(items) if item is Ellipsis)
        items[at:at + 1] = [builtins.slice(None)] * (len(shape) - named)
    items += [builtins.slice(None)] * (len(shape) - len(items))
    if batched and items[0] != builtins.slice(None):
        raise IndexError(f"cannot index the batch axis: {key!r} gives it {items[0]!r}; the first index of a symbolic "
                         "tensor must be ':' (the whole batch), e.g. x[:, 1:] or x[..., 0]")
    spec = []
    for axis, (item, extent) in enumerate(zip(items[1:] if batched else items, shape[1:] if batched else shape)):
        axis += int(batched)
        if item is None:
            raise IndexError(f"None (np.newaxis) in an index is not supported, got {key!r}: use ops.expand_dims")
        if isinstance(item, builtins.slice):
            start, stop, step = item.indices(extent)
            if step != 1:
                raise IndexError(f"slices with a step are not supported: axis {axis} of {key!r} has step {item.step!r}")
            if stop <= start:
                raise IndexError(f"the slice {item!r} of axis {axis} (extent {extent}) is empty")
            spec.append([start, stop - start, True])
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            if not -extent <= item < extent:
                raise IndexError(f"index {item} is out of range for axis {axis} with extent {extent}")
            spec.append([int(item) % extent, 1, False])
        else:
            raise IndexError(f"only integers, slices (':' with no step) and '...' index a tensor; axis {axis} got "
                             f"{item!r}")
    return spec


def getitem(x, key):
    """x[key]: basic indexing of the sample axes by integers, slices of step 1 and '...'; the batch
    axis is taken whole (key's first item ':'). On a numpy array, the same on the device with
    every axis free."""
    if is_symbolic(x):
        x = symbolic(x)
        spec = slice_spec(key, x.shape, True)
        if all(start == 0 and length == extent and keep for (start, length, keep), extent in zip(spec, x.shape[1:])):
            return x  # x[:], x[...]: the tensor itself, nothing to copy
        return Slice(spec)([x])
    array = eager_array("getitem", "x", x)
    if array.ndim == 0:
        raise IndexError("a 0-d array cannot be indexed")
    return run_eagerly(Slice(slice_spec(key, array.shape, False)), [array])


def slice(inputs, start_indices, shape):  # noqa: A001 (Keras's name)
    """keras.ops.slice: the block of `shape` from `start_indices`, one per axis (the batch axis's:
    0 and None or -1 in shape, all of it)."""
    starts, lengths = list(start_indices), list(shape)
    if is_symbolic(inputs):
        full_shape = symbolic(inputs).shape
        if len(starts) != len(full_shape) or len(lengths) != len(full_shape):
            raise ValueError(f"slice: start_indices {start_indices!r} and shape {shape!r} need one entry per axis of "
                             f"{full_shape}")
        if starts[0] != 0 or lengths[0] not in (None, -1):
            raise ValueError(f"slice: the batch axis is taken whole: start_indices[0] must be 0 and shape[0] None or "
                             f"-1, got {starts[0]!r} and {lengths[0]!r}")
        key = (builtins.slice(None),)
        starts, lengths = starts[1:], lengths[1:]
    else:
        key = ()
    key += tuple(builtins.slice(s, None if n == -1 else s + n) for s, n in zip(starts, lengths))
    return getitem(inputs, key)


def split(x, indices_or_sections, axis=0):
    """A list of parts of x along `axis`: `indices_or_sections` equal parts, or cut before each
    index of a list, as keras.ops.split. Each part is a slice of x (its gradient flows back into
    x's through the engine's sum of a tensor's readers)."""
    if is_symbolic(x):
        shape = symbolic(x).shape
        axis = check_axis("split", axis, len(shape))
    else:
        array = eager_array("split", "x", x)
        axis = check_axis("split", axis, array.ndim, allow_batch=True)
        shape = array.shape
    extent = shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)) and not isinstance(indices_or_sections, bool):
        sections = int(indices_or_sections)
        if sections < 1 or extent % sections:
            raise ValueError(f"split: indices_or_sections {sections} does not divide axis {axis} of shape {shape} "
                             f"(extent {extent}) into equal parts")
        cuts = [extent // sections * k for k in range(1, sections)]
    else:
        try:
            cuts = [int(c) for c in indices_or_sections]
        except (TypeError, ValueError):
            raise TypeError(f"split: indices_or_sections must be an integer or a list of integers, got "
                            f"{indices_or_sections!r}") from None
    bounds = [0, *cuts, extent]
    if any(b > a for a, b in zip(bounds[1:], bounds)) or any(not 0 <= c <= extent for c in cuts):
        raise ValueError(f"split: indices {cuts} must rise within [0, {extent}] (axis {axis} of shape {shape})")
    parts = []
    for start, stop in zip(bounds, bounds[1:]):
        key = tuple([builtins.slice(None)] * axis + [builtins.slice(start, stop)])
        parts.append(getitem(x, key))
    return parts


class Take(_Copy):
    """take along one sample axis with constant integer indices (any shape: the output has theirs
    in place of the axis)."""
    op = "take"

    def __init__(self, indices, axis, name=None):
        super().__init__(op_name("take") if name is None else name)
        self.indices = np.asarray(indices, np.int64)
        self.axis = int(axis)

    def compute_output_shape(self, input_shapes, tensors=None):
        (shape,) = input_shapes
        k = check_axis("take", self.axis, len(shape) + 1) - 1
        n = shape[k]
        if self.indices.size and (self.indices.min() < -n or self.indices.max() >= n):
            raise IndexError(f"take: indices {self.indices.tolist()} are out of range for axis {self.axis} with "
                             f"extent {n} (shape {(None, *shape)})")
        return (*shape[:k], *self.indices.shape, *shape[k + 1:])

    def setup(self):
        shape, k = self.input_shape, self.axis - 1 if self.axis > 0 else len(self.input_shape) + self.axis
        self.n, self.inner = shape[k], size(shape[k + 1:])
        self.count, self.in_width = int(self.indices.size), size(shape)
        positions = (self.indices % self.n).astype(np.int32).reshape(-1)
        self.positions = Tensor.from_numpy(positions if positions.size else np.zeros(1, np.int32), np.int32, self.rt)
        self.kernel_args = (self.positions, self.n, self.count, self.inner)
        self._copy = self.rt.kernel(program(self.rt, self.dtype), "Take", self.dtype).bind(
            ("x", "y", "indices", "n", "count", "inner", "total"))
        self._gradient = self.rt.kernel(program(self.rt, self.dtype), "TakeGradient", self.dtype).bind(
            ("grad", "dx", "indices", "n", "count", "inner", "total"))

    def to_onnx(self, graph, inputs):
        """Gather along the axis (+ 1: ONNX's axis 0 is the batch); negative indices as they are from
        opset 11, which takes them, counted from the start before."""
        n = self.input_shape[self.axis - 1 if self.axis > 0 else len(self.input_shape) + self.axis]
        indices = self.indices if graph.opset >= 11 else self.indices % n
        axis = self.axis if self.axis > 0 else len(self.input_shape) + 1 + self.axis
        return [graph.op("Gather", inputs[0], graph.constant("indices", indices), axis=axis)]

    def get_config(self):
        return {"name": self.name, "indices": self.indices.tolist(), "axis": self.axis}


def take(x, indices, axis=None):
    """Elements of x at constant integer `indices` along `axis` (a sample axis; None, numpy's
    flattened x, only for arrays)."""
    if is_symbolic(indices):
        raise TypeError("take: indices must be constant integers (a list or a numpy array), not a symbolic tensor")
    index_array = np.asarray(indices)
    if index_array.dtype == object or not np.issubdtype(index_array.dtype, np.integer):
        if not (index_array.size == 0 and index_array.dtype == np.float64):
            raise TypeError(f"take: indices must be integers, got {index_array.dtype} {indices!r}")
    if is_symbolic(x):
        x = symbolic(x)
        if axis is None:
            raise ValueError("take: axis=None flattens x with its batch axis; give a sample axis (1, 2, ... or -1)")
        axis = check_axis("take", axis, len(x.shape))
        return Take(index_array, axis)([x])
    array = eager_array("take", "x", x)
    if axis is None:
        array, axis = array.reshape(-1), 0
    axis = check_axis("take", axis, array.ndim, allow_batch=True)
    return run_eagerly(Take(index_array, axis + 1), [array])
