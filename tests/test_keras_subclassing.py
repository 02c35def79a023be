"""The subclassed models of tests/keras_patterns.py (Keras's guides' patterns: add_weight layers,
layers held in lists and a Sequential, a position embedding of ops.arange, self-attention with
residual norms) against Keras 3's own numbers (tests/data/keras_subclassing.npz, written by
make_keras_subclassing_fixture.py): the same text run by clnet from the same weights gives the
same predictions, evaluate logs, History and weights after two epochs of SGD, in float64."""
import json
from pathlib import Path

import numpy as np
import pytest

import clnet
import keras_patterns
from keras_patterns import TEXT, TOWER

FIXTURE = np.load(Path(__file__).parent / "data" / "keras_subclassing.npz")
LOGS = json.loads(str(FIXTURE["logs"]))
# Keras on the torch backend is not exact in float64 (a Dense + softmax is 1.7e-8 from numpy):
# clnet's float64 kernels are checked against numpy elsewhere, against Keras at this tolerance.
RTOL, ATOL = 1e-6, 1e-8


def keras_weights(prefix, name, which=""):
    count = sum(1 for key in FIXTURE.files if key.startswith(f"{prefix}/{name}/{which}")
                and key[len(f"{prefix}/{name}/{which}"):].isdigit())
    return [FIXTURE[f"{prefix}/{name}/{which}{i}"] for i in range(count)]


@pytest.mark.parametrize("prefix", ["tower", "text"])
def test_subclassed_models_match_keras(prefix):
    clnet.set_floatx("float64")
    try:
        tower_model, text_model = keras_patterns.build(clnet)
        sizes = {k: v for k, v in TEXT.items() if k != "rows"}
        model, parts = tower_model(TOWER["features"]) if prefix == "tower" else text_model(**sizes)
    finally:
        clnet.set_floatx("float32")
    assert model.dtype == np.float64
    for name, layer in parts.items():
        layer.set_weights(keras_weights(prefix, name))
    x, y = FIXTURE[f"{prefix}/x"], FIXTURE[f"{prefix}/y"]
    loss = "mse" if prefix == "tower" else "sparse_categorical_crossentropy"
    model.compile(clnet.optimizers.SGD(0.1), loss, metrics=["accuracy"] if prefix == "text" else None)
    np.testing.assert_allclose(model.predict(x), FIXTURE[f"{prefix}/predictions"], rtol=RTOL, atol=ATOL)
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
