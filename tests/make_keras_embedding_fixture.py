"""Writes tests/data/keras_embedding.npz: a Keras 3 model (float64) of Embedding, keras_hub's
PositionEmbedding added to it, LayerNormalization, Dense(gelu) and Dense logits on token ids,
its outputs, its SparseCategoricalCrossentropy(from_logits=True) loss over every token, and its
weights after one SGD step, so that tests/test_embedding.py checks clnet's layouts and numbers
against Keras's own without importing Keras (CI has no Keras).

    KERAS_BACKEND=torch python tests/make_keras_embedding_fixture.py

As tests/make_keras_optimizer_fixture.py explains, Keras's type promotion on the torch backend
rounds some float64 results to float32 (here LayerNormalization's variance, off by 2e-7); the
script lifts that cap, so that Keras computes in float64 what it is asked to.

keras_hub's top-level import pulls in its tokenizers' dependencies; only its PositionEmbedding
module is needed, so the package is entered below its __init__ (pip install --no-deps keras-hub).
"""
import importlib.util
import os
import sys
import types
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # noqa: E402
from keras.src.backend.common import dtypes  # noqa: E402

hub = types.ModuleType("keras_hub")
hub.__path__ = list(importlib.util.find_spec("keras_hub").submodule_search_locations)
sys.modules["keras_hub"] = hub
from keras_hub.src.layers.modeling.position_embedding import PositionEmbedding  # noqa: E402

VOCAB, TIME, DIM, HIDDEN, CLASSES, ROWS = 11, 5, 6, 7, 4, 9


def main():
    keras.config.set_floatx("float64")
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"
    assert dtypes.result_type("float64", "float64") == "float64"
    keras.utils.set_random_seed(0)
    ids = keras.Input((TIME,), dtype="int32")
    h = keras.layers.Embedding(VOCAB, DIM)(ids)
    h = keras.layers.LayerNormalization()(keras.layers.Add()([h, PositionEmbedding(TIME + 3)(h)]))
    logits = keras.layers.Dense(CLASSES)(keras.layers.Dense(HIDDEN, "gelu")(h))
    model = keras.Model(ids, logits)
    rng = np.random.default_rng(0)
    # Weights away from their initial zeros and ones, so that every one matters.
    model.set_weights([w + rng.normal(0, 0.3, w.shape) for w in model.get_weights()])
    x, labels = rng.integers(0, VOCAB, (ROWS, TIME)), rng.integers(0, CLASSES, (ROWS, TIME))
    weights = model.get_weights()
    model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    y = model.predict(x, verbose=0)
    loss = model.evaluate(x, labels, verbose=0)
    model.train_on_batch(x, labels)
    arrays = {f"w{i}": w for i, w in enumerate(weights)}
    arrays.update({f"after{i}": w for i, w in enumerate(model.get_weights())})
    path = Path(__file__).parent / "data" / "keras_embedding.npz"
    np.savez_compressed(path, x=x, labels=labels, y=y, loss=loss, count=len(weights), **arrays)
    print(f"wrote {path}: loss {loss:.6f}")


if __name__ == "__main__":
    main()
