"""Keras's freezing: `layer.trainable = False` (and a model's, and the `trainable` argument every
layer takes) keeps the layer's weights out of training, against Keras's optimizer in numpy
(tests/reference.py): the others train as they would alone, with the step count they share; a
layer unfrozen again starts its moments at zero, those trained before keep theirs. A frozen
BatchNormalization normalises with its moving statistics, in fit too (Keras 3), with the
gradient of that map. The frozen state is saved, and a distribution refuses it."""
import numpy as np
import pytest

import clnet
from clnet import layers
from clnet.layers import BatchNormalization, Dense, Input
from clnet.model import Model, Sequential
from reference import OptimizerReference, batch_norm_infer, numeric_gradients

ADAM = {"learning_rate": 0.05, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": False}


def mlp(seed=2):
    return Sequential([Input((5,)), Dense(4, "tanh"), Dense(3, "tanh"), Dense(2)], floatx="float64", seed=seed)


def forward_backward(weights, x, t):
    """The MLP's mse and its gradients in numpy: weights [W1, b1, W2, b2, W3, b3]."""
    w1, b1, w2, b2, w3, b3 = weights
    h1 = np.tanh(x @ w1 + b1)
    h2 = np.tanh(h1 @ w2 + b2)
    y = h2 @ w3 + b3
    dy = 2 * (y - t) / y.size
    d2 = (dy @ w3.T) * (1 - h2 ** 2)
    d1 = (d2 @ w2.T) * (1 - h1 ** 2)
    return [x.T @ d1, d1.sum(0), h1.T @ d2, d2.sum(0), h2.T @ dy, dy.sum(0)]


def reference_run(weights, x, t, trained_per_step):
    """Keras's Adam on the weights of the layers trained at each step (indices 0, 1, 2): one
    optimizer, one step count; a layer's moments start when it first trains."""
    weights = [w.copy() for w in weights]
    adam = OptimizerReference("adam", [w.size for w in weights], **ADAM)
    for trained in trained_per_step:
        grads = forward_backward(weights, x, t)
        lr = adam.learning_rate()
        for i in (i for layer in trained for i in (2 * layer, 2 * layer + 1)):
            weights[i] = adam.update(i, weights[i].ravel(), grads[i].ravel(), lr).reshape(weights[i].shape)
        adam.iterations += 1
    return weights


def test_frozen_layers_keep_their_weights_and_the_others_train_as_keras_s(rng):
    x, t = rng.normal(size=(8, 5)), rng.normal(size=(8, 2))
    model = mlp()
    model.compile(clnet.optimizers.Adam(0.05), "mse")
    initial = model.get_weights()
    model.layers[1].trainable = False  # (after compile, as Keras's torch backend takes it)
    for _ in range(3):
        model.train_on_batch(x, t)
    for got, kept in zip(model.layers[1].get_weights(), initial[2:4]):  # bit for bit
        np.testing.assert_array_equal(got, kept)
    model.layers[1].trainable = True
    model.layers[0].trainable = False
    trained = model.layers[0].get_weights()
    for _ in range(2):
        model.train_on_batch(x, t)
    for got, kept in zip(model.layers[0].get_weights(), trained):
        np.testing.assert_array_equal(got, kept)
    want = reference_run(initial, x, t, [(0, 2)] * 3 + [(1, 2)] * 2)
    for got, expected in zip(model.get_weights(), want):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert model.optimizer.iterations == 5


def test_what_keras_lists_as_trainable_follows_the_flag():
    model = mlp()
    dense = model.layers[1]
    assert [len(dense.trainable_weights), len(dense.non_trainable_weights)] == [2, 0]
    dense.trainable = False
    assert [len(dense.trainable_weights), len(dense.non_trainable_weights)] == [0, 2]
    assert not any(w.trainable for w in dense.weights) and len(model.trainable_weights) == 4
    model.trainable = False
    assert not model.trainable and not any(layer.trainable for layer in model.layers)
    assert model.trainable_weights == [] and len(model.non_trainable_weights) == 6
    model.trainable = True
    assert all(layer.trainable for layer in model.layers) and len(model.trainable_weights) == 6
    with pytest.raises(TypeError, match=r"trainable must be True or False, got 'no'"):
        dense.trainable = "no"


def test_a_frozen_model_inside_another_trains_only_the_head(rng, tmp_path):
    """Transfer learning as Keras's guide: a trained base set trainable = False, a new head on
    it; the base's weights stay, the head trains; the frozen state is saved and read back."""
    x, y = rng.normal(size=(32, 6)), rng.integers(0, 3, 32)
    base = Sequential([Input((6,)), Dense(8, "relu"), BatchNormalization(), Dense(8, "relu")], seed=1)
    base.compile("adam", "mse")
    base.fit(x, rng.normal(size=(32, 8)), epochs=2, verbose=0)
    kept = base.get_weights()
    base.trainable = False
    inputs = Input((6,))
    outputs = Dense(3, "softmax", name="head")(base(inputs))
    model = Model(inputs, outputs)
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    head = model.get_layer("head").get_weights()
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    for got, want in zip(base.get_weights(), kept):  # moving statistics too: frozen BN infers
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(model.get_layer("head").get_weights()[0], head[0])
    for path in (tmp_path / "m.h5", tmp_path / "m.keras"):
        model.save(path)
        loaded = clnet.load_model(path)
        assert [layer.trainable for layer in loaded.layers] == [layer.trainable for layer in model.layers]
        assert len(loaded.trainable_weights) == 2
        np.testing.assert_allclose(loaded.predict(x), model.predict(x), rtol=1e-6)


def test_every_layer_takes_trainable_as_keras_s():
    embedding = layers.Embedding(10, 4, trainable=False)
    assert not embedding.trainable and layers.Dense(3).trainable
    bidirectional = layers.Bidirectional(layers.LSTM(3), trainable=False)
    assert not bidirectional.forward_layer.trainable and not bidirectional.backward_layer.trainable
    model = Sequential([Input((5,)), embedding, layers.Flatten(), Dense(1)])
    config = model.get_config()
    assert config["layers"][1]["config"]["trainable"] is False  # (after the Input)
    assert "trainable" not in config["layers"][3]["config"]
    assert not Sequential.from_config(config).layers[0].trainable


def test_a_frozen_batch_normalization_normalises_with_its_moving_statistics(rng, fp64):
    """In fit as in predict (Keras 3); its input gradient is that affine map's (float64 central
    differences), and its statistics do not move."""
    x, t = rng.normal(size=(7, 3, 4)) * 2 + 1, rng.normal(size=(7, 3, 4))
    norm = BatchNormalization(axis=1, trainable=False)
    model = Sequential([Input((3, 4)), norm], floatx="float64")
    model.set_weights([rng.random(3) + 0.5, rng.normal(size=3), rng.normal(size=3), rng.random(3) + 0.5])
    model.compile("sgd", "mse")
    gamma, beta, mean, variance = model.get_weights()
    want = batch_norm_infer(x, gamma, beta, mean, variance, 1, norm.epsilon)
    np.testing.assert_allclose(model.predict(x), want, rtol=1e-12)
    loss, _, dx = model.compute_gradients(x, t)
    assert loss == pytest.approx(np.mean((want - t) ** 2), rel=1e-12)
    # (the map is affine: a long step has no truncation error and less rounding)
    numeric, = numeric_gradients(lambda a: batch_norm_infer(a, gamma, beta, mean, variance, 1, norm.epsilon),
                                 [x], 2 * (want - t) / want.size, step=1e-3)
    np.testing.assert_allclose(dx, numeric, rtol=1e-9, atol=1e-12)
    model.fit(x, t, epochs=2, verbose=0)
    np.testing.assert_array_equal(model.get_weights()[2:], [mean, variance])


def test_frozen_layers_below_every_trained_one_run_no_backward_pass(rng):
    x, t = rng.normal(size=(8, 5)), rng.normal(size=(8, 2))
    model = mlp()
    model.compile("sgd", "mse")
    rt = model.rt
    model.train_on_batch(x, t)
    before = rt.launches
    model.train_on_batch(x, t)
    whole = rt.launches - before
    model.layers[0].trainable = False
    model.train_on_batch(x, t)
    before = rt.launches
    model.train_on_batch(x, t)
    assert rt.launches - before < whole


def test_a_distribution_refuses_frozen_layers():
    model = mlp()
    model.layers[0].trainable = False
    with pytest.raises(ValueError, match=r"DataParallel trains every trainable weight, but model .* has layers set "
                                         r"trainable = False"):
        model.compile("sgd", "mse", distribution=clnet.distribute.DataParallel(devices=[0]))


class Scale(layers.Layer):
    """A subclass with a weight of its own (add_weight)."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, inputs):
        return inputs * self.scale


def test_a_subclass_s_own_weight_freezes_with_it(rng, tmp_path):
    x, t = rng.normal(size=(16, 3)), rng.normal(size=(16, 2))
    scale = Scale()
    inputs = Input((3,))
    model = Model(inputs, Dense(2)(scale(inputs)))
    scale.trainable = False
    assert not scale.scale.trainable and len(model.trainable_weights) == 2
    model.compile("adam", "mse")
    model.fit(x, t, epochs=2, verbose=0)
    np.testing.assert_array_equal(scale.scale.numpy(), np.ones(3))
    model.save(tmp_path / "s.h5")
    loaded = clnet.load_model(tmp_path / "s.h5")
    assert len(loaded.trainable_weights) == 2 and len(loaded.weights) == 3
    scale.trainable = True
    model.fit(x, t, epochs=1, verbose=0)
    assert not np.array_equal(scale.scale.numpy(), np.ones(3))
