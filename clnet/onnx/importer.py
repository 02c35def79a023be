"""clnet.onnx.load: an ONNX graph made of ops clnet has layers for, as a trainable Sequential.

The graph must be a chain from its one input to its one output (each tensor read by one node;
Swish's x * sigmoid(b x) is the one fork). The patterns recognised, which cover clnet's own
export, torch.onnx.export (TorchScript and dynamo exporters) and Keras's MLPs:

    Flatten(axis=1), or Reshape to (batch, features), the shape
    constant or computed by Shape, Gather, Unsqueeze, Concat ...  -> Flatten
    Gemm(x, W, C) with transA=0 (transB, alpha, beta any),
    MatMul(x, W), optionally followed by Add(bias)              -> Dense
    Relu, Tanh, Sigmoid, LeakyRelu(alpha), Softmax(last axis)   -> that activation
    PRelu with a scalar slope                                   -> LReLU (a float64 one exports so)
    Mul, Add, Sub, Div by a scalar constant                     -> Linear(a, b), or folded into
                                                                   the Sigmoid(a, b) before it
    x * Sigmoid(b x), x / (1 + Exp(Neg(b x))), b x = x or Mul   -> Swish(b)
    Mul(Mul(x, 0.5), Add(1, Erf(Mul(x, 1/sqrt(2)))))           -> GELU
    Softplus                                                    -> Softplus
    Identity, Cast to the graph's float type, Constant          -> nothing

An activation straight after a Dense becomes that Dense's activation (as clnet exports it);
others become Activation layers (Softmax layers for softmax). To read the op of a new layer,
add it to SUPPORTED_OPS and a method `_<op in lower case>(node, x) -> (steps, next tensor)` to
_Chain, and turn its step into the layer in `_Chain.model`.
"""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from .optional import require


def load(source, floatx: str | None = None, seed: int | None = None):
    """A built, trainable Sequential computing what the ONNX model `source` (a path or an
    onnx.ModelProto) computes. `floatx` defaults to the graph input's type (float32 or float64);
    compile it to fine-tune it."""
    onnx = require("clnet.onnx.load")
    if isinstance(source, onnx.ModelProto):
        proto, where = source, "the ONNX model"
    else:
        path = Path(os.fspath(source))
        where = repr(str(path))
        if not path.is_file():
            raise FileNotFoundError(f"no ONNX file at {where}")
        try:
            proto = onnx.load(path)
        except Exception as error:  # protobuf's DecodeError and friends
            raise ValueError(f"{where} is not an ONNX model: {error}") from None
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as error:
        raise ValueError(f"{where} is not a valid ONNX model: {error}") from None
    return _Chain(onnx, proto, where).model(floatx, seed)


SUPPORTED_OPS = ("Add", "Cast", "Concat", "Constant", "Div", "Erf", "Exp", "Flatten", "Gather", "Gemm", "Identity",
                 "LeakyRelu", "MatMul", "Mul", "Neg", "PRelu", "Relu", "Reshape", "Shape", "Sigmoid", "Slice", "Softmax", "Softplus",
                 "Squeeze", "Sub", "Tanh", "Unsqueeze")
# Ops read only where they compute a shape from a tensor's Shape (as Keras and torch write a
# Flatten for a dynamic batch): they are evaluated on integers, not turned into layers.
SHAPE_OPS = ("Cast", "Concat", "Gather", "Shape", "Slice", "Squeeze", "Unsqueeze")
BATCH = 2**31 - 1  # the batch size a Shape reports while shapes are evaluated: a value no axis has
DTYPES = {1: "float32", 11: "float64"}  # TensorProto.FLOAT, TensorProto.DOUBLE


def _number(value) -> float:
    """A float or float32 stored value as the Python float it was written from: the shortest
    decimal that rounds to it (np.float32(0.1) -> 0.1), so parameters round-trip exactly."""
    return float(str(value))


class _Chain:
    """Walks the graph from its input to its output, node by node, turning patterns into steps:
    ("flatten",), ("dense", kernel, bias or None), ("act", name, params), ("affine", scale, shift)."""

    def __init__(self, onnx, proto, where: str):
        from onnx import helper, numpy_helper
        self.helper, self.numpy_helper, self.where = helper, numpy_helper, where
        graph = proto.graph
        self.graph = graph
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.inputs = [i for i in graph.input if i.name not in self.constants]
        if len(self.inputs) != 1 or len(graph.output) != 1:
            raise ValueError(f"{where} has {len(self.inputs)} inputs and {len(graph.output)} outputs; "
                             "clnet.onnx.load reads models with one of each")
        self.nodes = []
        for node in graph.node:
            if node.domain not in ("", "ai.onnx") or node.op_type not in SUPPORTED_OPS:
                raise _unsupported(node)
            if node.op_type == "Constant":
                self.constants[node.output[0]] = self._constant_node(node)
            else:
                self.nodes.append(node)
        self.shape_values: set[str] = set()  # outputs of shape computations
        chain = []
        for node in self.nodes:  # in topological order, as ONNX requires
            derived = [name for name in node.input if name in self.shape_values]
            if node.op_type == "Shape" or (node.op_type in SHAPE_OPS and derived and all(
                    not name or name in self.shape_values or name in self.constants for name in node.input)):
                self.shape_values.update(node.output)
            else:
                chain.append(node)
        self.producer = {name: node for node in self.nodes for name in node.output}
        self.nodes = chain
        self.consumers = defaultdict(list)
        for node in self.nodes:
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
        self.used: set[int] = set()
        self.shapes: dict[str, tuple] = {}  # a chain tensor's shape, with BATCH for the batch

    # -- the graph's interface -------------------------------------------------------------
    def _io(self):
        inputs = self.inputs
        tensor = inputs[0].type.tensor_type
        if tensor.elem_type not in DTYPES:
            raise ValueError(f"{self.where}: input {inputs[0].name!r} has element type "
                             f"{self.helper.tensor_dtype_to_np_dtype(tensor.elem_type)}; clnet takes float32 "
                             "or float64")
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if len(dims) < 2 or any(d is None or d < 1 for d in dims[1:]):
            shown = ["?" if d is None else d for d in dims]
            raise ValueError(f"{self.where}: input {inputs[0].name!r} has shape {shown}; clnet needs "
                             "(batch, ...) with every axis but the batch fixed")
        self.elem_type = tensor.elem_type
        return inputs[0].name, tuple(dims[1:]), DTYPES[tensor.elem_type], self.graph.output[0]

    def model(self, floatx, seed):
        from ..layers import Activation, Dense, Flatten, Input, Softmax
        from ..model import Sequential
        x, self.shape, dtype, output = self._io()
        sample_shape = self.shape
        steps = []
        while x != output.name:
            self.shapes[x] = (BATCH, *self.shape)
            users = self.consumers.get(x, [])
            if not users:
                raise ValueError(f"{self.where}: tensor {x!r} is read by no node, so the output "
                                 f"{output.name!r} cannot be reached along a chain from the input")
            if len(users) == 1:
                node = users[0]
                self.used.add(id(node))
                read = getattr(self, "_" + node.op_type.lower(), None)
                if read is None:
                    raise _misused(node, f"clnet reads {node.op_type} only " + (
                        "in shape computations (Shape -> ... -> a Reshape's shape)" if node.op_type in SHAPE_OPS
                        else "as part of Swish, x / (1 + Exp(Neg(b x)))"))
                new, x = read(node, x)
            else:
                new, x = self._gelu(users, x) or self._swish(users, x)
            steps.extend(new)
        unused = [n for n in self.nodes if id(n) not in self.used]
        if unused:
            raise ValueError(f"{self.where}: nodes {[_label(n) for n in unused]} are not on the chain from the "
                             "input to the output; clnet.onnx.load reads chains of layers")

        layers, weights = [Input(sample_shape)], {}
        for kind, *args in _fold(steps):
            if kind == "flatten":
                layers.append(Flatten())
            elif kind == "dense":
                kernel, bias, activation = args
                layers.append(Dense(kernel.shape[1], activation, use_bias=bias is not None))
                weights[len(layers) - 1] = [kernel] + ([] if bias is None else [bias])
            elif args[0] == "softmax":
                layers.append(Softmax())
            else:
                layers.append(Activation(args[0], **args[1]))
        model = Sequential(layers, name=self.graph.name or None, floatx=floatx or dtype, seed=seed)
        model.build(sample_shape)
        for index, arrays in weights.items():
            model.layers[index].set_weights(arrays)
        declared = [d.dim_value if d.HasField("dim_value") else None
                    for d in output.type.tensor_type.shape.dim][1:]
        if declared and None not in declared and tuple(declared) != tuple(model.output_shape):
            raise ValueError(f"{self.where}: output {output.name!r} is declared with samples of shape "
                             f"{tuple(declared)}, but the layers read from the graph give {model.output_shape}")
        return model

    # -- helpers ------------------------------------------------------------------------------
    def _constant_node(self, node):
        attribute = node.attribute[0]
        value = self.helper.get_attribute_value(attribute)
        return self.numpy_helper.to_array(value) if attribute.name == "value" else np.asarray(value)

    def _attribute(self, node, name, default):
        for attribute in node.attribute:
            if attribute.name == name:
                return self.helper.get_attribute_value(attribute)
        return default

    def _constant(self, node, name: str, what: str) -> np.ndarray:
        if name not in self.constants:
            raise _misused(node, f"its {what} {name!r} is computed in the graph; clnet needs a constant")
        return self.constants[name]

    def _scalar(self, node, name: str, what: str) -> float:
        value = self._constant(node, name, what)
        if value.size != 1:
            raise _misused(node, f"its {what} has shape {value.shape}; clnet takes a scalar here (an "
                                 "activation's parameter)")
        return _number(value.reshape(()))

    def _only_user(self, name: str):
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 else None

    # -- one method per op: (steps, the tensor the chain goes on from) ---------------------
    def _identity(self, node, x):
        return [], node.output[0]

    def _flatten(self, node, x):
        axis = self._attribute(node, "axis", 1)
        if axis % (len(self.shape) + 1) != 1:
            raise _misused(node, f"axis={axis}; clnet's Flatten keeps the batch axis and flattens the others "
                                 "(axis=1)")
        self.shape = (int(np.prod(self.shape)),)
        return [("flatten",)], node.output[0]

    def _reshape(self, node, x):
        shape = node.input[1]
        target = self._evaluate(node, shape) if shape in self.shape_values else self._constant(node, shape, "shape")
        target = [int(s) for s in target]
        features = int(np.prod(self.shape))
        keeps_batch = target[:1] in ([-1], [BATCH]) or (target[:1] == [0] and not self._attribute(node, "allowzero", 0))
        if len(target) != 2 or not keeps_batch or target[1] not in (features, -1) or target == [-1, -1]:
            shown = ["batch" if t == BATCH else t for t in target]
            raise _misused(node, f"it reshapes samples of shape {self.shape} to {shown}; clnet reads a Reshape "
                                 "only as a Flatten, to (batch, features)")
        self.shape = (features,)
        return [("flatten",)], node.output[0]

    def _evaluate(self, reader, name: str) -> np.ndarray:
        """The integer value of a shape computation's output `name` (see SHAPE_OPS)."""
        if name in self.constants:
            return np.asarray(self.constants[name])
        node = self.producer[name]
        op = node.op_type
        if op == "Shape":
            if node.input[0] not in self.shapes:
                raise _misused(reader, f"its shape comes from the Shape of {node.input[0]!r}, which is not a "
                                       "tensor between clnet layers")
            return np.array(self.shapes[node.input[0]][self._attribute(node, "start", 0):
                                                       self._attribute(node, "end", None)], np.int64)
        values = [self._evaluate(reader, i) if i else None for i in node.input]
        axes = lambda: values[1] if len(values) > 1 and values[1] is not None else self._attribute(node, "axes", None)
        if op == "Gather":
            return np.take(values[0], values[1], axis=self._attribute(node, "axis", 0))
        if op == "Unsqueeze":
            return np.expand_dims(values[0], tuple(int(a) for a in axes()))
        if op == "Squeeze":
            given = axes()
            return np.squeeze(values[0], None if given is None else tuple(int(a) for a in given))
        if op == "Concat":
            return np.concatenate(values, axis=self._attribute(node, "axis", 0))
        if op == "Cast":
            return values[0].astype(self.helper.tensor_dtype_to_np_dtype(self._attribute(node, "to", 7)))
        starts, ends, axes_, steps = (list(values[1:]) + [None] * 4)[:4]  # Slice
        index = [slice(None)] * values[0].ndim
        for i, axis in enumerate(range(values[0].ndim) if axes_ is None else axes_):
            index[int(axis)] = slice(int(starts[i]), int(ends[i]), 1 if steps is None else int(steps[i]))
        return values[0][tuple(index)]

    def _is_no_op(self, node) -> bool:
        return node.op_type == "Identity" or (node.op_type == "Cast" and
                                              self._attribute(node, "to", None) == self.elem_type)

    def _cast(self, node, x):
        if not self._is_no_op(node):
            to = self.helper.tensor_dtype_to_np_dtype(self._attribute(node, "to", 0))
            raise _misused(node, f"it casts to {to}; clnet computes in the graph input's float type throughout")
        return [], node.output[0]

    def _gemm(self, node, x):
        if node.input[0] != x or self._attribute(node, "transA", 0):
            raise _misused(node, "clnet reads Gemm(x, W, C) with x the running tensor, not transposed")
        kernel = self._constant(node, node.input[1], "weight")
        if self._attribute(node, "transB", 0):
            kernel = kernel.T
        kernel = kernel * self._attribute(node, "alpha", 1.0)
        bias = None
        if len(node.input) > 2 and node.input[2]:
            bias = self._bias(node, self._constant(node, node.input[2], "bias"), kernel.shape[1])
            bias = bias * self._attribute(node, "beta", 1.0)
        return self._dense(node, kernel, bias), node.output[0]

    def _matmul(self, node, x):
        if node.input[0] != x:
            raise _misused(node, "clnet reads MatMul(x, W) with x the running tensor first")
        kernel = self._constant(node, node.input[1], "weight")
        out, bias = node.output[0], None
        # A Linear layer exported as MatMul + Add, maybe with no-op Casts between (Keras).
        between, product = [], out
        while (user := self._only_user(product)) is not None and self._is_no_op(user):
            between.append(user)
            product = user.output[0]
        add = self._only_user(product)
        if add is not None and add.op_type == "Add":
            other = add.input[1] if add.input[0] == product else add.input[0]
            if other in self.constants and kernel.ndim == 2:
                bias = self._bias(add, self.constants[other], kernel.shape[1])
                self.used.update(id(n) for n in (*between, add))
                out = add.output[0]
        return self._dense(node, kernel, bias), out

    def _bias(self, node, value, units: int) -> np.ndarray:
        try:
            return np.broadcast_to(value, (1, units)).reshape(units)
        except ValueError:
            raise _misused(node, f"its bias has shape {value.shape}, which does not broadcast to ({units},)") from None

    def _dense(self, node, kernel, bias):
        if kernel.ndim != 2 or len(self.shape) != 1 or kernel.shape[0] != self.shape[0]:
            raise _misused(node, f"it multiplies samples of shape {self.shape} by a weight of shape {kernel.shape}; "
                                 "clnet's Dense takes (batch, features) times (features, units)")
        self.shape = (kernel.shape[1],)
        return [("dense", kernel, bias)]

    def _relu(self, node, x):
        return [("act", "relu", {})], node.output[0]

    def _tanh(self, node, x):
        return [("act", "tanh", {})], node.output[0]

    def _sigmoid(self, node, x):
        return [("act", "sigmoid", {})], node.output[0]

    def _leakyrelu(self, node, x):
        return [("act", "lrelu", {"a": _number(np.float32(self._attribute(node, "alpha", 0.01)))})], node.output[0]

    def _prelu(self, node, x):
        return [("act", "lrelu", {"a": self._scalar(node, node.input[1], "slope")})], node.output[0]

    def _softplus(self, node, x):
        return [("act", "softplus", {})], node.output[0]

    def _softmax(self, node, x):
        rank = len(self.shape) + 1
        axis = self._attribute(node, "axis", -1 if self.opset >= 13 else 1)
        if axis % rank != rank - 1:
            raise _misused(node, f"axis={axis} on a tensor of rank {rank}; clnet's softmax normalises along the "
                                 "last axis")
        return [("act", "softmax", {})], node.output[0]

    def _affine(self, node, x):
        """Mul, Add, Sub or Div of the running tensor and a scalar: ("affine", scale, shift)."""
        a, b = node.input
        if (a == x) == (b == x):
            raise _misused(node, f"clnet reads {node.op_type} of the running tensor and a scalar constant")
        x_first = a == x
        c = self._scalar(node, b if x_first else a, "operand")
        op = node.op_type
        if op == "Mul":
            scale, shift = c, 0.0
        elif op == "Add":
            scale, shift = 1.0, c
        elif op == "Sub":
            scale, shift = (1.0, -c) if x_first else (-1.0, c)
        elif x_first and c != 0:
            scale, shift = 1.0 / c, 0.0
        else:
            raise _misused(node, "clnet reads a Div of the running tensor by a nonzero constant")
        return [("affine", scale, shift)], node.output[0]

    _mul = _add = _sub = _div = _affine

    def _gelu(self, users, x):
        """GELU as clnet writes it, reading x twice: Mul(Mul(x, 0.5), Add(1, Erf(Mul(x, 1/sqrt(2)))));
        None if `users` are not that."""
        if len(users) != 2 or any(u.op_type != "Mul" for u in users):
            return None
        is_constant = lambda node, value: any(i in self.constants and self.constants[i].size == 1
                                              and np.isclose(float(self.constants[i].reshape(())), value, rtol=1e-7)
                                              for i in node.input)
        for scaled, half in (users, users[::-1]):
            erf = self._only_user(scaled.output[0])
            add = erf and erf.op_type == "Erf" and self._only_user(erf.output[0])
            final = add and add.op_type == "Add" and self._only_user(add.output[0])
            if (final and final.op_type == "Mul" and set(final.input) == {half.output[0], add.output[0]}
                    and self._only_user(half.output[0]) is final and is_constant(scaled, 0.5 ** 0.5)
                    and is_constant(half, 0.5) and is_constant(add, 1.0)):
                self.used.update(id(n) for n in (scaled, half, erf, add, final))
                return [("act", "gelu", {})], final.output[0]
        return None

    def _swish(self, users, x):
        """Swish(b), which reads x twice: x * Sigmoid(b x), or x / (1 + Exp(Neg(b x))) as clnet
        writes a float64 one; b x is x itself for b = 1, else Mul(x, b)."""
        if len(users) == 2:
            for final in users:
                gate = self._gate(final, x)  # the nodes from b x to the final Mul or Div, last first
                if gate is None:
                    continue
                other = users[0] if users[1] is final else users[1]
                inner = gate[-1].input[0]
                if inner == x and other is gate[-1]:
                    b = 1.0
                elif inner == other.output[0] and other.op_type == "Mul" and self._only_user(inner) is gate[-1]:
                    b = self._affine(other, x)[0][0][1]
                else:
                    continue
                self.used.update(id(n) for n in (final, *gate, other))
                return [("act", "swish", {"b": b})], final.output[0]
        raise ValueError(f"{self.where}: tensor {x!r} is read by {len(users)} nodes {[_label(n) for n in users]}; "
                         "clnet.onnx.load reads chains of layers, where each tensor feeds one node "
                         "(x * sigmoid(b x), Swish, is the one exception)")

    def _gate(self, final, x) -> list | None:
        """For Mul(x, Sigmoid(.)) the [Sigmoid]; for Div(x, Add(1, Exp(Neg(.)))) the [Add, Exp, Neg]."""
        if final.op_type == "Mul" and x in final.input:
            chain = [("Sigmoid", final.input[1] if final.input[0] == x else final.input[0])]
        elif final.op_type == "Div" and final.input[0] == x:
            chain = [("Add", final.input[1])]
        else:
            return None
        nodes, reader = [], final
        while chain:
            op, name = chain.pop()
            node = self.producer.get(name)
            if node is None or node.op_type != op or self._only_user(name) is not reader:
                return None
            nodes.append(node)
            reader = node
            if op == "Add":
                one = [i for i in node.input if i in self.constants]
                rest = [i for i in node.input if i not in self.constants]
                if len(one) != 1 or len(rest) != 1 or self.constants[one[0]].size != 1 or self.constants[one[0]] != 1:
                    return None
                chain.append(("Exp", rest[0]))
            elif op == "Exp":
                chain.append(("Neg", node.input[0]))
        return nodes

def _fold(steps):
    """Steps as layers: scalar affines merge into the Linear or Sigmoid(a, b) before them, and
    an activation right after a Dense becomes its activation.
    Yields ("flatten",), ("dense", kernel, bias, activation), ("act", name, params)."""
    merged = []
    for step in steps:
        if step[0] != "affine":
            merged.append(step)
            continue
        scale, shift = step[1], step[2]
        previous = merged[-1] if merged else None
        if previous and previous[0] == "act" and previous[1] in ("linear", "sigmoid"):
            a, b = previous[2].get("a", 1.0), previous[2].get("b", 0.0)
            # linear: scale (a x + b) + shift;  sigmoid: scale (a s - b) + shift = (scale a) s - (scale b - shift)
            b = scale * b + shift if previous[1] == "linear" else scale * b - shift
            merged[-1] = ("act", previous[1], {"a": scale * a, "b": b})
        else:
            merged.append(("act", "linear", {"a": scale, "b": shift}))
    folded = []
    for step in merged:
        if step[0] == "act" and step[1] == "linear" and step[2] == {"a": 1.0, "b": 0.0}:
            continue  # the identity
        if step[0] == "act" and folded and folded[-1][0] == "dense" and folded[-1][3] is None:
            folded[-1] = (*folded[-1][:3], {"name": step[1], **step[2]})
        elif step[0] == "dense":
            folded.append((*step, None))
        else:
            folded.append(step)
    return folded


def _label(node) -> str:
    return f"{node.name or '(unnamed)'} ({node.op_type})"


def _unsupported(node) -> ValueError:
    domain = f" of domain {node.domain!r}" if node.domain not in ("", "ai.onnx") else ""
    return ValueError(f"ONNX node {node.name or '(unnamed)'!r} uses the op {node.op_type!r}{domain}, which "
                      f"clnet.onnx.load does not support; supported ops: {', '.join(SUPPORTED_OPS)}")


def _misused(node, why: str) -> ValueError:
    return ValueError(f"ONNX node {_label(node)}: {why}")
