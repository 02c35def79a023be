"""Keras 3's ReLU, LeakyReLU and ELU layers and the "elu" activation: kernels against a numpy
transcription of Keras's formulas in float32 at awkward sizes (forward and input gradient),
float64 gradient checks by central differences, configs, checkpoints, ONNX export (onnxruntime)
and import, and bad arguments."""
import numpy as np
import onnx
import pytest

import clnet
from clnet.layers import ELU, Activation, Dense, Flatten, Input, LeakyReLU, ReLU
from reference import trains_saves_and_reloads
from test_gradients import build, check_model
from test_onnx import LAYER_EXAMPLES, assert_close, built, check_file, run_onnx, structure
from test_pooling import device_pass

F32 = np.float32


def keras_relu(x, negative_slope=0.0, max_value=None, threshold=0.0):
    """keras.activations.relu (Keras 3's ReLU.static_call), step by step in numpy."""
    if negative_slope != 0 and max_value is None and threshold == 0:
        return np.where(x >= 0, x, negative_slope * x)  # backend.nn.leaky_relu
    negative_part = np.maximum(threshold - x, 0) if negative_slope != 0 else 1
    y = x * (x > threshold) if threshold != 0 else np.maximum(x, 0)
    if max_value is not None:
        y = np.clip(y, 0, max_value)
    return y - negative_slope * negative_part if negative_slope != 0 else y


def keras_relu_derivative(x, negative_slope=0.0, max_value=None, threshold=0.0):
    top = np.inf if max_value is None else max_value
    return np.where(x > threshold, (x < top).astype(x.dtype), negative_slope)


def keras_elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


# ReLU's arguments: defaults, each alone, all three, and max_value below the threshold.
RELU_CASES = [{}, {"max_value": 6.0}, {"negative_slope": 0.1}, {"threshold": 0.5},
              {"max_value": 2.5, "negative_slope": 0.2, "threshold": 0.5}, {"max_value": 0.3, "threshold": 0.5},
              {"max_value": 1.0, "negative_slope": 0.3}]


def away_from_kinks(x, *points):
    """x moved off the breakpoints of a piecewise function, where float32 rounding could pick the
    other piece than numpy's float64 comparison."""
    for p in points:
        x = np.where(np.abs(x - p) < 1e-3, p + 1e-2, x)
    return x


@pytest.mark.parametrize("rows", [1, 3, 13])
@pytest.mark.parametrize("shape", [(1,), (5,), (129,), (3, 7)])
@pytest.mark.parametrize("kwargs", RELU_CASES, ids=[str(k) or "defaults" for k in RELU_CASES])
def test_relu_kernels(rt, rng, rows, shape, kwargs):
    x = away_from_kinks(rng.normal(0, 4, size=(rows, *shape)), kwargs.get("threshold", 0.0),
                        kwargs.get("max_value", 0.0)).astype(F32)
    dy = rng.normal(size=x.shape).astype(F32)
    y, dx = device_pass(rt, ReLU(**kwargs), shape, x, dy)
    np.testing.assert_allclose(y.reshape(x.shape), keras_relu(x.astype(float), **kwargs), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx.reshape(x.shape), dy * keras_relu_derivative(x.astype(float), **kwargs),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 3, 13])
@pytest.mark.parametrize("width", [1, 5, 129])
@pytest.mark.parametrize("slope", [0.3, 0.0, 1.5])
def test_leaky_relu_kernels(rt, rng, rows, width, slope):
    x, dy = rng.normal(size=(2, rows, width)).astype(F32)
    layer = LeakyReLU() if slope == 0.3 else LeakyReLU(slope)
    y, dx = device_pass(rt, layer, (width,), x, dy)
    np.testing.assert_allclose(y, keras_relu(x.astype(float), negative_slope=slope), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dx, dy * np.where(x > 0, 1, slope), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("rows", [1, 3, 13])
@pytest.mark.parametrize("width", [1, 5, 129])
@pytest.mark.parametrize("alpha", [1.0, 0.5, -0.7])
def test_elu_kernels(rt, rng, rows, width, alpha):
    x, dy = rng.normal(0, 3, size=(2, rows, width)).astype(F32)
    x[0, 0] = -1e-5  # small negative inputs keep their digits (expm1)
    y, dx = device_pass(rt, ELU() if alpha == 1.0 else ELU(alpha), (width,), x, dy)
    np.testing.assert_allclose(y, keras_elu(x.astype(float), alpha), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(dx, dy * np.where(x > 0, 1, alpha * np.exp(np.minimum(x, 0))), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("units", [1, 5, 129])
@pytest.mark.parametrize("rows", [1, 3, 13])
def test_activation_strings(rng, units, rows):
    """activation="elu" (alpha 1) and "leaky_relu" (Keras's function: clnet's lrelu with slope 0.2,
    where Keras's LeakyReLU layer and lrelu have 0.3) fused into Dense (the CPU form's vector
    lanes, any width), against numpy."""
    x = rng.normal(size=(rows, 6)).astype(F32)
    for name, reference in (("elu", keras_elu), ("leaky_relu", lambda z: np.where(z > 0, z, 0.2 * z))):
        model = clnet.Sequential([Input((6,)), Dense(units, name)], seed=2)
        kernel, bias = model.get_weights()
        assert_close(model.predict(x), reference(x.astype(float) @ kernel + bias).astype(F32), 1e-5)
    assert clnet.activations.get("elu", a=0.5).get_config() == {"name": "elu", "a": 0.5}


def test_gradients(fp64, rng):
    """Central differences in float64 through each layer, "elu" fused into a Dense, and the input."""
    layers = [Dense(5), ReLU(max_value=0.8, negative_slope=0.2, threshold=0.1), Dense(4, "elu"), LeakyReLU(0.2),
              Dense(4, clnet.activations.get("elu", a=0.5)), ELU(0.7), Dense(3)]
    model = build([Input((4,)), *layers], "mse")
    check_model(model, rng.normal(size=(6, 4)), rng.normal(size=(6, 3)), rng)
    model = build([Input((3, 4)), ELU(), ReLU(max_value=1.5), Flatten(), Dense(2, "elu")], "mse")
    check_model(model, rng.normal(size=(4, 3, 4)), rng.normal(size=(4, 2)), rng)


def test_config_and_checkpoint(tmp_path, rng):
    assert ReLU(name="r").get_config() == {"name": "r", "max_value": None, "negative_slope": 0.0, "threshold": 0.0}
    assert ReLU(6, 0.1, 2).get_config() == {"name": "re_lu", "max_value": 6.0, "negative_slope": 0.1, "threshold": 2.0}
    assert LeakyReLU(name="l").get_config() == {"name": "l", "negative_slope": 0.3}
    assert ELU(name="e").get_config() == {"name": "e", "alpha": 1.0}
    for layer in (ReLU(4.0, 0.25, 0.5, name="r"), LeakyReLU(0.1, name="l"), ELU(0.5, name="e")):
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    model = clnet.Sequential([Input((4,)), Dense(6), ReLU(max_value=1.0, threshold=0.1), Dense(5, "elu"),
                              LeakyReLU(0.1), ELU(0.5), Dense(2)], seed=3)
    x, y = rng.normal(size=(20, 4)), rng.normal(size=(20, 2))
    trains_saves_and_reloads(model, x, y, tmp_path / "m.h5", "mse")


@pytest.mark.parametrize("name", ["ReLU", "LeakyReLU", "ELU", "Activation"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_round_trip(name, dtype, tmp_path, rng):
    """test_onnx's examples: Relu, Clip, LeakyRelu (PRelu in float64) and Elu, which onnxruntime
    (onnx's evaluator for a double Elu) computes as predict does, load back to the same layers."""
    shape, layers = LAYER_EXAMPLES[name]
    model = built(layers(), shape, dtype)
    if model.get_weights():
        model.set_weights([rng.normal(0.0, 0.5, w.shape) for w in model.get_weights()])
    model.export(tmp_path / "m.onnx")
    check_file(model, tmp_path / "m.onnx", rng, dtype)


@pytest.mark.parametrize("kwargs", RELU_CASES, ids=[str(k) or "defaults" for k in RELU_CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_forms_in_onnx(kwargs, dtype, tmp_path, rng):
    """Every ReLU form exports: Relu, LeakyRelu (PRelu in float64), Clip, or the general
    Where(x > threshold, Min(x, max_value), negative_slope (x - threshold)); onnxruntime computes
    what predict does, and each loads back to the same layer (a ReLU with only a slope to the
    LeakyReLU it equals) and predictions."""
    model = built([ReLU(**kwargs)], (3, 5), dtype)
    x = away_from_kinks(rng.normal(0, 4, size=(7, 3, 5)), kwargs.get("threshold", 0.0),
                        kwargs.get("max_value", 0.0)).astype(dtype)
    model.export(tmp_path / "m.onnx")
    ops = [n.op_type for n in onnx.load(tmp_path / "m.onnx").graph.node]
    slope, general = kwargs.get("negative_slope"), bool(kwargs.get("threshold")) or len(kwargs) > 1
    assert ops[-1] == ("Where" if general else "LeakyRelu" if slope and dtype == F32 else "PRelu" if slope
                       else "Clip" if kwargs else "Relu")
    np.testing.assert_allclose(run_onnx(tmp_path / "m.onnx", x), model.predict(x), rtol=1e-6 if dtype == F32 else 1e-15)
    loaded = clnet.onnx.load(tmp_path / "m.onnx")
    assert structure(loaded) == ([("LeakyReLU", {"negative_slope": slope})] if slope and not general
                                 else structure(model))
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


def test_clip_before_opset_11(tmp_path, rng):
    """Clip's bounds are attributes before opset 11: that form exports and loads too."""
    model = built([ReLU(max_value=0.75)], (5,))
    x = rng.normal(size=(4, 5)).astype(F32)
    model.export(tmp_path / "m.onnx", opset=7)
    clip, = onnx.load(tmp_path / "m.onnx").graph.node
    assert clip.op_type == "Clip" and len(clip.input) == 1
    np.testing.assert_array_equal(run_onnx(tmp_path / "m.onnx", x), model.predict(x))
    loaded = clnet.onnx.load(tmp_path / "m.onnx")
    assert structure(loaded) == [("ReLU", {"max_value": 0.75, "negative_slope": 0.0, "threshold": 0.0})]


def test_import_keeps_a_negative_slope_as_an_activation(tmp_path):
    """LeakyReLU refuses a negative slope, as Keras's does: an ONNX LeakyRelu of one loads as an
    Activation("lrelu")."""
    model = built([Activation("lrelu", a=-0.5)], (3,))
    model.export(tmp_path / "m.onnx")
    assert structure(clnet.onnx.load(tmp_path / "m.onnx")) == [("Activation", {"activation": "lrelu", "a": -0.5})]


@pytest.mark.parametrize("make,message", [
    (lambda: ReLU(-1.0, name="r"), r"ReLU 'r': max_value must be None or a non-negative number, got -1.0"),
    (lambda: ReLU(negative_slope=-0.1), r"ReLU: negative_slope must be a non-negative number, got -0.1"),
    (lambda: ReLU(threshold=-2), r"threshold must be a non-negative number, got -2"),
    (lambda: ReLU(threshold=None), r"threshold must be a non-negative number, got None"),
    (lambda: ReLU(max_value="6"), r"max_value must be None or a non-negative number, got '6'"),
    (lambda: ReLU(max_value=float("inf")), r"max_value must be None or a non-negative number, got inf"),
    (lambda: LeakyReLU(-0.3, name="l"), r"LeakyReLU 'l': negative_slope must be a non-negative number, got -0.3"),
    (lambda: LeakyReLU(None), r"negative_slope must be a non-negative number, got None"),
    (lambda: ELU(float("nan"), name="e"), r"ELU 'e': alpha must be a finite number, got nan"),
    (lambda: ELU(True), r"alpha must be a finite number, got True"),
])
def test_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()



def test_the_leaky_relu_activation_keeps_its_slope():
    assert clnet.activations.get("leaky_relu").a == 0.2 and clnet.activations.get("lrelu").a == 0.3
    assert clnet.activations.get("leaky_relu", a=0.1).a == 0.1
    model = clnet.Sequential([Input((3,)), Dense(4, "leaky_relu")])
    assert type(model).from_config(model.get_config()).layers[0].activation.a == 0.2
