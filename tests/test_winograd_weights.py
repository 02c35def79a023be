"""The convolution's weight gradient by Winograd's F(3x3, 4x4) (clnet/products/winograd_weights.cl), on
any device (forced by tiles): against numpy's direct sums in float32 at awkward sizes and in float64,
split along the tiles, the delta it frames for either input gradient, its launches, its candidates
and tiles out of place (test_winograd.py: the gradient check, the tuner and bad geometries)."""
import numpy as np
import pytest

import clnet
from clnet.layers import Conv2D, Input
from clnet.products import winograd_weights
from reference import conv2d_backward
from test_conv import TILED, device_pass
from test_winograd import CASES, WEIGHTS, WINOGRAD, fake_gpu, geometry, winograd_pass

F32 = np.float32


@pytest.mark.parametrize("shape,filters,padding", CASES)
@pytest.mark.parametrize("form", WEIGHTS)
@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_weight_gradient_against_numpy(rt, rng, shape, filters, padding, form, dtype):
    """dL/dW and dL/db, and dL/dx from the delta it framed, against numpy's direct sums in float64.
    F(3x3, 4x4)'s transforms round more than the direct sum: the float32 error bound is 1e-5 of the
    largest |dL/dW| (the bias is a plain sum, to the direct form's tolerance); float64 to 1e-12."""
    (_, dx, dk, db), (_, want_dx, want_dk, want_db) = winograd_pass(rt, rng, shape, filters, padding,
                                                                    (TILED[0], form, TILED[1]), dtype)
    scale = np.abs(want_dk).max()
    bound = 1e-5 * scale if dtype == F32 else 1e-12 * max(scale, 1)
    np.testing.assert_allclose(dk, want_dk, rtol=0, atol=bound)
    tolerance = 2e-5 if dtype == F32 else 1e-12
    np.testing.assert_allclose(db, want_db, rtol=tolerance, atol=2.5 * tolerance)
    np.testing.assert_allclose(dx, want_dx, rtol=tolerance, atol=2.5 * tolerance)


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_both_winograd_gradients(rt, rng, padding):
    """The Winograd input gradient reads the frame the Winograd weight gradient wrote."""
    (_, dx, dk, db), (_, want_dx, want_dk, want_db) = winograd_pass(rt, rng, (10, 9, 6), 7, padding,
                                                                    (TILED[0], WEIGHTS[1], WINOGRAD[0]), np.float64)
    for have, want in ((dx, want_dx), (dk, want_dk), (db, want_db)):
        np.testing.assert_allclose(have, want, rtol=1e-12, atol=1e-12)


def test_split_along_the_tiles(rt, rng, monkeypatch):
    """Where the products would not fill the device, each is split along the tiles into slices of M
    that the last launch adds: 8 samples of 32 x 32 are 512 tiles, two slices of 320 (the
    capacity's 640 tiles halved), the second partial."""
    monkeypatch.setattr(winograd_weights, "WAVES", 10_000)
    splits = []
    real = winograd_weights.WinogradWeightPlan.weight_gradient
    monkeypatch.setattr(winograd_weights.WinogradWeightPlan, "weight_gradient",
                        lambda plan, *args: (splits.append((plan.chunk, plan.most_splits)), real(plan, *args)))
    (_, dx, dk, db), (_, want_dx, want_dk, want_db) = winograd_pass(rt, rng, (32, 32, 3), 5, "same",
                                                                    (TILED[0], WEIGHTS[0], TILED[0]), np.float64, 8)
    assert splits == [(320, 2)]
    for have, want in ((dx, want_dx), (dk, want_dk), (db, want_db)):
        np.testing.assert_allclose(have, want, rtol=1e-12, atol=1e-12)


def test_without_derivative_or_bias(rt, rng):
    """A linear layer's dL/dz is dL/dy itself (no f'(z) read); without a bias, dL/dW alone."""
    layer = Conv2D(4, 3, padding="same", use_bias=False, tiles=(TILED[0], WEIGHTS[0], TILED[0]))
    x, dy = rng.normal(size=(2, 6, 5, 3)), rng.normal(size=(2, 6, 5, 4))
    kernel = rng.normal(size=(3, 3, 3, 4))
    _, dx, (dk,) = device_pass(rt, layer, (6, 5, 3), x, dy, [kernel], np.float64)
    want_dx, want_dk, _ = conv2d_backward(x, kernel, dy, (1, 1), "same")
    np.testing.assert_allclose(dk, want_dk, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=1e-12, atol=1e-12)


def test_three_launches(rt, rng):
    """The weight gradient is three launches (the transforms of x and dL/dz in one, the 37 products,
    dL/dW and dL/db from them), as the step counts them."""
    layer = Conv2D(4, 3, padding="same", tiles=(TILED[0], WEIGHTS[0], TILED[0]))
    weights = [rng.normal(size=(3, 3, 2, 4)).astype(F32), np.zeros(4, F32)]
    x, dy = rng.normal(size=(2, 5, 5, 2)).astype(F32), rng.normal(size=(2, 5, 5, 4)).astype(F32)
    device_pass(rt, layer, (5, 5, 2), x, dy, weights)
    before = rt.launches
    layer.plan.weight_gradient(clnet.Tensor.from_numpy(x.reshape(2, -1)),
                               clnet.Tensor.from_numpy(dy.reshape(2, -1)), 2, True, True)
    assert rt.launches - before == 3


def test_scratch_from_the_first_weight_gradient(rng):
    """V, U and M's slices are allocated by the first weight gradient: a model that only predicts
    holds none."""
    model = clnet.Sequential([Input((7, 6, 2)), Conv2D(3, 3, padding="same", tiles=(TILED[0], WEIGHTS[0], TILED[0]))],
                             seed=0)
    model.compile("sgd", "mse")
    x = rng.normal(size=(5, 7, 6, 2))
    model.predict(x, verbose=0)
    plan = model.layers[0].plan.winograd_weights
    assert plan.scratch.nbytes == 0
    model.train_on_batch(x, rng.normal(size=(5, 7, 6, 3)))
    tiles = 5 * 2 * 2  # ceil(7 / 4) x ceil(6 / 4) a sample
    assert plan.scratch.nbytes >= 36 * tiles * (2 + 4) * 4 + 37 * 2 * 4 * 4


def test_candidates_where_it_applies(rt):
    """On GPUs, for 3 x 3 kernels at stride 1 without dilation: the tiled candidates 64 wide, with
    WINOGRAD; none elsewhere or on CPUs."""
    tiled = [{"VW": 4, "TILE": 64, "WPT": 4, "TK": 16}, {"VW": 4, "TILE": 128, "WPT": 8, "TK": 16}]
    assert winograd_weights.candidates(fake_gpu(), F32, geometry(), tiled) == [{**tiled[0], "WINOGRAD": 1}]
    for other in (geometry(kernel=5), geometry(stride=2), geometry(dilation=2)):
        assert winograd_weights.candidates(fake_gpu(), F32, other, tiled) == []
    if not rt.info.is_gpu:
        assert winograd_weights.candidates(rt, F32, geometry(), tiled) == []


@pytest.mark.parametrize("tiles", [(WEIGHTS[0], TILED[0], TILED[0]), (TILED[0], TILED[0], WEIGHTS[0]),
                                   (TILED[0], WINOGRAD[0], TILED[0])])
def test_each_form_in_its_place(tiles):
    """The weight gradient's Winograd tiles are refused for the forward and the input gradient, the
    input gradient's for the weight gradient."""
    with pytest.raises(ValueError, match=r"Conv2D 'c': tiles as a tuple must be three tiled forms' tiles \(forward, "
                                         r"weight gradient, input gradient; each may be a Winograd form's\)"):
        Conv2D(3, 3, name="c", tiles=tiles)


def test_not_as_the_only_tiles():
    with pytest.raises(ValueError, match=r"Conv2D 'c': the Winograd forms' tiles are given per product, in a tuple"):
        Conv2D(3, 3, name="c", tiles=WEIGHTS[0])
    with pytest.raises(ValueError, match=r"Conv2D 'c': the Winograd forms' tiles are given per product, in a tuple"):
        Conv2D(3, 3, name="c", tiles=WINOGRAD[0])
