"""The convolution's input gradient by Winograd's F(4x4, 3x3) (clnet/products/winograd.cl), on any
device (forced by tiles): against numpy's direct sum in float32 at awkward sizes and in float64,
its launches and where the tuner offers it; and what the three Winograd forms share (the others:
test_winograd_forward.py, test_winograd_weights.py): a float64 gradient check through them, the
tuner's choice among them, and bad tiles."""
from types import SimpleNamespace

import numpy as np
import pytest

import clnet
from clnet.layers import Conv2D, Dense, Flatten, Input
from clnet.products import tuner, winograd
from clnet.products.workspace import Workspace
from reference import conv2d, conv2d_backward
from test_conv import TILED, device_pass
from test_gradients import build, check_model

F32 = np.float32
# Blocks of 64 tiles in two stages of 16 filters, and of 128 in three stages of 8 (a slice shorter
# than most layers' filters, so several slices and a last partial one run).
WINOGRAD = [{"WINOGRAD": 1, "BM": 64, "TK": 16, "STAGES": 2}, {"WINOGRAD": 1, "BM": 128, "TK": 8, "STAGES": 3}]
# The weight gradient's F(3x3, 4x4) (test_winograd_weights.py) on both test tiles: 16 wide in slices 4
# deep, and 32 wide in slices 8 deep.
WEIGHTS = [{**tiles, "WINOGRAD": 1} for tiles in TILED]


# (input shape, filters, padding): sizes that are not multiples of the 4 x 4 tiles, channels and
# filters not multiples of 4 (filters_p padded), filters past one slice with a partial last one,
# an image smaller than a tile.
CASES = [((9, 7, 5), 6, "same"), ((8, 8, 8), 16, "valid"), ((4, 5, 3), 20, "same"), ((13, 11, 12), 37, "same"),
         ((2, 1, 2), 3, "same"), ((6, 3, 7), 9, "valid")]


def winograd_pass(rt, rng, shape, filters, padding, tiles, dtype, rows=3, activation="tanh"):
    """A forward and backward pass of a 3 x 3 convolution with these tiles, tanh or linear: (y,
    dL/dx, dL/dW, dL/db) from the device and numpy's in float64."""
    layer = Conv2D(filters, 3, padding=padding, activation=activation, tiles=tiles)
    x = rng.normal(size=(rows, *shape)).astype(dtype)
    weights = [rng.normal(size=(3, 3, shape[2], filters)).astype(dtype), rng.normal(size=filters).astype(dtype)]
    x64, w64 = x.astype(np.float64), [w.astype(np.float64) for w in weights]
    z = conv2d(x64, w64[0], w64[1], (1, 1), padding)
    dy = rng.normal(size=z.shape).astype(dtype)
    y, dx, (dk, db) = device_pass(rt, layer, shape, x, dy, weights, dtype)
    assert layer.plan.product_tiles == tiles
    tanh = activation == "tanh"
    want = conv2d_backward(x64, w64[0], dy * (1 - np.tanh(z) ** 2) if tanh else dy, (1, 1), padding)
    return (y.reshape(z.shape), dx.reshape(x.shape), dk, db), (np.tanh(z) if tanh else z, *want)


@pytest.mark.parametrize("shape,filters,padding", CASES)
@pytest.mark.parametrize("form", WINOGRAD)
@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_input_gradient_against_numpy(rt, rng, shape, filters, padding, form, dtype):
    """dL/dx, and the forward and weight gradients beside it, against numpy's direct sums in
    float64. F(4x4, 3x3)'s transforms (constants 4, 5, 1/6, 1/24, 8) round more than the direct
    sum: its float32 error measured at most about 1e-6 of the largest |dL/dx| at these sizes (6.5e-6
    to 1.6e-5 at 64 to 256 filters: benchmarks/RESULTS.md), so the bound is 1e-5 of it; float64 to 1e-12."""
    (y, dx, dk, db), (want_y, want_dx, want_dk, want_db) = winograd_pass(rt, rng, shape, filters, padding,
                                                                         (TILED[0], TILED[1], form), dtype)
    scale = np.abs(want_dx).max()
    bound = 1e-5 * scale if dtype == F32 else 1e-12 * max(scale, 1)
    np.testing.assert_allclose(dx, want_dx, rtol=0, atol=bound)
    tolerance = 2e-5 if dtype == F32 else 1e-12
    np.testing.assert_allclose(y, want_y, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(dk, want_dk, rtol=tolerance, atol=2.5 * tolerance)
    np.testing.assert_allclose(db, want_db, rtol=tolerance, atol=2.5 * tolerance)


def test_shorter_batch_than_the_buffers(rt, rng):
    """A batch of fewer rows than the layer holds numbers its tiles from that batch: V and M are
    laid out by the batch's tiles, not the capacity's."""
    layer = Conv2D(5, 3, padding="same", tiles=(TILED[0], TILED[0], WINOGRAD[0]))
    weights = [rng.normal(size=(3, 3, 4, 5)).astype(np.float64), rng.normal(size=5).astype(np.float64)]
    for rows in (4, 1):  # device_pass allocates rows + 2
        x = rng.normal(size=(rows, 7, 6, 4))
        dy = rng.normal(size=(rows, 7, 6, 5))
        _, dx, _ = device_pass(rt, layer, (7, 6, 4), x, dy, weights, np.float64)
        want_dx = conv2d_backward(x, weights[0], dy, (1, 1), "same")[0]
        np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("first,second", [
    ((TILED[0], TILED[0], TILED[0]), (TILED[0], TILED[1], WINOGRAD[0])),
    ((TILED[0], WEIGHTS[0], TILED[0]), (TILED[0], WEIGHTS[1], WINOGRAD[1])),
    ((WINOGRAD[0], TILED[0], TILED[0]), (WINOGRAD[1], WEIGHTS[0], WINOGRAD[0]))])
def test_gradients_through_them(fp64, first, second):
    """A float64 gradient check of a model whose 3 x 3 convolutions take Winograd's forms: the input
    gradient's for the second (the first's gradients come through it), then the weight gradient's
    too, then the forward's too."""
    rng = np.random.default_rng(7)
    model = build([Input((6, 5, 2)), Conv2D(4, 3, padding="same", activation="tanh", tiles=first),
                   Conv2D(3, 3, padding="valid", activation="sigmoid", tiles=second),
                   Flatten(), Dense(3, "softmax")], "categorical_crossentropy")
    check_model(model, rng.normal(size=(3, 6, 5, 2)), rng.integers(0, 3, 3), rng)


def test_three_launches(rt, rng):
    """The input gradient is three launches (the transforms of dL/dz and W in one, the 36
    products, dL/dx from them), as the step counts them."""
    layer = Conv2D(4, 3, padding="same", tiles=(TILED[0], TILED[0], WINOGRAD[0]))
    weights = [rng.normal(size=(3, 3, 2, 4)).astype(F32), np.zeros(4, F32)]
    x, dy = rng.normal(size=(2, 5, 5, 2)).astype(F32), rng.normal(size=(2, 5, 5, 4)).astype(F32)
    device_pass(rt, layer, (5, 5, 2), x, dy, weights)
    grad = clnet.Tensor.from_numpy(dy.reshape(2, -1).astype(F32))
    layer.plan.weight_gradient(clnet.Tensor.from_numpy(x.reshape(2, -1)), grad, 2, True, True)
    before = rt.launches
    layer.plan.input_gradient(grad, 2, True)
    assert rt.launches - before == 3


def test_scratch_only_where_an_input_gradient_runs(rng):
    """V, U and M are allocated by the first input gradient: a model's first convolution, which
    computes none, holds none, though the tuner (which measures each convolution alone) may give
    it the form."""
    winograd_tiles = (TILED[0], TILED[0], WINOGRAD[0])
    model = clnet.Sequential([Input((7, 6, 2)), Conv2D(4, 3, padding="same", tiles=winograd_tiles),
                              Conv2D(3, 3, padding="same", tiles=winograd_tiles)], seed=0)
    model.compile("sgd", "mse")
    model.train_on_batch(rng.normal(size=(5, 7, 6, 2)), rng.normal(size=(5, 7, 6, 3)))
    first, second = (layer.plan.winograd for layer in model.layers)
    assert first.scratch.nbytes == 0
    tiles = 5 * 2 * 2  # (ceil(7 / 4) x ceil(6 / 4) a sample; room for the batch fit trains in)
    assert second.scratch.nbytes >= 36 * tiles * (4 + 4) * 4 + 36 * 4 * 4 * 4


def fake_gpu(local_mem_size=49152):
    """What winograd.candidates reads of a runtime: a GPU with this much local memory."""
    return SimpleNamespace(info=SimpleNamespace(is_gpu=True, cl_device=SimpleNamespace(local_mem_size=local_mem_size)))


def geometry(kernel=3, stride=1, dilation=1):
    """ConvPlan's thirteen sizes of a 10 x 10 x 4 'same' convolution with these settings."""
    return (10, 10, 4, 10, 10, kernel, kernel, stride, stride, dilation, dilation, 1, 1)


def test_candidates_fill_local_memory_where_it_applies(rt):
    """On GPUs, for 3 x 3 kernels at stride 1 without dilation: blocks of 64 and 128 tiles with as
    many stages (2 to 4) as the work-group's local memory holds; none elsewhere or on CPUs."""
    gpu = fake_gpu()
    assert winograd.candidates(gpu, F32, geometry()) == [{"WINOGRAD": 1, "BM": 64, "TK": 16, "STAGES": 4},
                                                         {"WINOGRAD": 1, "BM": 128, "TK": 16, "STAGES": 3}]
    assert winograd.candidates(gpu, np.float64, geometry()) == [{"WINOGRAD": 1, "BM": 64, "TK": 16, "STAGES": 2}]
    assert all(winograd.local_bytes(tiles, F32) <= 49152 for tiles in winograd.candidates(gpu, F32, geometry()))
    for other in (geometry(kernel=5), geometry(stride=2), geometry(dilation=2)):
        assert winograd.candidates(gpu, F32, other) == []
    assert winograd.candidates(fake_gpu(16384), F32, geometry()) == []
    if not rt.info.is_gpu:
        assert winograd.candidates(rt, F32, geometry()) == []


def test_tuner_measures_each_form_for_its_products(rt):
    """Given Winograd's forms, the tuner times F(4x4, 3x3)'s for the forward and the input gradient
    and F(3x3, 4x4)'s for the weight gradient beside the tiles, and the layer runs with what it chose."""
    layer = Conv2D(3, 3, padding="same")
    layer.build((6, 6, 3), clnet.cl.parameters.ParameterStore(rt, F32), np.random.default_rng(0))
    chosen = tuner.tune_convolution(rt, F32, TILED, layer.geometry, 3, 2, WINOGRAD, WEIGHTS)
    assert chosen[0] in TILED + WINOGRAD and chosen[1] in TILED + WEIGHTS and chosen[2] in TILED + WINOGRAD
    model = clnet.Sequential([Input((6, 6, 3)), Conv2D(5, 1, tiles=TILED[0]),
                              Conv2D(3, 3, padding="same", tiles=tuple(chosen))], seed=0)
    model.compile("sgd", "mse")
    x, y = np.random.default_rng(1).normal(size=(4, 6, 6, 3)), np.random.default_rng(2).normal(size=(4, 6, 6, 3))
    assert np.isfinite(model.train_on_batch(x, y))


@pytest.mark.parametrize("settings,message", [
    ({"kernel_size": 5, "padding": "same"}, r"kernel_size \(5, 5\), strides \(1, 1\), dilation_rate \(1, 1\)"),
    ({"kernel_size": 3, "strides": 2}, r"kernel_size \(3, 3\), strides \(2, 2\), dilation_rate \(1, 1\)"),
    ({"kernel_size": 3, "dilation_rate": 2, "padding": "same"},
     r"kernel_size \(3, 3\), strides \(1, 1\), dilation_rate \(2, 2\)"),
])
@pytest.mark.parametrize("tiles,which", [((WINOGRAD[0], TILED[0], TILED[0]), "forward"),
                                         ((TILED[0], WEIGHTS[0], TILED[0]), "weight gradient"),
                                         ((TILED[0], TILED[0], WINOGRAD[0]), "input gradient")])
def test_refused_where_it_does_not_apply(settings, message, tiles, which):
    model = clnet.Sequential([Conv2D(2, name="c", tiles=tiles, **settings)])
    with pytest.raises(ValueError, match=rf"Conv2D 'c': the Winograd {which} \(tiles .*\) takes a 3 x 3 kernel "
                                         r"at stride 1 without dilation, got " + message):
        model.build((9, 9, 2))


def test_not_the_weight_gradient():
    with pytest.raises(ValueError, match=r"Conv2D 'c': tiles as a tuple must be three tiled forms' tiles \(forward, "
                                         r"weight gradient, input gradient; each may be a Winograd form's\)"):
        Conv2D(3, 3, name="c", tiles=(TILED[0], WINOGRAD[0], TILED[0]))


def test_plans_share_the_workspace(rng):
    """Every Winograd product of every convolution on a runtime takes its V, U and M from the
    runtime's three workspace slots, one array each."""
    tiles = (WINOGRAD[0], WEIGHTS[0], WINOGRAD[1])
    model = clnet.Sequential([Input((7, 6, 2)), Conv2D(4, 3, padding="same", tiles=tiles),
                              Conv2D(3, 3, padding="same", tiles=tiles)], seed=0)
    model.compile("sgd", "mse")
    model.train_on_batch(rng.normal(size=(5, 7, 6, 2)), rng.normal(size=(5, 7, 6, 3)))
    plans = [plan for layer in model.layers
             for plan in (layer.plan.winograd_forward, layer.plan.winograd_weights, layer.plan.winograd)]
    scratch = [plan.scratch.arrays for plan in plans if plan.scratch.arrays]
    assert len(scratch) == 5  # the first layer computes no input gradient
    for slot in range(3):
        assert len({arrays[slot].buffer.int_ptr for arrays in scratch}) == 1


def test_workspace_slots_grow_to_the_largest_reservation(rt):
    space = Workspace(rt)
    space.reserve("V", (100,), F32)
    space.reserve("V", (50,), np.float64)
    small = space.view("V", (10,), F32)
    assert space.nbytes == 400 and small.buffer.size == 400
    larger = space.view("V", (3, 100), F32)  # more than reserved: the slot grows, the smaller view keeps its memory
    assert space.nbytes == 1200 and larger.buffer.size == 1200 and small.buffer.size == 400
    assert space.view("U", (2, 2), F32).buffer.size == 16 and space.nbytes == 1216
