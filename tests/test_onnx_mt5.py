"""clnet.onnx.export(..., target="mt5"): files for MetaTrader 5, whose embedded runtime is
onnxruntime 1.14. Accepted models (at opsets 17 and 18) have only the batch axis open, are
float32, write only ops of MT5_OPS (GELU from Erf and Tanh, not the Gelu op of opset 20) and
onnxruntime matches predict; every example of tests/test_onnx.py exports so. Each refused case
(float64, a length of None, opset 19 and up, an op onnxruntime 1.14 does not run) is a ValueError
naming what is wrong and what is expected, and writes no file. .ci/onnx-oldest-runtime runs every
example in the oldest onnxruntime PyPI has."""
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_onnx import (ACTIVATIONS, ATTENTION_EXAMPLES, CONSTANT_EXAMPLES, GRAPH_EXAMPLES, LAYER_EXAMPLES,
                       OP_EXAMPLES, assert_close, built, example_models, run_onnx)

import clnet
from clnet import ops
from clnet.activations import ReLU as ReLUFunction
from clnet.layers import (LSTM, Activation, BatchNormalization, Conv1D, Dense, Flatten, Input, MultiHeadAttention,
                          ReLU)
from clnet.onnx.exporter import MT5_OPS

MT5 = "target='mt5': "


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def gelus():
    """Both GELUs of clnet.ops and the gelu activation: ONNX's Gelu op from opset 20, Tanh and Erf before."""
    x = Input((6,))
    # (Both GELUs of one tensor: onnxruntime's fusions, 1.15 to 1.32, once broke clnet's graph of them.)
    h = ops.gelu(x) + ops.gelu(x, approximate=False)
    return clnet.Model(x, Dense(3, "gelu")(h), seed=2)


def causal_conv_batch_norm():
    model = built([Conv1D(6, 3, padding="causal", dilation_rate=2), BatchNormalization(), ReLU(), Flatten(),
                   Dense(2)], (12, 4))
    norm = model.layers[2]
    norm.set_weights([np.random.default_rng(0).uniform(0.5, 2.0, w.shape) for w in norm.get_weights()])
    return model


def causal_attention():
    x = Input((5, 4))
    return clnet.Model(x, Dense(2)(Flatten()(MultiHeadAttention(2, 3)(x, x, use_causal_mask=True))), seed=2)


ACCEPTED = {"mlp": lambda: built([Flatten(), Dense(8, "relu"), Dense(3, "softmax")], (4, 5)),
            "lstm": lambda: built([LSTM(6), Dense(1)], (10, 3)),
            "causal_conv_batch_norm": causal_conv_batch_norm, "causal_attention": causal_attention, "gelus": gelus}


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_mt5_exports_run_as_predict(name, opset, tmp_path, rng):
    model = ACCEPTED[name]()
    path = tmp_path / "model.onnx"
    clnet.onnx.export(model, path, opset=opset, target="mt5")
    proto = onnx.load(path)
    assert (proto.opset_import[0].version, proto.ir_version) == (opset, 8)
    (graph_input,), (graph_output,) = proto.graph.input, proto.graph.output
    assert dims(graph_input) == ["batch", *model.input_shape] and dims(graph_output) == ["batch", *model.output_shape]
    assert graph_input.type.tensor_type.elem_type == graph_output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    kinds = {node.op_type for node in proto.graph.node}
    assert kinds <= MT5_OPS
    if name == "gelus":
        assert {"Tanh", "Erf"} <= kinds and "Gelu" not in kinds
    x = rng.normal(size=(7, *model.input_shape)).astype(np.float32)
    assert_close(run_onnx(path, x), model.predict(x), 1e-5)


def test_mt5_fixed_batch_and_model_export(tmp_path, rng):
    """A fixed batch is for MetaTrader too; model.export passes target on."""
    model = ACCEPTED["mlp"]()
    model.export(tmp_path / "one.onnx", batch=1, target="mt5")
    proto = onnx.load(tmp_path / "one.onnx")
    assert dims(proto.graph.input[0]) == [1, 4, 5] and dims(proto.graph.output[0]) == [1, 3]
    x = rng.normal(size=(1, 4, 5)).astype(np.float32)
    assert_close(run_onnx(tmp_path / "one.onnx", x), model.predict(x), 1e-5)


def test_every_example_exports_for_mt5(rng):
    """Every example of tests/test_onnx.py (each layer class, op and activation) and the tiny GPT
    exports for MetaTrader at opset 18: MT5_OPS holds every op clnet's layers write, and each is
    one that opset 18 has."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import tiny_gpt
    models = [model for name in sorted({**LAYER_EXAMPLES, **GRAPH_EXAMPLES, **ATTENTION_EXAMPLES, **OP_EXAMPLES})
              for model, _ in example_models(name, np.float32, rng)]
    for make in CONSTANT_EXAMPLES.values():
        x = Input((3, 4))
        models.append(clnet.Model(x, make()(x), seed=3))
    models += [built([Activation(name, **params), Flatten(), Dense(2, clnet.activations.get(name, **params))], (3, 4))
               for name, params in ACTIVATIONS]
    models.append(tiny_gpt.build_model(13, context=8, d_model=8, heads=2, blocks=2, seed=1))
    written = set()
    for model in models:
        written |= {node.op_type for node in clnet.onnx.model_proto(model, 18, target="mt5").graph.node}
    assert written <= MT5_OPS
    assert {"Gemm", "Conv", "LSTM", "GRU", "RNN", "Erf", "ReduceMean", "Pad", "Resize", "Where"} <= written
    assert all(onnx.defs.get_schema(op, 18) for op in MT5_OPS)


def test_mt5_refuses_float64_and_says_how_to_convert(tmp_path, rng):
    """The way the error names, load_model(path, floatx="float32"), gives a model that exports."""
    model = built([LSTM(4), Dense(2)], (5, 3), np.float64)
    path = tmp_path / "model.onnx"
    with pytest.raises(ValueError, match=rf"^{MT5}model 'sequential' computes in float64, and MetaTrader 5 takes "
                                         r"float32 models; build it with floatx='float32', or load a saved one as "
                                         r"float32 with clnet.load_model\(path, floatx='float32'\), and export that$"):
        clnet.onnx.export(model, path, target="mt5")
    assert not path.exists()
    clnet.onnx.export(model, path)  # without a target, float64 as before
    assert onnx.load(path).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    model.compile("adam", "mse")
    model.save(tmp_path / "model.h5")
    converted = clnet.load_model(tmp_path / "model.h5", floatx="float32")
    converted.export(tmp_path / "mt5.onnx", target="mt5")
    x = rng.normal(size=(7, 5, 3))
    assert_close(run_onnx(tmp_path / "mt5.onnx", x.astype(np.float32)), model.predict(x).astype(np.float32), 1e-5)


def test_mt5_refuses_a_length_of_none(tmp_path, rng):
    x = Input((None, 3))
    model = clnet.Model(x, Dense(2)(LSTM(4)(x)), name="any_length", seed=0)
    model.predict(rng.normal(size=(2, 5, 3)).astype(np.float32))  # built on a first length
    with pytest.raises(ValueError, match=rf"^{MT5}input 'input' of model 'any_length' has shape \(batch, None, 3\), "
                                         r"where None is a length left open; MetaTrader 5 expects only the batch "
                                         r"axis open: build the model on a fixed length for every other axis, e.g. "
                                         r"Input\(\(60, features\)\) for windows of 60 steps$"):
        clnet.onnx.export(model, tmp_path / "model.onnx", target="mt5")
    assert not (tmp_path / "model.onnx").exists()


@pytest.mark.parametrize("opset", [19, 20, 21])
def test_mt5_refuses_newer_opsets(opset, tmp_path):
    """Opsets onnxruntime 1.14 does not implement; without a target they export, with the Gelu op from 20."""
    model = gelus()
    with pytest.raises(ValueError, match=rf"^{MT5}opset={opset} is newer than onnxruntime 1.14, MetaTrader 5's "
                                         r"runtime, implements; expected opset <= 18 \(the default, 17, is\)$"):
        clnet.onnx.export(model, tmp_path / "model.onnx", opset=opset, target="mt5")
    assert not (tmp_path / "model.onnx").exists()
    kinds = {node.op_type for node in clnet.onnx.model_proto(model, opset).graph.node}
    assert ("Gelu" in kinds) == (opset >= 20)


def test_mt5_refuses_an_op_onnxruntime_1_14_lacks(tmp_path):
    """A layer writing the Gelu op of opset 20 whatever the opset: refused, naming the layer, even
    at opset 18 (where onnx's own check would name it too, less plainly)."""
    class Gelu(ReLUFunction):
        name = ""  # not registered

        def to_onnx(self, graph, x):
            return graph.op("Gelu", x)
    model = built([Dense(3), Activation(Gelu(), name="gelu_op")], (4,))
    for opset in (17, 18):
        with pytest.raises(ValueError, match=rf"^{MT5}layer 'gelu_op' \(Activation\) exports to the ONNX op Gelu "
                                             r"\(in ONNX from opset 20\), which is not among the ops that onnxruntime "
                                             r"1.14, MetaTrader 5's runtime, runs at opset <= 18; expected only the "
                                             r"ops of clnet.onnx.exporter.MT5_OPS$"):
            clnet.onnx.export(model, tmp_path / "model.onnx", opset=opset, target="mt5")
    assert not (tmp_path / "model.onnx").exists()


def test_unknown_target(tmp_path):
    with pytest.raises(ValueError, match=r"^target must be None or 'mt5' \(MetaTrader 5\), got 'mt4'$"):
        ACCEPTED["mlp"]().export(tmp_path / "model.onnx", target="mt4")
    assert not (tmp_path / "model.onnx").exists()
