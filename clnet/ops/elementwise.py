"""Elementwise ops with numpy's broadcasting: arithmetic, comparisons, where, clip and the unary
functions, all one kernel (elementwise.cl) whatever the op. The batch axis is never broadcast: a
symbolic operand has it first, a constant has none (or 1 there), and two symbolic operands must
have the same rank. The gradient of a broadcast operand is summed over the axes it was broadcast
along, on the device, in the gradient kernel's own loop."""
from __future__ import annotations

import math

import numpy as np

from ..cl.tensor import Tensor
from .base import (Op, constant, eager_array, full, geometry, is_input, is_symbolic, launch, op_name,
                   operand, row_major, run_eagerly, size, symbolic)

BINARY = ["add", "subtract", "multiply", "divide", "power", "minimum", "maximum"]
COMPARISONS = ["greater", "greater_equal", "less", "less_equal", "equal", "not_equal"]
TERNARY = ["where"]
UNARY = ["negative", "exp", "log", "sqrt", "abs", "square", "tanh", "sigmoid", "relu", "gelu", "gelu_erf", "clip",
         "ones_like", "zeros_like"]
OPS = BINARY + COMPARISONS + TERNARY + UNARY
# elementwise.cl's op codes, given to the build as OP_ADD=0, ...: one table for both languages.
CODES = {f"OP_{name.upper()}": code for code, name in enumerate(OPS)}
NO_GRADIENT = {*COMPARISONS, "ones_like", "zeros_like"}  # 0/1 or constant outputs: their inputs get zeros
SLOTS = 3  # operands the kernels take; fewer are padded with a broadcast copy of the first


def program(rt, dtype):
    return rt.program(("ops/elementwise.cl",), dtype, CODES)


def broadcast(op: str, shapes: list[tuple]) -> tuple:
    """numpy's broadcast of full shapes (a symbolic tensor's with None, its batch axis, first),
    keeping the batch axis first and alone: a symbolic operand of fewer axes than another would
    put its batch axis against a sample axis, a constant with as many axes as the result must have
    1 on the batch axis, and one with more would broadcast the batch. Returns the full shape."""
    shown = " and ".join(full(s) for s in shapes)
    rank = max(len(s) for s in shapes)
    rule = "numpy's rule: axes are matched from the last, each pair equal or one of them 1"
    for s in shapes:
        if s and s[0] is None and len(s) < rank:
            raise ValueError(f"{op}: cannot broadcast shapes {shown}: matched from the last axis ({rule}), the batch "
                             f"axis of {full(s)} would meet axis {rank - len(s)} of a tensor of {rank} axes; give the "
                             "symbolic operands the same rank (ops.expand_dims, ops.reshape)")
    batched = any(s and s[0] is None for s in shapes)
    for s in shapes:
        if batched and not (s and s[0] is None) and len(s) == rank and s[0] != 1:
            raise ValueError(f"{op}: cannot broadcast shapes {shown}: the constant of shape {full(s)} has as many axes "
                             f"as the result, so its first axis ({s[0]}) meets the batch axis, where it must be 1")
        if batched and len(s) > rank:
            raise ValueError(f"{op}: cannot broadcast shapes {shown}: the constant of shape {full(s)} has more axes "
                             "than the symbolic tensor, so the batch axis would not stay first")
    result = []
    for k in range(1, rank + 1):  # from the last axis
        extents = {s[-k] for s in shapes if len(s) >= k and s[-k] is not None and s[-k] != 1}
        if len(extents) > 1:
            raise ValueError(f"{op}: cannot broadcast shapes {shown}: axis {-k} has extents "
                             f"{' and '.join(str(e) for e in sorted(extents))} ({rule})")
        if batched and k == rank:
            result.append(None)
        else:
            result.append(extents.pop() if extents else 1)
    return tuple(result[::-1])


def collapse(extents, strides: list[list[int]]) -> list[tuple[int, list[int]]]:
    """The axes of `extents` (per operand `strides`) with extent-1 axes dropped and neighbours that
    every operand reads alike merged: (extent, strides) per remaining axis, outermost first. An
    op on tensors of one shape becomes one axis, and its kernel one division per element."""
    axes = []
    for k, extent in enumerate(extents):
        if extent == 1:
            continue
        mine = [s[k] for s in strides]
        if axes and all(p == q * extent for p, q in zip(axes[-1][1], mine)):
            axes[-1] = (axes[-1][0] * extent, mine)
        else:
            axes.append((extent, mine))
    return axes


class Elementwise(Op):
    """One elementwise op over its operands: `operands` has, per argument of the op, None where a
    symbolic input goes (in the order of the call's inputs), UNBATCHED where a symbolic input
    without a batch axis goes (a weight, broadcast over the rows), or a constant (an array, or its
    nested list in a config). `a` and `b`: clip's bounds."""
    takes_unbatched = True

    def __init__(self, op, operands, a=0.0, b=0.0, name=None):
        if op not in OPS:
            raise ValueError(f"Elementwise: op must be one of {OPS}, got {op!r}")
        super().__init__(op_name(op) if name is None else name)
        self.op = op
        self.operands = [o if is_input(o) else np.asarray(o, np.float64) for o in operands]
        expected = 3 if op in TERNARY else 1 if op in UNARY else 2
        if len(self.operands) != expected:
            raise ValueError(f"ops.{op} takes {expected} operands, got {len(self.operands)}")
        self.a, self.b = float(a), float(b)

    def compute_output_shape(self, input_shapes, tensors=None):
        shapes = iter(input_shapes)
        out = broadcast(self.op, [(None, *next(shapes)) if o is None else tuple(next(shapes)) if is_input(o) else o.shape
                                  for o in self.operands])
        return out[1:] if out and out[0] is None else out  # (no batch axis if no operand has one)

    def setup(self):
        out = self.output_shape
        rank = len(out)
        shapes, inputs = [], iter(self.input_shapes)
        self.constants = []  # device copies, in the float type the model computes in
        for o in self.operands:
            if o is None:
                shape, batch = next(inputs), None
            else:  # read at row stride 0; one with an axis for the batch has 1 there
                shape = tuple(next(inputs)) if is_input(o) else o.shape
                shape, batch = (shape[1:] if len(shape) == rank + 1 else shape), 0
                if not is_input(o):
                    self.constants.append(Tensor.from_numpy(o.astype(self.dtype), self.dtype, self.rt))
            shape = (1,) * (rank - len(shape)) + tuple(shape)
            shapes.append((shape, size(shape) if batch is None else 0))
        strides = [[0 if e == 1 else s for e, s in zip(shape, row_major(shape))] for shape, _ in shapes]
        strides += [[0] * rank] * (SLOTS - len(strides))
        axes = collapse(out, strides)
        out_strides = row_major([e for e, _ in axes])
        self.axes = len(axes)
        self.dims = geometry(self.rt, [[e, *s, o] for (e, s), o in zip(axes, out_strides)])
        self.batches = [b for _, b in shapes] + [0] * (SLOTS - len(shapes))
        self.widths = [size(s) for s, _ in shapes]
        program_ = program(self.rt, self.dtype)
        # Every argument given by each launch (the operands differ per call), its name checked once.
        self._forward = self.rt.kernel(program_, "Elementwise", self.dtype).bind(
            ("op", "x0", "x1", "x2", "y", "dims", "axes", "width", "batch0", "batch1", "batch2", "a", "b", "total"))
        self._gradient = self.rt.kernel(program_, "ElementwiseGradient", self.dtype).bind(
            ("op", "which", "grad", "x0", "x1", "x2", "y", "dx", "dims", "axes", "width", "batch0", "batch1", "batch2",
             "a", "b", "own_width", "rows_summed", "total"))
        self.code = CODES[f"OP_{self.op.upper()}"]

    def allocate(self, capacity):
        super().allocate(capacity)
        self.input_grads = [None if self._passes_gradient(i) else Tensor((capacity, *s), self.dtype, self.rt)
                            for i, s in enumerate(self.input_shapes)]

    def _passes_gradient(self, index: int) -> bool:
        """Whether input `index`'s gradient is the output's as it is (x + y, x - y for x, where x
        has the output's shape): nothing to launch."""
        slot = [k for k, o in enumerate(self.operands) if is_input(o)][index]
        return ((self.op == "add" or self.op == "subtract" and slot == 0)
                and self.input_shapes[index] == self.output_shape and not self._summed_over_rows(slot))

    def _summed_over_rows(self, slot: int) -> bool:
        """Whether operand `slot` lacks the batch axis that the output has: its gradient is one
        row, summed over the output's."""
        return isinstance(self.operands[slot], str) and any(o is None for o in self.operands)

    def _operands(self, xs) -> list[Tensor]:
        """The kernels' three operand buffers: the inputs and constants in slot order, padded."""
        inputs, constants = iter(xs), iter(self.constants)
        buffers = [next(inputs) if is_input(o) else next(constants) for o in self.operands]
        return buffers + [buffers[0]] * (SLOTS - len(buffers))

    def forward(self, xs, rows):
        self.xs = xs
        total = rows * self.width
        self._forward(*launch(total), self.code, *self._operands(xs), self.outputs, self.dims, self.axes, self.width,
                      *self.batches, self.a, self.b, total)
        return self.outputs

    @property
    def sums_inputs(self) -> bool:
        """An add of two computed tensors of the output's shape: the model may fold it into the
        producer of one of them, as it folds the Add layer (a transformer's residual sums written
        `x + attention(x)`), and then its forward pass is never run."""
        return (self.op == "add" and all(o is None for o in self.operands)
                and all(shape == self.output_shape for shape in getattr(self, "input_shapes", [None])))

    def backward(self, grad, rows, input_grads):
        slots = [k for k, o in enumerate(self.operands) if is_input(o)]
        results = []
        for index, (wanted, slot) in enumerate(zip(input_grads, slots)):
            if not wanted:
                results.append(None)
            elif self.op in NO_GRADIENT:
                results.append(self.zeros_for(index))
            elif self._passes_gradient(index):
                results.append(grad)
            else:
                out = self.input_grads[index]
                summed = rows if self._summed_over_rows(slot) else 1
                total = rows // summed * self.widths[slot]
                operands = self._operands(self.xs)
                self._gradient(*launch(total), self.code, slot, grad, *operands, self.outputs, out, self.dims,
                               self.axes, self.width, *self.batches, self.a, self.b, self.widths[slot], summed, total)
                results.append(out)
        return results

    def to_onnx(self, graph, inputs):
        # (Not from the built layer: a call fused into a FusedElementwise leaves its layer unbuilt.)
        given = iter(inputs)
        names = [next(given) if is_input(o) else graph.constant("constant", o) for o in self.operands]
        return [onnx_nodes(graph, self.op, names, self.a, self.b)]

    def get_config(self):
        return {"name": self.name, "op": self.op,
                "operands": [o if is_input(o) else o.tolist() for o in self.operands], "a": self.a, "b": self.b}


# -- ONNX ----------------------------------------------------------------------------------------
ONNX_BINARY = {"add": "Add", "subtract": "Sub", "multiply": "Mul", "divide": "Div", "power": "Pow",
               "minimum": "Min", "maximum": "Max"}
ONNX_UNARY = {"negative": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "abs": "Abs", "tanh": "Tanh",
              "sigmoid": "Sigmoid", "relu": "Relu"}


def onnx_nodes(graph, op: str, xs: list[str], a: float = 0.0, b: float = 0.0) -> str:
    """ONNX nodes computing the elementwise `op` of the tensors named `xs` (graph tensors or
    initializers) into `graph` (a clnet.onnx GraphBuilder), `a` and `b` clip's bounds; returns
    the result's name. ONNX's broadcasting is numpy's, as clnet's, so operands go in as they are.
    Comparisons give 0 and 1 in the model's float type, as clnet's do (a Cast of ONNX's bool);
    where's condition is true where it is nonzero (a Cast to bool). clnet.onnx.load reads each
    form back as the op (see its table)."""
    if op in ONNX_BINARY:
        if op in ("minimum", "maximum"):
            graph.require_opset(8, f"ops.{op} (Min and Max broadcast as numpy from opset 8)")
        return graph.op(ONNX_BINARY[op], *xs)
    if op in ONNX_UNARY:
        return graph.op(ONNX_UNARY[op], xs[0])
    if op in COMPARISONS:
        return graph.cast(_comparison(graph, op, *xs), graph.dtype)
    if op == "where":
        graph.require_opset(9, "ops.where (Where)")
        return graph.op("Where", graph.cast(xs[0], "bool"), xs[1], xs[2])
    x = xs[0]
    if op == "square":
        return graph.op("Pow", x, graph.constant("two", 2.0))
    if op == "clip":
        if graph.opset >= 11:  # opset 11 moved Clip's bounds from attributes to inputs
            return graph.op("Clip", x, graph.constant("min", a), graph.constant("max", b))
        return graph.op("Clip", x, min=a, max=b)  # (float attributes: a float64 model's bounds rounded to float32)
    if op in ("ones_like", "zeros_like"):
        graph.require_opset(8, f"ops.{op} (Expand)")
        value = graph.constant("one" if op == "ones_like" else "zero", float(op == "ones_like"))
        return graph.op("Expand", value, graph.op("Shape", x))
    if op in ("gelu", "gelu_erf"):
        return graph.gelu(x, approximate=op == "gelu")
    raise ValueError(f"ops.{op} has no ONNX form")  # (every op of OPS has one above)


def _comparison(graph, op: str, x0: str, x1: str) -> str:
    """The ONNX bool of comparison `op`: GreaterOrEqual and LessOrEqual arrive in opset 12 (before,
    Not of Less and Greater, which differ only where an operand is NaN), Equal of floats in 11."""
    if op in ("greater", "less"):
        return graph.op("Greater" if op == "greater" else "Less", x0, x1)
    if op in ("greater_equal", "less_equal"):
        if graph.opset >= 12:
            return graph.op("GreaterOrEqual" if op == "greater_equal" else "LessOrEqual", x0, x1)
        return graph.op("Not", graph.op("Less" if op == "greater_equal" else "Greater", x0, x1))
    graph.require_opset(11, f"ops.{op} (Equal of floats)")
    equal = graph.op("Equal", x0, x1)
    return equal if op == "equal" else graph.op("Not", equal)


def apply(op: str, operands: list[tuple[str, object]], a: float = 0.0, b: float = 0.0):
    """ops.<op> of `operands` ((argument name, value) pairs): a call of an Elementwise layer if any
    is symbolic (the others its constants), else computed now on the device (see run_eagerly)."""
    values = [v for _, v in operands]
    if any(is_symbolic(v) for v in values):
        layer = Elementwise(op, [operand(v) if is_symbolic(v) else constant(op, name, v) for name, v in operands], a, b)
        return layer([symbolic(v) for v in values if is_symbolic(v)])
    # Eagerly every operand is an input, one sample of the whole array, ranks aligned from the last
    # axis as numpy aligns them; Python numbers do not make the result float64, as in Keras.
    arrays = [eager_array(op, name, v) for name, v in operands]
    rank = max(x.ndim for x in arrays)
    arrays = [x.reshape((1,) * (rank - x.ndim) + x.shape) for x in arrays]
    return run_eagerly(Elementwise(op, [None] * len(arrays), a, b), arrays, eager_dtype(values))


def eager_dtype(values):
    """float64 if an operand is a float64 array or numpy scalar; Python numbers are 'weak', as Keras's."""
    from ..cl.runtime import floatx_dtype
    strong = [v for v in values if type(v) not in (int, float, bool)]
    return np.dtype(np.float64) if any(np.asarray(v).dtype == np.float64 for v in strong) else floatx_dtype()


# -- the ops, by Keras's names ------------------------------------------------------------------
def add(x1, x2):
    """`x1 + x2`, elementwise, as `keras.ops.add`; numpy's broadcasting, never along the batch axis (see
    the module's doc). Each operand's gradient is the output's, summed over any axes it was broadcast
    along."""
    return apply("add", [("x1", x1), ("x2", x2)])


def subtract(x1, x2):
    """`x1 - x2`, elementwise, as `keras.ops.subtract`; numpy's broadcasting, never along the batch axis.
    The gradient is the output's for `x1` and its negative for `x2`."""
    return apply("subtract", [("x1", x1), ("x2", x2)])


def multiply(x1, x2):
    """`x1 * x2`, elementwise, as `keras.ops.multiply`; numpy's broadcasting, never along the batch axis.
    Each operand's gradient is the output's times the other operand."""
    return apply("multiply", [("x1", x1), ("x2", x2)])


def divide(x1, x2):
    """`x1 / x2`, elementwise (true division), as `keras.ops.divide` (also `true_divide`); numpy's
    broadcasting, never along the batch axis. Gradients `1 / x2` and `-y / x2`."""
    return apply("divide", [("x1", x1), ("x2", x2)])


true_divide = divide


def power(x1, x2):
    """`x1 ** x2`, elementwise (OpenCL's `pow`), as `keras.ops.power`; numpy's broadcasting. Gradients
    `x2 * x1 ** (x2 - 1)` and `y * log(x1)` (NaN for the exponent's where `x1 <= 0`, as the formula)."""
    return apply("power", [("x1", x1), ("x2", x2)])


def minimum(x1, x2):
    """The elementwise smaller of `x1` and `x2`, as `keras.ops.minimum`; numpy's broadcasting. The
    gradient goes to the operand chosen; where they tie, to `x1`."""
    return apply("minimum", [("x1", x1), ("x2", x2)])


def maximum(x1, x2):
    """The elementwise larger of `x1` and `x2`, as `keras.ops.maximum`; numpy's broadcasting. The
    gradient goes to the operand chosen; where they tie, to `x1`."""
    return apply("maximum", [("x1", x1), ("x2", x2)])


def greater(x1, x2):
    """1.0 where `x1 > x2`, else 0.0, as `keras.ops.greater` but in the model's float type (Keras's is
    bool); numpy's broadcasting. No gradient flows through it."""
    return apply("greater", [("x1", x1), ("x2", x2)])


def greater_equal(x1, x2):
    """1.0 where `x1 >= x2`, else 0.0, as `keras.ops.greater_equal` but in the model's float type
    (Keras's is bool); numpy's broadcasting. No gradient flows through it."""
    return apply("greater_equal", [("x1", x1), ("x2", x2)])


def less(x1, x2):
    """1.0 where `x1 < x2`, else 0.0, as `keras.ops.less` but in the model's float type (Keras's is
    bool); numpy's broadcasting. No gradient flows through it."""
    return apply("less", [("x1", x1), ("x2", x2)])


def less_equal(x1, x2):
    """1.0 where `x1 <= x2`, else 0.0, as `keras.ops.less_equal` but in the model's float type
    (Keras's is bool); numpy's broadcasting. No gradient flows through it."""
    return apply("less_equal", [("x1", x1), ("x2", x2)])


def equal(x1, x2):
    """1.0 where `x1 == x2`, else 0.0, as `keras.ops.equal` but in the model's float type (Keras's is
    bool); numpy's broadcasting. No gradient flows through it. (A tensor's `==` operator stays
    Python's identity, as in Keras.)"""
    return apply("equal", [("x1", x1), ("x2", x2)])


def not_equal(x1, x2):
    """1.0 where `x1 != x2`, else 0.0, as `keras.ops.not_equal` but in the model's float type (Keras's
    is bool); numpy's broadcasting. No gradient flows through it."""
    return apply("not_equal", [("x1", x1), ("x2", x2)])


def where(condition, x1, x2):
    """x1 where condition is nonzero, else x2, all three broadcast together; the gradient goes to
    the operand chosen, none to the condition."""
    return apply("where", [("condition", condition), ("x1", x1), ("x2", x2)])


def negative(x):
    """`-x`, elementwise, as `keras.ops.negative` (a tensor's unary `-`)."""
    return apply("negative", [("x", x)])


def exp(x):
    """`e ** x`, elementwise, as `keras.ops.exp`; gradient `y`."""
    return apply("exp", [("x", x)])


def log(x):
    """The natural logarithm of `x`, elementwise, as `keras.ops.log`; gradient `1 / x`."""
    return apply("log", [("x", x)])


def sqrt(x):
    """The square root of `x`, elementwise, as `keras.ops.sqrt`; gradient `0.5 / y` (infinite at 0)."""
    return apply("sqrt", [("x", x)])


def abs(x):  # noqa: A001 (Keras's name)
    """`|x|`, elementwise, as `keras.ops.abs` (also `absolute`, and a tensor's `abs()`); gradient
    `sign(x)`, 0 at 0."""
    return apply("abs", [("x", x)])


absolute = abs


def square(x):
    """`x * x`, elementwise, as `keras.ops.square`; gradient `2 x`."""
    return apply("square", [("x", x)])


def tanh(x):
    """The hyperbolic tangent of `x`, elementwise, as `keras.ops.tanh`; gradient `1 - y ** 2`."""
    return apply("tanh", [("x", x)])


def sigmoid(x):
    """`1 / (1 + exp(-x))`, elementwise, as `keras.ops.sigmoid`; gradient `y (1 - y)`."""
    return apply("sigmoid", [("x", x)])


def relu(x):
    """`max(x, 0)`, elementwise, as `keras.ops.relu`; gradient 1 where `x > 0`, else 0."""
    return apply("relu", [("x", x)])


def gelu(x, approximate=True):
    """The Gaussian error linear unit, elementwise, as `keras.ops.gelu`: `approximate=True` (Keras's
    default for the op) is the tanh approximation, `approximate=False` the exact `x Φ(x)` of the erf
    form (which the `"gelu"` activation computes). `approximate` must be a bool."""
    if not isinstance(approximate, (bool, np.bool_)):
        raise TypeError(f"gelu: approximate must be True or False, got {approximate!r}")
    return apply("gelu" if approximate else "gelu_erf", [("x", x)])


def clip(x, x_min, x_max):
    """`x` limited to `[x_min, x_max]`, as `keras.ops.clip`: the bounds are finite Python or numpy
    numbers (not tensors) with `x_min <= x_max`; the gradient passes where `x` lies within them."""
    for argument, value in (("x_min", x_min), ("x_max", x_max)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not math.isfinite(value):
            raise TypeError(f"clip: {argument} must be a finite number, got {value!r}")
    if x_min > x_max:
        raise ValueError(f"clip: x_min ({x_min}) must not exceed x_max ({x_max})")
    return apply("clip", [("x", x)], float(x_min), float(x_max))


def ones_like(x, dtype=None):
    """Ones of `x`'s shape, as `keras.ops.ones_like` (a symbolic `x`: a tensor of ones through which no
    gradient flows). `dtype` is taken for Keras's signature and not used: the values are in the
    model's float type."""
    return apply("ones_like", [("x", x)])


def zeros_like(x, dtype=None):
    """Zeros of `x`'s shape, as `keras.ops.zeros_like` (a symbolic `x`: a tensor of zeros through which
    no gradient flows). `dtype` is taken for Keras's signature and not used: the values are in the
    model's float type."""
    return apply("zeros_like", [("x", x)])
