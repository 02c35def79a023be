"""Merge layers: Add, Multiply and Concatenate take a list of inputs (the functional API); Subtract,
Average, Maximum and Minimum are their ops (clnet.ops), traced."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import Layer, input_mask


def merge_program(rt, dtype):
    return rt.program(("layers/merge.cl",), dtype)


class _Merge(Layer):
    mask_handling = "propagate"  # (inputs of one mask, or of one and none: Keras's AND of them)

    multi_input = True

    def compute_output_shape(self, input_shapes, tensors=None):
        if len(input_shapes) < 2:
            raise ValueError(f"{self.describe()} needs at least 2 inputs, got {len(input_shapes)}")
        return self._merged_shape([tuple(s) for s in input_shapes], tensors)

    def _merged_shape(self, shapes, tensors):
        if any(s != shapes[0] for s in shapes):
            inputs = [t.describe() for t in tensors] if tensors else [str((None, *s)) for s in shapes]
            raise ValueError(f"{self.describe()} needs inputs of one shape, got {' and '.join(inputs)}")
        return shapes[0]

    def build(self, input_shapes, store, rng):
        self.input_shapes = [tuple(s) for s in input_shapes]
        self.input_shape = self.input_shapes[0]
        self.rt, self.dtype = store.rt, store.dtype
        self.output_shape = self.compute_output_shape(self.input_shapes)
        self.width = int(np.prod(self.output_shape))
        program = merge_program(self.rt, self.dtype)
        self._kernels = {name: self.rt.kernel(program, name, self.dtype)  # bound in allocate
                         for name in ("Sum", "Product", "CopyBlock")}
        self.built = True
        return self.output_shape

    def allocate(self, capacity):
        super().allocate(capacity)
        self.outputs = Tensor((capacity, *self.output_shape), self.dtype, self.rt)

    def _elementwise(self, launch, rows, *operands):
        total = rows * self.width
        launch(*self.rt.four_per_item(total), *operands, total)


class Add(_Merge):
    """The sum of its inputs (a residual connection), as Keras's `Add()`: called on a list of two or
    more tensors of one shape, `[(batch, *shape), ...] -> (batch, *shape)`; dL/d(input) is
    dL/d(output) for each. Takes no arguments besides `name` (and `input_shape`). The model may fold
    a sum of two into the layer making one of them, so that the Add launches nothing (see
    `Layer.adds_to_output`). Masks: Keras's, a step holds data where every masked input says so."""
    sums_inputs = True

    def allocate(self, capacity):
        super().allocate(capacity)
        self._sum = self._kernels["Sum"].bind(("a", "b", "total"), out=self.outputs)

    def forward(self, xs, rows):
        self._elementwise(self._sum, rows, xs[0], xs[1])
        for x in xs[2:]:
            self._elementwise(self._sum, rows, self.outputs, x)
        return self.outputs

    def backward(self, grad, rows, input_grads):
        return [grad if wanted else None for wanted in input_grads]

    def to_onnx(self, graph, inputs):
        return [graph.op("Sum", *inputs)]


class Multiply(_Merge):
    """The elementwise product of its inputs, as Keras's `Multiply()`: called on a list of two or more
    tensors of one shape, `[(batch, *shape), ...] -> (batch, *shape)`; each input's gradient is
    dL/d(output) times the product of the others. Takes no arguments besides `name` (and
    `input_shape`); no broadcasting between shapes (use `clnet.ops.multiply` for that)."""

    def allocate(self, capacity):
        super().allocate(capacity)
        self.input_grads = [Tensor((capacity, *self.output_shape), self.dtype, self.rt) for _ in self.input_shapes]
        # Every operand given: the forward writes the output, the backward each input's gradient.
        self._product = self._kernels["Product"].bind(("a", "b", "out", "total"))

    def forward(self, xs, rows):
        self.xs = xs
        self._elementwise(self._product, rows, xs[0], xs[1], self.outputs)
        for x in xs[2:]:
            self._elementwise(self._product, rows, self.outputs, x, self.outputs)
        return self.outputs

    def backward(self, grad, rows, input_grads):
        # d(x0 x1 ... xn)/dxi = the product of the others.
        results = []
        for i, (wanted, out) in enumerate(zip(input_grads, self.input_grads)):
            if not wanted:
                results.append(None)
                continue
            source = grad
            for j, x in enumerate(self.xs):
                if j != i:
                    self._elementwise(self._product, rows, source, x, out)
                    source = out
            results.append(out)
        return results

    def to_onnx(self, graph, inputs):
        product = inputs[0]
        for x in inputs[1:]:
            product = graph.op("Mul", product, x)
        return [product]


class Concatenate(_Merge):
    """Joins a list of two or more inputs along `axis`, as Keras's `Concatenate(axis=-1)`: inputs
    `(batch, ..., n_i, ...)` that agree on every other axis give `(batch, ..., sum of n_i, ...)`.

    `axis` (default -1, the last) counts as Keras counts, the batch being axis 0, so it is any
    nonzero integer that names a sample axis; 0 (the batch) is refused. Inputs carrying masks are
    joined along the last axis only (Keras's AND of the masks); along another axis they raise a
    `ValueError`. Unlike Keras's, it takes no `input_shape`."""

    def __init__(self, axis=-1, name=None):
        super().__init__(name)
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or axis == 0:
            raise ValueError(f"Concatenate axis must be a non-zero integer (0 is the batch axis), got {axis!r}")
        self.axis = int(axis)

    def compute_mask(self, inputs, mask):
        """Keras's AND of the inputs' masks where the features are joined; along another axis
        Keras joins the masks too, which clnet does not yet."""
        rank = len(inputs[0].sample_shape)
        if mask is not None and self.axis not in (-1, rank):
            raise ValueError(f"{self.describe()} joins masked inputs along axis {self.axis}; clnet joins masked "
                             "inputs along the last (features) axis only")
        return mask

    def _merged_shape(self, shapes, tensors):
        rank = len(shapes[0])
        axis = self.axis - 1 if self.axis > 0 else rank + self.axis  # within the sample shape
        inputs = lambda: " and ".join(t.describe() for t in tensors) if tensors else str(shapes)
        if not 0 <= axis < rank or any(len(s) != rank for s in shapes):
            raise ValueError(f"{self.describe()} cannot join along axis {self.axis} inputs {inputs()}")
        if any(s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:] for s in shapes):
            raise ValueError(f"{self.describe()} needs inputs that agree on every axis but {self.axis}, "
                             f"got {inputs()}")
        self._sample_axis = axis
        return (*shapes[0][:axis], sum(s[axis] for s in shapes), *shapes[0][axis + 1:])

    def build(self, input_shapes, store, rng):
        shape = super().build(input_shapes, store, rng)
        axis = self._sample_axis
        # Each sample is `outer` rows of `inner` elements; an input owns a block of those columns.
        self.outer = int(np.prod(shape[:axis]))
        self.inner = [int(np.prod(s[axis:])) for s in self.input_shapes]
        self.offsets = np.cumsum([0, *self.inner[:-1]]).tolist()
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        self.input_grads = [Tensor((capacity, *s), self.dtype, self.rt) for s in self.input_shapes]
        # Every argument given: each launch copies another input's block, in or out.
        self._copy = self._kernels["CopyBlock"].bind(
            ("src", "src_stride", "src_offset", "dst", "dst_stride", "dst_offset", "width"))

    def _blocks(self, rows):
        total = sum(self.inner)
        for inner, offset in zip(self.inner, self.offsets):
            yield (inner, rows * self.outer), total, inner, offset

    def forward(self, xs, rows):
        for x, (size, total, inner, offset) in zip(xs, self._blocks(rows)):
            self._copy(size, None, x, inner, 0, self.outputs, total, offset, inner)
        return self.outputs

    def backward(self, grad, rows, input_grads):
        results = []
        for wanted, out, (size, total, inner, offset) in zip(input_grads, self.input_grads, self._blocks(rows)):
            if wanted:
                self._copy(size, None, grad, total, offset, out, inner, 0, inner)
            results.append(out if wanted else None)
        return results

    def to_onnx(self, graph, inputs):
        return [graph.op("Concat", *inputs, axis=self._sample_axis + 1)]  # axis 0 is the batch

    def get_config(self):
        return {**super().get_config(), "axis": self.axis}


class _OpMerge(Layer):
    """Keras's merges that are elementwise ops of their inputs (Subtract, Average, Maximum,
    Minimum): traced into clnet.ops calls, which compute, differentiate, save and export them."""
    mask_handling = "propagate"

    def compute_mask(self, inputs, mask):
        # As _Merge's (Keras's merges): where every input that carries a mask says a step holds data.
        return input_mask(self, list(inputs))


    def call(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) < (2 if self.arity is None else self.arity):
            raise ValueError(f"{self.describe()} takes a list of {self.arity or 'at least 2'} tensors, got {inputs!r}")
        if self.arity is not None and len(inputs) != self.arity:
            raise ValueError(f"{self.describe()} takes exactly {self.arity} tensors, got {len(inputs)}")
        shapes = {tuple(t.shape) for t in inputs}
        if len(shapes) > 1:
            raise ValueError(f"{self.describe()} needs inputs of one shape, got {' and '.join(map(str, shapes))}")
        return self.combine(list(inputs))

    arity: int | None = None


class Subtract(_OpMerge):
    """`inputs[0] - inputs[1]`, as Keras's `Subtract()`: called on a list of exactly two tensors of
    one shape, `(batch, *shape)`. It is traced into a `clnet.ops.subtract` call, which computes,
    differentiates, saves and exports it (a model holding it cannot be written as a `.keras`
    archive, whose layers are Keras's). Takes no arguments besides `name`."""
    arity = 2

    def combine(self, inputs):
        return inputs[0] - inputs[1]


class Average(_OpMerge):
    """The elementwise mean of a list of two or more tensors of one shape, as Keras's `Average()`:
    `[(batch, *shape), ...] -> (batch, *shape)`. Traced into `clnet.ops` additions and a
    multiplication by 1/n, which compute, differentiate, save and export it. Takes no arguments
    besides `name`."""

    def combine(self, inputs):
        total = inputs[0]
        for x in inputs[1:]:
            total = total + x
        return total * (1.0 / len(inputs))


class _Extreme(_OpMerge):
    """The elementwise maximum or minimum (`extreme`, the op's name) of all inputs."""
    extreme = ""

    def combine(self, inputs):
        from .. import ops  # (the ops are above the layers on the ladder)
        result = inputs[0]
        for x in inputs[1:]:
            result = getattr(ops, self.extreme)(result, x)
        return result


class Maximum(_Extreme):
    """The elementwise maximum of a list of two or more tensors of one shape, as Keras's `Maximum()`:
    `[(batch, *shape), ...] -> (batch, *shape)`. Traced into `clnet.ops.maximum` calls (see that op
    for which input a tie's gradient goes to). Takes no arguments besides `name`."""
    extreme = "maximum"


class Minimum(_Extreme):
    """The elementwise minimum of a list of two or more tensors of one shape, as Keras's `Minimum()`:
    `[(batch, *shape), ...] -> (batch, *shape)`. Traced into `clnet.ops.minimum` calls (see that op
    for which input a tie's gradient goes to). Takes no arguments besides `name`."""
    extreme = "minimum"


# Keras's functional forms: `layers.concatenate([a, b])` is `Concatenate()([a, b])`.
def add(inputs, **kwargs):
    """`Add(**kwargs)(inputs)`: the sum of a list of tensors of one shape, as `keras.layers.add`."""
    return Add(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    """`Multiply(**kwargs)(inputs)`: the elementwise product of a list of tensors of one shape, as
    `keras.layers.multiply`."""
    return Multiply(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    """`Concatenate(axis=axis, **kwargs)(inputs)`: a list of tensors joined along `axis` (default the
    last), as `keras.layers.concatenate`."""
    return Concatenate(axis=axis, **kwargs)(inputs)


def subtract(inputs, **kwargs):
    """`Subtract(**kwargs)(inputs)`: `inputs[0] - inputs[1]`, as `keras.layers.subtract`."""
    return Subtract(**kwargs)(inputs)


def average(inputs, **kwargs):
    """`Average(**kwargs)(inputs)`: the elementwise mean of a list of tensors of one shape, as
    `keras.layers.average`."""
    return Average(**kwargs)(inputs)


def maximum(inputs, **kwargs):
    """`Maximum(**kwargs)(inputs)`: the elementwise maximum of a list of tensors of one shape, as
    `keras.layers.maximum`."""
    return Maximum(**kwargs)(inputs)


def minimum(inputs, **kwargs):
    """`Minimum(**kwargs)(inputs)`: the elementwise minimum of a list of tensors of one shape, as
    `keras.layers.minimum`."""
    return Minimum(**kwargs)(inputs)
