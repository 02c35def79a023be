"""What every op shares: telling symbolic tensors from constants, numpy's broadcasting with the
batch axis kept first, the launch sizes, and the eager path (numpy arrays in, a numpy array out).

An op is a Layer: called on symbolic tensors it records a Call, which Model runs like any other.
Its operands that are not symbolic tensors (Python numbers, numpy arrays) are constants the layer
owns, uploaded when it is built, never inputs of the model and never trained."""
from __future__ import annotations

import itertools

import numpy as np

from ..cl import runtime as cl_runtime
from ..cl.parameters import ParameterStore
from ..cl.tensor import Tensor
from ..layers.base import KerasTensor, Layer, tensors_of, tracing
from ..layers.input import Input

# Op layers made without a name get the op's, numbered as Keras numbers them (add, add_1, ...), so
# that a model's summary and its saved config say which op each call is: from the layers' own
# counter where base.py has one (one count per stem for layers and ops, so an Add layer and
# ops.add never share a name), else from one of this module's.
_names: dict[str, itertools.count] = {}


def op_name(op: str) -> str:
    from ..layers import base
    if hasattr(base, "unique_name"):
        return base.unique_name(op)
    n = next(_names.setdefault(op, itertools.count()))
    return op if n == 0 else f"{op}_{n}"


def is_symbolic(value) -> bool:
    """A KerasTensor, an Input (standing for its output, as a layer call takes it), or while a
    call() is traced a weight of add_weight (a Variable)."""
    return isinstance(value, (KerasTensor, Input)) or (tracing() and getattr(value, "is_variable", False)
                                                        and value.tensor is not None)


def symbolic(value) -> KerasTensor:
    return tensors_of(value)


def operand(value) -> str | None:
    """What an op's `operands` entry is for a symbolic operand: None for a batch (the axis first),
    UNBATCHED for a tensor without a batch axis (a weight, a constant of the graph)."""
    return None if symbolic(value).batched else UNBATCHED


# The `operands` entry of a symbolic input without a batch axis (a weight): an input of the op,
# read at row stride 0 and its gradient summed over the rows.
UNBATCHED = "unbatched"


def is_input(entry) -> bool:
    """Whether an `operands` entry is a symbolic input (None or UNBATCHED), not a constant."""
    return entry is None or isinstance(entry, str) and entry == UNBATCHED


def constant(op: str, argument: str, value) -> np.ndarray:
    """A Python number, list or numpy array as a float64 array (the model's float type is what
    computes; the layer converts when it uploads it)."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {argument} must be a symbolic tensor, a number or a numpy array, got "
                        f"{type(value).__name__}") from None
    return array


def full(shape) -> str:
    """A symbolic tensor's shape (None first) or a constant's, as errors show them."""
    return str(tuple(shape))


def launch(total: int) -> tuple[tuple[int], None]:
    """(global, local) for a kernel of one work-item per element, guarded by `total`: whole runs
    of 64, as permute.cl's launches (a GPU runtime left to divide a prime count picks groups of 1)."""
    return (max(-(-total // 64) * 64, 64),), None


def size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def row_major(shape) -> list[int]:
    """Row-major strides of `shape`, in elements."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return strides[::-1]


def geometry(rt, rows: list[list[int]]) -> Tensor:
    """A kernel's per-axis int table, on the device once (as permute.cl's geometry)."""
    table = np.array(rows, np.int32).reshape(-1) if rows else np.zeros(1, np.int32)
    return Tensor.from_numpy(table, np.int32, rt)


def check_axis(op: str, axis, rank: int, argument: str = "axis", allow_batch: bool = False) -> int:
    """`axis` of a tensor of `rank` axes (the batch axis 0 counted, as Keras counts), made
    non-negative; the batch axis raises unless `allow_batch`."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{op}: {argument} must be an integer, got {axis!r}")
    if not -rank <= axis < rank:
        raise ValueError(f"{op}: {argument} {axis} is out of range for a tensor of {rank} axes (the batch axis "
                         f"is axis 0)")
    if int(axis) % rank == 0 and not allow_batch:
        raise ValueError(f"{op}: {argument} {axis!r} is the batch axis; ops on symbolic tensors work on the sample "
                         "axes (1, 2, ... or -1, -2, ...): every sample is computed alone")
    return int(axis) % rank


def eager_axis(axis):
    """A numpy user's axis (0 = the array's first axis) in the eager graph, whose batch axis of
    one sample is put in front: non-negative axes move up by one, negative ones stay."""
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        return type(axis)(eager_axis(a) for a in axis)
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and axis >= 0:
        return int(axis) + 1
    return axis


class Op(Layer, registered=False):
    """An op as a layer of any number of symbolic inputs (forward(xs, rows), backward(grad, rows,
    wanted) -> a gradient per input, as merge layers). `op` is its Keras name."""
    mask_handling = "ignore"  # (as Keras's ops: what they compute carries no mask)

    multi_input = True
    counts_batch_axis = True
    op = "op"

    def describe(self) -> str:
        return f"ops.{self.op}" + (f" {self.name!r}" if self.name and self.name != self.op else "")

    def build(self, input_shapes, store, rng):
        self.input_shapes = [tuple(s) for s in input_shapes]
        self.input_shape = self.input_shapes[0] if self.input_shapes else None
        self.rt, self.dtype = store.rt, store.dtype
        self.output_shape = tuple(self.compute_output_shape(self.input_shapes))
        self.width = size(self.output_shape)
        self.built = True
        self.setup()
        return self.output_shape

    def setup(self) -> None:
        """Programs, kernels and geometry tables, once the shapes and the float type are known."""

    def allocate(self, capacity):
        super().allocate(capacity)
        self.outputs = Tensor((capacity, *self.output_shape), self.dtype, self.rt)

    def zeros_for(self, index: int) -> Tensor:
        """A gradient of zeros for input `index`, made once: what an op with no gradient (a
        comparison, ones_like) gives the engine, which sums every wanted gradient it is given."""
        zeros = getattr(self, "_zeros", None)
        if zeros is None or zeros[index].shape[0] < self.capacity:
            self._zeros = zeros = [Tensor.zeros((self.capacity, *s), self.dtype, self.rt) for s in self.input_shapes]
        return zeros[index]

    def get_config(self):
        return {"name": self.name}


def run_eagerly(layer: Layer, arrays: list[np.ndarray], dtype=None):
    """keras.ops on numpy arrays: `layer` run once on one sample, each array that sample of one
    of its inputs (the caller has put any batch-axis arguments in the sample's terms, see
    eager_axis). Computes in `dtype`, by default float64 if an array is float64, else in
    clnet.floatx(); returns a numpy array (or a list, for a layer of several outputs)."""
    rt = cl_runtime.runtime()
    if dtype is None:
        dtype = (np.dtype(np.float64) if any(np.asarray(a).dtype == np.float64 for a in arrays)
                 else cl_runtime.floatx_dtype())
    arrays = [np.asarray(a, dtype) for a in arrays]
    shapes = [a.shape for a in arrays]
    layer.build(shapes if layer.multi_input else shapes[0], ParameterStore(rt, dtype), np.random.default_rng(0))
    layer.ensure_rows(1)
    xs = [Tensor.from_numpy(a.reshape(1, *a.shape), dtype, rt) for a in arrays]
    result = layer.forward(xs if layer.multi_input else xs[0], 1)
    shapes = layer.compute_output_shapes(layer.input_shape) if not layer.multi_input else [layer.output_shape]
    results = result if isinstance(result, list) else [result]
    out = [r.numpy()[:1].reshape(shape) for r, shape in zip(results, shapes)]
    return out if isinstance(result, list) else out[0]


def eager_array(op: str, argument: str, value) -> np.ndarray:
    """An operand of an eager op as an array of numbers (a float64 array stays float64)."""
    array = np.asarray(value)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise TypeError(f"{op}: {argument} must be a symbolic tensor, a number or a numpy array of numbers, got "
                        f"{type(value).__name__}" + (f" of {array.dtype}" if array.dtype != object else ""))
    return array if array.dtype == np.float64 else array.astype(np.float32) if array.dtype != np.float32 else array
