"""JoinedDense, MultiHeadAttention's query, key and value projections of one input as one layer:
its three products against numpy at awkward sizes in the device's layout and in the GPU form's
panels (forced here with small tiles), each part's weights where three Dense layers would have
them, and where it refuses to join. (MultiHeadAttention's tests check the joined projections by
central differences, against the unjoined ones and in launches.)"""
import numpy as np
import pytest

from clnet.cl.parameters import ParameterStore
from clnet.cl.tensor import Tensor
from clnet.layers.dense import Dense, JoinedDense

# The GPU form, forced: 16-square tiles, so that parts are several tiles each.
TILES = {"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}


def part_width(rt, dtype) -> int:
    """Parts of whole alignment steps of the store (128 floats on NVIDIA's runtime, 32 on PoCL's)."""
    return max(rt.alignment // np.dtype(dtype).itemsize, 32)


def built(rt, layer, n_in, rows, dtype, rng=None):
    store = ParameterStore(rt, dtype)
    layer.build((n_in,), store, rng or np.random.default_rng(0))
    store.allocate()
    layer.allocate(rows)
    return store


@pytest.mark.parametrize("tiles", [None, TILES], ids=["device", "gpu-form"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_in,rows", [(7, 37), (33, 5)])
def test_products_match_numpy(rt, fp64, tiles, dtype, n_in, rows):
    width, parts = part_width(rt, dtype), 3
    assert JoinedDense.joinable(rt, dtype, n_in, width, parts, tiles)
    layer = JoinedDense(parts, width, True, "glorot_uniform", "zeros", "qkv", tiles=tiles)
    built(rt, layer, n_in, rows, dtype)
    if tiles:
        assert layer.tiled and layer.panel == width
    rng = np.random.default_rng(1)
    weights = [rng.normal(size=w.shape) for w in layer.get_weights()]  # (n_in, width), (width,), ... per part
    for parameter, array in zip(layer.parameters, weights):
        device = np.zeros(parameter.size, dtype)
        parameter.from_keras(array, device)
        parameter.value.write(device.reshape(parameter.shape))
    kernel = np.concatenate(weights[0::2], axis=1)  # (n_in, parts * width)
    bias = np.concatenate(weights[1::2])
    x, dy = rng.normal(size=(rows, n_in)), rng.normal(size=(rows, parts * width))
    y = layer.forward(Tensor.from_numpy(x, dtype, rt), rows).numpy()[:rows]
    dx = layer.backward(Tensor.from_numpy(dy, dtype, rt), rows, True).numpy()[:rows]
    tolerance = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(y, x @ kernel + bias, **tolerance)
    np.testing.assert_allclose(dx, dy @ kernel.T, **tolerance)
    grads = layer.gradients()
    for part in range(parts):
        columns = slice(part * width, (part + 1) * width)
        np.testing.assert_allclose(grads[2 * part], x.T @ dy[:, columns], **tolerance)
        np.testing.assert_allclose(grads[2 * part + 1], dy[:, columns].sum(0), **tolerance)


@pytest.mark.parametrize("tiles", [None, TILES], ids=["device", "gpu-form"])
def test_parts_are_weights_of_their_own_back_to_back(rt, tiles):
    """Each part draws, lays out and reads back its weights as a Dense of `width` units does
    (the same draws in the same order), and the parts lie back to back in the store."""
    n_in, width = 5, part_width(rt, np.float32)
    layer = JoinedDense(3, width, True, "glorot_uniform", "glorot_uniform", "qkv", tiles=tiles)
    built(rt, layer, n_in, 4, np.float32, np.random.default_rng(7))
    rng, separate = np.random.default_rng(7), []
    for _ in range(3):  # three Dense layers drawing from one generator in turn
        dense = Dense(width, None, True, "glorot_uniform", "glorot_uniform", tiles=tiles)
        built(rt, dense, n_in, 4, np.float32, rng)
        separate += dense.get_weights()
    for got, want in zip(layer.get_weights(), separate, strict=True):
        np.testing.assert_array_equal(got, want)
    for run in (layer.part_kernels, layer.part_biases):
        for before, after in zip(run, run[1:]):
            assert after.offset == before.offset + before.size
    assert layer.kernel.value.shape == (3 * n_in * width,) and layer.bias.value.shape == (3 * width,)


def test_joins_only_whole_tiles_and_alignment_steps(rt):
    width = part_width(rt, np.float32)
    assert JoinedDense.joinable(rt, np.float32, 8, width, 3, TILES)
    assert not JoinedDense.joinable(rt, np.float32, 8, width, 3, TILES | {"TILE": 2 * width})  # tiles would straddle parts
    if rt.alignment // 4 > 16:  # parts of 16 would not end on alignment steps: the store would pad them apart
        assert not JoinedDense.joinable(rt, np.float32, 8, 16, 3, TILES)
