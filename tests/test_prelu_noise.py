"""Keras 3's PReLU, GaussianNoise and SpatialDropout1D/2D/3D. PReLU: its kernels against numpy in
float32 at awkward sizes, with and without shared axes (the forward pass, the input gradient and
alpha's gradient, summed over the batch and the shared axes on the device), central differences
in float64, Keras's layout and numbers (tests/data/keras_prelu.npz, written by
tests/make_keras_prelu_fixture.py), configs, training, ONNX export (onnxruntime) and import
(clnet's, torch's per-channel form). GaussianNoise: its kernel against a numpy transcription of
its hash, the noise's statistics, seeds and steps, a resumed fit, inference as the identity and
the gradient passed through. SpatialDropout1D/2D/3D: whole channels dropped, as Dropout with
noise shape (None, 1, ..., channels) (or channels first). Bad arguments of each."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import clnet
from clnet.layers import (Dense, Dropout, Flatten, GaussianNoise, Input, PReLU, SpatialDropout1D, SpatialDropout2D,
                          SpatialDropout3D)
from reference import built, device, dropout, dropout_keep, gaussian_noise, layer_alone, trains_saves_and_reloads
from test_gradients import build, check_model
from test_onnx import LAYER_EXAMPLES, assert_close, check_file, graph_model, run_onnx_io, structure

F32 = np.float32
DATA = Path(__file__).parent / "data"


# -- PReLU ------------------------------------------------------------------------------------------
def keras_prelu(x, alpha):
    """Keras's PReLU.call, relu(x) - alpha relu(-x), in x's type."""
    return np.maximum(x, 0) - alpha * np.maximum(-x, 0)


def alpha_shape(shape, shared_axes):
    return tuple(1 if axis + 1 in (shared_axes or ()) else n for axis, n in enumerate(shape))


# (sample shape, shared_axes): (features,), (steps, features) and (height, width, channels), each
# without sharing, with one alpha per feature or channel, and with other axes shared; features of 1.
CASES = [((1,), None), ((5,), None), ((5,), [1]), ((4, 5), None), ((4, 5), [1]), ((4, 5), [2]), ((4, 1), [1]),
         ((3, 4, 5), None), ((3, 4, 5), [1, 2]), ((3, 4, 5), [3]), ((3, 4, 5), [2]), ((3, 4, 1), [1, 2])]


@pytest.mark.parametrize("rows", [1, 3, 129])
@pytest.mark.parametrize("shape,shared_axes", CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_prelu_kernels(rt, rng, rows, shape, shared_axes):
    """y and dL/dx bit for bit (one product each); alpha's gradient, the sum of dL/dy min(x, 0)
    over the rows and shared axes (in chunks at 129 rows of 12 elements each), to float32's
    rounding. The buffers hold two rows more, whose inputs are NaN: the kernels read `rows` only.
    Some inputs are exactly 0, where y is 0 and, as Keras's, the gradients are 0."""
    alpha = rng.normal(size=alpha_shape(shape, shared_axes)).astype(F32)
    x, dy = rng.normal(size=(2, rows, *shape)).astype(F32)
    x.reshape(-1)[::7] = 0
    layer = layer_alone(PReLU(shared_axes=shared_axes), shape, rows + 2, F32)
    layer.set_weights([alpha])
    assert [w.shape for w in layer.get_weights()] == [alpha.shape]
    pad = np.full((2, *shape), np.nan, F32)
    y = layer.forward(device(np.concatenate([x, pad]), F32), rows).numpy()[:rows]
    dx = layer.backward(device(np.concatenate([dy, pad]), F32), rows, True).numpy()[:rows]
    np.testing.assert_array_equal(y, keras_prelu(x, alpha))
    np.testing.assert_array_equal(dx, dy * np.where(x > 0, 1, np.where(x < 0, alpha, 0)).astype(F32))
    axes = (0, *(a for a in range(1, len(shape) + 1) if a in (shared_axes or ())))
    want = (dy.astype(float) * np.minimum(x, 0)).sum(axis=axes).reshape(alpha.shape)
    got, = layer.gradients()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_prelu_gradients(fp64, rng):
    """Central differences in float64 for alpha (per element, per feature, per channel) and the
    input, through a (steps, features) stack and an (h, w, c) one."""
    model = built(build([Input((3, 4)), PReLU(shared_axes=[1]), Dense(5, "tanh"), PReLU(), Flatten(), Dense(3)],
                        "mse"), (3, 4))
    model.set_weights([rng.normal(0, 0.5, w.shape) for w in model.get_weights()])
    check_model(model, rng.normal(size=(6, 3, 4)), rng.normal(size=(6, 3)), rng)
    model = built(build([Input((3, 2, 4)), PReLU(shared_axes=[1, 2]), PReLU(shared_axes=3), Flatten(), Dense(2)],
                        "mse"), (3, 2, 4))
    model.set_weights([rng.normal(0, 0.5, w.shape) for w in model.get_weights()])
    assert [w.shape for w in model.get_weights()[:2]] == [(1, 1, 4), (3, 2, 1)]
    check_model(model, rng.normal(size=(5, 3, 2, 4)), rng.normal(size=(5, 2)), rng)


def test_prelu_keras_layout_and_numbers():
    """Keras's weights load as they are and give Keras's outputs, loss and one SGD step: alpha's
    gradient summed over the batch (and the steps, shared), and no gradient through x = 0 (the
    first Dense's feature 0, always 0, keeps its zero kernel column)."""
    stored = np.load(DATA / "keras_prelu.npz")
    weights = [stored[f"w{i}"] for i in range(int(stored["count"]))]
    x = stored["x"]
    model = clnet.Sequential([Input(x.shape[1:]), Dense(weights[1].size), PReLU(shared_axes=[1]), PReLU(), Flatten(),
                              Dense(weights[-1].size)], floatx="float64")
    model.set_weights(weights)
    np.testing.assert_allclose(model.predict(x), stored["y"], rtol=1e-12, atol=1e-12)
    model.compile(clnet.optimizers.SGD(0.5), "mse")
    np.testing.assert_allclose(model.evaluate(x, stored["t"]), stored["loss"], rtol=1e-12)
    model.fit(x, stored["t"], batch_size=len(x), epochs=1, verbose=0, shuffle=False)
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, stored[f"after{i}"], rtol=1e-12, atol=1e-12)
    assert not model.get_weights()[0][:, 0].any()


def test_prelu_learns_its_slopes(rng):
    """Fitted to a PReLU of known slopes (one per feature, on both sides of 0), alpha goes from
    its zeros to them; then the model saves, loads and predicts the same."""
    slopes = np.array([0.1, 0.3, -0.2])
    x = rng.normal(size=(64, 4, 3))
    model = clnet.Sequential([Input((4, 3)), PReLU(shared_axes=[1])], seed=1)
    assert not model.get_weights()[0].any()
    model.compile(clnet.optimizers.SGD(0.5), "mse")
    model.fit(x, keras_prelu(x, slopes), batch_size=16, epochs=30, verbose=0)
    np.testing.assert_allclose(model.get_weights()[0], slopes[None], atol=1e-3)


def test_prelu_config_and_checkpoint(tmp_path, rng):
    assert PReLU(name="p").get_config() == {"name": "p", "alpha_initializer": "zeros", "alpha_regularizer": None,
                                            "alpha_constraint": None, "shared_axes": None}
    layer = PReLU("ones", shared_axes=2)
    assert layer.get_config() == {"name": "p_re_lu", "alpha_initializer": "ones", "alpha_regularizer": None,
                                  "alpha_constraint": None, "shared_axes": [2]}  # (Keras's name and list)
    assert PReLU.from_config(layer.get_config()).get_config() == layer.get_config()
    model = clnet.Sequential([Input((4, 3)), PReLU("ones", shared_axes=(1,)), Dense(5), PReLU(), Flatten(),
                              Dense(2)], seed=3)
    assert not (model.layers[0].get_weights()[0] - 1).any()
    x, y = rng.normal(size=(20, 4, 3)), rng.normal(size=(20, 2))
    trains_saves_and_reloads(model, x, y, tmp_path / "m.h5", "mse")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prelu_onnx_round_trip(dtype, tmp_path, rng):
    """test_onnx's example: PRelu nodes of Keras's alpha as the slope, which onnxruntime computes
    as predict does; the file loads back to the same PReLU layers and weights."""
    shape, layers = LAYER_EXAMPLES["PReLU"]
    model = built(clnet.Sequential([Input(shape), *layers()], floatx=np.dtype(dtype).name, seed=3), shape)
    model.set_weights([rng.normal(0.0, 0.5, w.shape) for w in model.get_weights()])
    model.export(tmp_path / "m.onnx")
    graph = onnx.load(tmp_path / "m.onnx").graph
    slopes = {t.name: t.dims for t in graph.initializer}
    assert [tuple(slopes[n.input[1]]) for n in graph.node if n.op_type == "PRelu"] == [(4, 5, 3), (1, 1, 3), (4, 1, 4)]
    check_file(model, tmp_path / "m.onnx", rng, dtype)


def test_prelu_onnx_import(tmp_path, rng):
    """PRelu as torch writes nn.PReLU: a per-channel slope (channels, 1, 1) after a channels-first
    Conv loads as PReLU(shared_axes=[1, 2]) on clnet's channels_last tensor, one slope (1,) as one
    alpha shared by every axis; and it fine-tunes. A 0-d slope stays clnet's LReLU activation, and
    a slope that does not broadcast is refused, naming the node."""
    f = lambda *shape: rng.normal(size=shape).astype(F32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("PRelu", ["c", "channel_slopes"], ["p"]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("PRelu", ["f", "one_slope"], ["y"])]
    slopes = f(4, 1, 1)
    constants = {"w": f(4, 3, 3, 3), "b": f(4), "channel_slopes": slopes, "one_slope": f(1)}
    path = tmp_path / "torch_like.onnx"
    onnx.save(graph_model(nodes, constants, (3, 5, 6), (4,)), path)
    model = clnet.onnx.load(path)
    prelus = [layer for layer in model.layers if isinstance(layer, PReLU)]
    assert [p.shared_axes for p in prelus] == [[1, 2], [1]]
    np.testing.assert_array_equal(prelus[0].get_weights()[0], slopes.reshape(1, 1, 4))
    np.testing.assert_array_equal(prelus[1].get_weights()[0], constants["one_slope"])
    x = f(7, 3, 5, 6)
    assert_close(model.predict(x), run_onnx_io(path, x), 1e-5)
    model.compile(clnet.optimizers.SGD(0.1), "mse")
    model.fit(x, f(7, 4), epochs=2, verbose=0)
    assert not np.array_equal(prelus[0].get_weights()[0], slopes.reshape(1, 1, 4))

    scalar = graph_model([helper.make_node("PRelu", ["x", "a"], ["y"])], {"a": np.array(0.25, F32)}, (3,), (3,))
    assert structure(clnet.onnx.load(scalar)) == [("LeakyReLU", {"negative_slope": 0.25})]
    bad = graph_model([helper.make_node("PRelu", ["x", "a"], ["y"], name="pr")], {"a": f(2, 3)}, (3,), (3,))
    with pytest.raises(ValueError, match=r"ONNX node pr \(PRelu\): its slope has shape \(2, 3\), which does not "
                                         r"broadcast to a batch of samples of shape \(3,\)"):
        clnet.onnx.load(bad)


# -- GaussianNoise ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,rows", [((1,), 1), ((5,), 3), ((4, 3, 5), 2), ((127,), 129)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gaussian_noise_kernel_matches_numpy(rt, rng, shape, rows, dtype):
    """x + stddev z with z Box-Muller of the hash's uniforms: float32's log, sqrt and cospi are
    a few ulps off numpy's float64, the rest is the same numbers."""
    layer = layer_alone(GaussianNoise(0.4, seed=12), shape, rows, dtype)
    layer.training, layer.step = True, 41
    x = rng.normal(size=(rows, *shape)).astype(dtype)
    y = layer.forward(device(x, dtype), rows).numpy()
    want = x + 0.4 * gaussian_noise(x.shape, 12, 41)
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-5 if dtype == F32 else 1e-13)


def noise(seed, step, rows=256, width=1000, stddev=0.5):
    """What GaussianNoise adds to zeros of (rows, width) in fit at `step`."""
    layer = layer_alone(GaussianNoise(stddev, seed=seed), (width,), rows, F32)
    layer.training, layer.step = True, step
    return layer.forward(device(np.zeros((rows, width)), F32), rows).numpy()


def test_gaussian_noise_statistics_seeds_and_steps(rt):
    """Over N = 256 000 draws of N(0, 0.5^2): the mean within 5 standard errors (0.5 / sqrt(N)) of
    0, the standard deviation within 5 of its own (about 0.5 / sqrt(2N)) of 0.5, and the shares
    within 1 and 2 deviations within 5 of theirs (sqrt(p (1 - p) / N)) of a normal's; the same
    seed and step give the same noise, another step or seed other noise."""
    n = noise(1, 0)
    size, sigma = n.size, 0.5
    assert abs(n.mean()) < 5 * sigma / np.sqrt(size)
    assert abs(n.std() - sigma) < 5 * sigma / np.sqrt(2 * size)
    for k, p in ((1, 0.682689492), (2, 0.954499736)):
        assert abs((np.abs(n) < k * sigma).mean() - p) < 5 * np.sqrt(p * (1 - p) / size)
    np.testing.assert_array_equal(noise(1, 0), n)
    for other in (noise(1, 1), noise(2, 0)):
        assert abs(np.corrcoef(other.ravel(), n.ravel())[0, 1]) < 5 / np.sqrt(size)


def test_gaussian_noise_infers_as_the_identity(rt, rng):
    """predict and evaluate pass the input through bit for bit, launching nothing for the layer."""
    x, y = rng.normal(size=(9, 5)), rng.normal(size=(9, 5))
    counts, losses = [], []
    for layers in ([Input((5,)), GaussianNoise(0.5)], [Input((5,))]):
        model = clnet.Sequential(layers, seed=1)
        model.compile("sgd", "mse")
        launches = rt.launches
        np.testing.assert_array_equal(model.predict(x), x.astype(F32))
        counts.append(rt.launches - launches)
        losses.append(model.evaluate(x, y))
    assert counts[0] == counts[1] and losses[0] == losses[1]


def test_gaussian_noise_gradient_and_launches(fp64, rng):
    """In fit one launch, the forward's: the backward pass hands dL/dy on as dL/dx. Central
    differences of the training loss (this step's noise) agree."""
    layer = layer_alone(GaussianNoise(0.3), (10,), 4, F32)
    layer.training = True
    grad = device(np.ones((4, 10)), F32)
    launches = clnet.runtime().launches
    layer.forward(device(np.zeros((4, 10)), F32), 4)
    assert layer.backward(grad, 4, True) is grad and clnet.runtime().launches - launches == 1
    model = build([Input((2, 3)), Flatten(), Dense(7, "tanh"), GaussianNoise(0.3, seed=3), Dense(3, "softmax")],
                  "categorical_crossentropy")
    check_model(model, rng.normal(size=(5, 2, 3)), rng.integers(0, 3, 5), rng, training=True)


def test_gaussian_noise_resumes_and_repeats(tmp_path, rng):
    """The noise of a step is the same on every run: two models of the same seed train the same, and
    a fit stopped after an epoch, saved and resumed ends where the whole fit does."""
    x, y = rng.normal(size=(32, 6)), rng.normal(size=(32, 2))

    def model(seed=5):
        m = clnet.Sequential([Input((6,)), GaussianNoise(0.5), Dense(8, "tanh"), GaussianNoise(0.2, seed=9),
                              Dense(2)], seed=seed)
        m.compile("adam", "mse")
        return m

    whole, again, other = model(), model(), model(6)
    for m in (whole, again, other):
        m.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    for a, b in zip(whole.get_weights(), again.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(whole.get_weights(), other.get_weights()))
    first = model()
    first.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    first.save(tmp_path / "m.h5")
    resumed = clnet.load_model(tmp_path / "m.h5")
    resumed.fit(x, y, batch_size=8, epochs=2, initial_epoch=1, verbose=0, shuffle=False)
    for a, b in zip(resumed.get_weights(), whole.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_gaussian_noise_config():
    assert GaussianNoise(0.1, name="g").get_config() == {"name": "g", "stddev": 0.1, "seed": None}
    layer = GaussianNoise(1, seed=4)
    assert layer.get_config() == {"name": "gaussian_noise", "stddev": 1.0, "seed": 4}
    assert GaussianNoise.from_config(layer.get_config()).get_config() == layer.get_config()


# -- SpatialDropout1D -------------------------------------------------------------------------------
@pytest.mark.parametrize("rows,steps,features", [(1, 1, 1), (3, 4, 5), (129, 7, 1), (5, 3, 64)])
def test_spatial_dropout_drops_whole_features(rt, rows, steps, features):
    """Each (sample, feature) is 0 at every step or x / (1 - rate) at every step: the mask of
    Dropout(rate, noise_shape=(None, 1, features)) of the same seed, bit for bit, and the numpy
    transcription's; the backward pass applies it to the gradient."""
    rng = np.random.default_rng(3)
    x, dy = rng.normal(size=(2, rows, steps, features)).astype(F32)
    outputs = []
    for layer in (SpatialDropout1D(0.4, seed=6), Dropout(0.4, noise_shape=(None, 1, features), seed=6)):
        layer = layer_alone(layer, (steps, features), rows, F32)
        layer.training, layer.step = True, 17
        y = layer.forward(device(x, F32), rows).numpy()
        outputs.append([y, layer.backward(device(dy, F32), rows, True).numpy()])
    keep = np.broadcast_to(dropout_keep(np.arange(rows * features).reshape(rows, 1, features), 6, 17, 0.4, F32),
                           x.shape)
    np.testing.assert_array_equal(outputs[0][0], dropout(x, keep, 0.4))
    np.testing.assert_array_equal(outputs[0][1], dropout(dy, keep, 0.4))
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_spatial_dropout_rate_inference_and_config(rt):
    """About `rate` of the features drop, each whole; predict passes the input through without a
    launch; the config is Keras's (no noise_shape) and round-trips."""
    assert SpatialDropout1D(0.5, name="s").get_config() == {"name": "s", "rate": 0.5, "seed": None}
    layer = SpatialDropout1D(0.25, seed=3)
    assert layer.get_config() == {"name": "spatial_dropout1d", "rate": 0.25, "seed": 3}
    assert SpatialDropout1D.from_config(layer.get_config()).get_config() == layer.get_config()
    layer = layer_alone(SpatialDropout1D(0.3, seed=1), (6, 1000), 64, F32)
    layer.training = True
    y = layer.forward(device(np.ones((64, 6, 1000)), F32), 64).numpy()
    dropped = y[:, 0] == 0
    assert (y == y[:, :1]).all() and abs(dropped.mean() - 0.3) < 0.01
    x = np.random.default_rng(0).normal(size=(9, 4, 5))
    counts = []
    for layers in ([Input((4, 5)), SpatialDropout1D(0.5)], [Input((4, 5))]):
        model = clnet.Sequential(layers, seed=1)
        launches = rt.launches
        np.testing.assert_array_equal(model.predict(x), x.astype(F32))
        counts.append(rt.launches - launches)
    assert counts[0] == counts[1]


@pytest.mark.parametrize("make,shape,noise", [
    (lambda: SpatialDropout2D(0.4, seed=6), (3, 5, 7), (None, 1, 1, 7)),
    (lambda: SpatialDropout2D(0.4, "channels_first", seed=6), (7, 3, 5), (None, 7, 1, 1)),
    (lambda: SpatialDropout3D(0.4, seed=6), (2, 3, 2, 9), (None, 1, 1, 1, 9)),
    (lambda: SpatialDropout3D(0.4, data_format="channels_first", seed=6), (9, 2, 3, 2), (None, 9, 1, 1, 1)),
])
def test_spatial_dropout_2d_and_3d_drop_whole_channels(rt, make, shape, noise):
    """SpatialDropout2D/3D: Dropout(rate, noise_shape) of the same seed with 1 along the
    positional axes, bit for bit, forward and backward; each (sample, channel) is 0 everywhere
    or x / (1 - rate) everywhere."""
    rng = np.random.default_rng(3)
    rows = 4
    x, dy = rng.normal(size=(2, rows, *shape)).astype(F32)
    outputs = []
    for layer in (make(), Dropout(0.4, noise_shape=noise, seed=6)):
        layer = layer_alone(layer, shape, rows, F32)
        layer.training, layer.step = True, 17
        y = layer.forward(device(x, F32), rows).numpy()
        outputs.append([y, layer.backward(device(dy, F32), rows, True).numpy()])
    np.testing.assert_array_equal(outputs[0], outputs[1])
    positions = tuple(i + 1 for i, n in enumerate(noise[1:]) if n == 1)
    kept = outputs[0][0] != 0
    assert (kept == kept.any(axis=positions, keepdims=True)).all() and 0 < kept.mean() < 1
    np.testing.assert_allclose(outputs[0][0][kept], x[kept] / 0.6, rtol=1e-6)


def test_spatial_dropout_2d_and_3d_configs_and_files(tmp_path):
    """Keras's configs (data_format, no noise_shape), round trips, a .keras archive and a
    checkpoint; predict passes the input through."""
    assert SpatialDropout2D(0.5, name="s").get_config() == {"name": "s", "rate": 0.5, "seed": None,
                                                           "data_format": "channels_last"}
    layer = SpatialDropout3D(0.25, "channels_first", seed=3)
    assert layer.get_config() == {"name": "spatial_dropout3d", "rate": 0.25, "seed": 3, "data_format": "channels_first"}
    assert SpatialDropout3D.from_config(layer.get_config()).get_config() == layer.get_config()
    model = clnet.Sequential([Input((4, 4, 3)), SpatialDropout2D(0.3), Flatten(), Dense(2, "softmax")], seed=1)
    model.compile(clnet.optimizers.Adam(), "sparse_categorical_crossentropy")
    x = np.random.default_rng(0).normal(size=(16, 4, 4, 3)).astype(F32)
    model.fit(x, np.arange(16) % 2, epochs=1, verbose=0)
    for name in ("m.keras", "m.h5"):
        model.save(tmp_path / name)
        loaded = clnet.load_model(tmp_path / name)
        assert loaded.layers[0].get_config() == model.layers[0].get_config()
        np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


# -- bad arguments ----------------------------------------------------------------------------------
@pytest.mark.parametrize("make,message", [
    (lambda: GaussianNoise(-0.1), r"GaussianNoise stddev must be a number in \[0, 1\], as Keras's, got -0.1"),
    (lambda: GaussianNoise(1.5), r"GaussianNoise stddev must be a number in \[0, 1\], as Keras's, got 1.5"),
    (lambda: GaussianNoise(float("nan")), r"GaussianNoise stddev must be a number in \[0, 1\], as Keras's, got nan"),
    (lambda: GaussianNoise("0.1"), r"GaussianNoise stddev must be a number in \[0, 1\], as Keras's, got '0.1'"),
    (lambda: GaussianNoise(True), r"GaussianNoise stddev must be a number in \[0, 1\], as Keras's, got True"),
    (lambda: GaussianNoise(0.1, seed=-1), r"GaussianNoise seed must be a non-negative integer or None, got -1"),
    (lambda: SpatialDropout1D(1.0), r"SpatialDropout1D rate must be a number in \[0, 1\), got 1.0"),
    (lambda: SpatialDropout2D(0.1, "NHWC"), r"SpatialDropout2D data_format must be 'channels_last', "
                                            r"'channels_first' or None \(channels_last\), got 'NHWC'"),
    (lambda: SpatialDropout3D(1.5), r"SpatialDropout3D rate must be a number in \[0, 1\), got 1.5"),
    (lambda: SpatialDropout1D(-0.2), r"SpatialDropout1D rate must be a number in \[0, 1\), got -0.2"),
    (lambda: SpatialDropout1D(0.2, seed=1.5), r"SpatialDropout1D seed must be a non-negative integer or None, got 1.5"),
    (lambda: PReLU(shared_axes=0, name="p"), r"PReLU 'p': shared_axes must be None, an axis or a list of axes "
                                             r"numbered from 1 \(the batch axis is 0\), got 0"),
    (lambda: PReLU(shared_axes=[1, -1]), r"shared_axes must be None, an axis or a list of axes .*got \[1, -1\]"),
    (lambda: PReLU(shared_axes="1"), r"shared_axes must be None, an axis or a list of axes .*got '1'"),
    (lambda: PReLU(shared_axes=[True]), r"shared_axes must be None, an axis or a list of axes .*got \[True\]"),
    (lambda: PReLU(alpha_regularizer="l2", name="p"), r"PReLU 'p': alpha_regularizer must be None \(clnet's "
                                                      r"weights have no regularizers or constraints\), got 'l2'"),
    (lambda: PReLU(alpha_constraint="non_neg"), r"alpha_constraint must be None .*got 'non_neg'"),
    (lambda: PReLU(alpha_initializer="nope"), r"unknown initializer 'nope'"),
])
def test_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_input_shapes():
    """Checked when the layer is called: a shared axis the input lacks, a SpatialDropout's input of
    another rank."""
    with pytest.raises(ValueError, match=r"PReLU 'p': shared_axes \[1, 3\] names an axis that inputs of shape "
                                         r"\(None, 4, 5\) do not have \(their sample axes are 1 to 2\)"):
        PReLU(shared_axes=[1, 3], name="p")(Input((4, 5)))
    for shape in ((5,), (2, 3, 4)):
        with pytest.raises(ValueError, match=r"SpatialDropout1D 's' takes inputs of shape \(batch, steps, features\), "
                                             rf"got \(None, {', '.join(map(str, shape))}\)"):
            SpatialDropout1D(0.5, name="s")(Input(shape))
    with pytest.raises(ValueError, match=r"SpatialDropout2D 's' takes inputs of shape \(batch, dim1, dim2, channels\), "
                                         r"got \(None, 4, 5\)"):
        SpatialDropout2D(0.5, name="s")(Input((4, 5)))
    with pytest.raises(ValueError, match=r"SpatialDropout3D 's' takes inputs of shape \(batch, channels, dim1, dim2, "
                                         r"dim3\), got \(None, 4, 5, 6\)"):
        SpatialDropout3D(0.5, "channels_first", name="s")(Input((4, 5, 6)))
