"""Shape ops: reshape, expand_dims and squeeze (views: the same buffer seen with another sample
shape, nothing launched), transpose (the Permute layer's kernel), concatenate and stack (the
Concatenate layer's), cast and arange. The batch axis stays first and whole."""
from __future__ import annotations

import numpy as np

from ..cl import runtime as cl_runtime
from ..layers.base import checked_shape
from ..layers.flatten import View
from ..layers.merge import Concatenate
from ..layers.permute import Permute
from .base import check_axis, eager_array, is_symbolic, op_name, run_eagerly, size, symbolic


class ShapeView(View):
    """Each sample seen with shape `shape` (same number of values): reshape, expand_dims, squeeze."""

    def __init__(self, shape, op="reshape", name=None):
        super().__init__(op_name(op) if name is None else name)
        self.shape, self.op = tuple(int(s) for s in shape), op

    def describe(self) -> str:
        return f"ops.{self.op} {self.name!r}"

    def compute_output_shape(self, input_shape):
        if size(input_shape) != size(self.shape):
            raise ValueError(f"{self.op}: cannot view samples of shape {tuple(input_shape)} ({size(input_shape)} values) "
                             f"as {self.shape} ({size(self.shape)} values)")
        return self.shape

    def to_onnx(self, graph, inputs):
        """Unsqueeze (expand_dims) or Squeeze (squeeze) of the axes of length 1 that differ, else a
        Reshape whose shape starts with 0 (the batch, as it is)."""
        before, after = tuple(self.input_shape), self.shape
        if before == after:
            return inputs
        if self.op in ("expand_dims", "squeeze"):
            longer, shorter = (after, before) if self.op == "expand_dims" else (before, after)
            axes = _ones_between(longer, shorter)
            if axes is not None:
                axes = [a + 1 for a in axes]  # ONNX's axis 0 is the batch
                return [(graph.unsqueeze if self.op == "expand_dims" else graph.squeeze)(inputs[0], axes)]
        return [graph.op("Reshape", inputs[0], graph.constant("shape", [0, *after]))]

    def get_config(self):
        return {"name": self.name, "shape": list(self.shape), "op": self.op}


def _ones_between(longer: tuple, shorter: tuple) -> list[int] | None:
    """The axes of `longer` that are 1 and, taken out, leave `shorter`; None if there are none such."""
    axes, k = [], 0
    for axis, extent in enumerate(longer):
        if k < len(shorter) and extent == shorter[k]:
            k += 1
        elif extent == 1:
            axes.append(axis)
        else:
            return None
    return axes if k == len(shorter) and axes else None


def _view(op: str, x, shape_of):
    """x (symbolic or an array) viewed with the sample shape shape_of(full shape) gives."""
    if is_symbolic(x):
        x = symbolic(x)
        return ShapeView(shape_of(x.shape)[1:], op)(x)
    array = eager_array(op, "x", x)
    return run_eagerly(ShapeView(shape_of((1, *array.shape))[1:], op), [array])


def reshape(x, new_shape):
    """x with `new_shape`, which includes the batch axis, as Keras's: for a symbolic x its first
    entry must be -1 or None (the batch, unchanged) and the rest is each sample's shape, of which
    one entry may be -1. On an array, numpy's reshape."""
    items = list(new_shape) if isinstance(new_shape, (tuple, list)) else [new_shape]

    def shape_of(shape):
        batched = is_symbolic(x)
        target = items[1:] if batched else items
        if batched and (not items or items[0] not in (-1, None)):
            raise ValueError(f"reshape: new_shape {tuple(new_shape) if isinstance(new_shape, (tuple, list)) else new_shape!r} "
                             f"must keep the batch axis: its first entry must be -1 or None, got "
                             f"{items[0] if items else 'none'}")
        if any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or (s < 1 and s != -1) for s in target) \
                or target.count(-1) > 1:
            raise ValueError(f"reshape: new_shape must be positive integers with at most one -1 (after the batch "
                             f"axis's -1 or None), got {new_shape!r}")
        values = size(shape[1:])
        known = size([s for s in target if s != -1])
        if (values % known if -1 in target else values != known):
            raise ValueError(f"reshape: cannot reshape a tensor of shape {tuple(shape) if batched else tuple(shape[1:])}"
                             f" ({values} values{' a sample' if batched else ''}) into {tuple(new_shape) if isinstance(new_shape, (tuple, list)) else new_shape}")
        return (shape[0], *(values // known if s == -1 else int(s) for s in target))
    return _view("reshape", x, shape_of)


def expand_dims(x, axis):
    """`x` with an axis of extent 1 inserted at `axis`, as `keras.ops.expand_dims`. For a symbolic `x`
    the axis counts the batch as 0 and may not go before it (axis 0 raises); on an array it is
    numpy's."""
    def shape_of(shape):
        batched = is_symbolic(x)
        rank = len(shape) + 1 if batched else len(shape)
        where = check_axis("expand_dims", axis, rank, allow_batch=not batched) + int(not batched)
        return (*shape[:where], 1, *shape[where:])
    return _view("expand_dims", x, shape_of)


def squeeze(x, axis=None):
    """x without its sample axes of extent 1 (those of `axis`, an int or tuple, if given; each
    must have extent 1)."""
    def shape_of(shape):
        batched = is_symbolic(x)
        offset = 0 if batched else 1  # an array's axes count from its first, the eager batch axis before it
        if axis is None:
            drop = [k for k in range(1, len(shape)) if shape[k] == 1]
        else:
            items = axis if isinstance(axis, (tuple, list)) else (axis,)
            drop = [check_axis("squeeze", a, len(shape) - offset, allow_batch=not batched) + offset for a in items]
            for k in drop:
                if shape[k] != 1:
                    raise ValueError(f"squeeze: axis {k - offset} of shape {shape if batched else shape[1:]} has extent "
                                     f"{shape[k]}, not 1")
        return tuple(e for k, e in enumerate(shape) if k not in drop)
    return _view("squeeze", x, shape_of)


def transpose(x, axes=None):
    """x with its axes in the order `axes`, a permutation that keeps the batch axis first (0 first)
    for a symbolic x; numpy's (None reverses them) for an array."""
    if is_symbolic(x):
        x = symbolic(x)
        rank = len(x.shape)
        if axes is None:
            raise ValueError(f"transpose: axes=None reverses every axis of {x.shape}, the batch axis too; give axes "
                             f"that start with 0, e.g. {(0, *range(rank - 1, 0, -1))}")
        order = _permutation(axes, rank)
        if order[0] != 0:
            raise ValueError(f"transpose: axes {tuple(axes)} move the batch axis; they must start with 0")
        if order == list(range(rank)):
            return x
        return Permute(order[1:], name=op_name("transpose"))(x)
    array = eager_array("transpose", "x", x)
    order = list(range(array.ndim))[::-1] if axes is None else _permutation(axes, array.ndim)
    if array.ndim < 2 or order == list(range(array.ndim)):
        return array.copy()
    return run_eagerly(Permute([a + 1 for a in order], name=op_name("transpose")), [array])


def _permutation(axes, rank: int) -> list[int]:
    try:
        order = [int(a) % rank if -rank <= int(a) < rank else -1 for a in axes]
    except (TypeError, ValueError):
        raise TypeError(f"transpose: axes must be a permutation of the axes (integers), got {axes!r}") from None
    if sorted(order) != list(range(rank)):
        raise ValueError(f"transpose: axes must be a permutation of 0, ..., {rank - 1}, got {tuple(axes)}")
    return order


def concatenate(xs, axis=0):
    """The tensors of `xs` joined along `axis` (a sample axis for symbolic tensors; Keras's default 0,
    the batch, raises for them); all symbolic or all arrays."""
    xs = _sequence("concatenate", xs)
    if is_symbolic(xs[0]):
        tensors = [symbolic(t) for t in xs]
        rank = len(tensors[0].shape)
        axis = check_axis("concatenate", axis, rank)
        _agree("concatenate", [t.shape for t in tensors], axis, "every axis but the joined one")
        return tensors[0] if len(tensors) == 1 else Concatenate(axis, name=op_name("concatenate"))(tensors)
    arrays = [eager_array("concatenate", f"xs[{i}]", x) for i, x in enumerate(xs)]
    if arrays[0].ndim == 0:
        raise ValueError("concatenate: zero-dimensional arrays cannot be concatenated")
    axis = check_axis("concatenate", axis, arrays[0].ndim, allow_batch=True)
    _agree("concatenate", [a.shape for a in arrays], axis, "every axis but the joined one")
    if len(arrays) == 1:
        return arrays[0].copy()
    return run_eagerly(Concatenate(axis + 1, name=op_name("concatenate")), arrays)


def stack(xs, axis=0):
    """The tensors of `xs` (one shape) stacked along a new `axis` (for symbolic tensors a sample axis:
    Keras's default 0 would stack along the batch)."""
    xs = _sequence("stack", xs)
    symbolic_ = is_symbolic(xs[0])
    shapes = [symbolic(t).shape if symbolic_ else np.shape(t) for t in xs]
    rank = len(shapes[0]) + 1
    if symbolic_:
        check_axis("stack", axis, rank)
    else:
        check_axis("stack", axis, rank, allow_batch=True)
    if any(s != shapes[0] for s in shapes):
        raise ValueError(f"stack: the tensors must have one shape, got {' and '.join(str(tuple(s)) for s in shapes)}")
    return concatenate([expand_dims(t, axis) for t in xs], axis)


def _sequence(op: str, xs) -> list:
    if not isinstance(xs, (list, tuple)) or not xs:
        raise TypeError(f"{op}: xs must be a non-empty list of tensors, got {type(xs).__name__}")
    kinds = {is_symbolic(t) for t in xs}
    if len(kinds) > 1:
        i = next(i for i, t in enumerate(xs) if not is_symbolic(t))
        raise TypeError(f"{op}: xs mixes symbolic tensors and arrays: xs[{i}] is {type(xs[i]).__name__}; give "
                        "symbolic tensors only (a constant: broadcast it with ops.add(zeros_like(x), c) first)")
    return list(xs)


def _agree(op: str, shapes, axis: int, what: str) -> None:
    first = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for k, (a, b) in enumerate(zip(s, first)) if k != axis):
            raise ValueError(f"{op}: shapes {' and '.join(str(tuple(t)) for t in shapes)} must agree on {what} "
                             f"(axis {axis})")


def cast(x, dtype):
    """x in `dtype`. A symbolic x is returned as it is, and takes float32 or float64: a model
    computes in its own float type (Model(floatx=...)), whatever the casts inside it. An array
    (eager) takes any numpy type, as numpy's astype (a float cast to an integer is truncated)."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"cast: dtype must be a numpy type or its name, got {dtype!r}") from None
    if is_symbolic(x):
        if name not in ("float32", "float64"):
            raise TypeError(f"cast: a symbolic tensor takes dtype 'float32' or 'float64' (a model computes in "
                            f"floats), got {dtype!r}")
        return symbolic(x)
    return np.asarray(eager_array("cast", "x", x)).astype(name)


def arange(start, stop=None, step=1, dtype=None):
    """numpy's arange as a constant (a numpy array, in clnet.floatx() unless `dtype`): an operand
    of other ops, never a symbolic tensor."""
    for argument, value in (("start", start), ("stop", stop), ("step", step)):
        if is_symbolic(value):
            raise TypeError(f"arange: {argument} must be a number, not a symbolic tensor")
    dtype = cl_runtime.floatx_dtype() if dtype is None else np.dtype(dtype)
    return np.arange(start, stop, step).astype(dtype) if stop is not None else np.arange(start, step=step).astype(dtype)


def ones(shape, dtype=None):
    """numpy's ones of `shape` as a constant (a numpy array in `clnet.floatx()` unless `dtype`), as
    `keras.ops.ones`: an operand of other ops, never a symbolic tensor."""
    return _filled("ones", shape, 1.0, dtype)


def zeros(shape, dtype=None):
    """numpy's zeros of `shape` as a constant (a numpy array in `clnet.floatx()` unless `dtype`), as
    `keras.ops.zeros`: an operand of other ops, never a symbolic tensor."""
    return _filled("zeros", shape, 0.0, dtype)


def _filled(op: str, shape, value: float, dtype):
    shape = checked_shape(f"{op}: shape", shape, scalar=True, empty_axes=True)
    return np.full(shape, value, cl_runtime.floatx_dtype() if dtype is None else np.dtype(dtype))


def shape(x) -> tuple:
    """`x`'s shape as a tuple, as `keras.ops.shape`: a symbolic tensor's with None for its batch axis,
    an array's numpy's."""
    if is_symbolic(x):
        return tuple(symbolic(x).shape)
    return tuple(np.shape(x))


def convert_to_numpy(x) -> np.ndarray:
    """`x` as a numpy array, as `keras.ops.convert_to_numpy` (eager results already are); a symbolic
    tensor has no values and raises a `TypeError`."""
    if is_symbolic(x):
        raise TypeError(f"convert_to_numpy: x is a symbolic tensor {symbolic(x).shape}, which has no values; "
                        "call the model (or predict) on arrays")
    return np.asarray(x)


def convert_to_tensor(x, dtype=None):
    """x as keras.ops.convert_to_tensor gives it: a symbolic tensor as it is, else an array
    (clnet's eager values are numpy arrays), in `dtype` if given."""
    if is_symbolic(x):
        return symbolic(x)
    return np.asarray(x, dtype=None if dtype is None else np.dtype(dtype))
