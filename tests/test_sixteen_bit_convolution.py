"""Convolutions whose products run on operands stored in 16 bits (products/sixteen_bit_convolution.py):
the patch matrix written in 16 bits, a step against float64 at awkward geometries, launches per
step, which convolutions can take it, and the tuner's choice. The products need Hopper's wgmma;
elsewhere only which convolutions take it is checked."""
import numpy as np
import pytest

import clnet
from clnet import mixed_precision
from clnet.cl.parameters import ParameterStore
from clnet.cl.tensor import Tensor
from clnet.layers import Conv1D, Conv2D, Dense, Flatten, Input
from clnet.products import ConvPlan, SixteenBitConvPlan, tuner
from clnet.products.sixteen_bit import from_atoms, product_geometry
from reference import ACTIVATIONS, rounded, sixteen_bits

F32 = np.float32
HALVES = ["bfloat16", "float16"]


def on_hopper(rt):
    if not (rt.info.warpgroup_products and rt.info.tensor_cores):
        pytest.skip(f"16-bit operands in memory need Hopper's wgmma; the device is {rt.info.name!r}")


def covered(geometry: tuple):
    """(i, j, oy, ox, y, x) for each tap (i, j) of each window (oy, ox) that covers pixel (y, x)."""
    height, width, channels, out_h, out_w, kh, kw, sh, sw, dh, dw, top, left = geometry
    for i in range(kh):
        for j in range(kw):
            for oy in range(out_h):
                for ox in range(out_w):
                    y, x = oy * sh - top + i * dh, ox * sw - left + j * dw
                    if 0 <= y < height and 0 <= x < width:
                        yield i, j, oy, ox, y, x


def patches(x: np.ndarray, geometry: tuple) -> np.ndarray:
    """The patch matrix of x (samples, height, width, channels): row (sample, oy, ox), column
    (i * kw + j) * channels + c, zeros outside the image (sixteen_bit_convolution.cl's layout)."""
    out_h, out_w, kh, kw = geometry[3:7]
    out = np.zeros((len(x), out_h, out_w, kh, kw, geometry[2]), x.dtype)
    for i, j, oy, ox, y, xx in covered(geometry):
        out[:, oy, ox, i, j] = x[:, y, xx]
    return out.reshape(len(x) * out_h * out_w, -1)


def unpatched(gradient: np.ndarray, geometry: tuple, samples: int) -> np.ndarray:
    """dL/dx from the patch matrix's gradient: patches' adjoint, each window's columns added back
    into the pixels they came from."""
    height, width, channels, out_h, out_w, kh, kw = geometry[:7]
    g = gradient.reshape(samples, out_h, out_w, kh, kw, channels)
    dx = np.zeros((samples, height, width, channels))
    for i, j, oy, ox, y, xx in covered(geometry):
        dx[:, y, xx] += g[:, oy, ox, i, j]
    return dx


def sixteen_bit_layer(rt, rng, monkeypatch, half, make, input_shape, capacity):
    """The layer make() makes under the mixed policy of `half`, with the tuner's choice its 16-bit
    operands, built and allocated for `capacity` samples, weights from rng."""
    mixed_precision.set_global_policy(f"mixed_{half}")
    monkeypatch.setattr(tuner, "convolution_in_sixteen_bits", lambda *args: True)
    layer = make()
    store = ParameterStore(rt, F32)
    layer.build(input_shape, store, rng)
    store.allocate()
    layer.set_weights([rng.normal(0, 0.3, w.shape) for w in layer.get_weights()])
    layer.allocate(capacity)
    assert isinstance(layer.plan, SixteenBitConvPlan)
    return layer


# The tiled form's tiles, fixed: the 16-bit plan replaces a GPU's tiled form (the tests run with
# CLNET_TUNE=0, where the Dense tuner's default on a GPU may be the CPU form's layout).
TILED = {"VW": 4, "TILE": 32, "WPT": 8, "TK": 8}

# (layer, input shape): edges in every dimension of the products, strides, dilation, Keras's
# uneven 'same' split, a causal Conv1D, activations that keep f'(z) (GELU), whose derivative
# follows from y (ReLU, tanh, linear), and softmax over each position's filters.
CASES = [
    (lambda: Conv2D(16, 3, padding="same", activation="relu", tiles=TILED), (9, 11, 8)),
    (lambda: Conv2D(24, (3, 2), strides=2, activation="tanh", tiles=TILED), (13, 10, 16)),
    (lambda: Conv2D(8, 3, dilation_rate=2, padding="same", activation="gelu", tiles=TILED), (12, 12, 8)),
    (lambda: Conv2D(136, (4, 2), strides=(2, 3), padding="same", tiles=TILED), (7, 8, 24)),
    (lambda: Conv1D(32, 5, padding="causal", activation="relu", tiles=TILED), (20, 8)),
    (lambda: Conv2D(16, 1, activation="softmax", tiles=TILED), (5, 5, 8)),
]


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_convolution_s_step_on_operands_stored_in_16_bits(rt, rng, monkeypatch, half, case):
    """The patches rounded to `half` bit for bit; y = f(patches W + b) from them and W rounded, to
    float's sums; dL/dW, dL/db and dL/dx from dL/dz rounded to `half` (as the dense products'
    test checks it), to float's sums; samples past `rows` not read."""
    on_hopper(rt)
    make, input_shape = CASES[case]
    rows = 5
    layer = sixteen_bit_layer(rt, rng, monkeypatch, half, make, input_shape, rows + 2)
    geometry, filters = layer.geometry, layer.filters
    kernel, bias = layer.get_weights()
    w = kernel.reshape(-1, filters).astype(F32)
    x = rng.standard_normal((rows + 2, *input_shape)).astype(F32)
    dy = rng.standard_normal((rows + 2, *layer.output_shape)).astype(F32)
    x[rows:], dy[rows:] = np.nan, np.nan
    x4 = x.reshape(rows + 2, *geometry[:3])

    y = layer.forward(Tensor.from_numpy(x), rows).numpy()[:rows].reshape(-1, filters)
    plan = layer.plan
    positions = rows * plan.positions
    stored = from_atoms(plan.product.inputs16.numpy(), positions, plan.patch_size)
    np.testing.assert_array_equal(stored, sixteen_bits(patches(x4[:rows], geometry), half))
    pr, wr = rounded(patches(x4[:rows], geometry), half), rounded(w, half)
    z = pr @ wr + bias
    act = layer.activation
    scale = np.abs(z).max() + 1
    if act.elementwise:
        forward, derivative = ACTIVATIONS[act.name]
        want = forward(z, act.a, act.b)
    else:
        e = np.exp(z - z.max(1, keepdims=True))
        want = e / e.sum(1, keepdims=True)
    assert np.abs(y - want).max() <= 1e-5 * scale

    dx = layer.backward(Tensor.from_numpy(dy), rows, True).numpy()[:rows]
    g = dy[:rows].reshape(-1, filters)
    product = plan.product
    if not act.elementwise:  # softmax's derivative, the layer's own kernel, in float
        dz = y * (g - (g * y).sum(1, keepdims=True, dtype=np.float64))
    elif product.kept is not product.outputs:  # f'(z), kept where it needs z: dL/dz = dL/dy f'(z) in float
        slopes = product.kept.numpy()[:positions]
        assert np.abs(slopes - derivative(z, act.a, act.b)).max() <= 1e-5 * scale
        dz = g * slopes
    else:  # the identity's, ReLU's (exact in float) or tanh's f' = 1 - y^2 (to float's rounding)
        dz = {"linear": lambda: g, "relu": lambda: g * (y > 0), "tanh": lambda: g * (1 - y.astype(np.float64) ** 2)}[
            act.name]()
    delta = from_atoms(product.delta16.numpy(), positions, filters)
    dzr = (delta.view(np.float16) if half == "float16" else (delta.astype(np.uint32) << 16).view(F32)).astype(
        np.float64)
    if dz.dtype == F32:
        np.testing.assert_array_equal(delta, sixteen_bits(dz, half))
    else:  # within the format's rounding and float's
        unit = 2.0 ** -8 if half == "bfloat16" else 2.0 ** -11
        assert (np.abs(dzr - dz) <= (unit + 1e-5) * np.abs(dz) + 1e-6 * np.abs(g).max()).all()
    grad_w, grad_b = layer.gradients()
    near = lambda got, want: np.abs(got - want).max() <= 1e-5 * (np.abs(want).max() + 1)
    assert near(grad_w.reshape(-1, filters), pr.T @ dzr)
    assert near(grad_b, dz.sum(0))
    assert near(dx.reshape(rows, *geometry[:3]), unpatched(dzr @ wr.T, geometry, rows))


def test_a_step_s_launches(rt, rng, monkeypatch):
    """The forward: the patches, W rounded, the product with bias and activation; the backward:
    dL/dz with the bias's block sums, their sum, the weight gradient's product; at stride 1 the
    patches of dL/dz, W's taps transposed and their product, else the patches' gradient and its
    gather into dL/dx; each product adding split slices where split."""
    on_hopper(rt)
    splits = lambda m, n, k: 1 + (product_geometry(rt, m, n, k)[0] > 1)
    for strides, out in ((1, 28), (2, 14)):
        layer = sixteen_bit_layer(rt, rng, monkeypatch, "bfloat16",
                                  lambda: Conv2D(64, 3, strides=strides, activation="relu", tiles=TILED), (30, 30, 32),
                                  64)
        x = Tensor.from_numpy(rng.standard_normal((64, 30 * 30 * 32)).astype(F32))
        dy = Tensor.from_numpy(rng.standard_normal((64, out * out * 64)).astype(F32))
        before = rt.launches
        layer.forward(x, 64)
        assert rt.launches - before == 3
        rows, patch = 64 * out * out, 9 * 32
        if strides == 1:  # (64 x 30 x 30 pixels, 9 x 64 taps of dL/dz, 32 channels)
            input_gradient = 2 + splits(64 * 30 * 30, 32, 9 * 64)
        else:
            input_gradient = splits(rows, patch, 64) + 1
        before = rt.launches
        layer.backward(dy, 64, True)
        assert rt.launches - before == 2 + splits(patch, 64, rows) + input_gradient


def test_which_convolutions_take_operands_stored_in_16_bits(rt):
    """Hopper's wgmma (and the tensor cores not left out), channels, filters and W's panel
    multiples of 8: a first layer on 1 or 3 channels keeps the float forms."""
    hopper = bool(rt.info.warpgroup_products and rt.info.tensor_cores)
    geometry = lambda channels: (28, 28, channels, 26, 26, 3, 3, 1, 1, 1, 1, 0, 0)
    assert SixteenBitConvPlan.takes(rt, geometry(32), 64, 64) is hopper
    for channels, filters, panel in ((1, 32, 32), (3, 64, 64), (12, 64, 64), (32, 20, 20), (32, 64, 68)):
        assert not SixteenBitConvPlan.takes(rt, geometry(channels), filters, panel)


def test_float_policies_and_cpus_keep_the_float_forms(rt, rng, monkeypatch):
    """Under float32, or where the device has no wgmma, a convolution runs ConvPlan, and the
    tuner is not asked."""
    def asked(*args):
        raise AssertionError(f"convolution_in_sixteen_bits{args} asked")

    monkeypatch.setattr(tuner, "convolution_in_sixteen_bits", asked)
    for policy in ("float32", "mixed_bfloat16"):
        mixed_precision.set_global_policy(policy)
        if policy != "float32" and rt.info.warpgroup_products:
            continue
        layer = Conv2D(16, 3)
        store = ParameterStore(rt, F32)
        layer.build((10, 10, 8), store, rng)
        store.allocate()
        layer.allocate(4)
        assert isinstance(layer.plan, ConvPlan)


def test_the_tuner_measures_which_form_runs_a_step_faster(rt, monkeypatch, tmp_path):
    """convolution_in_sixteen_bits: a bool, measured (with the tuner on, into a cache of its own)
    once and kept (the same answer again)."""
    on_hopper(rt)
    monkeypatch.setenv("CLNET_TUNE", "1")
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path))
    geometry = (30, 30, 32, 28, 28, 3, 3, 1, 1, 1, 1, 0, 0)
    tiles = (TILED,) * 3
    first = tuner.convolution_in_sixteen_bits(rt, "bfloat16", geometry, 64, 32, tiles)
    assert isinstance(first, bool)
    assert tuner.convolution_in_sixteen_bits(rt, "bfloat16", geometry, 64, 32, tiles) is first


@pytest.mark.parametrize("half", HALVES)
def test_a_model_trains_with_its_convolution_on_operands_stored_in_16_bits(monkeypatch, half):
    """A small CNN under the mixed policy, its convolution in 16 bits, fits to a loss within 2% of
    the same model's in float32 (float16's with Keras's loss scaling, as compile wraps it)."""
    on_hopper(clnet.runtime())
    monkeypatch.setattr(tuner, "convolution_in_sixteen_bits", lambda *args: True)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(512, 12, 12, 8)).astype(F32)
    y = (x[:, 3:9, 3:9, :4].sum((1, 2)) > 0).argmax(1)
    losses = {}
    for policy in ("float32", f"mixed_{half}"):
        mixed_precision.set_global_policy(policy)
        model = clnet.Sequential([Input((12, 12, 8)), Conv2D(16, 3, activation="relu", tiles=TILED), Flatten(),
                                  Dense(4, activation="softmax")], seed=3)
        model.compile(clnet.optimizers.Adam(1e-3), "sparse_categorical_crossentropy")
        history = model.fit(x, y, batch_size=64, epochs=3, verbose=0)
        assert isinstance(model.layers[0].plan, SixteenBitConvPlan if policy != "float32" else ConvPlan)
        losses[policy] = history.history["loss"][-1]
    assert abs(losses[f"mixed_{half}"] - losses["float32"]) <= 0.02 * losses["float32"], losses
