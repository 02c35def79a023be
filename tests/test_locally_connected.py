"""LocallyConnected1D: kernels against numpy (Keras 2's layer), Keras 2's weight layout, float64
gradient checks, an input of a million positions, launches and bad arguments."""
import numpy as np
import pytest

import clnet
from clnet.layers import Dense, Flatten, Input, LocallyConnected1D
from reference import ACTIVATIONS, built, device, layer_alone, locally_connected_1d, locally_connected_1d_backward
from test_gradients import build, check_model

# (steps, input_dim, filters, kernel_size, strides, rows)
SIZES = [(1, 1, 1, 1, 1, 1), (3, 1, 1, 3, 1, 2), (5, 3, 2, 2, 1, 3), (13, 2, 5, 3, 2, 5), (17, 3, 3, 4, 3, 1),
         (127, 1, 1, 3, 1, 4), (9, 4, 7, 5, 5, 2)]


@pytest.mark.parametrize("steps,input_dim,filters,kernel_size,strides,rows", SIZES)
@pytest.mark.parametrize("activation", ["linear", "sigmoid", "relu"])
def test_kernels_match_numpy(rt, steps, input_dim, filters, kernel_size, strides, rows, activation):
    rng = np.random.default_rng(steps + filters)
    f32 = np.float32
    layer = layer_alone(LocallyConnected1D(filters, kernel_size, strides, activation=activation),
                        (steps, input_dim), rows, f32)
    positions = (steps - kernel_size) // strides + 1
    assert layer.output_shape == (positions, filters)
    kernel = rng.normal(size=(positions, kernel_size * input_dim, filters)).astype(f32)
    bias = rng.normal(size=(positions, filters)).astype(f32)
    layer.set_weights([kernel, bias])
    for got, want in zip(layer.get_weights(), [kernel, bias]):
        np.testing.assert_array_equal(got, want)
    x = rng.normal(size=(rows, steps, input_dim)).astype(f32)
    forward, derivative = ACTIVATIONS[activation]
    z = locally_connected_1d(x.astype(np.float64), kernel, bias, strides)
    y = layer.forward(device(x, f32), rows).numpy()
    np.testing.assert_allclose(y, forward(z, 1.0, 0.0), rtol=1e-5, atol=1e-5)
    dy = rng.normal(size=y.shape)
    delta = dy * derivative(z, 1.0, 0.0)
    dx = layer.backward(device(dy, f32), rows, True).numpy()
    want_dx, want_dkernel, want_dbias = locally_connected_1d_backward(x.astype(np.float64), delta, kernel, strides)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-5)
    dkernel, dbias = layer.gradients()
    np.testing.assert_allclose(dkernel, want_dkernel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dbias, want_dbias, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("strides", [1, 2])
def test_gradients(fp64, strides):
    rng = np.random.default_rng(5)
    model = build([Input((7, 2)), LocallyConnected1D(3, 3, strides, activation="tanh"), Flatten(),
                   Dense(2, "softmax")], "categorical_crossentropy")
    check_model(model, rng.normal(size=(4, 7, 2)), rng.integers(0, 2, 4), rng)


def test_gradients_stacked_without_bias(fp64):
    """Two layers (the second's input gradient flows back), the first without a bias."""
    rng = np.random.default_rng(6)
    model = build([Input((9, 1)), LocallyConnected1D(2, 3, use_bias=False, activation="swish"),
                   LocallyConnected1D(1, 2, 2, activation="sigmoid"), Flatten()], "mse")
    check_model(model, rng.normal(size=(3, 9, 1)), rng.normal(size=(3, 3)), rng)


def test_a_million_positions(rt):
    """The report's network: R = 3, one filter, sigmoid, on an input of 10^6 positions, two layers."""
    steps = 1_000_000
    rng = np.random.default_rng(7)
    model = clnet.Sequential([Input((steps, 1)), LocallyConnected1D(1, 3, activation="sigmoid"),
                              LocallyConnected1D(1, 3, activation="sigmoid")], seed=2)
    x = rng.normal(size=(2, steps, 1)).astype(np.float32)
    y = model.predict(x)
    assert y.shape == (2, steps - 4, 1)
    want = x.astype(np.float64)
    weights = model.get_weights()
    for kernel, bias in (weights[:2], weights[2:]):
        want = 1 / (1 + np.exp(-locally_connected_1d(want, kernel, bias, 1)))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_initializer_fans_are_one_positions(rt):
    """glorot_uniform's limit uses one position's fans, sqrt(6 / (kernel_size * input_dim + filters))."""
    layer = layer_alone(LocallyConnected1D(4, 3), (2000, 2), 1, np.float32)
    kernel = layer.get_weights()[0]
    limit = np.sqrt(6 / (6 + 4))
    assert kernel.shape == (1998, 6, 4) and np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.99 * limit


def test_launches_per_training_step(rt):
    layer = layer_alone(LocallyConnected1D(2, 3, activation="relu"), (10, 2), 4, np.float32)
    x = device(np.ones((4, 10, 2)), np.float32)
    launches = rt.launches
    layer.backward(layer.forward(x, 4), 4, True)
    assert rt.launches - launches == 4


def test_bad_arguments(rt):
    with pytest.raises(ValueError, match=r"LocallyConnected1D 'lc' kernel_size=5 is larger than the input's 4 steps "
                                         r"\(input_shape \(4, 2\)\)"):
        built(clnet.Sequential([Input((4, 2)), LocallyConnected1D(1, 5, name="lc")]), (4, 2))
    with pytest.raises(ValueError, match=r"LocallyConnected1D 'lc' expects samples of shape \(steps, input_dim\), "
                                         r"got input_shape \(4,\)"):
        built(clnet.Sequential([Input((4,)), LocallyConnected1D(1, 2, name="lc")]), (4,))
    for argument, value in [("filters", 0), ("kernel_size", -1), ("strides", 1.5)]:
        kwargs = {"filters": 1, "kernel_size": 2, argument: value}
        with pytest.raises(ValueError, match=rf"LocallyConnected1D {argument} must be a positive integer, got {value}"):
            LocallyConnected1D(**kwargs)
    with pytest.raises(ValueError, match="LocallyConnected1D activation must be elementwise"):
        LocallyConnected1D(2, 2, activation="softmax")


def test_config_round_trip(rt):
    model = clnet.Sequential([Input((12, 3)), LocallyConnected1D(4, (3,), strides=2, activation="relu",
                                                                 use_bias=False)], seed=1)
    built(model, (12, 3))
    again = clnet.Sequential.from_config(model.get_config())
    assert again.get_config() == model.get_config()
    for a, b in zip(again.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
