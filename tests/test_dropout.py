"""Dropout: the kernels against a numpy transcription of their hash, Keras's scaling, the
training/inference modes, gradients with a fixed mask, launches and bad arguments."""
import numpy as np
import pytest

import clnet
from clnet.layers import Dense, Dropout, Flatten, Input
from reference import built, device, dropout, dropout_keep, layer_alone
from test_gradients import build, check_model


@pytest.mark.parametrize("shape,rows", [((1,), 1), ((3,), 5), ((5, 3), 3), ((127,), 7), ((4, 3, 5), 2)])
@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_kernels_match_numpy(rt, shape, rows, rate):
    rng = np.random.default_rng(3)
    layer = layer_alone(Dropout(rate, seed=12), shape, rows, np.float32)
    layer.training, layer.step = True, 41
    x = rng.normal(size=(rows, *shape)).astype(np.float32)
    keep = dropout_keep(np.arange(x.size).reshape(x.shape), 12, 41, rate, np.float32)
    np.testing.assert_array_equal(layer.forward(device(x, np.float32), rows).numpy(), dropout(x, keep, rate))
    dy = rng.normal(size=x.shape).astype(np.float32)
    np.testing.assert_array_equal(layer.backward(device(dy, np.float32), rows, True).numpy(), dropout(dy, keep, rate))


@pytest.mark.parametrize("noise_shape", [(None, 1, 5), (1, 4, 5), (1, 1, 1), (None, 4, 1)])
def test_noise_shape_shares_the_mask(rt, noise_shape):
    rows, shape = 3, (4, 5)
    layer = layer_alone(Dropout(0.5, noise_shape=noise_shape, seed=2), shape, rows, np.float32)
    layer.training, layer.step = True, 7
    x = np.ones((rows, *shape), np.float32)
    mask_shape = [rows if n is None else n for n in noise_shape]
    cells = np.arange(np.prod(mask_shape)).reshape(mask_shape)
    keep = np.broadcast_to(dropout_keep(cells, 2, 7, 0.5, np.float32), x.shape)
    np.testing.assert_array_equal(layer.forward(device(x, np.float32), rows).numpy(), dropout(x, keep, 0.5))


def test_rate_and_steps(rt):
    """About `rate` of the elements drop; another step or seed gives another mask, the same the same."""
    rows, width = 64, 1000
    masks = {}
    for seed, step in [(1, 0), (1, 1), (2, 0), (1, 0)]:
        layer = layer_alone(Dropout(0.3, seed=seed), (width,), rows, np.float32)
        layer.training, layer.step = True, step
        masks.setdefault((seed, step), []).append(layer.forward(device(np.ones((rows, width)), np.float32), rows).numpy())
    first = masks[1, 0][0]
    assert abs((first == 0).mean() - 0.3) < 0.01
    np.testing.assert_allclose(first[first != 0], 1 / np.float32(0.7))
    np.testing.assert_array_equal(masks[1, 0][1], first)
    assert (masks[1, 1][0] != first).mean() > 0.3 and (masks[2, 0][0] != first).mean() > 0.3


def test_inference_passes_through_without_a_launch(rt):
    x = np.random.default_rng(0).normal(size=(9, 5))
    counts = []
    for layers in ([Input((5,)), Dropout(0.5)], [Input((5,))]):
        model = clnet.Sequential(layers, seed=1)
        launches = rt.launches
        np.testing.assert_array_equal(model.predict(x), x.astype(np.float32))
        counts.append(rt.launches - launches)
    assert counts[0] == counts[1]  # the dropout layer launches nothing in predict


def test_fit_drops_and_the_seed_repeats(rt):
    """Two models of the same seed train the same; the layer seed, not the model's, fixes the mask."""
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(40, 6)), rng.integers(0, 3, 40)

    def trained(model_seed, layer_seed=None):
        model = clnet.Sequential([Input((6,)), Dense(8, "relu"), Dropout(0.5, seed=layer_seed), Dense(3, "softmax")],
                                 seed=model_seed)
        model.compile("sgd", "categorical_crossentropy")
        model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
        return model.get_weights()

    same, other = trained(5), trained(6)
    for a, b in zip(same, trained(5)):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(same, other))
    # With the same layer seed, different model seeds still differ (initial weights), but a model
    # with dropout rate 0 is exactly the same as one without the layer.
    model = clnet.Sequential([Input((6,)), Dense(8, "relu"), Dropout(0.0), Dense(3, "softmax")], seed=5)
    plain = clnet.Sequential([Input((6,)), Dense(8, "relu"), Dense(3, "softmax")], seed=5)
    built(plain, (6,)), built(model, (6,))
    plain.set_weights(model.get_weights())
    for m in (model, plain):
        m.compile("sgd", "categorical_crossentropy")
        m.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(model.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_gradients_with_a_fixed_mask(fp64):
    """compute_gradients runs in training mode at the current step: the same mask each call."""
    rng = np.random.default_rng(8)
    model = build([Input((2, 3)), Flatten(), Dense(7, "tanh"), Dropout(0.4, seed=3), Dense(3, "softmax")],
                  "categorical_crossentropy")
    x = rng.normal(size=(5, 2, 3))
    check_model(model, x, rng.integers(0, 3, 5), rng, training=True)
    # The check is not vacuous: some of the hidden units are dropped.
    hidden = model.layers[2]
    assert 0 < (hidden.outputs.numpy()[:5] == 0).mean() < 1


def test_two_launches_per_training_step(rt):
    layer = layer_alone(Dropout(0.5), (10,), 4, np.float32)
    layer.training = True
    x = device(np.ones((4, 10)), np.float32)
    launches = rt.launches
    layer.backward(layer.forward(x, 4), 4, True)
    assert rt.launches - launches == 2


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, "0.5", True])
def test_bad_rate(rate):
    with pytest.raises(ValueError, match=rf"Dropout rate must be a number in \[0, 1\), got {rate!r}"):
        Dropout(rate)


def test_bad_noise_shape(rt):
    with pytest.raises(ValueError, match=r"Dropout 'drop' noise_shape.*got \(None, 3, 5\) for inputs of shape \(None, 4, 5\)"):
        built(clnet.Sequential([Input((4, 5)), Dropout(0.5, noise_shape=(None, 3, 5), name="drop")]), (4, 5))
    with pytest.raises(ValueError, match=r"Dropout seed must be a non-negative integer or None, got -1"):
        Dropout(0.5, seed=-1)
