"""The patterns of several ONNX nodes that clnet.onnx.load reads as one op: Swish, GELU (exact, and
the tanh approximation), a decomposed LayerNormalization, a BatchNormalization whose constants
the exporter folded, clnet's LocallyConnected1D, an Embedding (Gather of a table), clnet's
PositionEmbedding, a RepeatVector, a ReLU with a threshold, a recurrent op with the Transpose
before it, clnet's MultiHeadAttention, the Not of a comparison (the opposite comparison), and
ones_like/zeros_like as clnet.ops writes them. Found before the graph is read, each becomes one
Node in place of its nodes, where the last of them was."""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

# The inputs of ONNX's recurrent ops, in order.
RECURRENT_INPUTS = {"RNN": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
                    "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
                    "LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")}
INTEGER_TYPES = (2, 3, 4, 5, 6, 7, 12, 13)  # TensorProto's UINT8 ... INT64, UINT32, UINT64
# The comparison a Not of each comparison is (where no operand is NaN), as the op the reader reads.
OPPOSITE = {"Greater": "LessOrEqual", "Less": "GreaterOrEqual", "GreaterOrEqual": "Less", "LessOrEqual": "Greater",
            "Equal": "NotEqual_pattern"}


class Node:
    """A node of the graph as read: an ONNX node, or a pattern of several (Swish, GELU, a
    decomposed LayerNormalization, ...: see Patterns) standing for one op, `proto` then being its
    last node."""

    def __init__(self, op: str, inputs, outputs, proto, params=None):
        self.op, self.inputs, self.outputs, self.proto, self.params = op, list(inputs), list(outputs), proto, params


class Patterns:
    """Finds the patterns that stand for one op (see the module's docstring) and puts a Node for
    each in place of its nodes, where the last of them was: every input of the pattern is
    computed before its first node, and its output by its last."""

    def __init__(self, reader, nodes: list[Node]):
        """`reader`: the importer's graph reader (its constants, _attribute and _axes_input)."""
        self.reader, self.nodes = reader, nodes
        self.constants = reader.constants
        self.producer = {name: node for node in nodes for name in node.outputs}
        self.users = defaultdict(list)
        for node in nodes:
            for name in dict.fromkeys(node.inputs):  # Mul(d, d) is one reader of d
                self.users[name].append(node)
        self.output = reader.graph.output[0].name

    def rewrite(self) -> list[Node]:
        replaced: dict[int, Node] = {}
        taken: set[int] = set()
        position = {id(n): i for i, n in enumerate(self.nodes)}
        for node in self.nodes:
            for match in (self._layer_norm, self._gelu, self._gelu_tanh, self._swish, self._channel_affine,
                          self._locally_connected, self._embedding, self._position_embedding, self._repeat_vector,
                          self._relu, self._recurrent, self._attention, self._negation, self._like):
                found = match(node)
                if found is not None and not {id(n) for n in found[1]} & taken:
                    pattern, parts = found
                    taken.update(id(n) for n in parts)
                    replaced[id(max(parts, key=lambda n: position[id(n)]))] = pattern
                    break
        return [replaced.get(id(n), n) for n in self.nodes if id(n) in replaced or id(n) not in taken]

    # -- helpers ------------------------------------------------------------------------------
    def _only(self, name: str, op: str | tuple) -> Node | None:
        """The one node reading `name`, if it is `op` and `name` is not the graph's output."""
        users = self.users.get(name, [])
        ops = (op,) if isinstance(op, str) else op
        return users[0] if len(users) == 1 and users[0].op in ops and name != self.output else None

    def _made(self, name: str, op: str | tuple, reader: Node) -> Node | None:
        """The node making `name`, if it is `op` and `reader` is its only reader."""
        node = self.producer.get(name)
        ops = (op,) if isinstance(op, str) else op
        users = self.users.get(name, [])
        return node if node is not None and node.op in ops and users == [reader] and name != self.output else None

    def _is(self, name: str, value: float, rtol=1e-6) -> bool:
        c = self.constants.get(name)
        return c is not None and c.size == 1 and np.isclose(float(c.reshape(())), value, rtol=rtol, atol=0)

    def _other(self, node: Node, name: str) -> str | None:
        """The other input of a two-input node that reads `name`."""
        if len(node.inputs) != 2 or name not in node.inputs:
            return None
        return node.inputs[1] if node.inputs[0] == name else node.inputs[0]

    def _scaled(self, name: str, reader: Node) -> tuple[str, np.ndarray] | None:
        """(x, b) where `name` is Mul(x, b), b a scalar constant, read by `reader` alone."""
        node = self._made(name, "Mul", reader)
        if node is not None:
            constant = [i for i in node.inputs if i in self.constants and self.constants[i].size == 1]
            rest = [i for i in node.inputs if i not in self.constants]
            if len(constant) == 1 and len(rest) == 1:
                return rest[0], self.constants[constant[0]].reshape(())[()]
        return None

    def _three_factors(self, final: Node) -> tuple[list[str], list[Node]] | None:
        """(the three factors, the Mul nodes) where `final` is a product of three tensors in any
        association (Mul(Mul(a, b), c), Mul(a, Mul(b, c)), ...), its inner Muls read by it alone."""
        if final.op != "Mul":
            return None
        factors, parts, stack = [], [final], [(name, final) for name in final.inputs]
        while stack:
            name, reader = stack.pop()
            inner = self._made(name, "Mul", reader) if name not in self.constants else None
            if inner is not None and len(parts) < 3:
                parts.append(inner)
                stack.extend((i, inner) for i in inner.inputs)
            else:
                factors.append(name)
        return (factors, parts) if len(factors) == 3 else None

    def _one_plus(self, name: str, op: str) -> tuple[Node, Node] | None:
        """(the Add, the `op` node) where `name` is Add(1, op(...)), read by one Mul alone, the
        `op` node read by the Add alone: GELU's 1 + Erf(...) and 1 + Tanh(...)."""
        add = self.producer.get(name)
        if add is None or add.op != "Add" or self._only(name, "Mul") is None:
            return None
        one = next((i for i in add.inputs if self._is(i, 1.0, 0)), None)
        inner = one and self._made(self._other(add, one), op, add)
        return (add, inner) if inner else None

    # -- the patterns: (the pattern's Node, the ONNX nodes it replaces) or None -------------
    def _swish(self, final: Node):
        """x * Sigmoid(b x) or x / (1 + Exp(Neg(b x))), b x being x or Mul(x, b)."""
        if final.op == "Mul" and len(final.inputs) == 2:
            for x, gate in (final.inputs, final.inputs[::-1]):
                sigmoid = self._made(gate, "Sigmoid", final)
                if sigmoid is None:
                    continue
                inner = sigmoid.inputs[0]
                if inner == x:
                    return Node("Swish_pattern", [x], final.outputs, final.proto, {"b": 1.0}), [sigmoid, final]
                scaled = self._scaled(inner, sigmoid)
                if scaled and scaled[0] == x:
                    return (Node("Swish_pattern", [x], final.outputs, final.proto, {"b": scaled[1]}),
                            [self.producer[inner], sigmoid, final])
        if final.op == "Div":
            x, denominator = final.inputs
            add = self._made(denominator, "Add", final)
            exp_out = add and self._other(add, next((i for i in add.inputs if self._is(i, 1.0, 0)), ""))
            exp = exp_out and self._made(exp_out, "Exp", add)
            neg = exp and self._made(exp.inputs[0], "Neg", exp)
            if neg:
                inner = neg.inputs[0]
                b = 1.0 if inner == x else None
                parts = [neg, exp, add, final]
                if b is None and (scaled := self._scaled(inner, neg)) and scaled[0] == x:
                    b, parts = scaled[1], [self.producer[inner], *parts]
                if b is not None:
                    return Node("Swish_pattern", [x], final.outputs, final.proto, {"b": b}), parts
        return None

    def _gelu(self, final: Node):
        """A product of x, 0.5 and Add(1, Erf(x / sqrt(2))) (Mul by 1/sqrt(2) or Div by sqrt(2)),
        in any association."""
        product = self._three_factors(final)
        if product is None:
            return None
        factors, parts = product
        halves = [f for f in factors if self._is(f, 0.5)]
        for one_plus in factors:
            add, erf = self._one_plus(one_plus, "Erf") or (None, None)
            if erf is None:
                continue
            scale = self.producer.get(erf.inputs[0])
            if scale is None or self._only(erf.inputs[0], "Erf") is not erf or scale.op not in ("Mul", "Div"):
                continue
            x = next((i for i in scale.inputs if i not in self.constants), None)
            c = self._other(scale, x) if x else None
            if c is None or not (self._is(c, 0.5 ** 0.5) if scale.op == "Mul" else self._is(c, 2 ** 0.5)) or (
                    scale.op == "Div" and scale.inputs[0] != x):
                continue
            rest = [f for f in factors if f != one_plus]
            if len(rest) == 2 and x in rest and any(f in halves for f in rest if f != x):
                return Node("GELU_pattern", [x], final.outputs, final.proto), [scale, erf, add, *parts]
        return None

    def _gelu_tanh(self, final: Node):
        """Keras's default GELU, the tanh approximation, as clnet writes it below opset 20 (and torch
        its gelu(approximate='tanh')): a product of x, 0.5 and Add(1, Tanh(Mul(sqrt(2 / pi), Add(x,
        Mul(0.044715, x^3))))), x^3 a Pow(x, 3) or Mul(x, Mul(x, x)), products in any association."""
        product = self._three_factors(final)
        if product is None:
            return None
        factors, parts = product
        for one_plus in factors:
            add, tanh = self._one_plus(one_plus, "Tanh") or (None, None)
            scaled = tanh and self._made(tanh.inputs[0], "Mul", tanh)
            c = scaled and next((i for i in scaled.inputs if self._is(i, math.sqrt(2 / math.pi))), None)
            inner = c and self._made(self._other(scaled, c), "Add", scaled)
            for x in (inner.inputs if inner else []):
                cubic = self._made(self._other(inner, x), "Mul", inner)
                k = cubic and next((i for i in cubic.inputs if self._is(i, 0.044715)), None)
                cube = k and self._cube(self._other(cubic, k), x, cubic)
                rest = [f for f in factors if f != one_plus]
                if cube and len(rest) == 2 and x in rest and any(self._is(f, 0.5) for f in rest if f != x):
                    return (Node("GeluTanh_pattern", [x], final.outputs, final.proto),
                            [*cube, cubic, inner, scaled, tanh, add, *parts])
        return None

    def _cube(self, name: str, x: str, reader: Node) -> list[Node] | None:
        """The nodes making `name` = x^3, Pow(x, 3) or Mul(x, Mul(x, x)) either way, read by `reader` alone."""
        power = self._made(name, "Pow", reader)
        if power is not None:
            return [power] if power.inputs[0] == x and self._is(power.inputs[1], 3.0, 0) else None
        product = self._made(name, "Mul", reader)
        if product is None or x not in product.inputs:
            return None
        square = self._made(self._other(product, x), "Mul", product)
        return [square, product] if square is not None and square.inputs == [x, x] else None

    def _negation(self, node: Node):
        """Not of a comparison read by it alone: the opposite comparison (clnet writes greater_equal
        and less_equal so before opset 12, and not_equal as Not(Equal))."""
        if node.op != "Not":
            return None
        comparison = self._made(node.inputs[0], tuple(OPPOSITE), node)
        if comparison is None:
            return None
        return Node(OPPOSITE[comparison.op], comparison.inputs, node.outputs, node.proto), [comparison, node]

    def _like(self, expand: Node):
        """ones_like, zeros_like as clnet.ops writes them: Expand(a number, Shape(x)) (not the zero
        initial state of a recurrent op, which _recurrent reads)."""
        if expand.op != "Expand" or expand.inputs[0] not in self.constants:
            return None
        value = self.constants[expand.inputs[0]]
        shape = self._made(expand.inputs[1], "Shape", expand)
        if shape is None or value.size != 1 or value.ndim > 1 or self.reader._attribute(shape, "start", 0) != 0 or \
                self.reader._attribute(shape, "end", None) is not None or \
                any(user.op in RECURRENT_INPUTS for user in self.users.get(expand.outputs[0], [])):
            return None
        return Node("Like_pattern", shape.inputs, expand.outputs, expand.proto, value.reshape(())[()]), [shape, expand]

    def _locally_connected(self, gather: Node):
        """clnet's LocallyConnected1D: Gather(x, windows, axis=1) -> Reshape(0, positions, taps) ->
        Transpose(1, 0, 2) -> MatMul(kernel) -> Transpose(1, 0, 2) [-> Add(bias)]."""
        if gather.op != "Gather" or gather.inputs[0] in self.constants or gather.inputs[1] not in self.constants \
                or self.reader._attribute(gather, "axis", 0) != 1 or self.constants[gather.inputs[1]].ndim != 2:
            return None
        reshape = self._only(gather.outputs[0], "Reshape")
        first = reshape and self._only(reshape.outputs[0], "Transpose")
        matmul = first and self._only(first.outputs[0], "MatMul")
        second = matmul and self._only(matmul.outputs[0], "Transpose")
        if not second or any(list(self.reader._attribute(t, "perm", [])) != [1, 0, 2] for t in (first, second)) \
                or matmul.inputs[1] not in self.constants:
            return None
        parts, last, bias = [gather, reshape, first, matmul, second], second, None
        add = self._only(second.outputs[0], "Add")
        if add and self._other(add, second.outputs[0]) in self.constants:
            bias = self.constants[self._other(add, second.outputs[0])]
            parts.append(add)
            last = add
        params = (self.constants[gather.inputs[1]], self.constants[matmul.inputs[1]], bias)
        return Node("LocallyConnected_pattern", [gather.inputs[0]], last.outputs, last.proto, params), parts

    def _channel_affine(self, sub: Node):
        """Sub(x, mean) -> Mul(scale) -> Add(shift), three non-scalar constants."""
        if sub.op != "Sub" or sub.inputs[0] in self.constants or sub.inputs[1] not in self.constants:
            return None
        mul = self._only(sub.outputs[0], "Mul")
        scale = mul and self._other(mul, sub.outputs[0])
        add = scale in self.constants and self._only(mul.outputs[0], "Add")
        shift = add and self._other(add, mul.outputs[0])
        if shift not in self.constants or min(self.constants[n].size for n in (sub.inputs[1], scale, shift)) < 2:
            return None
        params = tuple(self.constants[n] for n in (sub.inputs[1], scale, shift))
        return Node("ChannelAffine_pattern", [sub.inputs[0]], add.outputs, add.proto, params), [sub, mul, add]

    def _layer_norm(self, first: Node):
        """ReduceMean(x) -> Sub(x, mean) -> Pow(d, 2) or Mul(d, d) -> ReduceMean -> Add(eps) -> Sqrt
        -> Div(d, .) [-> Mul(gamma)] [-> Add(beta)], both ReduceMeans over the same one axis."""
        if first.op != "ReduceMean" or first.inputs[0] in self.constants:
            return None
        reader = self.reader
        x = first.inputs[0]
        axes = reader._axes_input(first)
        if axes is None or len(axes) != 1 or not reader._attribute(first, "keepdims", 1):
            return None
        sub = self._only(first.outputs[0], "Sub")
        if sub is None or sub.inputs != [x, first.outputs[0]]:
            return None
        d = sub.outputs[0]
        users = self.users.get(d, [])
        square = next((u for u in users if u.op == "Pow" and u.inputs[0] == d and self._is(u.inputs[1], 2.0, 0)
                       or u.op == "Mul" and u.inputs == [d, d]), None)
        div = next((u for u in users if u.op == "Div" and u.inputs[0] == d), None)
        if len(users) != 2 or square is None or div is None or d == self.output:
            return None
        mean = self._only(square.outputs[0], "ReduceMean")
        add = mean and self._only(mean.outputs[0], "Add")
        sqrt = add and self._only(add.outputs[0], "Sqrt")
        if not sqrt or self._only(sqrt.outputs[0], "Div") is not div or reader._axes_input(mean) != axes or not \
                reader._attribute(mean, "keepdims", 1):
            return None
        epsilon = self._other(add, mean.outputs[0])
        if epsilon not in self.constants or self.constants[epsilon].size != 1:
            return None
        parts, last, gamma, beta = [first, sub, square, mean, add, sqrt, div], div, None, None
        for op in ("Mul", "Add"):
            following = self._only(last.outputs[0], op)
            other = following and self._other(following, last.outputs[0])
            if other in self.constants:
                if op == "Mul":
                    gamma = self.constants[other]
                else:
                    beta = self.constants[other]
                parts.append(following)
                last = following
        params = (axes[0], self.constants[epsilon].reshape(())[()], gamma, beta)
        return Node("LayerNorm_pattern", [x], last.outputs, last.proto, params), parts

    def _embedding(self, gather: Node):
        """Gather(table, ids, axis=0) of a 2-D float table, the ids computed (a graph input of
        integers, as torch writes nn.Embedding, or Cast to an integer type of float ids, as clnet
        writes Embedding)."""
        if gather.op != "Gather" or gather.inputs[0] not in self.constants or gather.inputs[1] in self.constants \
                or self.reader._attribute(gather, "axis", 0) != 0:
            return None
        table = self.constants[gather.inputs[0]]
        if table.ndim != 2 or not np.issubdtype(table.dtype, np.floating):
            return None
        ids, parts = gather.inputs[1], [gather]
        cast = self._made(ids, "Cast", gather)
        if cast is not None and self.reader._attribute(cast, "to", 0) in INTEGER_TYPES:
            ids, parts = cast.inputs[0], [cast, gather]
        return Node("Embedding_pattern", [ids], gather.outputs, gather.proto, table), parts

    def _position_embedding(self, expand: Node):
        """clnet's PositionEmbedding: Expand(table's used rows, Shape(x))."""
        if expand.op != "Expand" or expand.inputs[0] not in self.constants:
            return None
        shape = self._made(expand.inputs[1], "Shape", expand)
        table = self.constants[expand.inputs[0]]
        if shape is None or table.ndim != 2 or self.reader._attribute(shape, "start", 0) != 0 or \
                self.reader._attribute(shape, "end", None) is not None:
            return None
        return Node("PositionEmbedding_pattern", shape.inputs, expand.outputs, expand.proto, table), [shape, expand]

    def _repeat_vector(self, tile: Node):
        """Keras's RepeatVector as clnet and tf2onnx write it: Tile(Unsqueeze(x, axes=[1]), [1, n, 1])."""
        if tile.op != "Tile" or tile.inputs[1] not in self.constants:
            return None
        unsqueeze = self._made(tile.inputs[0], "Unsqueeze", tile)
        repeats = [int(r) for r in self.constants[tile.inputs[1]].ravel()]
        if unsqueeze is None or [a % 3 for a in self.reader._axes_input(unsqueeze) or []] != [1] or \
                len(repeats) != 3 or repeats[0] != 1 or repeats[2] != 1:
            return None
        return (Node("RepeatVector_pattern", unsqueeze.inputs[:1], tile.outputs, tile.proto, repeats[1]),
                [unsqueeze, tile])

    def _relu(self, where: Node):
        """Keras's ReLU(max_value, negative_slope, threshold) as clnet writes its general form:
        Where(Greater(x, threshold), x or Min(x, max_value), Mul(Sub(x, threshold), negative_slope)),
        the three non-negative scalars."""
        def scalar(name):  # the shortest decimal of a non-negative scalar constant (float32's 0.1 as 0.1)
            c = self.constants.get(name)
            value = float(str(c.reshape(())[()])) if c is not None and c.size == 1 else None
            return value if value is not None and value >= 0 else None
        greater = self._made(where.inputs[0], "Greater", where) if where.op == "Where" else None
        if greater is None:
            return None
        x, threshold, above, below = greater.inputs[0], scalar(greater.inputs[1]), where.inputs[1], where.inputs[2]
        top = None if above == x else self._made(above, "Min", where)
        max_value = None if top is None else scalar(top.inputs[1])
        scaled = self._scaled(below, where)
        sub = scaled and self._made(scaled[0], "Sub", self.producer[below])
        if (threshold is None or above != x and (max_value is None or top.inputs[0] != x) or sub is None
                or sub.inputs[0] != x or scalar(sub.inputs[1]) != threshold or not scaled[1] >= 0):
            return None
        params = {"max_value": max_value, "negative_slope": float(str(scaled[1])), "threshold": threshold}
        parts = [greater, *([top] if top else []), sub, self.producer[below], where]
        return Node("ReLU_pattern", [x], where.outputs, where.proto, params), parts

    def _recurrent(self, node: Node):
        """ONNX's RNN, LSTM or GRU on a batch-first tensor: after a Transpose(1, 0, 2) (clnet and
        torch.onnx.export write one), or with layout=1. Zero initial states made in the graph
        (see _zeros; torch writes them for a call without h0) are part of it, and so are the
        views that give batch-first states (batch, units) the op's (directions, batch, units)
        (see _states; clnet writes them for a call's initial_state), whose inputs are then read
        as they are: the Node's params are (op, its inputs by role, those states by role). Which
        outputs are read, and how they are brought back to batch-first, the importer follows as
        it reads the nodes after it (see _Pending in importer.py), knowing the number of steps."""
        if node.op not in ("RNN", "LSTM", "GRU"):
            return None
        x, parts = node.inputs[0], [node]
        if not self.reader._attribute(node, "layout", 0):
            transpose = self._made(x, "Transpose", node)
            if transpose is None or list(self.reader._attribute(transpose, "perm", [])) != [1, 0, 2]:
                return None
            x, parts = transpose.inputs[0], [transpose, node]
        roles, states = dict(zip(RECURRENT_INPUTS[node.op], node.inputs)), {}
        for role in ("initial_h", "initial_c"):
            zeros = self._zeros(roles.get(role, ""), node)
            if zeros is not None:
                roles[role] = ""
                parts[:0] = [n for n in zeros if n not in parts]  # torch gives h0 and c0 one tensor
                continue
            found = self._states(roles.get(role, ""), node)
            if found is not None:
                (states[role], views), roles[role] = found, ""
                parts[:0] = views
        roles["X"] = x
        inputs = [name for name in roles.values() if name] + [name for names in states.values() for name in names]
        return Node("Recurrent_pattern", inputs, node.outputs, node.proto, (node.op, roles, states)), parts

    def _states(self, name: str, reader: Node) -> tuple[list[str], list[Node]] | None:
        """(the batch-first states, the nodes) where `name`, read by `reader` alone, is made of
        (batch, units) states, one for each direction: a view adding a leading axis (see
        _adds_leading_axis), or a Concat along axis 0 of one for each direction of a
        bidirectional op."""
        view = self._made(name, ("Reshape", "Unsqueeze"), reader)
        if view is not None and self._adds_leading_axis(view):
            return [view.inputs[0]], [view]
        concat = self._made(name, "Concat", reader)
        if concat is None or self.reader._attribute(concat, "axis", None) not in (0, -3):
            return None
        views = [self._made(part, ("Reshape", "Unsqueeze"), concat) for part in concat.inputs]
        if any(view is None or not self._adds_leading_axis(view) for view in views):
            return None
        return [view.inputs[0] for view in views], [*views, concat]

    def _adds_leading_axis(self, view: Node) -> bool:
        """Whether a Reshape or Unsqueeze makes (1, batch, n) of a (batch, n) tensor: Reshape to
        [1, -1, n] (or [1, 0, n]), Unsqueeze at axis 0."""
        if view.op == "Unsqueeze":
            return self.reader._axes_input(view) == [0]
        shape = self.constants.get(view.inputs[1])
        return shape is not None and shape.shape == (3,) and shape[0] == 1 and shape[1] in (-1, 0) and shape[2] > 0

    def _zeros(self, name: str, reader: Node) -> list[Node] | None:
        """The nodes making `name` (read by `reader` alone), if they make zeros whose shape
        depends on the batch: a ConstantOfShape of 0 (torch's TorchScript exporter), or Expand,
        Slice, Reshape, ... of a constant zero (its dynamo exporter)."""
        parts = []
        while name not in self.constants:
            node = self._made(name, ("ConstantOfShape", "Expand", "Slice", "Reshape", "Squeeze", "Unsqueeze",
                                     "Identity"), reader)
            if node is None:
                return None
            parts.append(node)
            if node.op == "ConstantOfShape":
                value = self.reader._attribute(node, "value", None)
                return parts if value is None or not np.any(self.reader.numpy_helper.to_array(value)) else None
            name, reader = node.inputs[0], node
        return parts if parts and not np.any(self.constants[name]) else None

    def _projection(self, name: str, reader: Node):
        """(x, kernel, bias or None, heads, dim, parts): `name` is Reshape(MatMul(x, kernel) [+ bias],
        (0, 0, heads, dim)), as MultiHeadAttention.to_onnx writes a projection."""
        reshape = self._made(name, "Reshape", reader)
        shape = reshape and self.constants.get(reshape.inputs[1])
        if shape is None or shape.shape != (4,) or list(shape[:2]) != [0, 0] or min(shape) < 0:
            return None
        parts, product, bias = [reshape], reshape.inputs[0], None
        add = self._made(product, "Add", reshape)
        if add is not None:
            bias = next((i for i in add.inputs if i in self.constants), None)
            if bias is None:
                return None
            parts.append(add)
            product, bias = self._other(add, bias), self.constants[bias]
        matmul = self._made(product, "MatMul", parts[-1])
        if matmul is None or matmul.inputs[1] not in self.constants or matmul.inputs[0] in self.constants:
            return None
        kernel = self.constants[matmul.inputs[1]]
        heads, dim = (int(n) for n in shape[2:])
        if kernel.ndim != 2 or kernel.shape[1] != heads * dim or bias is not None and bias.shape != (heads * dim,):
            return None
        return matmul.inputs[0], kernel, bias, heads, dim, [*parts, matmul]

    def _transposed(self, name: str, reader: Node, perm: list):
        """The input of `name` = Transpose(input, perm), read by `reader` alone."""
        transpose = self._made(name, "Transpose", reader)
        if transpose is None or list(self.reader._attribute(transpose, "perm", [])) != perm:
            return None
        return transpose

    def _attention(self, softmax: Node):
        """clnet's MultiHeadAttention, node for node as its to_onnx writes it: the query, key and
        value projections (MatMul [+ Add], Reshape to (batch, T, heads, dim)), Transposes to
        (batch, heads, ...), Mul(scale) of the query, MatMul of query and key, [Add(causal
        mask)], [Where(Greater(Reshape(mask), 0.5), scores, -1e9)], Softmax, MatMul with the
        value, Transpose and Reshape back to (batch, Tq, heads * value_dim), the output MatMul
        [+ Add]. Anything else is not this pattern: its nodes stay, and the first the importer
        cannot read is named."""
        if softmax.op != "Softmax" or self.reader._attribute(softmax, "axis", -1) not in (-1, 3):
            return None
        parts, scores, reader, mask, causal = [softmax], softmax.inputs[0], softmax, None, None
        where = self._made(scores, "Where", softmax)
        if where is not None:
            greater = self._made(where.inputs[0], "Greater", where)
            reshape = greater and self._made(greater.inputs[0], "Reshape", greater)
            shape = reshape and self.constants.get(reshape.inputs[1])
            if shape is None or not self._is(greater.inputs[1], 0.5) or not self._is(where.inputs[2], -1e9) \
                    or shape.shape != (4,) or list(shape[:2]) != [0, 1]:
                return None
            parts += [where, greater, reshape]
            mask, scores, reader = reshape.inputs[0], where.inputs[1], where
        add = self._made(scores, "Add", reader)
        if add is not None:
            causal = self.constants.get(add.inputs[1])
            if causal is None or causal.ndim != 2 or not np.array_equal(
                    causal, (np.triu(np.ones(causal.shape), 1) * -1e9).astype(causal.dtype)):
                return None
            parts.append(add)
            scores, reader = add.inputs[0], add
        product = self._made(scores, "MatMul", reader)
        scaled = product and self._made(product.inputs[0], "Mul", product)
        query_t = scaled and self._transposed(scaled.inputs[0], scaled, [0, 2, 1, 3])
        key_t = query_t and self._transposed(product.inputs[1], product, [0, 2, 3, 1])
        context = self._only(softmax.outputs[0], "MatMul")
        value_t = context and context.inputs[0] == softmax.outputs[0] and self._transposed(
            context.inputs[1], context, [0, 2, 1, 3])
        back = value_t and self._only(context.outputs[0], "Transpose")
        merged = back and list(self.reader._attribute(back, "perm", [])) == [0, 2, 1, 3] and self._only(
            back.outputs[0], "Reshape")
        if not merged or len(scaled.inputs) != 2 or scaled.inputs[1] not in self.constants:
            return None
        projections = [self._projection(t.inputs[0], t) for t in (query_t, key_t, value_t)]
        if None in projections:
            return None
        (query, *q), (key, *k), (value, *v) = projections
        heads, key_dim, value_dim = q[2], q[3], v[3]
        shape = self.constants.get(merged.inputs[1])
        output = self._only(merged.outputs[0], "MatMul")
        if shape is None or list(shape) != [0, 0, heads * value_dim] or output is None or \
                output.inputs[0] != merged.outputs[0] or output.inputs[1] not in self.constants or \
                (k[2], k[3], v[2]) != (heads, key_dim, heads) or \
                not self._is(scaled.inputs[1], 1.0 / np.sqrt(key_dim)):
            return None
        kernel, last = self.constants[output.inputs[1]], output
        bias = self._only(output.outputs[0], "Add")
        if bias is not None and bias.inputs[0] == output.outputs[0] and bias.inputs[1] in self.constants:
            bias, last = self.constants[bias.inputs[1]], bias
        else:
            bias = None
        biases = [q[1], k[1], v[1], bias]
        if kernel.ndim != 2 or kernel.shape[0] != heads * value_dim or len({b is None for b in biases}) != 1:
            return None
        parts += [product, scaled, query_t, key_t, context, value_t, back, merged, output, *q[4], *k[4], *v[4]]
        if last is not output:
            parts.append(last)
        weights = [array for (w, b) in ((q[0], q[1]), (k[0], k[1]), (v[0], v[1]), (kernel, bias))
                   for array in ((w,) if b is None else (w, b))]
        params = {"heads": heads, "key_dim": key_dim, "value_dim": value_dim, "causal": causal is not None,
                  "weights": weights}
        inputs = [query, value, key] + ([mask] if mask is not None else [])
        return Node("Attention_pattern", inputs, last.outputs, last.proto, params), parts
