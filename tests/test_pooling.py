"""Pooling (max, average; 1-D, 2-D, global), Reshape and ZeroPadding2D: kernels against numpy
references in float32 at awkward sizes, float64 gradient checks, checkpoints, configs, bad input."""
import numpy as np
import pytest

import clnet
from clnet.cl.parameters import ParameterStore
from clnet.cl.tensor import Tensor
from clnet.layers import (AveragePooling1D, AveragePooling2D, Conv1D, Conv2D, Dense, Dropout, Flatten,
                          GlobalAveragePooling1D, GlobalAveragePooling2D, GlobalMaxPooling1D, GlobalMaxPooling2D, Input,
                          MaxPooling1D, MaxPooling2D, Reshape, ZeroPadding2D)
from reference import pool2d, pool2d_backward, trains_saves_and_reloads
from test_gradients import build, check_model

F32 = np.float32


def device_pass(rt, layer, input_shape, x, dy):
    """Output and dL/dx of a weightless layer for one batch (capacity beyond it: the kernels must
    use `rows`)."""
    layer.name = layer.name or "layer"
    layer.build(input_shape, ParameterStore(rt, F32), np.random.default_rng(0))
    rows = len(x)
    layer.allocate(rows + 2)
    y = layer.forward(Tensor.from_numpy(x.reshape(rows, -1), F32), rows).numpy()[:rows]
    dx = layer.backward(Tensor.from_numpy(np.pad(dy.reshape(rows, -1), ((0, 2), (0, 0))), F32), rows, True)
    return y, dx.numpy()[:rows]


# (input shape, pool_size, strides, padding)
CASES = [((1, 1, 1), 1, None, "valid"), ((1, 1, 3), 2, None, "same"), ((7, 6, 3), 2, None, "same"),
         ((5, 7, 5), (3, 2), (2, 1), "same"), ((9, 9, 2), 3, 2, "valid"), ((6, 5, 6), (2, 4), 3, "same"),
         ((8, 8, 1), 2, 1, "valid"), ((26, 26, 7), 2, None, "valid"),
         # more channels, overlapping windows and cells, with y^T checked below
         ((7, 6, 8), (3, 2), (2, 1), "same"), ((9, 7, 12), 2, None, "same"),
         # channels a multiple of 8 (on a vector's lanes in FeedForwardPool and, where windows
         # do not overlap, in CalcHiddenGradientPoolCells): two runs of 8, three
         ((7, 5, 16), 2, None, "same"), ((8, 7, 24), 3, None, "valid")]


@pytest.mark.parametrize("shape,pool,strides,padding", CASES)
@pytest.mark.parametrize("kind", [MaxPooling2D, AveragePooling2D])
def test_pool2d_kernels(rt, rng, kind, shape, pool, strides, padding):
    layer = kind(pool, strides, padding)
    x = rng.normal(size=(3, *shape)).astype(F32)
    use_max = kind is MaxPooling2D
    want = pool2d(x.astype(np.float64), layer.pool_size, layer.strides, padding, use_max)
    assert layer.compute_output_shape(shape) == want.shape[1:]
    dy = rng.normal(size=want.shape).astype(F32)
    layer.writes_transposed = True  # as a model's build sets it where a Dense reads the output
    y, dx = device_pass(rt, layer, shape, x, dy)
    np.testing.assert_allclose(y.reshape(want.shape), want, rtol=2e-6, atol=2e-6)
    # y^T, which a Dense after a Flatten reads for its weight gradient
    np.testing.assert_array_equal(layer.outputs.transposed.numpy()[:, :3], y.reshape(3, -1).T)
    want_dx = pool2d_backward(x.astype(np.float64), dy.astype(np.float64), layer.pool_size, layer.strides,
                              padding, use_max)
    np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("steps,channels,pool,strides,padding", [(1, 1, 1, None, "valid"), (9, 3, 2, None, "same"),
                                                                  (10, 5, 3, 2, "same"), (11, 2, 4, 3, "valid")])
@pytest.mark.parametrize("kind", [MaxPooling1D, AveragePooling1D])
def test_pool1d_kernels(rt, rng, kind, steps, channels, pool, strides, padding):
    layer = kind(pool, strides, padding)
    x = rng.normal(size=(2, steps, channels)).astype(F32)
    use_max = kind is MaxPooling1D
    window, step = (1, layer.pool_size[0]), (1, layer.strides[0])
    want = pool2d(x[:, None].astype(np.float64), window, step, padding, use_max)[:, 0]
    dy = rng.normal(size=want.shape).astype(F32)
    y, dx = device_pass(rt, layer, (steps, channels), x, dy)
    np.testing.assert_allclose(y.reshape(want.shape), want, rtol=2e-6, atol=2e-6)
    want_dx = pool2d_backward(x[:, None].astype(np.float64), dy[:, None].astype(np.float64), window, step,
                              padding, use_max)[:, 0]
    np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 7, 3), (13, 13, 9)])
@pytest.mark.parametrize("kind", [GlobalMaxPooling2D, GlobalAveragePooling2D])
@pytest.mark.parametrize("keepdims", [False, True])
def test_global_pool2d_kernels(rt, rng, kind, shape, keepdims):
    layer = kind(keepdims=keepdims)
    x = rng.normal(size=(3, *shape)).astype(F32)
    use_max = kind is GlobalMaxPooling2D
    want = pool2d(x.astype(np.float64), shape[:2], shape[:2], "valid", use_max)
    assert layer.compute_output_shape(shape) == (want.shape[1:] if keepdims else (shape[2],))
    dy = rng.normal(size=want.shape).astype(F32)
    y, dx = device_pass(rt, layer, shape, x, dy)
    np.testing.assert_allclose(y.reshape(want.shape), want, rtol=2e-6, atol=2e-6)
    want_dx = pool2d_backward(x.astype(np.float64), dy.astype(np.float64), shape[:2], shape[:2], "valid", use_max)
    np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("kind", [GlobalMaxPooling1D, GlobalAveragePooling1D])
def test_global_pool1d_kernels(rt, rng, kind):
    x = rng.normal(size=(4, 7, 5)).astype(F32)
    dy = rng.normal(size=(4, 5)).astype(F32)
    y, dx = device_pass(rt, kind(), (7, 5), x, dy)
    if kind is GlobalMaxPooling1D:
        np.testing.assert_array_equal(y, x.max(1))
        want_dx = (x == x.max(1, keepdims=True)) * dy[:, None]
    else:
        np.testing.assert_allclose(y, x.mean(1), rtol=2e-6, atol=2e-6)
        want_dx = np.broadcast_to(dy[:, None] / 7, x.shape)
    np.testing.assert_allclose(dx.reshape(x.shape), want_dx, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("shape,padding", [((1, 1, 1), 1), ((4, 5, 3), (2, 0)), ((3, 2, 5), ((0, 2), (3, 1)))])
def test_zero_padding_kernels(rt, rng, shape, padding):
    layer = ZeroPadding2D(padding)
    (top, bottom), (left, right) = layer.padding
    x = rng.normal(size=(3, *shape)).astype(F32)
    want = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    dy = rng.normal(size=want.shape).astype(F32)
    y, dx = device_pass(rt, layer, shape, x, dy)
    np.testing.assert_array_equal(y.reshape(want.shape), want)
    np.testing.assert_array_equal(dx.reshape(x.shape), dy[:, top:top + shape[0], left:left + shape[1]])


# -- float64 gradient checks -------------------------------------------------------------------
@pytest.mark.parametrize("pool", [
    lambda: MaxPooling2D(),
    lambda: MaxPooling2D((3, 2), strides=1, padding="same"),   # overlapping windows
    lambda: AveragePooling2D((2, 3), strides=(2, 1), padding="same"),
    lambda: GlobalMaxPooling2D(keepdims=True),
    lambda: GlobalAveragePooling2D(),
    lambda: ZeroPadding2D(((1, 0), (2, 1))),
])
def test_pool2d_gradients(fp64, pool):
    rng = np.random.default_rng(6)
    model = build([Input((5, 4, 2)), Conv2D(3, 2, activation="tanh"), pool(), Flatten(), Dense(3, "softmax")],
                  "categorical_crossentropy")
    check_model(model, rng.normal(size=(3, 5, 4, 2)), rng.integers(0, 3, 3), rng)


@pytest.mark.parametrize("pool", [lambda: MaxPooling2D((3, 2), strides=(2, 1), padding="same"),
                                  lambda: AveragePooling2D(padding="same"), lambda: GlobalMaxPooling2D()])
def test_pool2d_gradients_on_lanes(fp64, pool):
    """Eight channels: FeedForwardPool's vector form, in double8 (maxima chosen on long lanes)."""
    rng = np.random.default_rng(9)
    model = build([Input((5, 4, 2)), Conv2D(8, 2, activation="tanh"), pool(), Flatten(), Dense(3, "softmax")],
                  "categorical_crossentropy")
    check_model(model, rng.normal(size=(3, 5, 4, 2)), rng.integers(0, 3, 3), rng)


@pytest.mark.parametrize("pool", [lambda: MaxPooling1D(2, padding="same"), lambda: AveragePooling1D(3, 2),
                                  lambda: GlobalMaxPooling1D(), lambda: GlobalAveragePooling1D()])
def test_pool1d_gradients(fp64, pool):
    rng = np.random.default_rng(7)
    model = build([Input((7, 3)), Conv1D(3, 2, activation="tanh"), pool(), Flatten(), Dense(2)], "mse")
    check_model(model, rng.normal(size=(2, 7, 3)), rng.normal(size=(2, 2)), rng)


def test_reshape_gradients(fp64):
    rng = np.random.default_rng(8)
    model = build([Input((12,)), Dense(12, "tanh"), Reshape((2, -1, 2)), Conv2D(2, (1, 2), activation="tanh"),
                   Reshape((-1,)), Dense(2)], "mse")
    assert model.layers[1].compute_output_shape((12,)) == (2, 3, 2)
    check_model(model, rng.normal(size=(3, 12)), rng.normal(size=(3, 2)), rng)


# -- checkpoints, configs, bad input -----------------------------------------------------------
def test_save_load_predict_and_config(tmp_path, rng):
    model = clnet.Sequential([Input((9, 8, 2)), ZeroPadding2D(((1, 0), (0, 2))), Conv2D(3, 3, activation="relu"),
                              AveragePooling2D(3, 2, "same"), MaxPooling2D(2, 1), Reshape((-1, 3)),
                              MaxPooling1D(2, padding="same"), AveragePooling1D(), Reshape((1, 2, 3)),
                              GlobalMaxPooling2D(keepdims=True), Reshape((1, 3)), GlobalAveragePooling1D(),
                              Dense(3, "softmax")], seed=2)
    x, y = rng.normal(size=(30, 9, 8, 2)), rng.integers(0, 3, 30)
    trains_saves_and_reloads(model, x, y, tmp_path / "m.h5", "categorical_crossentropy")
    configs = [layer.get_config() for layer in model.layers]
    assert configs[0] == {"name": "zero_padding2d", "padding": [[1, 0], [0, 2]]}
    assert configs[2] == {"name": "average_pooling2d", "pool_size": [3, 3], "strides": [2, 2], "padding": "same"}
    assert configs[4] == {"name": "reshape", "target_shape": [-1, 3]}
    assert configs[8] == {"name": "global_max_pooling2d", "keepdims": True}


@pytest.mark.parametrize("make,input_shape,message", [
    (lambda: MaxPooling2D(5, name="p"), (4, 6, 1),
     r"MaxPooling2D 'p': pool_size 5 along the height axis is larger than the input, whose shape is \(4, 6, 1\)"),
    (lambda: AveragePooling1D(4, name="p"), (3, 2),
     r"AveragePooling1D 'p': pool_size 4 along the steps axis is larger than the input, whose shape is \(3, 2\)"),
    (lambda: MaxPooling2D(name="p"), (6, 6),
     r"MaxPooling2D 'p' expects inputs of shape \(height, width, channels\), got input_shape \(6, 6\)"),
    (lambda: GlobalAveragePooling1D(name="p"), (6,),
     r"GlobalAveragePooling1D 'p' expects inputs of shape \(steps, channels\), got input_shape \(6,\)"),
    (lambda: ZeroPadding2D(name="z"), (6, 6),
     r"ZeroPadding2D 'z' expects inputs of shape \(height, width, channels\), got input_shape \(6, 6\)"),
    (lambda: Reshape((4, -1), name="r"), (3, 3),
     r"Reshape 'r': cannot reshape input_shape \(3, 3\) \(9 values\) into target_shape \(4, -1\)"),
    (lambda: Reshape((2, 5), name="r"), (3, 3),
     r"Reshape 'r': cannot reshape input_shape \(3, 3\) \(9 values\) into target_shape \(2, 5\)"),
])
def test_bad_input_shapes(rt, make, input_shape, message):
    with pytest.raises(ValueError, match=message):
        clnet.Sequential([make()]).build(input_shape)


@pytest.mark.parametrize("make,message", [
    (lambda: MaxPooling2D(0, name="p"), r"MaxPooling2D 'p': pool_size must be >= 1, got 0"),
    (lambda: MaxPooling2D(2, (2, 0), name="p"), r"MaxPooling2D 'p': strides must be >= 1, got \(2, 0\)"),
    (lambda: AveragePooling1D((2, 2), name="p"), r"AveragePooling1D 'p': pool_size must be an integer or a tuple "
                                                 r"of 1 integers, got \(2, 2\)"),
    (lambda: MaxPooling2D(padding="full", name="p"), r"MaxPooling2D 'p': padding must be 'valid' or 'same'"),
    (lambda: ZeroPadding2D(-1, name="z"), r"ZeroPadding2D 'z': padding must be a non-negative int"),
    (lambda: ZeroPadding2D((1, 2, 3), name="z"), r"ZeroPadding2D 'z': padding must be .*got \(1, 2, 3\)"),
    (lambda: Reshape((2, -1, -1), name="r"), r"Reshape 'r': target_shape must be a tuple of positive integers "
                                             r"with at most one -1, got \(2, -1, -1\)"),
    (lambda: Reshape((0, 3), name="r"), r"Reshape 'r': target_shape must be"),
])
def test_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_model_tells_the_layers_a_dense_reads_to_write_y_t(rng):
    """Model.build sets writes_transposed on exactly the layers whose output a Dense reads, through
    a Flatten too; not on one a convolution, a Dropout or nothing reads. Pooling and Dense then
    write y^T (pooling: the forward's transposed copy); a Dropout, told too, writes none (the Dense
    above transposes its input itself). That is where the Dense reads x^T, as the CPU form's
    weight gradient does; the GPU form's reads x, and then its input's producer is not told."""
    model = clnet.Sequential([Input((14, 14, 1)), Conv2D(2, 3), MaxPooling2D(), Conv2D(3, 3), MaxPooling2D(), Flatten(),
                              Dense(6, "relu"), Dense(5, "relu"), Dropout(0.5), Dense(4, "relu"), Dense(3)], seed=0)
    pool1, pool2, first_dense, second_dense = model.layers[1], model.layers[3], model.layers[5], model.layers[6]
    reads = [layer.reads_transposed for layer in model.layers if isinstance(layer, Dense)]
    told = [False, False, False, reads[0], reads[0], reads[1], False, reads[2], reads[3], False]
    assert [layer.writes_transposed for layer in model.layers] == told
    assert not model.batch_transposed  # a convolution reads the batch
    model.compile("sgd", "mse")
    model.fit(rng.normal(size=(4, 14, 14, 1)), rng.normal(size=(4, 3)), batch_size=4, verbose=0)
    assert pool1.outputs.transposed is None and second_dense.outputs.transposed is None
    assert getattr(pool2.outputs.transposed, "shape", None) == ((12, 4) if reads[0] else None)
    assert getattr(first_dense.outputs.transposed, "shape", None) == ((6, 4) if reads[1] else None)
    assert getattr(model.layers[7].outputs, "transposed", None) is None  # the Dropout
