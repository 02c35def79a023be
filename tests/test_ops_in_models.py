"""clnet.ops inside models, as Keras users write them: Python operators on tensors (an Input's
too), chains of elementwise ops fused by Model.build into one generated kernel per chain."""
import numpy as np

import clnet
from clnet import ops
from clnet.layers import Activation, Dense, Input
from clnet.model import Model


def chained(h):
    """exp(h) * 0.5 + h * h - 1 / (1 + h^2): eight elementwise ops, h read by four of them."""
    return ops.exp(h) * 0.5 + h * h - 1.0 / (1.0 + ops.square(h))


def chained_numpy(h):
    return np.exp(h) * 0.5 + h * h - 1.0 / (1.0 + h ** 2)


def between_layers(middle, floatx="float64"):
    x = Input((4,))
    model = Model(x, Dense(2)(middle(Dense(3)(x))), floatx=floatx, seed=1)
    model.compile("sgd", "mse")
    return model


def test_a_chain_of_ops_runs_as_one_step(rng):
    """The chain's model steps Dense, one fused kernel, Dense, and launches what a model with an
    Activation layer in its place does: one launch forward, one backward."""
    fused, activation = between_layers(chained, "float32"), between_layers(Activation("tanh"), "float32")
    assert [type(runner).__name__ for runner, _ in fused.runs] == ["Dense", "FusedElementwise", "Dense"]
    assert len(fused.layers) == 1 + 2 + 8  # the graph keeps every op: summary, config, export
    rt = clnet.runtime()
    data, target = rng.normal(size=(8, 4)), rng.normal(size=(8, 2))
    counts = []
    for model in (fused, activation):
        model.train_on_batch(data, target)
        before = rt.launches
        model.train_on_batch(data, target)
        counts.append(rt.launches - before)
    assert counts[0] == counts[1]
    w1, b1, w2, b2 = fused.get_weights()
    np.testing.assert_allclose(fused.predict(data), chained_numpy(data @ w1 + b1) @ w2 + b2, rtol=2e-5, atol=1e-6)


def test_a_fused_chain_trains_by_its_gradients(fp64, rng):
    """compute_gradients through the fused chain against central differences of the loss."""
    model = between_layers(chained)
    data, target = rng.normal(size=(5, 4)) * 0.5, rng.normal(size=(5, 2))
    loss, grads, dx = model.compute_gradients(data, target)
    weights = model.get_weights()

    def loss_at(ws):
        model.set_weights(ws)
        return model.test_on_batch(data, target)

    for i, w in enumerate(weights):
        numeric = np.zeros_like(w)
        for index in np.ndindex(w.shape):
            for sign in (1, -1):
                moved = [v.copy() for v in weights]
                moved[i][index] += sign * 1e-6
                numeric[index] += sign * loss_at(moved) / 2e-6
        np.testing.assert_allclose(grads[i], numeric, rtol=1e-6, atol=1e-8)
    model.set_weights(weights)
    np.testing.assert_allclose(loss, model.test_on_batch(data, target), rtol=1e-14)


def test_operators_on_inputs_and_slices(rng):
    """`Input * 2`, `1 - x`, `-x`, `x[:, 1:]` and `x @ w` as on Keras's Input tensor."""
    x = Input((3, 4))
    w = rng.normal(size=(4, 2))
    y = (1 - x * 2)[:, 1:] @ w + (-x[:, :2, 0:1])
    model = Model(x, y, floatx="float64")
    data = rng.normal(size=(6, 3, 4))
    want = (1 - data * 2)[:, 1:] @ w - data[:, :2, 0:1]
    np.testing.assert_allclose(model.predict(data), want, rtol=1e-13, atol=1e-14)


def test_a_residual_sum_written_with_plus_folds_as_the_add_layer_does(fp64, rng):
    """`x + attention(x)` launches what `Add()([x, attention(x)])` does (the sum folded into the
    attention's output projection), with the same outputs and gradients."""
    rt, results = clnet.runtime(), []
    data, target = rng.normal(size=(6, 8, 16)), rng.normal(size=(6, 4))
    for plus in (True, False):
        clnet.utils.clear_session()
        x = Input((8, 16))
        a = clnet.layers.MultiHeadAttention(2, 8)(x, x)
        h = clnet.layers.LayerNormalization()(x + a if plus else clnet.layers.Add()([x, a]))
        model = Model(x, Dense(4)(clnet.layers.GlobalAveragePooling1D()(h)), floatx="float64", seed=1)
        model.compile("sgd", "mse")
        model.train_on_batch(data, target)
        before = rt.launches
        model.train_on_batch(data, target)
        results.append((rt.launches - before, model.predict(data), model.compute_gradients(data, target)[1]))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])
    for got, want in zip(results[0][2], results[1][2]):
        np.testing.assert_array_equal(got, want)
