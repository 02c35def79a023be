"""Fusing elementwise ops: a tree of Elementwise calls, each read only by the next, becomes one
call of a FusedElementwise layer whose forward kernel and gradient kernel are generated from the
tree (OpenCL C calling elementwise.cl's apply() and derivative() with constant op codes, which
the compiler folds), built and cached through Runtime.program like any program.

`x * 2 + exp(x)` unfused is 3 launches forward and 3 backward (the add passes its gradient,
x * 2 and exp(x) take one each, and the engine sums x's two gradients); fused, 1 and 1. Each fused
element recomputes the tree from its leaves, backward too (no intermediate is stored): the tree's
ops cost a few instructions against the memory traffic of a launch per op.

How a model uses it: Model.build makes its steps from `fuse_elementwise(self._calls,
self._outputs)` instead of `self._calls` (and counts each tensor's readers over that list), seeding
a layer it does not list (a fused one, which has no weights) with any index; the graph itself,
self._calls, stays as made, for layers, summary, get_config and saving."""
from __future__ import annotations

import hashlib

import numpy as np

from ..cl import runtime as cl_runtime
from ..cl.tensor import Tensor
from ..layers.base import Call
from .base import Op, launch, op_name, row_major, size
from .elementwise import CODES, SLOTS, Elementwise, broadcast, collapse, onnx_nodes


class FusedElementwise(Op):
    """A tree of elementwise ops as one layer. `nodes`, in the order computed (the last is the
    output): {"op", "a", "b", "args"}, each arg ["input", k] (the call's k-th input), ["constant",
    k] (`constants[k]`, an array), ["literal", value] (a number, written into the kernel) or
    ["node", m] (node m's value)."""
    op = "fused"

    def __init__(self, nodes, constants=(), name=None):
        super().__init__(op_name("fused_elementwise") if name is None else name)
        self.nodes = [{"op": n["op"], "a": float(n["a"]), "b": float(n["b"]), "args": [list(a) for a in n["args"]]}
                      for n in nodes]
        self.constants_ = [np.asarray(c, np.float64) for c in constants]

    def describe(self) -> str:
        return f"ops.fused({', '.join(n['op'] for n in self.nodes)}) {self.name!r}"

    def _shape(self, arg, input_shapes, shapes) -> tuple:
        kind, k = arg
        return ((None, *input_shapes[k]) if kind == "input" else self.constants_[k].shape if kind == "constant"
                else () if kind == "literal" else shapes[k])

    def compute_output_shape(self, input_shapes, tensors=None):
        shapes = []
        for node in self.nodes:
            shapes.append(broadcast(node["op"], [self._shape(a, input_shapes, shapes) for a in node["args"]]))
        return shapes[-1][1:]

    def setup(self):
        out = self.output_shape
        rank = len(out)
        slots = [(s, size(s)) for s in self.input_shapes]  # (sample shape, row stride) per leaf buffer
        for c in self.constants_:
            slots.append((c.shape[1:] if c.ndim == rank + 1 else c.shape, 0))
        padded = [(1,) * (rank - len(s)) + tuple(s) for s, _ in slots]
        strides = [[0 if e == 1 else st for e, st in zip(p, row_major(p))] for p in padded]
        axes = collapse(out, strides)
        out_strides = row_major([e for e, _ in axes])
        self.slots, self.axes = len(slots), len(axes)
        table = [b for _, b in slots] + [v for (e, s), o in zip(axes, out_strides) for v in (e, *s, o)]
        self.dims = Tensor.from_numpy(np.array(table or [0], np.int32), np.int32, self.rt)
        self.widths = [size(p) for p in padded]
        self.constant_tensors = [Tensor.from_numpy(c.astype(self.dtype), self.dtype, self.rt) for c in self.constants_]
        text = source(self.nodes, len(self.input_shapes), self.slots)
        name = f"ops/fused/{hashlib.sha256(text.encode()).hexdigest()[:20]}.cl"
        cl_runtime.add_source(name, text)
        program = self.rt.program(("ops/elementwise.cl", name), self.dtype, CODES)
        leaves = tuple(f"l{s}" for s in range(self.slots))  # (every argument given by each launch)
        self._forward = self.rt.kernel(program, "Fused", self.dtype).bind(
            (*leaves, "y", "dims", "axes", "width", "total"))
        self._gradient = self.rt.kernel(program, "FusedGradient", self.dtype).bind(
            ("which", "grad", *leaves, "dx", "dims", "axes", "width", "own_width", "total"))

    def allocate(self, capacity):
        super().allocate(capacity)
        self.input_grads = [Tensor((capacity, *s), self.dtype, self.rt) for s in self.input_shapes]

    def forward(self, xs, rows):
        self.xs = xs
        total = rows * self.width
        self._forward(*launch(total), *xs, *self.constant_tensors, self.outputs, self.dims, self.axes, self.width, total)
        return self.outputs

    def backward(self, grad, rows, input_grads):
        results = []
        for k, wanted in enumerate(input_grads):
            if not wanted:
                results.append(None)
                continue
            total = rows * self.widths[k]
            self._gradient(*launch(total), k, grad, *self.xs, *self.constant_tensors, self.input_grads[k], self.dims,
                           self.axes, self.width, self.widths[k], total)
            results.append(self.input_grads[k])
        return results

    def to_onnx(self, graph, inputs):
        """The tree's ops one by one, as the Elementwise calls it was made of export (ONNX has no
        fused elementwise op; a runtime fuses them itself)."""
        constants = [graph.constant("constant", c) for c in self.constants_]
        names = []
        for node in self.nodes:
            args = [inputs[k] if kind == "input" else constants[k] if kind == "constant" else
                    graph.constant("literal", float(k)) if kind == "literal" else names[k] for kind, k in node["args"]]
            names.append(onnx_nodes(graph, node["op"], args, node["a"], node["b"]))
        return [names[-1]]

    def get_config(self):
        return {"name": self.name, "nodes": self.nodes, "constants": [c.tolist() for c in self.constants_]}


def literal(value: float) -> str:
    """A number in OpenCL C, exactly (a hex float literal), infinities and NaN by name."""
    value = float(value)
    if value != value:
        return "NAN"
    if abs(value) == float("inf"):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return f"((TYPE){value.hex()})"


def source(nodes, inputs: int, slots: int) -> str:
    """The OpenCL C of a fused tree over `slots` leaf buffers, the first `inputs` of them the
    call's inputs and the rest constants: Fused (forward) and FusedGradient
    (dL/d leaf `which`, summed over the axes that leaf is broadcast along), elementwise.cl's
    geometry with a column per leaf: `dims` holds the leaves' row strides, then per axis its
    extent, each leaf's stride and the output's."""
    leaves = ", ".join(f"__global const TYPE *l{s}" for s in range(slots))
    g = slots + 2

    def ref(arg):
        kind, k = arg
        return (f"v{k}" if kind == "node" else f"x{k}" if kind == "input" else
                f"c{k}" if kind == "constant" else literal(k))

    def loads(offset):
        names = [f"x{s}" if s < inputs else f"c{s - inputs}" for s in range(slots)]
        return "".join(f"        const TYPE {n} = l{s}[{offset}{s}];\n" for s, n in enumerate(names))

    def values():
        lines = []
        for m, n in enumerate(nodes):
            args = [ref(a) for a in n["args"]]
            args += [args[0]] * (SLOTS - len(args))
            lines.append(f"        const TYPE v{m} = apply(OP_{n['op'].upper()}, {', '.join(args)}, "
                         f"{literal(n['a'])}, {literal(n['b'])});\n")
        return "".join(lines)

    def adjoints():
        last = len(nodes) - 1
        lines = [f"        TYPE d_v{m} = {'grad[p]' if m == last else '0'};\n" for m in range(len(nodes))]
        lines += [f"        TYPE d_x{s} = 0;\n" for s in range(inputs)]
        for m in range(last, -1, -1):
            n = nodes[m]
            args = [ref(a) for a in n["args"]]
            padded = args + [args[0]] * (SLOTS - len(args))
            for which, a in enumerate(n["args"]):
                if a[0] in ("node", "input"):
                    target = f"d_v{a[1]}" if a[0] == "node" else f"d_x{a[1]}"
                    lines.append(f"        {target} += d_v{m} * derivative(OP_{n['op'].upper()}, {which}, "
                                 f"{', '.join(padded)}, v{m}, {literal(n['a'])}, {literal(n['b'])});\n")
        chosen = " : ".join(f"which == {s} ? d_x{s}" for s in range(inputs)) + " : 0" if inputs else "0"
        lines.append(f"        sum += {chosen};\n")
        return "".join(lines)

    walk = "".join(f"        o{s} += e * STRIDE(k, {s});\n" for s in range(slots))
    starts = "".join(f"    long o{s} = (long)row * dims[{s}];\n" for s in range(slots))
    return f"""// Generated by clnet/ops/fusion.py: {' -> '.join(n['op'] for n in nodes)}.
// (After elementwise.cl, whose apply() and derivative() it calls, and whose geometry macros
// these replace.)
#undef EXTENT
#undef STRIDE
#undef OUT_STRIDE
#define G {g}
#define EXTENT(k) dims[{slots} + G * (k)]
#define STRIDE(k, s) dims[{slots} + G * (k) + 1 + (s)]
#define OUT_STRIDE(k) dims[{slots} + G * (k) + {slots + 1}]

__kernel void Fused({leaves}, __global TYPE *y, __global const int *dims, const int axes, const int width,
                    const int total)
{{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const int row = i / width;
    int j = i - row * width;
{starts}    for (int k = axes - 1; k >= 0; k--) {{
        const int e = j % EXTENT(k);
        j /= EXTENT(k);
{walk}    }}
    {{
{loads("o")}{values()}        y[i] = v{len(nodes) - 1};
    }}
}}

__kernel void FusedGradient(const int which, __global const TYPE *grad, {leaves}, __global TYPE *dx,
                            __global const int *dims, const int axes, const int width, const int own_width,
                            const int total)
{{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const int row = i / own_width;
    int j = i - row * own_width;
    long out = (long)row * width;
{starts}    int summed = 1;
    for (int k = axes - 1; k >= 0; k--) {{
        if (STRIDE(k, which) == 0) {{
            summed *= EXTENT(k);
            continue;
        }}
        const int e = j % EXTENT(k);
        j /= EXTENT(k);
        out += e * OUT_STRIDE(k);
{walk}    }}
    TYPE sum = 0;
    for (int m = 0; m < summed; m++) {{
        long p = out;
{''.join(f"        long q{s} = o{s};{chr(10)}" for s in range(slots))}        int r = m;
        for (int k = axes - 1; k >= 0; k--) {{
            if (STRIDE(k, which) != 0)
                continue;
            const int e = r % EXTENT(k);
            r /= EXTENT(k);
            p += e * OUT_STRIDE(k);
{''.join(f"            q{s} += e * STRIDE(k, {s});{chr(10)}" for s in range(slots))}        }}
{loads("q")}{values()}{adjoints()}    }}
    dx[i] = sum;
}}
"""


def fuse_elementwise(calls: list[Call], outputs=()) -> list[Call]:
    """`calls` (a model's, in topological order) with every tree of Elementwise calls whose inner
    outputs are each read by one call only, of the tree, and are not among `outputs` (the model's
    outputs, which must stay tensors of their own), replaced by one call of a FusedElementwise
    layer. The fused call reads the tree's outside tensors and gives the tree's output tensor (the
    same KerasTensor object, so the calls after it read it as before); it takes the number of the
    tree's last call. Calls that are not fused are returned as they are; the graph they came from
    (their layers, the tensors' producers) is not changed."""
    calls = list(calls)
    readers: dict[int, list[Call]] = {}
    for call in calls:
        for t in {id(t): t for t in call.inputs}.values():
            readers.setdefault(id(t), []).append(call)
    kept = {id(t) for t in outputs}
    # (Not an op broadcasting a weight over the batch, whose gradient is summed over the rows.)
    elementwise = lambda call: type(call.layer) is Elementwise and not any(isinstance(o, str) for o in call.layer.operands)
    # A call is absorbed into the one call that reads its output, where both are elementwise.
    absorbed = {id(call) for call in calls
                if elementwise(call) and id(call.output) not in kept
                and len(readers.get(id(call.output), ())) == 1 and elementwise(readers[id(call.output)][0])}
    fused_calls = []
    for call in calls:
        if id(call) in absorbed:
            continue
        if elementwise(call) and any(id(t.call) in absorbed for t in call.inputs):
            fused_calls.append(_fused(call, absorbed))
        else:
            fused_calls.append(call)
    return fused_calls


def _fused(root: Call, absorbed: set[int]) -> Call:
    """The FusedElementwise call of the tree under `root`."""
    nodes, inputs, constants, seen = [], [], [], {}

    def visit(call) -> int:
        if id(call) in seen:
            return seen[id(call)]
        layer, tensors, args = call.layer, iter(call.inputs), []
        for operand in layer.operands:
            if operand is None:
                t = next(tensors)
                if id(t.call) in absorbed:
                    args.append(["node", visit(t.call)])
                else:
                    if not any(t is u for u in inputs):
                        inputs.append(t)
                    args.append(["input", next(k for k, u in enumerate(inputs) if u is t)])
            elif operand.size == 1:
                args.append(["literal", float(operand.reshape(-1)[0])])
            else:
                constants.append(operand)
                args.append(["constant", len(constants) - 1])
        nodes.append({"op": layer.op, "a": layer.a, "b": layer.b, "args": args})
        seen[id(call)] = len(nodes) - 1
        return seen[id(call)]

    visit(root)
    fused = Call.__new__(Call)  # not Call(): no new number, no new tensor; the tree's output stays
    fused.layer = FusedElementwise(nodes, constants)
    fused.inputs, fused.number, fused.batched = inputs, root.number, root.batched
    fused.outputs, fused.output = list(root.outputs), root.output
    fused.layer.__dict__.setdefault("inbound_calls", []).append(fused)  # (what Call() does for a layer's .output)
    return fused
