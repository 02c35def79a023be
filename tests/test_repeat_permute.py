"""RepeatVector and Permute, Keras 3's shape layers: kernels against numpy in float32 at awkward
sizes (forward and input gradient), float64 gradient checks by central differences, configs,
checkpoints, ONNX export (onnxruntime) and import, and bad arguments."""
import numpy as np
import onnx
import pytest
from onnx import helper

import clnet
from clnet.layers import Dense, Flatten, Input, Permute, RepeatVector
from reference import trains_saves_and_reloads
from test_gradients import build, check_model
from test_onnx import (LAYER_EXAMPLES, assert_close, built, check_file, graph_model, run_onnx, run_onnx_io,
                       structure)
from test_pooling import device_pass

F32 = np.float32


@pytest.mark.parametrize("rows", [1, 3, 13])
@pytest.mark.parametrize("features", [1, 5, 129])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_repeat_vector_kernels(rt, rng, rows, features, n):
    """y[r, i] = x[r] for each of the n copies; dL/dx sums the copies' gradients."""
    x = rng.normal(size=(rows, features)).astype(F32)
    dy = rng.normal(size=(rows, n, features)).astype(F32)
    y, dx = device_pass(rt, RepeatVector(n), (features,), x, dy)
    np.testing.assert_array_equal(y.reshape(rows, n, features), np.repeat(x[:, None, :], n, axis=1))
    np.testing.assert_allclose(dx.reshape(rows, features), dy.sum(axis=1), rtol=1e-6, atol=1e-6)


# (input shape, dims): swaps, rotations, the identity, rank 1 and 4, widths 1 and 129.
PERMUTATIONS = [((5, 129), (2, 1)), ((1, 5), (2, 1)), ((3, 4, 5), (3, 1, 2)), ((3, 4, 5), (2, 3, 1)),
                ((2, 3, 4), (1, 3, 2)), ((129,), (1,)), ((2, 3, 1, 5), (4, 2, 3, 1)), ((4, 3), (1, 2))]


@pytest.mark.parametrize("rows", [1, 3, 13])
@pytest.mark.parametrize("shape,dims", PERMUTATIONS)
def test_permute_kernels(rt, rng, rows, shape, dims):
    """y = x transposed by (0, *dims), as numpy; dL/dx is dL/dy transposed back."""
    x = rng.normal(size=(rows, *shape)).astype(F32)
    out_shape = tuple(shape[d - 1] for d in dims)
    dy = rng.normal(size=(rows, *out_shape)).astype(F32)
    layer = Permute(dims)
    assert layer.compute_output_shape(shape) == out_shape
    y, dx = device_pass(rt, layer, shape, x, dy)
    np.testing.assert_array_equal(y.reshape(rows, *out_shape), x.transpose(0, *dims))
    np.testing.assert_array_equal(dx.reshape(rows, *shape), dy.transpose(0, *(np.argsort(dims) + 1)))


def test_gradients(fp64, rng):
    """Central differences in float64 through both layers: the weights below them and the input."""
    model = build([Input((3,)), Dense(4, "tanh"), RepeatVector(3), Dense(2, "tanh"), Permute((2, 1)), Flatten(),
                   Dense(2)], "mse")
    check_model(model, rng.normal(size=(4, 3)), rng.normal(size=(4, 2)), rng)
    model = build([Input((2, 3, 4)), Permute((3, 1, 2)), Dense(2, "sigmoid"), Permute((2, 3, 1)), Flatten(),
                   Dense(3)], "mse")
    check_model(model, rng.normal(size=(3, 2, 3, 4)), rng.normal(size=(3, 3)), rng)


def test_float32_gradients_match_float64(rng):
    def make(floatx):
        return clnet.Sequential([Input((5,)), Dense(7, "tanh"), RepeatVector(13), Permute((2, 1)), Dense(3)],
                                floatx=floatx, seed=4)
    model, float64 = make("float32"), make("float64")
    float64.set_weights(model.get_weights())
    x, y = rng.normal(size=(3, 5)), rng.normal(size=(3, 7, 3))
    for m in (model, float64):
        m.compile("sgd", "mse")
    (_, grads, dx), (_, want, want_dx) = model.compute_gradients(x, y), float64.compute_gradients(x, y)
    for g, w in zip([*grads, dx], [*want, want_dx], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_config_and_checkpoint(tmp_path, rng):
    assert RepeatVector(4, name="r").get_config() == {"name": "r", "n": 4}
    assert Permute((2, 1), name="p").get_config() == {"name": "p", "dims": [2, 1]}
    for layer in (RepeatVector(4, name="r"), Permute([3, 1, 2], name="p")):
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    model = clnet.Sequential([Input((4,)), Dense(3, "tanh"), RepeatVector(5), Permute((2, 1)), Dense(2)], seed=3)
    assert [layer.output_shape for layer in model.layers] == [(3,), (5, 3), (3, 5), (3, 2)]
    x, y = rng.normal(size=(20, 4)), rng.normal(size=(20, 3, 2))
    trains_saves_and_reloads(model, x, y, tmp_path / "m.h5", "mse")


@pytest.mark.parametrize("name", ["RepeatVector", "Permute"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_round_trip(name, dtype, tmp_path, rng):
    """test_onnx's examples of the two layers: onnxruntime (or onnx's evaluator) matches predict,
    and the file loads back to the same layers and predictions."""
    shape, layers = LAYER_EXAMPLES[name]
    model = built(layers(), shape, dtype)
    model.set_weights([rng.normal(0.0, 0.5, w.shape) for w in model.get_weights()])
    model.export(tmp_path / "m.onnx")
    ops = {n.op_type for n in onnx.load(tmp_path / "m.onnx").graph.node}
    assert {"RepeatVector": {"Unsqueeze", "Tile"}, "Permute": {"Transpose"}}[name] <= ops
    check_file(model, tmp_path / "m.onnx", rng, dtype)


def test_onnx_older_opsets(tmp_path, rng):
    """Unsqueeze's axes are an attribute before opset 13: that form loads back too."""
    model = built([RepeatVector(4), Permute((2, 1))], (3,))
    x = rng.normal(size=(5, 3)).astype(F32)
    for opset in (11, 13):
        model.export(tmp_path / "m.onnx", opset=opset)
        unsqueeze, = (n for n in onnx.load(tmp_path / "m.onnx").graph.node if n.op_type == "Unsqueeze")
        assert len(unsqueeze.input) == (1 if opset < 13 else 2)
        np.testing.assert_array_equal(run_onnx(tmp_path / "m.onnx", x), model.predict(x))
        loaded = clnet.onnx.load(tmp_path / "m.onnx")
        assert structure(loaded) == [("RepeatVector", {"n": 4}), ("Permute", {"dims": [2, 1]})]
        np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


def test_import_channels_first_output(tmp_path, rng):
    """A channels-first Conv as the graph's output: clnet computes it channels_last and a Permute
    gives the (batch, channels, height, width) output onnxruntime gives."""
    w = rng.normal(size=(3, 2, 1, 1)).astype(F32)
    onnx.save(graph_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 1])], {"w": w},
                          (2, 4, 5), (3, 4, 5)), tmp_path / "conv.onnx")
    model = clnet.onnx.load(tmp_path / "conv.onnx")
    assert [type(l).__name__ for l in model.layers] == ["Permute", "Conv2D", "Permute"]
    assert model.layers[0].dims == (2, 3, 1) and model.layers[2].dims == (3, 1, 2)
    x = rng.normal(size=(6, 2, 4, 5)).astype(F32)
    assert_close(model.predict(x), run_onnx_io(tmp_path / "conv.onnx", x), 1e-5)


def test_import_not_a_repeat_vector(rng):
    """A Tile that is not RepeatVector's pattern is refused, naming what clnet reads."""
    nodes = [helper.make_node("Tile", ["x", "r"], ["y"], name="tile")]
    with pytest.raises(ValueError, match=r"ONNX node tile \(Tile\): clnet reads Tile only as RepeatVector, "
                                         r"Tile\(Unsqueeze\(x, axes=\[1\]\), \[1, n, 1\]\)"):
        clnet.onnx.load(graph_model(nodes, {"r": np.array([1, 2], np.int64)}, (3,), (6,)))


@pytest.mark.parametrize("make,message", [
    (lambda: RepeatVector(0, name="r"), r"RepeatVector 'r': n must be a positive integer, got 0"),
    (lambda: RepeatVector(2.0), r"RepeatVector: n must be a positive integer, got 2.0"),
    (lambda: RepeatVector(True), r"n must be a positive integer, got True"),
    (lambda: Permute((1, 1), name="p"), r"Permute 'p': dims must be a permutation of 1, ..., rank \(the sample "
                                        r"axes, numbered from 1\), got \(1, 1\)"),
    (lambda: Permute((0, 1)), r"dims must be a permutation .*got \(0, 1\)"),
    (lambda: Permute((1, 3)), r"dims must be a permutation .*got \(1, 3\)"),
    (lambda: Permute(2), r"dims must be a permutation .*got 2"),
    (lambda: Permute(()), r"dims must be a permutation .*got \(\)"),
])
def test_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("make,input_shape,message", [
    (lambda: RepeatVector(2, name="r"), (2, 3),
     r"RepeatVector 'r' expects inputs of shape \(features,\), got input_shape \(2, 3\)"),
    (lambda: Permute((2, 1), name="p"), (2, 3, 4),
     r"Permute 'p': dims \(2, 1\) reorder 2 axes, but the input_shape \(2, 3, 4\) has 3"),
])
def test_bad_input_shapes(rt, make, input_shape, message):
    with pytest.raises(ValueError, match=message):
        clnet.Sequential([make()]).build(input_shape)
