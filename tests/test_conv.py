"""Conv1D and Conv2D: kernels against the numpy reference of Keras's formula (float32, awkward
sizes), float64 gradient checks, checkpoints and configs, bad input, launches per step."""
import numpy as np
import pytest

import clnet
from clnet.cl.parameters import ParameterStore
from clnet.cl.tensor import Tensor
from clnet.layers import Conv1D, Conv2D, Dense, Flatten, Input, MaxPooling2D
from clnet.products import is_winograd, tuner, weight_block_rows
from reference import ACTIVATIONS, conv2d, conv2d_backward
from test_gradients import build, check_model

F32 = np.float32

# (input shape, filters, kernel_size, strides, padding, dilation_rate)
CASES = [
    ((1, 1, 1), 3, 1, 1, "valid", 1),               # 1-pixel image
    ((1, 1, 2), 3, 3, 1, "same", 1),                # 1-pixel image, kernel larger than it
    ((7, 6, 3), 5, (2, 4), 2, "same", 1),           # even kernel, stride 2: Keras's uneven split
    ((9, 9, 5), 7, 3, 1, "valid", 2),               # dilation, channels not a multiple of 4
    ((6, 5, 6), 4, (4, 2), (2, 3), "same", 1),
    ((8, 7, 2), 9, 3, 1, "same", (2, 1)),
    ((5, 5, 1), 1, 5, 1, "valid", 1),               # a kernel the size of the image
    ((13, 11, 4), 10, 3, 2, "valid", 1),
]


# The GPU form's local-memory tiles, forced on whatever device runs the tests (small tiles, so a
# few output positions span several blocks; the second stages whole TYPE4 runs at 8 x 8 channels;
# the triple gives the forward, weight gradient and input gradient tiles of their own, as the
# tuner may).
TILED = [{"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}, {"VW": 4, "TILE": 32, "WPT": 8, "TK": 8}]
TILED_APART = (TILED[1], TILED[0], TILED[1])
# Channels and filters multiples of 4 too: the tiled kernels' aligned TYPE4 gathers and stores.
TILED_CASES = CASES + [((6, 7, 8), 8, 3, 1, "same", 1), ((5, 9, 12), 16, 2, 2, "same", 1)]


def device_pass(rt, layer, input_shape, x, dy, weights, dtype=F32):
    """The layer's output, dL/dx and parameter gradients for one batch, from the device."""
    store = ParameterStore(rt, dtype)
    layer.name = "conv"
    layer.build(input_shape, store, np.random.default_rng(0))
    store.allocate()
    layer.set_weights(weights)
    rows = len(x)
    layer.allocate(rows + 2)  # capacity beyond the batch: the kernels must use `rows`
    y = layer.forward(Tensor.from_numpy(x.reshape(rows, -1), dtype), rows).numpy()[:rows]
    dx = layer.backward(Tensor.from_numpy(np.pad(dy.reshape(rows, -1), ((0, 2), (0, 0))), dtype), rows, True)
    return y, dx.numpy()[:rows], layer.gradients()


@pytest.mark.parametrize("shape,filters,kernel,strides,padding,dilation", CASES)
@pytest.mark.parametrize("activation,chunk", [("linear", 512), ("relu", 512), ("relu", 13)])
def test_conv2d_kernels(rt, rng, shape, filters, kernel, strides, padding, dilation, activation, chunk):
    """chunk 13: CalcDeltaWeightsConv's block sums over 13 // out_w lines (at least one) each, the
    last chunk partial where the batch's lines are not a multiple of that (out 5 x 5, 3 x 2)."""
    layer = Conv2D(filters, kernel, strides, padding, dilation, activation)
    layer.chunk = chunk
    k2 = layer.kernel_size
    rows = 3
    x = rng.normal(size=(rows, *shape)).astype(F32)
    weights = [rng.normal(size=(*k2, shape[2], filters)).astype(F32), rng.normal(size=filters).astype(F32)]
    x64, w64 = x.astype(np.float64), [w.astype(np.float64) for w in weights]
    z = conv2d(x64, w64[0], w64[1], layer.strides, padding, layer.dilation_rate)
    forward, derivative = ACTIVATIONS[activation]
    dy = rng.normal(size=z.shape).astype(F32)
    y, dx, (dk, db) = device_pass(rt, layer, shape, x, dy, weights)
    np.testing.assert_allclose(y.reshape(z.shape), forward(z, 1.0, 0.0), rtol=2e-5, atol=2e-5)
    dz = dy * derivative(z, 1.0, 0.0)
    want_dx, want_dk, want_db = conv2d_backward(x64, w64[0], dz, layer.strides, padding, layer.dilation_rate)
    np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=2e-5, atol=5e-5)
    np.testing.assert_allclose(dk, want_dk, rtol=2e-5, atol=5e-5)
    np.testing.assert_allclose(db, want_db, rtol=2e-5, atol=5e-5)


@pytest.mark.parametrize("shape,filters,kernel,strides,padding,dilation", TILED_CASES)
@pytest.mark.parametrize("tiles", [*TILED, TILED_APART])
@pytest.mark.parametrize("dtype,activation", [(F32, "linear"), (F32, "tanh"), (np.float64, "tanh")])
def test_tiled_conv2d_kernels(rt, rng, shape, filters, kernel, strides, padding, dilation, tiles, dtype, activation):
    """The GPU form's implicit products (patches gathered from x, dL/dz windows gathered per
    pixel) against numpy, on any device: forward, input gradient, weight and bias gradients."""
    layer = Conv2D(filters, kernel, strides, padding, dilation, activation, tiles=tiles)
    k2 = layer.kernel_size
    rows = 3
    x = rng.normal(size=(rows, *shape)).astype(dtype)
    weights = [rng.normal(size=(*k2, shape[2], filters)).astype(dtype), rng.normal(size=filters).astype(dtype)]
    x64, w64 = x.astype(np.float64), [w.astype(np.float64) for w in weights]
    z = conv2d(x64, w64[0], w64[1], layer.strides, padding, layer.dilation_rate)
    forward, derivative = ACTIVATIONS[activation]
    dy = rng.normal(size=z.shape).astype(dtype)
    y, dx, (dk, db) = device_pass(rt, layer, shape, x, dy, weights, dtype)
    assert layer.tiled
    tolerance = 2e-5 if dtype == F32 else 1e-12
    np.testing.assert_allclose(y.reshape(z.shape), forward(z, 1.0, 0.0), rtol=tolerance, atol=tolerance)
    dz = dy * derivative(z, 1.0, 0.0)
    want_dx, want_dk, want_db = conv2d_backward(x64, w64[0], dz, layer.strides, padding, layer.dilation_rate)
    np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=tolerance, atol=2.5 * tolerance)
    np.testing.assert_allclose(dk, want_dk, rtol=tolerance, atol=2.5 * tolerance)
    np.testing.assert_allclose(db, want_db, rtol=tolerance, atol=2.5 * tolerance)


@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_tiled_split_weight_gradient(rt, rng, dtype):
    """The tiled weight gradient over many positions is split among work-groups (split-K) and
    the slices added, also for a batch shorter than the buffers."""
    layer = Conv2D(3, 3, padding="same", activation="relu", tiles=TILED[0])
    shape = (16, 16, 1)
    weights = [rng.normal(size=(3, 3, 1, 3)).astype(dtype), rng.normal(size=3).astype(dtype)]
    for rows in (5, 3):  # device_pass allocates rows + 2
        x = rng.normal(size=(rows, *shape)).astype(dtype)
        z = conv2d(x.astype(np.float64), *[w.astype(np.float64) for w in weights], padding="same")
        dy = rng.normal(size=z.shape).astype(dtype)
        _, dx, (dk, db) = device_pass(rt, layer, shape, x, dy, weights, dtype)
        assert layer.plan.splits(rows * layer.positions)[0] > 1  # the path under test runs
        want_dx, want_dk, want_db = conv2d_backward(x.astype(np.float64), weights[0].astype(np.float64),
                                                    dy * (z > 0), padding="same")
        tolerance = 1e-4 if dtype == F32 else 1e-12
        np.testing.assert_allclose(dk, want_dk, rtol=tolerance, atol=tolerance)
        np.testing.assert_allclose(db, want_db, rtol=tolerance, atol=tolerance)
        np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("steps,channels,filters,kernel,strides,padding,dilation",
                         [(1, 1, 2, 1, 1, "valid", 1), (9, 3, 4, 3, 2, "same", 1), (10, 5, 3, 4, 2, "same", 1),
                          (11, 2, 5, 3, 1, "valid", 3), (1, 3, 2, 3, 1, "causal", 1), (9, 3, 5, 3, 1, "causal", 2),
                          (10, 5, 3, 4, 3, "causal", 1), (7, 1, 17, 2, 2, "causal", 1)])
@pytest.mark.parametrize("tiles", [None, TILED[0]])
def test_conv1d_kernels(rt, rng, steps, channels, filters, kernel, strides, padding, dilation, tiles):
    """Conv1D is Conv2D of height 1 with the (kernel, in, out) Keras kernel, in either form."""
    layer = Conv1D(filters, kernel, strides, padding, dilation, tiles=tiles)
    rows = 2
    x = rng.normal(size=(rows, steps, channels)).astype(F32)
    weights = [rng.normal(size=(kernel, channels, filters)).astype(F32), rng.normal(size=filters).astype(F32)]
    x64, k64 = x[:, None].astype(np.float64), weights[0][None].astype(np.float64)
    z = conv2d(x64, k64, weights[1], (1, strides), padding, (1, dilation))[:, 0]
    assert layer.compute_output_shape((steps, channels)) == z.shape[1:]
    dy = rng.normal(size=z.shape).astype(F32)
    y, dx, (dk, db) = device_pass(rt, layer, (steps, channels), x, dy, weights)
    np.testing.assert_allclose(y.reshape(z.shape), z, rtol=2e-5, atol=2e-5)
    want_dx, want_dk, want_db = conv2d_backward(x64, k64, dy[:, None].astype(np.float64), (1, strides), padding,
                                                (1, dilation))
    np.testing.assert_allclose(dx.reshape(x.shape), want_dx[:, 0], rtol=2e-5, atol=5e-5)
    np.testing.assert_allclose(dk, want_dk[0], rtol=2e-5, atol=5e-5)
    np.testing.assert_allclose(db, want_db, rtol=2e-5, atol=5e-5)


# The CPU form with several vectors of columns per work-item (FF_CN, DW_CN, HG_CN), forced: VW 4, so
# that small layers have several vectors of filters and channels, some padded; each product's vectors
# are fitted to its columns (13 filters: 4 vectors; 7 channels: 2, so HG_CN 4 runs as 2).
COLUMNS = [{"VW": 4, "FF_RM": 3, "DW_RM": 4, "HG_RM": 4, "FF_CN": cn, "DW_CN": cn, "HG_CN": cn} for cn in (2, 4)]
COLUMNS_APART = {"VW": 4, "FF_RM": 2, "DW_RM": 3, "HG_RM": 4, "FF_CN": 4, "DW_CN": 2}


@pytest.mark.parametrize("shape,filters,kernel,strides,padding,dilation", [
    ((7, 6, 7), 13, 3, 1, "same", 1), ((9, 8, 16), 8, (2, 3), 2, "valid", 1), ((6, 5, 4), 30, 3, 1, "same", 2),
    ((5, 5, 12), 16, 1, 1, "valid", 1)])
@pytest.mark.parametrize("tiles", [*COLUMNS, COLUMNS_APART])
def test_conv2d_columns_per_work_item(rt, rng, shape, filters, kernel, strides, padding, dilation, tiles):
    layer = Conv2D(filters, kernel, strides, padding, dilation, "tanh", tiles=tiles)
    rows = 3
    x = rng.normal(size=(rows, *shape)).astype(F32)
    weights = [rng.normal(size=(*layer.kernel_size, shape[2], filters)).astype(F32),
               rng.normal(size=filters).astype(F32)]
    x64, w64 = x.astype(np.float64), [w.astype(np.float64) for w in weights]
    z = conv2d(x64, w64[0], w64[1], layer.strides, padding, layer.dilation_rate)
    dy = rng.normal(size=z.shape).astype(F32)
    y, dx, (dk, db) = device_pass(rt, layer, shape, x, dy, weights)
    fitted = layer.plan.tiles
    vectors = lambda n: -(-n // 4)
    for key, n in (("FF_CN", filters), ("DW_CN", filters), ("HG_CN", shape[2])):
        want = max(v for v in (1, 2, 4) if v <= tiles.get(key, 1) and vectors(n) % v == 0)
        assert fitted.get(key, 1) == want, (key, fitted)
    np.testing.assert_allclose(y.reshape(z.shape), np.tanh(z), rtol=2e-5, atol=2e-5)
    want_dx, want_dk, want_db = conv2d_backward(x64, w64[0], dy * (1 - np.tanh(z) ** 2), layer.strides, padding,
                                                layer.dilation_rate)
    np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=2e-5, atol=5e-5)
    np.testing.assert_allclose(dk, want_dk, rtol=2e-5, atol=5e-5)
    np.testing.assert_allclose(db, want_db, rtol=2e-5, atol=5e-5)


def test_columns_tuner_measures_each_product(rt):
    """convolution_columns: a convolution large enough is measured and each product gets one of
    the candidates' vectors; one too small, or without a choice (one vector of filters and
    channels), keeps the tiles it was given, fitted."""
    base = {"VW": 4, "FF_RM": 3, "DW_RM": 4, "HG_RM": 4}
    layer = Conv2D(16, 3, padding="same")
    layer.build((20, 20, 8), ParameterStore(rt, np.float32), np.random.default_rng(0))
    chosen = tuner._tune_columns(rt, np.float32, [base, {**base, "FF_CN": 2, "DW_CN": 2, "HG_CN": 2},
                                                  {**base, "FF_CN": 4, "DW_CN": 4, "HG_CN": 2}], layer.geometry, 16, 8)
    assert {k: v for k, v in chosen.items() if not k.endswith("_CN")} == base
    assert chosen.get("FF_CN", 1) in (1, 2, 4) and chosen.get("DW_CN", 1) in (1, 2, 4)
    assert chosen.get("HG_CN", 1) in (1, 2)
    assert tuner.convolution_columns(rt, np.float32, base, layer.geometry, 16, 1) == base  # too small
    narrow = Conv2D(4, 3)
    narrow.build((40, 40, 3), ParameterStore(rt, np.float32), np.random.default_rng(0))
    assert tuner.convolution_columns(rt, np.float32, {**base, "FF_CN": 4}, narrow.geometry, 4, 512) == base


def test_conv_layer_takes_the_measured_columns(rt):
    """A Conv2D in the CPU form runs with what convolution_columns measured for its geometry, at
    its batch (the tuning cached: asking again measures nothing); a larger batch takes the same."""
    rng = np.random.default_rng(0)
    model = clnet.Sequential([Input((20, 20, 8)), Conv2D(32, 3, padding="same")], seed=0)
    model.compile("sgd", "mse")
    model.fit(rng.normal(size=(64, 20, 20, 8)), rng.normal(size=(64, 20, 20, 32)), batch_size=64, epochs=1,
              verbose=0)
    layer = model.layers[0]
    if layer.tiled:  # a GPU: the tiled form's three tiles instead (test_tiled_form_tuner_picks_a_candidate_that_runs)
        assert isinstance(layer.plan.product_tiles, tuple)
        return
    base = dict(tuner.matrix_tiles(rt, layer.dtype, layer.patch_size, 32, 64 * layer.positions),
                DW_RM=weight_block_rows(layer.patch_size))
    assert layer.plan.tiles == tuner.convolution_columns(rt, layer.dtype, base, layer.geometry, 32, 64)
    assert tuner.convolution_columns(rt, layer.dtype, base, layer.geometry, 32, 1000) == \
        tuner.convolution_columns(rt, layer.dtype, base, layer.geometry, 32, 128)


# -- float64 gradient checks -------------------------------------------------------------------
@pytest.mark.parametrize("conv", [
    lambda: Conv2D(3, 3, activation="tanh"),
    lambda: Conv2D(2, (2, 3), strides=2, padding="same", activation="swish"),
    lambda: Conv2D(3, 2, dilation_rate=2, padding="same", use_bias=False),
])
def test_conv2d_gradients(fp64, conv):
    rng = np.random.default_rng(3)
    model = build([Input((5, 4, 2)), conv(), Conv2D(2, 2, activation="sigmoid"), Flatten(), Dense(3, "softmax")],
                  "categorical_crossentropy")
    check_model(model, rng.normal(size=(3, 5, 4, 2)), rng.integers(0, 3, 3), rng)


def test_columns_conv2d_gradients(fp64):
    """The gradient checks through the CPU form with several vectors of columns per work-item:
    8 filters (2 vectors of VW 4), then 16 (4) over 8 channels (the input gradient's 2)."""
    rng = np.random.default_rng(3)
    model = build([Input((5, 4, 8)), Conv2D(8, 2, activation="tanh", tiles=COLUMNS[0]),
                   Conv2D(16, 2, padding="same", activation="sigmoid", tiles=COLUMNS[1]), Flatten(),
                   Dense(3, "softmax")], "categorical_crossentropy")
    check_model(model, rng.normal(size=(3, 5, 4, 8)), rng.integers(0, 3, 3), rng)
    assert model.layers[1].plan.tiles["HG_CN"] == 2 and model.layers[1].plan.tiles["FF_CN"] == 4


@pytest.mark.parametrize("conv", [
    lambda tiles: Conv2D(3, 3, activation="tanh", tiles=tiles),
    lambda tiles: Conv2D(2, (2, 3), strides=2, padding="same", activation="swish", tiles=tiles),
    lambda tiles: Conv2D(3, 2, dilation_rate=2, padding="same", use_bias=False, tiles=tiles),
])
def test_tiled_conv2d_gradients(fp64, conv):
    """The same checks through the GPU form's kernels (both convolutions tiled)."""
    rng = np.random.default_rng(3)
    model = build([Input((5, 4, 2)), conv(TILED[0]), Conv2D(2, 2, activation="sigmoid", tiles=TILED[1]), Flatten(),
                   Dense(3, "softmax")], "categorical_crossentropy")
    check_model(model, rng.normal(size=(3, 5, 4, 2)), rng.integers(0, 3, 3), rng)


def test_tiled_conv_as_output_layer(fp64):
    rng = np.random.default_rng(5)
    model = build([Input((4, 3, 2)), Conv2D(3, 2, activation="softmax", tiles=TILED[0])], "mse")
    check_model(model, rng.normal(size=(2, 4, 3, 2)), rng.normal(size=(2, 3, 2, 3)), rng)


def test_conv1d_gradients(fp64):
    rng = np.random.default_rng(4)
    model = build([Input((7, 3)), Conv1D(4, 3, strides=2, padding="same", activation="tanh"), Conv1D(2, 2),
                   Flatten(), Dense(2)], "mse")
    check_model(model, rng.normal(size=(2, 7, 3)), rng.normal(size=(2, 2)), rng)


def test_conv1d_causal_gradients(fp64):
    rng = np.random.default_rng(6)
    model = build([Input((7, 3)), Conv1D(4, 3, padding="causal", dilation_rate=2, activation="tanh"),
                   Conv1D(2, 2, strides=2, padding="causal"), Flatten(), Dense(2)], "mse")
    check_model(model, rng.normal(size=(2, 7, 3)), rng.normal(size=(2, 2)), rng)


def test_conv1d_causal_sees_only_the_past(rt, rng):
    """Output t depends on inputs up to t only: changing the last step changes only the last output."""
    model = clnet.Sequential([Input((6, 2)), Conv1D(3, 3, padding="causal", dilation_rate=2)], seed=0)
    x = rng.normal(size=(1, 6, 2))
    changed = x.copy()
    changed[0, -1] += 1
    y, y2 = model.predict(x), model.predict(changed)
    assert y.shape == (1, 6, 3)
    np.testing.assert_array_equal(y[0, :-1], y2[0, :-1])
    assert np.all(y[0, -1] != y2[0, -1])


def test_conv_as_output_layer(fp64):
    """A convolution's own softmax (over the filters at each position) differentiated for MSE."""
    rng = np.random.default_rng(5)
    model = build([Input((4, 3, 2)), Conv2D(3, 2, activation="softmax")], "mse")
    check_model(model, rng.normal(size=(2, 4, 3, 2)), rng.normal(size=(2, 3, 2, 3)), rng)


# -- layout, configs, checkpoints, launches ----------------------------------------------------
def test_keras_layout_and_initializer_fans(rt):
    model = clnet.Sequential([Input((6, 5, 3)), Conv2D(8, (3, 2))], seed=0)
    model.build((6, 5, 3))
    kernel, bias = model.get_weights()
    assert kernel.shape == (3, 2, 3, 8) and bias.shape == (8,) and np.all(bias == 0)
    # glorot_uniform with Keras's convolution fans: (3*2*3 + 3*2*8), limit sqrt(6 / 66)
    limit = np.sqrt(6 / (18 + 48))
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.9 * limit
    assert model.layers[0].count_params() == 3 * 2 * 3 * 8 + 8


def conv_model():
    return clnet.Sequential([Input((9, 8, 2)), Conv2D(4, 3, padding="same", activation="relu"), MaxPooling2D(),
                             Conv2D(5, (2, 3), strides=(1, 2), use_bias=False, kernel_initializer="he_normal"),
                             Flatten(), Dense(3, "softmax")], seed=2)


def test_save_load_predict_and_config(tmp_path, rng):
    x, y = rng.normal(size=(40, 9, 8, 2)), rng.integers(0, 3, 40)
    model = conv_model()
    model.compile("adam", "categorical_crossentropy", ["accuracy"])
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    model.save(tmp_path / "conv.h5")
    loaded = clnet.load_model(tmp_path / "conv.h5")
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    loaded.fit(x, y, batch_size=16, epochs=1, verbose=0)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))  # optimizer state came along
    again = clnet.Sequential.from_config(model.get_config())
    assert again.get_config() == model.get_config()
    config = model.layers[0].get_config()
    assert config == {"name": "conv2d", "filters": 4, "kernel_size": [3, 3], "strides": [1, 1], "padding": "same",
                      "dilation_rate": [1, 1], "activation": {"name": "relu"}, "use_bias": True,
                      "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"}
    one_d = Conv1D(3, 2, name="c")
    assert Conv1D.from_config(one_d.get_config()).get_config() == one_d.get_config()


def test_set_weights_checks_keras_shapes(rt):
    model = clnet.Sequential([Input((4, 4, 2)), Conv2D(3, 2, name="c")], seed=0)
    model.build((4, 4, 2))
    with pytest.raises(ValueError, match=r"'c' weight 0 must have shape \(2, 2, 2, 3\), got \(8, 3\)"):
        model.set_weights([np.zeros((8, 3)), np.zeros(3)])


def test_trains(rng):
    """A small CNN learns a task that needs its spatial structure: where the bright square is."""
    x = rng.normal(0, 0.3, size=(256, 8, 8, 1))
    y = rng.integers(0, 4, 256)
    for i, label in enumerate(y):
        top, left = divmod(label, 2)
        x[i, 4 * top:4 * top + 3, 4 * left:4 * left + 3] += 2
    model = clnet.Sequential([Input((8, 8, 1)), Conv2D(4, 3, activation="relu"), MaxPooling2D(), Flatten(),
                              Dense(4, "softmax")], seed=1)
    model.compile(clnet.optimizers.Adam(1e-2), "categorical_crossentropy", ["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=8, verbose=0)
    assert history.history["accuracy"][-1] > 0.95


@pytest.mark.parametrize("batch_size", [16, 64])
@pytest.mark.parametrize("tiles", [None, TILED[0]])
def test_launches_per_training_step(batch_size, tiles):
    """The example's CNN (without Dropout): gather; Conv2D 3 (forward; weight block sums and their
    sum: no input gradient for the first layer); MaxPooling2D 2; Conv2D 4 (+ input gradient);
    MaxPooling2D 2; Dense 4; Dense(softmax) 4 (the loss takes its softmax); loss; update. A
    convolution takes at most 4 (2 more with each of Winograd's forms), and the layers with
    kernels at most 4 on average plus the constant 3, whatever the batch. (The GPU form, forced for
    the convolutions by `tiles`: forward, one product for dL/dW and dL/db, input gradient: 2 and 3;
    a Dense in the GPU form makes delta and dL/db in its weight gradient: 3.)"""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(batch_size * 3, 12, 12, 1)), rng.integers(0, 10, batch_size * 3)
    model = clnet.Sequential([Input((12, 12, 1)), Conv2D(4, 3, activation="relu", tiles=tiles), MaxPooling2D(),
                              Conv2D(6, 3, activation="relu", tiles=tiles), MaxPooling2D(), Flatten(), Dense(8, "relu"),
                              Dense(10, "softmax")], seed=0)
    model.compile("adam", "categorical_crossentropy", ["accuracy"])
    model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)  # builds the programs
    rt = clnet.runtime()
    before = rt.launches
    model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False)
    tiled = model.layers[0].tiled
    # Without tiles the convolutions take the form of the tuner's choice for their product (9 x 4).
    assert tiled == (tiles is not None or "TILE" in tuner.matrix_tiles(rt, model.layers[0].dtype, 9, 4))
    # (on a GPU the tuner may take Winograd's forms, three launches for one each: the forward's and
    # the weight gradient's for either convolution, the input gradient's for the second)
    winograd = lambda layer, product: tiled and is_winograd(model.layers[layer].plan.product_tiles[product])
    first_more, more = 2 * (winograd(0, 0) + winograd(0, 1)), 2 * (winograd(2, 0) + winograd(2, 1) + winograd(2, 2))
    first, hidden = (2 + first_more, 3 + more) if tiled else (3, 4)
    dense = 3 if model.layers[-1].tiled else 4
    # The tiled form splits a weight gradient over many rows among work-groups and adds the
    # slices in one more launch (split_k); the CPU form never does.
    layers = [layer for layer in model.layers if isinstance(layer, (Dense, Conv2D))]
    splits = lambda layer, rows: layer.plan.splits(rows)[0]
    split_sums = sum(splits(layer, batch_size * layer.positions) > 1 for layer in layers)
    per_step = 1 + first + 2 + hidden + 2 + dense + dense + 1 + 1 + split_sums
    assert rt.launches - before == 3 * per_step + 1  # + the epoch-end ReduceMetrics
    assert per_step - split_sums - first_more - more <= 4 * 6 + 3
    assert hidden + (model.layers[2].plan.splits(batch_size * model.layers[2].positions)[0] > 1) <= 4 + more


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make,input_shape,message", [
    (lambda: Conv2D(2, 5, name="c"), (4, 6, 1),
     r"Conv2D 'c': kernel_size 5 along the height axis is larger than the input, whose shape is \(4, 6, 1\)"),
    (lambda: Conv2D(2, 3, dilation_rate=3, name="c"), (6, 6, 1),
     r"Conv2D 'c': kernel_size 3 \(dilated to 7\) along the height axis is larger than the input"),
    (lambda: Conv1D(2, 4, name="c"), (3, 2),
     r"Conv1D 'c': kernel_size 4 along the steps axis is larger than the input, whose shape is \(3, 2\)"),
    (lambda: Conv2D(2, 3, name="c"), (6, 6),
     r"Conv2D 'c' expects inputs of shape \(height, width, channels\), got input_shape \(6, 6\)"),
    (lambda: Conv1D(2, 3, name="c"), (6, 6, 1),
     r"Conv1D 'c' expects inputs of shape \(steps, channels\), got input_shape \(6, 6, 1\)"),
])
def test_bad_input_shapes(rt, make, input_shape, message):
    model = clnet.Sequential([make()])
    with pytest.raises(ValueError, match=message):
        model.build(input_shape)


@pytest.mark.parametrize("kwargs,message", [
    ({"strides": 0}, r"Conv2D 'c': strides must be >= 1, got 0"),
    ({"strides": (1, -2)}, r"Conv2D 'c': strides must be >= 1, got \(1, -2\)"),
    ({"kernel_size": 0}, r"Conv2D 'c': kernel_size must be >= 1, got 0"),
    ({"kernel_size": (3, 3, 3)}, r"Conv2D 'c': kernel_size must be an integer or a tuple of 2 integers"),
    ({"dilation_rate": 0}, r"Conv2D 'c': dilation_rate must be >= 1, got 0"),
    ({"filters": 0}, r"Conv2D 'c': filters must be a positive integer, got 0"),
    ({"padding": "causal"}, r"Conv2D 'c': padding must be 'valid' or 'same', got 'causal'"),
    ({"padding": "full"}, r"Conv2D 'c': padding must be 'valid' or 'same', got 'full'"),
    ({"strides": 2, "dilation_rate": 2}, r"strides > 1 cannot be combined with dilation_rate > 1"),
])
def test_bad_arguments(kwargs, message):
    arguments = {"filters": 2, "kernel_size": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        Conv2D(name="c", **arguments)


def test_conv1d_padding_names_causal():
    with pytest.raises(ValueError, match=r"Conv1D 'c': padding must be 'valid', 'same' or 'causal', got 'full'"):
        Conv1D(2, 3, padding="full", name="c")


def test_tiled_form_tuner_picks_a_candidate_that_runs(rt):
    """The tiled (GPU) form's tiles are measured per product on a convolution like the layer's
    (convolution_tiles): the tuner returns one of its candidates for each, passing over one whose
    program cannot build (a TK that does not split a slice among the work-items), and the layer
    runs with what it chose."""
    unbuildable = {"VW": 4, "TILE": 16, "WPT": 4, "TK": 2}
    layer = Conv2D(3, 3, padding="same")
    layer.build((5, 5, 3), ParameterStore(rt, np.float32), np.random.default_rng(0))
    chosen = tuner.tune_convolution(rt, np.float32, [unbuildable, *TILED], layer.geometry, 3, 2)
    assert len(chosen) == 3 and all(tiles in TILED for tiles in chosen)
    model = clnet.Sequential([Input((5, 5, 3)), Conv2D(3, 3, padding="same", tiles=tuple(chosen))], seed=0)
    x = np.random.default_rng(0).normal(size=(2, 5, 5, 3))
    w, b = model.get_weights()
    expected = conv2d(x, w, b, (1, 1), "same", (1, 1))
    np.testing.assert_allclose(model.predict(x), expected, rtol=1e-4, atol=1e-5)


def test_tiles_per_product_must_be_three_tiled_forms():
    with pytest.raises(ValueError, match=r"Conv2D 'c': tiles as a tuple must be three tiled forms' tiles \(forward, "
                                         r"weight gradient, input gradient; each may be a Winograd form's\), "
                                         r"got \("):
        Conv2D(3, 3, name="c", tiles=(TILED[0], TILED[1]))
