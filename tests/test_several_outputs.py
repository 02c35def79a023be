"""Models of several outputs, as Keras's functional API has them: a loss (and a weight and
metrics) per output, targets as lists or dicts, Keras's History keys, predict's structure,
checkpoints and ONNX export with every output."""
import json
from pathlib import Path

import numpy as np
import pytest

import clnet
from clnet.layers import Concatenate, Dense, Input
from clnet.losses import BinaryCrossentropy, CategoricalCrossentropy
from clnet.model import Model

FIXTURE = Path(__file__).parent / "data" / "keras_several_outputs.npz"


def ticket_model():
    """tests/make_keras_several_outputs_fixture.py's model, layer for layer."""
    title, body, tags = Input((6,), name="title"), Input((9,), name="body"), Input((4,), name="tags")
    x = Concatenate()([Dense(5, "tanh")(title), Dense(7, "relu")(body), tags])
    return Model([title, body, tags], [Dense(1, name="priority")(x), Dense(3, "softmax", name="department")(x)],
                 floatx="float64")


def test_the_ticket_model_matches_keras():
    data = np.load(FIXTURE)
    model = ticket_model()
    model.set_weights([data[f"w{i}"] for i in range(int(data["count"]))])
    xs, ys = [data[f"x{i}"] for i in range(3)], [data["y0"], data["y1"]]
    model.compile(clnet.optimizers.SGD(0.1), loss=[BinaryCrossentropy(from_logits=True), CategoricalCrossentropy()],
                  loss_weights=[1.0, 0.2], metrics=[[], ["accuracy"]])
    assert model.output_names == ["priority", "department"]
    predictions = model.predict(xs)
    assert isinstance(predictions, list) and len(predictions) == 2
    for got, want in zip(predictions, (data["p0"], data["p1"])):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    logs = model.evaluate(xs, ys, return_dict=True)
    want = json.loads(str(data["logs"]))
    assert sorted(logs) == sorted(want)
    for key, value in want.items():
        np.testing.assert_allclose(logs[key], value, rtol=1e-12, err_msg=key)
    assert model.evaluate(xs, ys) == [logs[k] for k in ("loss", "priority_loss", "department_loss",
                                                         "department_accuracy")]  # Keras's order
    history = model.fit(xs, ys, batch_size=8, epochs=2, shuffle=False, verbose=0)
    keras_history = json.loads(str(data["history"]))
    assert sorted(history.history) == sorted(keras_history)
    for key, values in keras_history.items():
        np.testing.assert_allclose(history.history[key], values, rtol=1e-11, err_msg=key)
    for i, got in enumerate(model.get_weights()):
        np.testing.assert_allclose(got, data[f"after{i}"], rtol=1e-11, atol=1e-13)


def fork(rng_seed=5):
    """x -> h; a = Dense(3)(h), an output that a later layer reads too; b = Dense(2, sigmoid)(h, a)."""
    x = Input((4,), name="x")
    h = Dense(6, "tanh")(x)
    a = Dense(3, name="a")(h)
    b = Dense(2, "sigmoid", name="b")(Concatenate()([h, a]))
    return x, a, b


def test_gradients_are_the_weighted_sum_of_the_outputs_losses(fp64, rng):
    """The two-output model's loss and gradients are 0.7 times those of a model of its first
    output plus 1.3 times those of a model of its second (sharing its layers): the gradient of
    `a`, which its loss and a layer both read, is summed."""
    x, a, b = fork()
    both = Model(x, [a, b], floatx="float64")
    both.compile("sgd", loss=["mse", "binary_crossentropy"], loss_weights=[0.7, 1.3])
    parts = [Model(x, a, floatx="float64"), Model(x, b, floatx="float64")]
    parts[0].compile("sgd", "mse")
    parts[1].compile("sgd", "binary_crossentropy")
    data, ya, yb = rng.normal(size=(7, 4)), rng.normal(size=(7, 3)), rng.integers(0, 2, (7, 2))
    loss, grads, dx = both.compute_gradients(data, [ya, yb])
    (loss_a, grads_a, dx_a), (loss_b, grads_b, dx_b) = (parts[0].compute_gradients(data, ya),
                                                          parts[1].compute_gradients(data, yb))
    np.testing.assert_allclose(loss, 0.7 * loss_a + 1.3 * loss_b, rtol=1e-13)
    np.testing.assert_allclose(dx, 0.7 * dx_a + 1.3 * dx_b, rtol=1e-12, atol=1e-15)
    want = {}  # (layer, its k-th weight) -> the weighted sum of the two models' gradients
    for weight, model, g in ((0.7, parts[0], grads_a), (1.3, parts[1], grads_b)):
        for key, array in zip(weight_keys(model), g):
            want[key] = want.get(key, 0) + weight * array
    for key, array in zip(weight_keys(both), grads):
        np.testing.assert_allclose(array, want[key], rtol=1e-12, atol=1e-15)


def weight_keys(model):
    """(id of the layer, k) for each array of model.get_weights(): its layer's k-th weight."""
    return [(id(layer), k) for layer in model.layers for k in range(len(layer.get_weights()))]


def test_each_step_launches_a_split_and_a_loss_per_output(rng):
    """Beside what a model of its second output launches (the same layers), a loss and the
    targets' copy for each output, and the first output's layer and the sum of its gradients."""
    x, a, b = fork()
    data, ya, yb = rng.normal(size=(8, 4)), rng.normal(size=(8, 3)), rng.integers(0, 2, (8, 2))
    counts = []
    for outputs, targets in (([a, b], [ya, yb]), (b, yb)):
        model = Model(x, outputs)
        model.compile("sgd", loss="binary_crossentropy" if outputs is b else ["mse", "binary_crossentropy"])
        model.train_on_batch(data, targets)
        with clnet.profile(print_table=False) as launches:
            model.train_on_batch(data, targets)
        counts.append({name: row[0] for name, row in launches.rows.items()})
    assert counts[0]["CalcOutputGradient"] == 2 and counts[1]["CalcOutputGradient"] == 1
    assert counts[0]["CopyBlock"] == counts[1]["CopyBlock"] + 2
    assert counts[0].get("Sum", 0) == counts[1].get("Sum", 0) + 1


def test_outputs_by_name(rng):
    """A dict of outputs: predict returns a dict, losses, metrics and targets go by name, inputs
    may too, and the History has Keras's keys."""
    x, a, b = fork()
    model = Model(x, {"score": a, "flags": b}, seed=2)
    assert model.output_names == ["score", "flags"]
    model.compile("adam", loss={"score": "mse", "flags": "binary_crossentropy"},
                  metrics={"flags": ["accuracy"]}, loss_weights={"flags": 0.5})
    data, ya, yb = rng.normal(size=(16, 4)), rng.normal(size=(16, 3)), rng.integers(0, 2, (16, 2))
    history = model.fit({"x": data}, {"flags": yb, "score": ya}, batch_size=8, epochs=2, verbose=0,
                        validation_data=(data, {"score": ya, "flags": yb}))
    assert sorted(history.history) == sorted(["loss", "score_loss", "flags_loss", "flags_accuracy", "val_loss",
                                              "val_score_loss", "val_flags_loss", "val_flags_accuracy"])
    logs = model.evaluate(data, {"score": ya, "flags": yb}, return_dict=True)
    np.testing.assert_allclose(logs["loss"], logs["score_loss"] + 0.5 * logs["flags_loss"], rtol=1e-6)
    predicted = model.predict(data)
    assert sorted(predicted) == ["flags", "score"] and predicted["flags"].shape == (16, 2)
    np.testing.assert_array_equal(model.predict_on_batch(data)["score"], predicted["score"])


def test_several_outputs_save_resume_and_export(tmp_path, rng):
    x, a, b = fork()
    model = Model(x, {"score": a, "flags": b}, floatx="float64", seed=4)
    model.compile(clnet.optimizers.Adam(0.01), loss={"score": "mse", "flags": "binary_crossentropy"},
                  loss_weights={"score": 2.0, "flags": 1.0}, metrics={"flags": ["accuracy"]})
    data, ys = rng.normal(size=(16, 4)), {"score": rng.normal(size=(16, 3)), "flags": rng.integers(0, 2, (16, 2))}
    model.fit(data, ys, batch_size=8, epochs=1, verbose=0)
    model.save(tmp_path / "two.h5")
    loaded = clnet.load_model(tmp_path / "two.h5")
    assert loaded.get_config() == model.get_config() and loaded.output_names == ["score", "flags"]
    assert loaded.compile_config() == model.compile_config()
    for m in (model, loaded):
        m.fit(data, ys, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
    ort = pytest.importorskip("onnxruntime")
    model.export(tmp_path / "two.onnx")
    session = ort.InferenceSession(str(tmp_path / "two.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["output_0", "output_1"]
    results = session.run(None, {"input": data})
    predicted = model.predict(data)
    for got, name in zip(results, ("score", "flags")):
        np.testing.assert_allclose(got, predicted[name], rtol=1e-12, atol=1e-14)


def test_bad_loss_metrics_and_targets_name_what_is_wrong(rng):
    x, a, b = fork()
    model = Model(x, [a, b])
    with pytest.raises(ValueError, match=r"loss names \['c'\], which are not outputs of the model; its outputs are "
                                         r"\['a', 'b'\]"):
        model.compile("sgd", loss={"a": "mse", "c": "mse"})
    with pytest.raises(ValueError, match=r"loss\['b'\] is None: every output"):
        model.compile("sgd", loss={"a": "mse"})
    with pytest.raises(ValueError, match="metrics of a model of several outputs"):
        model.compile("sgd", loss="mse", metrics=["accuracy"])
    with pytest.raises(ValueError, match=r"loss_weights must have one entry per output \['a', 'b'\], got 3"):
        model.compile("sgd", loss="mse", loss_weights=[1, 2, 3])
    model.compile("sgd", loss="mse")
    data = rng.normal(size=(4, 4))
    with pytest.raises(ValueError, match=r"y must be a list of 2 arrays, one per output \['a', 'b'\]"):
        model.fit(data, rng.normal(size=(4, 3)), verbose=0)
    with pytest.raises(ValueError, match=r"\['b'\] missing"):
        model.fit(data, {"a": rng.normal(size=(4, 3))}, verbose=0)
    with pytest.raises(ValueError, match=r"y\[1\] \(output 'b'\) has shape \(4, 3\)"):
        model.fit(data, [rng.normal(size=(4, 3)), rng.normal(size=(4, 3))], verbose=0)


def test_a_sparse_output_beside_another_takes_its_ids(rng):
    """An output under sparse_categorical_crossentropy reads one id per sample out of the batch's
    targets (its loss's target width), beside a one-hot output: each output's loss is what a model
    of it alone reports."""
    x = Input((4,))
    h = Dense(6, "tanh")(x)
    a, b = Dense(3, "softmax", name="a")(h), Dense(5, "softmax", name="b")(h)
    both = Model(x, [a, b], floatx="float64")
    both.compile("sgd", loss=["sparse_categorical_crossentropy", "categorical_crossentropy"],
                 metrics=[["accuracy"], []])
    data, ids, one_hot = rng.normal(size=(9, 4)), rng.integers(0, 3, 9), np.eye(5)[rng.integers(0, 5, 9)]
    logs = both.evaluate(data, [ids, one_hot], batch_size=4, return_dict=True)
    alone = Model(x, a, floatx="float64")
    alone.compile("sgd", "sparse_categorical_crossentropy", ["accuracy"])
    want_loss, want_accuracy = alone.evaluate(data, ids, batch_size=4)
    np.testing.assert_allclose([logs["a_loss"], logs["a_accuracy"]], [want_loss, want_accuracy], rtol=1e-13)
