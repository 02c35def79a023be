"""Keras 3's Softmax(axis): along any one sample axis, against numpy in float32 at awkward sizes
(forward and input gradient), float64 gradient checks, configs, checkpoints, ONNX export
(onnxruntime) and import, and bad arguments."""
import numpy as np
import pytest

import clnet
from clnet.layers import Dense, Flatten, Input, Permute, Softmax
from reference import softmax_backward, trains_saves_and_reloads
from test_gradients import build, check_model
from test_onnx import LAYER_EXAMPLES, built, check_file
from test_pooling import device_pass

F32 = np.float32


def softmax(z, axis):
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# (sample shape, axis as Keras counts it): inner axes of awkward lengths, the last axis as before.
CASES = [((5, 3), 1), ((1, 129), 1), ((129, 1), 1), ((4, 5, 3), 2), ((4, 5, 3), -2), ((4, 5, 3), 1),
         ((13, 5), -1), ((2, 3, 4), 3), ((7,), 1)]


@pytest.mark.parametrize("rows", [1, 3, 13])
@pytest.mark.parametrize("shape,axis", CASES)
def test_kernels(rt, rng, rows, shape, axis):
    x = rng.normal(0, 3, size=(rows, *shape)).astype(F32)
    dy = rng.normal(size=x.shape).astype(F32)
    y, dx = device_pass(rt, Softmax(axis), shape, x, dy)
    want = softmax(x.astype(float), axis)
    np.testing.assert_allclose(y.reshape(x.shape), want, rtol=1e-5, atol=1e-7)
    moved = lambda a: np.moveaxis(a, axis, -1)  # softmax_backward works along the last axis
    np.testing.assert_allclose(dx.reshape(x.shape), np.moveaxis(softmax_backward(moved(want), moved(dy)), -1, axis),
                               rtol=1e-5, atol=1e-6)


def test_gradients(fp64, rng):
    """Along axis 1 of (4, 3) and axis -2 of (2, 3, 2), in float64, with a loss that does not
    take the softmax over (it does so along the last axis only)."""
    model = build([Input((3,)), Dense(12, "tanh"), clnet.layers.Reshape((4, 3)), Softmax(axis=1), Flatten(),
                   Dense(2)], "mse")
    check_model(model, rng.normal(size=(5, 3)), rng.normal(size=(5, 2)), rng)
    model = build([Input((2, 3, 2)), Softmax(axis=-2), Permute((3, 1, 2)), Flatten(), Dense(3, "softmax")],
                  "categorical_crossentropy")
    check_model(model, rng.normal(size=(4, 2, 3, 2)), rng.integers(0, 3, 4), rng)


def test_loss_folds_the_last_axis_only(rng):
    """A final Softmax along the last axis hands its input to cross-entropy (one launch fewer);
    along another axis the loss reads its output, as it would any other layer's."""
    x, y = rng.normal(size=(6, 3, 4)), rng.integers(0, 4, (6, 3))
    for axis, folds in ((-1, True), (1, False)):
        model = clnet.Sequential([Input((3, 4)), Dense(4), Softmax(axis)], seed=1)
        model.compile("sgd", "sparse_categorical_crossentropy")
        assert model._heads[0].fold is folds
        kernel, bias = model.layers[0].get_weights()
        p = softmax(x @ kernel + bias, axis)
        want = -np.log(np.clip(np.take_along_axis(p, y[..., None], -1), 1e-7, 1)).mean()
        np.testing.assert_allclose(model.evaluate(x, y), want, rtol=1e-5)


def test_config_and_checkpoint(tmp_path, rng):
    assert Softmax(name="s").get_config() == {"name": "s", "axis": -1}
    assert Softmax.from_config(Softmax(2, name="s").get_config()).get_config() == {"name": "s", "axis": 2}
    model = clnet.Sequential([Input((4,)), Dense(6), clnet.layers.Reshape((2, 3)), Softmax(1), Flatten(), Dense(2)],
                             seed=3)
    x, y = rng.normal(size=(20, 4)), rng.normal(size=(20, 2))
    trains_saves_and_reloads(model, x, y, tmp_path / "m.h5", "mse")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_round_trip(dtype, tmp_path, rng):
    """test_onnx's example: Softmax(axis=-1) and Softmax(axis=1) as the Softmax op with that axis,
    onnxruntime matching predict, loaded back to the same layers."""
    shape, layers = LAYER_EXAMPLES["Softmax"]
    model = built(layers(), shape, dtype)
    model.export(tmp_path / "m.onnx")
    check_file(model, tmp_path / "m.onnx", rng, dtype)


@pytest.mark.parametrize("make,shape,message", [
    (lambda: Softmax(0, name="s"), None, r"Softmax 's': axis must be a nonzero integer, one axis of the samples "
                                         r"\(0 is the batch\), got 0"),
    (lambda: Softmax((1, 2)), None, r"axis must be a nonzero integer.*got \(1, 2\)"),
    (lambda: Softmax(3, name="s"), (4, 5), r"Softmax 's': axis 3 is not a sample axis of inputs of shape "
                                           r"\(None, 4, 5\)"),
    (lambda: Softmax(-3), (4, 5), r"axis -3 is not a sample axis"),
])
def test_bad_arguments(rt, make, shape, message):
    with pytest.raises(ValueError, match=message):
        clnet.Sequential([make()]).build(shape)
