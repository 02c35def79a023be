"""Products of operands stored in 16 bits (products/sixteen_bit.cl) against float64 products of
the same 16-bit values, the rounding kernel against numpy's, and the plan's checks of its
arguments. The products need Hopper's wgmma (an NVIDIA GPU of compute capability 9.0); elsewhere
the plan must refuse clearly."""
import re

import numpy as np
import pytest

from clnet import activations, mixed_precision
from clnet.cl.device import DeviceError
from clnet.cl.parameters import ParameterStore
from clnet.cl.tensor import Tensor
from clnet.layers import Dense
from clnet.layers.dense import JoinedDense
from clnet.products import HALF_TYPES, SixteenBitDensePlan, SixteenBitPlan, tuner
from clnet.products import sixteen_bit
from clnet.products.sixteen_bit import STORAGE, from_atoms, operand, padded, to_atoms
from reference import ACTIVATIONS, rounded, sixteen_bits

F32 = np.float32
HALVES = ["bfloat16", "float16"]


def on_hopper(rt):
    if not rt.info.warpgroup_products:
        pytest.skip(f"16-bit operands in memory need Hopper's wgmma; the device is {rt.info.name!r}")


def stored(x: np.ndarray, half: str) -> Tensor:
    """x rounded to `half` on the host, as the device holds it (atoms)."""
    return Tensor.from_numpy(to_atoms(sixteen_bits(x, half)))


def test_the_atoms_layout():
    """to_atoms puts element (i, j) where sixteen_bit_layout.cl's atom_index says (written out
    here again from its comment), pads with zeros to whole blocks, and from_atoms undoes it."""
    rng = np.random.default_rng(5)
    rows, columns = 137, 72
    bits = rng.integers(1, 2 ** 16, (rows, columns), dtype=np.uint64).astype(STORAGE)
    atoms = to_atoms(bits)
    assert atoms.shape == (256, 128) == (padded(rows), padded(columns))
    flat, atom_rows = atoms.reshape(-1), 256 // 8
    for i, j in [(0, 0), (1, 9), (2, 8), (7, 31), (8, 32), (13, 45), (136, 71), (100, 63)]:
        chunk = (j % 32 // 8) ^ (i % 8 // 2)  # the 16-byte chunk of its atom's row, swizzled
        at = ((j // 32 * atom_rows + i // 8) * 8 + i % 8) * 32 + chunk * 8 + j % 8
        assert flat[at] == bits[i, j]
    assert np.count_nonzero(atoms) == bits.size  # (every element once; the pads zeros)
    np.testing.assert_array_equal(from_atoms(atoms, rows, columns), bits)


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("rows,n_in,units", [(200, 136, 72), (1037, 8, 264), (129, 520, 16), (300, 1024, 384)])
def test_products_against_float64(rt, rng, rows, n_in, units, half):
    """Each product equals the float64 product of the stored 16-bit operands to float's sums
    (1e-5 of its largest value), over awkward sizes: edges in every dimension, depths not a
    multiple of a slice, one slice; rows past `rows` are neither read nor written."""
    on_hopper(rt)
    plan = SixteenBitPlan(rt, half, n_in, units)
    capacity = rows + 5
    x = rng.standard_normal((capacity, n_in)).astype(F32)
    w = rng.standard_normal((n_in, units)).astype(F32)
    dz = rng.standard_normal((capacity, units)).astype(F32)
    x[rows:], dz[rows:] = np.nan, np.nan  # (read, they would spoil every sum)
    xr, wr, dzr = (rounded(a, half) for a in (x[:rows], w, dz[:rows]))
    x16, w16, dz16 = stored(x, half), stored(w, half), stored(dz, half)
    z, dx = Tensor((capacity, units), F32), Tensor((capacity, n_in), F32)
    grad = Tensor((n_in, units), F32)
    for t in (z, dx, grad):
        t.fill(7.0)
    plan.forward(x16, w16, z, rows)
    plan.weight_gradient(x16, dz16, grad, rows)
    plan.input_gradient(dz16, w16, dx, rows)

    def near(got, want):
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()

    near(z.numpy()[:rows], xr @ wr)
    near(grad.numpy(), xr.T @ dzr)
    near(dx.numpy()[:rows], dzr @ wr.T)
    assert (z.numpy()[rows:] == 7).all() and (dx.numpy()[rows:] == 7).all()


@pytest.mark.parametrize("half", HALVES)
def test_rounding_to_sixteen_bits(rt, rng, half):
    """RoundToSixteenBits rounds to nearest even, as numpy (reference.sixteen_bits): ties both
    ways, overflow to infinity, subnormals, signed zeros, infinities and NaN; each element lands
    in its atom (to_atoms), and no pad is written."""
    on_hopper(rt)
    plan = SixteenBitPlan(rt, half, 8, 8)
    one = np.float32(1.0).view(np.uint32)
    ties = (np.array([one + 0x8000, one + 0x18000, one + 0x1000, one + 0x3000], np.uint32).view(F32)
            if half == "bfloat16" else np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11], F32))
    special = np.array([0.0, -0.0, np.inf, -np.inf, 3e38, 7e4, 65519.0, 65520.0, 1e-8, -3e-41, 5.96e-8], F32)
    x = np.concatenate([rng.standard_normal(1014).astype(F32) * 100, ties, special, [np.nan]]).astype(F32)
    x = np.concatenate([x, np.zeros(-x.size % 136, F32)]).reshape(-1, 136)  # (an odd row count, a column past 128)
    target = Tensor.from_numpy(np.full((padded(x.shape[0]), padded(136)), 0x1234, STORAGE))
    plan.round(Tensor.from_numpy(x), target)
    atoms = target.numpy()
    bits, want = from_atoms(atoms, *x.shape), sixteen_bits(x, half)
    nan = np.isnan(x)
    np.testing.assert_array_equal(bits[~nan], want[~nan])
    assert np.isnan(rounded(x, half)[nan]).all() and ((bits[nan] & 0x7FFF) > (0x7F80 if half == "bfloat16"
                                                                              else 0x7C00)).all()
    inside = to_atoms(np.ones(x.shape, STORAGE)) == 1
    assert (atoms[~inside] == 0x1234).all()


def test_plan_arguments(rt):
    """Wrong formats and sizes name the argument, on any device; a device without wgmma is named."""
    with pytest.raises(ValueError, match="half must be one of"):
        SixteenBitPlan(rt, "float32", 8, 8)
    with pytest.raises(ValueError, match="n_in must be a positive multiple of 8.*got 100"):
        SixteenBitPlan(rt, "bfloat16", 100, 64)
    with pytest.raises(ValueError, match="units must be a positive multiple of 8.*got 0"):
        SixteenBitPlan(rt, "float16", 64, 0)
    if not rt.info.warpgroup_products:
        with pytest.raises(DeviceError, match=rf"compute capability 9\.0.*{re.escape(rt.info.name)}"):
            SixteenBitPlan(rt, "bfloat16", 64, 64)


def test_plan_checks_tensors(rt):
    """A tensor of the wrong dtype or shape, or too few rows, is named before any launch."""
    on_hopper(rt)
    plan = SixteenBitPlan(rt, "bfloat16", 16, 8)
    x, w = operand(rt, 8, 16), operand(rt, 16, 8)
    z = Tensor((4, 8), F32)
    with pytest.raises(ValueError, match="x must be a uint16 tensor of 16-bit atoms.*got float32"):
        plan.forward(Tensor((128, 128), F32), w, z, 4)
    with pytest.raises(ValueError, match=r"x must be .* with capacity >= rows \(4\).*got uint16 of shape \(8, 16\)"):
        plan.forward(Tensor((8, 16), np.uint16), w, z, 4)  # (row-major, not atoms)
    with pytest.raises(ValueError, match=r"weights must be a uint16 tensor of 16-bit atoms of shape \(128, 128\)"):
        plan.forward(x, Tensor((256, 128), np.uint16), z, 4)
    with pytest.raises(ValueError, match=r"outputs must be .* capacity >= rows \(5\)"):
        plan.forward(x, w, z, 5)
    with pytest.raises(TypeError, match="source must be a float32 tensor"):
        plan.round(x, w)
    with pytest.raises(TypeError, match=r"target must be a uint16 tensor of shape \(128, 128\).*got uint16 of shape "
                                        r"\(8, 16\)"):
        plan.round(Tensor((8, 16), F32), Tensor((8, 16), np.uint16))


def stored_layer(rt, rng, monkeypatch, half, make, n_in, capacity):
    """The layer make() makes under the mixed policy of `half`, built with the tuner's choice the
    WGMMA form's 16-bit tiles, allocated for `capacity` rows, weights from rng; it runs SixteenBitDensePlan."""
    mixed_precision.set_global_policy(f"mixed_{half}")
    tiles = {"VW": 4, "TILE": 128, "WPT": 8, "TK": 32, "WGMMA": 1, "HALF": HALF_TYPES[half]}
    monkeypatch.setattr(tuner, "matrix_tiles", lambda *args, **kwargs: dict(tiles))
    monkeypatch.setattr(sixteen_bit, "LEAST_SIDE", 8)  # (awkward sizes, small enough to check quickly)
    layer = make()
    store = ParameterStore(rt, F32)
    layer.build((n_in,), store, rng)
    store.allocate()
    layer.allocate(capacity)
    weights = [rng.normal(0, 0.5, w.shape) for w in layer.get_weights()]
    for parameter, array in zip(layer.parameters, weights):  # (a joined layer's parts each, in Keras's layout)
        device = np.zeros(parameter.size, F32)
        parameter.from_keras(array, device)
        parameter.value.write(device.reshape(parameter.shape))
    assert isinstance(layer.plan, SixteenBitDensePlan)
    return layer


def check_stored_step(layer, rng, half, rows, kernel, bias, name, residual=False):
    """A step of `layer` (kernel and bias in Keras's layout, `name` its activation) against float64:
    y = f(x W + b) (+ r) from x and W rounded to `half`, to float's sums; dL/dz rounded to `half`
    bit for bit as dL/dy f'(z) in float, from the f'(z) the forward kept (checked too) or y; dL/dW
    and dL/dx from it and the rounded x and W, and dL/db from dL/dz in float, to float's sums."""
    n_in, units = kernel.shape
    capacity = layer.batch_capacity
    x = rng.standard_normal((capacity, n_in)).astype(F32)
    dy = rng.standard_normal((capacity, units)).astype(F32)
    r = rng.standard_normal((capacity, units)).astype(F32)
    x[rows:], dy[rows:] = np.nan, np.nan  # (read, they would spoil every sum)
    xr, wr = rounded(x[:rows], half), rounded(kernel.astype(F32), half)
    forward, derivative = ACTIVATIONS[name]
    act = layer.activation
    z = xr @ wr + bias.astype(F32)

    def near(got, want, scale=None):
        assert np.abs(got - want).max() <= 1e-5 * (np.abs(want).max() if scale is None else scale)

    y = layer.forward(Tensor.from_numpy(x), rows, Tensor.from_numpy(r) if residual else None).numpy()[:rows]
    near(y, forward(z, act.a, act.b) + (r[:rows] if residual else 0), np.abs(z).max() + 1)
    if layer.plan.kept is not layer.outputs:  # f'(z), kept where it needs z: dL/dz = dL/dy f'(z) in float
        slopes = layer.plan.kept.numpy()[:rows]
        near(slopes, derivative(z, act.a, act.b), 1.0)
        dz = dy[:rows] * slopes
    else:  # the identity's, ReLU's (exact in float) or tanh's f' = 1 - y^2 (to float's rounding)
        dz = {"linear": lambda: dy[:rows], "relu": lambda: dy[:rows] * (y > 0),
              "tanh": lambda: dy[:rows] * (1 - y.astype(np.float64) ** 2)}[name]()
    dx = layer.backward(Tensor.from_numpy(dy), rows, True).numpy()[:rows]
    delta = from_atoms(layer.plan.delta16.numpy(), rows, units)
    dzr = (delta.view(np.float16) if half == "float16" else  # the device's dL/dz, widened
           (delta.astype(np.uint32) << 16).view(F32)).astype(np.float64)
    if dz.dtype == F32:
        np.testing.assert_array_equal(delta, sixteen_bits(dz, half))
    else:  # within the format's rounding (2^-8 of bfloat16's, 2^-11 of float16's, half float16's
        # least subnormal below its normal range) and float's
        unit, least = (2.0 ** -8, 0.0) if half == "bfloat16" else (2.0 ** -11, 2.0 ** -25)
        assert (np.abs(dzr - dz) <= (unit + 1e-6) * np.abs(dz) + least).all()
    grads = layer.gradients()
    grad_w = np.concatenate(grads[0::2], axis=1) if isinstance(layer, JoinedDense) else grads[0]
    grad_b = np.concatenate(grads[1::2]) if isinstance(layer, JoinedDense) else grads[1]
    near(grad_w, xr.T @ dzr)
    near(grad_b, dz.astype(np.float64).sum(0))
    near(dx, dzr @ wr.T)


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("name,rows,n_in,units", [("linear", 300, 136, 72), ("gelu", 1037, 264, 520),
                                                  ("relu", 129, 8, 16), ("tanh", 2000, 40, 264)])
def test_a_dense_layer_s_step_on_operands_stored_in_16_bits(rt, rng, monkeypatch, half, name, rows, n_in, units):
    """Dense under a 16-bit policy, where the tuner takes the WGMMA form's 16-bit products, runs
    them on operands stored in 16 bits: at awkward sizes (edges in every dimension, split-K at
    2000 rows), activations that keep f'(z) (GELU), whose derivative follows from y (ReLU, tanh),
    and a linear layer adding a residual; rows past `rows` are not read."""
    on_hopper(rt)
    layer = stored_layer(rt, rng, monkeypatch, half, lambda: Dense(units, name, name="d"), n_in, rows + 3)
    kernel, bias = layer.get_weights()
    check_stored_step(layer, rng, half, rows, kernel, bias, name, residual=name == "linear")


@pytest.mark.parametrize("half", HALVES)
def test_a_joined_layer_s_panels_on_operands_stored_in_16_bits(rt, rng, monkeypatch, half):
    """A joined layer (attention's three projections, its kernel in three column panels) rounds
    its panels into one row-major 16-bit W and writes its weight gradient back into them."""
    on_hopper(rt)
    layer = stored_layer(rt, rng, monkeypatch, half,
                         lambda: JoinedDense(3, 128, True, "glorot_uniform", "zeros", "qkv"), 200, 700)
    weights = layer.get_weights()
    check_stored_step(layer, rng, half, 650, np.concatenate(weights[0::2], axis=1), np.concatenate(weights[1::2]),
                      "linear")


def test_which_layers_take_operands_stored_in_16_bits(rt):
    """The WGMMA form's 16-bit tiles 32 deep on Hopper, n_in and units at least LEAST_SIDE and,
    with W's panels, multiples of 8; not the MMA form's, the WGMMA form's float32 or 16-deep tiles."""
    wgmma = {"VW": 4, "TILE": 128, "WPT": 8, "TK": 32, "WGMMA": 1, "HALF": 1}
    hopper = bool(rt.info.warpgroup_products) and rt.info.tensor_cores
    assert sixteen_bit.LEAST_SIDE == 512
    assert SixteenBitDensePlan.takes(rt, wgmma, 512, 2048, 2048) is hopper
    assert SixteenBitDensePlan.takes(rt, {**wgmma, "HALF": 2}, 2048, 512, 512) is hopper
    for tiles in ({**wgmma, "HALF": 0}, {**wgmma, "TK": 16}, {"VW": 4, "TILE": 128, "WPT": 8, "TK": 32, "MMA": 1,
                                                                "HALF": 1}):
        assert not SixteenBitDensePlan.takes(rt, tiles, 512, 512, 512)
    for n_in, units, panel in ((256, 1024, 1024), (1024, 504, 504), (1020, 512, 512), (512, 1036, 1036),
                               (512, 1536, 516)):
        assert not SixteenBitDensePlan.takes(rt, wgmma, n_in, units, panel)
