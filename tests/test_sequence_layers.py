"""Layers and losses on (batch, time, features): Dense on the last axis, the elementwise and
normalising layers, merges, and cross-entropy averaged over every token, as Keras does."""
import numpy as np
import pytest

import clnet
from clnet.layers import (Activation, Add, Concatenate, Dense, Dropout, Flatten, Input, LayerNormalization,
                          Multiply, Softmax)
from clnet.losses import BinaryCrossentropy, CategoricalCrossentropy, SparseCategoricalCrossentropy
from reference import ACTIVATIONS, softmax
from test_gradients import check_model

F32 = np.float32
SEQUENCE_LENGTHS = (1, 2, 7)


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("time,features,units", [(1, 5, 3), (3, 1, 129), (7, 13, 5), (4, 3, 1)])
def test_dense_on_the_last_axis(rng, time, features, units):
    """Dense on (time, features) is the same product at every position; a second Dense reads the
    first's transposed output, a Flatten after it makes the next Dense transpose for itself. The
    float32 gradients agree with the float64 model's."""
    def make(floatx):
        return clnet.Sequential([Input((time, features)), Dense(units, "tanh"), Dense(4, "softmax"), Flatten(),
                                 Dense(2)], floatx=floatx, seed=1)
    model = make("float32")
    assert [l.output_shape for l in model.layers] == [(time, units), (time, 4), (time * 4,), (2,)]
    x, y = rng.normal(size=(5, time, features)), rng.normal(size=(5, 2))
    (k1, b1), (k2, b2), (k3, b3) = (model.layers[i].get_weights() for i in (0, 1, 3))
    h = softmax(np.tanh(x @ k1 + b1) @ k2 + b2)
    close(model.predict(x.astype(F32)), h.reshape(5, -1) @ k3 + b3, rtol=1e-4, atol=1e-5)

    float64 = make("float64")
    float64.set_weights(model.get_weights())
    for m in (model, float64):
        m.compile("sgd", "mse")
    (_, grads, dx), (_, want, want_dx) = model.compute_gradients(x, y), float64.compute_gradients(x, y)
    for g, w in zip(grads, want):
        close(g, w, rtol=1e-4, atol=1e-6)
    close(dx, want_dx, rtol=1e-4, atol=1e-6)


def test_elementwise_layers_on_sequences(rng):
    """Activation, Softmax (last axis), Dropout (inference), LayerNormalization(-1) and the merges
    on (batch, time, features) against numpy."""
    time, features = 7, 5
    x = Input((time, features))
    h = Dense(features, "relu")(x)
    act = Activation("gelu")(h)
    soft = Softmax()(h)
    norm = LayerNormalization(epsilon=1e-3)(Dropout(0.5)(act))
    added = Add()([x, norm])
    product = Multiply()([added, soft])
    out = Concatenate(axis=-1)([product, x])
    model = clnet.Model(x, out, seed=2)
    assert model.output_shape == (time, 2 * features)
    xs = rng.normal(size=(3, time, features)).astype(F32)
    kernel, bias = model.layers[1].get_weights()
    gamma, beta = model.layers[5].get_weights()
    pre = np.maximum(xs @ kernel + bias, 0)
    gelu = ACTIVATIONS["gelu"][0](pre.astype(np.float64), 0, 0)
    mean, var = gelu.mean(-1, keepdims=True), gelu.var(-1, keepdims=True)
    normed = (gelu - mean) / np.sqrt(var + 1e-3) * gamma + beta
    want = np.concatenate([(xs + normed) * softmax(pre), xs], axis=-1)
    close(model.predict(xs), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("time", SEQUENCE_LENGTHS)
def test_sequence_gradients(fp64, time):
    """A residual block on (time, features) through Dense, LayerNormalization, Dropout (its
    training mask), the merges and a per-token softmax, trained on per-token class ids."""
    rng = np.random.default_rng(time)
    x = Input((time, 4))
    h = Dense(4, "tanh")(x)
    h = Dropout(0.25, seed=1)(LayerNormalization()(h))
    a = Add()([x, h])
    m = Multiply()([a, Dense(4, use_bias=False)(x)])
    c = Concatenate()([Activation("swish", b=1.2)(a), m])
    model = clnet.Model(x, Dense(3, "softmax")(c), floatx="float64", seed=3)
    model.loss_name = "sparse_categorical_crossentropy"
    check_model(model, rng.normal(size=(4, time, 4)), rng.integers(0, 3, (4, time)), rng, training=True)


LOSSES = {  # name: (loss, output activation, targets)
    "sparse": ("sparse_categorical_crossentropy", "softmax", "ids"),
    "categorical": ("categorical_crossentropy", "softmax", "one-hot"),
    "sparse_logits": (SparseCategoricalCrossentropy(from_logits=True), None, "ids"),
    "categorical_logits": (CategoricalCrossentropy(from_logits=True), None, "one-hot"),
    "unfolded": ("categorical_crossentropy", "sigmoid", "one-hot"),
    "softmax_layer": ("sparse_categorical_crossentropy", "softmax layer", "ids"),
    "mse": ("mse", "softmax", "real"),
    "binary": ("binary_crossentropy", "sigmoid", "binary"),
    "binary_logits": (BinaryCrossentropy(from_logits=True), None, "binary"),
}


def sequence_targets(kind, rng, rows, time, classes):
    if kind == "ids":
        return rng.integers(0, classes, (rows, time))
    if kind == "one-hot":
        return np.eye(classes)[rng.integers(0, classes, (rows, time))]
    if kind == "binary":
        return rng.integers(0, 2, (rows, time, classes)).astype(float)
    return rng.normal(size=(rows, time, classes))


@pytest.mark.parametrize("time", SEQUENCE_LENGTHS)
@pytest.mark.parametrize("case", sorted(LOSSES))
def test_time_distributed_loss_gradients(fp64, case, time):
    loss, output, kind = LOSSES[case]
    rng = np.random.default_rng(time + 10)
    classes = 9  # more than 8: the softmax's exp runs eight classes at once, then the rest
    layers = [Input((time, 3)), Dense(5, "tanh")]
    layers += [Dense(classes), Softmax()] if output == "softmax layer" else [Dense(classes, output)]
    model = clnet.Sequential(layers, floatx="float64", seed=4)
    model.loss_name = loss
    check_model(model, rng.normal(size=(3, time, 3)), sequence_targets(kind, rng, 3, time, classes), rng)


def keras_style_loss(case, z, y):
    """The mean over every token of Keras's loss (and accuracy) for logits z (rows, time, classes)."""
    loss, output, kind = LOSSES[case]
    t = np.eye(z.shape[-1])[y] if kind == "ids" else y
    p = softmax(z)
    if output is None:  # from_logits: log softmax, exactly
        log_p = z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
    else:
        log_p = np.log(np.clip(p, 1e-7, 1 - 1e-7))
    return -(t * log_p).sum(-1).mean(), (p.argmax(-1) == t.argmax(-1)).mean()


@pytest.mark.parametrize("case", ["sparse", "categorical", "sparse_logits", "categorical_logits"])
def test_token_mean_loss_and_accuracy(rng, case):
    """evaluate averages the loss and the accuracy over all batch x time tokens (float32, awkward
    sizes), and fit lowers it. Large logits stay finite: the softmax subtracts the maximum."""
    loss, output, kind = LOSSES[case]
    time, classes = 5, 129
    model = clnet.Sequential([Input((time, 3)), Dense(classes, output)], seed=5)
    model.compile(clnet.optimizers.Adam(0.05), loss, ["accuracy"])
    x = rng.normal(size=(11, time, 3)).astype(F32)
    y = sequence_targets(kind, rng, 11, time, classes)
    kernel, bias = model.layers[0].get_weights()
    want_loss, want_accuracy = keras_style_loss(case, x @ kernel + bias, y)
    got_loss, got_accuracy = model.evaluate(x, y, batch_size=4)
    close(got_loss, want_loss, rtol=1e-5)
    close(got_accuracy, want_accuracy)
    if output is None:
        model.set_weights([kernel * 3000, bias])
        big_loss, _ = model.evaluate(x, y)
        close(big_loss, keras_style_loss(case, x @ (kernel * 3000) + bias, y)[0], rtol=1e-5)
        model.set_weights([kernel, bias])
    history = model.fit(x, y, batch_size=4, epochs=20, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]


def test_from_logits_config_and_checkpoint(tmp_path, rng):
    loss = SparseCategoricalCrossentropy(from_logits=True)
    assert loss.get_config() == {"name": "sparse_categorical_crossentropy", "from_logits": True}
    assert clnet.losses.get(loss.get_config()).from_logits
    assert clnet.losses.get("sparse_categorical_crossentropy").get_config() == "sparse_categorical_crossentropy"
    with pytest.raises(TypeError, match="SparseCategoricalCrossentropy from_logits must be True or False, got 'yes'"):
        SparseCategoricalCrossentropy(from_logits="yes")
    model = clnet.Sequential([Input((3, 2)), Dense(4)], seed=1)
    model.compile("adam", loss)
    x, y = rng.normal(size=(6, 3, 2)), rng.integers(0, 4, (6, 3))
    model.fit(x, y, epochs=2, verbose=0)
    model.save(tmp_path / "m.h5")
    loaded = clnet.load_model(tmp_path / "m.h5")
    assert loaded.loss.from_logits
    close(loaded.evaluate(x, y), model.evaluate(x, y), rtol=0, atol=0)


def test_sequence_target_errors(rng):
    model = clnet.Sequential([Input((3, 2)), Dense(4, "softmax")], seed=1)
    x = rng.normal(size=(6, 3, 2))
    model.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match=r"y has shape \(6, 3, 4\), but loss 'sparse_categorical_crossentropy' on the "
                                         r"model's output \(samples, 3, 4\) expects integer class ids of shape "
                                         r"\(samples, 3\); for one-hot targets use 'categorical_crossentropy'"):
        model.evaluate(x, np.zeros((6, 3, 4)))
    y = rng.integers(0, 4, (6, 3))
    y[4, 2] = 4
    with pytest.raises(ValueError, match=r"y holds label 4 at index \(4, 2\); the model has 4 classes, so labels "
                                         r"must be in 0..3"):
        model.evaluate(x, y)
    with pytest.raises(ValueError, match="y holds class labels that are not whole numbers"):
        model.evaluate(x, y / 2)
    model.compile("sgd", "categorical_crossentropy")  # clnet also makes integer labels one-hot here
    y[4, 2] = 1
    close(model.evaluate(x, y), model.evaluate(x, np.eye(4)[y]), rtol=0, atol=0)
