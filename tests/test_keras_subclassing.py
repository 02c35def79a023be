"""The models of tests/keras_patterns.py (Keras's guides' patterns: add_weight layers, layers held
in lists and a Sequential, a position embedding of ops.arange, self-attention with residual norms;
a sequence-to-sequence LSTM over lengths of None and its inference models; the functional guide's
ticket model of id sequences of any length, two named outputs, from_logits losses and loss
weights by name) against Keras 3's own numbers (tests/data/keras_subclassing.npz, written by
make_keras_subclassing_fixture.py): the same text run by clnet from the same weights gives the
same predictions, evaluate logs, History and weights after two epochs of SGD, in float64."""
import json
from pathlib import Path

import numpy as np
import pytest

import clnet
import keras_patterns
from keras_patterns import TEXT, TICKETS, TOWER, TRANSLATOR, greedy

FIXTURE = np.load(Path(__file__).parent / "data" / "keras_subclassing.npz")
LOGS = json.loads(str(FIXTURE["logs"]))
# Keras on the torch backend is not exact in float64 (a Dense + softmax is 1.7e-8 from numpy):
# clnet's float64 kernels are checked against numpy elsewhere, against Keras at this tolerance.
RTOL, ATOL = 1e-6, 1e-8


def keras_weights(prefix, name, which=""):
    count = sum(1 for key in FIXTURE.files if key.startswith(f"{prefix}/{name}/{which}")
                and key[len(f"{prefix}/{name}/{which}"):].isdigit())
    return [FIXTURE[f"{prefix}/{name}/{which}{i}"] for i in range(count)]


def fixture_data(prefix):
    """(x, y, compile's loss and extra arguments) of a fixture's model, as the fixture ran it."""
    if prefix == "tickets":
        x = {k: FIXTURE[f"tickets/x/{k}"] for k in ("title", "body", "tags")}
        y = {k: FIXTURE[f"tickets/y/{k}"] for k in ("priority", "department")}
        losses = {"priority": clnet.losses.BinaryCrossentropy(from_logits=True),
                  "department": clnet.losses.CategoricalCrossentropy(from_logits=True)}
        return x, y, losses, {"loss_weights": {"priority": 1.0, "department": 0.2}}
    if prefix == "translator":
        x = [FIXTURE["translator/source"], FIXTURE["translator/target"]]
        return x, FIXTURE["translator/y"], "categorical_crossentropy", {"metrics": ["accuracy"]}
    if prefix == "text":
        return FIXTURE["text/x"], FIXTURE["text/y"], "sparse_categorical_crossentropy", {"metrics": ["accuracy"]}
    return FIXTURE["tower/x"], FIXTURE["tower/y"], "mse", {}


@pytest.mark.parametrize("prefix", ["tower", "text", "translator", "tickets"])
def test_models_match_keras(prefix):
    clnet.set_floatx("float64")
    try:
        tower_model, text_model, translator, tickets = keras_patterns.build(clnet)
        if prefix == "tower":
            model, parts = tower_model(TOWER["features"])
        elif prefix == "text":
            model, parts = text_model(**{k: v for k, v in TEXT.items() if k != "rows"})
        elif prefix == "tickets":
            model, parts = tickets(TICKETS["vocabulary"], TICKETS["tags"], TICKETS["departments"])
        else:
            model, parts, sampler = translator(**{k: TRANSLATOR[k] for k in ("source_tokens", "target_tokens", "units")})
    finally:
        clnet.set_floatx("float32")
    x, y, loss, compiled = fixture_data(prefix)
    if prefix in ("translator", "tickets"):  # (lengths of None: built on the data's, where Keras builds at once)
        first = next(iter(parts.values()))
        with pytest.raises(ValueError, match="is not built yet, so it has no weights for set_weights"):
            first.set_weights(keras_weights(prefix, next(iter(parts))))
        model.build([part.shape[1:] for part in (x.values() if isinstance(x, dict) else x)])
    for name, layer in parts.items():
        layer.set_weights(keras_weights(prefix, name))
    model.compile(clnet.optimizers.SGD(0.1), loss, **compiled)
    predictions = model.predict(x)
    for k, got in enumerate(predictions if isinstance(predictions, list) else [predictions]):
        key = f"{prefix}/predictions" + (f"/{k}" if isinstance(predictions, list) else "")
        np.testing.assert_allclose(got, FIXTURE[key], rtol=RTOL, atol=ATOL)
    assert model.dtype == np.float64
    logs = model.evaluate(x, y, return_dict=True)
    want = LOGS[prefix]
    assert logs.keys() == want["evaluate"].keys()
    for key in logs:
        np.testing.assert_allclose(logs[key], want["evaluate"][key], rtol=RTOL)
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    assert history.keys() == want["history"].keys()
    for key in history:
        np.testing.assert_allclose(history[key], want["history"][key], rtol=RTOL)
    for name, layer in parts.items():
        for got, expected in zip(layer.get_weights(), keras_weights(prefix, name, "after"), strict=True):
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL, err_msg=f"{prefix}/{name}")
    if prefix == "translator":  # the inference models, made after training from the same layers
        decoded = greedy(*sampler(), x[0][:1], 0, TRANSLATOR["target_tokens"], 4)
        np.testing.assert_allclose(decoded, FIXTURE["translator/greedy"], rtol=RTOL, atol=ATOL)
