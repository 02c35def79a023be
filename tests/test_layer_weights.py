"""A subclassed layer's own weights (add_weight) and constants, tensors without a batch axis: ops
that broadcast them over the batch against numpy in float32 at awkward sizes, their gradients
(summed over the rows) by central differences in float64, eager calls on arrays, `weights`,
saving, ONNX, and the errors."""
import numpy as np
import pytest

import clnet
from clnet import activations, layers, ops
from clnet.model import Model, Sequential
from test_gradients import check_model


class Linear(layers.Layer):
    """Weights declared in __init__, as the subclassing guide's first layer."""

    def __init__(self, units=4, input_dim=3, **kwargs):
        super().__init__(**kwargs)
        self.w = self.add_weight(shape=(input_dim, units), initializer="random_normal", trainable=True)
        self.b = self.add_weight(shape=(units,), initializer="zeros", trainable=True)

    def call(self, inputs):
        return ops.matmul(inputs, self.w) + self.b


class LazyLinear(layers.Layer):
    """Weights declared in build(input_shape), once the input's width is known."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform", name="kernel")
        self.b = self.add_weight(shape=(self.units,), initializer="random_normal", name="bias")

    def call(self, inputs):
        return ops.dot(inputs, self.w) + self.b


class Block(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.first, self.second, self.head = LazyLinear(6), LazyLinear(5), LazyLinear(2)

    def call(self, inputs):
        return self.head(activations.relu(self.second(activations.relu(self.first(inputs)))))


class Scale(layers.Layer):
    """A weight broadcast over the batch and the steps, one made of weights alone (exp of a weight,
    computed once per step as one row) and a frozen weight."""

    def build(self, input_shape):
        self.log_scale = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="log_scale")
        self.shift = self.add_weight(shape=(1, input_shape[-1]), initializer="random_normal", name="shift")
        self.frozen = self.add_weight(shape=(), initializer="ones", trainable=False, name="frozen")

    def call(self, inputs):
        return inputs * ops.exp(self.log_scale) + self.shift * self.frozen


class PositionsAdded(layers.Layer):
    """An Embedding called on a constant inside call() (the positions of a sequence): its output
    has no batch axis and is broadcast over the batch."""

    def __init__(self, steps, width, **kwargs):
        super().__init__(**kwargs)
        self.project = layers.Dense(width)
        self.positions = layers.Embedding(steps, width)

    def call(self, inputs):
        steps = ops.shape(inputs)[-2]
        return self.project(inputs) + self.positions(ops.arange(0, steps))


def test_a_layer_called_on_arrays_computes_now_and_lists_its_weights():
    x = ops.ones((2, 3))
    linear = Linear(4, 3)
    assert linear.weights == [linear.w, linear.b] and [w.name for w in linear.weights] == ["variable", "variable_1"]
    with pytest.raises(ValueError, match="has no value yet"):
        linear.w.numpy()
    y = linear(x)
    np.testing.assert_allclose(y, x @ linear.w.numpy() + linear.b.numpy(), rtol=1e-6)
    assert linear.w.numpy().std() < 0.2 and not linear.b.numpy().any()  # random_normal (0.05), zeros
    linear.b.assign(np.arange(4.0))
    np.testing.assert_allclose(linear(x), x @ linear.w.numpy() + np.arange(4.0), rtol=1e-6)
    block = Block()
    out = block(np.ones((3, 7), np.float32))
    assert out.shape == (3, 2) and len(block.weights) == 6 and len(block.trainable_weights) == 6
    assert [w.path for w in block.weights][:2] == [f"{block.first.name}/kernel", f"{block.first.name}/bias"]
    dense = layers.Dense(3)
    assert dense.weights == []
    dense(np.ones((2, 5), np.float32))
    assert [w.shape for w in dense.weights] == [(5, 3), (3,)] and dense.weights == dense.weights


def test_weights_in_ops_against_numpy_in_float32(rng):
    """Awkward sizes: 13 rows, 7 features, 5 units; the ops broadcast the weights over the rows."""
    x = layers.Input((7,))
    linear, scale = LazyLinear(5), Scale()
    model = Model(x, scale(linear(x)), seed=3)
    data = rng.normal(size=(13, 7)).astype(np.float32)
    w, b = linear.w.numpy(), linear.b.numpy()
    log_scale, shift = scale.log_scale.numpy(), scale.shift.numpy()
    assert scale.frozen.numpy() == 1.0 and not scale.frozen.trainable
    want = (data @ w + b) * np.exp(log_scale) + shift
    np.testing.assert_allclose(model.predict(data), want, rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(model(data), model.predict(data))  # a model called on arrays, as Keras's
    assert len(model.trainable_weights) == 4 and len(model.non_trainable_weights) == 1


def test_weight_gradients_are_summed_over_the_rows(rng):
    """Central differences in float64 of every weight (and the input), through matmul with a
    weight, a weight times a batch over steps, an op of weights alone, and a frozen weight."""
    x = layers.Input((3, 4))
    model = Model(x, Scale()(LazyLinear(4)(x)), floatx="float64", seed=1)
    model.loss_name = "mse"
    check_model(model, rng.normal(size=(5, 3, 4)), rng.normal(size=(5, 3, 4)), rng)


def test_a_layer_called_on_a_constant_has_no_batch_axis(rng):
    """Positions through an Embedding, once per step, broadcast over the batch; the embedding's
    gradient is summed over the rows (float64 central differences)."""
    x = layers.Input((4, 3))
    block = PositionsAdded(4, 2)
    model = Model(x, block(x), floatx="float64", seed=2)
    constant = [l for l in model.layers if isinstance(l, layers.Constant)]
    assert len(constant) == 1 and constant[0].output.shape == (4,)
    assert block.positions.output.shape == (4, 2)
    data = rng.normal(size=(6, 4, 3))
    kernel, bias = block.project.get_weights()
    np.testing.assert_allclose(model.predict(data), data @ kernel + bias + block.positions.get_weights()[0],
                               rtol=1e-12)
    model.loss_name = "mse"
    check_model(model, data[:3], rng.normal(size=(3, 4, 2)), rng)


def test_weights_train_save_and_export(tmp_path, rng):
    x = layers.Input((5,))
    block = Block()
    model = Model(x, block(x), seed=4)
    model.compile(clnet.optimizers.Adam(0.01), "mse")
    data = rng.normal(size=(64, 5)).astype(np.float32)
    target = data[:, :2] * 0.5 - data[:, 2:4]
    before = model.evaluate(data, target)
    model.fit(data, target, epochs=30, batch_size=16, verbose=0)
    assert model.evaluate(data, target) < 0.5 * before
    path = tmp_path / "block.h5"
    model.save(path)
    loaded = clnet.load_model(path)
    np.testing.assert_array_equal(loaded.predict(data), model.predict(data))
    onnx = pytest.importorskip("onnxruntime")
    model.export(tmp_path / "block.onnx")
    session = onnx.InferenceSession(str(tmp_path / "block.onnx"))
    got = session.run(None, {session.get_inputs()[0].name: data})[0]
    np.testing.assert_allclose(got, model.predict(data), rtol=1e-5, atol=1e-6)


def test_launches_of_a_step_with_weights(rng):
    """`ops.matmul(x, w) + b` launches one kernel more than Dense, which adds its bias inside its
    product: in a training step (the weights' gradients summed over the rows on the device, no
    host read) and in a prediction."""
    data, target = rng.normal(size=(16, 6)).astype(np.float32), rng.normal(size=(16, 3)).astype(np.float32)
    rt = clnet.runtime()
    counts = []
    for layer in (Linear(3, 6), layers.Dense(3)):
        x = layers.Input((6,))
        model = Model(x, layer(x), seed=5)
        model.compile(clnet.optimizers.SGD(0.1), "mse")
        model.train_on_batch(data, target)
        before = rt.launches
        model.train_on_batch(data, target)
        middle = rt.launches
        model.predict_on_batch(data)
        counts.append((middle - before, rt.launches - middle))
    (step, predict), (dense_step, dense_predict) = counts
    assert (step, predict) == (dense_step + 1, dense_predict + 1), counts


def test_what_weights_and_constants_refuse():
    x = layers.Input((3,))

    class Concatenated(layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(3,))

        def call(self, inputs):
            return layers.Concatenate()([inputs, self.w])

    with pytest.raises(ValueError, match=r"without a batch axis \(a weight or a constant: \(3,\)\); it takes one or "
                                         "the other, not both"):
        Concatenated()(x)

    class Normalised(layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(3, 3))

        def call(self, inputs):
            return inputs * ops.sum(self.w, axis=-1)

    with pytest.raises(ValueError, match=r"ops.sum .*tensors with one \(its axes count it\)"):
        Normalised()(x)

    class OnlyWeights(layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(3,))

        def call(self, inputs):
            return self.w * 2.0

    with pytest.raises(ValueError, match="does not depend on any input"):
        Model(x, OnlyWeights()(x))
    with pytest.raises(ValueError, match="unknown initializer 'nonsense'"):
        layers.Layer().add_weight(shape=(2,), initializer="nonsense")
    with pytest.raises(ValueError, match="regularizer"):
        layers.Layer().add_weight(shape=(2,), regularizer="l2")
    with pytest.raises(ValueError, match="shape must be a tuple of positive integers"):
        layers.Layer().add_weight(shape=(0, 2))
    linear = Linear(2, 3)
    linear(np.ones((1, 3), np.float32))
    with pytest.raises(ValueError, match=r"has shape \(3, 2\), got a value of shape \(2, 3\)"):
        linear.w.assign(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"on an array of shape \(3,\)"):
        linear(np.ones(3))


def test_a_model_with_weights_of_its_own_round_trips_its_config(rng):
    """The functional guide's CustomDense: get_config, then Model.from_config(config,
    custom_objects=...) gives a model of the same layers (the traced class itself is not named)."""
    x = layers.Input((4,))
    model = Model(x, LazyLinear(3)(x), seed=6)
    config = model.get_config()
    assert [entry["class_name"] for entry in config["layers"]] == ["Input", "Weight", "Weight", "MatMul",
                                                                   "Elementwise"]
    again = Model.from_config(config, custom_objects={"LazyLinear": LazyLinear})
    again.set_weights(model.get_weights())
    data = rng.normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_array_equal(again.predict(data), model.predict(data))
