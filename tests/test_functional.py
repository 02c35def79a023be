"""The functional API: graphs of layer calls (residuals, merges, several inputs, shared layers),
gradient-checked in float64, checked against numpy, saved and resumed; Sequential is the same
engine over a chain."""
import io

import numpy as np
import pytest

import clnet
from clnet.layers import Add, Concatenate, Dense, Flatten, Input, Multiply
from test_gradients import check_model


def residual(floatx="float64", seed=3):
    x = Input((5,), name="x")
    h = Dense(5, "tanh", name="inner")(x)
    s = Add(name="skip")([x, h])
    y = Dense(3, "softmax", name="head")(s)
    return clnet.Model(x, y, floatx=floatx, seed=seed)


def two_inputs_shared(floatx="float64"):
    """Two inputs through one shared Dense, joined by Concatenate and Multiply: every merge, a
    shared layer (its gradients summed over its calls) and a tensor read twice (fan-out)."""
    a, b = Input((4,), name="a"), Input((4,), name="b")
    shared = Dense(3, "swish", name="shared")
    ha, hb = shared(a), shared(b)
    joined = Concatenate(name="join")([ha, hb, a])          # (None, 10)
    gate = Dense(10, "sigmoid", name="gate")(joined)
    mixed = Multiply(name="mix")([joined, gate])
    return clnet.Model([a, b], Dense(2, name="out")(mixed), floatx=floatx, seed=1)


def folded(floatx="float64", tiles=None):
    """h + Dense(h), the Dense linear: the residual sum the model folds into its launch."""
    x = Input((5,), name="x")
    h = Dense(4, "tanh", name="inner", tiles=tiles)(x)
    s = Add(name="skip")([Dense(4, name="proj", tiles=tiles)(h), h])
    return clnet.Model(x, Dense(3, "softmax", name="head", tiles=tiles)(s), floatx=floatx, seed=4)


# The GPU form of Dense, forced with small tiles (its epilogue adds the residual as the CPU form's does).
TILED = {"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}


def test_residual_graph_gradients(fp64, rng):
    model = residual()
    model.loss_name = "categorical_crossentropy"
    check_model(model, rng.normal(size=(7, 5)), rng.integers(0, 3, 7), rng)


@pytest.mark.parametrize("tiles", [None, TILED], ids=["device", "tiled"])
def test_folded_residual_gradients(fp64, rng, tiles):
    model = folded(tiles=tiles)
    assert [call.layer.name for call in model.calls if id(call) in model._folded] == ["skip"]
    model.loss_name = "categorical_crossentropy"
    check_model(model, rng.normal(size=(7, 5)), rng.integers(0, 3, 7), rng)


def test_a_residual_sum_folds_only_where_its_other_term_is_ready(rng):
    """The linear Dense runs before the tanh Dense that makes the Add's other term, so it cannot
    add it: nothing folds, and the sum is the Add's. A sum of three, or of a Dense read twice, does
    not fold either."""
    x = Input((5,), name="x")
    first = Dense(4, name="first")(x)            # linear, but made before `later`
    later = Dense(4, "tanh", name="later")(x)
    model = clnet.Model(x, Add(name="sum")([first, later]), floatx="float32", seed=2)
    assert model._folded == {}
    (w1, b1, w2, b2), xs = model.get_weights(), rng.normal(size=(9, 5)).astype(np.float32)
    np.testing.assert_allclose(model.predict(xs), xs @ w1 + b1 + np.tanh(xs @ w2 + b2), rtol=1e-5, atol=1e-6)
    h = Dense(4, "tanh")(x)
    three = clnet.Model(x, Add()([h, Dense(4)(h), h]), floatx="float32")
    read_twice = Dense(4)(h)
    twice = clnet.Model(x, Concatenate()([Add()([h, read_twice]), read_twice]), floatx="float32")
    assert three._folded == {} and twice._folded == {}


@pytest.mark.parametrize("tiles", [None, TILED], ids=["device", "tiled"])
def test_a_folded_residual_sum_trains_as_the_add_does(rng, monkeypatch, tiles):
    """The linear Dense adding the residual in its launch gives the Add's sums to the bit (the
    same two terms added) in training and predict, with one launch fewer a step."""
    x, y = rng.normal(size=(37, 5)), rng.integers(0, 3, 37)
    results = []
    for fold in (True, False):
        if not fold:
            monkeypatch.setattr(Dense, "adds_to_output", property(lambda self: False))
        model = folded("float32", tiles)
        assert bool(model._folded) == fold
        model.compile("adam", "sparse_categorical_crossentropy")
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
        rt = clnet.runtime()
        before = rt.launches
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
        results.append((rt.launches - before, model.predict(x, batch_size=16), model.get_weights()))
    (folded_launches, folded_y, folded_w), (added_launches, added_y, added_w) = results
    assert folded_launches == added_launches - 5  # 5 steps, one Sum each
    np.testing.assert_array_equal(folded_y, added_y)
    for a, b in zip(folded_w, added_w):
        np.testing.assert_array_equal(a, b)


def test_shared_layer_merges_and_two_inputs_gradients(fp64, rng):
    model = two_inputs_shared()
    model.loss_name = "mse"
    assert [l.name for l in model.layers] == ["a", "b", "shared", "join", "gate", "mix", "out"]
    check_model(model, [rng.normal(size=(6, 4)), rng.normal(size=(6, 4))], rng.normal(size=(6, 2)), rng)


@pytest.mark.parametrize("rows", [1, 5, 33])
def test_graph_forward_matches_numpy_float32(rows, rng):
    model = two_inputs_shared(floatx="float32")
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    a, b = rng.normal(size=(rows, 4)), rng.normal(size=(rows, 4))
    ws, bs, wg, bg, wo, bo = weights
    swish = lambda z: z / (1 + np.exp(-z))
    joined = np.concatenate([swish(a @ ws + bs), swish(b @ ws + bs), a], axis=1)
    mixed = joined / (1 + np.exp(-(joined @ wg + bg)))
    np.testing.assert_allclose(model.predict([a, b]), mixed @ wo + bo, rtol=2e-5, atol=2e-5)


def test_concatenate_along_a_middle_axis(fp64, rng):
    a, b = Input((2, 3), name="a"), Input((4, 3), name="b")
    joined = Concatenate(axis=1)([a, b])                      # (None, 6, 3)
    assert joined.shape == (None, 6, 3)
    model = clnet.Model([a, b], Dense(2)(Flatten()(joined)), floatx="float64", seed=0)
    model.loss_name = "mse"
    xa, xb = rng.normal(size=(3, 2, 3)), rng.normal(size=(3, 4, 3))
    w, bias = model.get_weights()
    want = np.concatenate([xa, xb], axis=1).reshape(3, -1) @ w + bias
    np.testing.assert_allclose(model.predict([xa, xb]), want, rtol=1e-12)
    check_model(model, [xa, xb], rng.normal(size=(3, 2)), rng)


def test_sequential_is_the_same_engine_as_a_chain_model(rng):
    x, y = rng.normal(size=(64, 6)), rng.integers(0, 3, 64)
    stack = clnet.Sequential([Input((6,)), Dense(8, "relu"), Dense(3, "softmax")], seed=5)
    inputs = Input((6,))
    chain = clnet.Model(inputs, Dense(3, "softmax")(Dense(8, "relu")(inputs)), seed=5)
    for model in (stack, chain):
        model.compile("adam", "categorical_crossentropy", ["accuracy"])
        model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    for a, b in zip(stack.get_weights(), chain.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_launches_per_step_of_a_residual_graph(rng):
    """The engine adds no launches of its own to a graph: per step the gather, inner's forward and
    weight gradients (x needs no gradient: nothing above it is trained), the Add, head's product
    (the loss takes its softmax), transpose of the Add's output (read along rows by head's weight
    gradient; a Dense below writes its own y^T), weight and input gradients, the loss and one
    update. The GPU form's weight gradient makes delta and dL/db itself, and reads x, not x^T."""
    model = residual(floatx="float32")
    model.compile("adam", "categorical_crossentropy")
    x, y = rng.normal(size=(64, 5)), rng.integers(0, 3, 64)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    rt = clnet.runtime()
    before = rt.launches
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    per_step = 1 + (1 + 2) + 1 + (1 + 1 + 3) + 1 + 1
    inner, head = model.layers[1], model.layers[-1]
    per_step -= inner.tiled + head.tiled + (not head.reads_transposed)
    assert model.batch_transposed == inner.reads_transposed  # the gather writes x^T for inner alone
    assert rt.launches - before == 4 * per_step + 1  # + the epoch's one metrics read


def test_fan_out_sums_gradients_with_one_launch(rng):
    """h feeds two layers: its gradient is their sum, one Sum launch more than a chain would need."""
    x = Input((4,))
    h = Dense(6, "tanh")(x)
    chain = clnet.Model(x, Dense(2)(Dense(6)(h)), seed=0)
    x2 = Input((4,))
    h2 = Dense(6, "tanh")(x2)
    forked = clnet.Model(x2, Dense(2)(Add()([Dense(6)(h2), h2])), seed=0)
    counts = []
    for model in (chain, forked):
        model.compile("sgd", "mse")
        model.fit(rng.normal(size=(8, 4)), rng.normal(size=(8, 2)), batch_size=8, verbose=0)
        rt = clnet.runtime()
        before = rt.launches
        model.fit(rng.normal(size=(8, 4)), rng.normal(size=(8, 2)), batch_size=8, verbose=0)
        counts.append(rt.launches - before)
    # + the Sum and, in the CPU form, the last Dense's transpose of the Add's output (the Add
    # itself is folded into the linear Dense(6), which adds h2 in its launch)
    assert counts[1] == counts[0] + 1 + forked.layers[-1].reads_transposed


def test_a_shared_layer_keeps_one_set_of_weights(rng):
    model = two_inputs_shared(floatx="float32")
    assert len(model.get_weights()) == 6 and model.count_params() == 4 * 3 + 3 + 10 * 10 + 10 + 10 * 2 + 2
    model.compile("sgd", "mse")
    before = model.get_weights()
    model.fit([rng.normal(size=(8, 4)), rng.normal(size=(8, 4))], rng.normal(size=(8, 2)), epochs=1, verbose=0)
    assert not np.array_equal(before[0], model.get_weights()[0])


def test_config_round_trip_and_exact_resume(tmp_path, rng, fp64):
    xs, y = [rng.normal(size=(40, 4)), rng.normal(size=(40, 4))], rng.normal(size=(40, 2))
    model = two_inputs_shared()
    model.compile(clnet.optimizers.Adam(0.01), "mse")
    rebuilt = clnet.Model.from_config(model.get_config())
    assert [type(l) for l in rebuilt.layers] == [type(l) for l in model.layers]
    assert rebuilt.get_config() == model.get_config()
    model.fit(xs, y, batch_size=8, epochs=2, verbose=0)
    model.save(tmp_path / "graph.h5")
    model.fit(xs, y, batch_size=8, epochs=4, initial_epoch=2, verbose=0)
    resumed = clnet.load_model(tmp_path / "graph.h5")
    assert isinstance(resumed, clnet.Model) and not isinstance(resumed, clnet.Sequential)
    resumed.fit(xs, y, batch_size=8, epochs=4, initial_epoch=resumed.epoch, verbose=0)
    for a, b in zip(resumed.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    text = io.StringIO()
    model.summary(file=text)
    assert "shared (Dense)" in text.getvalue() and "a, b" in text.getvalue()


def test_mismatched_merge_names_both_layers_and_shapes():
    x = Input((4,))
    a, b = Dense(8, name="left")(x), Dense(9, name="right")(x)
    with pytest.raises(ValueError, match=r"Add 'sum' needs inputs of one shape, got \(None, 8\) from Dense "
                                         r"'left' and \(None, 9\) from Dense 'right'"):
        Add(name="sum")([a, b])
    with pytest.raises(ValueError, match=r"Concatenate 'cat' needs inputs that agree on every axis but -1"):
        Concatenate(name="cat")([Input((2, 3)), Input((4, 3))])
    assert Dense(2)(Input((2, 3))).shape == (None, 2, 2)  # Keras: the last axis


def test_unreachable_inputs_and_outputs():
    a, b, c = Input((3,), name="a"), Input((3,), name="b"), Input((3,), name="c")
    out = Dense(2)(Add()([a, b]))
    with pytest.raises(ValueError, match=r"model input Input 'c' reaches no output"):
        clnet.Model([a, b, c], out)
    with pytest.raises(ValueError, match=r"not reachable from the model's inputs alone: it also depends on Input 'b'"):
        clnet.Model(a, out)
    with pytest.raises(TypeError, match=r"Dense 'dense_1' was called on str"):
        Dense(2)("x")
    with pytest.raises(TypeError, match=r"Dense 'dense_2' was called on ndarray; expected the output of Input"):
        Dense(2)([np.zeros((2, 3)), a])  # (arrays alone compute now, as Keras's eager call)
    with pytest.raises(ValueError, match=r"x must be a list of 2 arrays, one per input \['a', 'b'\], or a dict by input name, got ndarray"):
        clnet.Model([a, b], out).predict(np.zeros((2, 3)))
    with pytest.raises(TypeError, match=r"Add 'add' merges several inputs, which a Sequential stack cannot give"):
        clnet.Sequential([Input((3,)), Add(name="add")])


def test_tensors_say_their_dtype_as_keras():
    """`keras.Input((784,)).dtype` is the functional guide's second line: the declared type, else
    the float type a model computes in."""
    x, ids = Input((4,)), Input((3,), dtype="int32")
    assert x.dtype == "float32" and x.output.dtype == "float32" and ids.dtype == "int32"
    assert Dense(2)(x).dtype == "float32"
    model = clnet.Model(x, Dense(2)(x), floatx="float64")
    assert model.outputs[0].dtype == "float64"


def test_subtract_average_maximum_minimum_merge_as_keras(rng):
    """Keras's other merges (and their functional forms, the guide's `layers.average` of an
    ensemble), traced into ops: values against numpy, and the errors."""
    from clnet import layers
    a, b, c = Input((3,)), Input((3,)), Input((3,))
    outs = [layers.subtract([a, b]), layers.average([a, b, c]), layers.maximum([a, b, c]), layers.minimum([a, b])]
    model = clnet.Model([a, b, c], outs, floatx="float64")
    xs = [rng.normal(size=(4, 3)) for _ in range(3)]
    got = model.predict(xs)
    want = [xs[0] - xs[1], (xs[0] + xs[1] + xs[2]) / 3, np.maximum(np.maximum(xs[0], xs[1]), xs[2]),
            np.minimum(xs[0], xs[1])]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-15)
    with pytest.raises(ValueError, match="takes exactly 2 tensors, got 3"):
        layers.Subtract()([a, b, c])
    with pytest.raises(ValueError, match="needs inputs of one shape"):
        layers.Average()([a, Input((4,))])
