"""Layers and models written as Keras's subclasses (call() traced into the graph), and models
called on tensors as layers."""
import numpy as np
import pytest

import clnet
from clnet import layers, ops
from clnet.model import Model, Sequential


class ResidualBlock(layers.Layer):
    """The transformer pattern: layers made in __init__, a residual sum and a normalisation,
    `training` passed along as Keras code does."""

    def __init__(self, width, rate=0.25, **kwargs):
        super().__init__(**kwargs)
        self.inner = Sequential([layers.Dense(2 * width, "relu"), layers.Dense(width)])
        self.dropout = layers.Dropout(rate)
        self.norm = layers.LayerNormalization(epsilon=1e-6)

    def call(self, inputs, training=None):
        return self.norm(inputs + self.dropout(self.inner(inputs), training=training))


def block_model(block, floatx="float64"):
    x = layers.Input((3, 4))
    return Model(x, layers.Dense(2)(block(x)), floatx=floatx, seed=2)


def test_a_subclassed_layer_is_its_layers_calls(rng):
    """The traced block computes what the same layers wired by hand compute, and its layers are
    the model's (built once: the model holds them, the block adds no call of its own)."""
    block = ResidualBlock(4, name="block")
    model = block_model(block)
    assert [l.name for l in model.layers] == ["input_layer", "dense", "dense_1", "dropout", "add", "layer_normalization",
                                              "dense_2"]
    assert block.built and not block.inner.built  # (its layers are built, by the model that holds them)
    x = layers.Input((3, 4))
    first, second, dropout, norm, head = (layers.Dense(8, "relu"), layers.Dense(4), layers.Dropout(0.25),
                                          layers.LayerNormalization(epsilon=1e-6), layers.Dense(2))
    wired = Model(x, head(norm(ops.add(x, dropout(second(first(x)))))), floatx="float64", seed=2)
    wired.set_weights(model.get_weights())
    data = rng.normal(size=(5, 3, 4))
    np.testing.assert_array_equal(model.predict(data), wired.predict(data))
    for m in (model, wired):
        m.compile(clnet.optimizers.SGD(0.1), "mse")
        m.fit(data, rng.normal(size=(5, 3, 2)) * 0 + 1, batch_size=5, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(model.get_weights(), wired.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_a_subclassed_layer_called_twice_shares_its_weights(rng):
    block = ResidualBlock(4)
    a, b = layers.Input((3, 4)), layers.Input((3, 4))
    model = Model([a, b], ops.concatenate([block(a), block(b)], axis=1), floatx="float64")
    assert len(model.get_weights()) == 6  # two Dense, one LayerNormalization: once
    x = rng.normal(size=(2, 3, 4))
    out = model.predict([x, x])
    np.testing.assert_array_equal(out[:, :3], out[:, 3:])


class TwoLayers(clnet.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = layers.Dense(6, "tanh")
        self.head = layers.Dense(3, "softmax")

    def call(self, inputs):
        return self.head(self.hidden(inputs) * 2.0)


def test_a_subclassed_model_traces_on_its_first_data_and_saves(tmp_path, rng):
    model = TwoLayers(floatx="float64", seed=1)
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = rng.normal(size=(16, 5)), rng.integers(0, 3, 16)
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert sorted(history.history) == ["accuracy", "loss"] and model.built
    w1, b1, w2, b2 = model.get_weights()
    z = np.tanh(x @ w1 + b1) * 2 @ w2 + b2
    np.testing.assert_allclose(model.predict(x), np.exp(z) / np.exp(z).sum(-1, keepdims=True), rtol=1e-12)
    model.save(tmp_path / "sub.h5")
    loaded = clnet.load_model(tmp_path / "sub.h5")  # as the functional graph call() traced
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    with pytest.raises(clnet.model.NotBuiltError, match="traced on Inputs of the first data's shape"):
        TwoLayers().build()


def test_a_model_called_on_a_tensor_is_a_nested_model(rng):
    """A Sequential made without an Input, called on a tensor, is built for it and its layers
    called in the outer model: training the outer model trains the inner one's weights."""
    inner = Sequential([layers.Dense(4, "relu"), layers.Dense(2)], floatx="float64")
    x = layers.Input((3,))
    outer = Model(x, layers.Dense(1)(inner(x)), floatx="float64")
    assert [l.name for l in outer.layers] == ["input_layer", "dense", "dense_1", "dense_2"]
    data = rng.normal(size=(8, 3))
    inner.build((3,))  # its layers, built by the outer model, are shared
    before = inner.predict(data)
    outer.compile("sgd", "mse")
    outer.fit(data, rng.normal(size=(8, 1)), epochs=1, verbose=0)
    assert not np.array_equal(inner.predict(data), before)
    functional = Model(x, {"a": inner(x)}, floatx="float64")
    np.testing.assert_array_equal(functional(x)["a"].shape, (None, 2))
    with pytest.raises(ValueError, match=r"input 'input_layer' takes tensors of shape \(None, 3\), got \(None, 4\)"):
        functional(layers.Input((4,)))


class ReturnsNumbers(layers.Layer):
    def call(self, inputs):
        return np.zeros(3)


class Branches(layers.Layer):
    def call(self, inputs):
        return inputs if inputs > 0 else -inputs


def test_what_cannot_be_traced_says_so():
    x = layers.Input((3,))
    with pytest.raises(TypeError, match=r"ReturnsNumbers 'returns_numbers'.call\(\) returned array"):
        ReturnsNumbers()(x)
    with pytest.raises(TypeError, match="has no truth value") as raised:
        Branches()(x)
    assert "while tracing Branches 'branches'.call()" in "".join(raised.value.__notes__)
    with pytest.raises(ValueError, match="training=True: clnet runs each layer in the model's mode"):
        layers.Dropout(0.5)(x, training=True)
    with pytest.raises(TypeError, match=r"ResidualBlock 'residual_block' was called on 3"):
        ResidualBlock(3)(3)


def test_load_model_takes_keras_arguments(tmp_path, rng):
    """load_model(path, custom_objects=..., compile=False), as Keras scripts call it: a traced
    class given as a custom object is not needed (the file holds its layers); compile=False gives
    the weights without the optimizer."""
    x = layers.Input((3, 4))
    model = Model(x, layers.Dense(2)(ResidualBlock(4)(x)), floatx="float64")
    model.compile("adam", "mse")
    data = rng.normal(size=(4, 3, 4))
    model.fit(data, rng.normal(size=(4, 3, 2)), epochs=1, verbose=0)
    model.save(tmp_path / "block.h5")
    loaded = clnet.load_model(tmp_path / "block.h5", custom_objects={"ResidualBlock": ResidualBlock})
    np.testing.assert_array_equal(loaded.predict(data), model.predict(data))
    bare = clnet.load_model(tmp_path / "block.h5", compile=False)
    assert not bare.compiled and bare.epoch == 1
    np.testing.assert_array_equal(bare.predict(data), model.predict(data))
    with pytest.raises(TypeError, match=r"custom_objects\['f'\] must be a clnet Layer class"):
        clnet.load_model(tmp_path / "block.h5", custom_objects={"f": len})


def test_time_distributed_applies_a_last_axis_layer_to_every_step(rng):
    """TimeDistributed(Dense) is the Dense over (time, features) rows, one set of weights (the
    wrapper traces to the inner layer's call); layers that need a whole step say they are not
    supported."""
    x = layers.Input((5, 3))
    inner = layers.Dense(4, "tanh")
    model = Model(x, layers.TimeDistributed(layers.Dropout(0.5))(layers.TimeDistributed(inner)(x)), floatx="float64")
    assert [l.name for l in model.layers] == ["input_layer", "dense", "dropout"]
    data = rng.normal(size=(2, 5, 3))
    kernel, bias = inner.get_weights()
    np.testing.assert_allclose(model.predict(data), np.tanh(data @ kernel + bias), rtol=1e-13)
    with pytest.raises(NotImplementedError, match=r"TimeDistributed\(Conv2D 'conv2d'\) is not supported yet"):
        layers.TimeDistributed(layers.Conv2D(2, 3))
    with pytest.raises(ValueError, match=r"needs inputs of shape \(batch, time, ...\), got \(None, 3\)"):
        layers.TimeDistributed(layers.Dense(2))(layers.Input((3,)))


def test_time_distributed_takes_softmax_and_layer_normalization_over_the_last_axis_only(rng):
    """Softmax is an Activation subclass; its axis (and LayerNormalization's) decides, not the class:
    over axis -1 each step is normalised on its own, over another axis the wrapper refuses."""
    x = layers.Input((5, 3))
    softmax, norm = layers.TimeDistributed(layers.Softmax()), layers.TimeDistributed(layers.LayerNormalization())
    model = Model(x, [softmax(x), norm(x)], floatx="float64")
    data = rng.normal(size=(2, 5, 3))
    e = np.exp(data - data.max(axis=-1, keepdims=True))
    got_softmax, got_norm = model.predict(data)
    np.testing.assert_allclose(got_softmax, e / e.sum(axis=-1, keepdims=True), rtol=1e-12)
    centred = data - data.mean(axis=-1, keepdims=True)
    np.testing.assert_allclose(got_norm, centred / np.sqrt(data.var(axis=-1, keepdims=True) + 1e-3), rtol=1e-10)
    for layer, label in [(layers.Softmax(axis=1), "Softmax 'softmax_1'"),
                         (layers.Softmax(axis=2), "Softmax 'softmax_2'"),
                         (layers.LayerNormalization(axis=1), "LayerNormalization 'layer_normalization_1'")]:
        with pytest.raises(NotImplementedError, match=rf"TimeDistributed\({label}\) is not supported yet"):
            layers.TimeDistributed(layer)


class BranchesOnTraining(layers.Layer):
    """The subclassing guide's CustomDropout shape: Python `if training:` around the computation."""

    def call(self, inputs, training=None):
        if training:
            return inputs * 0.5
        return inputs


class PassesTrainingOn(clnet.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.block = ResidualBlock(3)

    def call(self, inputs, training=None):
        return self.block(inputs, training=training)


def test_training_in_a_traced_call_is_the_models_mode(rng):
    """`training` not given is the model's mode: passed along it is accepted, and `if training:`
    raises while tracing (the graph serves fit and predict alike) instead of tracing one branch."""
    x = layers.Input((3,))
    with pytest.raises(TypeError, match="`if training:` in a traced call\\(\\) cannot be traced") as raised:
        BranchesOnTraining()(x)
    assert "while tracing BranchesOnTraining" in "".join(raised.value.__notes__)
    model = PassesTrainingOn(floatx="float64")
    data = rng.normal(size=(4, 2, 3))
    assert model.predict(data).shape == (4, 2, 3)
    with pytest.raises(ValueError, match="training=False: clnet runs each layer in the model's mode"):
        ResidualBlock(3)(layers.Input((2, 3)), training=False)


class TwiceEachBatch(clnet.Model):
    """A step of its own, made of the public one: two updates per batch."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.head = layers.Dense(2)

    def call(self, inputs):
        return self.head(inputs)

    def train_step(self, data):
        super().train_step(data)
        super().train_step(data)


def test_fit_runs_the_models_train_step(rng):
    x, y = rng.normal(size=(12, 3)), rng.normal(size=(12, 2))
    twice = TwiceEachBatch(floatx="float64", seed=3)
    twice.compile(clnet.optimizers.SGD(0.1), "mse")
    twice.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert twice.optimizer.iterations == 6
    inputs = layers.Input((3,))
    once = Model(inputs, layers.Dense(2)(inputs), floatx="float64", seed=3)
    once.compile(clnet.optimizers.SGD(0.1), "mse")
    once.set_weights(_initial_weights(3, x))
    for start in range(0, 12, 4):
        for _ in range(2):
            once.train_on_batch(x[start:start + 4], y[start:start + 4])
    for got, want in zip(twice.get_weights(), once.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def _initial_weights(seed, x):
    fresh = TwiceEachBatch(floatx="float64", seed=seed)
    fresh.predict(x[:1])  # (traced and built on its first data)
    return fresh.get_weights()
