"""BatchNormalization and LayerNormalization: kernels against numpy transcriptions of Keras 3,
training and inference modes, non-trainable weights (not optimized, in checkpoints and summary),
float64 gradient checks, exact resume, launches and bad arguments."""
import io
import json

import numpy as np
import pytest

import clnet
from clnet.cl.tensor import Tensor
from clnet.layers import (Add, BatchNormalization, Dense, Dropout, Flatten, Input, LayerNormalization,
                          layer_normalization)
from clnet.layers import batch_normalization
from clnet.products.sixteen_bit import from_atoms, operand, to_atoms
from reference import (batch_norm_backward, built, batch_norm_infer, batch_norm_train, device, layer_alone, layer_norm,
                       layer_norm_backward)
from test_gradients import build, check_model
from test_saving import datasets, run_python

# (sample shape, axis): features last, channels last of an image, and a middle axis.
SHAPES = [((1,), -1), ((3,), -1), ((5,), 1), ((127,), -1), ((4, 3, 5), -1), ((3, 5, 2), 2), ((4, 7, 3), 1)]


def statistics(rng, channels):
    return (rng.normal(size=channels), rng.normal(size=channels), rng.normal(size=channels),
            rng.random(channels) + 0.5)


@pytest.mark.parametrize("gpu_groups", [False, True], ids=["cpu-groups", "gpu-groups"])
@pytest.mark.parametrize("rows", [1, 5, 33])
@pytest.mark.parametrize("shape,axis", SHAPES)
def test_batch_norm_kernels_match_numpy(rt, shape, axis, rows, gpu_groups, monkeypatch):
    """Both launch geometries on any device: a CPU's (a work-item per channel) and a GPU's
    (lanes per channel, reduced in local memory)."""
    chosen = batch_normalization.work_groups
    monkeypatch.setattr(batch_normalization, "work_groups",
                        lambda channels, inner, local, gpu: chosen(channels, inner, local, gpu_groups))
    rng = np.random.default_rng(1)
    f32 = np.float32
    layer = layer_alone(BatchNormalization(axis=axis, momentum=0.9), shape, rows, f32)
    channels = (None, *shape)[axis]
    gamma, beta, mean, variance = (w.astype(f32) for w in statistics(rng, channels))
    layer.set_weights([gamma, beta, mean, variance])
    x = (rng.normal(size=(rows, *shape)) * 3 + 2).astype(f32)
    axis_x = axis % (len(shape) + 1)
    layer.training = True
    y = layer.forward(device(x, f32), rows).numpy()
    want, moved_mean, moved_variance = batch_norm_train(x, gamma, beta, mean, variance, axis_x, f32(0.9), f32(1e-3))
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    got = layer.get_weights()
    np.testing.assert_allclose(got[2], moved_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[3], moved_variance, rtol=1e-5, atol=1e-6)
    dy = rng.normal(size=x.shape).astype(f32)
    dx = layer.backward(device(dy, f32), rows, True).numpy()
    want_dx, dgamma, dbeta = batch_norm_backward(x.astype(np.float64), dy, gamma, axis_x, 1e-3)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-3, atol=1e-4)
    grads = layer.gradients()
    np.testing.assert_allclose(grads[0], dgamma, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads[1], dbeta, rtol=1e-4, atol=1e-4)
    assert not grads[2].any() and not grads[3].any()
    layer.training = False
    y = layer.forward(device(x, f32), rows).numpy()
    np.testing.assert_allclose(y, batch_norm_infer(x, gamma, beta, got[2], got[3], axis_x, f32(1e-3)),
                               rtol=1e-5, atol=1e-5)


def layer_norm_matches_numpy(shape, axis, rows, seed):
    """A LayerNormalization on (rows, *shape) float32 inputs against numpy's forward (in both
    modes) and backward (dL/dx, dgamma, dbeta); returns the layer."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    layer = layer_alone(LayerNormalization(axis=axis), shape, rows, f32)
    features = (None, *shape)[axis]
    gamma, beta = rng.normal(size=features).astype(f32), rng.normal(size=features).astype(f32)
    layer.set_weights([gamma, beta])
    x = (rng.normal(size=(rows, *shape)) * 3 + 2).astype(f32)
    axis_x = axis % (len(shape) + 1)
    for training in (True, False):  # the same in both modes
        layer.training = training
        np.testing.assert_allclose(layer.forward(device(x, f32), rows).numpy(),
                                   layer_norm(x, gamma, beta, axis_x, f32(1e-3)), rtol=1e-4, atol=1e-4)
    dy = rng.normal(size=x.shape).astype(f32)
    dx = layer.backward(device(dy, f32), rows, True).numpy()
    want_dx, dgamma, dbeta = layer_norm_backward(x.astype(np.float64), dy, gamma, axis_x, 1e-3)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-3, atol=1e-4)
    grads = layer.gradients()
    np.testing.assert_allclose(grads[0], dgamma, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads[1], dbeta, rtol=1e-4, atol=1e-4)
    return layer


@pytest.mark.parametrize("rows", [1, 4])
# 300 > LOCAL_SIZE: a group loops; 16: two whole blocks of eight features for the CPU form's weight gradient
@pytest.mark.parametrize("shape,axis", SHAPES + [((300,), -1), ((3, 16), -1)])
def test_layer_norm_kernels_match_numpy(rt, shape, axis, rows):
    layer_norm_matches_numpy(shape, axis, rows, seed=2)


@pytest.mark.parametrize("shape,axis,rows", [((70, 5), -1, 4), ((300,), -1, 3), ((33, 2, 3), 1, 5),
                                             ((9, 4), -1, 250)])
def test_layer_norm_chunked_form_matches_numpy(rt, monkeypatch, shape, axis, rows):
    """The GPU form (row work-groups, the weight gradient in chunks of CHUNK groups and their sum)
    on whichever device runs the tests: 280 and 330 groups are five and six chunks, the last one
    short, and 2250 groups 36, more than the sum's SLICES; 300 and 5 features part of a block of
    LANES; inner = 3 reads each feature's column apart. On an NVIDIA GPU the forward and the input
    gradient take a warp per group (WARP_SHUFFLES): 3 groups leave 5 of a work-group's 8 warps idle."""
    monkeypatch.setattr(layer_normalization, "chunked_form", lambda rt: True)
    layer = layer_norm_matches_numpy(shape, axis, rows, seed=7)
    assert layer.chunked and layer._group > 1 and layer.warp_groups == rt.warp_shuffles(np.float32)


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_layer_norm_writes_a_sixteen_bit_copy_for_its_reader(rt, monkeypatch, half, chunked):
    """Asked by a reader whose products take 16-bit operands (Layer.writes_sixteen_bits), the
    forward writes y rounded to `half`, to nearest even, into the reader's copy too, y unchanged;
    values past float16's range become infinities, those below its normal range its subnormals,
    a NaN stays one. In both forms on whichever device runs the tests."""
    monkeypatch.setattr(layer_normalization, "chunked_form", lambda rt: chunked)
    rng = np.random.default_rng(11)
    rows, shape, f32 = 3, (4, 40), np.float32
    layer = layer_alone(LayerNormalization(), shape, rows, f32)
    gamma = np.geomspace(1e-7, 1e5, 40).astype(f32) * rng.choice([-1, 1], 40)  # float16's subnormals to past its largest
    layer.set_weights([gamma, np.zeros(40, f32)])
    x = rng.normal(size=(rows, *shape)).astype(f32)
    x[1, 2] = np.nan  # a whole group of NaNs
    want = layer.forward(device(x, f32), rows).numpy()
    matrix = (want.size // 40, 40)  # (the reader's rows, its n_in: y's last axis)
    assert layer.writes_sixteen_bits(Tensor(want.shape, np.uint16), half) is None  # (not laid out as atoms)
    target = operand(layer.rt, *matrix)
    assert layer.writes_sixteen_bits(target, half) is layer and layer.outputs16 is target
    np.testing.assert_array_equal(layer.forward(device(x, f32), rows).numpy(), want)
    atoms = target.numpy()
    got = from_atoms(atoms, *matrix).reshape(want.shape)
    np.testing.assert_array_equal(atoms, to_atoms(got.reshape(matrix)))  # (where each lies, and the pads still 0)
    if half == "float16":
        with np.errstate(over="ignore"):
            expected = want.astype(np.float16).view(np.uint16)
    else:
        bits = want.view(np.uint32).astype(np.uint64)
        expected = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[finite], expected[finite])
    wide = got.view(np.float16).astype(np.float32) if half == "float16" else (got.astype(np.uint32) << 16).view(np.float32)
    assert np.isnan(wide[~finite]).all() and (~finite).sum() == 40  # (the NaN group)
    if half == "float16":
        assert np.isinf(wide[finite]).any() and ((wide != 0) & (np.abs(wide) < 6.1e-5)).any()


@pytest.mark.parametrize("chunked", [False, True])
def test_layer_norm_over_a_middle_axis_writes_its_reader_s_rows(rt, monkeypatch, chunked):
    """A norm over a middle axis (its groups are not the reader's rows: each element's row and
    column in the 16-bit copy are found by division) writes y in bfloat16 where the reader of y's
    last axis holds it."""
    monkeypatch.setattr(layer_normalization, "chunked_form", lambda rt: chunked)
    rng = np.random.default_rng(12)
    rows, shape, f32 = 3, (5, 4, 36), np.float32
    layer = layer_alone(LayerNormalization(axis=2), shape, rows, f32)
    x = rng.normal(size=(rows, *shape)).astype(f32)
    want = layer.forward(device(x, f32), rows).numpy()
    matrix = (want.size // 36, 36)
    target = operand(layer.rt, *matrix)
    assert layer.writes_sixteen_bits(target, "bfloat16") is layer
    layer.forward(device(x, f32), rows)
    got = from_atoms(target.numpy(), *matrix)
    bits = want.reshape(matrix).view(np.uint32).astype(np.uint64)
    np.testing.assert_array_equal(got, ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16))


# -- gradients in float64 --------------------------------------------------------------------------
@pytest.mark.parametrize("center,scale", [(True, True), (False, True), (True, False)])
def test_batch_norm_gradients_in_training(fp64, center, scale):
    rng = np.random.default_rng(3)
    model = build([Input((3, 2, 4)), BatchNormalization(center=center, scale=scale), Flatten(), Dense(3, "softmax")],
                  "categorical_crossentropy")
    x = rng.normal(size=(5, 3, 2, 4)) * 2 + 1
    check_model(model, x, rng.integers(0, 3, 5), rng, training=True)


def test_batch_norm_gradients_middle_axis_and_inference(fp64):
    rng = np.random.default_rng(4)
    model = build([Input((4, 3)), Flatten(), Dense(6, "tanh"), BatchNormalization(momentum=0.5), Dense(2)], "mse")
    check_model(model, rng.normal(size=(7, 4, 3)), rng.normal(size=(7, 2)), rng, training=True)
    model = build([Input((4, 3)), BatchNormalization(axis=1), Flatten(), Dense(2)], "mse")
    check_model(model, rng.normal(size=(3, 4, 3)), rng.normal(size=(3, 2)), rng, training=True)


@pytest.mark.parametrize("shape,axis", [((5,), -1), ((3, 4), 1), ((2, 3, 4), -1), ((2, 9), -1)])
def test_layer_norm_gradients(fp64, shape, axis):
    rng = np.random.default_rng(5)
    model = build([Input(shape), LayerNormalization(axis=axis), Flatten(), Dense(3, "sigmoid")],
                  "binary_crossentropy")
    built(model, shape)
    features = (None, *shape)[axis]
    model.layers[0].set_weights([rng.normal(size=features), rng.normal(size=features)])
    x = rng.normal(size=(4, *shape))
    check_model(model, x, rng.integers(0, 2, (4, 3)).astype(float), rng)


def test_layer_norm_without_center_or_scale(fp64):
    rng = np.random.default_rng(6)
    model = build([Input((6,)), Dense(5, "relu"), LayerNormalization(center=False), Dense(2)], "mse")
    check_model(model, rng.normal(size=(4, 6)), rng.normal(size=(4, 2)), rng)
    model = build([Input((6,)), Dense(5, "relu"), LayerNormalization(scale=False, center=False), Dense(2)], "mse")
    check_model(model, rng.normal(size=(4, 6)), rng.normal(size=(4, 2)), rng)


def pre_norm_residual(floatx="float64"):
    """h -> LayerNorm -> Dense -> h + that (a transformer's pre-norm residual): h is read by the
    norm and by the Add, so its gradient is the sum of theirs, which the norm's input gradient adds."""
    x = Input((3, 4))
    h = Dense(4, "tanh")(x)
    h = Add()([h, Dense(4)(LayerNormalization()(h))])
    return clnet.Model(x, Dense(2)(Flatten()(h)), floatx=floatx, seed=2)


def test_layer_norm_adds_its_input_gradient_to_the_residual_gradient(fp64):
    rng = np.random.default_rng(9)
    model = pre_norm_residual()
    model.layers[2].set_weights([rng.normal(size=4), rng.normal(size=4)])
    model.loss_name = "mse"
    check_model(model, rng.normal(size=(5, 3, 4)), rng.normal(size=(5, 2)), rng)


def test_layer_norm_adding_saves_the_sum_launch(rt, monkeypatch):
    """Per step one launch fewer than summing the two gradients apart (as a layer that does not
    add does), with the same gradients."""
    rng = np.random.default_rng(10)
    x, y = rng.normal(size=(8, 3, 4)), rng.normal(size=(8, 2))
    counts, gradients = [], []
    for adds in (False, True):
        monkeypatch.setattr(LayerNormalization, "adds_to_input_grad", adds)
        model = pre_norm_residual("float32")
        model.compile("sgd", "mse")
        gradients.append(model.compute_gradients(x, y)[1])
        model.fit(x, y, batch_size=8, verbose=0)
        before = rt.launches
        model.fit(x, y, batch_size=8, verbose=0)
        counts.append(rt.launches - before)
    assert counts[1] == counts[0] - 1
    for summed, added in zip(*gradients, strict=True):
        np.testing.assert_allclose(added, summed, rtol=1e-6, atol=1e-7)


# -- modes, non-trainable weights ------------------------------------------------------------------
def model_with_batch_norm(floatx="float32", seed=3):
    clnet.utils.clear_session()  # the same layer names, and checkpoint groups, for every one
    model = clnet.Sequential([Input((2, 3)), Flatten(), Dense(10, "relu"), BatchNormalization(momentum=0.8),
                              Dropout(0.3), Dense(3, "softmax")], seed=seed, floatx=floatx)
    model.compile(clnet.optimizers.Adam(0.01), "categorical_crossentropy", ["accuracy"])
    return model


def data(samples=96):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(samples, 2, 3))
    return x, (x[:, 0, 0] + x[:, 1, 2] > 0).astype(int) + (x[:, 0, 1] > 1)


def test_moving_statistics_follow_the_batches_and_serve_inference(rt):
    """fit moves the statistics once per step by Keras's formula; evaluate and predict use them
    and change nothing; the optimizer keeps no moments for them and does not touch them."""
    x, y = data(40)
    model = clnet.Sequential([Input((2, 3)), Flatten(), BatchNormalization(momentum=0.5)], floatx="float64", seed=1)
    model.compile("sgd", "mse")
    flat = x.reshape(len(x), -1)
    model.fit(x, flat, batch_size=16, epochs=1, verbose=0, shuffle=False)
    mean, variance = np.zeros(6), np.ones(6)
    for first in (0, 16, 32):
        batch = flat[first:first + 16]
        mean = mean * 0.5 + batch.mean(0) * 0.5
        variance = variance * 0.5 + batch.var(0) * 0.5
    gamma, beta, moving_mean, moving_variance = model.get_weights()
    np.testing.assert_allclose(moving_mean, mean, rtol=1e-12)
    np.testing.assert_allclose(moving_variance, variance, rtol=1e-12)
    assert model.store.size < model.store.values.size  # the moving statistics lie outside the optimizer's range
    assert all(t.size == model.store.size for t in model.optimizer.moments.values())
    before = model.get_weights()
    prediction = model.predict(x)
    model.evaluate(x, flat)
    for a, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(prediction, batch_norm_infer(flat, gamma, beta, moving_mean, moving_variance, 1, 1e-3),
                               rtol=1e-12)


def test_summary_counts_trainable_and_non_trainable(rt):
    model = model_with_batch_norm()
    built(model, (2, 3))
    out = io.StringIO()
    model.summary(file=out)
    text = out.getvalue()
    # Dense 6*10+10, BatchNormalization 4*10 (20 trainable), Dense 10*3+3.
    assert "Total params: 143" in text and "Trainable params: 123" in text and "Non-trainable params: 20" in text


def test_save_load_predict_identical(tmp_path, rt):
    x, y = data()
    model = model_with_batch_norm()
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    model.save(tmp_path / "m.h5")
    loaded = clnet.load_model(tmp_path / "m.h5")
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    saved = datasets(tmp_path / "m.h5")
    group = "003_batch_normalization"
    assert {f"layers/{group}/{w}" for w in ("gamma", "beta", "moving_mean", "moving_variance")} <= set(saved)
    assert f"optimizer/first_moment/{group}/gamma" in saved
    assert not any(k.startswith("optimizer/") and "moving" in k for k in saved)


RESUME = """
    import sys
    import numpy as np
    import clnet
    data = np.load(sys.argv[1])
    model = clnet.load_model(sys.argv[2])
    history = model.fit(data["x"], data["y"], batch_size=16, epochs=4, initial_epoch=model.epoch, verbose=0)
    model.save(sys.argv[3])
    print(repr(history.history))
"""


@pytest.mark.parametrize("floatx", ["float32", "float64"])
def test_exact_resume_in_a_new_process(tmp_path, rt, floatx):
    """2 epochs, save, 2 more in a new process == 4 epochs at once, bit for bit: the moving
    statistics are in the checkpoint and the dropout masks depend on the restored step count."""
    x, y = data()
    np.savez(tmp_path / "data.npz", x=x, y=y)
    whole = model_with_batch_norm(floatx)
    history = whole.fit(x, y, batch_size=16, epochs=4, verbose=0)
    whole.save(tmp_path / "whole.h5")
    half = model_with_batch_norm(floatx)
    half.fit(x, y, batch_size=16, epochs=2, verbose=0)
    half.save(tmp_path / "half.h5")
    resumed = run_python(RESUME, tmp_path / "data.npz", tmp_path / "half.h5", tmp_path / "resumed.h5")
    expected, got = datasets(tmp_path / "whole.h5"), datasets(tmp_path / "resumed.h5")
    assert set(got) == set(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert eval(resumed) == {k: v[2:] for k, v in history.history.items()}


def test_launches_per_training_step(rt):
    """Per step: BatchNormalization 2 (forward, backward), LayerNormalization 3 (4 in its GPU form:
    the weight gradient's chunks, then their sum)."""
    for layer, per_step in [(BatchNormalization(), 2), (LayerNormalization(), 3 + rt.info.is_gpu)]:
        layer = layer_alone(layer, (3, 5), 8, np.float32)
        layer.training = True
        x = device(np.random.default_rng(0).normal(size=(8, 3, 5)), np.float32)
        launches = rt.launches
        layer.backward(layer.forward(x, 8), 8, True)
        assert rt.launches - launches == per_step <= 4


# -- bad arguments ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [BatchNormalization, LayerNormalization])
def test_axis_out_of_range(rt, cls):
    for axis in (3, -4, 0):
        with pytest.raises(ValueError, match=rf"{cls.__name__} 'norm' axis={axis} is out of range for inputs of "
                                             r"shape \(None, 4, 5\); expected a feature axis in \[1, 2\] or \[-2, -1\]"):
            built(clnet.Sequential([Input((4, 5)), cls(axis=axis, name="norm")]), (4, 5))
    with pytest.raises(TypeError, match=rf"{cls.__name__} axis must be an integer, got \[1, 2\]"):
        cls(axis=[1, 2])
    with pytest.raises(ValueError, match=rf"{cls.__name__} epsilon must be a positive number, got 0"):
        cls(epsilon=0)


def test_bad_momentum():
    with pytest.raises(ValueError, match=r"BatchNormalization momentum must be a number in \[0, 1\], got 1.5"):
        BatchNormalization(momentum=1.5)


def test_config_round_trip(rt):
    model = clnet.Sequential([Input((4, 5)), BatchNormalization(axis=1, momentum=0.9, center=False),
                              LayerNormalization(epsilon=1e-5, scale=False)])
    built(model, (4, 5))
    config = json.loads(json.dumps(model.get_config()))
    again = clnet.Sequential.from_config(config)
    assert again.get_config() == model.get_config()
    assert [w.shape for w in again.get_weights()] == [(4,), (4,), (4,), (5,)]
