"""clnet.onnx.load: an ONNX graph made of ops clnet has layers for, as a trainable model.

The graph is read node by node in its (topological) order. Each tensor the network computes
becomes a clnet tensor plus an index (see _Value), so that Transposes, Reshapes and Flattens
cost no layer until a layer needs its input in another order: the NCHW tensors of a PyTorch
CNN stay channels_last in clnet, and the Flatten before its first Linear becomes a reordering
of that Dense's kernel rows. Forks and merges (Add, Sum, Mul, Concat) make a functional
`Model(inputs, output)`; a chain of one-input layers comes back as a `Sequential`.

What is read, which covers clnet's own export (every layer), torch.onnx.export (TorchScript and
dynamo exporters) and Keras's:

    Gemm(x, W, C) (transA=0), MatMul(x, W) [+ Add(bias)] of a
    matrix W                                                       -> Dense (MatMul also on
                                                                      (batch, ..., features))
    Gather(table, ids) of a float table, the ids an integer graph
    input (torch) or float ids Cast to integers (clnet)            -> Embedding
    Expand(table, Shape(x)) (clnet's)                              -> PositionEmbedding
    RNN, LSTM, GRU after Transpose(1, 0, 2) or with layout=1, zero
    initial states (ConstantOfShape, or Expand/Slice of a zero) or
    Reshape(state, [1, -1, units]) / Unsqueeze(state, 0) of
    batch-first ones, Y, Y_h or Y_c read through
    Squeeze/Transpose/Reshape/Gather                               -> SimpleRNN, LSTM, GRU (gates
                                                                      reordered; a reversing Slice
                                                                      or direction="reverse":
                                                                      go_backwards; Y read:
                                                                      return_sequences; Y_c read:
                                                                      return_state; given states:
                                                                      initial_state)
    the same with direction="bidirectional" (given states: a
    Concat of both directions' along axis 0), Y or Y_h read with
    both directions side by side, ReduceSum/ReduceMean/ReduceProd
    over the direction axis, or one direction taken by Gather      -> Bidirectional of those
                                                                      (merge_mode "concat", "sum",
                                                                      "ave", "mul", None; a
                                                                      direction's Y_h or Y_c read
                                                                      beside other reads:
                                                                      return_state)
    clnet's attention subgraph: MatMul [+ Add] projections,
    Reshape, Transpose, Mul(1/sqrt(key_dim)), MatMul, [Add(causal
    mask)], [Where(Greater(mask, 0.5))], Softmax, MatMul,
    Transpose, Reshape, MatMul [+ Add]                             -> MultiHeadAttention
    Conv (1-D, 2-D; strides, dilations, pads, auto_pad; group=1)   -> Conv1D/Conv2D, with a
                                                                      ZeroPadding2D before it for
                                                                      pads other than 'valid' and
                                                                      Keras's 'same' (zero pads
                                                                      read as 'valid'); a 1-D one
                                                                      padded only before, by
                                                                      (kernel - 1) * dilation:
                                                                      'causal'
    Add of a per-unit or per-filter constant after a Dense or
    convolution without bias (Keras's Conv)                        -> that layer's bias
    Sub(mean), Mul(scale), Add(shift) per channel (Keras's
    BatchNormalization, folded by the exporter)                    -> BatchNormalization (moving
                                                                      variance 1)
    MaxPool, AveragePool                                           -> Max/AveragePooling1D/2D
    GlobalAveragePool, GlobalMaxPool, ReduceMean/ReduceMax over
    the spatial axes                                               -> Global...Pooling1D/2D
    BatchNormalization (inference form)                            -> BatchNormalization
    LayerNormalization over one axis, or its decomposition:
    ReduceMean, Sub, Pow(2) or Mul, ReduceMean, Add(eps), Sqrt,
    Div [, Mul(gamma)] [, Add(beta)] (PyTorch below opset 17)       -> LayerNormalization
    Pad (constant zeros on height and width)                       -> ZeroPadding2D
    Slice of step 1 of the spatial axes of (batch, steps, channels)
    or (batch, height, width, channels), or of a channels-first
    view of those, the channels whole, its ends counted from the
    end as x[:, a:-b] and x[:, a:] are written (negative, or past
    the extent)                                                    -> Cropping1D/2D
    Resize, mode="nearest", by whole factors of those spatial axes,
    a placement of the source cell that repeats it                 -> UpSampling1D/2D
    Gather(x, windows, axis=1), Reshape, Transpose(1, 0, 2),
    MatMul(kernel), Transpose(1, 0, 2) [, Add(bias)] (clnet's)    -> LocallyConnected1D
    Add or Sum, Mul, Concat of computed tensors of one shape       -> Add, Multiply, Concatenate
    Relu, Tanh, Sigmoid, LeakyRelu, PRelu of a 0-d slope (clnet's
    float64 LReLU), Softplus, Softmax, Gelu (exact), Elu           -> that activation
    PRelu of a slope with axes (torch's nn.PReLU, Keras's PReLU)   -> PReLU (its axes of 1
                                                                      shared_axes)
    Clip(x, 0, max)                                                -> ReLU(max_value=max)
    Where(Greater(x, t), x or Min(x, max), Mul(Sub(x, t), slope))  -> ReLU(max, slope, t) (clnet's)
    Tile(Unsqueeze(x, axes=[1]), [1, n, 1]) of (batch, features)   -> RepeatVector(n)
    Mul, Add, Sub by a scalar constant, Div by one after a Linear
    or Sigmoid(a, b)                                               -> Linear(a, b), or folded into
                                                                      the Linear or Sigmoid(a, b)
                                                                      before it
    x * Sigmoid(b x), x / (1 + Exp(Neg(b x)))                      -> Swish(b)
    0.5 x (1 + Erf(x / sqrt(2))), any association                  -> GELU
    and, where no layer stands for them, as clnet.ops (clnet/ops: layers of the graph, which
    clnet's export writes as these nodes):
    Add, Sub, Mul, Div, Pow, Min, Max (two operands) of computed
    tensors (broadcast as numpy) or constants; Pow(x, 2)           -> ops.add, ... (ops.square)
    Exp, Log, Sqrt, Abs, Neg                                       -> ops.exp, ops.log, ...
    Greater, Less, GreaterOrEqual, LessOrEqual, Equal, Not of one
    (the opposite), Not, [Cast to the float type]                  -> ops.greater, ... (0 and 1)
    Where (a bool, or floats Cast to bool: nonzero is true)         -> ops.where
    Clip(x, min, max) (other bounds than ReLU's)                   -> ops.clip (ops.maximum or
                                                                      ops.minimum for one bound)
    x (1 + Tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2, Gelu
    (approximate="tanh")                                           -> ops.gelu (Keras's default)
    Expand(a number, Shape(x))                                     -> ops.ones_like, zeros_like
    ReduceSum, ReduceMean, ReduceMax, ReduceMin over sample axes   -> ops.sum, ... (a mean or max
                                                                      over the spatial axes: a
                                                                      global pooling layer)
    ArgMax, ArgMin along a sample axis (then a Cast)               -> ops.argmax, ops.argmin
    Slice of step 1 (not a cropping, above) [+ Squeeze of axes it
    cut to 1]                                                      -> ops.slice (one Slice layer)
    Gather of constant indices along a sample axis                 -> ops.take
    MatMul of two computed tensors, of a constant by a tensor, or
    of a tensor by a constant of another rank than 2               -> ops.matmul
    Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Slice of
    another step                                                   -> nothing, or a Flatten or
                                                                      Reshape where the order
                                                                      allows, or a Permute (and a
                                                                      Reshape) where a layer (or
                                                                      the output) needs a
                                                                      transpose (or a reshape of
                                                                      one) of what clnet holds
    Identity, Dropout, Cast to the graph's float type or to bool   -> nothing
    Shape, Gather, Slice, Concat, ... on constants and shapes      -> evaluated while loading

An activation straight after a Dense or convolution becomes that layer's activation (as clnet
exports it); others become Keras's layer of it where clnet has one (Softmax, ReLU, LeakyReLU
for a non-negative slope, ELU), else an Activation layer. A graph input that
feeds a Conv or a pool is channels-first (batch, channels, *spatial), as PyTorch writes it:
the loaded model takes it so, and a Permute right after the Input holds it channels_last, as
clnet's layers compute.

To read the op of a new layer, add it to SUPPORTED_OPS and a method `_op_<op in lower case>(node)`
to _Reader that makes the layer with `_layer` and stores the node's output with `_set`.
"""
from __future__ import annotations

import itertools
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from .optional import require
from .patterns import INTEGER_TYPES, Node, Patterns


def load(source, floatx: str | None = None, seed: int | None = None):
    """A built, trainable model computing what the ONNX model `source` (a path or an
    onnx.ModelProto) computes: a Sequential for a chain of layers, else a functional Model.
    `floatx` defaults to the graph input's type (float32 or float64); compile it to fine-tune it.
    An input that feeds a convolution or pool channels-first (PyTorch's (batch, channels, height,
    width)) is taken as the file declares it, then permuted to channels_last, as clnet's layers
    compute."""
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
    return _Reader(proto, where).model(floatx, seed)


SUPPORTED_OPS = ("Abs", "Add", "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant",
                 "ConstantOfShape", "Conv", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Expand", "Flatten", "GRU",
                 "Gather", "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual",
                 "Identity", "LSTM", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "MatMul", "Max",
                 "MaxPool", "Min", "Mul", "Neg", "Not", "PRelu", "Pad", "Pow", "RNN", "ReduceMax", "ReduceMean",
                 "ReduceMin", "ReduceProd", "ReduceSum", "Relu", "Reshape", "Resize", "Shape", "Sigmoid", "Slice",
                 "Softmax", "Softplus", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh", "Tile", "Transpose", "Unsqueeze",
                 "Where")
# Ops evaluated with numpy when all their inputs are known (constants, or shapes of tensors:
# how Keras and torch write a Flatten for a dynamic batch).
CONSTANT_OPS = ("Add", "Cast", "Concat", "Div", "Gather", "Identity", "Mul", "Reshape", "Shape", "Slice", "Squeeze",
                "Sub", "Transpose", "Unsqueeze")
# Ops read only as part of a pattern, and which.
PATTERN_PARTS = {"Erf": "as part of GELU, 0.5 x (1 + Erf(x / sqrt(2)))",
                 "ConstantOfShape": "as the zero initial state of an RNN, LSTM or GRU",
                 "ReduceProd": "over the directions of a bidirectional RNN, LSTM or GRU's output (Bidirectional's "
                               "merge_mode='mul')",
                 "Expand": "as clnet's PositionEmbedding, Expand(table, Shape(x)) of a (positions, features) table, "
                           "or as ones_like or zeros_like, Expand(a number, Shape(x))",
                 "Tile": "as RepeatVector, Tile(Unsqueeze(x, axes=[1]), [1, n, 1]) of (batch, features)"}
# Ops that read (batch, channels, *spatial): a graph input feeding one is channels-first.
CHANNELS_FIRST_OPS = ("AveragePool", "Conv", "GlobalAveragePool", "GlobalMaxPool", "MaxPool")
# Ops that keep each element where it is (Pad and Resize: each axis where it is), through which an
# input's layout is looked for.
ELEMENTWISE_OPS = ("Abs", "BatchNormalization", "Cast", "Clip", "Dropout", "Elu", "Exp", "Identity", "LeakyRelu", "Log",
                   "Neg", "Pad", "PRelu", "Relu", "Resize", "Sigmoid", "Softplus", "Sqrt", "Tanh")
# The (coordinate_transformation_mode, nearest_mode) of a nearest Resize that takes output cell x
# from input cell x // factor for every whole factor, as UpSampling repeats: the source coordinate
# is x / factor (asymmetric) or (x + 0.5) / factor (tf_half_pixel_for_nn), in [k, k + 1) for the
# cells of input k, rounded down; or (x + 0.5) / factor - 0.5 (the half-pixel modes), in
# (k - 0.5, k + 0.5), rounded to the nearest.
NEAREST_REPEATS = {("asymmetric", "floor"), ("tf_half_pixel_for_nn", "floor"),
                   *((mode, rounding) for mode in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel")
                     for rounding in ("round_prefer_floor", "round_prefer_ceil"))}
BOOL = 9  # TensorProto.BOOL
# The clnet.ops op of each ONNX elementwise op read as one (see _Reader._binary, _extremum,
# _unary and _compare); NotEqual_pattern is Not(Equal(a, b)) (see Patterns._negation).
ELEMENTWISE = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Min": "minimum",
               "Max": "maximum", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Abs": "abs", "Neg": "negative",
               "Greater": "greater", "GreaterOrEqual": "greater_equal", "Less": "less", "LessOrEqual": "less_equal",
               "Equal": "equal", "NotEqual_pattern": "not_equal"}
# The clnet.ops reduction of each ONNX Reduce op read as one (see _Reader._reduce).
REDUCTIONS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min"}
# The activation of each ONNX op read as one without parameters (see _Reader._plain_activation);
# GELU_pattern is the exact GELU (see Patterns._gelu).
PLAIN_ACTIVATIONS = {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Softplus": "softplus",
                     "Softmax": "softmax", "GELU_pattern": "gelu"}
BATCH = 2**31 - 1  # the batch size a Shape reports while shapes are evaluated: a value no axis has
DTYPES = {1: "float32", 11: "float64"}  # TensorProto.FLOAT, TensorProto.DOUBLE
# The activations ONNX's RNN, LSTM and GRU take by name, as clnet's (see clnet/layers/recurrent.py),
# and each op's defaults.
RECURRENT_ACTIVATIONS = {"Tanh": "tanh", "Relu": "relu", "Softplus": "softplus", "Sigmoid": "sigmoid",
                         "Affine": "linear", "LeakyRelu": "lrelu"}
RECURRENT_DEFAULTS = {"RNN": ["Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}
# Ops that only move a recurrent op's output around, through which it is followed until its batch
# axis comes first (see _Pending), and the batch of the index that follows it.
VIEW_OPS = ("Gather", "Identity", "Reshape", "Squeeze", "Transpose", "Unsqueeze")
# The Reduce ops that merge a bidirectional op's directions, as Bidirectional's merge_mode.
DIRECTION_MERGES = {"ReduceSum": "sum", "ReduceMean": "ave", "ReduceProd": "mul"}
PROBE = 2


def _number(value) -> float:
    """A float or float32 stored value as the Python float it was written from: the shortest
    decimal that rounds to it (np.float32(0.1) -> 0.1), so parameters round-trip exactly."""
    return float(str(value))


def _arange(shape) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)


def _channels_first(shape) -> np.ndarray:
    """The index of a channels_last clnet tensor of sample `shape` seen as channels-first."""
    return np.moveaxis(_arange(shape), -1, 0)


class _Value:
    """A tensor of the graph computed by the clnet model: ONNX element [n, *i] is the element at
    flat position index[i] of sample n of the clnet tensor `kt`. `owner` is the layer whose
    activation an activation read from here can become: the layer that computed `kt`, while
    nothing else reads the tensors between it and here. `truth` marks an ONNX bool tensor, which
    clnet holds in its float type: "binary" where kt is 1 for true and 0 for false (a comparison's
    output), "nonzero" where kt is true wherever it is not 0 (a Cast of floats to bool); None for
    numbers."""

    def __init__(self, kt, index: np.ndarray, owner=None, truth: str | None = None):
        self.kt, self.index, self.owner, self.truth = kt, index, owner, truth

    @property
    def shape(self) -> tuple:
        return self.index.shape

    def is_plain(self) -> bool:
        """Whether the ONNX tensor is `kt` itself, element for element."""
        return self.kt.sample_shape == self.shape and np.array_equal(self.index.ravel(), np.arange(self.index.size))

    def axes(self) -> tuple | None:
        """p with ONNX sample axis i = axis p[i] of kt, if the ONNX tensor is a transpose of kt."""
        shape = self.kt.sample_shape
        if len(shape) != len(self.shape):
            return None
        for p in itertools.permutations(range(len(shape))):
            if all(shape[a] == n for a, n in zip(p, self.shape)) and np.array_equal(
                    _arange(shape).transpose(p), self.index):
                return p
        return None


class _Pending:
    """A recurrent op's output (or a view of it) whose batch axis is not first: ONNX's sequences
    are time-major. `index` holds, for a batch of PROBE samples, which element of the op's output
    each element of this tensor is; `where` gives, for each of those, its step (its place in the
    layer's output sequence, which holds a bidirectional layer's backward direction in time
    order; a final state's: the last), direction (0, or 1 for a bidirectional op's backward one),
    batch row and unit, and whether it is its direction's final state ("final"). `output` is the
    op's output it is (0 Y, 1 Y_h, 2 Y_c); `merge` the merge_mode of a Reduce over the directions
    read before (its elements then are the forward direction's, standing for both).
    `take(return_sequences, merge_mode, direction, output)` gives the layer output that a read
    is (see _Reader._placed). View ops move the index (_Reader._moved) until each row holds one
    sample's elements (_Reader._settle)."""

    def __init__(self, node, index: np.ndarray, where: dict, output: int, take, merge: str | None = None):
        self.node, self.index, self.where, self.output, self.take = node, index, where, output, take
        self.merge = merge

    def moved(self, index: np.ndarray, where: dict | None = None, merge: str | None = None) -> "_Pending":
        """This output seen through a view: another index (and `where`, `merge` after a Reduce)."""
        return _Pending(self.node, index, self.where if where is None else where, self.output, self.take,
                        merge or self.merge)

    def batch_first(self) -> bool:
        """Whether each row of the index holds one sample's elements."""
        batch = self.where["batch"]
        return bool(self.index.ndim and self.index.shape[0] == PROBE and
                    all(np.all(batch[self.index[n]] == n) for n in range(PROBE)))


class _Reader:
    def __init__(self, proto, where: str):
        from onnx import helper, numpy_helper
        self.helper, self.numpy_helper, self.where = helper, numpy_helper, where
        self.graph = graph = proto.graph
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.inputs = [i for i in graph.input if i.name not in self.constants]
        if len(graph.output) != 1:
            raise ValueError(f"{where} has {len(graph.output)} outputs; clnet models have one")
        nodes = []
        for node in graph.node:
            if node.domain not in ("", "ai.onnx") or node.op_type not in SUPPORTED_OPS:
                raise _unsupported(node)
            if node.op_type == "Constant":
                self.constants[node.output[0]] = self._constant_node(node)
            elif node.op_type in CONSTANT_OPS and all(name in self.constants for name in node.input if name):
                self._fold(Node(node.op_type, node.input, node.output, node))  # so that patterns see it
            else:
                nodes.append(Node(node.op_type, node.input, node.output, node))
        self.nodes = Patterns(self, nodes).rewrite()
        self.readers = defaultdict(int)  # how many nodes read each tensor (the graph output counts one)
        for node in self.nodes:
            for name in node.inputs:
                self.readers[name] += 1
        self.readers[graph.output[0].name] += 1
        self.values: dict[str, _Value] = {}
        self.weights: list[tuple] = []  # (layer, its weights in Keras layout), set once built

    # -- the model ----------------------------------------------------------------------------
    def model(self, floatx, seed):
        from ..layers import Input, Permute
        from ..model import Model, Sequential
        # The graph's float type: its first float input's, else (token ids in) its output's.
        types = [i.type.tensor_type.elem_type for i in self.inputs] + [self.graph.output[0].type.tensor_type.elem_type]
        self.elem_type = next((t for t in types if t in DTYPES), 1)
        self.dtype = np.dtype(floatx or DTYPES[self.elem_type])
        inputs = []
        for graph_input in self.inputs:
            shape = self._io(graph_input)
            layer = Input(shape)
            if len(shape) in (2, 3) and self._feeds_channels_first(graph_input.name):
                # The model takes the input the file declares, (channels, *spatial), and holds it
                # channels_last from there on, as clnet's layers compute: one Permute.
                held = Permute((*range(2, len(shape) + 1), 1))(layer.output)
                self.values[graph_input.name] = _Value(held, _channels_first(held.sample_shape))
            else:
                self.values[graph_input.name] = _Value(layer.output, _arange(shape))
            inputs.append(layer)
        if not inputs:
            raise ValueError(f"{self.where} has no input; clnet models read at least one")
        unread = dict(self.readers)  # a tensor's index is dropped once its last reader is read
        for node in self.nodes:
            if getattr(node, "skip", False):  # read with the node before it (a MatMul's bias)
                continue
            if node.op in CONSTANT_OPS and all(name in self.constants for name in node.inputs if name):
                self._fold(node)
            else:
                self._read(node)
            for name in node.inputs:
                unread[name] -= 1
                if not unread[name]:
                    self.values.pop(name, None)
        output = self.graph.output[0]
        if output.name not in self.values:
            raise ValueError(f"{self.where}: the output {output.name!r} is a constant, not computed from the input")
        if isinstance(self.values[output.name], _Pending):
            raise _misused(self.values[output.name].node, "its output is the graph's output, time-major; clnet's "
                                                          "outputs have the batch axis first")
        kt = self._plain(self.values[output.name], None, "the graph's output")

        chain, tensor = [], kt  # the layers from the output back to the input, if they form a chain
        while chain is not None and not isinstance(tensor.call.layer, Input):
            single = (len(tensor.call.inputs) == 1 and len(tensor.call.outputs) == 1
                      and not tensor.call.layer.multi_input)  # (an op layer cannot be in a Sequential)
            chain = chain + [tensor.call.layer] if single else None
            tensor = tensor.call.inputs[0]
        name, dtype = self.graph.name or None, self.dtype.name
        if chain is not None and len(inputs) == 1:
            model = Sequential([inputs[0], *chain[::-1]], name=name, floatx=dtype, seed=seed)
        else:
            model = Model(inputs, kt, name=name, floatx=dtype, seed=seed)
        used = {id(layer) for layer in model.built_layers}  # a branch that reaches no output is left out
        for layer, arrays in self.weights:
            if id(layer) in used:
                layer.set_weights(arrays)
        declared = [d.dim_value if d.HasField("dim_value") else None
                    for d in output.type.tensor_type.shape.dim][1:]
        if declared and None not in declared and tuple(declared) != tuple(model.output_shape):
            raise ValueError(f"{self.where}: output {output.name!r} is declared with samples of shape "
                             f"{tuple(declared)}, but the layers read from the graph give {model.output_shape}")
        return model

    def _io(self, graph_input) -> tuple:
        """The sample shape of a graph input: float, or integers (token ids: clnet carries them in
        its float type, see Embedding)."""
        tensor = graph_input.type.tensor_type
        if tensor.elem_type not in DTYPES and tensor.elem_type not in INTEGER_TYPES:
            raise ValueError(f"{self.where}: input {graph_input.name!r} has element type "
                             f"{self.helper.tensor_dtype_to_np_dtype(tensor.elem_type)}; clnet takes float32 "
                             "or float64 (or integer token ids)")
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if len(dims) < 2 or any(d is None or d < 1 for d in dims[1:]):
            shown = ["?" if d is None else d for d in dims]
            raise ValueError(f"{self.where}: input {graph_input.name!r} has shape {shown}; clnet needs "
                             "(batch, ...) with every axis but the batch fixed")
        return tuple(dims[1:])

    def _feeds_channels_first(self, name: str) -> bool:
        """Whether the tensor `name` reaches a channels-first op through elementwise ops only."""
        users = defaultdict(list)
        for node in self.nodes:
            for i, tensor in enumerate(node.inputs):
                users[tensor].append((node, i))
        stack, seen = [name], set()
        while stack:
            tensor = stack.pop()
            for node, i in users[tensor]:
                if node.op in CHANNELS_FIRST_OPS and i == 0:
                    return True
                if node.op in ELEMENTWISE_OPS and i == 0 and node.outputs[0] not in seen:
                    seen.add(node.outputs[0])
                    stack.append(node.outputs[0])
        return False

    def _read(self, node: Node):
        for name in node.inputs:
            if name and name not in self.constants and name not in self.values:
                raise _misused(node, f"it reads {name!r}, which is neither a constant nor computed before it")
        pending = next((name for name in node.inputs if isinstance(self.values.get(name), _Pending)), None)
        if pending is not None:  # (the name of) a recurrent op's output, time-major
            return self._read_pending(node, pending, self.values[pending])
        read = getattr(self, "_op_" + node.op.lower(), None)
        if read is None:
            if node.op in PATTERN_PARTS:
                raise _misused(node, f"clnet reads {node.op} only {PATTERN_PARTS[node.op]}")
            raise _misused(node, f"clnet reads {node.op} only in shape computations (Shape -> ... -> a Reshape's "
                                 "shape), on constants")
        read(node)

    # -- helpers ------------------------------------------------------------------------------
    def _constant_node(self, node):
        attribute = node.attribute[0]
        value = self.helper.get_attribute_value(attribute)
        return self.numpy_helper.to_array(value) if attribute.name == "value" else np.asarray(value)

    def _attribute(self, node: Node, name, default):
        for attribute in node.proto.attribute:
            if attribute.name == name:
                value = self.helper.get_attribute_value(attribute)
                return value.decode() if isinstance(value, bytes) else value
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

    def _value(self, node, name: str, what: str = "input") -> _Value:
        if name not in self.values:
            raise _misused(node, f"its {what} {name!r} is a constant; clnet reads it as a tensor computed from the "
                                 "graph's input")
        return self.values[name]

    def _axes_input(self, node, default=None):
        """Reduce/Squeeze/Unsqueeze axes: an attribute up to opset 12 or 17, an input from then on."""
        if len(node.inputs) > 1 and node.inputs[1]:
            return [int(a) for a in self._constant(node, node.inputs[1], "axes")]
        value = self._attribute(node, "axes", default)
        return None if value is None else [int(a) for a in value]

    def _set(self, node, value: _Value, owner=None):
        """Store `value` as the node's output; `owner` is the layer an activation reading it may
        become part of (kept only while this output has one reader)."""
        name = node.outputs[0]
        value.owner = owner if self.readers[name] == 1 else None
        self.values[name] = value

    def _layer(self, node, layer, kts, weights=None):
        """Call `layer` on the clnet tensors `kts`; errors the layer raises name the node."""
        try:
            kt = layer(kts if layer.multi_input or len(kts) > 1 else kts[0])  # a recurrent layer: x, states
        except (TypeError, ValueError) as error:
            raise _misused(node, str(error)) from None
        if weights is not None:
            self.weights.append((layer, weights))
        return kt

    def _plain(self, value: _Value, order, node_or_what) -> object:
        """A clnet tensor holding the ONNX tensor with its sample axes in `order` (None: as they
        are), row-major: `value.kt`, a Flatten/Reshape of it where only the shape differs, a
        Permute of it where the ONNX tensor is a transpose of it, or a Reshape of such a Permute
        where it is a reshape of a transpose (an attention's heads merged again)."""
        from ..layers import Flatten, Permute, Reshape
        index = value.index if order is None else value.index.transpose(order)
        if not np.array_equal(index.ravel(), np.arange(index.size)):
            axes = _Value(value.kt, index).axes()
            if axes is not None:  # a transpose of what clnet holds, which no layer around undoes
                return self._layer(node_or_what, Permute([a + 1 for a in axes]), [value.kt])
            shape = value.kt.sample_shape
            axes = next((p for p in itertools.permutations(range(len(shape))) if np.array_equal(
                _arange(shape).transpose(p).ravel(), index.ravel())), None) if len(shape) <= 6 else None
            if axes is not None:
                kt = self._layer(node_or_what, Permute([a + 1 for a in axes]), [value.kt])
                return self._plain(_Value(kt, _arange(kt.sample_shape).reshape(index.shape)), None, node_or_what)
            what = node_or_what if isinstance(node_or_what, str) else f"ONNX node {_label(node_or_what)}"
            wanted = "" if order is None else f" with its axes in the order {[0, *(a + 1 for a in order)]}"
            raise ValueError(f"{self.where}: {what} needs its input{wanted} in an order that no Permute of the "
                             "tensor clnet holds gives (a Transpose is read as a Permute layer, or as nothing where "
                             "the layers around it undo it)")
        if value.kt.sample_shape == index.shape:
            return value.kt
        layer = Flatten() if index.ndim == 1 else Reshape(index.shape)
        return self._layer(node_or_what, layer, [value.kt])

    def _fold(self, node: Node):
        """Evaluate a node whose inputs are all known (a shape computation) into a constant."""
        values = [self.constants[i] if i else None for i in node.inputs]
        op = node.op
        if op in ("Identity", "Cast"):
            result = values[0] if op == "Identity" else values[0].astype(
                self.helper.tensor_dtype_to_np_dtype(self._attribute(node, "to", 7)))
        elif op in ("Add", "Sub", "Mul", "Div"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
                 "Div": np.floor_divide if np.issubdtype(values[0].dtype, np.integer) else np.divide}[op]
            result = f(values[0], values[1]).astype(values[0].dtype)
        elif op == "Gather":
            result = np.take(values[0], values[1], axis=self._attribute(node, "axis", 0))
        elif op == "Unsqueeze":
            result = values[0]
            for axis in sorted(a % (values[0].ndim + len(self._axes_input(node))) for a in self._axes_input(node)):
                result = np.expand_dims(result, axis)
        elif op == "Squeeze":
            given = self._axes_input(node)
            result = np.squeeze(values[0], None if given is None else tuple(given))
        elif op == "Concat":
            result = np.concatenate(values, axis=self._attribute(node, "axis", 0))
        elif op == "Reshape":
            result = values[0].reshape([int(s) for s in values[1]])
        elif op == "Transpose":
            result = values[0].transpose(self._attribute(node, "perm", None))
        elif op == "Shape":
            result = np.array(values[0].shape, np.int64)[self._attribute(node, "start", 0):
                                                         self._attribute(node, "end", None)]
        else:
            result = values[0][self._slices(node, values[0].ndim)]
        self.constants[node.outputs[0]] = np.asarray(result)

    def _slices(self, node, rank: int) -> tuple:
        """A Slice node's slices of each axis: starts, ends, axes, steps as inputs (attributes
        before opset 10)."""
        if len(node.inputs) > 1:
            starts, ends, axes, steps = [self._constant(node, name, what) if name else None for name, what in
                                         zip((node.inputs[1:] + [""] * 4)[:4], ("starts", "ends", "axes", "steps"))]
        else:
            starts, ends, axes, steps = [self._attribute(node, k, None) for k in ("starts", "ends", "axes", "steps")]
        index = [slice(None)] * rank
        for i, axis in enumerate(range(rank) if axes is None else axes):
            index[int(axis) % rank] = slice(int(starts[i]), int(ends[i]), 1 if steps is None else int(steps[i]))
        return tuple(index)

    # -- views: no layer, another index ------------------------------------------------------
    def _op_shape(self, node):
        value = self._value(node, node.inputs[0])
        shape = np.array([BATCH, *value.shape], np.int64)
        self.constants[node.outputs[0]] = shape[self._attribute(node, "start", 0):self._attribute(node, "end", None)]

    def _alias(self, node, value: _Value):
        self._set(node, _Value(value.kt, value.index), value.owner)

    def _op_identity(self, node):
        value = self._value(node, node.inputs[0])
        self._set(node, _Value(value.kt, value.index, truth=value.truth), value.owner)

    def _op_dropout(self, node):  # an imported model is run and fine-tuned without the graph's dropout
        if len(node.outputs) > 1 and node.outputs[1] and self.readers[node.outputs[1]]:
            raise _misused(node, "its mask output is read; clnet reads Dropout in its inference form, the identity")
        self._alias(node, self._value(node, node.inputs[0]))

    def _op_cast(self, node):
        """A Cast to the graph's float type: nothing, or 0 and 1 of a bool that is a Cast of floats
        (not_equal(x, 0)); to bool: nothing, the floats standing for the bool (nonzero: true)."""
        to = self._attribute(node, "to", 0)
        value = self._value(node, node.inputs[0])
        if to == BOOL:
            return self._set(node, _Value(value.kt, value.index, truth=value.truth or "nonzero"))
        if to != self.elem_type:
            raise _misused(node, f"it casts to {self.helper.tensor_dtype_to_np_dtype(to)}; clnet computes in the "
                                 "graph input's float type throughout")
        if value.truth == "nonzero":
            return self._elementwise(node, "not_equal", [node.inputs[0], np.array(0.0)])
        self._alias(node, value)

    def _op_slice(self, node):
        """A Slice of a computed tensor's sample axes: where its steps are 1, a Cropping if it is
        written as one (see _cropped), else ops.slice (a Slice layer); other steps (clnet writes
        go_backwards as a reversing Slice) another index, no layer, which a recurrent layer reads."""
        from .. import ops
        value = self._value(node, node.inputs[0])
        index = self._slices(node, len(value.shape) + 1)
        if index[0] != slice(None):
            raise _misused(node, "it slices the batch axis; clnet reads a Slice of sample axes")
        if any(s.step not in (None, 1) for s in index[1:]):
            return self._set(node, _Value(value.kt, value.index[index[1:]]))
        if self._cropped(node, value, index[1:]):
            return None
        kt = self._plain(value, None, node)
        sliced = self._ops(node, ops.getitem, kt, index)
        if sliced is kt:  # every axis whole
            return self._set(node, _Value(kt, _arange(value.shape)), value.owner)
        self._set(node, _Value(sliced, _arange(sliced.sample_shape)), sliced.call.layer)

    def _cropped(self, node, value: _Value, index: tuple) -> bool:
        """A Slice of step 1 (`index`: its slices of the sample axes) written as a cropping, its
        ends counted from the end, of the spatial axes of a tensor that clnet holds as (steps,
        channels) or (height, width, channels), the channels whole: Cropping1D/2D. False (nothing
        done) for other Slices, which ops.slice reads, as it writes them (ends from the start)."""
        from ..layers import Cropping1D, Cropping2D
        rank = len(value.shape)
        p = value.axes()
        if rank not in (2, 3) or p is None or any(s.stop is not None and 0 <= s.stop <= n
                                                  for s, n in zip(index, value.shape)):
            return False
        by_axis = {}
        for a, s, n in zip(p, index, value.shape):
            start, stop, _ = s.indices(n)
            by_axis[a] = (start, n - stop)
        if by_axis[rank - 1] != (0, 0) or not any(map(any, by_axis.values())):
            return False
        cropping = [by_axis[a] for a in range(rank - 1)]
        layer = Cropping1D(cropping[0]) if rank == 2 else Cropping2D(tuple(cropping))
        kt = self._layer(node, layer, [value.kt])
        self._set(node, _Value(kt, _arange(kt.sample_shape).transpose(p)))
        return True

    def _op_transpose(self, node):
        value = self._value(node, node.inputs[0])
        rank = len(value.shape) + 1
        perm = list(self._attribute(node, "perm", range(rank - 1, -1, -1)))
        if perm[0] != 0:
            raise _misused(node, f"perm={perm} moves the batch axis; clnet keeps it first")
        self._set(node, _Value(value.kt, value.index.transpose([p - 1 for p in perm[1:]])), value.owner)

    def _reshaped(self, node, value: _Value, shape: tuple):
        """The node's output: `value` with samples of `shape`; a Flatten or Reshape layer where
        the value is plain (so that a clnet model's layers come back as they were), else an index."""
        from ..layers import Flatten, Reshape
        shape = tuple(int(s) for s in shape)
        if shape == value.shape:
            return self._alias(node, value)
        if value.is_plain():
            layer = Flatten() if len(shape) == 1 else Reshape(shape)
            return self._set(node, _Value(self._layer(node, layer, [value.kt]), _arange(shape)))
        self._set(node, _Value(value.kt, value.index.reshape(shape)))

    def _op_flatten(self, node):
        value = self._value(node, node.inputs[0])
        axis = self._attribute(node, "axis", 1)
        if axis % (len(value.shape) + 1) != 1:
            raise _misused(node, f"axis={axis}; clnet's Flatten keeps the batch axis and flattens the others "
                                 "(axis=1)")
        self._reshaped(node, value, (value.index.size,))

    def _op_reshape(self, node):
        value = self._value(node, node.inputs[0])
        target = [int(s) for s in self._constant(node, node.inputs[1], "shape")]
        full = [BATCH, *value.shape]
        if not self._attribute(node, "allowzero", 0):
            target = [full[i] if s == 0 and i < len(full) else s for i, s in enumerate(target)]
        known = int(np.prod([s for s in target[1:] if s != -1]))
        if target[:1] == [-1] and -1 not in target[1:] and known == value.index.size:
            target[0] = BATCH
        if target.count(-1) == 1 and target[0] == BATCH:
            target[target.index(-1)] = value.index.size // max(known, 1)
        if target[:1] != [BATCH] or int(np.prod(target[1:])) != value.index.size or min(target) < 1:
            shown = ["batch" if t == BATCH else t for t in target]
            raise _misused(node, f"it reshapes samples of shape {value.shape} to {shown}; clnet reads a Reshape "
                                 "that keeps the batch axis first and the number of values per sample")
        self._reshaped(node, value, target[1:])

    def _op_squeeze(self, node):
        from .. import ops
        from ..ops.indexing import Slice
        value = self._value(node, node.inputs[0])
        rank = len(value.shape) + 1
        axes = self._axes_input(node) or [a + 1 for a, n in enumerate(value.shape) if n == 1]
        axes = {a % rank for a in axes}
        if 0 in axes or any(value.shape[a - 1] != 1 for a in axes):
            raise _misused(node, f"it squeezes axes {sorted(axes)} of {(None, *value.shape)}; clnet reads a Squeeze "
                                 "of sample axes of length 1")
        if isinstance(value.owner, Slice) and value.is_plain():
            # A Squeeze of a Slice's axes (ops.slice indexing by an integer, x[:, 2]): one Slice
            # layer of the Slice's input that drops them (the first is left unread).
            layer = value.owner
            kept = [k for k, (_, _, keep) in enumerate(layer.spec) if keep]
            key = [slice(start, start + length) if keep and kept.index(k) + 1 not in axes else start
                   for k, (start, length, keep) in enumerate(layer.spec)]
            kt = self._ops(node, ops.getitem, layer.inbound_calls[-1].inputs[0], (slice(None), *key))
            return self._set(node, _Value(kt, _arange(kt.sample_shape)), kt.call.layer)
        self._reshaped(node, value, [n for a, n in enumerate(value.shape) if a + 1 not in axes])

    def _op_unsqueeze(self, node):
        value = self._value(node, node.inputs[0])
        axes = self._axes_input(node)
        rank = len(value.shape) + 1 + len(axes)
        shape = [None] + list(value.shape)
        for axis in sorted(a % rank for a in axes):
            if axis == 0:
                raise _misused(node, "it inserts an axis before the batch; clnet keeps the batch axis first")
            shape.insert(axis, 1)
        self._reshaped(node, value, shape[1:])

    # -- activations -------------------------------------------------------------------------
    def _activate(self, node, name: str, params: dict):
        """The node's output, `name`(params) of its input: the activation of the layer that
        computed the input where it has none yet (see _Value.owner), else a layer of its own."""
        from .. import activations
        from ..layers import ELU, Activation, LeakyReLU, LocallyConnected1D, ReLU, Softmax
        from ..layers.conv import BaseConv
        from ..layers.dense import Dense
        value = self._value(node, node.inputs[0])
        along = None  # softmax: the axis of value.kt it normalises
        if name == "softmax":
            rank = len(value.shape) + 1
            axis = self._attribute(node, "axis", -1 if self.opset >= 13 else 1)
            axes = value.axes()
            if axis % rank == 0 or axes is None or (self.opset < 13 and axis % rank != rank - 1):
                raise _misused(node, f"axis={axis} on a tensor of rank {rank}; clnet's softmax normalises along one "
                                     "sample axis (before opset 13, the last)")
            along = axes[axis % rank - 1]
        owner = value.owner
        fusable = (Dense, BaseConv) if name == "softmax" else (Dense, BaseConv, LocallyConnected1D)
        if (isinstance(owner, fusable) and owner.activation.name == "linear"
                and owner.activation.params == {"a": 1.0, "b": 0.0} and along in (None, len(value.shape) - 1)):
            _set_activation(owner, activations.get(name, **params))
            return self._set(node, _Value(value.kt, value.index), owner)
        # Keras's layer of the activation where clnet has one, as Keras's own export came from it.
        keras_layers = {"softmax": lambda: Softmax() if along == len(value.shape) - 1 else Softmax(along + 1),
                        "relu": ReLU, "elu": lambda: ELU(params["a"]),
                        "lrelu": lambda: LeakyReLU(params["a"]) if params["a"] >= 0 else Activation(name, **params)}
        layer = keras_layers.get(name, lambda: Activation(name, **params))()
        self._set(node, _Value(self._layer(node, layer, [value.kt]), value.index), layer)

    def _plain_activation(self, node):
        self._activate(node, PLAIN_ACTIVATIONS[node.op], {})

    _op_relu = _op_tanh = _op_sigmoid = _op_softplus = _op_softmax = _op_gelu_pattern = _plain_activation

    def _op_leakyrelu(self, node):
        self._activate(node, "lrelu", {"a": _number(np.float32(self._attribute(node, "alpha", 0.01)))})

    def _op_prelu(self, node):
        """PRelu(x, slope): a 0-d slope is clnet's float64 LReLU (clnet/activations/relu.py), read as
        that activation; a slope with axes is a PReLU's alpha (trainable, one per slope element), its
        axes of 1 over axes of x longer than 1 the shared axes, in the order clnet holds x."""
        from ..layers import PReLU
        slope = self._constant(node, node.inputs[1], "slope")
        if slope.ndim == 0:
            return self._activate(node, "lrelu", {"a": _number(slope)})
        value = self._value(node, node.inputs[0])
        rank = len(value.shape)
        padded = (1,) * (rank + 1 - slope.ndim) + slope.shape  # as ONNX broadcasts it, batch axis first
        if slope.ndim > rank + 1 or padded[0] != 1 or any(s not in (1, n) for s, n in zip(padded[1:], value.shape)):
            raise _misused(node, f"its slope has shape {slope.shape}, which does not broadcast to a batch of samples "
                                 f"of shape {value.shape} with one slope for every sample")
        axes = value.axes()
        if axes is None:  # (a reshape of what clnet holds: that Reshape, then the slope's order)
            value, axes = _Value(self._plain(value, None, node), _arange(value.shape)), tuple(range(rank))
        alpha = slope.reshape(padded[1:]).transpose(np.argsort(axes))  # in clnet's order of the axes
        shape = value.kt.sample_shape
        layer = PReLU(shared_axes=[a + 1 for a in range(rank) if alpha.shape[a] == 1 < shape[a]] or None)
        self._set(node, _Value(self._layer(node, layer, [value.kt], [alpha]), value.index), layer)

    def _op_elu(self, node):
        self._activate(node, "elu", {"a": _number(np.float32(self._attribute(node, "alpha", 1.0)))})

    def _op_clip(self, node):
        """Clip(x, min, max), its bounds inputs from opset 11 (attributes before): a ReLU(max_value=max)
        for min 0, max >= 0, as Keras's ReLU(max_value) and torch's ReLU6 write it; else ops.clip
        (ops.maximum, ops.minimum for one bound, nothing for none)."""
        from ..layers import ReLU
        if self.opset >= 11:
            bounds = (node.inputs[1:] + ["", ""])[:2]
            low, high = [self._scalar(node, name, what) if name else None for name, what in zip(bounds, ("min", "max"))]
        else:
            bounds = [self._attribute(node, what, None) for what in ("min", "max")]
            low, high = [None if v is None else _number(np.float32(v)) for v in bounds]
        value = self._value(node, node.inputs[0])
        if low == 0 and high is not None and high >= 0:
            layer = ReLU(max_value=high)
            return self._set(node, _Value(self._layer(node, layer, [value.kt]), value.index), layer)
        if low is None and high is None:
            return self._alias(node, value)
        x = node.inputs[0]
        if low is None or high is None:
            return self._elementwise(node, "minimum" if low is None else "maximum",
                                     [x, np.array(high if low is None else low)])
        self._elementwise(node, lambda t: self._ops_module().clip(t, low, high), [x])

    def _op_relu_pattern(self, node):
        """Keras's ReLU(max_value, negative_slope, threshold) (see Patterns._relu)."""
        from ..layers import ReLU
        value = self._value(node, node.inputs[0])
        layer = ReLU(**node.params)
        self._set(node, _Value(self._layer(node, layer, [value.kt]), value.index), layer)

    def _op_gelu(self, node):
        """Gelu (opset 20): the exact one is the GELU activation, approximate='tanh' ops.gelu (Keras's
        default, the tanh approximation)."""
        if self._attribute(node, "approximate", "none") == "tanh":
            return self._op_gelutanh_pattern(node)
        self._activate(node, "gelu", {})

    def _op_gelutanh_pattern(self, node):
        """x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 (see Patterns._gelu_tanh): ops.gelu."""
        self._elementwise(node, lambda t: self._ops_module().gelu(t, approximate=True), node.inputs[:1])

    def _op_swish_pattern(self, node):
        self._activate(node, "swish", {"b": _number(node.params["b"])})

    def _affine(self, node, value: _Value, scale: float, shift: float):
        """scale x + shift: folded into the Linear or Sigmoid(a, b) that computed x, else a
        Linear(a, b) Activation layer (nothing for the identity)."""
        from .. import activations
        from ..layers import Activation
        owner = value.owner
        act = getattr(owner, "activation", None)
        if act is not None and act.name in ("linear", "sigmoid"):
            a, b = act.params.get("a", 1.0), act.params.get("b", 0.0)
            # linear: scale (a x + b) + shift;  sigmoid: scale (a s - b) + shift = (scale a) s - (scale b - shift)
            b = scale * b + shift if act.name == "linear" else scale * b - shift
            _set_activation(owner, activations.get(act.name, a=scale * a, b=b))
            return self._set(node, _Value(value.kt, value.index), owner)
        if scale == 1.0 and shift == 0.0:
            return self._alias(node, value)
        layer = Activation("linear", a=scale, b=shift)
        self._set(node, _Value(self._layer(node, layer, [value.kt]), value.index), layer)

    # -- arithmetic: merges of computed tensors, or scalars, else clnet.ops --------------------
    def _binary(self, node):
        """Add, Sub, Mul, Div: a merge layer (Add, Multiply) of two computed tensors of one shape, an
        activation's parameters (scale x + shift) for a scalar, a bias after a Dense or convolution
        without one, else clnet.ops's op of the operands (broadcast as numpy)."""
        a, b = node.inputs[:2]
        computed = [name in self.values for name in (a, b)]
        if not any(computed):
            raise _misused(node, "both its operands are constants")
        op = node.op
        if all(computed):
            if op in ("Add", "Mul") and self.values[a].shape == self.values[b].shape:
                return self._merge(node, [self.values[a], self.values[b]])
            return self._elementwise(node, ELEMENTWISE[op], [a, b])
        x_first = computed[0]
        value = self.values[a if x_first else b]
        constant = self.constants[b if x_first else a]
        if constant.size > 1:
            if op in ("Add", "Sub") and x_first and self._bias(node, value, constant if op == "Add" else -constant):
                return None
            return self._elementwise(node, ELEMENTWISE[op], [a, b])
        c = self._scalar(node, b if x_first else a, "operand")
        if op == "Mul":
            return self._affine(node, value, c, 0.0)
        if op == "Add":
            return self._affine(node, value, 1.0, c)
        if op == "Sub":
            return self._affine(node, value, *((1.0, -c) if x_first else (-1.0, c)))
        act = getattr(value.owner, "activation", None)
        if x_first and c != 0 and act is not None and act.name in ("linear", "sigmoid"):
            return self._affine(node, value, 1.0 / c, 0.0)  # into the activation before it
        self._elementwise(node, "divide", [a, b])

    _op_add = _op_mul = _op_sub = _op_div = _binary

    def _op_pow(self, node):
        """Pow: ops.square for the exponent 2 (as clnet writes ops.square), else ops.power."""
        base, exponent = node.inputs[:2]
        if base in self.values and exponent in self.constants and self.constants[exponent].size == 1 \
                and float(self.constants[exponent].reshape(())) == 2.0:
            return self._elementwise(node, "square", [base])
        self._elementwise(node, "power", [base, exponent])

    def _extremum(self, node):
        """Min, Max: of one operand, that operand; of two, ops.minimum, ops.maximum."""
        op = ELEMENTWISE[node.op]
        names = [name for name in node.inputs if name]
        if len(names) == 1:
            return self._alias(node, self._value(node, names[0]))
        if len(names) != 2:
            raise _misused(node, f"it takes {len(names)} operands; clnet reads {node.op} of two (ops.{op})")
        self._elementwise(node, op, names)

    _op_min = _op_max = _extremum

    def _unary(self, node):
        self._elementwise(node, ELEMENTWISE[node.op], node.inputs[:1])

    _op_exp = _op_log = _op_sqrt = _op_abs = _op_neg = _unary

    # -- comparisons and where: ONNX's bools as 0 and 1 in the float type --------------------
    def _compare(self, node):
        if any(getattr(self.values.get(name), "truth", None) == "nonzero" for name in node.inputs[:2]):
            raise _misused(node, "it compares bools Cast from floats (clnet holds them as those floats); clnet "
                                 "compares numbers, and bools that comparisons give")
        self._elementwise(node, ELEMENTWISE[node.op], node.inputs[:2]).truth = "binary"

    _op_greater = _op_greaterorequal = _op_less = _op_lessorequal = _op_equal = _op_notequal_pattern = _compare

    def _op_not(self, node):
        """Not of a bool that is not a comparison's (Patterns._negation reads those): equal(x, 0)."""
        self._elementwise(node, "equal", [node.inputs[0], np.array(0.0)]).truth = "binary"

    def _op_where(self, node):
        """Where(condition, x, y): ops.where, the condition's floats nonzero where it is true."""
        self._elementwise(node, "where", node.inputs[:3])

    def _op_like_pattern(self, node):
        """Expand(c, Shape(x)) of a number c (see Patterns._like): ops.ones_like, ops.zeros_like,
        or c + zeros_like(x)."""
        ops, c = self._ops_module(), _number(node.params)
        function = {1.0: ops.ones_like, 0.0: ops.zeros_like}.get(c, lambda t: ops.add(ops.zeros_like(t), c))
        self._elementwise(node, function, node.inputs[:1])

    def _ops_module(self):
        from .. import ops
        return ops

    def _ops(self, node, function, *args, **kwargs):
        """clnet.ops's `function` of clnet tensors and constants; errors it raises name the node."""
        try:
            return function(*args, **kwargs)
        except (TypeError, ValueError, IndexError) as error:
            raise _misused(node, str(error)) from None

    def _elementwise(self, node, op, operands, elementwise: bool = True) -> _Value:
        """The node's output: clnet.ops.`op` (a name, or a function of them) of `operands`: names
        of computed tensors or constants, or constant arrays. An `elementwise` op takes its
        tensors as clnet holds them where they are one tensor seen alike (and constants are
        scalars); other ops, and elementwise ones otherwise, take them in the ONNX layout."""
        ops = self._ops_module()
        function = getattr(ops, op) if isinstance(op, str) else op
        values = [self.values.get(o) if isinstance(o, str) else None for o in operands]
        computed = [v for v in values if v is not None]
        if not computed:
            raise _misused(node, "its operands are constants; clnet computes ops of tensors computed from the "
                                 "graph's input")
        constants = [None if v is not None else self._operand(node, o) for o, v in zip(operands, values)]
        first = computed[0]
        plain = all(v.is_plain() for v in computed)
        shared = (elementwise and not plain
                  and all(c is None or c.size == 1 and c.ndim <= len(first.shape) for c in constants)
                  and all(v.kt.sample_shape == first.kt.sample_shape and np.array_equal(v.index, first.index)
                          for v in computed))
        args = [(c.reshape(()) if shared else c) if v is None else v.kt if plain or shared else
                self._plain(v, None, node) for v, c in zip(values, constants)]
        kt = self._ops(node, function, *args)
        value = _Value(kt, first.index if shared else _arange(kt.sample_shape))
        self._set(node, value)
        return value

    def _operand(self, node, operand) -> np.ndarray:
        """A constant operand as an array of floats: a stored number (of shape () or (1,), which
        broadcast alike against tensors with a batch axis) as a scalar, and as the decimal it was
        written from (see _number), so that configs read back as they were written."""
        if not isinstance(operand, str):
            return np.asarray(operand, np.float64)
        if operand not in self.constants:
            raise _misused(node, f"it reads {operand!r}, which is neither a constant nor computed before it")
        value = self.constants[operand]
        if value.size == 1 and value.ndim <= 1:
            value = value.reshape(())
            return np.asarray(_number(value) if np.issubdtype(value.dtype, np.floating) else float(value))
        return value.astype(np.float64)

    def _bias(self, node, value: _Value, constant) -> bool:
        """x + constant, where x comes from a Dense or convolution without bias or activation and
        the constant has one value per unit or filter (Keras writes a Conv's bias so): that
        layer's bias. False (nothing done) for any other."""
        from ..layers.conv import BaseConv
        from ..layers.dense import Dense
        owner, p = value.owner, value.axes()
        if not (isinstance(owner, (Dense, BaseConv)) and not owner.use_bias and owner.activation.name == "linear"
                and owner.activation.params == {"a": 1.0, "b": 0.0} and p is not None):
            return False
        try:
            bias = self._along(node, constant, value.shape, p.index(len(p) - 1), "bias")
        except ValueError:  # not one value per unit
            return False
        owner.use_bias = True
        next(arrays for layer, arrays in self.weights if layer is owner).append(bias)
        self._set(node, _Value(value.kt, value.index), owner)
        return True

    def _op_channelaffine_pattern(self, node):
        """(x - mean) * scale + shift with one value per channel (the last axis in clnet), as
        Keras's BatchNormalization comes out of torch.onnx.export with its constants folded: a
        BatchNormalization with moving variance 1 and epsilon float's smallest normal number,
        which computes the same. (Its own variance and epsilon are not in the file, so in fit
        batches are normalised with epsilon that small.)"""
        from ..layers import BatchNormalization
        value = self._value(node, node.inputs[0])
        p = value.axes()
        if p is None:
            value, p = _Value(self._plain(value, None, node), _arange(value.shape)), tuple(range(len(value.shape)))
        axis = p.index(len(p) - 1)
        mean, scale, shift = (self._along(node, c, value.shape, axis, what)
                              for c, what in zip(node.params, ("mean", "scale", "shift")))
        layer = BatchNormalization(epsilon=self._epsilon(0.0))
        kt = self._layer(node, layer, [value.kt], [scale, shift, mean, np.ones_like(mean)])
        self._set(node, _Value(kt, value.index))

    def _op_locallyconnected_pattern(self, node):
        """clnet's export of LocallyConnected1D (see Patterns._locally_connected in patterns.py)."""
        from ..layers import LocallyConnected1D
        windows, kernel, bias = node.params  # (positions, kernel_size), (positions, taps, filters), bias or None
        value = self._value(node, node.inputs[0])
        positions, size = windows.shape
        stride = int(windows[1, 0] - windows[0, 0]) if positions > 1 else 1
        if len(value.shape) != 2 or stride < 1 or not np.array_equal(
                windows, np.arange(positions)[:, None] * stride + np.arange(size)) or kernel.shape[:2] != (
                positions, size * value.shape[1]):
            raise _misused(node, "its Gather, Reshape, Transpose, MatMul pattern is not a LocallyConnected1D's "
                                 "(windows of kernel_size steps every `strides` steps over (steps, channels))")
        layer = LocallyConnected1D(kernel.shape[2], size, strides=stride, use_bias=bias is not None)
        arrays = [kernel] + ([] if bias is None else [np.broadcast_to(bias, (positions, kernel.shape[2]))])
        kt = self._layer(node, layer, [self._plain(value, None, node)], arrays)
        self._set(node, _Value(kt, _arange(kt.sample_shape)), layer)

    def _op_sum(self, node):
        values = [self._value(node, name) for name in node.inputs]
        if len(values) == 1:
            return self._alias(node, values[0])
        self._merge(node, values)

    def _merge(self, node, values: list[_Value]):
        from ..layers import Add, Multiply
        if node.op not in ("Add", "Sum", "Mul"):
            raise _misused(node, f"clnet has no layer that takes the {node.op} of two computed tensors (its merges: "
                                 "Add, Multiply, Concatenate)")
        if any(v.shape != values[0].shape for v in values):
            raise _misused(node, f"its operands have shapes {[v.shape for v in values]}; clnet merges tensors of one "
                                 "shape (no broadcasting)")
        same = all(v.kt.sample_shape == values[0].kt.sample_shape and np.array_equal(v.index, values[0].index)
                   for v in values)
        kts = [v.kt for v in values] if same else [self._plain(v, None, node) for v in values]
        kt = self._layer(node, Multiply() if node.op == "Mul" else Add(), kts)
        self._set(node, _Value(kt, values[0].index if same else _arange(values[0].shape)))

    def _op_concat(self, node):
        from ..layers import Concatenate
        values = [self._value(node, name) for name in node.inputs]
        rank = len(values[0].shape) + 1
        axis = self._attribute(node, "axis", 1) % rank
        if axis == 0:
            raise _misused(node, "it joins along the batch axis; clnet's Concatenate joins sample axes")
        p = values[0].axes()
        if p is None or any(v.axes() != p for v in values):
            values = [_Value(self._plain(v, None, node), _arange(v.shape)) for v in values]
            p = tuple(range(rank - 1))
        kt_axis = p[axis - 1]
        layer = Concatenate(axis=-1 if kt_axis == len(p) - 1 else kt_axis + 1)
        kt = self._layer(node, layer, [v.kt for v in values])
        self._set(node, _Value(kt, _arange(kt.sample_shape).transpose(p)))

    # -- Dense -------------------------------------------------------------------------------
    def _op_gemm(self, node):
        if node.inputs[0] not in self.values or self._attribute(node, "transA", 0):
            raise _misused(node, "clnet reads Gemm(x, W, C) with x a computed tensor, not transposed")
        kernel = self._constant(node, node.inputs[1], "weight")
        if self._attribute(node, "transB", 0):
            kernel = kernel.T
        kernel = kernel * self._attribute(node, "alpha", 1.0)
        bias = None
        if len(node.inputs) > 2 and node.inputs[2]:
            bias = self._units(node, self._constant(node, node.inputs[2], "bias"), kernel.shape[-1])
            bias = bias * self._attribute(node, "beta", 1.0)
        self._dense(node, node, kernel, bias)

    def _op_matmul(self, node):
        """MatMul(x, W) of a matrix W: a Dense (with the Add of a bias after it); of two computed
        tensors, a constant first, or W of another rank: ops.matmul."""
        a, b = node.inputs[:2]
        if a not in self.values or b not in self.constants or self.constants[b].ndim != 2:
            return self._elementwise(node, "matmul", [a, b], elementwise=False)
        kernel = self._constant(node, node.inputs[1], "weight")
        # A Linear layer exported as MatMul + Add, maybe with no-op Casts between (Keras): the
        # Add is read here and skipped when reached.
        last, product, between = node, node.outputs[0], []
        while (user := self._only_reader(product)) is not None and user.op in ("Cast", "Identity") and (
                user.op == "Identity" or self._attribute(user, "to", 0) == self.elem_type):
            between.append(user)
            product = user.outputs[0]
        add = self._only_reader(product)
        bias = None
        if add is not None and add.op == "Add" and kernel.ndim == 2:
            other = add.inputs[1] if add.inputs[0] == product else add.inputs[0]
            if other in self.constants:
                bias = self._units(add, self.constants[other], kernel.shape[1])
                for skipped in (*between, add):
                    skipped.skip = True
                last = add
        self._dense(node, last, kernel, bias)

    def _only_reader(self, name: str) -> Node | None:
        users = [n for n in self.nodes if name in n.inputs]
        return users[0] if len(users) == 1 and self.readers[name] == 1 else None

    def _units(self, node, value, units: int) -> np.ndarray:
        try:
            return np.broadcast_to(value, (1, units)).reshape(units)
        except ValueError:
            raise _misused(node, f"its bias has shape {value.shape}, which does not broadcast to ({units},)") from None

    def _dense(self, node, last, kernel, bias):
        """Dense(kernel, bias) of the node's input, written as `last`'s output. The input may be
        held in another order (a Flatten of a channels-first tensor): the kernel's rows follow it."""
        from ..layers import Dense, Flatten
        value = self.values[node.inputs[0]]
        if kernel.ndim == 2 and len(value.shape) > 1 and kernel.shape[0] == value.shape[-1]:  # on (..., features)
            layer = Dense(kernel.shape[1], use_bias=bias is not None)
            kt = self._layer(node, layer, [self._plain(value, None, node)], [kernel] + ([] if bias is None else [bias]))
            return self._set(last, _Value(kt, _arange(kt.sample_shape)), layer)
        if kernel.ndim != 2 or len(value.shape) != 1 or kernel.shape[0] != value.shape[0]:
            raise _misused(node, f"it multiplies samples of shape {value.shape} by a weight of shape {kernel.shape}; "
                                 "clnet's Dense takes (batch, ..., features) times (features, units)")
        kt = value.kt if len(value.kt.sample_shape) == 1 else self._layer(node, Flatten(), [value.kt])
        rows = np.empty_like(kernel)
        rows[value.index] = kernel  # kt @ rows == the ONNX input @ kernel
        layer = Dense(kernel.shape[1], use_bias=bias is not None)
        kt = self._layer(node, layer, [kt], [rows] + ([] if bias is None else [bias]))
        self._set(last, _Value(kt, _arange(kt.sample_shape)), layer)

    # -- convolution and pooling (channels-first in ONNX, channels_last in clnet) ----------------
    def _spatial(self, node, what: str):
        """The node's input as a channels_last clnet tensor, and its (length per spatial axis)."""
        value = self._value(node, node.inputs[0])
        rank = len(value.shape) - 1
        if rank not in (1, 2):
            raise _misused(node, f"its input has shape {(None, *value.shape)}; clnet has 1-D and 2-D {what} "
                                 "(batch, channels, length) or (batch, channels, height, width)")
        return self._plain(value, (*range(1, rank + 1), 0), node), value.shape[1:]

    def _pads(self, node, lengths, sizes, strides, dilations) -> tuple[list, list]:
        """(befores, afters) per spatial axis, from pads or auto_pad."""
        rank = len(lengths)
        auto = self._attribute(node, "auto_pad", "NOTSET")
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            befores, afters = [], []
            for length, size, stride, dilation in zip(lengths, sizes, strides, dilations):
                total = max((-(-length // stride) - 1) * stride + (size - 1) * dilation + 1 - length, 0)
                small = total // 2
                befores.append(small if auto == "SAME_UPPER" else total - small)
                afters.append(total - befores[-1])
            return befores, afters
        pads = [0] * 2 * rank if auto == "VALID" else list(self._attribute(node, "pads", [0] * 2 * rank))
        if min(pads) < 0:
            raise _misused(node, f"pads={pads}; clnet pads with zeros, not by cropping")
        return pads[:rank], pads[rank:]

    @staticmethod
    def _padding(lengths, sizes, strides, dilations, befores, afters) -> str | None:
        """'valid' or 'same' where the pads are those Keras uses for it, else None."""
        if not any(befores) and not any(afters):
            return "valid"
        for length, size, stride, dilation, before, after in zip(lengths, sizes, strides, dilations, befores, afters):
            total = max((-(-length // stride) - 1) * stride + (size - 1) * dilation + 1 - length, 0)
            if (before, after) != (total // 2, total - total // 2):
                return None
        return "same"

    def _zero_padded(self, node, kt, befores, afters, what: str):
        """kt with ZeroPadding2D before a 'valid' layer, for pads that are not Keras's 'same'."""
        from ..layers import ZeroPadding2D
        if len(befores) != 2:
            raise _misused(node, f"pads={[*befores, *afters]}; clnet pads a 1-D {what} only as 'valid', as "
                                 "Keras's 'same' or (a convolution) as Keras's 'causal'")
        return self._layer(node, ZeroPadding2D(tuple(zip(befores, afters))), [kt])

    def _op_conv(self, node):
        from ..layers import Conv1D, Conv2D
        if self._attribute(node, "group", 1) != 1:
            raise _misused(node, f"group={self._attribute(node, 'group', 1)}; clnet's Conv1D/Conv2D compute "
                                 "group=1 only (no grouped or depthwise convolution)")
        weight = self._constant(node, node.inputs[1], "weight")  # (filters, in, *kernel_size)
        kt, lengths = self._spatial(node, "convolutions")
        rank = len(lengths)
        sizes = list(self._attribute(node, "kernel_shape", weight.shape[2:]))
        strides = list(self._attribute(node, "strides", [1] * rank))
        dilations = list(self._attribute(node, "dilations", [1] * rank))
        befores, afters = self._pads(node, lengths, sizes, strides, dilations)
        padding = self._padding(lengths, sizes, strides, dilations, befores, afters)
        if padding is None and rank == 1 and (befores[0], afters[0]) == ((sizes[0] - 1) * dilations[0], 0):
            padding = "causal"  # Keras's Conv1D: (kernel - 1) * dilation zeros before, none after
        if padding is None:
            kt, padding = self._zero_padded(node, kt, befores, afters, "convolution"), "valid"
        bias = [self._constant(node, node.inputs[2], "bias")] if len(node.inputs) > 2 and node.inputs[2] else []
        layer = (Conv1D if rank == 1 else Conv2D)(weight.shape[0], sizes, strides=strides, padding=padding,
                                                  dilation_rate=dilations, use_bias=bool(bias))
        kernel = weight.transpose(*range(2, rank + 2), 1, 0)  # (*kernel_size, in, filters): Keras's layout
        kt = self._layer(node, layer, [kt], [kernel, *bias])
        self._set(node, _Value(kt, _channels_first(kt.sample_shape)), layer)

    def _pool(self, node):
        from ..layers import AveragePooling1D, AveragePooling2D, MaxPooling1D, MaxPooling2D
        use_max = node.op == "MaxPool"
        if len(node.outputs) > 1 and node.outputs[1] and self.readers[node.outputs[1]]:
            raise _misused(node, "its Indices output is read; clnet's MaxPooling returns the maxima only")
        kt, lengths = self._spatial(node, "pools")
        rank = len(lengths)
        sizes = list(self._attribute(node, "kernel_shape", []))
        strides = list(self._attribute(node, "strides", [1] * rank))
        dilations = list(self._attribute(node, "dilations", [1] * rank))
        if any(d != 1 for d in dilations):
            raise _misused(node, f"dilations={dilations}; clnet's pooling layers have no dilation")
        befores, afters = self._pads(node, lengths, sizes, strides, dilations)
        if self._attribute(node, "ceil_mode", 0):
            for length, size, stride, before, after in zip(lengths, sizes, strides, befores, afters):
                if (length + before + after - size) % stride:
                    raise _misused(node, "ceil_mode=1 makes a window that starts in the padding; clnet's pools "
                                         "round the output length down (ceil_mode=0)")
        padding = self._padding(lengths, sizes, strides, dilations, befores, afters)
        counts_pads = not use_max and self._attribute(node, "count_include_pad", 0)
        if padding == "same" and counts_pads or padding is None:
            if use_max or not counts_pads:
                raise _misused(node, f"pads={[*befores, *afters]}; clnet's {'max' if use_max else 'average'} pools "
                                     "pad only as Keras's 'same' (the extra cell after)")
            kt, padding = self._zero_padded(node, kt, befores, afters, "pool"), "valid"  # zeros that count
        cls = {(True, 1): MaxPooling1D, (True, 2): MaxPooling2D, (False, 1): AveragePooling1D,
               (False, 2): AveragePooling2D}[use_max, rank]
        kt = self._layer(node, cls(sizes, strides=strides, padding=padding), [kt])
        self._set(node, _Value(kt, _channels_first(kt.sample_shape)))

    _op_maxpool = _op_averagepool = _pool

    def _global_pool(self, node):
        from ..layers import (GlobalAveragePooling1D, GlobalAveragePooling2D, GlobalMaxPooling1D,
                              GlobalMaxPooling2D)
        kt, lengths = self._spatial(node, "pools")
        cls = {(True, 1): GlobalMaxPooling1D, (True, 2): GlobalMaxPooling2D, (False, 1): GlobalAveragePooling1D,
               (False, 2): GlobalAveragePooling2D}[node.op == "GlobalMaxPool", len(lengths)]
        kt = self._layer(node, cls(keepdims=True), [kt])
        self._set(node, _Value(kt, _channels_first(kt.sample_shape)))

    _op_globalaveragepool = _op_globalmaxpool = _global_pool

    def _reduce(self, node):
        """ReduceSum, ReduceMean, ReduceMax, ReduceMin over sample axes: a global pooling layer for a
        mean or max over every axis but the batch and the channels (clnet's channels_last: the
        last), else ops.sum, ops.mean, ops.max, ops.min."""
        op = REDUCTIONS[node.op]
        value = self._value(node, node.inputs[0])
        rank = len(value.shape) + 1
        axes = self._axes_input(node)
        keepdims = bool(self._attribute(node, "keepdims", 1))
        if not axes:
            if self._attribute(node, "noop_with_empty_axes", 0):
                return self._alias(node, value)
            axes = list(range(rank))
        axes = sorted({a % rank for a in axes})
        if 0 in axes:
            raise _misused(node, f"it reduces axes {axes} of {(None, *value.shape)}, the batch axis among them; clnet "
                                 "reduces the sample axes")
        if op in ("mean", "max") and self._pooled(node, value, axes, keepdims, op == "max"):
            return None
        self._elementwise(node, lambda t: getattr(self._ops_module(), op)(t, axis=tuple(axes), keepdims=keepdims),
                          node.inputs[:1], elementwise=False)

    _op_reducesum = _op_reducemean = _op_reducemax = _op_reducemin = _reduce

    def _index_of_extreme(self, node):
        """ArgMax, ArgMin along a sample axis: ops.argmax, ops.argmin (a float index, which the
        Cast to the float type after it leaves as it is)."""
        value = self._value(node, node.inputs[0])
        rank = len(value.shape) + 1
        axis = self._attribute(node, "axis", 0) % rank
        if axis == 0:
            raise _misused(node, f"it takes its index along axis 0 of {(None, *value.shape)}, the batch axis; clnet "
                                 "takes it along a sample axis")
        if self._attribute(node, "select_last_index", 0):
            raise _misused(node, "it selects the last of tied extremes (select_last_index=1); clnet's is the first, "
                                 "as numpy's")
        op, keepdims = node.op.lower(), bool(self._attribute(node, "keepdims", 1))
        self._elementwise(node, lambda t: getattr(self._ops_module(), op)(t, axis=axis, keepdims=keepdims),
                          node.inputs[:1], elementwise=False)

    _op_argmax = _op_argmin = _index_of_extreme

    def _pooled(self, node, value: _Value, axes: list, keepdims: bool, use_max: bool) -> bool:
        """A mean or max over every spatial axis (every sample axis but the channels, which clnet
        holds last) as a global pooling layer; False (nothing done) for other axes."""
        from ..layers import (GlobalAveragePooling1D, GlobalAveragePooling2D, GlobalMaxPooling1D,
                              GlobalMaxPooling2D)
        rank = len(value.shape) + 1
        p = value.axes()
        if rank not in (3, 4) or {(tuple(range(rank - 1)) if p is None else p)[a - 1] for a in axes} != set(
                range(rank - 2)):
            return False
        if p is None:
            p, value = tuple(range(rank - 1)), _Value(self._plain(value, None, node), _arange(value.shape))
        cls = {(True, 3): GlobalMaxPooling1D, (True, 4): GlobalMaxPooling2D, (False, 3): GlobalAveragePooling1D,
               (False, 4): GlobalAveragePooling2D}[use_max, rank]
        kt = self._layer(node, cls(keepdims=keepdims), [value.kt])
        index = _arange(kt.sample_shape).transpose(p) if keepdims else _arange(kt.sample_shape)
        self._set(node, _Value(kt, index))
        return True

    def _op_gather(self, node):
        """Gather(x, indices) of a computed x along a sample axis, constant integer indices: ops.take."""
        data, indices = node.inputs[:2]
        value = self._value(node, data)
        rank = len(value.shape) + 1
        axis = self._attribute(node, "axis", 0) % rank
        positions = self._constant(node, indices, "indices")
        if axis == 0:
            raise _misused(node, "it gathers along the batch axis; clnet takes along sample axes (ops.take)")
        self._elementwise(node, lambda t: self._ops_module().take(t, positions, axis=axis), [data], elementwise=False)

    def _op_pad(self, node):
        from ..layers import ZeroPadding2D
        value = self._value(node, node.inputs[0])
        rank = len(value.shape) + 1
        mode = self._attribute(node, "mode", "constant")
        if self.opset >= 11:
            pads = [int(p) for p in self._constant(node, node.inputs[1], "pads")]
            fill = (self._constant(node, node.inputs[2], "constant_value").item()
                    if len(node.inputs) > 2 and node.inputs[2] else 0.0)
            axes = ([int(a) % rank for a in self._constant(node, node.inputs[3], "axes")]
                    if len(node.inputs) > 3 and node.inputs[3] else list(range(rank)))
        else:
            pads, fill, axes = list(self._attribute(node, "pads", [])), self._attribute(node, "value", 0.0), \
                list(range(rank))
        sides = [(0, 0)] * rank
        for i, axis in enumerate(axes):
            sides[axis] = (pads[i], pads[i + len(axes)])
        if mode != "constant" or fill != 0:
            raise _misused(node, f"mode={mode!r}, value={fill}; clnet pads with zeros (ZeroPadding2D)")
        p = value.axes()
        if p is None:
            p, value = tuple(range(rank - 1)), _Value(self._plain(value, None, node), _arange(value.shape))
        by_axis = {p[i - 1]: sides[i] for i in range(1, rank)}
        if sides[0] != (0, 0) or rank != 4 or min(pads) < 0 or by_axis[2] != (0, 0):
            raise _misused(node, f"pads={pads} on {(None, *value.shape)}; clnet pads the height and width of "
                                 "(batch, height, width, channels) images with zeros (ZeroPadding2D)")
        if not any(pads):
            return self._alias(node, value)
        kt = self._layer(node, ZeroPadding2D((by_axis[0], by_axis[1])), [value.kt])
        self._set(node, _Value(kt, _arange(kt.sample_shape).transpose(p)))

    def _op_resize(self, node):
        """A nearest Resize by whole factors of the spatial axes of (batch, steps, channels) or
        (batch, height, width, channels), in clnet's order or a channels-first view of it, that
        repeats each cell: UpSampling1D/2D. Its factors are its scales, or its sizes over the
        input's extents. From opset 11 the placement of the source cell must be one that repeats
        (NEAREST_REPEATS); Resize-10 names none, and both ways it is read (asymmetric rounded
        down, as onnxruntime; the half-pixel default, as onnx's version converter) repeat."""
        from ..layers import UpSampling1D, UpSampling2D
        value = self._value(node, node.inputs[0])
        rank = len(value.shape) + 1
        mode = self._attribute(node, "mode", "nearest")
        placement = (self._attribute(node, "coordinate_transformation_mode", "half_pixel"),
                     self._attribute(node, "nearest_mode", "round_prefer_floor"))
        if mode != "nearest" or self.opset >= 11 and placement not in NEAREST_REPEATS:
            raise _misused(node, f"mode={mode!r}, coordinate_transformation_mode={placement[0]!r}, nearest_mode="
                                 f"{placement[1]!r}; clnet reads a nearest Resize that repeats each cell "
                                 "(UpSampling1D/2D): " + ", ".join(f"{m!r} with {r!r}" for m, r in
                                                                    sorted(NEAREST_REPEATS)))
        named = [*node.inputs, "", "", ""]
        scales, sizes = (named[1], "") if self.opset < 11 else (named[2], named[3])
        axes = [a % rank for a in self._attribute(node, "axes", range(rank))]  # (an attribute from opset 18)
        if scales and self._constant(node, scales, "scales").size:
            factors = dict(zip(axes, self._constant(node, scales, "scales").tolist()))
        else:
            if self._attribute(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
                raise _misused(node, "keep_aspect_ratio_policy is not 'stretch'; clnet reads Resize's sizes as "
                                     "they are given")
            extents = (BATCH, *value.shape)  # (a size for the batch is the file's own, or Shape's: no factor)
            factors = {a: size / extents[a] for a, size in zip(axes, self._constant(node, sizes, "sizes")) if a}
        p = value.axes()
        if p is None:
            p, value = tuple(range(rank - 1)), _Value(self._plain(value, None, node), _arange(value.shape))
        by_axis = {p[i - 1]: factors.get(i, 1.0) for i in range(1, rank)}  # clnet's axes: channels last
        if (rank not in (3, 4) or factors.get(0, 1.0) != 1 or by_axis[rank - 2] != 1
                or any(f != int(f) or f < 1 for f in by_axis.values())):
            shown = [factors.get(a, 1.0) for a in range(rank)]
            raise _misused(node, f"it scales {(None, *value.shape)} by {shown}; clnet upsamples the spatial axes of "
                                 "(batch, steps, channels) or (batch, height, width, channels) by whole factors "
                                 "(UpSampling1D/2D)")
        repeats = [int(by_axis[a]) for a in range(rank - 2)]
        if repeats == [1] * (rank - 2):
            return self._alias(node, value)
        layer = UpSampling1D(repeats[0]) if rank == 3 else UpSampling2D(tuple(repeats))
        kt = self._layer(node, layer, [value.kt])
        self._set(node, _Value(kt, _arange(kt.sample_shape).transpose(p)))

    # -- normalisation -----------------------------------------------------------------------
    def _channel_axis(self, node, value: _Value, axis: int) -> tuple[_Value, int]:
        """`value` (made plain if it is not a transpose of its clnet tensor) and the Keras axis
        (counting the batch; -1 for the last) of the clnet tensor that ONNX sample axis `axis` is."""
        p = value.axes()
        if p is None:
            value, p = _Value(self._plain(value, None, node), _arange(value.shape)), tuple(range(len(value.shape)))
        return value, -1 if p[axis] == len(p) - 1 else p[axis] + 1

    def _epsilon(self, epsilon) -> float:
        """A stored epsilon (a numpy scalar: attributes are float32) as clnet's. clnet's float64
        export folds epsilon into the variance and writes 0, which clnet's layers (epsilon > 0)
        take as the smallest normal number: adding it changes no variance."""
        return _number(epsilon) if epsilon > 0 else float(np.finfo(self.dtype).tiny)

    def _op_batchnormalization(self, node):
        from ..layers import BatchNormalization
        if self._attribute(node, "training_mode", 0) or any(self.readers[o] for o in node.outputs[1:] if o):
            raise _misused(node, "training_mode=1; clnet reads BatchNormalization in its inference form")
        value = self._value(node, node.inputs[0])
        gamma, beta, mean, variance = (self._constant(node, name, what) for name, what in
                                       zip(node.inputs[1:5], ("scale", "bias", "mean", "variance")))
        value, axis = self._channel_axis(node, value, 0)
        layer = BatchNormalization(axis=axis, epsilon=self._epsilon(np.float32(self._attribute(node, "epsilon", 1e-5))))
        kt = self._layer(node, layer, [value.kt], [gamma, beta, mean, variance])
        self._set(node, _Value(kt, value.index))

    def _op_layernormalization(self, node):
        if any(self.readers[o] for o in node.outputs[1:] if o):
            raise _misused(node, "its Mean or InvStdDev output is read; clnet's LayerNormalization returns the "
                                 "normalised tensor only")
        value = self._value(node, node.inputs[0])
        rank = len(value.shape) + 1
        axis = self._attribute(node, "axis", -1) % rank
        if axis == 0 or axis != rank - 1 and any(n != 1 for n in value.shape[axis:]):
            raise _misused(node, f"axis={self._attribute(node, 'axis', -1)} normalises axes {list(range(axis, rank))} "
                                 f"of {(None, *value.shape)} together; clnet's LayerNormalization normalises one axis")
        gamma = self._constant(node, node.inputs[1], "scale")
        beta = self._constant(node, node.inputs[2], "bias") if len(node.inputs) > 2 and node.inputs[2] else None
        self._layer_norm(node, value, axis, np.float32(self._attribute(node, "epsilon", 1e-5)), gamma, beta)

    def _op_layernorm_pattern(self, node):
        axis, epsilon, gamma, beta = node.params
        value = self._value(node, node.inputs[0])
        rank = len(value.shape) + 1
        if axis % rank == 0:
            raise _misused(node, "it normalises over the batch axis; clnet's LayerNormalization normalises a "
                                 "sample axis")
        self._layer_norm(node, value, axis % rank, epsilon, gamma, beta)

    def _layer_norm(self, node, value: _Value, axis: int, epsilon, gamma, beta):
        from ..layers import LayerNormalization
        vectors = [self._along(node, c, value.shape, axis - 1, what) for c, what in ((gamma, "scale"), (beta, "bias"))
                   if c is not None]
        value, keras_axis = self._channel_axis(node, value, axis - 1)
        layer = LayerNormalization(axis=keras_axis, epsilon=self._epsilon(epsilon), center=beta is not None,
                                   scale=gamma is not None)
        kt = self._layer(node, layer, [value.kt], vectors)
        self._set(node, _Value(kt, value.index))

    def _along(self, node, constant, shape, axis: int, what: str) -> np.ndarray:
        """A constant broadcast over samples of `shape` that varies along `axis` only, as a vector."""
        try:
            full = np.broadcast_to(constant, (1, *shape))[0]
        except ValueError:
            raise _misused(node, f"its {what} has shape {constant.shape}, which does not broadcast to samples of "
                                 f"shape {shape}") from None
        rows = np.moveaxis(full, axis, -1).reshape(-1, shape[axis])
        if np.any(rows != rows[:1]):
            raise _misused(node, f"its {what} of shape {constant.shape} varies along axes other than {axis + 1}; "
                                 "clnet's LayerNormalization has one weight per feature of the normalised axis")
        return rows[0].copy()

    # -- sequences: Embedding, PositionEmbedding, recurrent layers, attention -------------------
    def _op_embedding_pattern(self, node):
        """Gather(table, ids) (see Patterns._embedding): an Embedding of the ids, which clnet
        carries in its float type."""
        from ..layers import Embedding
        table = node.params  # (input_dim, output_dim)
        kt = self._plain(self._value(node, node.inputs[0], "ids"), None, node)
        kt = self._layer(node, Embedding(*table.shape), [kt], [table])
        self._set(node, _Value(kt, _arange(kt.sample_shape)))

    def _op_repeatvector_pattern(self, node):
        """Tile(Unsqueeze(x, axes=[1]), [1, n, 1]) (see Patterns._repeat_vector): a RepeatVector(n)."""
        from ..layers import RepeatVector
        kt = self._plain(self._value(node, node.inputs[0]), None, node)
        kt = self._layer(node, RepeatVector(node.params), [kt])
        self._set(node, _Value(kt, _arange(kt.sample_shape)))

    def _op_positionembedding_pattern(self, node):
        """Expand(table, Shape(x)) (see Patterns._position_embedding): a PositionEmbedding of x
        whose sequence_length is the rows in the file (clnet's export keeps the ones x's length
        uses)."""
        from ..layers import PositionEmbedding
        table = node.params  # (positions, features)
        value = self._value(node, node.inputs[0])
        if value.shape[-2:] != table.shape:
            raise _misused(node, f"it expands a table of shape {table.shape} to samples of shape {value.shape}; "
                                 "clnet reads Expand as a PositionEmbedding: one row per position of (..., positions, "
                                 "features)")
        kt = self._layer(node, PositionEmbedding(table.shape[0]), [self._plain(value, None, node)], [table])
        self._set(node, _Value(kt, _arange(kt.sample_shape)))

    def _recurrent_form(self, node, op: str) -> list[dict]:
        """The arguments of the clnet layer for each direction of an ONNX RNN, LSTM or GRU node
        (a bidirectional one: the forward direction's, then the backward's), or an error naming
        what no clnet layer computes."""
        from .. import activations
        direction = self._attribute(node, "direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise _misused(node, f"direction={direction!r}; ONNX's recurrent ops run 'forward', 'reverse' or "
                                 "'bidirectional'")
        if self._attribute(node, "clip", None) is not None:
            raise _misused(node, f"clip={self._attribute(node, 'clip', None)}; clnet's recurrent layers do not clip")
        if self._attribute(node, "input_forget", 0):
            raise _misused(node, "input_forget=1; clnet's LSTM has separate input and forget gates")
        if op == "GRU" and not self._attribute(node, "linear_before_reset", 0):
            raise _misused(node, "linear_before_reset=0; clnet's GRU is Keras's reset_after=True, "
                                 "linear_before_reset=1 (PyTorch's nn.GRU exports so)")
        directions = 2 if direction == "bidirectional" else 1
        alphas = iter(self._attribute(node, "activation_alpha", []))
        betas = iter(self._attribute(node, "activation_beta", []))
        functions = []
        for name in self._attribute(node, "activations", RECURRENT_DEFAULTS[op] * directions):
            name = name.decode() if isinstance(name, bytes) else name
            if name not in RECURRENT_ACTIVATIONS:
                raise _misused(node, f"activation {name}; clnet's recurrent layers take "
                                     f"{', '.join(RECURRENT_ACTIVATIONS)}")
            params = {"Affine": lambda: {"a": _number(np.float32(next(alphas, 1.0))),
                                         "b": _number(np.float32(next(betas, 0.0)))},
                      "LeakyRelu": lambda: {"a": _number(np.float32(next(alphas, 0.01)))}}.get(name, dict)()
            functions.append(activations.get(RECURRENT_ACTIVATIONS[name], **params))
        count = len(RECURRENT_DEFAULTS[op])
        if len(functions) != count * directions:
            raise _misused(node, f"it lists {len(functions)} activations; each of its {directions} direction(s) "
                                 f"takes {count}")
        forms = []
        for first in range(0, len(functions), count):
            functions_d = functions[first:first + count]
            if op == "LSTM" and functions_d[1].get_config() != functions_d[2].get_config():
                raise _misused(node, f"activations g={functions_d[1]!r} and h={functions_d[2]!r} differ; clnet's "
                                     "LSTM applies its one activation to both")
            form = {"activation": functions_d[0] if op == "RNN" else functions_d[1]}
            if op != "RNN":
                form["recurrent_activation"] = functions_d[0]
            forms.append(form)
        return forms

    def _op_rnn(self, node):
        """A recurrent op the pattern did not find (see Patterns._recurrent): errors for what
        clnet's layers do not compute first, then for the form."""
        self._recurrent_form(node, node.op)
        raise _misused(node, f"its input X {node.inputs[0]!r} is not a Transpose(1, 0, 2) of a batch-first tensor "
                             f"(nor is layout=1); clnet reads {node.op} on (batch, steps, features) as clnet and "
                             "torch.onnx.export (batch_first=True) write it")

    _op_lstm = _op_gru = _op_rnn

    def _initial_states(self, node, op: str, roles: dict, states: dict, directions: int) -> list:
        """The op's initial states (see Patterns._recurrent) as batch-first clnet tensors, each
        direction's h (and c) in turn, as Bidirectional takes them; none where they are zeros."""
        given = {}
        for role in ("initial_h", "initial_c")[:1 + (op == "LSTM")]:
            name = roles.get(role)
            zeros = not name or name in self.constants and not np.any(self.constants[name])
            if not zeros or len(states.get(role, ())) not in (0, directions):
                raise _misused(node, f"its {role} is given; clnet's recurrent layers start from zero states or "
                                     "from a call's initial_state, a (batch, units) tensor of the graph given as "
                                     "Reshape(state, [1, -1, units]) or Unsqueeze(state, 0) (a bidirectional op: "
                                     "one for each direction, joined by a Concat along axis 0)")
            if role in states:
                given[role] = [self._plain(self._value(node, name), None, node) for name in states[role]]
        if len(given) == 1 and op == "LSTM":
            raise _misused(node, "only one of its initial_h and initial_c is given; clnet's LSTM takes both or none")
        return [kts[d] for d in range(directions) for kts in given.values()]

    def _op_recurrent_pattern(self, node):
        """ONNX's RNN, LSTM or GRU (see Patterns._recurrent) as SimpleRNN, LSTM or GRU, and with
        direction="bidirectional" as Bidirectional of two such layers, each direction's
        activations, weights and bias its layer's: W, R in Keras's gate order and layout; the
        input and recurrent biases summed (GRU: Keras's two rows, as reset_after=True keeps
        them); go_backwards where a direction reads the input from its end (clnet writes a
        reversing Slice before the op; reverse, the backward direction). Its outputs Y, Y_h and
        Y_c are time-major: they are kept as _Pending until the nodes reading them bring the batch
        axis first, and a layer is made then for each (return_sequences, merge_mode) read (see
        _placed): return_sequences where more than the final states are read; merge_mode
        "concat" where both directions are read side by side, a Reduce's over them, None where
        one is read. A direction's final state read beside other reads (Y_h beside Y, as
        PyTorch's `y, (h, c) = lstm(x)` and clnet's return_sequences with return_state; a
        direction's Y_h beside a merge of both), and an LSTM's Y_c, are states of a layer with
        return_state."""
        from ..layers import GRU, LSTM, Bidirectional, SimpleRNN
        op, roles, states = node.params
        forms = self._recurrent_form(node, op)
        directions = len(forms)
        for role in ("sequence_lens", "P"):
            if roles.get(role):
                raise _misused(node, f"its input {role} is given; clnet's {op} has "
                                     f"{'no peepholes' if role == 'P' else 'every sample run every step'}")
        initial = self._initial_states(node, op, roles, states, directions)
        w, r = (self._constant(node, roles[role], role) for role in ("W", "R"))  # (directions, gates * units, ...)
        b = self._constant(node, roles["B"], "B") if roles.get("B") else None     # (directions, 2 * gates * units)
        units = self._attribute(node, "hidden_size", r.shape[-1])
        gates = {"RNN": 1, "LSTM": 4, "GRU": 3}[op]
        value = self._value(node, roles["X"])
        if w.shape[0] != directions or len(value.shape) != 2 or w.shape[1:] != (gates * units, value.shape[1]):
            raise _misused(node, f"its W has shape {w.shape} for samples of shape {value.shape}; clnet reads "
                                 f"{(directions, gates * units, value.shape[-1])} on (batch, steps, features)")
        # The clnet step the op reads at each of its steps: the input as it is, or reversed.
        steps, features = value.shape
        taken = value.index[:, 0] // features
        if value.kt.sample_shape == value.shape and np.array_equal(value.index, _arange(value.shape)[taken]):
            kt = value.kt
        else:
            kt, taken = self._plain(value, None, node), np.arange(steps)
        if not np.array_equal(taken, np.arange(steps)) and not np.array_equal(taken, np.arange(steps)[::-1]):
            raise _misused(node, "it reads its input's steps in an order that is neither forward nor backward")
        reverse = self._attribute(node, "direction", "forward") == "reverse"
        # Whether each direction's layer reads the input from its last step: one running forward
        # over a reversed input does, one running backward over it does not.
        go_backwards = [bool(taken[0] != 0) != (reverse or d == 1) for d in range(directions)]
        cls = {"RNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU}[op]
        use_bias = [b is not None and bool(np.any(b[d])) for d in range(directions)]
        made = {}

        def make(return_sequences: bool, merge: str | None) -> list:
            """The outputs of the layer for reads of (return_sequences, merge_mode), made once."""
            if (return_sequences, merge) not in made:
                layers = [cls(units, **form, use_bias=bias, return_sequences=return_sequences,
                              return_state=return_state, go_backwards=backwards)
                          for form, bias, backwards in zip(forms, use_bias, go_backwards)]
                order = layers[0]._onnx_node()[1]  # ONNX's gate blocks: Keras's gates in ONNX's order
                keras = lambda m: np.concatenate([m[..., order.index(g) * units:(order.index(g) + 1) * units]
                                                  for g in range(gates)], axis=-1)
                weights = []  # each direction's: Bidirectional's forward layer's, then the backward's
                for d, bias in enumerate(use_bias):
                    weights += [keras(w[d].T), keras(r[d].T)]  # (features, gates * units), (units, gates * units)
                    if bias:
                        bias_w, bias_r = keras(b[d, :gates * units]), keras(b[d, gates * units:])
                        weights.append(np.stack([bias_w, bias_r]) if op == "GRU" else bias_w + bias_r)
                layer = layers[0] if directions == 1 else Bidirectional(layers[0], merge, backward_layer=layers[1])
                outputs = self._layer(node, layer, [kt, *initial], weights)
                made[return_sequences, merge] = outputs if isinstance(outputs, list) else [outputs]
            return made[return_sequences, merge]

        def take(return_sequences: bool, merge: str | None, direction: int | None, output: int):
            """The layer output a read of the op's output `output` is (see _placed): a direction's
            final state where the layer has return_state, else a (merged) output."""
            if direction is None and output == 2:
                raise _misused(node, "its Y_c is read with both directions together; clnet's Bidirectional "
                                     "gives each direction's last cell state apart (return_state)")
            if return_state and not return_sequences and direction is not None:
                # The states of the layer the other reads make (every layer gives the same states).
                return_sequences, merge = planned[0] if planned else next(iter(made), (False, None))
                merged = 2 if directions == 2 and merge is None else 1  # the layer's outputs before its states
                return make(return_sequences, merge)[merged + direction * cls.state_count + (output == 2)]
            return make(return_sequences, merge)[direction if merge is None else 0]

        layout = self._attribute(node, "layout", 0)
        pending = {}
        for i, name in enumerate(node.outputs[:3]):  # Y (steps, directions, batch, units), Y_h, Y_c (directions, ...)
            if not name or not self.readers[name]:
                continue
            axes = ("step", "direction", "batch", "units") if i == 0 else ("direction", "batch", "units")
            if layout:  # batch first
                axes = ("batch", *(a for a in axes if a != "batch"))
            sizes = {"step": steps, "direction": directions, "batch": PROBE, "units": units}
            index = _arange([sizes[a] for a in axes])
            where = dict(zip(axes, np.unravel_index(index.ravel(), index.shape)))
            if i:
                where["step"], where["final"] = np.full(index.size, steps - 1), np.ones(index.size, bool)
            else:  # a direction running backward ends at Y's first step
                where["final"] = where["step"] == np.where(reverse | (where["direction"] == 1), 0, steps - 1)
                if reverse:  # its layer (go_backwards) writes the steps in the order it runs them
                    where["step"] = steps - 1 - where["step"]
            pending[name] = _Pending(node, index, where, i, take)
        # How the outputs are read, looked ahead so that the layer gets return_state where final
        # states are read beside other reads. (Y beside Y_h counts also where Y's reads cannot be
        # followed yet: a Reshape to a shape computed from a Shape, as torch's dynamo exporter writes.)
        reads = [self._placed(view)[:3] for name, p in pending.items() for view in self._views(name, p)]
        finals = [not return_sequences and direction is not None for return_sequences, _, direction in reads]
        planned = [read[:2] for read, final in zip(reads, finals) if not final]
        outputs_read = {p.output for p in pending.values()}
        return_state = 2 in outputs_read or {0, 1} <= outputs_read or any(finals) and bool(planned)
        for name, p in pending.items():
            self._settle(name, p)

    @staticmethod
    def _placed(pending: _Pending) -> tuple:
        """What a read of a recurrent op's output whose batch axis is first is: (return_sequences,
        whether it reads more than final states; merge_mode, "concat" where it reads both
        directions, a Reduce's merge where one was read, else None; the one direction it reads,
        None where it merges them; each element's flat position in that layer output)."""
        where = pending.where
        row = {key: values[pending.index[0]] for key, values in where.items()}  # the first sample's
        directions = np.unique(row["direction"])
        merge = pending.merge or ("concat" if len(directions) == 2 else None)
        return_sequences = not np.all(row["final"])
        units, concat = int(where["units"].max()) + 1, merge == "concat"
        position = row["units"] + concat * units * row["direction"]
        if return_sequences:
            position = position + row["step"] * (1 + concat) * units
        return return_sequences, merge, None if merge else int(directions[0]), position

    def _settle(self, name: str, pending: _Pending):
        """Store a recurrent op's output, or a view of it: as a _Value once each row of its
        index holds one sample's elements (the batch axis is first), else as _Pending."""
        if not pending.batch_first():
            self.values[name] = pending
            return
        *read, position = self._placed(pending)
        self.values[name] = _Value(pending.take(*read, pending.output), position)

    def _views(self, name: str, pending: _Pending) -> list[_Pending]:
        """The views that the reads of a recurrent op's output `name` (`pending`) settle on (see
        _settle): a look ahead through the nodes after the op, before its layer is made."""
        if pending.batch_first():
            return [pending]
        views = []
        for node in self.nodes:
            view = self._view(node, pending) if node.inputs[:1] == [name] else None
            if view is not None:
                views += self._views(node.outputs[0], view)
        return views

    def _view(self, node, pending: _Pending) -> _Pending | None:
        """What `node`, reading a recurrent op's output (or a view of it) as its first input,
        makes of it: another view where it moves the elements (a view op) or merges the
        directions (a Reduce over them); None for anything else."""
        if node.op in DIRECTION_MERGES:
            return self._merged(node, pending)
        if node.op in VIEW_OPS and all(name in self.constants for name in node.inputs[1:] if name):
            return pending.moved(self._moved(node, pending.index))
        return None

    def _merged(self, node, pending: _Pending) -> _Pending:
        """A ReduceSum, ReduceMean or ReduceProd over the direction axis of a bidirectional op's Y
        or Y_h (Bidirectional's merge_mode "sum", "ave", "mul"): the forward direction's elements
        stand for both, final where both are."""
        index, where = pending.index, pending.where
        axes = self._axes_input(node) or []
        if len(axes) == 1 and not pending.merge and index.shape[axes[0] % index.ndim] == 2:
            axis = axes[0] % index.ndim
            forward, backward = np.take(index, 0, axis), np.take(index, 1, axis)
            if np.all(where["direction"][forward] == 0) and np.all(where["direction"][backward] == 1) and all(
                    np.array_equal(where[key][forward], where[key][backward]) for key in ("step", "batch", "units")):
                final = where["final"].copy()
                final[forward] &= where["final"][backward]
                kept = np.expand_dims(forward, axis) if self._attribute(node, "keepdims", 1) else forward
                return pending.moved(kept, {**where, "final": final}, DIRECTION_MERGES[node.op])
        raise _misused(node, f"it reduces axes {axes} of a recurrent op's output; clnet reads {node.op} there only "
                             "over the direction axis of a bidirectional op's Y or Y_h, as Bidirectional's "
                             f"merge_mode={DIRECTION_MERGES[node.op]!r}")

    def _read_pending(self, node, name: str, pending: _Pending):
        """A node reading a recurrent op's output `name` whose batch axis is not first yet: a
        view op (moves the index), a Reduce over the directions (see _merged), a Shape (the
        batch axis, where the elements of the samples lie apart, reads as the dynamic batch),
        else an error."""
        index, where = pending.index, pending.where
        if node.op == "Shape":
            varies = where["batch"][index]
            axes = [a for a in range(varies.ndim) if np.any(np.diff(varies, axis=a))]
            if len(axes) != 1:
                raise _misused(node, "it reads the shape of a recurrent op's output whose batch axis is merged with "
                                     "another")
            shape = np.array(index.shape, np.int64)
            shape[axes[0]] = BATCH
            start, end = self._attribute(node, "start", 0), self._attribute(node, "end", None)
            self.constants[node.outputs[0]] = shape[start:end]
            return
        view = self._view(node, pending) if node.inputs[0] == name else None
        if view is not None:
            return self._settle(node.outputs[0], view)
        stacked = node.op in ("RNN", "LSTM", "GRU", "Recurrent_pattern")
        raise _misused(pending.node, f"its output is read by {_label(node)} " + (
            "time-major (PyTorch's num_layers > 1); clnet reads one layer per op: stack num_layers=1 layers"
            if stacked else "before its batch axis is first again; clnet reads Y or Y_h through Transpose, Squeeze, "
                            "Unsqueeze, Reshape and Gather that bring it first (and a bidirectional op's through "
                            "ReduceSum, ReduceMean or ReduceProd over its directions)"))

    def _moved(self, node, index: np.ndarray) -> np.ndarray:
        """`index` (whole tensors, the batch axis included) through the view op `node`."""
        if node.op == "Transpose":
            return index.transpose(self._attribute(node, "perm", None))
        if node.op == "Squeeze":
            axes = self._axes_input(node)
            return np.squeeze(index, None if axes is None else tuple(axes))
        if node.op == "Unsqueeze":
            axes = self._axes_input(node)
            for axis in sorted(a % (index.ndim + len(axes)) for a in axes):
                index = np.expand_dims(index, axis)
            return index
        if node.op == "Gather":
            indices = self._constant(node, node.inputs[1], "indices")
            return np.take(index, indices, axis=self._attribute(node, "axis", 0))
        if node.op == "Reshape":
            target = [PROBE if s == BATCH else int(s) for s in self._constant(node, node.inputs[1], "shape")]
            if not self._attribute(node, "allowzero", 0):
                target = [index.shape[i] if s == 0 else s for i, s in enumerate(target)]
            try:
                return index.reshape(target)
            except ValueError:
                raise _misused(node, f"it reshapes {index.shape} to {target}") from None
        return index  # Identity

    def _op_attention_pattern(self, node):
        """clnet's MultiHeadAttention (see Patterns._attention), its kernels back in Keras's
        layout: (features, heads, dim), (heads, dim) and (heads, value_dim, output)."""
        from ..layers import MultiHeadAttention
        p = node.params
        query, value, key, *mask = (self._plain(self._value(node, name), None, node) for name in node.inputs)
        heads, key_dim, value_dim, weights = p["heads"], p["key_dim"], p["value_dim"], p["weights"]
        use_bias = len(weights) == 8
        kernels, biases = (weights[0::2], weights[1::2]) if use_bias else (weights, [])
        arrays = []
        for i, dim in enumerate((key_dim, key_dim, value_dim)):  # query, key, value
            arrays += [kernels[i].reshape(-1, heads, dim)] + ([biases[i].reshape(heads, dim)] if use_bias else [])
        output = kernels[3]
        arrays += [output.reshape(heads, value_dim, -1)] + biases[3:]
        layer = MultiHeadAttention(heads, key_dim, value_dim=value_dim, use_bias=use_bias,
                                   output_shape=None if output.shape[1] == query.sample_shape[-1] else output.shape[1])
        try:
            kt = layer(query, value, key=key, attention_mask=mask[0] if mask else None, use_causal_mask=p["causal"])
        except (TypeError, ValueError) as error:
            raise _misused(node, str(error)) from None
        self.weights.append((layer, arrays))
        self._set(node, _Value(kt, _arange(kt.sample_shape)))


def _set_activation(layer, activation) -> None:
    """Give a layer made while reading (not built yet) another activation."""
    layer.activation = layer.output_activation = activation


def _label(node) -> str:
    proto = node.proto if isinstance(node, Node) else node
    return f"{proto.name or '(unnamed)'} ({proto.op_type})"


def _unsupported(node) -> ValueError:
    domain = f" of domain {node.domain!r}" if node.domain not in ("", "ai.onnx") else ""
    return ValueError(f"ONNX node {node.name or '(unnamed)'!r} uses the op {node.op_type!r}{domain}, which "
                      f"clnet.onnx.load does not support; supported ops: {', '.join(SUPPORTED_OPS)}")


def _misused(node, why: str) -> ValueError:
    """An error about `node` (or about what a string names)."""
    return ValueError(f"{node if isinstance(node, str) else 'ONNX node ' + _label(node)}: {why}")
