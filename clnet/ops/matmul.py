"""matmul with numpy's semantics over the sample axes: (batch, t, d) @ (batch, d, t2), (batch, t, d)
@ a constant (d, k), a constant (t, d) @ (batch, d, k), leading axes broadcast. A symbolic
(batch, d) is a batch of row vectors (times a constant matrix); the batch axis is never a matrix
axis of a product, so a symbolic second operand needs a matrix per sample."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import (Op, constant, eager_array, geometry, is_input, is_symbolic, launch, op_name, operand, row_major,
                   run_eagerly, size, symbolic)
from .elementwise import broadcast, collapse


def plan(a: tuple, b: tuple) -> dict:
    """The product of full shapes a and b (None first for a symbolic operand): the output's full
    shape and each operand's (batch axes, matrix) in the kernels' terms."""
    shown = f"{tuple(a)} and {tuple(b)}"
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"matmul: shapes {shown}: a scalar has no matrix axes (use ops.multiply)")
    symbolic_a, symbolic_b = a[0] is None, b[0] is None
    drop_m = drop_n = False
    if len(b) == 1 or (symbolic_b and len(b) == 2):
        if symbolic_b:
            raise ValueError(f"matmul: shapes {shown}: the second operand, a symbolic {tuple(b)}, has one sample axis, "
                             "so its matrix would span the batch; give each sample a matrix (ops.expand_dims(x, -1) "
                             "for a column)")
        b, drop_n = (*b, 1), True          # a constant vector (k,) as a column (k, 1)
    if len(a) == 1 or (symbolic_a and len(a) == 2):
        if symbolic_a and symbolic_b:
            raise ValueError(f"matmul: shapes {shown}: a symbolic {tuple(a)} is a batch of row vectors, which "
                             "multiplies a constant matrix only; give each sample a matrix (ops.expand_dims(x, 1))")
        a, drop_m = (*a[:-1], 1, a[-1]), True  # a row vector (k,) as (1, k), per sample if symbolic
    m, k, k2, n = a[-2], a[-1], b[-2], b[-1]
    if k != k2:
        raise ValueError(f"matmul: shapes {shown}: the last axis of the first ({k}) must equal the second to last "
                         f"of the second ({k2})")
    batch = broadcast("matmul", [a[:-2], b[:-2]])
    out = (*batch, *(() if drop_m else (m,)), *(() if drop_n else (n,)))
    return {"out": out, "batch": batch, "a": a, "b": b, "m": m, "k": k, "n": n}


class MatMul(Op):
    """a @ b: `operands` has None for a symbolic input, UNBATCHED for one without a batch axis (a
    weight, as a constant but read from the graph, its gradient summed over the rows) or a
    constant (array or nested list), as Elementwise's."""
    op = "matmul"
    takes_unbatched = True

    def __init__(self, operands, name=None):
        super().__init__(op_name("matmul") if name is None else name)
        self.operands = [o if is_input(o) else np.asarray(o, np.float64) for o in operands]
        if len(self.operands) != 2 or not any(is_input(o) for o in self.operands):
            raise ValueError("MatMul: operands must be two, at least one of them a symbolic input")

    def _full(self, input_shapes):
        shapes = iter(input_shapes)
        return [(None, *next(shapes)) if o is None else tuple(next(shapes)) if is_input(o) else o.shape
                for o in self.operands]

    def compute_output_shape(self, input_shapes, tensors=None):
        out = plan(*self._full(input_shapes))["out"]
        return out[1:] if out and out[0] is None else out  # (no batch axis if no operand has one)

    def setup(self):
        p = plan(*self._full(self.input_shapes))
        self.m, self.k, self.n = p["m"], p["k"], p["n"]
        self.batched = any(o is None for o in self.operands)
        batch = p["batch"][1:] if self.batched else p["batch"]  # the output's sample batch axes
        rows, strides, self.constants = [], [], []
        for o, shape, matrix in zip(self.operands, (p["a"], p["b"]), (self.m * self.k, self.k * self.n)):
            own = tuple(shape[:-2])
            if o is None or self.batched and len(own) == len(p["batch"]):
                own = own[1:]  # the batch axis (None), or a constant's or weight's 1 there
            own = (1,) * (len(batch) - len(own)) + own
            strides.append([0 if e == 1 else s * matrix for e, s in zip(own, row_major(own))])
            rows.append(size(own) * matrix if o is None else 0)
            if not is_input(o):
                self.constants.append(Tensor.from_numpy(o.astype(self.dtype), self.dtype, self.rt))
        out_strides = [s * self.m * self.n for s in row_major(batch)]
        axes = collapse(batch, [*strides, out_strides])
        self.axes = len(axes)
        self.dims = geometry(self.rt, [[e, *s] for e, s in axes])
        self.batches = size(batch)
        self.a_row, self.b_row = rows
        # Per operand: its own batch matrices and the product of the axes it is broadcast along.
        self.own = [(size([e for e, s in axes if s[i]]), size([e for e, s in axes if not s[i]])) for i in (0, 1)]
        program = self.rt.program(("ops/matmul.cl",), self.dtype)
        # Every argument given by each launch (the operands differ per call), its name checked once.
        self._forward = self.rt.kernel(program, "MatMul", self.dtype).bind(
            ("a", "b", "c", "dims", "axes", "batches", "m", "k", "n", "a_row", "b_row", "total"))
        self._gradient = self.rt.kernel(program, "MatMulGradient", self.dtype).bind(
            ("own", "a", "b", "grad", "d", "dims", "axes", "batches", "own_batches", "summed", "m", "k", "n", "a_row",
             "b_row", "rows_summed", "total"))

    def allocate(self, capacity):
        super().allocate(capacity)
        self.input_grads = [Tensor((capacity, *s), self.dtype, self.rt) for s in self.input_shapes]

    def _operands(self, xs):
        inputs, constants = iter(xs), iter(self.constants)
        return [next(inputs) if is_input(o) else next(constants) for o in self.operands]

    def forward(self, xs, rows):
        self.xs = xs
        total = rows * self.width
        a, b = self._operands(xs)
        self._forward(*launch(total), a, b, self.outputs, self.dims, self.axes, self.batches, self.m, self.k, self.n,
                      self.a_row, self.b_row, total)
        return self.outputs

    def backward(self, grad, rows, input_grads):
        a, b = self._operands(self.xs)
        slots = [i for i, o in enumerate(self.operands) if is_input(o)]
        results = []
        for index, (wanted, own) in enumerate(zip(input_grads, slots)):
            if not wanted:
                results.append(None)
                continue
            own_batches, summed = self.own[own]
            over = rows if self.batched and self.operands[own] is not None else 1  # a weight's: summed over rows
            total = rows // over * own_batches * (self.m * self.k if own == 0 else self.k * self.n)
            self._gradient(*launch(total), own, a, b, grad, self.input_grads[index], self.dims, self.axes,
                           self.batches, own_batches, summed, self.m, self.k, self.n, self.a_row, self.b_row, over,
                           total)
            results.append(self.input_grads[index])
        return results

    def to_onnx(self, graph, inputs):
        # ONNX's MatMul is numpy's matmul, as this layer's (the batch axis of a symbolic operand is
        # a leading axis that the other's broadcasts along): the operands go in as they are.
        given = iter(inputs)
        names = [next(given) if is_input(o) else graph.constant("constant", o) for o in self.operands]
        return [graph.op("MatMul", *names)]

    def get_config(self):
        return {"name": self.name, "operands": [o if is_input(o) else o.tolist() for o in self.operands]}


def matmul(x1, x2):
    """`x1 @ x2`, as `keras.ops.matmul`: numpy's matmul with the batch axis kept first (see the
    module's doc). Symbolic operands: `(batch, t, d) @ (batch, d, t2)`, a tensor times a constant
    matrix `(d, k)`, a constant times a tensor, leading axes broadcast; the batch axis is never a
    matrix axis. On arrays alone, numpy's matmul (a scalar operand raises)."""
    values = [("x1", x1), ("x2", x2)]
    if is_symbolic(x1) or is_symbolic(x2):
        layer = MatMul([operand(v) if is_symbolic(v) else constant("matmul", name, v) for name, v in values])
        return layer([symbolic(v) for _, v in values if is_symbolic(v)])
    a, b = (eager_array("matmul", name, v) for name, v in values)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape}: a scalar has no matrix axes (use ops.multiply)")
    # Eagerly both arrays are one sample each, so both need matrices and one rank (numpy aligns
    # batch axes from the last): a vector is (1, k) or (k, 1), and that axis is dropped after.
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    rank = max(a2.ndim, b2.ndim)
    a2, b2 = (x.reshape((1,) * (rank - x.ndim) + x.shape) for x in (a2, b2))
    result = run_eagerly(MatMul([None, None]), [a2, b2])
    if b.ndim == 1:
        result = result[..., 0]
    if a.ndim == 1:
        result = result[..., 0] if b.ndim == 1 else result[..., 0, :]
    return result.copy()  # (a view of the read-back array otherwise)


def dot(x1, x2):
    """numpy's dot where it is matmul (the second operand a vector or a matrix), as Keras code uses
    it: `ops.dot(inputs, self.w)`."""
    second = symbolic(x2).shape if is_symbolic(x2) else np.shape(x2)
    if len(second) > 2 or is_symbolic(x2) and symbolic(x2).batched and len(second) > 1:
        raise ValueError(f"dot: the second operand has shape {tuple(second)}; clnet's dot is matmul, for a second "
                         "operand that is a vector or a matrix (use ops.matmul for stacks of matrices)")
    return matmul(x1, x2)
