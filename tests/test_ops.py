"""clnet.ops and the operators of symbolic tensors: every op's kernels against numpy in float32 at
awkward sizes, its gradients by central differences in float64 through a small Model, launches per
family, eager use on numpy arrays, Lambda, save/load, and the errors a wrong call raises."""
import math

import numpy as np
import pytest

import clnet
from clnet import ops
from clnet.cl.parameters import ParameterStore
from clnet.cl.tensor import Tensor
from clnet.layers import Dense, Input, Lambda
from test_gradients import check_model

F32 = np.float32


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


erf = np.vectorize(math.erf, otypes=[float])

# op -> (numpy reference, input transform making the op's domain and keeping off its kinks)
UNARY = {
    "negative": (np.negative, None), "exp": (np.exp, None), "log": (np.log, np.abs), "sqrt": (np.sqrt, np.abs),
    "abs": (np.abs, None), "square": (np.square, None), "tanh": (np.tanh, None), "sigmoid": (sigmoid, None),
    "relu": (lambda x: np.maximum(x, 0), None), "gelu": (gelu_tanh, None),
}
BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide, "power": np.power,
    "minimum": np.minimum, "maximum": np.maximum, "greater": np.greater, "greater_equal": np.greater_equal,
    "less": np.less, "less_equal": np.less_equal, "equal": np.equal, "not_equal": np.not_equal,
}
POSITIVE = {"log", "sqrt", "power", "divide"}  # operands kept away from 0 and negatives


def data(rng, shape, op=None):
    x = rng.normal(size=shape)
    return np.abs(x) + 0.5 if op in POSITIVE else x


def inputs(*shapes):
    layers = [Input(s) for s in shapes]
    return layers, [layer.output for layer in layers]


def grad_check(build, shapes, rng, rows=3, op=None):
    """Central differences in float64 of an MSE loss on `build(*tensors)` against the device's
    gradients, with respect to each input."""
    layers, tensors = inputs(*shapes)
    out = build(*tensors)
    model = clnet.Model(layers, out, floatx="float64", seed=1)
    model.loss_name = "mse"
    xs = [data(rng, (rows, *s), op) for s in shapes]
    check_model(model, xs if len(xs) > 1 else xs[0], rng.normal(size=(rows, *out.sample_shape)), rng)


def device_pass(y, xs, dy, dtype=F32):
    """Output and input gradients of the op call that made `y`, run alone in `dtype` on rows
    len(xs[0]) of a larger capacity, with the kernel launches each pass took."""
    rt = clnet.runtime()
    layer = y.call.layer
    shapes = [t.sample_shape for t in y.call.inputs]
    layer.build(shapes if layer.multi_input else shapes[0], ParameterStore(rt, dtype), np.random.default_rng(0))
    rows = len(xs[0])
    layer.ensure_rows(rows + 2)
    pad = lambda a: np.concatenate([a, np.zeros((2, *a.shape[1:]))]).astype(dtype)
    tensors = [Tensor.from_numpy(pad(x), dtype, rt) for x in xs]
    before = rt.launches
    out = layer.forward(tensors if layer.multi_input else tensors[0], rows)
    forward = rt.launches - before
    result = out.numpy()[:rows]
    before = rt.launches
    grad = Tensor.from_numpy(pad(dy), dtype, rt)
    grads = (layer.backward(grad, rows, [True] * len(xs)) if layer.multi_input
             else [layer.backward(grad, rows, True)])
    backward = rt.launches - before
    return result, [g.numpy()[:rows] for g in grads], forward, backward


# -- elementwise -------------------------------------------------------------------------------
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_kernels_and_gradients(rt, fp64, rng, op):
    reference, transform = UNARY[op]
    x = rng.normal(size=(13, 5, 7)).astype(F32)
    x = transform(x) + 0.5 if transform else x
    layers, (t,) = inputs((5, 7))
    y = getattr(ops, op)(t)
    assert y.shape == (None, 5, 7)
    result, _, forward, backward = device_pass(y, [x], rng.normal(size=x.shape))
    np.testing.assert_allclose(result, reference(x.astype(np.float64)), rtol=2e-6, atol=2e-6)
    assert (forward, backward) == (1, 1)
    grad_check(lambda a: getattr(ops, op)(a), [(2, 3)], rng, op="log" if transform else None)


# (shape of x1, shape of x2): the same, broadcast either way within a sample, and a constant.
BROADCASTS = [((5, 7), (5, 7)), ((5, 1), (1, 7)), ((3, 5, 7), (5, 1))]


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_kernels(rt, rng, op):
    """Two symbolic operands broadcast against each other (the batch axis never), on rows of a
    larger capacity, against numpy in float32."""
    for s1, s2 in BROADCASTS[:2]:
        x1, x2 = data(rng, (13, *s1), op), data(rng, (13, *s2), op)
        if op in ("equal", "not_equal", "greater_equal", "less_equal"):
            x2 = np.where(rng.random(x2.shape) < 0.5, np.round(x2), x2)  # ties
            x1 = np.round(x1)
        layers, (a, b) = inputs(s1, s2)
        y = getattr(ops, op)(a, b)
        want = BINARY[op](x1.astype(F32), x2.astype(F32)).astype(F32)
        assert y.sample_shape == want.shape[1:]
        result, _, _, _ = device_pass(y, [x1, x2], np.ones((13, *want.shape[1:])))
        np.testing.assert_allclose(result, want, rtol=3e-6, atol=1e-6)
    # A constant operand: a numpy array with no batch axis, broadcast over it.
    s1, s2 = BROADCASTS[2]
    x1, c = data(rng, (3, *s1), op).astype(F32), data(rng, s2, op).astype(F32)
    layers, (a,) = inputs(s1)
    result, _, _, _ = device_pass(getattr(ops, op)(a, c), [x1], np.ones(x1.shape))
    np.testing.assert_allclose(result, BINARY[op](x1, c).astype(F32), rtol=3e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "power", "minimum", "maximum", "greater"])
def test_binary_gradients(fp64, rng, op):
    """Both operands broadcast (their gradients summed over the broadcast axes), and a constant."""
    f = getattr(ops, op)
    grad_check(lambda a, b: f(a, b), [(2, 1, 3), (1, 2, 1)], rng, op=op)
    grad_check(lambda a: f(np.array([[0.7], [1.3]]), a), [(2, 3)], rng, op=op)


def test_elementwise_launches(rt, rng):
    """One launch forward; backward one per input whose gradient is computed: none for x + y of
    one shape (the output's gradient is theirs), one for a broadcast operand's sum."""
    layers, (a, b, c) = inputs((5, 7), (5, 7), (1, 7))
    x = [rng.normal(size=(3, 5, 7)), rng.normal(size=(3, 5, 7))]
    assert device_pass(a + b, x, x[0])[2:] == (1, 0)
    assert device_pass(a * b, x, x[0])[2:] == (1, 2)
    _, (ga, gc), forward, backward = device_pass(a + c, [x[0], x[1][:, :1]], x[0])
    assert (forward, backward) == (1, 1)
    np.testing.assert_allclose(gc, x[0].sum(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(ga, x[0].astype(F32))


def test_where_clip_and_comparisons(fp64, rng):
    grad_check(lambda a, b: ops.where(a > b, a * 2, b), [(2, 3), (2, 3)], rng)
    grad_check(lambda c, a, b: ops.where(c, a, b), [(2, 3), (2, 3), (1, 3)], rng)  # none to the condition
    grad_check(lambda a: ops.where(ops.less_equal(a, 0.1), np.array([1.0, 2.0, 3.0]), ops.clip(a, -0.5, 0.5)),
               [(2, 3)], rng)
    grad_check(lambda a: ops.gelu(a, approximate=False) * ops.ones_like(a) + ops.zeros_like(a), [(4,)], rng)
    x = rng.normal(size=(7, 5)).astype(F32)
    cond = x > 0
    np.testing.assert_array_equal(ops.where(cond, x, -1.0), np.where(cond, x, F32(-1)))
    np.testing.assert_array_equal(ops.clip(x, -0.3, 0.4), np.clip(x, F32(-0.3), F32(0.4)))
    np.testing.assert_allclose(ops.gelu(x, approximate=False), x * (1 + erf(x / np.sqrt(2))) / 2, rtol=1e-5, atol=1e-6)


def test_python_operators(fp64, rng):
    """+ - * / ** @, their reflected forms, unary -, comparisons, slicing; == stays identity."""
    layers, (a, b) = inputs((2, 3), (2, 3))
    for y in (a + b, 2 + a, a - 1, 1 - a, a * 2, 2 * a, a / 2, 2 / a, a ** 2, 2 ** a, -a, abs(a), a > b, a < 1,
              a >= b, a <= 1, np.ones(3) * a, a @ np.ones((3, 4)), np.ones((5, 2)) @ a, a[:, 1:], a[..., 0]):
        assert y.call.inputs[0] in (a, b)
    assert (a == b) is False and a != b and {a: 1}[a] == 1 and len({a, b, a}) == 2
    assert ((np.ones(3) * a).call.layer.op, (2 - a).call.layer.op, (a @ np.ones((3, 4))).shape) == (
        "multiply", "subtract", (None, 2, 4))
    grad_check(lambda x, y: (2 - x) * y / (1 + x * x) - x ** 2 + 3 ** (y / 4) + -y, [(2, 3), (2, 3)], rng)


# -- reductions and softmax --------------------------------------------------------------------
REDUCTIONS = ["sum", "mean", "max", "min"]
AXES = [(None, False), (1, True), (-1, False), ((1, 3), True), ((2, 3), False)]


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reductions(rt, fp64, rng, op):
    x = rng.normal(size=(13, 5, 3, 7)).astype(F32)
    layers, (t,) = inputs((5, 3, 7))
    for axis, keepdims in AXES:
        y = getattr(ops, op)(t, axis=axis, keepdims=keepdims)
        want = getattr(np, op)(x, axis=(1, 2, 3) if axis is None else axis, keepdims=keepdims)
        assert y.shape == (None, *want.shape[1:])
        result, (dx,), forward, backward = device_pass(y, [x], np.ones(want.shape))
        np.testing.assert_allclose(result, want, rtol=2e-6, atol=2e-6)
        assert (forward, backward) == (1, 1)
    grad_check(lambda a: getattr(ops, op)(a, axis=(1,)) + getattr(ops, op)(a, axis=-1, keepdims=True)[:, 0],
               [(2, 3)], rng)


def test_max_shares_gradient_among_ties(rt):
    layers, (t,) = inputs((4,))
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    result, (dx,), _, _ = device_pass(ops.max(t, axis=-1), [x], np.array([1.0, 2.0]))
    np.testing.assert_array_equal(result, [3, 2])
    np.testing.assert_array_equal(dx, [[0, 0.5, 0.5, 0], [0.5, 0.5, 0.5, 0.5]])


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_and_argmin_against_numpy(rt, fp64, rng, op):
    """Symbolic along each axis and over every sample axis (numpy's flattened index), the first of
    tied extremes, no gradient; eager on arrays as numpy's."""
    x = rng.normal(size=(13, 5, 3, 7)).round(1).astype(F32)  # (rounded: ties)
    layers, (t,) = inputs((5, 3, 7))
    for axis, keepdims in [(1, False), (-1, True), (2, False), (None, False), (None, True)]:
        y = getattr(ops, op)(t, axis=axis, keepdims=keepdims)
        flat = getattr(np, op)(x.reshape(13, -1), axis=1)
        want = (flat.reshape(13, *(1, 1, 1)[:3 if keepdims else 0]) if axis is None
                else getattr(np, op)(x, axis=axis, keepdims=keepdims))
        assert y.shape == (None, *want.shape[1:])
        result, (dx,), forward, backward = device_pass(y, [x], np.ones(want.shape))
        np.testing.assert_array_equal(result, want)
        np.testing.assert_array_equal(dx, 0)
        assert forward == 1
    assert getattr(ops, op)(x) == getattr(np, op)(x)
    np.testing.assert_array_equal(getattr(ops, op)(x, axis=0), getattr(np, op)(x, axis=0))
    np.testing.assert_array_equal(getattr(ops, op)(x[0, 0], axis=-1, keepdims=True),
                                  getattr(np, op)(x[0, 0], axis=-1, keepdims=True))
    assert getattr(ops, op)(x[0], keepdims=True).shape == (1, 1, 1)


def test_softmax(fp64, rng):
    x = rng.normal(size=(3, 5, 7)).astype(F32)
    for axis in (-1, 1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        np.testing.assert_allclose(ops.softmax(x, axis=axis), e / e.sum(axis=axis, keepdims=True), rtol=1e-5, atol=1e-7)
    grad_check(lambda a: ops.softmax(a, axis=1) * 3, [(3, 2)], rng)


# -- shape ops ---------------------------------------------------------------------------------
def test_shape_ops_against_numpy(rt, rng):
    x = rng.normal(size=(13, 5, 3, 7)).astype(F32)
    layers, (t,) = inputs((5, 3, 7))
    cases = [
        (ops.reshape(t, (-1, 15, 7)), x.reshape(13, 15, 7), (0, 0)),
        (ops.reshape(t, (None, 7, -1)), x.reshape(13, 7, -1), (0, 0)),
        (ops.expand_dims(t, -1), x[..., None], (0, 0)),
        (ops.squeeze(ops.expand_dims(t, 2), 2), x, (0, 0)),
        (ops.transpose(t, (0, 3, 1, 2)), x.transpose(0, 3, 1, 2), (1, 1)),
        (t[:, 1:4, :, 2:], x[:, 1:4, :, 2:], (1, 1)),
        (t[:, :, 0], x[:, :, 0], (1, 1)),
        (t[..., :3], x[..., :3], (1, 1)),
        (t[:, -1, 1:2], x[:, -1, 1:2], (1, 1)),
        (ops.take(t, [2, 0, 2, 4], axis=1), np.take(x, [2, 0, 2, 4], axis=1), (1, 1)),
        (ops.take(t, np.array([[6, 1], [0, -1]]), axis=-1), np.take(x, [[6, 1], [0, -1]], axis=-1), (1, 1)),
    ]
    for y, want, launches in cases:
        assert y.shape == (None, *want.shape[1:])
        result, _, forward, backward = device_pass(y, [x], np.ones(want.shape))
        np.testing.assert_array_equal(result, want, err_msg=y.call.layer.describe())
        assert (forward, backward) == launches, y.call.layer.describe()
    (u,) = inputs((2, 3, 7))[1]
    result, _, forward, backward = device_pass(ops.concatenate([t, u], axis=1), [x, x[:, :2]], np.ones((13, 7, 3, 7)))
    np.testing.assert_array_equal(result, np.concatenate([x, x[:, :2]], axis=1))
    assert (forward, backward) == (2, 2)
    parts = ops.split(t, [1, 4], axis=1)
    assert [p.shape for p in parts] == [(None, 1, 3, 7), (None, 3, 3, 7), (None, 1, 3, 7)]
    assert ops.stack([t, t], axis=2).shape == (None, 5, 2, 3, 7) and ops.cast(t, "float64") is t
    assert t[:] is t and t[...] is t


def test_shape_op_gradients(fp64, rng):
    grad_check(lambda a: ops.transpose(ops.reshape(a, (-1, 3, 2)), (0, 2, 1))[:, 1:, :2] * ops.expand_dims(
        ops.expand_dims(ops.squeeze(a[:, :1, :1]), -1), -1), [(2, 3)], rng)
    grad_check(lambda a, b: ops.concatenate([*ops.split(a, [1], axis=2)[::-1], ops.take(b, [2, 0, 2], axis=-1)],
                                            axis=-1) + ops.stack([a[..., 0], b[..., 1]], axis=-1)[..., :1],
               [(2, 3), (2, 3)], rng)


# -- matmul ------------------------------------------------------------------------------------
# (x1, x2) full shapes, None for the batch axis: batched products, constants either side,
# broadcast leading axes, a row vector per sample, a constant vector.
MATMULS = [((None, 3, 5), (None, 5, 7)), ((None, 3, 5), (5, 7)), ((3, 5), (None, 5, 7)),
           ((None, 2, 3, 5), (None, 1, 5, 7)), ((None, 1, 3, 5), (2, 5, 7)), ((None, 5), (5, 7)), ((None, 3, 5), (5,))]


@pytest.mark.parametrize("a,b", MATMULS)
def test_matmul(rt, fp64, rng, a, b):
    """Forward against numpy in float32 (one launch), backward one launch per symbolic operand,
    gradients in float64."""
    constants = {i: rng.normal(size=s) for i, s in enumerate((a, b)) if s[0] is not None}
    shapes = [s[1:] for s in (a, b) if s[0] is None]

    def build(*tensors):
        tensors = iter(tensors)
        return ops.matmul(*[constants[i] if i in constants else next(tensors) for i in (0, 1)])
    layers, tensors = inputs(*shapes)
    y = build(*tensors)
    xs = [rng.normal(size=(13, *s)) for s in shapes]
    given = iter(xs)
    want = np.matmul(*[(constants[i] if i in constants else next(given)).astype(F32) for i in (0, 1)])
    assert y.shape == (None, *want.shape[1:])
    result, _, forward, backward = device_pass(y, xs, np.ones(want.shape))
    np.testing.assert_allclose(result, want, rtol=1e-5, atol=1e-5)
    assert (forward, backward) == (1, len(shapes))
    grad_check(build, shapes, rng, rows=2)


# -- eager use, Lambda, saving -----------------------------------------------------------------
def test_eager_ops_are_keras_ops_on_arrays(rng):
    """Arrays alone: computed now on the device, every axis free (axis 0 too), numpy's shapes."""
    x = rng.normal(size=(3, 4)).astype(F32)
    np.testing.assert_allclose(ops.add(x, np.arange(4)), x + np.arange(4), rtol=1e-6)
    assert ops.add(x, 2).dtype == F32 and ops.add(x.astype(np.float64), 2).dtype == np.float64
    np.testing.assert_allclose(ops.sum(x, axis=0), x.sum(0), rtol=1e-5)
    assert ops.mean(x).shape == () and ops.max(x, axis=(0, 1), keepdims=True).shape == (1, 1)
    np.testing.assert_array_equal(ops.transpose(x), x.T)
    np.testing.assert_array_equal(ops.getitem(x, (0, slice(1, 3))), x[0, 1:3])
    np.testing.assert_allclose(ops.matmul(x, x.T), x @ x.T, rtol=1e-5)
    np.testing.assert_array_equal(ops.stack([x, x]), np.stack([x, x]))
    np.testing.assert_array_equal(ops.reshape(x, (2, -1)), x.reshape(2, -1))
    assert [p.shape for p in ops.split(x, [1])] == [(1, 4), (2, 4)]
    np.testing.assert_array_equal(ops.arange(3), np.arange(3, dtype=F32))
    assert float(ops.exp(0.0)) == 1.0


def test_lambda(fp64, rng, tmp_path):
    x = Input((3, 4))
    h = Dense(5, "tanh", name="d")(x)
    y = Lambda(lambda t: ops.exp(t) * 2 - ops.mean(t, axis=-1, keepdims=True), output_shape=(3, 5), name="lam")(h)
    model = clnet.Model(x, y, floatx="float64", seed=2)
    assert [l.name for l in model.layers][-1] == "lam" and y.shape == (None, 3, 5)
    model.loss_name = "mse"
    check_model(model, rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 5)), rng)
    with pytest.raises(ValueError, match=r"Lambda 'lam' cannot be saved: its function is Python code"):
        model.save(tmp_path / "m.h5")
    np.testing.assert_allclose(Lambda(lambda a: ops.sum(a * 2))(np.ones(3)), 6.0)
    with pytest.raises(TypeError, match=r"a Lambda runs its function on symbolic tensors .* use the functional API"):
        clnet.Sequential([Input((3,)), Lambda(lambda t: t * 2, name="l")])
    with pytest.raises(ValueError, match=r"output_shape \(4,\) was given, but function returns tensors of shape "
                                         r"\(None, 3, 4\)"):
        Lambda(lambda t: t * 2, output_shape=(4,))(x)
    with pytest.raises(TypeError, match=r"function must return symbolic tensors .* but returned ndarray"):
        Lambda(lambda t: np.ones(3))(x)


def test_a_model_of_ops_trains_saves_and_reloads(tmp_path, rng):
    x = Input((3, 4))
    h = Dense(6, "tanh")(x)
    a, b = ops.split(h, 2, axis=-1)
    y = ops.mean(ops.softmax(a @ ops.transpose(b, (0, 2, 1))) @ b, axis=1) + ops.take(h, [0, 2], axis=1)[:, 1, :3]
    model = clnet.Model(x, Dense(2)(y * 0.5 + np.array([1.0, 0.0, -1.0])), seed=3)
    model.compile("adam", "mse")
    xs, ys = rng.normal(size=(20, 3, 4)), rng.normal(size=(20, 2))
    model.fit(xs, ys, batch_size=8, epochs=1, verbose=0)
    model.save(tmp_path / "m.h5")
    loaded = clnet.load_model(tmp_path / "m.h5")
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(loaded.predict(xs), model.predict(xs))


# -- errors ------------------------------------------------------------------------------------
def test_errors():
    layers, (a, b, c) = inputs((3, 4), (4,), (3, 5))
    cases = [
        (lambda: a + c, ValueError, r"add: cannot broadcast shapes \(None, 3, 4\) and \(None, 3, 5\): axis -1 has "
                                    r"extents 4 and 5 \(numpy's rule"),
        (lambda: a * b, ValueError, r"multiply: cannot broadcast shapes \(None, 3, 4\) and \(None, 4\): .* the batch "
                                    r"axis of \(None, 4\) would meet axis 1 of a tensor of 3 axes"),
        (lambda: a - np.ones((2, 3, 4)), ValueError, r"subtract: .* the constant of shape \(2, 3, 4\) .* its first "
                                                     r"axis \(2\) meets the batch axis, where it must be 1"),
        (lambda: a + "x", TypeError, r"add: x2 must be a symbolic tensor, a number or a numpy array, got str"),
        (lambda: ops.sum(a, axis=0), ValueError, r"sum: axis 0 is the batch axis"),
        (lambda: ops.mean(a, axis=(1, -3)), ValueError, r"mean: axis -3 is the batch axis"),
        (lambda: ops.max(a, axis=3), ValueError, r"max: axis 3 is out of range for a tensor of 3 axes"),
        (lambda: ops.softmax(a, axis=0), ValueError, r"softmax: axis 0 is the batch axis"),
        (lambda: a[0], IndexError, r"cannot index the batch axis: 0 gives it 0"),
        (lambda: a[:, ::2], IndexError, r"slices with a step are not supported: axis 1 .* has step 2"),
        (lambda: a[:, 3], IndexError, r"index 3 is out of range for axis 1 with extent 3"),
        (lambda: a[:, 2:1], IndexError, r"the slice slice\(2, 1, None\) of axis 1 \(extent 3\) is empty"),
        (lambda: a @ c, ValueError, r"matmul: shapes \(None, 3, 4\) and \(None, 3, 5\): the last axis of the first "
                                    r"\(4\) must equal the second to last of the second \(3\)"),
        (lambda: a @ b, ValueError, r"matmul: .* the second operand, a symbolic \(None, 4\), has one sample axis"),
        (lambda: ops.reshape(a, (3, 4)), ValueError, r"reshape: new_shape \(3, 4\) must keep the batch axis"),
        (lambda: ops.reshape(a, (-1, 5)), ValueError, r"reshape: cannot reshape a tensor of shape \(None, 3, 4\) "
                                                      r"\(12 values a sample\) into \(-1, 5\)"),
        (lambda: ops.transpose(a, (1, 0, 2)), ValueError, r"transpose: axes \(1, 0, 2\) move the batch axis"),
        (lambda: ops.transpose(a), ValueError, r"transpose: axes=None reverses every axis"),
        (lambda: ops.expand_dims(a, 0), ValueError, r"expand_dims: axis 0 is the batch axis"),
        (lambda: ops.squeeze(a, 1), ValueError, r"squeeze: axis 1 of shape \(None, 3, 4\) has extent 3, not 1"),
        (lambda: ops.concatenate([a, c]), ValueError, r"concatenate: axis 0 is the batch axis"),
        (lambda: ops.concatenate([a, c], axis=1), ValueError, r"concatenate: shapes \(None, 3, 4\) and \(None, 3, 5\) "
                                                              r"must agree on every axis but the joined one \(axis 1\)"),
        (lambda: ops.concatenate([a, np.ones((1, 3, 4))], axis=1), TypeError, r"concatenate: xs mixes symbolic "
                                                                              r"tensors and arrays: xs\[1\] is ndarray"),
        (lambda: ops.stack([a, a]), ValueError, r"stack: axis 0 is the batch axis"),
        (lambda: ops.split(a, 2, axis=1), ValueError, r"split: indices_or_sections 2 does not divide axis 1"),
        (lambda: ops.take(a, [3], axis=1), IndexError, r"take: indices \[3\] are out of range for axis 1 with extent 3"),
        (lambda: ops.take(a, b, axis=1), TypeError, r"take: indices must be constant integers"),
        (lambda: ops.take(a, [0.5], axis=1), TypeError, r"take: indices must be integers, got float64"),
        (lambda: ops.clip(a, 1, 0), ValueError, r"clip: x_min \(1\) must not exceed x_max \(0\)"),
        (lambda: ops.clip(a, b, 1), TypeError, r"clip: x_min must be a finite number"),
        (lambda: ops.cast(a, "int32"), TypeError, r"cast: a symbolic tensor takes dtype .float32. or .float64."),
        (lambda: ops.argmax(a, axis=(1, 2)), TypeError, r"argmax: axis must be an integer or None, got \(1, 2\)"),
        (lambda: ops.sum(a, keepdims=1), TypeError, r"sum: keepdims must be True or False, got 1"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            call()


# -- fusion ------------------------------------------------------------------------------------
def layer_gradient_check(y, xs, rng):
    """Central differences in float64 of sum(w * y) for the op call that made `y`, run alone (no
    model: a fused call is not a call of the graph the model walks), against its backward pass."""
    w = rng.normal(size=(len(xs[0]), *y.sample_shape))
    out, grads, _, _ = device_pass(y, xs, w, np.float64)
    h = 1e-6
    for x, grad in zip(xs, grads):
        numeric = np.zeros_like(x)
        for index in np.ndindex(x.shape):
            original = x[index]
            x[index] = original + h
            plus = (device_pass(y, xs, w, np.float64)[0] * w).sum()
            x[index] = original - h
            minus = (device_pass(y, xs, w, np.float64)[0] * w).sum()
            x[index] = original
            numeric[index] = (plus - minus) / (2 * h)
        assert np.linalg.norm(grad - numeric) <= 1e-6 * max(np.linalg.norm(numeric), 1e-12)


def test_fused_elementwise_chain(rt, fp64, rng):
    """A tree of elementwise calls, each read only by the next, becomes one call: one launch forward,
    one per input backward, the unfused calls' numbers (float32) and central differences (float64)."""
    layers, (a, b) = inputs((5, 7), (1, 7))
    y = ops.exp(ops.tanh(a * 2) + 1) * b - a * a + ops.where(a > 0.5, np.linspace(0, 1, 7), ops.clip(b, -0.2, 0.3))
    model = clnet.Model(layers, y)
    calls = ops.fuse_elementwise(model.calls, model.outputs)
    assert len(model.calls) == 11 and len(calls) == 1
    fused = calls[0]
    assert fused.output is y and fused.inputs == [a, b] and fused.number == y.call.number
    xs = [rng.normal(size=(13, 5, 7)), rng.normal(size=(13, 1, 7))]
    xa, xb = xs
    want = (np.exp(np.tanh(xa * 2) + 1) * xb - xa * xa
            + np.where(xa > 0.5, np.linspace(0, 1, 7), np.clip(xb, -0.2, 0.3)))
    np.testing.assert_allclose(model.predict(xs), want, rtol=2e-6, atol=2e-6)  # (Model.build fuses it too)
    result, _, forward, backward = device_pass(_as_output(fused), xs, np.ones(want.shape))
    np.testing.assert_allclose(result, want, rtol=2e-6, atol=2e-6)
    assert (forward, backward) == (1, 2)
    again = ops.fuse_elementwise(model.calls, model.outputs)[0]  # a layer of its own for float64
    layer_gradient_check(_as_output(again), [rng.normal(size=(2, 5, 7)), rng.normal(size=(2, 1, 7))], rng)


def _as_output(call):
    """A tensor whose producing call is `call` (device_pass takes the op of a tensor's call)."""
    from clnet.layers.base import KerasTensor
    return KerasTensor(call.output.sample_shape, call)


def test_fusion_keeps_tensors_read_elsewhere(rt, rng):
    """A tensor read by two calls, or a model output, ends a fused tree; other calls pass through."""
    layers, (a,) = inputs((4,))
    h = ops.exp(a) * 2                       # read by Dense and by the sum: stays a tensor
    y = ops.tanh(Dense(4)(h) + h) + 1
    model = clnet.Model(layers, y)
    calls = ops.fuse_elementwise(model.calls, model.outputs)
    assert [type(c.layer).__name__ for c in calls] == ["FusedElementwise", "Dense", "FusedElementwise"]
    assert calls[0].output is h and calls[2].inputs == [calls[1].output, h] and calls[1] is model.calls[2]
    assert len(ops.fuse_elementwise(model.calls, [h, y])) == 3
    single = ops.fuse_elementwise(model.calls, [model.calls[0].output, h, y])  # exp(a) kept: nothing to fuse there
    assert single[0] is model.calls[0] and single[1] is model.calls[1]
    result, _, forward, backward = device_pass(_as_output(calls[2]), [rng.normal(size=(3, 4))] * 2, np.ones((3, 4)))
    assert (forward, backward) == (1, 2)


def test_ones_zeros_shape_and_dot(rng):
    assert ops.ones((2, 3)).dtype == np.float32 and ops.ones((2, 3)).sum() == 6
    assert ops.zeros((4,), dtype="float64").dtype == np.float64 and not ops.zeros(4).any()
    x = Input((3, 5))
    assert ops.shape(x) == (None, 3, 5) and ops.shape(np.zeros((2, 7))) == (2, 7)
    w = rng.normal(size=(5, 2))
    model = clnet.Model(x, ops.dot(x, w), floatx="float64")
    data = rng.normal(size=(4, 3, 5))
    np.testing.assert_allclose(model.predict(data), data @ w, rtol=1e-12)
    np.testing.assert_allclose(ops.dot(data[0], w), data[0] @ w, rtol=1e-12)
    with pytest.raises(ValueError, match="clnet's dot is matmul"):
        ops.dot(x, rng.normal(size=(2, 5, 2)))
    with pytest.raises(ValueError, match="shape must be a tuple of non-negative integers"):
        ops.ones((-1, 2))


def test_convert_to_numpy_and_tensor():
    x = Input((3,))
    assert ops.convert_to_tensor(x) is x.output
    np.testing.assert_array_equal(ops.convert_to_numpy(ops.ones((2, 3))), np.ones((2, 3)))
    assert ops.convert_to_tensor([1, 2], dtype="float32").dtype == np.float32
    with pytest.raises(TypeError, match=r"convert_to_numpy: x is a symbolic tensor \(None, 3\)"):
        ops.convert_to_numpy(x)
