"""The convolution's forward by Winograd's F(4x4, 3x3) (clnet/products/winograd_forward.cl), on any
device (forced by tiles): against numpy's direct sum in float32 at awkward sizes and in float64, with
each kind of activation, all three products by Winograd, its launches (test_winograd.py: the gradient
check, the tuner and bad geometries)."""
import numpy as np
import pytest

import clnet
from clnet.cl.parameters import ParameterStore
from clnet.layers import Conv2D
from reference import ACTIVATIONS, conv2d, conv2d_backward
from test_conv import TILED, device_pass
from test_winograd import CASES, WEIGHTS, WINOGRAD, winograd_pass

F32 = np.float32


@pytest.mark.parametrize("shape,filters,padding", CASES)
@pytest.mark.parametrize("form", WINOGRAD)
@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_forward_against_numpy(rt, rng, shape, filters, padding, form, dtype):
    """z of a linear layer and its gradients, against numpy's direct sums in float64 (the activations'
    epilogue: test_each_activation). Channels not a multiple of 4 pad the products' depth with zeros.
    F(4x4, 3x3)'s transforms round more than the direct sum: the float32 bound is 1e-5 of the largest
    |z|, and the gradients (direct products) 2e-5 of their largest values; float64 to 1e-12."""
    have, want = winograd_pass(rt, rng, shape, filters, padding, (form, TILED[1], TILED[0]), dtype,
                               activation="linear")
    for got, expected, bound in zip(have, want, (1e-5, 2e-5, 2e-5, 2e-5) if dtype == F32 else (1e-12,) * 4):
        np.testing.assert_allclose(got, expected, rtol=0, atol=bound * max(np.abs(expected).max(), 1))


@pytest.mark.parametrize("activation", ["linear", "relu", "sigmoid", "gelu", "softmax"])
def test_each_activation(rt, rng, activation):
    """The activation is applied as z is stored, and f'(z) (or, for softmax, z) kept for the backward."""
    layer = Conv2D(6, 3, padding="same", activation=activation, tiles=(WINOGRAD[0], TILED[0], WINOGRAD[1]))
    x, dy = rng.normal(size=(2, 7, 6, 5)), rng.normal(size=(2, 7, 6, 6))
    weights = [rng.normal(size=(3, 3, 5, 6)), rng.normal(size=6)]
    y, dx, (dk, db) = device_pass(rt, layer, (7, 6, 5), x, dy, weights, np.float64)
    z = conv2d(x, weights[0], weights[1], (1, 1), "same")
    if activation == "softmax":
        e = np.exp(z - z.max(-1, keepdims=True))
        want_y = e / e.sum(-1, keepdims=True)
        dz = want_y * (dy - (dy * want_y).sum(-1, keepdims=True))
    else:
        forward, derivative = ACTIVATIONS[activation]
        want_y, dz = forward(z, 1.0, 0.0), dy * derivative(z, 1.0, 0.0)
    np.testing.assert_allclose(y.reshape(z.shape), want_y, rtol=1e-12, atol=1e-12)
    want_dx, want_dk, want_db = conv2d_backward(x, weights[0], dz, (1, 1), "same")
    for have, want in ((dx.reshape(x.shape), want_dx), (dk, want_dk), (db, want_db)):
        np.testing.assert_allclose(have, want, rtol=1e-11, atol=1e-11)


def test_all_three_winograd(rt, rng):
    """Every product by Winograd, over a batch shorter than the buffers, then a longer one."""
    layer = Conv2D(7, 3, padding="same", activation="tanh", tiles=(WINOGRAD[1], WEIGHTS[1], WINOGRAD[0]))
    weights = [rng.normal(size=(3, 3, 4, 7)), rng.normal(size=7)]
    for rows in (1, 4):  # device_pass allocates rows + 2
        x, dy = rng.normal(size=(rows, 9, 10, 4)), rng.normal(size=(rows, 9, 10, 7))
        y, dx, (dk, db) = device_pass(rt, layer, (9, 10, 4), x, dy, weights, np.float64)
        z = conv2d(x, weights[0], weights[1], (1, 1), "same")
        np.testing.assert_allclose(y.reshape(z.shape), np.tanh(z), rtol=1e-12, atol=1e-12)
        want = conv2d_backward(x, weights[0], dy * (1 - np.tanh(z) ** 2), (1, 1), "same")
        for have, expected in zip((dx.reshape(x.shape), dk, db), want):
            np.testing.assert_allclose(have, expected, rtol=1e-11, atol=1e-11)


def test_three_launches_and_scratch(rt, rng):
    """The forward is three launches (the transforms of x and W in one, the 36 products, y from
    them); V, U and M are allocated by the first."""
    layer = Conv2D(4, 3, padding="same", tiles=(WINOGRAD[0], TILED[0], TILED[0]))
    store = ParameterStore(rt, F32)
    layer.build((5, 5, 2), store, rng)
    store.allocate()
    layer.allocate(2)
    plan = layer.plan.winograd_forward
    assert plan.scratch.nbytes == 0
    before = rt.launches
    layer.plan.forward(clnet.Tensor.from_numpy(rng.normal(size=(2, 50)).astype(F32)), 2)
    assert rt.launches - before == 3
    tiles = 2 * 2 * 2  # ceil(5 / 4) x ceil(5 / 4) a sample
    assert plan.scratch.nbytes == 36 * (tiles * 4 + 4 * 4 + tiles * 4) * 4
