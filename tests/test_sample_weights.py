"""fit(sample_weight=, class_weight=), evaluate(sample_weight=) and the *_on_batch forms, as Keras
weighs samples: a batch's loss is the weighted sum of its samples' losses over their count, and
compile's metrics are not weighted; against numpy and Keras 3 in float64, and the errors."""
import numpy as np
import pytest

import clnet
from clnet.layers import Dense, Input
from clnet.model import Model


def softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def classifier(seed=3):
    x = Input((4,))
    return Model(x, Dense(3, activation="softmax")(x), floatx="float64", seed=seed)


def data(rng, rows=10):
    return rng.normal(size=(rows, 4)), rng.integers(0, 3, rows)


def test_a_weighted_step_is_numpys(rng):
    """One full-batch SGD step of a softmax classifier: the gradient of sum(w_i l_i) / n."""
    model = classifier()
    model.compile(clnet.optimizers.SGD(0.5), "sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = data(rng)
    w = rng.uniform(0, 2, len(x))
    kernel, bias = model.get_weights()
    p = softmax(x @ kernel + bias)
    onehot = np.eye(3)[y]
    losses = -np.log(p[np.arange(len(y)), y])
    logs = model.train_on_batch(x, y, sample_weight=w, return_dict=True)
    np.testing.assert_allclose(logs["loss"], (w * losses).sum() / len(x), rtol=1e-12)
    np.testing.assert_allclose(logs["accuracy"], np.mean(p.argmax(1) == y), rtol=1e-12)  # (not weighted)
    g = (w[:, None] * (p - onehot)) / len(x)
    new_kernel, new_bias = model.get_weights()
    np.testing.assert_allclose(new_kernel, kernel - 0.5 * x.T @ g, rtol=1e-12)
    np.testing.assert_allclose(new_bias, bias - 0.5 * g.sum(0), rtol=1e-12)


def test_fit_and_evaluate_weigh_samples_and_classes(rng):
    """class_weight is sample_weight of each sample's class (Keras's rule); weights of 1 change
    nothing; a zero weight removes a sample; evaluate weighs as fit logs; validation data may
    carry its own weights."""
    x, y = data(rng, 24)
    class_weight = {0: 0.5, 2: 3.0}  # class 1: 1, as Keras
    from_classes = np.array([class_weight.get(int(c), 1.0) for c in y])
    runs = []
    for weights in ({"class_weight": class_weight}, {"sample_weight": from_classes}):
        model = classifier()
        model.compile(clnet.optimizers.SGD(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
        history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
                            validation_data=(x, y, from_classes), **weights).history
        runs.append((history, model.get_weights()))
    (first, w1), (second, w2) = runs
    assert first == second
    for a, b in zip(w1, w2):
        np.testing.assert_array_equal(a, b)
    ones = classifier()
    plain = classifier()
    for model in (ones, plain):
        model.compile(clnet.optimizers.SGD(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
    ones.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, sample_weight=np.ones(len(x)))
    plain.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(ones.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-14)
    model = classifier()
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    w = np.where(np.arange(len(x)) % 2 == 0, 1.0, 0.0)
    kernel, bias = model.get_weights()
    p = softmax(x @ kernel + bias)
    losses = -np.log(p[np.arange(len(y)), y])
    logs = model.evaluate(x, y, sample_weight=w, batch_size=5, return_dict=True)
    np.testing.assert_allclose(logs["loss"], (w * losses).sum() / len(x), rtol=1e-12)
    np.testing.assert_allclose(logs["accuracy"], np.mean(p.argmax(1) == y), rtol=1e-12)


def test_weights_on_sequences_and_several_outputs(rng):
    """A sample's weight covers its every position, and every output of a model of several."""
    x = Input((5, 3))
    h = Dense(4, activation="tanh")(x)
    model = Model(x, [Dense(2, name="a")(h), Dense(1, name="b")(h)], floatx="float64", seed=2)
    model.compile(clnet.optimizers.SGD(0.1), ["mse", "mae"], loss_weights=[1.0, 0.5])
    data_x = rng.normal(size=(6, 5, 3))
    targets = [rng.normal(size=(6, 5, 2)), rng.normal(size=(6, 5, 1))]
    w = rng.uniform(0, 2, 6)
    a, b = model.predict(data_x)
    logs = model.test_on_batch(data_x, targets, sample_weight=w, return_dict=True)
    want_a = (w * ((a - targets[0]) ** 2).mean((1, 2))).sum() / 6
    want_b = (w * np.abs(b - targets[1]).mean((1, 2))).sum() / 6
    np.testing.assert_allclose([logs["a_loss"], logs["b_loss"], logs["loss"]],
                               [want_a, want_b, want_a + 0.5 * want_b], rtol=1e-12)


def test_what_weights_refuse(rng):
    model = classifier()
    model.compile("sgd", "sparse_categorical_crossentropy")
    x, y = data(rng)
    with pytest.raises(ValueError, match=r"sample_weight must have one weight per sample, shape \(10,\), got \(9,\)"):
        model.fit(x, y, sample_weight=np.ones(9), verbose=0)
    with pytest.raises(ValueError, match="sample_weight must hold finite, non-negative numbers"):
        model.fit(x, y, sample_weight=-np.ones(10), verbose=0)
    with pytest.raises(ValueError, match="sample_weight must hold finite, non-negative numbers"):
        model.evaluate(x, y, sample_weight=np.full(10, np.nan))
    with pytest.raises(ValueError, match=r"class_weight key 3 is not a class of the output, whose classes are 0 .. 2"):
        model.fit(x, y, class_weight={3: 2.0}, verbose=0)
    with pytest.raises(ValueError, match=r"class_weight\[1\] must be a finite, non-negative number"):
        model.fit(x, y, class_weight={1: -1.0}, verbose=0)
    with pytest.raises(ValueError, match="You cannot `class_weight` and `sample_weight` at the same time."):
        model.fit(x, y, class_weight={1: 2.0}, sample_weight=np.ones(10), verbose=0)

    def batches():
        while True:
            yield x, y

    with pytest.raises(ValueError, match="sample_weight goes with arrays x and y"):
        model.fit(batches(), steps_per_epoch=1, sample_weight=np.ones(10), verbose=0)
    inputs = Input((4,))
    several = Model(inputs, [Dense(2)(inputs), Dense(3)(inputs)])
    several.compile("sgd", ["mse", "sparse_categorical_crossentropy"])
    with pytest.raises(ValueError, match="`class_weight` is only supported for Models with a single output."):
        several.fit(x, [np.zeros((10, 2)), y], class_weight={0: 1.0}, verbose=0)


KERAS = np.load(__import__("pathlib").Path(__file__).parent / "data" / "keras_weights.npz")


@pytest.mark.parametrize("name", ["classes", "steps"])
def test_weights_match_keras(name):
    """Keras 3's own numbers (tests/data/keras_weights.npz, make_keras_weights_fixture.py):
    fit with class_weight or sample_weight, then evaluate with sample_weight, in float64."""
    import json
    logs = json.loads(str(KERAS["logs"]))[name]
    x, y, w = KERAS[f"{name}/x"], KERAS[f"{name}/y"], KERAS[f"{name}/sample_weight"]
    inputs = Input(x.shape[1:])
    layer = Dense(3, activation="softmax") if name == "classes" else Dense(2)
    model = Model(inputs, layer(inputs), floatx="float64")
    model.set_weights([KERAS[f"{name}/w{i}"] for i in range(2)])
    loss = "sparse_categorical_crossentropy" if name == "classes" else "mse"
    model.compile(clnet.optimizers.SGD(0.1), loss, metrics=["accuracy"] if name == "classes" else None)
    class_weight = {int(k): v for k, v in json.loads(str(KERAS["class_weight"])).items()}
    fitted = {"class_weight": class_weight} if name == "classes" else {"sample_weight": w}
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, **fitted).history
    assert history.keys() == logs["history"].keys()
    for key in history:
        np.testing.assert_allclose(history[key], logs["history"][key], rtol=1e-7)
    evaluated = model.evaluate(x, y, sample_weight=w, return_dict=True)
    for key in logs["evaluate"]:
        np.testing.assert_allclose(evaluated[key], logs["evaluate"][key], rtol=1e-7)
    for got, want in zip(model.get_weights(), [KERAS[f"{name}/after{i}"] for i in range(2)]):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-10)
