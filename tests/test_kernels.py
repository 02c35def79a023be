"""Every kernel against its numpy reference in float32, at sizes that are not multiples of the
vector width or the work-group size."""
import numpy as np
import pytest

from clnet import activations, losses
from clnet.cl.parameters import ParameterStore
from clnet.cl.tensor import Tensor
from clnet.data import Batches
from clnet.layers import Activation, Conv2D, Dense, MultiHeadAttention
from clnet.products import on_tensor_cores, tile_candidates, usable_candidates
from clnet.products.forms import UNBLOCKED
from reference import ACTIVATIONS, accuracy, loss_and_grad, pairwise_cover, rounded, softmax, softmax_backward

SIZES = [1, 3, 5, 127, 129]
F32 = np.float32
PARAMS = {"linear": {"a": 1.5, "b": -0.25}, "sigmoid": {"a": 2.0, "b": 0.5}, "tanh": {}, "relu": {},
          "lrelu": {"a": 0.1}, "swish": {"b": 1.5}, "gelu": {}, "softplus": {}}


def close(got, want, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_kernels(rt, rng, name, size):
    act = activations.get(name, **PARAMS[name])
    a, b = act.a, act.b
    program = act.program(rt, F32)
    x = rng.normal(0, 2, size).astype(F32)
    dy = rng.normal(size=size).astype(F32)
    # Guard lanes past `size`: the kernels must not write them.
    out, dx = Tensor.from_numpy(np.full(size + 4, 7, F32)), Tensor.from_numpy(np.full(size + 4, 7, F32))
    xt, dyt = Tensor.from_numpy(x), Tensor.from_numpy(dy)
    rt.kernel(program, act.kernel_prefix + "Activation", F32)((-(-size // 4),), None, xt, out, size, a, b)
    y = out.numpy()
    forward, derivative = ACTIVATIONS[name]
    x64 = x.astype(np.float64)
    close(y[:size], forward(x64, a, b))
    assert np.all(y[size:] == 7)
    rt.kernel(program, act.kernel_prefix + "Derivative", F32)(
        (-(-size // 4),), None, out, xt, dyt, dx, size, a, b)
    close(dx.numpy()[:size], derivative(x64, a, b) * dy)
    assert np.all(dx.numpy()[size:] == 7)


@pytest.mark.parametrize("cols", SIZES + [300])
def test_softmax_kernels(rt, rng, cols):
    layer = Activation("softmax")
    layer.build((cols,), ParameterStore(rt, F32), rng)
    rows = 7
    layer.allocate(rows)
    z = rng.normal(0, 3, (rows, cols)).astype(F32)
    z[0] += 1000.0  # overflows exp without the max subtraction
    dy = rng.normal(size=(rows, cols)).astype(F32)
    y = layer.forward(Tensor.from_numpy(z), rows).numpy()
    want = softmax(z.astype(np.float64))
    close(y, want)
    close(y.sum(1), np.ones(rows))
    dx = layer.backward(Tensor.from_numpy(dy), rows, True).numpy()
    close(dx, softmax_backward(want, dy), atol=1e-5)


def dense_layer(rt, rng, n_in, units, activation, dtype, rows, use_bias=True, tiles=None, writes_transposed=False):
    store = ParameterStore(rt, dtype)
    layer = Dense(units, activation, use_bias=use_bias, name="d", tiles=tiles)
    layer.build((n_in,), store, rng)
    layer.writes_transposed = writes_transposed  # as a model's build sets it for a layer a Dense reads
    store.allocate()
    layer.allocate(rows)
    bias = rng.normal(size=units) if use_bias else None
    layer.set_weights([rng.normal(0, 0.5, (n_in, units))] + ([bias] if use_bias else []))
    return layer


@pytest.mark.parametrize("rows,n_in,units", [(1, 1, 1), (3, 5, 3), (5, 3, 127), (129, 127, 5), (7, 129, 129)])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS) + ["softmax"])
def test_dense_kernels(rt, rng, rows, n_in, units, name):
    act = activations.get(name, **PARAMS.get(name, {}))
    layer = dense_layer(rt, rng, n_in, units, act, F32, rows)
    w, bias = [v.astype(np.float64) for v in layer.get_weights()]
    x = rng.normal(size=(rows, n_in)).astype(F32)
    dy = rng.normal(size=(rows, units)).astype(F32)
    y = layer.forward(Tensor.from_numpy(x), rows).numpy()
    z = x.astype(np.float64) @ w + bias
    if name == "softmax":
        y_ref = softmax(z)
        dz = softmax_backward(y_ref, dy)
    else:
        forward, derivative = ACTIVATIONS[name]
        y_ref, dz = forward(z, act.a, act.b), derivative(z, act.a, act.b) * dy
    atol = 1e-5 * max(1, np.sqrt(n_in))
    close(y, y_ref, rtol=1e-4, atol=atol)
    dx = layer.backward(Tensor.from_numpy(dy), rows, True).numpy()
    grad_w, grad_b = layer.gradients()
    close(grad_w, x.T.astype(np.float64) @ dz, rtol=1e-4, atol=1e-5 * max(1, np.sqrt(rows)))
    close(grad_b, dz.sum(0), rtol=1e-4, atol=1e-5 * max(1, np.sqrt(rows)))
    close(dx, dz @ w.T, rtol=1e-4, atol=1e-5 * max(1, np.sqrt(units)))


# Two of the GPU's local-memory tile shapes, small enough to run on a CPU.
GPU_TILES = [{"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}, {"VW": 4, "TILE": 32, "WPT": 8, "TK": 8}]


@pytest.mark.parametrize("rows,n_in,units", [(1, 3, 5), (13, 129, 17), (129, 5, 127), (64, 32, 48)])
@pytest.mark.parametrize("dtype", [F32, np.float64])
@pytest.mark.parametrize("which", ["a pairwise cover", pytest.param("every one", marks=pytest.mark.slow)])
def test_every_tuning_candidate(rt, rng, dtype, rows, n_in, units, which):
    """Whatever the autotuner picks on whatever device, the products are right at awkward sizes:
    in the quick suite, candidates among which every setting (vector width, blocks, K-blocking,
    input-gradient form, work-group) meets every other; all of them in the slow one."""
    x = rng.normal(size=(rows, n_in)).astype(dtype)
    dy = rng.normal(size=(rows, units)).astype(dtype)
    # The GPU's local-memory tiles run here too (small ones, for speed), so CI checks them; at
    # 64x32x48 every slice is whole and aligned, so the TYPE4 staging paths run. The second,
    # larger tiles only in the slow set: each tiles' program is a long build on PoCL.
    tiled = GPU_TILES[:1] if which != "every one" else GPU_TILES
    candidates = tile_candidates(rt, dtype)
    if which != "every one":
        candidates = [candidates[i] for i in pairwise_cover(candidates)]
    for tiles in usable_candidates(rt, dtype, candidates) + tiled:
        lrelu_layer_matches_numpy(rt, rng, x, dy, tiles)


def column_vector_tiles(rt, dtype) -> list[dict]:
    """The CPU form with several vectors of columns per work-item (FF_CN, DW_CN, HG_CN, which the
    tuner measures beside its first choice), in both input-gradient forms, unblocked and
    K-blocked: two vectors by 4 rows and three by 3 (three, so that no size here is a multiple of
    a work-item's panels, whose last ones then read the last real panel again)."""
    first = next(t for t in tile_candidates(rt, dtype) if "TILE" not in t)
    return [{**first, "HG_T": hg_t, **{f"{k}_{key}": value for k in ("FF", "DW", "HG")
                                        for key, value in (("CN", vectors), ("RM", rows), *depth.items())}}
            for hg_t in (0, 1) for vectors, rows, depth in ((2, 4, UNBLOCKED), (3, 3, {"NB": 2, "KB": 2 * first["VW"]}))]


@pytest.mark.parametrize("rows,n_in,units", [(37, 19, 5), (70, 33, 113), (129, 100, 40)])
@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_column_vectors_per_work_item(rt, rng, dtype, rows, n_in, units):
    """The CPU form's products with several vectors of columns a work-item match numpy at sizes no
    multiple of its columns or rows (y, z, y^T and the three gradients)."""
    x = rng.normal(size=(rows, n_in)).astype(dtype)
    dy = rng.normal(size=(rows, units)).astype(dtype)
    for tiles in column_vector_tiles(rt, dtype):
        lrelu_layer_matches_numpy(rt, rng, x, dy, tiles)


@pytest.mark.parametrize("rows,n_in,units", [(37, 19, 5), (64, 32, 48), (70, 33, 113)])
# The larger tiles (the slow set's) in float32 alone: their three programs are a long build on
# PoCL in each float type, and their float64 products run in test_every_tuning_candidate.
@pytest.mark.parametrize("dtype,tiles", [(F32, GPU_TILES[0]), (np.float64, GPU_TILES[0]),
                                         pytest.param(F32, GPU_TILES[1], marks=pytest.mark.slow)],
                         ids=["float32-16", "float64-16", "float32-32"])
def test_tiled_input_gradient_reads_dy(rt, rng, dtype, rows, n_in, units, tiles):
    """The GPU form of a linear Dense: delta is dL/dy itself, so the input gradient reads dL/dy,
    (rows, units), rows of a width that is no multiple of 4 as well (the tiny GPT's head, 113
    classes), and the weight gradient writes no delta: dx and the weight and bias gradients
    against numpy, also where the loss hands over dL/dz of a softmax (activation_done); and where
    a linear activation's slope is not 1, delta is not dL/dy."""
    x = rng.normal(size=(rows, n_in)).astype(dtype)
    dy = rng.normal(size=(rows, units)).astype(dtype)
    for act in (activations.get("linear"), activations.get("linear", a=1.5, b=-0.25), activations.get("softmax")):
        layer = dense_layer(rt, rng, n_in, units, act, dtype, rows, tiles=tiles)
        w = layer.get_weights()[0].astype(np.float64)
        layer.forward(Tensor.from_numpy(x), rows)
        folded = act.name == "softmax"
        dx = layer.backward(Tensor.from_numpy(dy), rows, True, activation_done=folded).numpy()
        grad_w, grad_b = layer.gradients()
        dz = dy if folded else act.a * dy
        close(dx, dz @ w.T, rtol=1e-4, atol=1e-5)
        close(grad_w, x.T @ dz, rtol=1e-4, atol=1e-5)
        close(grad_b, dz.sum(0), rtol=1e-4, atol=1e-5)


def lrelu_layer_matches_numpy(rt, rng, x, dy, tiles, z_error=None):
    """A Dense(units, lrelu) with these tiles, in x's float type, writing y^T: y, what the forward
    keeps (z; the GPU form's f'(z)), y^T and the weight, bias and input gradients against numpy;
    with `z_error`, y's largest error is at most that fraction of the largest |z|."""
    (rows, n_in), units = x.shape, dy.shape[1]
    layer = dense_layer(rt, rng, n_in, units, "lrelu", x.dtype, rows, tiles=tiles, writes_transposed=True)
    w, bias = [v.astype(np.float64) for v in layer.get_weights()]
    z = x @ w + bias
    y = np.where(z > 0, z, 0.3 * z)
    got = layer.forward(Tensor.from_numpy(x), rows).numpy()
    close(got, y, rtol=1e-4, atol=1e-4)
    if "TILE" in tiles:  # f'(z), where z is not within rounding of 0
        clear = np.abs(z) > 1e-3 * np.abs(z).max()
        close(layer.kept.numpy()[clear], np.where(z > 0, 1, 0.3)[clear], rtol=1e-6, atol=0)
    else:
        close(layer.kept.numpy(), z, rtol=1e-4, atol=1e-4)
    if z_error is not None:
        assert np.abs(got - y).max() <= z_error * np.abs(z).max()
    close(layer.outputs_t.numpy()[:, :rows], y.T, rtol=1e-4, atol=1e-4)  # for the next layer's dW
    dz = np.where(z > 0, 1, 0.3) * dy
    dx = layer.backward(Tensor.from_numpy(dy), rows, True).numpy()
    grad_w, grad_b = layer.gradients()
    close(grad_w, x.T @ dz, rtol=1e-4, atol=1e-4)
    close(grad_b, dz.sum(0), rtol=1e-4, atol=1e-4)
    close(dx, dz @ w.T, rtol=1e-4, atol=1e-4)


# gpu_tiles.cl's tensor-core forms: 3xTF32 on NVIDIA's tensor cores, with mma.sync (MMA, compute
# capability 8.0 on) or Hopper's wgmma (WGMMA, 9.0).
MMA_TILES = {"VW": 4, "TILE": 128, "WPT": 8, "TK": 16, "MMA": 1}
WGMMA_TILES = {"VW": 4, "TILE": 128, "WPT": 8, "TK": 16, "WGMMA": 1}
TENSOR_CORE_FORMS = {"mma": MMA_TILES, "wgmma": WGMMA_TILES}


def skip_unless_form_runs(rt, form: str) -> None:
    if not rt.info.tensor_cores:
        pytest.skip(f"the tensor-core forms run on NVIDIA GPUs of compute capability 8.0 on, not {rt.info.name!r}")
    if form == "wgmma" and not rt.info.warpgroup_products:
        pytest.skip(f"the WGMMA form runs on NVIDIA GPUs of compute capability 9.0, not {rt.info.name!r}")


@pytest.mark.parametrize("form", TENSOR_CORE_FORMS)
@pytest.mark.parametrize("rows,n_in,units,tk", [(300, 200, 260, 16), (257, 1000, 131, 32), (1037, 3, 5, 16),
                                                (64, 32, 48, 16), (129, 17, 300, 16), (13, 1037, 5, 16)])
def test_tensor_core_form(rt, rng, rows, n_in, units, tk, form):
    """Each tensor-core form's three products (with y^T, the bias and the derivative) against
    float64 at sizes of several blocks with partial edges, a depth with a partial slice (and 17
    inputs by 300 units, edges that WGMMA's transposed forward and weight gradient meet the
    other way round), split-K (1037 rows of a 3 x 5 layer; the forward's, 13 rows through 1037
    inputs) and whole aligned slices; and
    float32's accuracy: the forward's error as a fraction of the largest |z| stays near numpy's
    float32 product's (about 5e-7), where a single TF32 product gives ~3e-4 and 3xTF32 summed on
    the tensor cores alone ~8e-6 at this depth of 1000."""
    skip_unless_form_runs(rt, form)
    x = rng.normal(size=(rows, n_in)).astype(F32)
    dy = rng.normal(size=(rows, units)).astype(F32)
    tk = 16 if form == "wgmma" else tk  # WGMMA slices are 16 deep
    lrelu_layer_matches_numpy(rt, rng, x, dy, {**TENSOR_CORE_FORMS[form], "TK": tk}, z_error=2e-6)


@pytest.mark.parametrize("form", TENSOR_CORE_FORMS)
def test_tensor_core_form_keeps_22_bits(rt, form):
    """z = x times a weight of 1: x = big + small, both TF32 (11 significant bits each, small
    rounded), so z is x to within 2^-22 |x|; float keeps 24 bits, and cutting small (as mma would)
    gives 2^-21."""
    skip_unless_form_runs(rt, form)
    x = np.concatenate([np.linspace(-12, 12, 24001), np.geomspace(1e-8, 12, 2000)]).astype(F32)
    store = ParameterStore(rt, F32)
    layer = Dense(1, name="d", tiles=TENSOR_CORE_FORMS[form])
    layer.build((1,), store, np.random.default_rng(0))
    store.allocate()
    layer.allocate(len(x))
    layer.set_weights([np.ones((1, 1)), np.zeros(1)])
    z = layer.forward(Tensor.from_numpy(x[:, None]), len(x)).numpy()[:, 0].astype(np.float64)
    assert np.all(np.abs(z - x) <= 2.0**-22 * np.abs(x))
    assert np.abs(z - x).max() > 0  # not float's product: the test would not see the form otherwise


@pytest.mark.parametrize("form", TENSOR_CORE_FORMS)
@pytest.mark.parametrize("half", ["bfloat16", "float16"])
@pytest.mark.parametrize("rows,n_in,units,tk", [(300, 200, 260, 16), (257, 1000, 131, 32), (1037, 3, 5, 16),
                                                (129, 17, 300, 32), (13, 1037, 5, 32)])
def test_sixteen_bit_products(rt, rng, rows, n_in, units, tk, half, form):
    """The tensor-core forms' 16-bit products (HALF: mma_half.cl, wgmma_half.cl): each of the
    three is the float64 product of its operands rounded to bfloat16 or float16 (to nearest even),
    to within float's sums (1e-5 of the largest): the form rounds nothing else. A linear layer, so
    that the weight and input gradients' dL/dz is dL/dy; at sizes of partial blocks, a depth of a
    partial slice, split-K (1037 rows of 3 x 5; the forward's, 13 rows through 1037 inputs) and
    both slice depths (and 17 inputs by 300 units, whose edges WGMMA's transposed forward and
    weight gradient meet the other way round)."""
    skip_unless_form_runs(rt, form)
    x = rng.normal(size=(rows, n_in)).astype(F32)
    dy = rng.normal(size=(rows, units)).astype(F32)
    layer = dense_layer(rt, rng, n_in, units, "linear", F32, rows,
                        tiles={**TENSOR_CORE_FORMS[form], "TK": tk, "HALF": {"bfloat16": 1, "float16": 2}[half]})
    w, bias = layer.get_weights()
    xr, wr, dyr = (rounded(a, half) for a in (x, w, dy))
    assert (layer.plan.forward_splits(rows)[0] > 1) == (n_in == 1037)  # the forward split runs where asked for

    def near(got, want):
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()

    near(layer.forward(Tensor.from_numpy(x), rows).numpy(), xr @ wr + bias)
    near(layer.backward(Tensor.from_numpy(dy), rows, True).numpy(), dyr @ wr.T)
    grad_w, grad_b = layer.gradients()
    near(grad_w, xr.T @ dyr)
    near(grad_b, dy.astype(np.float64).sum(0))
    # (and not float's products: the rounding is there to see)
    assert np.abs(layer.forward(Tensor.from_numpy(x), rows).numpy() - (x.astype(np.float64) @ w + bias)).max() > \
        1e-4 * np.abs(xr @ wr).max()


def test_sixteen_bit_products_are_a_setting_of_the_tensor_core_forms(rt, rng):
    with pytest.raises(ValueError, match=r"Dense 'd'.*HALF \(16-bit products: 1 bfloat16, 2 float16\) is a setting "
                                         r"of the tensor-core forms \(MMA, WGMMA\)"):
        dense_layer(rt, rng, 3, 4, "relu", F32, 2, tiles={"VW": 4, "TILE": 64, "WPT": 4, "TK": 16, "HALF": 1})


def test_tensor_core_form_refused_where_it_cannot_run(rt, rng):
    """Fixed tiles asking for the MMA form where it cannot run (float64 anywhere, float32 off an
    NVIDIA GPU with TF32 tensor cores) are a ValueError naming the layer and what it needs; a
    convolution refuses it everywhere (convolution_tiles.cl's epilogues take the CUDA-core tiles' layout)."""
    with pytest.raises(ValueError, match=r"Dense 'd'.*tensor-core form \(MMA\).*compute capability 8\.0.*float64"):
        dense_layer(rt, rng, 3, 4, "relu", np.float64, 2, tiles=MMA_TILES)
    if not rt.info.tensor_cores:
        with pytest.raises(ValueError, match=r"Dense 'd'.*tensor-core form \(MMA\).*float32"):
            dense_layer(rt, rng, 3, 4, "relu", F32, 2, tiles=MMA_TILES)
    with pytest.raises(ValueError, match=r"Conv2D 'c'.*tensor-core form \(MMA\)"):
        Conv2D(2, 3, name="c", tiles=MMA_TILES)
    with pytest.raises(ValueError, match=r"Conv2D 'c'.*tensor-core form \(MMA\)"):
        Conv2D(2, 3, name="c", tiles=({"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}, MMA_TILES, MMA_TILES))


def test_warpgroup_form_refused_where_it_cannot_run(rt, rng):
    """Fixed tiles asking for the WGMMA form off a Hopper GPU (or in float64) are a ValueError
    naming the layer and compute capability 9.0; a convolution and MultiHeadAttention refuse it
    everywhere."""
    with pytest.raises(ValueError, match=r"Dense 'd'.*\(WGMMA\).*compute capability 9\.0.*float64"):
        dense_layer(rt, rng, 3, 4, "relu", np.float64, 2, tiles=WGMMA_TILES)
    if not rt.info.warpgroup_products:
        with pytest.raises(ValueError, match=r"Dense 'd'.*\(WGMMA\).*compute capability 9\.0"):
            dense_layer(rt, rng, 3, 4, "relu", F32, 2, tiles=WGMMA_TILES)
    with pytest.raises(ValueError, match=r"Conv2D 'c'.*tensor-core form \(WGMMA\)"):
        Conv2D(2, 3, name="c", tiles=WGMMA_TILES)
    with pytest.raises(ValueError, match=r"MultiHeadAttention 'a'.*\(WGMMA\) is Dense's alone"):
        MultiHeadAttention(2, 4, name="a", tiles=WGMMA_TILES)


@pytest.mark.parametrize("form", ["blocks", "tiles"])
def test_dense_writes_its_transpose_where_the_model_says(rt, rng, form):
    """A Dense writes y^T where the model's build says a layer reads it (writes_transposed): the
    CPU form's weight gradient above reads it, with the same launches every step; a Dense not told
    so writes none, and the layer above transposes y itself, one launch more every step. The GPU
    form's weight gradient reads y itself: it reads no y^T, and transposes nothing."""
    tiles = tile_candidates(rt, F32)[0] if form == "blocks" else {"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}
    rows, n_in, hidden, units = 13, 9, 17, 5
    launches = {}
    for told in (True, False):
        below = dense_layer(rt, rng, n_in, hidden, "relu", F32, rows, tiles=tiles, writes_transposed=told)
        above = dense_layer(rt, rng, hidden, units, "linear", F32, rows, tiles=tiles)
        assert (below.outputs.transposed is not None) == told and above.outputs.transposed is None
        launches[told] = []
        for step in range(3):
            x = rng.normal(size=(rows, n_in)).astype(F32)
            dy = rng.normal(size=(rows, units)).astype(F32)
            above.forward(below.forward(Tensor.from_numpy(x), rows), rows)
            before = rt.launches
            above.backward(Tensor.from_numpy(dy), rows, False)
            launches[told].append(rt.launches - before)
            h = np.maximum(x.astype(np.float64) @ below.get_weights()[0] + below.get_weights()[1], 0)
            if told:
                close(below.outputs_t.numpy()[:, :rows], h.T, rtol=1e-4, atol=1e-4)
            close(above.gradients()[0], h.T @ dy, rtol=1e-4, atol=1e-4)
    transposes = int(form == "blocks")
    assert above.reads_transposed == bool(transposes)
    assert launches[True] == [launches[True][0]] * 3 and launches[False] == [launches[True][0] + transposes] * 3


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_dense_keeps_what_its_derivative_needs(rt, rng, name):
    """Where the derivative follows from y, the forward stores nothing beside y and the derivative
    reads y in z's place; otherwise the CPU form keeps z and the GPU form f'(z), which its weight
    gradient multiplies by. Every activation, with the CPU form's first candidate and the GPU
    form's tiles, at awkward sizes."""
    act = activations.get(name, **PARAMS[name])
    forward, derivative = ACTIVATIONS[name]
    rows, n_in, units = 13, 129, 17
    x = rng.normal(size=(rows, n_in)).astype(F32)
    dy = rng.normal(size=(rows, units)).astype(F32)
    for tiles in [tile_candidates(rt, F32)[0], {"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}]:
        layer = dense_layer(rt, rng, n_in, units, act, F32, rows, tiles=tiles)
        w, bias = [v.astype(np.float64) for v in layer.get_weights()]
        z = x.astype(np.float64) @ w + bias
        close(layer.forward(Tensor.from_numpy(x), rows).numpy(), forward(z, act.a, act.b), rtol=1e-4, atol=1e-4)
        if act.derivative_from_output:
            assert layer.kept is layer.outputs
        else:
            kept = derivative(z, act.a, act.b) if "TILE" in tiles else z
            close(layer.kept.numpy(), kept, rtol=1e-4, atol=1e-4)
        dz = derivative(z, act.a, act.b) * dy
        dx = layer.backward(Tensor.from_numpy(dy), rows, True).numpy()
        grad_w, grad_b = layer.gradients()
        close(grad_w, x.T @ dz, rtol=1e-4, atol=1e-4)
        close(grad_b, dz.sum(0), rtol=1e-4, atol=1e-4)
        close(dx, dz @ w.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_dense_gelu_accuracy(rt, dtype):
    """Dense's CPU form applies GELU's vector form (in float a rational fit of erf, see gelu.cl):
    z = x exactly (one input, weight 1, bias 0) over a fine grid and wide tails, y = GELU(z) and
    dL/dx = GELU'(z) against math.erf in double. In float the error is about that of erf rounded
    to float, times |x| (as in PyTorch's and Keras's float GELU); in double, a few ulp."""
    x = np.concatenate([np.linspace(-12, 12, 24001), np.geomspace(1e-8, 12, 2000),
                        -np.geomspace(1e-8, 12, 2000), [0.0]]).astype(dtype)
    rows = len(x)
    store = ParameterStore(rt, dtype)
    # Not the tensor-core form, which keeps 22 of x's 24 bits (test_tensor_core_form_keeps_22_bits).
    tiles = next(t for t in tile_candidates(rt, dtype) if not on_tensor_cores(t))
    layer = Dense(1, "gelu", name="d", tiles=tiles)
    layer.build((1,), store, np.random.default_rng(0))
    store.allocate()
    layer.allocate(rows)
    layer.set_weights([np.ones((1, 1)), np.zeros(1)])
    y = layer.forward(Tensor.from_numpy(x[:, None]), rows).numpy()[:, 0]
    dx = layer.backward(Tensor.from_numpy(np.ones((rows, 1), dtype)), rows, True).numpy()[:, 0]
    forward, derivative = ACTIVATIONS["gelu"]
    x64 = x.astype(np.float64)
    if dtype == F32:
        tolerance = 3e-7 * np.maximum(np.abs(x64), 1)
    else:
        tolerance = 1e-15 * np.maximum(np.abs(x64), 1)
    assert np.all(np.abs(y - forward(x64, 0, 0)) <= tolerance)
    assert np.all(np.abs(dx - derivative(x64, 0, 0)) <= tolerance)


@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_split_weight_gradient(rt, rng, dtype):
    """The GPU form splits the weight and bias gradients' sums over many rows among work-groups
    (split-K) when the weights are few tiles; the slices add up to the whole sum, also for a
    batch shorter than the buffers."""
    tiles = {"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}
    layer = dense_layer(rt, rng, 3, 5, "relu", dtype, 1037, tiles=tiles)
    w, bias = [v.astype(np.float64) for v in layer.get_weights()]
    for rows in (1037, 700):
        assert layer.plan.splits(rows)[0] > 1  # the path under test runs
        x = rng.normal(size=(rows, 3)).astype(dtype)
        dy = rng.normal(size=(rows, 5)).astype(dtype)
        z = x @ w + bias
        layer.forward(Tensor.from_numpy(x), rows)
        layer.backward(Tensor.from_numpy(dy), rows, False)
        dz = (z > 0) * dy
        grad_w, grad_b = layer.gradients()
        tolerance = 1e-4 if dtype == F32 else 1e-12
        close(grad_w, x.T @ dz, rtol=tolerance, atol=tolerance)
        close(grad_b, dz.sum(0), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", [F32, np.float64])
@pytest.mark.parametrize("activation", ["relu", "gelu", "softmax", "residual"])
def test_split_forward(rt, rng, dtype, activation):
    """The GPU form splits the forward's sums over n_in among work-groups where its (rows, units)
    result is few tiles (a small batch through a wide layer), and FinishFeedForward adds the slices
    and the bias: y, y^T, and the z or f'(z) the gradients read, as numpy's, with a linear layer's
    residual added, also for a batch shorter than the buffers."""
    tiles = {"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}
    name = "linear" if activation == "residual" else activation
    layer = dense_layer(rt, rng, 1037, 5, name, dtype, 13, tiles=tiles, writes_transposed=True)
    w, bias = [v.astype(np.float64) for v in layer.get_weights()]
    shallow = dense_layer(rt, rng, 784, 5, name, dtype, 13, tiles=tiles)
    assert shallow.plan.forward_splits(13) == (1, 784)  # a shallower forward stays one launch
    for rows in (13, 6):
        assert layer.plan.forward_splits(rows)[0] > 1  # the path under test runs
        x = rng.normal(size=(rows, 1037)).astype(dtype)
        dy = rng.normal(size=(rows, 5)).astype(dtype)
        r = rng.normal(size=(rows, 5)).astype(dtype)
        z = x.astype(np.float64) @ w + bias
        add = Tensor.from_numpy(r) if activation == "residual" else None
        y = layer.forward(Tensor.from_numpy(x), rows, add).numpy()[:rows]
        if name == "softmax":
            want, dz = softmax(z), softmax_backward(softmax(z), dy)
        else:
            forward, derivative = ACTIVATIONS[name]
            a, b = layer.activation.a, layer.activation.b
            want, dz = forward(z, a, b) + (r if add is not None else 0), derivative(z, a, b) * dy
        tolerance = 1e-4 if dtype == F32 else 1e-12
        close(y, want, rtol=tolerance, atol=tolerance)
        if name != "softmax":  # (whose y the softmax launch writes, without y^T)
            close(layer.outputs.transposed.numpy()[:, :rows], y.T, rtol=0, atol=0)
        layer.backward(Tensor.from_numpy(dy), rows, False)
        grad_w, grad_b = layer.gradients()
        close(grad_w, x.T.astype(np.float64) @ dz, rtol=tolerance, atol=tolerance * 10)
        close(grad_b, dz.sum(0), rtol=tolerance, atol=tolerance)


def test_dense_without_bias(rt, rng):
    layer = dense_layer(rt, rng, 6, 5, "tanh", F32, 4, use_bias=False)
    (w,) = layer.get_weights()
    x = rng.normal(size=(4, 6)).astype(F32)
    y = layer.forward(Tensor.from_numpy(x), 4).numpy()
    close(y, np.tanh(x @ w.astype(np.float64)))
    assert len(layer.gradients()) == 1


def test_dense_uses_only_the_rows_given(rt, rng):
    """A partial last batch: rows past `rows` in the batch buffer are neither read nor written."""
    layer = dense_layer(rt, rng, 9, 11, "relu", F32, 8)
    x = rng.normal(size=(8, 9)).astype(F32)
    full = layer.forward(Tensor.from_numpy(x), 8).numpy().copy()
    x[3:] = np.nan
    part = layer.forward(Tensor.from_numpy(x), 3).numpy()
    close(part[:3], full[:3], rtol=0, atol=0)
    dy = rng.normal(size=(8, 11)).astype(F32)
    layer.backward(Tensor.from_numpy(dy), 3, True)
    assert np.all(np.isfinite(layer.gradients()[0]))


LOSSES = ["mse", "mae", "categorical_crossentropy", "binary_crossentropy"]


def loss_blocks(rt, positions, group=None) -> tuple[int, int]:
    """The loss kernel's work-group and work-groups per sample, as the model chooses them."""
    group = group or rt.row_group(positions)
    return group, -(-positions // group)


def launch_loss(rt, loss, target, p, grad, sample_loss, sample_hit, first, rows, positions, cols, fold, group=None,
                weights=None, mask=None, sample_held=None):
    """CalcOutputGradient as the model launches it: work-groups per sample over its positions;
    `weights`, one per row, scale each sample's gradient and loss (fit's sample_weight); `mask`
    (rows, positions) leaves positions out, as an output's mask does, counting each block's held
    positions into `sample_held`."""
    group, blocks = loss_blocks(rt, positions, group)
    row_weights = Tensor.from_numpy(np.ones(rows) if weights is None else weights, F32)
    rt.kernel(loss.program(rt, F32), "CalcOutputGradient", F32)(
        (rows * blocks * group,), (group,), Tensor.from_numpy(target, F32), Tensor.from_numpy(p, F32), grad,
        sample_loss, sample_hit, first, positions, blocks, cols, loss.mode, fold, 1.0 / (rows * positions),
        row_weights, int(weights is not None), row_weights if mask is None else Tensor.from_numpy(mask, F32),
        int(mask is not None), sample_hit if sample_held is None else sample_held)


def loss_case(rng, name, tokens, cols):
    """Float32 predictions and targets of `tokens` positions for the loss `name`: one-hot targets
    of softmax outputs for categorical cross-entropy, else 0/1 targets of outputs inside (0, 1)."""
    if name == "categorical_crossentropy":
        p = softmax(rng.normal(size=(tokens, cols)))
        t = np.eye(cols)[rng.integers(0, cols, tokens)]
    else:
        p = rng.uniform(0.05, 0.95, (tokens, cols))
        t = rng.integers(0, 2, (tokens, cols)).astype(float)
    return p.astype(F32), t.astype(F32)


# 7 positions in work-groups of 4: two a sample; 130 in the model's groups (of 64 or fewer).
LOSS_SHAPES = ((1, None), (7, None), (7, 4), (130, None))  # (positions, work-group)


@pytest.mark.parametrize("name,cols,positions,group", [(name, cols, positions, group) for name in LOSSES
                                                       for cols in (1, 3, 10, 129) for positions, group in LOSS_SHAPES
                                                       if (name, cols) != ("categorical_crossentropy", 1)])
def test_loss_kernels(rt, rng, name, cols, positions, group):
    """Every position's last axis is one sample of the loss, as in Keras; a sample's loss and
    accuracy are the means over its positions, each block of positions writing its share."""
    loss = losses.get(name)
    rows, first = 13, 5
    group, blocks = loss_blocks(rt, positions, group)
    tokens = rows * positions
    p, t = loss_case(rng, name, tokens, cols)
    grad = Tensor((tokens, cols), F32)
    stats = (first + rows) * blocks
    sample_loss, sample_hit = Tensor.zeros((stats,), F32), Tensor.zeros((stats,), F32)
    launch_loss(rt, loss, t, p, grad, sample_loss, sample_hit, first, rows, positions, cols, 0, group)
    want_loss, want_grad = loss_and_grad(name, p.astype(np.float64), t.astype(np.float64))  # per token
    want_loss = want_loss.reshape(rows, positions).mean(1)
    want_hit = accuracy(name, p, t).reshape(rows, positions).mean(1)
    close(grad.numpy(), want_grad, rtol=1e-4, atol=1e-7)
    per_sample = [t.numpy().reshape(first + rows, blocks).sum(1) for t in (sample_loss, sample_hit)]
    close(per_sample[0][first:], want_loss, rtol=1e-4, atol=1e-6)
    assert np.all(sample_loss.numpy()[:first * blocks] == 0)
    close(per_sample[1][first:], want_hit)

    totals = Tensor((3,), F32)
    rt.kernel(loss.program(rt, F32), "ReduceMetrics", F32)((rt.local_size,), (rt.local_size,), sample_loss,
                                                           sample_hit, stats, totals, sample_hit, 0)
    close(totals.numpy()[:2], [want_loss.sum(), want_hit.sum()], rtol=1e-5)


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("positions,group", [(7, 4), (130, None)])
def test_masked_loss_kernels(rt, rng, name, positions, group):
    """An output's mask (Keras's): the batch's loss is the held positions' sum over their count, so
    each held position's gradient and loss weigh rows * positions / held beside the unmasked mean's,
    sample weights multiplying; a sample's hits and held positions are its held positions' sums,
    which ReduceMetrics adds up (the epoch's accuracy is their ratio). A row held nowhere counts 0."""
    loss = losses.get(name)
    rows, first, cols = 6, 2, 3
    group, blocks = loss_blocks(rt, positions, group)
    tokens = rows * positions
    p, t = loss_case(rng, name, tokens, cols)
    mask = (rng.random((rows, positions)) > 0.4).astype(F32)
    mask[3] = 0
    weights = rng.uniform(0.5, 2.0, rows)
    grad = Tensor((tokens, cols), F32)
    stats = (first + rows) * blocks
    sample_loss, sample_hit, sample_held = (Tensor.zeros((stats,), F32) for _ in range(3))
    launch_loss(rt, loss, t, p, grad, sample_loss, sample_hit, first, rows, positions, cols, 0, group,
                weights=weights, mask=mask, sample_held=sample_held)
    want_loss, want_grad = loss_and_grad(name, p.astype(np.float64), t.astype(np.float64))  # per token, mean's
    held = mask.ravel().astype(np.float64)
    scale = tokens / held.sum()
    w = np.repeat(weights, positions)
    close(grad.numpy(), want_grad * (w * held * scale)[:, None], rtol=1e-4, atol=1e-7)
    per_sample = [s.numpy().reshape(first + rows, blocks).sum(1)[first:]
                  for s in (sample_loss, sample_hit, sample_held)]
    close(per_sample[0], (w * held * want_loss).reshape(rows, positions).sum(1) / positions * scale, rtol=1e-4,
          atol=1e-6)
    close(per_sample[1], (held * accuracy(name, p, t)).reshape(rows, positions).sum(1), rtol=1e-5, atol=1e-6)
    close(per_sample[2], mask.sum(1))
    totals = Tensor((3,), F32)
    rt.kernel(loss.program(rt, F32), "ReduceMetrics", F32)((rt.local_size,), (rt.local_size,), sample_loss,
                                                           sample_hit, stats, totals, sample_held, 1)
    close(totals.numpy()[1:], [per_sample[1].sum(), mask.sum()], rtol=1e-5)


@pytest.mark.parametrize("name", LOSSES)
def test_weighted_loss_kernels(rt, rng, name):
    """Each sample's weight scales its gradient and its loss, not its hits (Keras weighs compile's
    metrics only when asked); 7 positions in work-groups of 4 (two blocks a sample)."""
    loss = losses.get(name)
    rows, first, positions, cols = 6, 2, 7, 4
    group, blocks = loss_blocks(rt, positions, 4)
    tokens = rows * positions
    p, t = loss_case(rng, name, tokens, cols)
    weights = rng.uniform(0.0, 3.0, rows)
    weights[1] = 0.0
    grad = Tensor((tokens, cols), F32)
    stats = (first + rows) * blocks
    sample_loss, sample_hit = (Tensor.zeros((stats,), F32) for _ in range(2))
    launch_loss(rt, loss, t, p, grad, sample_loss, sample_hit, first, rows, positions, cols, 0, group,
                weights=weights)
    want_loss, want_grad = loss_and_grad(name, p.astype(np.float64), t.astype(np.float64))
    close(grad.numpy(), want_grad * np.repeat(weights, positions)[:, None], rtol=1e-4, atol=1e-7)
    per_sample = [s.numpy().reshape(first + rows, blocks).sum(1)[first:] for s in (sample_loss, sample_hit)]
    close(per_sample[0], weights * want_loss.reshape(rows, positions).mean(1), rtol=1e-4, atol=1e-6)
    close(per_sample[1], accuracy(name, p, t).reshape(rows, positions).mean(1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,activation", [("categorical_crossentropy", "softmax"),
                                             ("binary_crossentropy", "sigmoid")])
def test_folded_gradient_is_the_logit_gradient(rt, rng, name, activation):
    """softmax + categorical CE and sigmoid + binary CE: the kernel's folded gradient equals the
    chain rule through the activation."""
    loss = losses.get(name)
    assert loss.can_fold(activations.get(activation))
    assert not loss.can_fold(activations.get("sigmoid", a=2.0))
    rows, cols = 6, 4
    z = rng.normal(size=(rows, cols))
    if activation == "softmax":
        p, t = softmax(z), np.eye(cols)[rng.integers(0, cols, rows)]
    else:
        p, t = 1 / (1 + np.exp(-z)), rng.integers(0, 2, (rows, cols)).astype(float)
    grad = Tensor((rows, cols), F32)
    stats = Tensor.zeros((rows,), F32), Tensor.zeros((rows,), F32)
    launch_loss(rt, loss, t, p, grad, *stats, 0, rows, 1, cols, 1)
    dp = loss_and_grad(name, p, t)[1]
    want = softmax_backward(p, dp) if activation == "softmax" else dp * p * (1 - p)
    close(grad.numpy(), want, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("where", ["from_logits", "softmax_here"])
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("cols", [3, 8, 19, 113])
def test_logit_cross_entropy_kernels(rt, rng, sparse, cols, where):
    """Cross-entropy from logits: the loss is -sum t log softmax(z), the gradient softmax(z) sum(t)
    - t over the positions' count; rows of every width, so that the kernel's eight-wide gradient
    reads and writes start anywhere (rows of 19 or 113 are not 32-byte aligned) and has a tail.
    The same where a softmax output layer leaves its softmax to the loss (SOFTMAX_HERE): then the
    loss takes log of softmax(z) clamped to [1e-7, 1 - 1e-7], as on a softmax's output."""
    from clnet.losses.base import SOFTMAX_HERE
    from_logits = where == "from_logits"
    loss = (losses.SparseCategoricalCrossentropy if sparse else losses.CategoricalCrossentropy)(from_logits=from_logits)
    rows, positions = 5, 7
    tokens = rows * positions
    z = rng.normal(0, 3, (tokens, cols)).astype(F32)
    labels = rng.integers(0, cols, tokens)
    t = np.eye(cols)[labels] if sparse else rng.dirichlet(np.ones(cols), tokens) * rng.uniform(0.5, 2, (tokens, 1))
    grad = Tensor((tokens, cols), F32)
    blocks = loss_blocks(rt, positions)[1]
    sample_loss, sample_hit = Tensor.zeros((rows * blocks,), F32), Tensor.zeros((rows * blocks,), F32)
    launch_loss(rt, loss, labels.astype(F32) if sparse else t, z, grad, sample_loss, sample_hit, 0, rows, positions,
                cols, 0 if from_logits else SOFTMAX_HERE)
    z64 = z.astype(np.float64)
    log_p = z64 - z64.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    close(grad.numpy(), (np.exp(log_p) * t.sum(1, keepdims=True) - t) / tokens, rtol=1e-4, atol=1e-7)
    if not from_logits:
        log_p = np.log(np.clip(np.exp(log_p), 1e-7, 1 - 1e-7))
    close(sample_loss.numpy().reshape(rows, blocks).sum(1), -(t * log_p).sum(1).reshape(rows, positions).mean(1),
          rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("x_cols,y_cols", [(1, 1), (5, 3), (784, 10), (129, 127)])
def test_gather_rows(rt, rng, x_cols, y_cols, transposed):
    """The batch's rows, and x^T where the first layer reads it (`transposed`), else none."""
    x = rng.normal(size=(37, x_cols)).astype(F32)
    y = rng.normal(size=(37, y_cols)).astype(F32)
    batches = Batches(rt, x, y, capacity=11, transposed=transposed)
    assert batches.resident
    order = rng.permutation(37)
    batches.order(order)
    xb, yb = batches.batch(22, 11)
    np.testing.assert_array_equal(xb.numpy(), x[order[22:33]])
    if transposed:
        np.testing.assert_array_equal(xb.transposed.numpy(), x[order[22:33]].T)  # for the weight gradient
    else:
        assert xb.transposed is None
    np.testing.assert_array_equal(yb.numpy(), y[order[22:33]])
    xb, yb = batches.batch(33, 4)
    np.testing.assert_array_equal(xb.numpy()[:4], x[order[33:]])
    np.testing.assert_array_equal(yb.numpy()[:4], y[order[33:]])


def test_host_batches_match_resident(rt, rng, monkeypatch):
    """Data sets too large for the device are gathered on the host; the batches are the same."""
    import clnet.data
    x, y = rng.normal(size=(20, 7)).astype(F32), rng.normal(size=(20, 2)).astype(F32)
    monkeypatch.setattr(clnet.data, "DEVICE_SHARE", 0.0)
    batches = Batches(rt, x, y, capacity=6)
    assert not batches.resident
    order = rng.permutation(20)
    batches.order(order)
    xb, yb = batches.batch(12, 6)
    np.testing.assert_array_equal(xb.numpy(), x[order[12:18]])
    np.testing.assert_array_equal(yb.numpy(), y[order[12:18]])
