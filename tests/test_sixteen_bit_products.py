"""Products of operands stored in 16 bits (products/sixteen_bit.cl) against float64 products of
the same 16-bit values, the rounding kernel against numpy's, and the plan's checks of its
arguments. The products need Hopper's wgmma (an NVIDIA GPU of compute capability 9.0); elsewhere
the plan must refuse clearly."""
import numpy as np
import pytest

from clnet.cl.device import DeviceError
from clnet.cl.tensor import Tensor
from clnet.products import SixteenBitPlan
from clnet.products.sixteen_bit import STORAGE
from reference import rounded, sixteen_bits

F32 = np.float32
HALVES = ["bfloat16", "float16"]


def on_hopper(rt):
    if not rt.info.warpgroup_products:
        pytest.skip(f"16-bit operands in memory need Hopper's wgmma; the device is {rt.info.name!r}")


def stored(x: np.ndarray, half: str) -> Tensor:
    """x rounded to `half` on the host, as the device holds it."""
    return Tensor.from_numpy(sixteen_bits(x, half))


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
    ways, overflow to infinity, subnormals, signed zeros, infinities and NaN; an odd count writes
    no element past its end."""
    on_hopper(rt)
    plan = SixteenBitPlan(rt, half, 8, 8)
    one = np.float32(1.0).view(np.uint32)
    ties = (np.array([one + 0x8000, one + 0x18000, one + 0x1000, one + 0x3000], np.uint32).view(F32)
            if half == "bfloat16" else np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11], F32))
    special = np.array([0.0, -0.0, np.inf, -np.inf, 3e38, 7e4, 65519.0, 65520.0, 1e-8, -3e-41, 5.96e-8], F32)
    x = np.concatenate([rng.standard_normal(997).astype(F32) * 100, ties, special, [np.nan]]).astype(F32)
    got = Tensor.from_numpy(np.full(x.size + 1, 0x1234, STORAGE))
    plan.round(Tensor.from_numpy(x), Tensor((x.size,), STORAGE, buffer=got.buffer))
    bits = got.numpy()
    want = sixteen_bits(x, half)
    nan = np.isnan(x)
    np.testing.assert_array_equal(bits[:-1][~nan], want[~nan])
    assert np.isnan(rounded(x, half)[nan]).all() and ((bits[:-1][nan] & 0x7FFF) > (0x7F80 if half == "bfloat16"
                                                                                      else 0x7C00)).all()
    assert bits[-1] == 0x1234


def test_plan_arguments(rt):
    """Wrong formats and sizes name the argument, on any device; a device without wgmma is named."""
    with pytest.raises(ValueError, match="half must be one of"):
        SixteenBitPlan(rt, "float32", 8, 8)
    with pytest.raises(ValueError, match="n_in must be a positive multiple of 8.*got 100"):
        SixteenBitPlan(rt, "bfloat16", 100, 64)
    with pytest.raises(ValueError, match="units must be a positive multiple of 8.*got 0"):
        SixteenBitPlan(rt, "float16", 64, 0)
    if not rt.info.warpgroup_products:
        with pytest.raises(DeviceError, match=f"compute capability 9.0.*{rt.info.name[:20]}"):
            SixteenBitPlan(rt, "bfloat16", 64, 64)


def test_plan_checks_tensors(rt):
    """A tensor of the wrong dtype or shape, or too few rows, is named before any launch."""
    on_hopper(rt)
    plan = SixteenBitPlan(rt, "bfloat16", 16, 8)
    x, w = Tensor((8, 16), np.uint16), Tensor((16, 8), np.uint16)
    z = Tensor((4, 8), F32)
    with pytest.raises(ValueError, match="x must be a uint16 tensor.*got float32"):
        plan.forward(Tensor((8, 16), F32), w, z, 4)
    with pytest.raises(ValueError, match=r"weights must be a uint16 tensor of shape \(16, 8\)"):
        plan.forward(x, Tensor((8, 16), np.uint16), z, 4)
    with pytest.raises(ValueError, match=r"outputs must be .* capacity >= rows \(5\)"):
        plan.forward(x, w, z, 5)
    with pytest.raises(TypeError, match="source must be a float32 tensor"):
        plan.round(x, w)
