"""Cropping1D/2D and UpSampling1D/2D, Keras 3's spatial shape layers: kernels against numpy in
float32 at awkward sizes (forward and input gradient, batch 1 to 129), float64 input gradients by
central differences (the layer alone, and through a model), configs and checkpoints, a model that
learns through them, ONNX export (onnxruntime, onnx's evaluator for float64) and import (clnet's
channels_last files, channels-first graphs as torch writes them), and bad arguments."""
import numpy as np
import onnx
import pytest
from onnx import helper

import clnet
from clnet.layers import (Conv1D, Conv2D, Cropping1D, Cropping2D, Dense, Flatten, Input,
                          MaxPooling1D, MaxPooling2D, UpSampling1D, UpSampling2D)
from reference import device, layer_alone, numeric_gradients, trains_saves_and_reloads
from test_gradients import build, check_model
from test_onnx import LAYER_EXAMPLES, assert_close, built, check_file, graph_model, run_onnx, structure
from test_pooling import device_pass

F32 = np.float32
INT64_MAX = 2**63 - 1


def cropped(x, sides):
    """x (rows, *spatial, channels) without `sides` ((before, after) per spatial axis)."""
    return x[(slice(None), *(slice(before, n - after) for (before, after), n in zip(sides, x.shape[1:])))]


def uncropped(dy, sides):
    """dL/dx of a cropping: dy in the kept cells, zeros in the cut ones."""
    dx = np.zeros((len(dy), *(n + before + after for (before, after), n in zip(sides, dy.shape[1:])), dy.shape[-1]),
                  dy.dtype)
    dx[(slice(None), *(slice(before, before + n) for (before, _), n in zip(sides, dy.shape[1:])))] = dy
    return dx


def repeated(x, factors):
    for axis, factor in enumerate(factors):
        x = np.repeat(x, factor, axis=axis + 1)
    return x


def block_sums(dy, factors):
    """dL/dx of an upsampling: each input cell's block of output gradients summed."""
    shape = [len(dy)]
    for n, factor in zip(dy.shape[1:], factors):
        shape += [n // factor, factor]
    return dy.reshape(*shape, dy.shape[-1]).sum(axis=tuple(range(2, 2 * len(factors) + 1, 2)))


# (layer, input shape, (before, after) per spatial axis): widths 1, 3, 5, odd; a crop on one side
# only, on none of one axis, one that leaves a single cell.
CROPS = [(lambda: Cropping1D(), (3, 1), ((1, 1),)), (lambda: Cropping1D((2, 3)), (9, 5), ((2, 3),)),
         (lambda: Cropping1D((0, 4)), (7, 129), ((0, 4),)), (lambda: Cropping1D(0), (5, 3), ((0, 0),)),
         (lambda: Cropping2D(), (1, 1, 1), ((0, 0), (0, 0))),
         (lambda: Cropping2D(((1, 2), (0, 3))), (5, 7, 3), ((1, 2), (0, 3))),
         (lambda: Cropping2D(1), (3, 5, 5), ((1, 1), (1, 1))),
         (lambda: Cropping2D((2, 1)), (5, 3, 2), ((2, 2), (1, 1))),
         (lambda: Cropping2D(((0, 4), (3, 0))), (7, 9, 129), ((0, 4), (3, 0)))]


@pytest.mark.parametrize("rows", [1, 3, 129])
@pytest.mark.parametrize("make,shape,sides", CROPS)
def test_cropping_kernels(rt, rng, rows, make, shape, sides):
    """y = x without the cut cells; dL/dx is dL/dy in the kept cells, zeros in the cut ones."""
    layer = make()
    x = rng.normal(size=(rows, *shape)).astype(F32)
    want = cropped(x, sides)
    assert layer.compute_output_shape(shape) == want.shape[1:]
    dy = rng.normal(size=want.shape).astype(F32)
    y, dx = device_pass(rt, layer, shape, x, dy)
    np.testing.assert_array_equal(y.reshape(want.shape), want)
    np.testing.assert_array_equal(dx.reshape(x.shape), uncropped(dy, sides))


# (layer, input shape, factors per spatial axis)
UPSAMPLINGS = [(lambda: UpSampling1D(), (1, 1), (2,)), (lambda: UpSampling1D(3), (5, 3), (3,)),
               (lambda: UpSampling1D(1), (3, 5), (1,)), (lambda: UpSampling1D(5), (7, 129), (5,)),
               (lambda: UpSampling2D(), (1, 1, 1), (2, 2)), (lambda: UpSampling2D((2, 3)), (3, 5, 3), (2, 3)),
               (lambda: UpSampling2D((1, 4)), (5, 1, 7), (1, 4)), (lambda: UpSampling2D(3), (3, 5, 129), (3, 3)),
               (lambda: UpSampling2D((5, 1)), (1, 3, 2), (5, 1))]


@pytest.mark.parametrize("rows", [1, 3, 129])
@pytest.mark.parametrize("make,shape,factors", UPSAMPLINGS)
def test_upsampling_kernels(rt, rng, rows, make, shape, factors):
    """y = x with each cell repeated into a block; dL/dx sums each block's gradients."""
    layer = make()
    x = rng.normal(size=(rows, *shape)).astype(F32)
    want = repeated(x, factors)
    assert layer.compute_output_shape(shape) == want.shape[1:]
    dy = rng.normal(size=want.shape).astype(F32)
    y, dx = device_pass(rt, layer, shape, x, dy)
    np.testing.assert_array_equal(y.reshape(want.shape), want)
    np.testing.assert_allclose(dx.reshape(x.shape), block_sums(dy.astype(np.float64), factors), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("make,shape,reference", [
    (lambda: Cropping1D((2, 1)), (6, 3), lambda x: cropped(x, ((2, 1),))),
    (lambda: Cropping2D(((1, 0), (2, 1))), (3, 5, 2), lambda x: cropped(x, ((1, 0), (2, 1)))),
    (lambda: UpSampling1D(3), (4, 3), lambda x: repeated(x, (3,))),
    (lambda: UpSampling2D((3, 2)), (2, 3, 2), lambda x: repeated(x, (3, 2))),
])
def test_input_gradients_by_central_differences(fp64, rng, make, shape, reference):
    """float64: the layer's forward is the numpy reference, and its input gradient is the central
    differences of sum(reference(x) * dy)."""
    rows = 2
    layer = layer_alone(make(), shape, rows, np.float64)
    x = rng.normal(size=(rows, *shape))
    y = layer.forward(device(x, np.float64), rows).numpy()[:rows]
    np.testing.assert_array_equal(y, reference(x))
    dy = rng.normal(size=y.shape)
    dx = layer.backward(device(dy, np.float64), rows, True).numpy()[:rows]
    numeric, = numeric_gradients(reference, [x], dy)
    np.testing.assert_allclose(dx, numeric, rtol=1e-7, atol=1e-9)


def test_gradients_through_a_model(fp64):
    """Central differences in float64 through the four layers between convolutions: the weights
    below and above them and the model's input."""
    rng = np.random.default_rng(6)
    model = build([Input((4, 3, 2)), UpSampling2D((2, 1)), Conv2D(3, 2, activation="tanh"),
                   Cropping2D(((1, 0), (0, 1))), UpSampling2D(), Flatten(), Dense(3, "softmax")],
                  "categorical_crossentropy")
    check_model(model, rng.normal(size=(3, 4, 3, 2)), rng.integers(0, 3, 3), rng)
    model = build([Input((5, 2)), Cropping1D((1, 0)), UpSampling1D(3), Conv1D(2, 3, activation="tanh"),
                   Cropping1D((2, 1)), Flatten(), Dense(2)], "mse")
    check_model(model, rng.normal(size=(2, 5, 2)), rng.normal(size=(2, 2)), rng)


def test_configs_and_checkpoint(tmp_path, rng):
    """Keras's config keys and defaults; from_config round trips; a model saves and loads."""
    assert Cropping1D(name="c").get_config() == {"name": "c", "cropping": [1, 1]}
    assert Cropping1D(3, name="c").get_config() == {"name": "c", "cropping": [3, 3]}
    assert Cropping2D(name="c").get_config() == {"name": "c", "cropping": [[0, 0], [0, 0]]}
    assert Cropping2D((1, 2), name="c").get_config() == {"name": "c", "cropping": [[1, 1], [2, 2]]}
    assert Cropping2D(((1, 2), (0, 3)), name="c").cropping == ((1, 2), (0, 3))
    assert UpSampling1D(name="u").get_config() == {"name": "u", "size": 2}
    assert UpSampling2D(name="u").get_config() == {"name": "u", "size": [2, 2], "interpolation": "nearest"}
    assert UpSampling2D(3, interpolation="NEAREST", name="u").get_config() == {"name": "u", "size": [3, 3],
                                                                               "interpolation": "nearest"}
    for layer in (Cropping1D((0, 2), name="c"), Cropping2D(((1, 2), (0, 3)), name="c"), UpSampling1D(4, name="u"),
                  UpSampling2D((1, 3), name="u")):
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    model = clnet.Sequential([Input((6, 5, 2)), Cropping2D(((1, 0), (0, 2))), UpSampling2D((1, 2)),
                              Conv2D(3, 2, activation="tanh"), Flatten(), Dense(6)], seed=3)
    assert [layer.output_shape for layer in model.layers[:2]] == [(5, 3, 2), (5, 6, 2)]
    trains_saves_and_reloads(model, rng.normal(size=(20, 6, 5, 2)), rng.normal(size=(20, 6)), tmp_path / "m.h5",
                             "mse")
    sequence = clnet.Sequential([Input((7, 2)), UpSampling1D(2), Cropping1D((3, 2)), Conv1D(2, 3)], seed=3)
    assert [layer.output_shape for layer in sequence.layers] == [(14, 2), (9, 2), (7, 2)]
    trains_saves_and_reloads(sequence, rng.normal(size=(20, 7, 2)), rng.normal(size=(20, 7, 2)), tmp_path / "s.h5",
                             "mse")


def test_trains(rng):
    """A small CNN learns where the bright square is through both layers: pooled, upsampled back
    and cropped by a pixel on each side before the next convolution. The loss falls to under a
    twentieth of the first epoch's, and at most two of the 256 images are misplaced."""
    x = rng.normal(0, 0.3, size=(256, 8, 8, 1))
    y = rng.integers(0, 4, 256)
    for i, label in enumerate(y):
        top, left = divmod(label, 2)
        x[i, 4 * top:4 * top + 3, 4 * left:4 * left + 3] += 2
    model = clnet.Sequential([Input((8, 8, 1)), Conv2D(4, 3, padding="same", activation="relu"), MaxPooling2D(),
                              UpSampling2D(), Cropping2D(1), Conv2D(4, 3, activation="relu"), MaxPooling2D(),
                              Flatten(), Dense(4, "softmax")], seed=1)
    model.compile(clnet.optimizers.Adam(1e-2), "categorical_crossentropy", ["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=8, verbose=0).history
    assert history["loss"][-1] < 0.05 * history["loss"][0]
    assert history["accuracy"][-1] > 0.99


def test_trains_1d(rng):
    """The 1-D layers in a sequence model: which half of the sequence holds the bump."""
    x = rng.normal(0, 0.3, size=(256, 12, 1))
    y = rng.integers(0, 2, 256)
    for i, label in enumerate(y):
        x[i, 6 * label + 1:6 * label + 5] += 2
    model = clnet.Sequential([Input((12, 1)), Conv1D(4, 3, padding="same", activation="relu"), MaxPooling1D(),
                              UpSampling1D(3), Cropping1D((2, 1)), Conv1D(4, 3, activation="relu"),
                              Flatten(), Dense(2, "softmax")], seed=1)
    model.compile(clnet.optimizers.Adam(1e-2), "categorical_crossentropy", ["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=8, verbose=0).history
    assert history["loss"][-1] < 0.05 * history["loss"][0]
    assert history["accuracy"][-1] > 0.99


# -- ONNX ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["Cropping1D", "Cropping2D", "UpSampling1D", "UpSampling2D"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_round_trip(name, dtype, tmp_path, rng):
    """test_onnx's examples of the four layers: Slice with ends counted from the end, Resize (nearest,
    asymmetric, floor; scales float32 in either float type); onnxruntime (onnx's evaluator for
    float64, where onnxruntime has no Resize) matches predict, and the file loads back to the same
    layers and predictions."""
    shape, layers = LAYER_EXAMPLES[name]
    model = built(layers(), shape, dtype)
    model.set_weights([rng.normal(0.0, 0.5, w.shape) for w in model.get_weights()])
    model.export(tmp_path / "m.onnx")
    proto = onnx.load(tmp_path / "m.onnx")
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    nodes = [n for n in proto.graph.node if n.op_type in ("Slice", "Resize")]
    assert len(nodes) == 2
    if name.startswith("Cropping"):
        ends = [constants[n.input[2]].tolist() for n in nodes]
        assert ends == {"Cropping1D": [[INT64_MAX], [-1]], "Cropping2D": [[-2, -3], [-1]]}[name]
    else:
        scales = [constants[n.input[2]] for n in nodes]
        assert all(s.dtype == np.float32 for s in scales)
        assert [s.tolist() for s in scales] == {"UpSampling1D": [[1, 3, 1], [1, 2, 1]],
                                                "UpSampling2D": [[1, 2, 3, 1], [1, 1, 2, 1]]}[name]
        attributes = {a.name: helper.get_attribute_value(a) for a in nodes[0].attribute}
        assert attributes == {"mode": b"nearest", "coordinate_transformation_mode": b"asymmetric",
                              "nearest_mode": b"floor"}
    check_file(model, tmp_path / "m.onnx", rng, dtype)


@pytest.mark.parametrize("opset", [9, 10, 11, 13, 18])
def test_onnx_opsets(opset, tmp_path, rng):
    """Slice's starts, ends and axes are attributes before opset 10, inputs from it; Resize is
    (x, scales) at opset 10, (x, roi, scales) with the source cell's placement from 11, and before
    10 (Upsample, whose rounding no opset pins) the export refuses, naming the layer. Each form runs
    on onnxruntime and loads back."""
    model = built([Cropping2D(((1, 0), (2, 1))), UpSampling2D((2, 1))], (4, 5, 2))
    x = rng.normal(size=(3, 4, 5, 2)).astype(F32)
    if opset < 10:
        with pytest.raises(ValueError, match=rf"layer 'up_sampling2d' \(UpSampling2D\) needs ONNX opset >= 10 for "
                                             rf"UpSampling \(Resize\); got opset={opset}"):
            model.export(tmp_path / "m.onnx", opset=opset)
        model = built([Cropping2D(((1, 0), (2, 1)))], (4, 5, 2))
    model.export(tmp_path / "m.onnx", opset=opset)
    proto = onnx.load(tmp_path / "m.onnx")
    onnx.checker.check_model(proto, full_check=True)
    inputs = {n.op_type: len(n.input) for n in proto.graph.node}
    assert inputs["Slice"] == (1 if opset < 10 else 4)
    if opset >= 10:
        assert inputs["Resize"] == (2 if opset < 11 else 3)
    want = model.predict(x)
    np.testing.assert_array_equal(run_onnx(tmp_path / "m.onnx", x), want)
    loaded = clnet.onnx.load(tmp_path / "m.onnx")
    assert structure(loaded) == structure(model)
    np.testing.assert_array_equal(loaded.predict(x), want)


def channels_first_graph():
    """A torch-like NCHW graph: Conv, then x[:, :, 1:-1, 2:] of it (Slice with an INT64_MAX end), a
    nearest Resize by (2, 3) with torch's placement, and x[:, :, :, :-1] of that."""
    i64 = lambda *v: np.array(v, np.int64)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], kernel_shape=[2, 2]),
             helper.make_node("Slice", ["conv", "starts", "ends", "axes"], ["cropped"]),
             helper.make_node("Resize", ["cropped", "", "scales"], ["up"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Slice", ["up", "zero", "minus_one", "three"], ["y"])]
    rng = np.random.default_rng(3)
    constants = {"w": rng.normal(size=(3, 2, 2, 2)).astype(F32), "b": rng.normal(size=3).astype(F32),
                 "starts": i64(1, 2), "ends": i64(-1, INT64_MAX), "axes": i64(2, 3),
                 "scales": np.array([1, 1, 2, 3], F32), "zero": i64(0), "minus_one": i64(-1), "three": i64(3)}
    return graph_model(nodes, constants, (2, 6, 7), (3, 6, 11))


def test_import_channels_first(rng):
    """A channels-first graph (PyTorch's layout): the input is permuted to channels_last once, the
    Slices and the Resize become Cropping2D and UpSampling2D of the channels_last tensors (no
    Permute between), and the model computes what onnxruntime computes."""
    import onnxruntime as ort
    proto = channels_first_graph()
    onnx.checker.check_model(proto, full_check=True)
    model = clnet.onnx.load(proto)
    assert [type(layer).__name__ for layer in model.layers] == ["Permute", "Conv2D", "Cropping2D", "UpSampling2D",
                                                                "Cropping2D", "Permute"]
    assert model.layers[2].cropping == ((1, 1), (2, 0)) and model.layers[3].size == (2, 3)
    assert model.layers[4].cropping == ((0, 0), (0, 1))
    x = rng.normal(size=(5, 2, 6, 7)).astype(F32)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(model.predict(x), session.run(["y"], {"x": x})[0], 1e-5)


# The placements of the source cell that repeat (the importer's NEAREST_REPEATS).
PLACEMENTS = [("asymmetric", "floor"), ("tf_half_pixel_for_nn", "floor"), ("half_pixel", "round_prefer_floor"),
              ("pytorch_half_pixel", "round_prefer_ceil"), ("half_pixel_symmetric", "round_prefer_floor")]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_import_resize_forms(placement, rng):
    """1-D, channels-first (N, C, L) after a Conv: each placement that repeats (half_pixel_symmetric
    from opset 19), the factor given as sizes (computed from Shape, as torch writes a size) or by
    `axes` (from opset 18); each loads as UpSampling1D and matches onnxruntime."""
    import onnxruntime as ort
    i64 = lambda *v: np.array(v, np.int64)
    mode, rounding = placement
    w = rng.normal(size=(2, 3, 2)).astype(F32)
    since = 19 if mode == "half_pixel_symmetric" else 13
    for opset, resize, constants in [
        (since, [helper.make_node("Shape", ["conv"], ["shape"]), helper.make_node("Mul", ["shape", "times"], ["sizes"]),
              helper.make_node("Resize", ["conv", "", "", "sizes"], ["y"], mode="nearest",
                               coordinate_transformation_mode=mode, nearest_mode=rounding)], {"times": i64(1, 1, 3)}),
        (max(since, 18), [helper.make_node("Resize", ["conv", "", "scales"], ["y"], mode="nearest", axes=[-1],
                               coordinate_transformation_mode=mode, nearest_mode=rounding)],
         {"scales": np.array([3], F32)})]:
        nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], kernel_shape=[2]), *resize]
        proto = graph_model(nodes, {"w": w, **constants}, (3, 5), (2, 12), opset=opset)
        onnx.checker.check_model(proto, full_check=True)
        model = clnet.onnx.load(proto)
        assert [type(layer).__name__ for layer in model.layers] == ["Permute", "Conv1D", "UpSampling1D", "Permute"]
        assert model.layers[2].size == 3
        x = rng.normal(size=(4, 3, 5)).astype(F32)
        session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        assert_close(model.predict(x), session.run(["y"], {"x": x})[0], 1e-5)


def test_slice_of_ends_from_the_start_stays_a_slice(tmp_path, rng):
    """A Slice of a spatial axis with ends counted from the start, as ops.slice writes them, is
    ops.slice's, not a Cropping: x[:, 1:3] of (batch, steps, features)."""
    x = Input((4, 5))
    clnet.Model(x, x[:, 1:3], seed=0).export(tmp_path / "m.onnx")
    loaded = clnet.onnx.load(tmp_path / "m.onnx")
    assert [type(layer).__name__ for layer in loaded.layers] == ["Input", "Slice"]
    data = rng.normal(size=(3, 4, 5)).astype(F32)
    np.testing.assert_array_equal(loaded.predict(data), data[:, 1:3])


@pytest.mark.parametrize("attributes,scales,message", [
    ({"mode": "linear"}, [1, 1, 2, 2], r"mode='linear', coordinate_transformation_mode='half_pixel', nearest_mode="
                                       r"'round_prefer_floor'; clnet reads a nearest Resize that repeats each cell"),
    ({"mode": "nearest", "coordinate_transformation_mode": "align_corners"}, [1, 1, 2, 2],
     r"mode='nearest', coordinate_transformation_mode='align_corners', nearest_mode='round_prefer_floor'; clnet "
     r"reads a nearest Resize that repeats each cell \(UpSampling1D/2D\): 'asymmetric' with 'floor', 'half_pixel' "
     r"with 'round_prefer_ceil'"),
    ({"mode": "nearest", "nearest_mode": "floor"}, [1, 1, 2, 2],
     r"mode='nearest', coordinate_transformation_mode='half_pixel', nearest_mode='floor'; clnet reads"),
    ({"mode": "nearest"}, [1, 1, 1.5, 2], r"it scales \(None, 2, 3, 4\) by \[1.0, 1.0, 1.5, 2.0\]; clnet upsamples "
                                          r"the spatial axes .* by whole factors \(UpSampling1D/2D\)"),
    ({"mode": "nearest"}, [1, 2, 2, 2], r"it scales \(None, 2, 3, 4\) by \[1.0, 2.0, 2.0, 2.0\]"),
    ({"mode": "nearest"}, [2, 1, 1, 1], r"it scales \(None, 2, 3, 4\) by \[2.0, 1.0, 1.0, 1.0\]"),
])
def test_import_refuses_other_resizes(attributes, scales, message):
    """Resizes that are not a repeat of the spatial cells of an NCHW tensor after a Conv name what
    clnet reads."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], kernel_shape=[1, 1]),
             helper.make_node("Resize", ["conv", "", "scales"], ["y"], name="up", **attributes)]
    proto = graph_model(nodes, {"w": np.ones((2, 2, 1, 1), F32), "scales": np.array(scales, F32)}, (2, 3, 4),
                        (2, 6, 8))
    with pytest.raises(ValueError, match=r"ONNX node up \(Resize\): " + message):
        clnet.onnx.load(proto)


# -- bad arguments and inputs -----------------------------------------------------------------------
@pytest.mark.parametrize("make,message", [
    (lambda: Cropping1D(-1, name="c"), r"Cropping1D 'c': cropping must be a non-negative int or a pair of them "
                                       r"\(left, right\), got -1"),
    (lambda: Cropping1D((1, 2, 3), name="c"), r"Cropping1D 'c': cropping must be .*got \(1, 2, 3\)"),
    (lambda: Cropping1D(((1, 1),), name="c"), r"Cropping1D 'c': cropping must be .*got \(\(1, 1\),\)"),
    (lambda: Cropping1D(1.0, name="c"), r"Cropping1D 'c': cropping must be .*got 1.0"),
    (lambda: Cropping2D(((1, -1), (0, 0)), name="c"),
     r"Cropping2D 'c': cropping must be a non-negative int, a pair of them or a pair of pairs \(\(top, bottom\), "
     r"\(left, right\)\), got \(\(1, -1\), \(0, 0\)\)"),
    (lambda: Cropping2D((True, 1), name="c"), r"Cropping2D 'c': cropping must be .*got \(True, 1\)"),
    (lambda: Cropping2D((1, 2, 3)), r"Cropping2D 'cropping2d': cropping must be .*got \(1, 2, 3\)"),
    (lambda: UpSampling1D(0, name="u"), r"UpSampling1D 'u': size must be a positive integer, got 0"),
    (lambda: UpSampling1D(2.0, name="u"), r"UpSampling1D 'u': size must be a positive integer, got 2.0"),
    (lambda: UpSampling1D((2,), name="u"), r"UpSampling1D 'u': size must be a positive integer, got \(2,\)"),
    (lambda: UpSampling2D(0, name="u"), r"UpSampling2D 'u': size must be >= 1, got 0"),
    (lambda: UpSampling2D((2, 0), name="u"), r"UpSampling2D 'u': size must be >= 1, got \(2, 0\)"),
    (lambda: UpSampling2D((2, 2, 2), name="u"), r"UpSampling2D 'u': size must be an integer or a tuple of 2 integers, "
                                                r"got \(2, 2, 2\)"),
    (lambda: UpSampling2D(interpolation="bilinear", name="u"),
     r"UpSampling2D 'u': clnet computes interpolation='nearest' only, got interpolation='bilinear'"),
    (lambda: UpSampling2D(interpolation=None, name="u"), r"interpolation='nearest' only, got interpolation=None"),
])
def test_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("make,input_shape,message", [
    (lambda: Cropping1D((2, 1), name="c"), (3, 4),
     r"Cropping1D 'c': cropping \(2, 1\) leaves nothing of the steps axis of input_shape \(3, 4\)"),
    (lambda: Cropping2D(((0, 0), (2, 3)), name="c"), (4, 5, 2),
     r"Cropping2D 'c': cropping \(\(0, 0\), \(2, 3\)\) leaves nothing of the width axis of input_shape \(4, 5, 2\)"),
    (lambda: Cropping2D(1, name="c"), (2, 5, 2),
     r"Cropping2D 'c': cropping \(\(1, 1\), \(1, 1\)\) leaves nothing of the height axis"),
    (lambda: Cropping1D(name="c"), (2, 3, 4),
     r"Cropping1D 'c' expects inputs of shape \(steps, channels\), got input_shape \(2, 3, 4\)"),
    (lambda: Cropping2D(name="c"), (6, 6),
     r"Cropping2D 'c' expects inputs of shape \(height, width, channels\), got input_shape \(6, 6\)"),
    (lambda: UpSampling1D(name="u"), (5,),
     r"UpSampling1D 'u' expects inputs of shape \(steps, channels\), got input_shape \(5,\)"),
    (lambda: UpSampling2D(name="u"), (4, 4),
     r"UpSampling2D 'u' expects inputs of shape \(height, width, channels\), got input_shape \(4, 4\)"),
])
def test_bad_input_shapes(rt, make, input_shape, message):
    with pytest.raises(ValueError, match=message):
        clnet.Sequential([make()]).build(input_shape)
