"""ONNX export and import: every layer class exports, every file passes onnx.checker's full check,
onnxruntime's outputs match model.predict (random inputs, and Fashion-MNIST for the MLP and the CNN,
batch 1 and 7 from one file), export -> load -> predict is identical for every layer class (the
same layers and weights; graphs, attention and the tiny GPT too, which also trains once loaded),
models exported by PyTorch (an MLP, a channels-first CNN with BatchNorm and a residual Add,
LayerNorm at opsets 14 and 17, nn.Embedding with nn.LSTM or nn.GRU) and Keras load, predict as the
framework did and fine-tune; every bad input and every recurrent form clnet cannot compute is a
clear error, and clnet works without onnx installed.

"Within 1e-5 relative" is measured against the output's scale: |got - want| <= 1e-5 max|want|,
so that an element near zero (which the products reach by cancellation, summed in another
order than onnxruntime sums) does not demand more than float32 holds."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import clnet
from clnet import ops
from clnet.activations import Activation as ActivationFunction, ReLU as ReLUFunction
from clnet.layers import (Activation, Add, AveragePooling1D, AveragePooling2D, BatchNormalization, Concatenate, Conv1D,
                          Embedding, PositionEmbedding,
                          Conv2D, Dense, Dropout, Flatten, GlobalAveragePooling1D, GlobalAveragePooling2D,
                          GlobalMaxPooling1D, GlobalMaxPooling2D, Input, Lambda, Layer, LayerNormalization,
                          LocallyConnected1D, MaxPooling1D, MaxPooling2D, MultiHeadAttention, Multiply, Reshape, Softmax,
                          ZeroPadding2D, SimpleRNN, LSTM, GRU, Bidirectional, ELU, LeakyReLU, Permute, ReLU, RepeatVector)
from clnet.layers import GaussianNoise, PReLU, SpatialDropout1D, SpatialDropout2D, SpatialDropout3D
from clnet.layers import Cropping1D, Cropping2D, UpSampling1D, UpSampling2D
from clnet.onnx.importer import SUPPORTED_OPS
from clnet.ops.elementwise import broadcast
from clnet.ops.fusion import FusedElementwise

DATA = Path(__file__).parent / "data"
RTOL = {np.float32: 1e-5, np.float64: 1e-12}


def unnamed(config):
    """A layer's config without its name, nor its inner layers' (names are made per session)."""
    if isinstance(config, dict):
        return {k: unnamed(v) for k, v in config.items() if k != "name"}
    return [unnamed(v) for v in config] if isinstance(config, list) else config


def assert_close(got, want, rtol):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


# onnxruntime's CPU provider has no double kernels for Erf (GELU), Softplus, Elu, Conv, AveragePool, RNN, LSTM, GRU and
# Resize;
# float64 files that use them are run by onnx's own reference evaluator, which implements every op of the standard,
# with its Erf (computed in float32 by onnx 1.23's evaluator) replaced by a double one.
NO_DOUBLE_KERNEL = {"AveragePool", "Conv", "Elu", "Erf", "Softplus", "RNN", "LSTM", "GRU", "Resize"}


def run_onnx(path, x):
    """The file's output for `x`, its input "input", or a list, its inputs "input_0", "input_1", ...
    (a model of several inputs), on onnxruntime, or on onnx's reference evaluator in float64 where
    onnxruntime has no double kernel for one of its ops."""
    feeds = {f"input_{i}": part for i, part in enumerate(x)} if isinstance(x, list) else {"input": x}
    proto = onnx.load(path)
    if next(iter(feeds.values())).dtype == np.float64 and NO_DOUBLE_KERNEL & {n.op_type for n in proto.graph.node}:
        import math
        from onnx.reference.ops import op_erf

        class Erf(op_erf.Erf):  # the evaluator finds an op's implementation by its class name
            def _run(self, x):
                return (np.vectorize(math.erf, otypes=[x.dtype])(x),)

        return ReferenceEvaluator(proto, new_ops=[Erf]).run(["output"], feeds)[0]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the machine is shared
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(["output"], feeds)[0]


def check_file(model, path, rng, dtype):
    """The file passes the full check; onnxruntime matches predict at batch 1 and 7; loading it
    back gives the same layers, the same weights and the same predictions, bit for bit."""
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    first = next((layer for layer in model.layers if not isinstance(layer, Input)), None)
    x = (rng.integers(0, first.input_dim, (7, *model.input_shape)) if isinstance(first, Embedding)  # token ids
         else rng.normal(size=(7, *model.input_shape))).astype(dtype)
    want = model.predict(x)
    for rows in (1, 7):
        assert_close(run_onnx(path, x[:rows]), want[:rows], RTOL[dtype])
    loaded = clnet.onnx.load(path)
    assert loaded.dtype == dtype
    assert type(loaded) is clnet.Sequential
    assert structure(loaded) == structure(model)
    for got, expected in zip(weights(loaded), weights(model), strict=True):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(loaded.predict(x), want)


def structure(model):
    """Each layer's class and config but its name, as the ONNX file keeps them: Activation("softmax")
    is a Softmax layer, Activation("relu") a ReLU, Activation("lrelu", a) a LeakyReLU(a) (a >= 0),
    Activation("elu", a) an ELU(a) (the layers the importer makes of a standalone activation); an
    identity Activation, Dropout, SpatialDropout1D/2D/3D, GaussianNoise and Lambda, which export to
    nothing, are left out; a Reshape's target shape has its -1 worked out; BatchNormalization
    always has a scale and a shift (the op's), and a float64 one's epsilon is in its variance (see
    weights); a PositionEmbedding's table has the rows its input's length uses; clnet.ops's layers
    are what the importer reads their nodes as (see op_forms)."""
    layers = []
    for layer, kind, config in ((layer, kind, config) for layer in model.layers
                                for kind, config in op_forms(layer, model.dtype)):
        if kind in ("Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
                    "Lambda") or \
                kind == "Activation" and config == {"activation": "linear", "a": 1.0, "b": 0.0}:
            continue
        if kind == "Activation" and config == {"activation": "softmax"}:
            kind, config = "Softmax", {"axis": -1}
        if kind == "Activation" and (config["activation"] in ("relu", "elu") or
                                     config["activation"] == "lrelu" and config["a"] >= 0):
            kind, config = {"relu": ("ReLU", {"max_value": None, "negative_slope": 0.0, "threshold": 0.0}),
                            "lrelu": ("LeakyReLU", {"negative_slope": config.get("a")}),
                            "elu": ("ELU", {"alpha": config.get("a")})}[config["activation"]]
        if kind == "Reshape":
            config["target_shape"] = list(layer.output_shape)
        if kind == "BatchNormalization":
            config.update(center=True, scale=True)
            if model.dtype == np.float64:
                del config["epsilon"]
        if kind == "PositionEmbedding":
            config["sequence_length"] = layer.input_shape[-2]
        layers.append((kind, config))
    return layers


def op_forms(layer, dtype) -> list[tuple[str, dict]]:
    """A layer's (class name, config but its name); for clnet.ops's layers, those the importer
    makes of their ONNX nodes (a layer of the same computation, bit for bit), their constants in
    the model's float type (as the file holds them):
    - ShapeView: a Reshape or Flatten (the importer's layers for Reshape, Squeeze, Unsqueeze);
    - FusedElementwise: the Elementwise calls it was fused from (ONNX has no fused op), read as below;
    - Elementwise: add and multiply of two tensors of one shape are the Add and Multiply merges
      (the ONNX Add and Mul of two computed tensors); add, subtract, multiply by a scalar constant a
      Linear(a, b) Activation (an activation's parameters); tanh, sigmoid and the exact gelu
      Activation layers, relu a ReLU and clip(0, max) a ReLU(max_value) (the layers the importer
      makes of those ONNX activations); power(x, 2) is square (clnet writes square as Pow(x, 2));
    - MatMul of a symbolic tensor by a constant matrix: a Dense without bias (MatMul(x, W));
    - Reduction: mean or max over every axis but the batch and the last, the global pooling
      layer (ReduceMean, ReduceMax over the spatial axes); its axes as they are, not negative;
    - Take: its indices counted from the start (as they are written before opset 11);
    - Concatenate along the last axis: axis -1 (the importer's)."""
    kind = type(layer).__name__
    config = {} if kind == "Lambda" else unnamed(layer.get_config())  # (a Lambda has no config)
    shapes = [t.sample_shape for t in layer.inbound_calls[0].inputs] if layer.inbound_calls else []
    if kind == "ShapeView":
        if tuple(layer.shape) == shapes[0]:
            return []
        return [("Flatten", {})] if len(layer.shape) == 1 else [("Reshape", {"target_shape": list(layer.shape)})]
    if kind == "FusedElementwise":
        forms, nodes = [], []
        for node in layer.nodes:
            args = [layer._shape(arg, shapes, nodes) for arg in node["args"]]
            operands = [None if what in ("input", "node") else layer.constants_[k] if what == "constant" else
                        np.asarray(k) for what, k in node["args"]]
            nodes.append(broadcast(node["op"], args))
            forms += elementwise_form(node["op"], operands, args, node["a"], node["b"], dtype)
        return forms
    if kind == "Elementwise":
        full = iter((None, *s) for s in shapes)
        args = [next(full) if o is None else o.shape for o in layer.operands]
        return elementwise_form(layer.op, layer.operands, args, layer.a, layer.b, dtype)
    if kind == "MatMul":
        if layer.operands[0] is None and layer.operands[1] is not None and layer.operands[1].ndim == 2:
            return [("Dense", unnamed(Dense(layer.operands[1].shape[1], use_bias=False, name="d").get_config()))]
        config["operands"] = [None if o is None else np.asarray(o, dtype).tolist() for o in layer.operands]
    if kind == "Reduction" and layer.op in ("mean", "max") and len(shapes[0]) in (2, 3) and \
            sorted(layer.reduced_axes) == list(range(len(shapes[0]) - 1)):
        pooling = {"mean": {2: GlobalAveragePooling1D, 3: GlobalAveragePooling2D},
                   "max": {2: GlobalMaxPooling1D, 3: GlobalMaxPooling2D}}[layer.op][len(shapes[0])]
        return [(pooling.__name__, {"keepdims": layer.keepdims})]
    if kind == "Reduction":  # axis -1 is read back as the axis it is
        config["axis"] = [a + 1 for a in layer.reduced_axes]
    if kind == "Take":  # before opset 11, negative indices are written counted from the start
        config["indices"] = (layer.indices % shapes[0][layer.axis - 1 if layer.axis > 0 else layer.axis]).tolist()
    if kind == "Concatenate" and config["axis"] == len(shapes[0]):  # the last axis is read back as -1
        config["axis"] = -1
    return [(kind, config)]


def elementwise_form(op, operands, shapes, a, b, dtype) -> list[tuple[str, dict]]:
    """An elementwise op as the importer reads its nodes (see op_forms): `operands` None for a
    tensor, else a constant; `shapes` their full shapes."""
    tensors = [k for k, o in enumerate(operands) if o is None]
    scalar = len(operands) == 2 and len(tensors) == 1 and operands[1 - tensors[0]].size == 1
    c = float(np.asarray(operands[1 - tensors[0]], dtype).reshape(())) if scalar else None
    if op in ("add", "multiply") and len(tensors) == 2 and shapes[0] == shapes[1]:
        return [("Add" if op == "add" else "Multiply", {})]
    if scalar and op in ("add", "subtract", "multiply"):
        a, b = {"add": (1.0, c), "multiply": (c, 0.0),
                "subtract": (1.0, -c) if tensors == [0] else (-1.0, c)}[op]
        return [("Activation", {"activation": "linear", "a": a, "b": b})]
    if op in ("tanh", "sigmoid", "gelu_erf"):
        name = {"gelu_erf": "gelu"}.get(op, op)
        return [("Activation", unnamed(Activation(name, name="a").get_config()))]
    if op == "relu" or op == "clip" and a == 0 and b >= 0:
        return [("ReLU", {"max_value": None if op == "relu" else b, "negative_slope": 0.0, "threshold": 0.0})]
    if op == "power" and tensors == [0] and scalar and c == 2.0:
        op, operands = "square", [None]
    return [("Elementwise", {"op": op, "operands": [None if o is None else np.asarray(o, dtype).tolist()
                                                     for o in operands], "a": a, "b": b})]


def weights(model):
    """Every layer's weights as the ONNX file keeps them: BatchNormalization's scale and shift are
    there without center or scale (ones, zeros), and a float64 model's variance holds epsilon
    (clnet's float64 export adds it; the loaded layer's epsilon is float64's smallest normal
    number, which adds nothing)."""
    arrays = []
    for layer in model.layers:
        values = layer.get_weights()
        if isinstance(layer, BatchNormalization):
            *affine, mean, variance = values
            gamma = affine.pop(0) if layer.scale else np.ones_like(mean)
            beta = affine.pop(0) if layer.center else np.zeros_like(mean)
            values = [gamma, beta, mean, variance + layer.epsilon if model.dtype == np.float64 else variance]
        if isinstance(layer, PositionEmbedding):
            values = [values[0][:layer.input_shape[-2]]]
        arrays.extend(values)
    return arrays


def built(layers, shape, dtype=np.float32, seed=3):
    model = clnet.Sequential([Input(shape), *layers], floatx=np.dtype(dtype).name, seed=seed)
    model.build(shape)
    return model


# -- every layer class and every activation ------------------------------------------------------
# A layer class added later must bring its to_onnx and an entry here: (sample shape, layers after Input).
LAYER_EXAMPLES = {
    "Input": ((3, 5), lambda: []),
    "Flatten": ((2, 3, 5), lambda: [Flatten()]),
    "Dense": ((7,), lambda: [Dense(5, "tanh"), Dense(4, use_bias=False)]),
    # A standalone Activation("lrelu") loads as a LeakyReLU layer (see structure); tanh has none.
    "Activation": ((3, 5), lambda: [Activation("lrelu", a=0.2), Activation("tanh")]),
    "Softmax": ((3, 5), lambda: [Softmax(), Softmax(axis=1)]),   # along the last axis of a rank-3 tensor, then axis 1
    "Dropout": ((3, 5), lambda: [Dropout(0.5, noise_shape=(None, 1, 5)), Flatten(), Dense(4, "tanh")]),
    "SpatialDropout1D": ((3, 5), lambda: [SpatialDropout1D(0.5), Flatten(), Dense(4, "tanh")]),
    "SpatialDropout2D": ((3, 4, 2), lambda: [SpatialDropout2D(0.5), Flatten(), Dense(4, "tanh")]),
    "SpatialDropout3D": ((2, 3, 2, 3), lambda: [SpatialDropout3D(0.5, "channels_first"), Flatten(), Dense(4, "tanh")]),
    "GaussianNoise": ((3, 5), lambda: [GaussianNoise(0.5), Flatten(), Dense(4, "tanh")]),
    # PRelu with Keras's alpha as the slope: per element, one per channel, then one per (step, feature).
    "PReLU": ((4, 5, 3), lambda: [PReLU(), PReLU(shared_axes=[1, 2]), Dense(4), PReLU(shared_axes=2)]),
    # Weights are drawn anew after build (see test_layer_exports): moving statistics, gamma and
    # beta far from 0 and 1, so that the inference form is not the identity.
    "BatchNormalization": ((4, 5, 3), lambda: [BatchNormalization(), BatchNormalization(axis=1, center=False),
                                               BatchNormalization(axis=2, scale=False, epsilon=0.1)]),
    "LayerNormalization": ((4, 5, 3), lambda: [LayerNormalization(), LayerNormalization(axis=1, center=False),
                                               LayerNormalization(axis=2, scale=False, epsilon=0.1)]),
    "LocallyConnected1D": ((11, 3), lambda: [LocallyConnected1D(5, 4, strides=2, activation="tanh"),
                                             LocallyConnected1D(2, 2, use_bias=False)]),
    # 7x9 with stride 2 and 'same' (Keras's split: the extra padding after), an even kernel with
    # dilation, then 'valid' with softmax over the filters of every position.
    "Conv2D": ((7, 9, 3), lambda: [Conv2D(5, (4, 3), strides=2, padding="same", activation="relu"),
                                   Conv2D(4, 2, dilation_rate=(2, 3), padding="same", use_bias=False),
                                   Conv2D(3, (3, 2), activation="softmax")]),
    "Conv1D": ((11, 3), lambda: [Conv1D(5, 4, strides=2, padding="same", activation="swish"),          # 6 steps
                                 Conv1D(4, 3, padding="causal", dilation_rate=2, activation="tanh"),  # 6
                                 Conv1D(3, 3, dilation_rate=2, use_bias=False),                       # 2
                                 Conv1D(4, 2, strides=2, padding="causal"), Conv1D(2, 1, strides=2)]),
    "MaxPooling2D": ((7, 9, 3), lambda: [MaxPooling2D((2, 3), strides=2, padding="same"), MaxPooling2D()]),
    "AveragePooling2D": ((7, 9, 5), lambda: [AveragePooling2D((2, 4), strides=(2, 3), padding="same"),
                                             AveragePooling2D(2, strides=1)]),
    "MaxPooling1D": ((11, 3), lambda: [MaxPooling1D(2, padding="same"), MaxPooling1D(4, strides=1)]),
    "AveragePooling1D": ((11, 5), lambda: [AveragePooling1D(4, strides=2, padding="same"),
                                           AveragePooling1D(3, strides=1)]),
    "GlobalMaxPooling2D": ((5, 7, 3), lambda: [GlobalMaxPooling2D()]),
    "GlobalAveragePooling2D": ((5, 7, 3), lambda: [GlobalAveragePooling2D(keepdims=True)]),
    "GlobalMaxPooling1D": ((9, 5), lambda: [GlobalMaxPooling1D(keepdims=True)]),
    "GlobalAveragePooling1D": ((9, 5), lambda: [GlobalAveragePooling1D()]),
    "Reshape": ((6, 5), lambda: [Reshape((3, -1)), Reshape((5, 2, 3)), GlobalAveragePooling2D()]),
    "ZeroPadding2D": ((3, 5, 3), lambda: [ZeroPadding2D(((1, 2), (0, 3))), ZeroPadding2D(1), MaxPooling2D(3)]),
    # Slice, its ends counted from the end (-after, or INT64_MAX where nothing is cut after): read
    # back as a Cropping; Resize (nearest) by whole factors of the spatial axes: as an UpSampling.
    "Cropping1D": ((9, 3), lambda: [Cropping1D((2, 0)), Conv1D(2, 2), Cropping1D(1)]),
    "Cropping2D": ((7, 6, 3), lambda: [Cropping2D(((1, 2), (0, 3))), Conv2D(2, 2), Cropping2D((1, 0))]),
    "UpSampling1D": ((4, 3), lambda: [UpSampling1D(3), Conv1D(2, 2), UpSampling1D()]),
    "UpSampling2D": ((3, 2, 3), lambda: [UpSampling2D((2, 3)), Conv2D(2, 2), UpSampling2D((1, 2))]),
    # Unsqueeze + Tile, read back as one RepeatVector; Transpose, read back as a Permute where a
    # layer (the Dense) or the output needs the transposed tensor.
    "RepeatVector": ((5,), lambda: [Dense(4), RepeatVector(3), Dense(2, "tanh")]),
    "Permute": ((3, 4, 5), lambda: [Permute((3, 1, 2)), Dense(2, "tanh"), Permute((2, 1, 3))]),
    # Clip(0, max_value), Relu, the general Where form (Clip first: onnxruntime 1.32's Relu -> Clip
    # fusion fails on doubles); LeakyRelu (float64: PRelu); Elu standalone and fused into a Dense.
    "ReLU": ((3, 5), lambda: [ReLU(max_value=1.5), ReLU(), ReLU(0.4, negative_slope=0.2, threshold=0.1)]),
    "LeakyReLU": ((3, 5), lambda: [LeakyReLU(), LeakyReLU(0.05)]),
    "ELU": ((3, 5), lambda: [ELU(), Dense(4, "elu"), ELU(0.5)]),
    # Gather of the table, then Dense on (time, features): MatMul + Add, and MatMul alone.
    "Embedding": ((5,), lambda: [Embedding(11, 4), Dense(5, "tanh"), Dense(3, use_bias=False)]),
    # Slice of the table's first 3 of 6 rows, expanded to the input's shape.
    "PositionEmbedding": ((3, 4), lambda: [PositionEmbedding(6), Dense(2, "softmax")]),
    # ONNX's RNN, LSTM (gates reordered) and GRU (linear_before_reset) ops; go_backwards as a reversing Slice.
    # Default activations: float64 files run on onnx's reference evaluator, whose LSTM and GRU ignore the
    # activations attribute (test_recurrent_activation_exports checks the others with onnxruntime).
    "SimpleRNN": ((6, 7), lambda: [SimpleRNN(5, return_sequences=True, go_backwards=True),
                                   SimpleRNN(3, use_bias=False)]),
    "LSTM": ((6, 7), lambda: [LSTM(5, return_sequences=True), LSTM(3, go_backwards=True, use_bias=False),
                              Dense(2)]),
    "GRU": ((6, 7), lambda: [GRU(5, return_sequences=True, go_backwards=True), GRU(3, use_bias=False)]),
    # One bidirectional op each: concat as a Reshape of both directions (a backward layer of its own, without
    # bias, its outputs flipped into time order), sum/ave/mul as ReduceSum/ReduceMean/ReduceProd over them.
    "Bidirectional": ((6, 7), lambda: [
        Bidirectional(LSTM(5, return_sequences=True),
                      backward_layer=LSTM(5, return_sequences=True, go_backwards=True, use_bias=False)),
        Bidirectional(GRU(4, return_sequences=True), merge_mode="sum"),
        Bidirectional(SimpleRNN(4, return_sequences=True, use_bias=False), merge_mode="ave"),
        Bidirectional(GRU(3, return_sequences=True), merge_mode="mul"),
        Bidirectional(LSTM(3), merge_mode="sum")]),
}

# Every activation, with its defaults and with other parameters.
ACTIVATIONS = [("linear", {}), ("linear", {"a": 0.5, "b": -0.25}), ("sigmoid", {}), ("sigmoid", {"a": 2.0, "b": 0.5}),
               ("tanh", {}), ("relu", {}), ("lrelu", {}), ("lrelu", {"a": 0.1}), ("swish", {}), ("swish", {"b": 1.5}),
               ("gelu", {}), ("softplus", {}), ("elu", {}), ("elu", {"a": 0.5}), ("softmax", {})]


def test_every_layer_class_has_an_export_and_a_test():
    missing = sorted(name for name, cls in Layer.registry.items() if cls.to_onnx is Layer.to_onnx)
    assert not missing, f"layer classes without to_onnx: {missing}"
    untested = sorted(set(Layer.registry) - set(LAYER_EXAMPLES) - set(GRAPH_EXAMPLES) - set(ATTENTION_EXAMPLES)
                      - set(OP_EXAMPLES) - set(CONSTANT_EXAMPLES) - set(EXPORTED_ELSEWHERE))
    assert not untested, f"layer classes without an example in LAYER_EXAMPLES, GRAPH_EXAMPLES, ATTENTION_EXAMPLES " \
                         f"or OP_EXAMPLES: {untested}"


# Layers whose export is tested beside the rest of their tests: Masking needs padded steps in its
# data, and comes back as the ops it exports to.
EXPORTED_ELSEWHERE = {"Masking": "tests/test_masking.py::test_masking_exports_to_onnx"}


# Merge layers live in graphs, not in a Sequential stack: each example is a model of two inputs
# (x and z) with a shared Dense, so that the export walks calls rather than a list of layers.
def merged(merge, dtype):
    x, z = Input((4,), name="x"), Input((4,), name="z")
    shared = Dense(4, "tanh", name="shared")
    out = Dense(3, "softmax", name="head")(merge([shared(x), shared(z), x]))
    return clnet.Model([x, z], out, floatx=np.dtype(dtype).name, seed=2)


GRAPH_EXAMPLES = {"Add": lambda: Add(), "Multiply": lambda: Multiply(), "Concatenate": lambda: Concatenate()}


@pytest.mark.parametrize("name", sorted(GRAPH_EXAMPLES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_graph_exports(name, dtype, tmp_path, rng):
    """Merge layers and a shared layer: inputs input_0 and input_1, onnxruntime matches predict at
    batch 1 and 7; loaded back, a functional Model predicts the same, bit for bit, with the shared
    Dense as two Dense layers of the same weights (ONNX has no shared layers) and a Multiply of
    three as two Muls."""
    model = merged(GRAPH_EXAMPLES[name](), dtype)
    path = tmp_path / "graph.onnx"
    model.export(path)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == ["input_0", "input_1"]
    xs = [rng.normal(size=(7, 4)).astype(dtype) for _ in range(2)]
    want = model.predict(xs)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for rows in (1, 7):
        got = session.run(["output"], {"input_0": xs[0][:rows], "input_1": xs[1][:rows]})[0]
        assert_close(got, want[:rows], RTOL[dtype])
    loaded = clnet.onnx.load(path)
    assert type(loaded) is clnet.Model and loaded.dtype == dtype
    kinds = [type(layer).__name__ for layer in loaded.layers]
    merges = {"Add": ["Add"], "Multiply": ["Multiply", "Multiply"], "Concatenate": ["Concatenate"]}[name]
    assert sorted(kinds) == sorted(["Input", "Input", "Dense", "Dense", *merges, "Dense"])
    dense = [layer for layer in loaded.layers if isinstance(layer, Dense)]
    shared = next(layer for layer in model.layers if layer.name == "shared")
    for layer in dense[:2]:
        assert layer.activation.name == "tanh"
        for got, want_weight in zip(layer.get_weights(), shared.get_weights(), strict=True):
            np.testing.assert_array_equal(got, want_weight)
    np.testing.assert_array_equal(loaded.predict(xs), want)


# Attention takes several inputs too: self-attention with the causal mask (an additive
# initializer) in a residual block, and cross-attention with an explicit mask input (Where).
def self_attention(dtype):
    x = Input((5, 4), name="x")
    h = Add()([x, MultiHeadAttention(3, 2, value_dim=3, name="mha")(x, x, use_causal_mask=True)])
    return clnet.Model(x, Dense(3, "softmax")(Flatten()(h)), floatx=np.dtype(dtype).name, seed=2), (7, 5, 4)


def masked_cross_attention(dtype):
    q, v, mask = Input((3, 4), name="q"), Input((6, 5), name="v"), Input((3, 6), name="mask")
    out = MultiHeadAttention(2, 5, output_shape=2, name="mha")(q, v, attention_mask=mask)
    return clnet.Model([q, v, mask], out, floatx=np.dtype(dtype).name, seed=2), (7, 3, 4), (7, 6, 5)


ATTENTION_EXAMPLES = {"MultiHeadAttention": (self_attention, masked_cross_attention)}


# clnet.ops's layers live in functional graphs of op calls: each example makes (model, its inputs'
# sample shapes) in a float type. What each imports back as is op_forms's (see structure).
def op_model(inputs, output, dtype):
    return clnet.Model(inputs, output, floatx=np.dtype(dtype).name, seed=2), [i.input_shape for i in inputs]


def arithmetic_ops(dtype):
    """Binary ops of two tensors, broadcast (Elementwise) or of one shape (the Add and Multiply
    merges), of constant arrays (Elementwise) and scalars (Linear activations), comparisons and
    where (Greater, LessOrEqual, Not(Equal), each Cast to the float type; a Cast to bool), minimum,
    maximum, power of two tensors."""
    x, z = Input((3, 4), name="x"), Input((1, 4), name="z")
    a = (x - z) / np.array([1.0, 2.0, 4.0, 8.0])
    b = ops.maximum(a, z) * 2.0
    c = ops.where(x > 0.5, ops.minimum(x, 0.25), 1.5 - x)
    d = (x <= z) + ops.not_equal(x, 0.0) * ops.power(ops.abs(x) + 0.5, z)
    return op_model([x, z], b + c * d, dtype)


def unary_ops(dtype):
    """Every unary function: Exp, Log, Sqrt, Abs, Neg, square as Pow(x, 2), Tanh, Sigmoid (Activation
    layers on import), Relu and Clip(0, 1) (ReLU layers), Clip, GELU's tanh approximation and its
    erf form (from Erf: an Activation), ones_like and zeros_like (Expand of a number to Shape(x))."""
    x = Input((3, 4), name="x")
    u = ops.exp(ops.tanh(x)) - ops.log(ops.abs(x) + 1.0)
    v = ops.sqrt(ops.square(x) + 1.0) * ops.sigmoid(x)
    # (Both GELUs of one tensor: onnxruntime's fusions once broke clnet's graph of them.)
    w = ops.gelu(x) - ops.gelu(x, approximate=False) + ops.relu(-x) + ops.clip(x, -0.5, 0.5) + ops.clip(x, 0, 1)
    return op_model([x], u + v + w + ops.ones_like(x) - ops.zeros_like(x), dtype)


def reductions(dtype):
    """ReduceSum, ReduceMean, ReduceMax, ReduceMin over one axis, two, all, with and without keepdims."""
    x = Input((3, 4, 5), name="x")
    s, m = ops.sum(x, axis=-1, keepdims=True), ops.mean(x, axis=(1, 3), keepdims=True)
    return op_model([x], ops.sum((s - m) * ops.min(x, keepdims=True) + ops.max(x, axis=2, keepdims=True), axis=1),
                    dtype)


def indices(dtype):
    """ArgMax and ArgMin along one axis, with and without keepdims, and over a sample of one axis
    (axis None), each Cast to the float type."""
    x, v = Input((3, 4, 5), name="x"), Input((6,), name="v")
    a = ops.argmax(x, axis=-1, keepdims=True)                       # (3, 4, 1)
    b = ops.argmin(x, axis=2)                                       # (3, 5)
    c = ops.argmax(v, keepdims=True)                                # (1,)
    return op_model([x, v], ops.sum(a, axis=-1) * ops.expand_dims(c, 2) + ops.sum(b, axis=-1, keepdims=True), dtype)


def shape_views(dtype):
    """reshape, expand_dims, squeeze: Reshape, Unsqueeze, Squeeze (Reshape and Flatten layers on import)."""
    x = Input((2, 6), name="x")
    h = ops.exp(ops.expand_dims(ops.reshape(x, (None, 3, 4)), 1))
    return op_model([x], ops.reshape(ops.squeeze(h, 1), (-1, 12)), dtype)


def slices(dtype):
    """Slices of x and of a slice, an integer index (a Squeeze after the Slice: one Slice layer)."""
    x = Input((4, 5, 6), name="x")
    a, b = x[:, 1:3, 2], x[:, 2:4, 0, 2:5]
    return op_model([x], ops.concatenate([a[:, :, 1:4], b], axis=1), dtype)


def takes(dtype):
    """take with a list, a negative integer and a matrix of indices (Gather)."""
    x = Input((4, 5), name="x")
    a = ops.take(ops.take(x, [3, 0, 3], axis=1), -1, axis=-1)
    c = ops.take(x, [[1, 2], [0, 4]], axis=2)
    return op_model([x], ops.concatenate([a, ops.reshape(c, (None, 16))], axis=1), dtype)


def matmuls(dtype):
    """Products of two tensors, a constant matrix by a tensor, a tensor by a constant vector and by a
    constant matrix (a Dense without bias on import)."""
    x = Input((3, 4), name="x")
    h = ops.matmul(ops.matmul(x, ops.transpose(x, (0, 2, 1))), x)
    q = ops.matmul(np.arange(6.0).reshape(2, 3) / 6, h)
    y = ops.matmul(q, np.array([0.5, -1.0, 2.0, 0.25]))
    return op_model([x], ops.matmul(y, np.array([[1.0, -0.5, 0.25], [0.5, 2.0, -1.0]])), dtype)


def fused(dtype):
    """A FusedElementwise called as a layer: its tree's ops, read back as the Elementwise calls that
    the loaded model fuses into the same kernel."""
    x, z = Input((3, 4), name="x"), Input((3, 4), name="z")
    nodes = [{"op": "exp", "a": 0.0, "b": 0.0, "args": [["input", 0]]},
             {"op": "subtract", "a": 0.0, "b": 0.0, "args": [["node", 0], ["input", 1]]},
             {"op": "maximum", "a": 0.0, "b": 0.0, "args": [["node", 1], ["literal", 0.5]]},
             {"op": "where", "a": 0.0, "b": 0.0, "args": [["input", 0], ["node", 2], ["constant", 0]]}]
    return op_model([x, z], FusedElementwise(nodes, [np.array([1.0, -1.0, 2.0, 0.5])])([x, z]), dtype)


def lambda_of_ops(dtype):
    """A Lambda around ops after a Dense: the ops export, the Lambda is nothing."""
    x = Input((3, 4), name="x")
    h = Dense(4, "tanh")(x)
    return op_model([x], Lambda(lambda t: ops.sqrt(ops.abs(t)) - ops.mean(t, axis=-1, keepdims=True), name="lam")(h),
                    dtype)


OP_EXAMPLES = {"Elementwise": (arithmetic_ops, unary_ops), "Reduction": (reductions, indices), "ShapeView": (shape_views,),
               "Slice": (slices,), "Take": (takes,), "MatMul": (matmuls,), "FusedElementwise": (fused,),
               "Lambda": (lambda_of_ops,)}


class Scaled(clnet.layers.Layer):
    """A weight of add_weight (a Weight layer) broadcast over the batch."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="random_normal")

    def call(self, inputs):
        return inputs * self.scale


class PositionsAdded(clnet.layers.Layer):
    """An Embedding of constant positions (a Constant layer) added to every sample."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.project, self.positions = Dense(4), Embedding(3, 4)

    def call(self, inputs):
        return self.project(inputs) + self.positions(ops.arange(0, 3))


# Layers of no inputs a traced call() makes: the file holds their values as initializers, and the
# importer folds them into the constants of the ops that read them (a Gather of a constant table
# by constant positions is one constant): they come back as those ops' constants.
CONSTANT_EXAMPLES = {"Weight": lambda: Scaled(), "Constant": lambda: PositionsAdded()}


# The classes that come back as others (see op_forms); Lambda as nothing, as Dropout.
COMES_BACK_AS = {"ShapeView": {"Reshape", "Flatten"}, "FusedElementwise": {"Elementwise"}, "Input": set(),
                 "Dropout": set(), "Lambda": set(),
                 "SpatialDropout1D": set(), "SpatialDropout2D": set(), "SpatialDropout3D": set(),
                 "GaussianNoise": set()}


@pytest.mark.parametrize("example", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_exports(example, dtype, tmp_path, rng):
    model, *shapes = ATTENTION_EXAMPLES["MultiHeadAttention"][example](dtype)
    model.set_weights([rng.normal(0.0, 0.5, w.shape) for w in model.get_weights()])
    xs = [rng.normal(size=shape).astype(dtype) for shape in shapes]
    if len(model.inputs) == 3:
        xs.append((rng.random((7, 3, 6)) < 0.6).astype(dtype))
        xs[2][:, :, 0] = 1
    path = tmp_path / "attention.onnx"
    model.export(path)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert {"MatMul", "Softmax", "Transpose", "Reshape"} <= {n.op_type for n in proto.graph.node}
    want = model.predict(xs if len(xs) > 1 else xs[0])
    names = [i.name for i in proto.graph.input if i.name not in {init.name for init in proto.graph.initializer}]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for rows in (1, 7):
        got = session.run(["output"], {name: x[:rows] for name, x in zip(names, xs)})[0]
        assert_close(got, want[:rows], RTOL[dtype])


# -- export -> load -> predict, for every layer class -----------------------------------------------
def example_models(name, dtype, rng):
    """(model, its inputs) for each example of the layer class `name` (LAYER_EXAMPLES,
    GRAPH_EXAMPLES, ATTENTION_EXAMPLES), weights drawn away from their initial values."""
    if name in LAYER_EXAMPLES:
        shape, layers = LAYER_EXAMPLES[name]
        model = built(layers(), shape, dtype)
        first = next((layer for layer in model.layers if not isinstance(layer, Input)), None)
        xs = [(rng.integers(0, first.input_dim, (7, *shape)) if isinstance(first, Embedding)  # token ids
               else rng.normal(size=(7, *shape))).astype(dtype)]
        models = [(model, xs)]
    elif name in GRAPH_EXAMPLES:
        models = [(merged(GRAPH_EXAMPLES[name](), dtype), [rng.normal(size=(7, 4)).astype(dtype) for _ in range(2)])]
    elif name in OP_EXAMPLES:
        models = [(model, [rng.normal(size=(7, *shape)).astype(dtype) for shape in shapes])
                  for model, shapes in (make(dtype) for make in OP_EXAMPLES[name])]
    else:
        models = []
        for make in ATTENTION_EXAMPLES[name]:
            model, *shapes = make(dtype)
            xs = [rng.normal(size=shape).astype(dtype) for shape in shapes]
            if len(model.inputs) == 3:
                xs.append((rng.random((7, 3, 6)) < 0.6).astype(dtype))
                xs[2][:, :, 0] = 1
            models.append((model, xs))
    for model, _ in models:
        for layer in model.layers:  # variances positive
            positive = isinstance(layer, (BatchNormalization, LayerNormalization))
            if layer.get_weights():
                layer.set_weights([rng.uniform(0.5, 2.0, w.shape) if positive else rng.normal(0.0, 0.5, w.shape)
                                   for w in layer.get_weights()])
    return models


@pytest.mark.parametrize("name", sorted(set(Layer.registry) - set(EXPORTED_ELSEWHERE)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_layer_class_round_trips(name, dtype, tmp_path, rng):
    """Every registered layer class (a class added later without an example, or without import,
    fails here): its example models export, load back and predict what they did, bit for bit
    (the same layers and weights run the same kernels). An op class's (OP_EXAMPLES) also passes
    the full check, onnxruntime (float64: onnx's evaluator where it has no double kernel) matches
    predict at batch 1 and 7, and the loaded model has the layers op_forms says."""
    assert name in {**LAYER_EXAMPLES, **GRAPH_EXAMPLES, **ATTENTION_EXAMPLES, **OP_EXAMPLES, **CONSTANT_EXAMPLES}, \
        f"layer class {name} has no example in LAYER_EXAMPLES, GRAPH_EXAMPLES, ATTENTION_EXAMPLES or OP_EXAMPLES"
    if name in CONSTANT_EXAMPLES:
        x = Input((3, 4))
        model = clnet.Model(x, CONSTANT_EXAMPLES[name]()(x), floatx=np.dtype(dtype).name, seed=3)
        data = rng.normal(size=(7, 3, 4)).astype(dtype)
        path = tmp_path / f"{name}.onnx"
        model.export(path)
        onnx.checker.check_model(onnx.load(path), full_check=True)
        loaded = clnet.onnx.load(path)
        assert name not in {type(layer).__name__ for layer in loaded.layers}
        want = model.predict(data)
        np.testing.assert_array_equal(loaded.predict(data), want)
        for rows in (1, 7):
            assert_close(run_onnx(path, data[:rows]), want[:rows], RTOL[dtype])
        return
    for i, (model, xs) in enumerate(example_models(name, dtype, rng)):
        path = tmp_path / f"{name}_{i}.onnx"
        model.export(path)
        loaded = clnet.onnx.load(path)
        assert loaded.dtype == dtype
        kinds = {type(layer).__name__ for layer in loaded.layers}
        assert name in kinds or name in COMES_BACK_AS and COMES_BACK_AS[name] <= kinds, kinds
        x = xs if len(xs) > 1 else xs[0]
        want = model.predict(x)
        np.testing.assert_array_equal(loaded.predict(x), want)
        if name in OP_EXAMPLES:
            onnx.checker.check_model(onnx.load(path), full_check=True)
            for rows in (1, 7):
                assert_close(run_onnx(path, [part[:rows] for part in xs] if len(xs) > 1 else x[:rows]), want[:rows],
                             RTOL[dtype])
            assert structure(loaded) == structure(model)


# float16=True: float16's rounding (2^-11 relative) of the inputs, the weights and every result,
# through a few layers: the outputs' error, relative to their largest value.
FLOAT16_TOLERANCE = 2e-2


@pytest.mark.parametrize("name", sorted(set(Layer.registry) - set(EXPORTED_ELSEWHERE)))
def test_every_layer_class_exports_in_float16(name, tmp_path, rng):
    """`float16=True`: every layer class's float32 examples written as float16 graphs (inputs,
    outputs, every float initializer), which pass the full check and which onnxruntime's CPU
    provider runs in float16, within what float16 allows of predict's float32 at batch 1 and 7."""
    if name in CONSTANT_EXAMPLES:
        x = Input((3, 4))
        models = [(clnet.Model(x, CONSTANT_EXAMPLES[name]()(x), seed=3), [rng.normal(size=(7, 3, 4)).astype(np.float32)])]
    else:
        models = example_models(name, np.float32, rng)
    for i, (model, xs) in enumerate(models):
        path = tmp_path / f"{name}_{i}.onnx"
        model.export(path, float16=True)
        proto = onnx.load(path)
        onnx.checker.check_model(proto, full_check=True)
        float16 = onnx.TensorProto.FLOAT16
        assert {v.type.tensor_type.elem_type for v in [*proto.graph.input, *proto.graph.output]} == {float16}
        # (Resize's scales are float32 whatever the data's type)
        assert all(t.data_type in (float16, onnx.TensorProto.INT64) or t.name.endswith("/scales")
                   for t in proto.graph.initializer)
        want = model.predict(xs if len(xs) > 1 else xs[0])
        for rows in (1, 7):
            halves = [part[:rows].astype(np.float16) for part in xs]
            got = run_onnx(path, halves if len(xs) > 1 else halves[0])
            assert got.dtype == np.float16 and got.shape == want[:rows].shape
            np.testing.assert_allclose(got.astype(np.float32), want[:rows], rtol=0,
                                       atol=FLOAT16_TOLERANCE * max(1.0, np.abs(want).max()))


def test_float16_export_refuses_what_it_cannot_write(tmp_path):
    model = built([Dense(3)], (4,))
    with pytest.raises(TypeError, match="float16 must be True or False, got 'yes'"):
        model.export(tmp_path / "m.onnx", float16="yes")
    with pytest.raises(ValueError, match="target='mt5' writes float32.*export without float16=True"):
        model.export(tmp_path / "m.onnx", float16=True, target="mt5")
    assert not (tmp_path / "m.onnx").exists()
    model.export(tmp_path / "m.onnx", float16=True)
    with pytest.raises(ValueError, match="input 'input' has element type float16; clnet takes float32 or float64"):
        clnet.onnx.load(tmp_path / "m.onnx")


def test_an_index_over_every_sample_axis_exports_flattened(tmp_path, rng):
    """argmax over a sample of several axes: numpy's index in the flattened sample, as a Flatten,
    an ArgMax and (keepdims) a Reshape, which onnxruntime runs and clnet loads back."""
    x = Input((3, 4), name="x")
    model, _ = op_model([x], ops.argmax(x, keepdims=True) + ops.reshape(ops.argmin(x), (None, 1, 1)), np.float32)
    data = rng.normal(size=(7, 3, 4)).astype(np.float32)
    want = model.predict(data)
    flat = data.reshape(7, -1)
    np.testing.assert_array_equal(want, (flat.argmax(1) + flat.argmin(1)).reshape(7, 1, 1))
    path = tmp_path / "indices.onnx"
    model.export(path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    np.testing.assert_array_equal(run_onnx(path, data), want)
    np.testing.assert_array_equal(clnet.onnx.load(path).predict(data), want)


def test_tiny_gpt_round_trip(tmp_path, rng):
    """examples/tiny_gpt.py's model (small, random weights, causal attention): Cast + Gather,
    Slice + Expand, LayerNormalization, clnet's attention subgraph, GELU as Erf and MatMul + Add on
    sequences load back as the same layers; the loaded model predicts the same, bit for bit, and
    trains."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import tiny_gpt
    model = tiny_gpt.build_model(13, context=8, d_model=8, heads=2, blocks=2, seed=1)
    model.set_weights([w + rng.normal(0.0, 0.1, w.shape) for w in model.get_weights()])
    path = tmp_path / "tiny_gpt.onnx"
    model.export(path)
    loaded = clnet.onnx.load(path)
    assert type(loaded) is clnet.Model
    assert sorted(type(l).__name__ for l in loaded.layers) == sorted(type(l).__name__ for l in model.layers)
    attention = [l for l in loaded.layers if isinstance(l, MultiHeadAttention)]
    assert [(l.num_heads, l.key_dim, l.wiring["causal"]) for l in attention] == [(2, 4, True)] * 2
    x = rng.integers(0, 13, (5, 8)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))

    loaded.compile(clnet.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    before = loaded.get_weights()
    history = loaded.fit(x, rng.integers(0, 13, (5, 8)), batch_size=5, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert all(not np.array_equal(a, b) for a, b in zip(loaded.get_weights(), before, strict=True))


def check_torch_token_model(model, stored):
    """The loaded token model predicts what torch did, and fine-tunes."""
    assert_close(model.predict(stored["x"]), stored["y"], 1e-5)
    labels = np.arange(np.prod(stored["y"].shape[:-1])).reshape(stored["y"].shape[:-1]) % 3
    model.compile(clnet.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    history = model.fit(stored["x"], labels, batch_size=7, epochs=5, verbose=0, shuffle=False)
    assert history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.parametrize("exporter", ["", "_dynamo"])
@pytest.mark.parametrize("name,recurrent,return_sequences", [("torch_lstm", LSTM, True), ("torch_gru", GRU, False)])
def test_import_torch_sequence(name, recurrent, return_sequences, exporter):
    """tests/make_torch_onnx_fixture.py's token models, exported by torch.onnx.export (both
    exporters): int64 ids into nn.Embedding's Gather, nn.LSTM / nn.GRU (batch_first=True) between
    Transposes with zero initial states (ConstantOfShape, or Expand and Slice of a zero), gates
    reordered from ONNX's; every step's output (LSTM) or h_n[-1] (GRU) into a Linear. The loaded
    model predicts what torch did, and fine-tunes."""
    stored = np.load(DATA / f"{name}.npz")
    model = clnet.onnx.load(DATA / f"{name}{exporter}.onnx")
    assert type(model) is clnet.Sequential and model.input_shape == (6,)
    assert [type(l) for l in model.layers] == [Embedding, recurrent, Dense]
    layer = model.layers[1]
    assert (layer.units, layer.return_sequences, layer.go_backwards, layer.use_bias) == (5, return_sequences, False,
                                                                                         True)
    assert (layer.activation.name, layer.recurrent_activation.name) == ("tanh", "sigmoid")
    check_torch_token_model(model, stored)


def test_import_torch_bidirectional_lstm():
    """The LSTM token model with nn.LSTM(bidirectional=True): one LSTM op with
    direction="bidirectional", its Y (steps, 2, batch, 5) brought back by Transpose, Reshape and
    Transpose as (batch, steps, 10), the directions side by side, is Bidirectional(LSTM) with
    merge_mode="concat" and return_sequences, each direction's weights its layer's."""
    stored = np.load(DATA / "torch_lstm_bidirectional.npz")
    model = clnet.onnx.load(DATA / "torch_lstm_bidirectional.onnx")
    assert type(model) is clnet.Sequential and model.input_shape == (6,)
    assert [type(l) for l in model.layers] == [Embedding, Bidirectional, Dense]
    layer = model.layers[1]
    assert (layer.merge_mode, layer.return_sequences, layer.return_state) == ("concat", True, False)
    assert [(type(l), l.units, l.go_backwards, l.use_bias, l.activation.name, l.recurrent_activation.name)
            for l in (layer.forward_layer, layer.backward_layer)] == [(LSTM, 5, False, True, "tanh", "sigmoid"),
                                                                      (LSTM, 5, True, True, "tanh", "sigmoid")]
    check_torch_token_model(model, stored)


def lstm_graph(rng, lstm_inputs=("t", "w", "r", "b"), outputs=("y_raw",), after=None, constants=None, **attributes):
    """Transpose -> LSTM -> Squeeze -> Transpose on (batch, 6, 3), 4 units, as torch writes it;
    `after`: other nodes reading the LSTM's `outputs` instead."""
    f = lambda *shape: rng.normal(0.0, 0.5, size=shape).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("LSTM", list(lstm_inputs), list(outputs), hidden_size=4, name="lstm", **attributes)]
    nodes += after or [helper.make_node("Squeeze", ["y_raw", "one"], ["s"]),
                       helper.make_node("Transpose", ["s"], ["y"], perm=[1, 0, 2])]
    values = {"w": f(1, 16, 3), "r": f(1, 16, 4), "b": f(1, 32), "one": np.array([1], np.int64), **(constants or {})}
    return graph_model(nodes, values, (6, 3), (6, 4))


@pytest.mark.parametrize("arguments,message", [
    (dict(lstm_inputs=("t", "w", "r", "b", "", "h0"), constants={"h0": np.ones((1, 1, 4), np.float32)}),
     r"\(LSTM\): its initial_h is given; clnet's recurrent layers start from zero states"),
    (dict(lstm_inputs=("t", "w", "r", "b", "lengths"), constants={"lengths": np.array([6], np.int32)}),
     r"\(LSTM\): its input sequence_lens is given"),
    (dict(clip=3.0), r"\(LSTM\): clip=3.0; clnet's recurrent layers do not clip"),
    (dict(activations=["Sigmoid", "Tanh", "Relu"]),
     r"\(LSTM\): activations g=Tanh\(\) and h=ReLU\(\) differ"),
    (dict(activations=["HardSigmoid", "Tanh", "Tanh"]), r"\(LSTM\): activation HardSigmoid; clnet's recurrent layers "
                                                        "take Tanh, Relu"),
    (dict(after=[helper.make_node("Squeeze", ["y_raw", "one"], ["s"]),
                 helper.make_node("LSTM", ["s", "w2", "r2"], ["y2", "h2"], hidden_size=4, name="second"),
                 helper.make_node("Squeeze", ["h2", "zero"], ["y"])],
          constants={"w2": np.ones((1, 16, 4), np.float32), "r2": np.ones((1, 16, 4), np.float32),
                     "zero": np.array([0], np.int64)}),
     r"ONNX node lstm \(LSTM\): its output is read by second \(LSTM\) time-major \(PyTorch's num_layers > 1\); "
     r"clnet reads one layer per op"),
    (dict(after=[helper.make_node("Relu", ["y_raw"], ["y"])]),
     r"ONNX node lstm \(LSTM\): its output is read by \(unnamed\) \(Relu\) before its batch axis is first again"),
])
def test_import_recurrent_errors(arguments, message, rng):
    with pytest.raises(ValueError, match=message):
        clnet.onnx.load(lstm_graph(rng, **arguments))


def test_import_recurrent_forms(rng):
    """An LSTM in reverse whose Y_h is read is go_backwards (its Y, in the input's order, would
    need a reversal clnet has no layer for); with layout=1 (opset 14) an LSTM needs no
    Transposes; a GRU whose linear_before_reset is 0 is refused."""
    f = lambda *shape: rng.normal(0.0, 0.5, size=shape).astype(np.float32)
    weights = {"w": f(1, 16, 3), "r": f(1, 16, 4), "b": f(1, 32), "zero": np.array([0], np.int64),
               "two": np.array([2], np.int64)}
    reverse = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
               helper.make_node("LSTM", ["t", "w", "r", "b"], ["", "h"], hidden_size=4, direction="reverse"),
               helper.make_node("Squeeze", ["h", "zero"], ["y"])]
    layout = [helper.make_node("LSTM", ["x", "w", "r", "b"], ["y_raw"], hidden_size=4, layout=1),
              helper.make_node("Squeeze", ["y_raw", "two"], ["y"])]
    x = rng.normal(size=(5, 6, 3)).astype(np.float32)
    for nodes, output, go_backwards, return_sequences in ((reverse, (4,), True, False), (layout, (6, 4), False, True)):
        proto = graph_model(nodes, weights, (6, 3), output, opset=14)
        model = clnet.onnx.load(proto)
        assert [type(l) for l in model.layers] == [LSTM]
        assert (model.layers[0].go_backwards, model.layers[0].return_sequences) == (go_backwards, return_sequences)
        want = ReferenceEvaluator(proto).run(None, {"x": x})[0]  # onnxruntime has no layout=1 LSTM
        assert_close(model.predict(x), want, 1e-5)
    gru = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
           helper.make_node("GRU", ["t", "w", "r"], ["", "h"], hidden_size=4, name="gru"),
           helper.make_node("Squeeze", ["h", "zero"], ["y"])]
    with pytest.raises(ValueError, match=r"ONNX node gru \(GRU\): linear_before_reset=0; clnet's GRU is Keras's "
                                         "reset_after=True"):
        clnet.onnx.load(graph_model(gru, {"w": f(1, 12, 3), "r": f(1, 12, 4), "zero": np.array([0], np.int64)},
                                    (6, 3), (4,)))


def test_import_lstm_cell_state(rng):
    """An LSTM whose last cell state Y_c is read (its h too, in the same Concat) is clnet's LSTM
    with return_state=True: one layer, whose states the loaded model reads as onnxruntime does."""
    zero = np.array([0], np.int64)
    after = [helper.make_node("Squeeze", ["h", "zero"], ["h2"]), helper.make_node("Squeeze", ["c", "zero"], ["c2"]),
             helper.make_node("Concat", ["c2", "h2"], ["y"], axis=1)]
    proto = lstm_graph(rng, outputs=("", "h", "c"), after=after, constants={"zero": zero})
    proto.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8]))
    model = clnet.onnx.load(proto)
    assert [type(l).__name__ for l in model.layers] == ["Input", "LSTM", "Concatenate"]
    assert model.layers[1].return_state and not model.layers[1].return_sequences
    x = rng.normal(size=(5, 6, 3)).astype(np.float32)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(model.predict(x), session.run(["y"], {"x": x})[0], 1e-5)


@pytest.mark.parametrize("kind", ["SimpleRNN", "LSTM", "GRU"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_return_state_exports_and_loads(kind, dtype, tmp_path, rng):
    """A recurrent layer's final states (ONNX's Y_h, and an LSTM's Y_c) read beside its output:
    onnxruntime (float64: onnx's reference evaluator) matches predict; loaded back, the model has
    the one recurrent layer, return_sequences and return_state as they were, and predicts the
    same, bit for bit."""
    layer = {"SimpleRNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU}[kind]
    for sequences, backwards in ((False, False), (True, True)):
        x = Input((5, 3))
        y, *states = layer(4, return_state=True, return_sequences=sequences, go_backwards=backwards)(x)
        out = Dense(2)(Concatenate()([Flatten()(y) if sequences else y, *states]))
        model = clnet.Model(x, out, floatx=np.dtype(dtype).name, seed=4)
        model.set_weights([rng.normal(0.0, 0.5, w.shape) for w in model.get_weights()])
        path = tmp_path / f"{kind}.onnx"
        model.export(path)
        xs = rng.normal(size=(7, 5, 3)).astype(dtype)
        want = model.predict(xs)
        assert_close(run_onnx(path, xs), want, RTOL[dtype])
        loaded = clnet.onnx.load(path)
        recurrent = [l for l in loaded.layers if isinstance(l, layer)]
        assert [(l.return_sequences, l.return_state) for l in recurrent] == [(sequences, kind == "LSTM" or sequences)]
        np.testing.assert_array_equal(loaded.predict(xs), want)


def exported_encoder_decoder(model, path, dtype, rng):
    """`model` (inputs (4, 3) and (5, 2)) with random weights, exported to `path`: onnxruntime
    (float64: onnx's reference evaluator) matches predict. Returns the file loaded back, the
    inputs and the predictions, for the caller's checks."""
    model.set_weights([rng.normal(0.0, 0.5, w.shape) for w in model.get_weights()])
    model.export(path)
    xs = [rng.normal(size=(7, 4, 3)).astype(dtype), rng.normal(size=(7, 5, 2)).astype(dtype)]
    want = model.predict(xs)
    assert_close(run_onnx(path, xs), want, RTOL[dtype])
    return clnet.onnx.load(path), xs, want


@pytest.mark.parametrize("kind", ["SimpleRNN", "LSTM", "GRU"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_initial_state_exports_and_loads(kind, dtype, tmp_path, rng):
    """An encoder's final states starting a decoder (initial_state): ONNX's initial_h (and
    initial_c) as Reshapes of them to (1, batch, units); onnxruntime (float64: onnx's reference
    evaluator) matches predict, and the file loads back into a model that predicts the same, bit
    for bit, its decoder called with initial_state."""
    layer = {"SimpleRNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU}[kind]
    x, z = Input((4, 3)), Input((5, 2))
    _, *states = layer(4, return_state=True)(x)
    y = layer(4, return_sequences=True, go_backwards=True)(z, initial_state=states)
    model = clnet.Model([x, z], Dense(2)(Flatten()(y)), floatx=np.dtype(dtype).name, seed=4)
    loaded, xs, want = exported_encoder_decoder(model, tmp_path / f"{kind}.onnx", dtype, rng)
    decoder = [l for l in loaded.layers if type(l).__name__ == kind and l.return_sequences]
    assert len(decoder) == 1 and decoder[0].called_with_initial_state
    np.testing.assert_array_equal(loaded.predict(xs), want)


@pytest.mark.parametrize("kind", ["SimpleRNN", "LSTM", "GRU"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bidirectional_states_export_and_load(kind, dtype, tmp_path, rng):
    """A bidirectional encoder (concat, its final states with return_state) starting a
    bidirectional decoder (merge_mode None: both directions' outputs apart; its states too):
    one bidirectional op each, initial states as a Concat of each direction's. onnxruntime
    (float64: onnx's reference evaluator) matches predict; loaded back, the model has the two
    Bidirectional layers as they were (the encoder's return_state too, which for SimpleRNN and
    GRU only its directions' Y_h read beside their concat tell), the decoder called with
    initial_state, and predicts the same, bit for bit."""
    layer = {"SimpleRNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU}[kind]
    x, z = Input((4, 3)), Input((5, 2))
    encoded, *states = Bidirectional(layer(4, return_state=True))(x)
    forward, backward, *final = Bidirectional(layer(4, return_sequences=True, return_state=True),
                                              merge_mode=None)(z, initial_state=states)
    out = Dense(2)(Concatenate()([encoded, Flatten()(forward), Flatten()(backward), *final]))
    model = clnet.Model([x, z], out, floatx=np.dtype(dtype).name, seed=4)
    loaded, xs, want = exported_encoder_decoder(model, tmp_path / f"{kind}.onnx", dtype, rng)
    configs = lambda m: [unnamed(l.get_config()) for l in m.layers
                         if isinstance(l, Bidirectional)]
    assert configs(loaded) == configs(model)
    decoder = [l for l in loaded.layers if isinstance(l, Bidirectional) and l.merge_mode is None]
    assert len(decoder) == 1 and decoder[0].called_with_initial_state
    np.testing.assert_array_equal(loaded.predict(xs), want)


def test_import_bidirectional_forms(rng):
    """Reads of a bidirectional GRU op that clnet's export does not write: PyTorch's h_n[-1] (the
    backward direction's final state: merge_mode None), a reversed input (the forward layer
    goes backwards), other activations for the backward direction (a backward layer of its
    own), a ReduceMean of Y_h over the directions (keepdims=0); each loads as one Bidirectional
    that computes what onnxruntime does. A Reduce over another axis, and an LSTM's Y_c read with
    both directions together, are refused."""
    f = lambda *shape: rng.normal(0.0, 0.5, size=shape).astype(np.float32)
    values = {"w": f(2, 12, 3), "r": f(2, 12, 4), "b": f(2, 24), "w4": f(2, 16, 3), "r4": f(2, 16, 4),
              "last": np.array(-1, np.int64), "axis0": np.array([0], np.int64), "flat": np.array([0, -1], np.int64),
              "starts": np.array([-1], np.int64), "ends": np.array([np.iinfo(np.int64).min], np.int64),
              "steps": np.array([-1], np.int64), "one": np.array([1], np.int64)}
    gru = lambda x, outputs, **attributes: [
        helper.make_node("Transpose", [x], ["t"], perm=[1, 0, 2]),
        helper.make_node("GRU", ["t", "w", "r", "b"], outputs, hidden_size=4, direction="bidirectional",
                         linear_before_reset=1, name="gru", **attributes)]
    concat = [helper.make_node("Transpose", ["y_raw"], ["s"], perm=[2, 0, 1, 3]),
              helper.make_node("Reshape", ["s", "flat"], ["y"])]
    reversed_x = helper.make_node("Slice", ["x", "starts", "ends", "one", "steps"], ["x_reversed"])
    cases = [  # (nodes, output shape, (merge_mode, return_sequences, go_backwards, activations))
        (gru("x", ["", "h"]) + [helper.make_node("Gather", ["h", "last"], ["y"], axis=0)], (4,),
         (None, False, [False, True], ["tanh", "tanh"])),
        ([reversed_x, *gru("x_reversed", ["y_raw"])] + concat, (48,),
         ("concat", True, [True, False], ["tanh", "tanh"])),
        (gru("x", ["y_raw"], activations=["Sigmoid", "Tanh", "Sigmoid", "Relu"]) + concat, (48,),
         ("concat", True, [False, True], ["tanh", "relu"])),
        (gru("x", ["", "h"]) + [helper.make_node("ReduceMean", ["h"], ["y"], axes=[0], keepdims=0)], (4,),
         ("ave", False, [False, True], ["tanh", "tanh"]))]
    x = rng.normal(size=(5, 6, 3)).astype(np.float32)
    for nodes, shape, (merge_mode, return_sequences, go_backwards, activations) in cases:
        proto = graph_model(nodes, values, (6, 3), shape)
        model = clnet.onnx.load(proto)
        layer = next(l for l in model.layers if isinstance(l, Bidirectional))
        both = (layer.forward_layer, layer.backward_layer)
        assert (layer.merge_mode, layer.return_sequences, [l.go_backwards for l in both],
                [l.activation.name for l in both]) == (merge_mode, return_sequences, go_backwards, activations)
        session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        assert_close(model.predict(x), session.run(["y"], {"x": x})[0], 1e-5)
    with pytest.raises(ValueError, match=r"\(ReduceSum\): it reduces axes \[0\] of a recurrent op's output; clnet "
                                         r"reads ReduceSum there only over the direction axis"):
        clnet.onnx.load(graph_model(gru("x", ["y_raw"]) + [helper.make_node("ReduceSum", ["y_raw", "axis0"], ["y"])],
                                    values, (6, 3), (1, 2, 4)))
    lstm = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
            helper.make_node("LSTM", ["t", "w4", "r4"], ["", "", "c"], hidden_size=4, direction="bidirectional",
                             name="lstm"),
            helper.make_node("Transpose", ["c"], ["s"], perm=[1, 0, 2]),
            helper.make_node("Reshape", ["s", "flat"], ["y"])]
    with pytest.raises(ValueError, match=r"lstm \(LSTM\): its Y_c is read with both directions together"):
        clnet.onnx.load(graph_model(lstm, values, (6, 3), (8,)))


def test_import_attention_pattern_must_be_exact(tmp_path, rng):
    """clnet's attention subgraph with another scale than 1/sqrt(key_dim) is not a
    MultiHeadAttention: its nodes stay, each read as what it is (the projections Dense layers,
    the products of computed tensors ops.matmul, the heads merged again a Permute and a Reshape),
    and the model computes what onnxruntime does."""
    model, _ = self_attention(np.float32)
    path = tmp_path / "attention.onnx"
    model.export(path)
    proto = onnx.load(path)
    scale, = (t for t in proto.graph.initializer if t.name.endswith("/scale"))
    scale.CopyFrom(numpy_helper.from_array(np.array(0.5, np.float32), scale.name))
    loaded = clnet.onnx.load(proto)
    kinds = [type(layer).__name__ for layer in loaded.layers]
    assert "MultiHeadAttention" not in kinds and kinds.count("MatMul") == 2 and kinds.count("Dense") == 5
    x = rng.normal(size=(7, 5, 4)).astype(np.float32)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(loaded.predict(x), session.run(["output"], {"input": x})[0], 1e-5)


def test_every_activation_has_an_export_and_a_test():
    missing = sorted(name for name, cls in ActivationFunction.registry.items()
                     if cls.to_onnx is ActivationFunction.to_onnx)
    assert not missing, f"activations without to_onnx: {missing}"
    assert set(ActivationFunction.registry) == {name for name, _ in ACTIVATIONS}


@pytest.mark.parametrize("name", sorted(LAYER_EXAMPLES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_exports(name, dtype, tmp_path, rng):
    shape, layers = LAYER_EXAMPLES[name]
    model = built(layers(), shape, dtype)
    for layer in model.layers:  # weights away from their initial zeros and ones; variances positive
        positive = isinstance(layer, (BatchNormalization, LayerNormalization))
        draw = (lambda n: rng.uniform(0.5, 2.0, n)) if positive else (lambda n: rng.normal(0.0, 0.5, n))
        if layer.get_weights():
            layer.set_weights([draw(w.shape) for w in layer.get_weights()])
    path = tmp_path / "model.onnx"
    clnet.onnx.export(model, path)
    check_file(model, path, rng, dtype)


@pytest.mark.parametrize("layer", [lambda: SimpleRNN(4, activation="relu", return_sequences=True),
                                   lambda: SimpleRNN(4, activation=clnet.activations.get("linear", a=0.5, b=0.1)),
                                   lambda: LSTM(4, activation="softplus", recurrent_activation="tanh"),
                                   lambda: GRU(4, activation=clnet.activations.get("lrelu", a=0.2),
                                               recurrent_activation="relu", return_sequences=True)],
                         ids=["SimpleRNN-relu", "SimpleRNN-linear", "LSTM-softplus-tanh", "GRU-lrelu-relu"])
def test_recurrent_activation_exports(layer, tmp_path, rng):
    """The activations ONNX's recurrent ops take by name (with alpha, beta), in float32 on onnxruntime;
    one they do not take is refused, naming the layer."""
    model = built([layer()], (5, 3))
    model.layers[0].set_weights([rng.normal(0.0, 0.5, w.shape) for w in model.layers[0].get_weights()])
    model.export(tmp_path / "model.onnx")
    check_file(model, tmp_path / "model.onnx", rng, np.float32)
    with pytest.raises(ValueError, match=r"LSTM 'lstm' cannot be exported to ONNX with activation Swish\(b=1\): "
                                         "ONNX's recurrent ops take tanh"):
        built([LSTM(2, activation="swish", name="lstm")], (3, 2)).export(tmp_path / "swish.onnx")


@pytest.mark.parametrize("activation,params", ACTIVATIONS, ids=[f"{n}{p or ''}" for n, p in ACTIVATIONS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_exports(activation, params, dtype, tmp_path, rng):
    """Each activation standalone on a rank-3 tensor and fused into a Dense."""
    model = built([Activation(activation, **params), Flatten(), Dense(6, clnet.activations.get(activation, **params))],
                  (3, 4), dtype)
    path = tmp_path / "model.onnx"
    model.export(path)
    check_file(model, path, rng, dtype)


# -- the README's MLP on Fashion-MNIST ----------------------------------------------------------
def test_fashion_mnist_mlp(tmp_path):
    """examples/fashion_mnist.py's model, trained briefly, on real test images."""
    (x_train, y_train), (x_test, _) = clnet.datasets.fashion_mnist.load_data()
    x_train, x_test = x_train[:6000] / 255.0, (x_test[:500] / 255.0).astype(np.float32)
    model = clnet.Sequential([Input((28, 28)), Flatten(), Dense(256, "relu"), Dense(128, "relu"),
                              Dense(10, "softmax")], seed=1)
    model.compile(clnet.optimizers.Adam(1e-3), "categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train[:6000], batch_size=128, epochs=1, verbose=0)
    path = tmp_path / "fashion.onnx"
    model.export(path)

    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    dims = lambda value: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
    (graph_input,), (graph_output,) = proto.graph.input, proto.graph.output
    assert (graph_input.name, dims(graph_input)) == ("input", ["batch", 28, 28])
    assert (graph_output.name, dims(graph_output)) == ("output", ["batch", 10])
    assert graph_input.type.tensor_type.elem_type == TensorProto.FLOAT
    assert [n.op_type for n in proto.graph.node] == ["Flatten", "Gemm", "Relu", "Gemm", "Relu", "Gemm", "Softmax"]
    assert proto.opset_import[0].version == 17 and proto.ir_version == 8

    want = model.predict(x_test)
    assert_close(run_onnx(path, x_test), want, 1e-5)
    for rows in (1, 7):
        assert_close(run_onnx(path, x_test[:rows]), want[:rows], 1e-5)
    assert (run_onnx(path, x_test).argmax(1) == want.argmax(1)).all()
    np.testing.assert_array_equal(clnet.onnx.load(path).predict(x_test), want)


def test_fashion_mnist_cnn(tmp_path):
    """examples/fashion_mnist_cnn.py's model, trained one epoch on 2048 images, on 500 real test
    images: the documented interface (docs/metatrader.md), onnxruntime against predict, and the
    file loaded back."""
    (x_train, y_train), (x_test, _) = clnet.datasets.fashion_mnist.load_data()
    x_train = x_train[:2048].reshape(-1, 28, 28, 1) / 255.0
    x_test = (x_test[:500].reshape(-1, 28, 28, 1) / 255.0).astype(np.float32)
    model = clnet.Sequential([Input((28, 28, 1)), Conv2D(32, 3, activation="relu"), MaxPooling2D(),
                              Conv2D(64, 3, activation="relu"), MaxPooling2D(), Flatten(),
                              Dense(128, "relu"), Dropout(0.3), Dense(10, "softmax")], seed=1)
    model.compile(clnet.optimizers.Adam(1e-3), "categorical_crossentropy")
    model.fit(x_train, y_train[:2048], batch_size=128, epochs=1, verbose=0)
    path = tmp_path / "fashion_cnn.onnx"
    model.export(path)

    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    dims = lambda value: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
    (graph_input,), (graph_output,) = proto.graph.input, proto.graph.output
    assert (graph_input.name, dims(graph_input)) == ("input", ["batch", 28, 28, 1])
    assert (graph_output.name, dims(graph_output)) == ("output", ["batch", 10])
    assert graph_input.type.tensor_type.elem_type == graph_output.type.tensor_type.elem_type == TensorProto.FLOAT
    conv_pool = ["Transpose", "Conv", "Transpose", "Relu", "Transpose", "MaxPool", "Transpose"]
    assert [n.op_type for n in proto.graph.node] == [*conv_pool, *conv_pool, "Flatten", "Gemm", "Relu", "Gemm",
                                                     "Softmax"]
    want = model.predict(x_test)
    assert_close(run_onnx(path, x_test), want, 1e-5)
    for rows in (1, 7):
        assert_close(run_onnx(path, x_test[:rows]), want[:rows], 1e-5)
    assert (run_onnx(path, x_test).argmax(1) == want.argmax(1)).all()
    loaded = clnet.onnx.load(path)
    assert structure(loaded) == structure(model)
    np.testing.assert_array_equal(loaded.predict(x_test), want)


def test_tiny_gpt(tmp_path):
    """examples/tiny_gpt.py's model (two blocks, smaller), trained a few steps on the real
    fortunes text, on held-out windows of it: onnxruntime against predict."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import tiny_gpt
    ids, vocabulary = tiny_gpt.encode(tiny_gpt.load_text())
    train, held_out = tiny_gpt.split(ids)
    model = tiny_gpt.build_model(len(vocabulary), context=16, d_model=16, heads=2, blocks=2, seed=1)
    model.compile(clnet.optimizers.Adam(3e-3), "sparse_categorical_crossentropy")
    x, y = tiny_gpt.training_windows(train, 256, 16, seed=1)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    path = tmp_path / "tiny_gpt.onnx"
    model.export(path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    windows = tiny_gpt.validation_windows(held_out, 16, 50)[0].astype(np.float32)
    want = model.predict(windows)
    for rows in (1, 50):
        assert_close(run_onnx(path, windows[:rows]), want[:rows], 1e-5)
    assert (run_onnx(path, windows).argmax(-1) == want.argmax(-1)).mean() > 0.99


@pytest.mark.parametrize("opset", [7, 11, 18, 21])
def test_spatial_layers_across_opsets(opset, tmp_path, rng):
    """Pad takes its pads as an attribute before opset 11 and as an input from it; the Reduce ops
    (global pooling, LayerNormalization) their axes as an attribute before 18 and as an input
    from it: each form, checked and run by onnxruntime."""
    model = built([ZeroPadding2D(1), Conv2D(4, 3, strides=2, padding="same", activation="relu"),  # (5, 6, 4)
                   BatchNormalization(), AveragePooling2D(2, padding="same"), LayerNormalization(),  # (3, 3, 4)
                   GlobalMaxPooling2D(keepdims=True), Reshape((4, 1)), LocallyConnected1D(2, 2),    # (3, 2)
                   GlobalAveragePooling1D()], (7, 9, 3))
    path = tmp_path / "model.onnx"
    model.export(path, opset=opset)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.opset_import[0].version == opset
    pad, = (n for n in proto.graph.node if n.op_type == "Pad")
    assert len(pad.input) == (1 if opset < 11 else 2)
    for node in (n for n in proto.graph.node if n.op_type.startswith("Reduce")):
        assert len(node.input) == (1 if opset < 18 else 2)
    x = rng.normal(size=(7, 7, 9, 3)).astype(np.float32)
    want = model.predict(x)
    for rows in (1, 7):
        assert_close(run_onnx(path, x[:rows]), want[:rows], 1e-5)


@pytest.mark.parametrize("opset", [7, 11, 18, 21])
def test_round_trip_across_opsets(opset, tmp_path, rng):
    """The forms of Pad and of the Reduce ops (LayerNormalization, global pooling) that each opset
    takes, and LocallyConnected1D's Gather and MatMul, load back to the same layers, weights and
    predictions."""
    model = built([ZeroPadding2D(((0, 1), (2, 0))), Conv2D(4, 3, strides=2, padding="same", activation="tanh"),
                   BatchNormalization(), AveragePooling2D(3, strides=2, padding="same"), LayerNormalization(axis=2),
                   GlobalMaxPooling2D(keepdims=True), Reshape((4, 1)), LocallyConnected1D(2, 2, activation="relu"),
                   GlobalAveragePooling1D(), Dense(3)], (7, 9, 3))
    for layer in model.layers:
        if isinstance(layer, (BatchNormalization, LayerNormalization, LocallyConnected1D)):
            layer.set_weights([rng.uniform(0.5, 2.0, w.shape) for w in layer.get_weights()])
    path = tmp_path / "model.onnx"
    model.export(path, opset=opset)
    loaded = clnet.onnx.load(path)
    assert structure(loaded) == structure(model)
    for got, expected in zip(weights(loaded), weights(model), strict=True):
        np.testing.assert_array_equal(got, expected)
    x = rng.normal(size=(5, 7, 9, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


@pytest.mark.parametrize("opset", [9, 11, 13, 18, 20])
def test_ops_across_opsets(opset, tmp_path, rng):
    """The forms of clnet.ops's nodes each opset takes: the Reduce ops' axes an attribute before
    opset 13 (ReduceSum) or 18 (the others), an input from it; Squeeze's and Unsqueeze's from 13;
    Slice's starts, ends and axes from 10; Clip's bounds from 11; GreaterOrEqual and LessOrEqual
    from 12 (Not of Less and of Greater before); Gather's negative indices from 11 (counted from
    the start before); Gelu from 20 (both forms from primitives before); Equal of floats from 11
    (refused before). Each form passes the full check, onnxruntime computes what predict does,
    and it loads back to the same layers and predictions."""
    x = Input((3, 4), name="x")
    s = ops.expand_dims(ops.sum(x, axis=-1), 2)                               # (3, 1)
    h = ops.clip(s - ops.mean(x, axis=(1, 2), keepdims=True), -1.0, 1.5) * ops.max(x, axis=2, keepdims=True)
    h = h + ops.min(x, axis=1, keepdims=True)                                 # (3, 4)
    c = (h >= 0.5) + (h <= -0.5)
    g = ops.gelu(ops.where(c, h, ops.ones_like(h))) - ops.gelu(c, approximate=False)
    parts = [ops.reshape(g, (None, 12)), ops.squeeze(ops.reshape(ops.take(h, [-1, 0], axis=2), (None, 1, 6)), 1),
             h[:, 1:, 2]]
    model = clnet.Model(x, ops.concatenate(parts, axis=-1), seed=2)
    path = tmp_path / "model.onnx"
    model.export(path, opset=opset)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    nodes = proto.graph.node
    initializers = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for node in nodes:
        if node.op_type.startswith("Reduce"):
            assert len(node.input) == (1 if opset < (13 if node.op_type == "ReduceSum" else 18) else 2)
        if node.op_type in ("Squeeze", "Unsqueeze"):
            assert len(node.input) == (1 if opset < 13 else 2)
        if node.op_type in ("Slice", "Clip"):
            assert len(node.input) == (1 if opset < {"Slice": 10, "Clip": 11}[node.op_type] else
                                       {"Slice": 4, "Clip": 3}[node.op_type])
        if node.op_type == "Gather":
            assert initializers[node.input[1]].tolist() == ([3, 0] if opset < 11 else [-1, 0])
    kinds = {node.op_type for node in nodes}
    assert ("GreaterOrEqual" in kinds) == (opset >= 12) and ("Gelu" in kinds) == (opset >= 20)
    xs = rng.normal(size=(7, 3, 4)).astype(np.float32)
    want = model.predict(xs)
    for rows in (1, 7):
        assert_close(run_onnx(path, xs[:rows]), want[:rows], 1e-5)
    loaded = clnet.onnx.load(path)
    assert structure(loaded) == structure(model)
    np.testing.assert_array_equal(loaded.predict(xs), want)
    if opset < 11:
        equal = clnet.Model(x, ops.equal(x, 0.5))
        with pytest.raises(ValueError, match=rf"layer 'equal' \(Elementwise\) needs ONNX opset >= 11 for ops.equal "
                                             rf"\(Equal of floats\); got opset={opset}"):
            equal.export(tmp_path / "equal.onnx", opset=opset)


@pytest.mark.parametrize("opset", [8, 9, 10])  # (PositionEmbedding's Expand arrives in 8)
@pytest.mark.parametrize("kind", ["SimpleRNN", "LSTM", "GRU", "Bidirectional", "PositionEmbedding"])
def test_sequence_layers_below_opset_10(kind, opset, tmp_path, rng):
    """Before opset 10 Slice has no steps and takes its bounds as attributes: go_backwards reverses
    with a Gather of the steps backwards, PositionEmbedding slices its table with attributes. Each
    file passes the full check and onnxruntime computes what predict does; it loads back to the
    same predictions."""
    # (PositionEmbedding's example ends in a softmax over (time, features), which needs opset 13.)
    shape, layers = ((3, 4), lambda: [PositionEmbedding(6), Dense(2, "tanh")]) if kind == "PositionEmbedding" \
        else LAYER_EXAMPLES[kind]
    model = built(layers(), shape)
    path = tmp_path / "model.onnx"
    model.export(path, opset=opset)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    for node in proto.graph.node:
        if node.op_type == "Slice":
            assert len(node.input) == (1 if opset < 10 else 4 if kind == "PositionEmbedding" else 5)
    x = rng.normal(size=(5, *shape)).astype(np.float32)
    want = model.predict(x)
    for rows in (1, 5):
        assert_close(run_onnx(path, x[:rows]), want[:rows], 1e-5)
    np.testing.assert_allclose(clnet.onnx.load(path).predict(x), want, rtol=1e-6, atol=1e-6)


def test_import_ops(tmp_path, rng):
    """ONNX nodes that no clnet layer stands for, as other exporters write them, read as clnet.ops:
    Where of a bool (Greater) and Not of a Cast to bool, arithmetic of two computed tensors
    (broadcast) and of constant arrays, Div of a constant by a tensor, Min, Max, Pow, Exp, Log, Sqrt,
    Abs, Neg, a general Clip, ReduceSum, ReduceMin, ReduceMax, Gather of constant indices, MatMul of
    two computed tensors and of a constant by one, a Slice, Expand of a number to Shape(x); the
    model computes what onnxruntime does."""
    f = lambda *shape: rng.normal(size=shape).astype(np.float32)
    c = lambda value: np.array(value, np.float32)
    node = helper.make_node
    nodes = [
        node("Greater", ["x", "zero"], ["gt"]), node("Neg", ["x"], ["nx"]), node("Where", ["gt", "x", "nx"], ["w"]),
        node("Cast", ["x"], ["xb"], to=TensorProto.BOOL), node("Not", ["xb"], ["nxb"]),
        node("Cast", ["nxb"], ["iz"], to=TensorProto.FLOAT), node("Cast", ["xb"], ["nz"], to=TensorProto.FLOAT),
        node("Min", ["x", "one"], ["mn"]), node("Exp", ["mn"], ["e"]),
        node("ReduceSum", ["x", "last"], ["rs"]), node("Mul", ["x", "rs"], ["xr"]),
        node("Gather", ["x", "rows"], ["gx"], axis=1), node("Mul", ["x", "vector"], ["xv"]),
        node("Sub", ["gx", "xv"], ["d"]),
        node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]), node("MatMul", ["x", "xt"], ["xx"]),
        node("MatMul", ["xx", "x"], ["xxx"]), node("MatMul", ["matrix", "x"], ["cx"]),
        node("Clip", ["x", "low", "high"], ["cl"]), node("Abs", ["x"], ["ax"]), node("Pow", ["ax", "power"], ["pw"]),
        node("Sqrt", ["ax"], ["sq"]), node("Add", ["ax", "one"], ["ax1"]), node("Log", ["ax1"], ["lg"]),
        node("Div", ["two", "ax1"], ["dv"]), node("Sigmoid", ["x"], ["sg"]), node("Max", ["x", "sg"], ["mx"]),
        node("ReduceMin", ["x"], ["rmin"], axes=[1], keepdims=1), node("ReduceMax", ["x"], ["rmax"], axes=[1]),
        node("Sub", ["rmax", "rmin"], ["range"]), node("Add", ["mx", "range"], ["mxr"]),
        node("Slice", ["x", "start", "end", "axis"], ["sl"]), node("Concat", ["sl", "rmin"], ["sl2"], axis=1),
        node("Shape", ["x"], ["shape"]), node("Expand", ["three", "shape"], ["threes"]),
        node("Concat", ["w", "iz", "nz", "e", "xr", "d", "xxx", "cx", "cl", "pw", "sq", "lg", "dv", "mxr", "sl2",
                        "threes"], ["y"], axis=1)]
    constants = {"zero": c(0.0), "one": c(1.0), "two": c(2.0), "three": c(3.0), "last": np.array([2], np.int64),
                 "rows": np.array([2, 0, 1], np.int64), "vector": f(4), "matrix": f(3, 3), "low": c(-0.5),
                 "high": c(0.5), "power": c(1.5), "start": np.array([1], np.int64), "end": np.array([3], np.int64),
                 "axis": np.array([1], np.int64)}
    x = f(7, 3, 4)
    x[0, 0, 0] = 0.0
    proto = graph_model(nodes, constants, (3, 4), (48, 4))
    onnx.checker.check_model(proto, full_check=True)
    model = clnet.onnx.load(proto)
    kinds = {type(layer).__name__ for layer in model.layers}
    assert {"Elementwise", "Reduction", "Take", "MatMul", "Slice"} <= kinds
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(model.predict(x), session.run(["y"], {"x": x})[0], 1e-5)


def test_fixed_batch(tmp_path, rng):
    model = built([Flatten(), Dense(3, "softmax")], (2, 2))
    path = tmp_path / "model.onnx"
    clnet.onnx.export(model, path, batch=7, opset=13)
    proto = onnx.load(path)
    assert [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim] == [7, 2, 2]
    assert proto.opset_import[0].version == 13 and proto.ir_version == 7
    x = rng.normal(size=(7, 2, 2)).astype(np.float32)
    assert_close(run_onnx(path, x), model.predict(x), 1e-5)
    with pytest.raises(Exception, match="Got: 1 Expected: 7"):
        run_onnx(path, x[:1])


# -- import -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,outputs,leak", [("torch_mlp.onnx", "torch_mlp.npz", 0.1),
                                               ("torch_mlp_dynamo.onnx", "torch_mlp.npz", 0.1),
                                               ("keras_mlp.onnx", "keras_mlp.npz", 0.2)])
def test_import_trained_elsewhere(name, outputs, leak):
    """tests/make_torch_onnx_fixture.py wrote these with torch.onnx.export (both exporters) and
    Keras 3's model.export, and stored the framework's outputs: the loaded model predicts them
    and fine-tunes."""
    stored = np.load(DATA / outputs)
    model = clnet.onnx.load(DATA / name)
    assert [(type(l).__name__, getattr(l, "activation", None).__class__.__name__) for l in model.layers] == [
        ("Flatten", "NoneType"), ("Dense", "ReLU"), ("Dense", "Swish"), ("Dense", "LReLU"), ("Dense", "Tanh"),
        ("Dense", "Sigmoid"), ("Dense", "Softmax")]
    assert model.layers[3].activation.a == leak and not model.layers[3].use_bias
    assert_close(model.predict(stored["x"]), stored["y"], 1e-5)

    labels = np.arange(len(stored["x"])) % 3
    model.compile(clnet.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    before = model.evaluate(stored["x"], labels)
    history = model.fit(stored["x"], labels, batch_size=7, epochs=5, verbose=0, shuffle=False)
    after = model.evaluate(stored["x"], labels)
    assert after < before and history.history["loss"][-1] < history.history["loss"][0]


def graph_model(nodes, initializers, input_shape, output_shape, opset=17, dtype=TensorProto.FLOAT):
    graph = helper.make_graph(nodes, "handmade", [helper.make_tensor_value_info("x", dtype, ["n", *input_shape])],
                              [helper.make_tensor_value_info("y", dtype, ["n", *output_shape])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 8
    return proto


def test_import_patterns(tmp_path, rng):
    """MatMul + Add, Gemm with alpha/beta and transB=0, scalar Mul/Sub/Div/Add folded into
    Sigmoid(a, b) and Linear(a, b), Reshape through a Constant node, Swish(b) with b != 1: the
    loaded model computes what onnxruntime computes."""
    f = lambda *shape: rng.normal(size=shape).astype(np.float32)
    c = lambda value: np.array(value, np.float32)
    nodes = [
        helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([0, -1], np.int64))),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w1"], ["z1"]),
        helper.make_node("Add", ["b1", "z1"], ["y1"]),
        helper.make_node("Sigmoid", ["y1"], ["s1"]),
        helper.make_node("Mul", ["two", "s1"], ["m1"]),
        helper.make_node("Sub", ["m1", "half"], ["a1"]),                        # Sigmoid(2, 0.5)
        helper.make_node("Gemm", ["a1", "w2", "b2"], ["z2"], alpha=0.5, beta=2.0),
        helper.make_node("Div", ["z2", "four"], ["d2"]),
        helper.make_node("Add", ["d2", "quarter"], ["a2"]),                     # Linear(0.25, 0.25)
        helper.make_node("Relu", ["a2"], ["r"]),
        helper.make_node("Mul", ["r", "b"], ["rb"]),
        helper.make_node("Sigmoid", ["rb"], ["g"]),
        helper.make_node("Mul", ["g", "r"], ["sw"]),                            # Swish(1.5)
        helper.make_node("Identity", ["sw"], ["i"]),
        helper.make_node("Softmax", ["i"], ["y"], axis=1),
    ]
    constants = {"w1": f(6, 5), "b1": f(5), "two": c(2.0), "half": c(0.5), "w2": f(5, 4), "b2": f(1, 4),
                 "four": c(4.0), "quarter": c(0.25), "b": c([1.5])}
    path = tmp_path / "handmade.onnx"
    onnx.save(graph_model(nodes, constants, (2, 3), (4,)), path)
    model = clnet.onnx.load(path)
    layers = [(type(l).__name__, l.get_config().get("activation")) for l in model.layers]
    assert layers == [("Flatten", None), ("Dense", {"name": "sigmoid", "a": 2.0, "b": 0.5}),
                      ("Dense", {"name": "linear", "a": 0.25, "b": 0.25}), ("ReLU", None),
                      ("Activation", "swish"), ("Softmax", None)]
    assert model.layers[4].activation.b == 1.5
    x = f(7, 2, 3)
    assert_close(model.predict(x), run_onnx_io(path, x), 1e-5)


def test_import_computed_flatten(tmp_path, rng):
    """A Flatten whose target shape is computed from the input's Shape, by every op clnet
    evaluates there (Keras writes Shape -> Gather -> Unsqueeze -> Concat)."""
    i64 = lambda *values: np.array(values, np.int64)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "one"], ["s0"]),
             helper.make_node("Squeeze", ["s0", "zero"], ["n"]),
             helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
             helper.make_node("Cast", ["target"], ["target64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "target64"], ["flat"]),
             helper.make_node("Cast", ["flat"], ["flat32"], to=TensorProto.FLOAT),
             helper.make_node("Gemm", ["flat32", "w"], ["y"], transB=1)]
    constants = {"zero": i64(0), "one": i64(1), "minus_one": i64(-1), "w": rng.normal(size=(4, 6)).astype(np.float32)}
    path = tmp_path / "computed.onnx"
    onnx.save(graph_model(nodes, constants, (2, 3), (4,)), path)
    model = clnet.onnx.load(path)
    assert [type(l).__name__ for l in model.layers] == ["Flatten", "Dense"]
    x = rng.normal(size=(5, 2, 3)).astype(np.float32)
    assert_close(model.predict(x), run_onnx_io(path, x), 1e-5)


def run_onnx_io(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def test_import_float64_graph(rng):
    w = rng.normal(size=(3, 2))
    proto = graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"w": w}, (3,), (2,),
                        dtype=TensorProto.DOUBLE)
    model = clnet.onnx.load(proto)
    assert model.dtype == np.float64 and not model.layers[0].use_bias
    x = rng.normal(size=(5, 3))
    np.testing.assert_allclose(model.predict(x), x @ w, rtol=1e-12)
    assert clnet.onnx.load(proto, floatx="float32").dtype == np.float32


@pytest.mark.parametrize("node,constants,message", [
    (helper.make_node("Cos", ["x"], ["y"], name="my_cos"), {},
     r"ONNX node 'my_cos' uses the op 'Cos', which clnet.onnx.load does not support; supported ops: "
     + re.escape(", ".join(SUPPORTED_OPS)) + "$"),
    (helper.make_node("Erf", ["x"], ["y"], name="e"), {},
     r"ONNX node e \(Erf\): clnet reads Erf only as part of GELU, 0.5 x \(1 \+ Erf\(x / sqrt\(2\)\)\)"),
    (helper.make_node("Exp", ["c"], ["y"], name="e"), {"c": np.ones(3, np.float32)},
     r"ONNX node e \(Exp\): its operands are constants; clnet computes ops of tensors computed from the graph's "
     r"input"),
    (helper.make_node("Gather", ["x", "i"], ["y"], name="ga"), {"i": np.array([0, 1, 2], np.int64)},
     r"ONNX node ga \(Gather\): it gathers along the batch axis; clnet takes along sample axes \(ops.take\)"),
    (helper.make_node("Gather", ["x", "x"], ["y"], axis=1, name="ga"), {},
     r"ONNX node ga \(Gather\): its indices 'x' is computed in the graph; clnet needs a constant"),
    (helper.make_node("Min", ["x", "x", "x"], ["y"], name="mn"), {},
     r"ONNX node mn \(Min\): it takes 3 operands; clnet reads Min of two \(ops.minimum\)"),
    (helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0, name="rs"), {},
     r"ONNX node rs \(ReduceSum\): it reduces axes \[0, 1\] of \(None, 3\), the batch axis among them; clnet "
     r"reduces the sample axes"),
    (helper.make_node("Clip", ["x", "low", "high"], ["y"], name="cl"),
     {"low": np.array(1.0, np.float32), "high": np.array(0.0, np.float32)},
     r"ONNX node cl \(Clip\): clip: x_min \(1.0\) must not exceed x_max \(0.0\)"),
    (helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE, name="c"), {},
     r"ONNX node c \(Cast\): it casts to float64; clnet computes in the graph input's float type throughout"),
    (helper.make_node("Softmax", ["x"], ["y"], axis=0, name="sm"), {},
     r"ONNX node sm \(Softmax\): axis=0 on a tensor of rank 2; clnet's softmax normalises along one sample axis"),
    (helper.make_node("Gemm", ["x", "w"], ["y"], transA=1, name="g"), {"w": np.ones((3, 3), np.float32)},
     r"ONNX node g \(Gemm\): clnet reads Gemm\(x, W, C\) with x a computed tensor, not transposed"),
    (helper.make_node("Mul", ["x", "w"], ["y"], name="m"), {"w": np.ones((2, 1, 3), np.float32)},
     r"ONNX node m \(Mul\): multiply: cannot broadcast shapes \(None, 3\) and \(2, 1, 3\): .* the batch axis of "
     r"\(None, 3\) would meet axis 1 of a tensor of 3 axes"),
    (helper.make_node("Mul", ["x", "w"], ["y"], name="m"), {"w": np.ones(2, np.float32)},
     r"ONNX node m \(Mul\): multiply: cannot broadcast shapes \(None, 3\) and \(2,\): axis -1 has extents 2 "
     r"and 3"),
    (helper.make_node("Reshape", ["x", "s"], ["y"], name="r"), {"s": np.array([3, -1], np.int64)},
     r"ONNX node r \(Reshape\): it reshapes samples of shape \(3,\) to \[3, -1\]; clnet reads a Reshape that "
     r"keeps the batch axis first"),
    (helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0], name="t"), {},
     r"ONNX node t \(Transpose\): perm=\[1, 0\] moves the batch axis; clnet keeps it first"),
    (helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), {"w": np.ones((4, 3), np.float32)},
     r"ONNX node mm \(MatMul\): it multiplies samples of shape \(3,\) by a weight of shape \(4, 3\)"),
])
def test_import_errors(node, constants, message):
    with pytest.raises(ValueError, match=message):
        clnet.onnx.load(graph_model([node], constants, (3,), (3,)))


def test_import_fork_and_merge(rng):
    """A tensor read by two nodes and merged again: a functional Model of a ReLU, an Activation
    layer and an Add, which computes what onnxruntime computes."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Tanh", ["x"], ["t"], name="tanh"),
             helper.make_node("Add", ["r", "t"], ["y"], name="add")]
    proto = graph_model(nodes, {}, (3,), (3,))
    model = clnet.onnx.load(proto)
    assert type(model) is clnet.Model
    assert sorted(type(layer).__name__ for layer in model.layers) == ["Activation", "Add", "Input", "ReLU"]
    x = rng.normal(size=(5, 3)).astype(np.float32)
    assert_close(model.predict(x), np.maximum(x, 0) + np.tanh(x), 1e-6)


def test_import_dropout_identity_and_dead_branches(rng):
    """Dropout (opset 13, its ratio an input) and Identity are nothing; a node whose output no
    path to the graph's output reads makes no layer."""
    w = rng.normal(size=(3, 2)).astype(np.float32)
    nodes = [helper.make_node("Dropout", ["x", "ratio"], ["d"]), helper.make_node("Identity", ["d"], ["i"]),
             helper.make_node("Tanh", ["i"], ["unused"]), helper.make_node("MatMul", ["i", "w"], ["y"])]
    model = clnet.onnx.load(graph_model(nodes, {"ratio": np.array(0.5, np.float32), "w": w}, (3,), (2,)))
    assert [type(layer).__name__ for layer in model.layers] == ["Dense"]
    x = rng.normal(size=(4, 3)).astype(np.float32)
    assert_close(model.predict(x), x @ w, 1e-6)


def test_import_channels_first_graph(tmp_path, rng):
    """A channels-first graph as PyTorch writes one, with what the torch fixture lacks: a Conv whose
    pads are neither 'valid' nor Keras's 'same' (a ZeroPadding2D before a 'valid' Conv2D), an
    AveragePool that counts its padding (ZeroPadding2D again), a MaxPool with auto_pad=SAME_UPPER,
    a dilated Conv without bias with Keras's 'same' as explicit pads, a GlobalAveragePool and a
    Flatten. The loaded model takes the images channels_last and predicts what onnxruntime does."""
    f = lambda *shape: rng.normal(0.0, 0.5, size=shape).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 2], pads=[0, 1, 2, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("AveragePool", ["r1"], ["p1"], kernel_shape=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("MaxPool", ["p1"], ["p2"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
        helper.make_node("Conv", ["p2", "w2"], ["c2"], kernel_shape=[2, 2], dilations=[2, 1], pads=[1, 0, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w3", "b3"], ["y"], transB=1)]
    constants = {"w1": f(4, 3, 3, 2), "b1": f(4), "w2": f(5, 4, 2, 2), "w3": f(2, 5), "b3": f(2)}
    path = tmp_path / "nchw.onnx"
    onnx.save(graph_model(nodes, constants, (3, 9, 8), (2,)), path)
    model = clnet.onnx.load(path)
    assert model.input_shape == (3, 9, 8)  # as the file declares: the Permute makes it channels_last
    assert [type(layer).__name__ for layer in model.layers] == [
        "Permute", "ZeroPadding2D", "Conv2D", "ZeroPadding2D", "AveragePooling2D", "MaxPooling2D", "Conv2D",
        "GlobalAveragePooling2D", "Flatten", "Dense"]
    assert [layer.padding for layer in model.layers if isinstance(layer, (Conv2D, MaxPooling2D))] == [
        "valid", "same", "same"]
    x = f(7, 3, 9, 8)
    assert_close(model.predict(x), run_onnx_io(path, x), 1e-5)


def test_import_conv1d_and_sequence_ops(tmp_path, rng):
    """A channels-first Conv1D with auto_pad=SAME_UPPER and strides, a MaxPool, a ReduceMean over
    the steps (GlobalAveragePooling1D) and a Concat of two branches along the channels."""
    f = lambda *shape: rng.normal(0.0, 0.5, size=shape).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3], strides=[2], auto_pad="SAME_UPPER"),
        helper.make_node("Tanh", ["c1"], ["t1"]),
        helper.make_node("MaxPool", ["t1"], ["m1"], kernel_shape=[2], strides=[1]),
        helper.make_node("Conv", ["t1", "w2"], ["c2"], kernel_shape=[2]),
        helper.make_node("Concat", ["m1", "c2"], ["cat"], axis=1),
        helper.make_node("ReduceMean", ["cat"], ["mean"], axes=[2], keepdims=0),
        helper.make_node("Gemm", ["mean", "w3"], ["y"])]
    constants = {"w1": f(4, 2, 3), "b1": f(4), "w2": f(3, 4, 2), "w3": f(7, 2)}
    path = tmp_path / "conv1d.onnx"
    onnx.save(graph_model(nodes, constants, (2, 11), (2,)), path)
    model = clnet.onnx.load(path)
    assert model.input_shape == (2, 11)
    concatenate, = (layer for layer in model.layers if isinstance(layer, Concatenate))
    assert concatenate.axis == -1
    x = f(5, 2, 11)
    assert_close(model.predict(x), run_onnx_io(path, x), 1e-5)


@pytest.mark.parametrize("nodes,constants,message", [
    ([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 1], group=2, name="grouped")],
     {"w": np.ones((4, 1, 1, 1), np.float32)},
     r"ONNX node grouped \(Conv\): group=2; clnet's Conv1D/Conv2D compute group=1 only"),
    ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 1, 1], name="mp")], {},
     r"ONNX node mp \(MaxPool\): pads=\[1, 1, 1, 1\]; clnet's max pools pad only as Keras's 'same'"),
    ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2], name="dil")], {},
     r"ONNX node dil \(MaxPool\): dilations=\[2, 2\]; clnet's pooling layers have no dilation"),
    ([helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=2, name="ln")], {"g": np.ones((4, 4), np.float32)},
     r"ONNX node ln \(LayerNormalization\): axis=2 normalises axes \[2, 3\] of \(None, 2, 4, 4\) together; clnet's "
     r"LayerNormalization normalises one axis"),
    ([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect", name="pad")],
     {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)},
     r"ONNX node pad \(Pad\): mode='reflect', value=0.0; clnet pads with zeros"),
])
def test_import_spatial_errors(nodes, constants, message):
    with pytest.raises(ValueError, match=message):
        clnet.onnx.load(graph_model(nodes, constants, (2, 4, 4), (2, 4, 4)))


@pytest.mark.parametrize("name", ["torch_cnn.onnx", "torch_cnn_dynamo.onnx"])
def test_import_torch_cnn(name):
    """tests/make_torch_onnx_fixture.py's CNN, exported by torch.onnx.export (both exporters) in NCHW: loaded as a
    channels_last functional Model (the residual Add), its convolution kernels transposed to
    Keras's layout and the first Dense's rows reordered from torch's (channels, height, width)
    Flatten; it predicts what torch did on the same images, and fine-tunes."""
    stored = np.load(DATA / "torch_cnn.npz")
    model = clnet.onnx.load(DATA / name)
    assert type(model) is clnet.Model and model.input_shape == (1, 12, 12)  # the file's NCHW
    assert [(type(l).__name__, getattr(getattr(l, "activation", None), "name", None)) for l in model.layers] == [
        ("Input", None), ("Permute", None), ("Conv2D", "relu"), ("BatchNormalization", None), ("Conv2D", "relu"),
        ("BatchNormalization", None), ("Add", None), ("MaxPooling2D", None), ("ZeroPadding2D", None),
        ("Conv2D", "relu"), ("Flatten", None), ("Dense", "softmax")]
    assert [l.padding for l in model.layers if isinstance(l, Conv2D)] == ["same", "same", "valid"]
    x = stored["x"]  # NCHW, as torch took it
    assert_close(model.predict(x), stored["y"], 1e-5)

    labels = np.arange(len(x)) % 10
    model.compile(clnet.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    before = model.evaluate(x, labels)
    history = model.fit(x, labels, batch_size=7, epochs=5, verbose=0, shuffle=False)
    assert model.evaluate(x, labels) < before and history.history["loss"][-1] < history.history["loss"][0]


def test_import_keras_cnn():
    """A Keras 3 CNN (channels_last, exported through torch.onnx): Transposes around each Conv and
    MaxPool cancel, each Conv's bias Add becomes its bias, the folded BatchNormalization (Sub, Mul,
    Add) a BatchNormalization; it predicts what Keras did, and fine-tunes."""
    stored = np.load(DATA / "keras_cnn.npz")
    model = clnet.onnx.load(DATA / "keras_cnn.onnx")
    assert type(model) is clnet.Sequential and model.input_shape == (10, 10, 2)
    assert [(type(l).__name__, getattr(l, "use_bias", None), getattr(getattr(l, "activation", None), "name", None))
            for l in model.layers] == [
        ("Conv2D", True, "relu"), ("BatchNormalization", None, None),
        ("MaxPooling2D", None, None), ("Conv2D", True, "linear"), ("GlobalAveragePooling2D", None, None),
        ("Dense", True, "softmax")]
    assert_close(model.predict(stored["x"]), stored["y"], 1e-5)
    labels = np.arange(len(stored["x"])) % 3
    model.compile(clnet.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    history = model.fit(stored["x"], labels, batch_size=7, epochs=5, verbose=0, shuffle=False)
    assert history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.parametrize("name", ["torch_ln_opset14.onnx", "torch_ln_opset17.onnx"])
def test_import_torch_layer_norm(name):
    """torch's LayerNorm as the decomposed ReduceMean ... Div, Mul, Add of opset 14 and as the
    LayerNormalization op of opset 17, and its GELU as Erf: the same model either way."""
    stored = np.load(DATA / "torch_ln.npz")
    model = clnet.onnx.load(DATA / name)
    assert type(model) is clnet.Sequential
    assert [type(l).__name__ for l in model.layers] == ["Dense", "LayerNormalization", "Activation", "Dense"]
    norm = model.layers[1]
    assert (norm.axis, norm.epsilon, norm.center, norm.scale) == (-1, 1e-5, True, True)
    assert model.layers[2].activation.name == "gelu"
    assert_close(model.predict(stored["x"]), stored["y"], 1e-5)
    labels = np.arange(len(stored["x"])) % 3
    model.compile(clnet.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    history = model.fit(stored["x"], labels, batch_size=7, epochs=5, verbose=0, shuffle=False)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_load_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no ONNX file at '.*missing.onnx'"):
        clnet.onnx.load(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\xff not a protobuf \x00" * 10)
    with pytest.raises(ValueError, match="junk.onnx' is not"):
        clnet.onnx.load(tmp_path / "junk.onnx")


# -- bad export input ---------------------------------------------------------------------------
def test_export_errors(tmp_path):
    path = tmp_path / "model.onnx"
    unbuilt = clnet.Sequential([Dense(2)], name="unbuilt")
    with pytest.raises(ValueError, match="cannot export model 'unbuilt': it is not built"):
        clnet.onnx.export(unbuilt, path)
    model = built([Dense(4, "relu"), Dense(2, "softmax", name="head")], (3,))
    with pytest.raises(ValueError, match=r"layer 'head' \(Dense\) needs ONNX opset >= 13 for Softmax normalising "
                                         "along the last axis alone; got opset=12"):
        model.export(path, opset=12)
    newest = onnx.defs.onnx_opset_version()
    for opset in (6, newest + 1, "17", 17.0, True):
        with pytest.raises(ValueError, match=f"opset must be an integer from 7 to {newest}"):
            model.export(path, opset=opset)
    for batch in (0, -1, "static", 2.0):
        with pytest.raises(ValueError, match=f"batch must be 'dynamic' or a positive integer, got {batch!r}"):
            clnet.onnx.export(model, path, batch=batch)
    with pytest.raises(FileNotFoundError, match="directory '.*no-such-dir' does not exist"):
        model.export(tmp_path / "no-such-dir" / "model.onnx")
    with pytest.raises(ValueError, match="unknown export format 'tflite'; expected 'onnx'"):
        model.export(path, format="tflite")
    with pytest.raises(TypeError, match="expects a clnet model, got str"):
        clnet.onnx.export("model", path)
    assert not path.exists()


def test_op_missing_from_opset(tmp_path):
    """A layer whose op is newer than the opset asked for is named in the error."""
    class Gelu(ReLUFunction):
        name = ""  # not registered

        def to_onnx(self, graph, x):
            return graph.op("Gelu", x)  # opset 20
    model = built([Activation(Gelu())], (3,))
    with pytest.raises(ValueError, match=r"layer 'activation' \(Activation\) exports to the ONNX op Gelu, which "
                                         "first appears in opset 20; got opset=17"):
        model.export(tmp_path / "model.onnx")


# -- without onnx installed ---------------------------------------------------------------------
def test_missing_onnx_names_the_extra(monkeypatch, tmp_path):
    model = built([Dense(2)], (3,))
    monkeypatch.setitem(sys.modules, "onnx", None)  # what an absent package looks like to import
    for call in (lambda: clnet.onnx.export(model, tmp_path / "m.onnx"), lambda: model.export(tmp_path / "m.onnx"),
                 lambda: clnet.onnx.load(tmp_path / "m.onnx")):
        with pytest.raises(ImportError, match=r"needs the 'onnx' package, which is not installed; install "
                                              r"clnet's onnx extra: pip install 'clnet\[onnx\]'"):
            call()


def test_clnet_imports_without_onnx(tmp_path):
    code = ("import sys; sys.modules['onnx'] = sys.modules['onnxruntime'] = None\n"
            "import clnet, numpy as np\n"
            "from clnet.layers import Input, Dense\n"
            "m = clnet.Sequential([Input((3,)), Dense(2)], seed=0)\n"
            "print(m.predict(np.ones((1, 3))).shape)\n"
            "try:\n    m.export('m.onnx')\nexcept ImportError as e:\n    print(e)\n")
    env = {**os.environ, "CLNET_QUIET": "1", "PYTHONPATH": str(Path(clnet.__file__).parent.parent)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["(1, 2)", "clnet.onnx.export needs the 'onnx' package, which is not "
                                          "installed; install clnet's onnx extra: pip install 'clnet[onnx]'  (or: "
                                          "pip install onnx onnxruntime)"]
    assert not (tmp_path / "m.onnx").exists()
