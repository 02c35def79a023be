"""Writes tests/data/keras_several_outputs.npz: a Keras 3 model (float64) of three inputs and two
outputs, as the functional API guide builds its ticket model (two inputs through Dense layers
concatenated with a third; a priority score, one logit under BinaryCrossentropy(from_logits=True),
and a department, a softmax under CategoricalCrossentropy, the two losses weighted 1 and 0.2),
its predictions, its evaluate logs and its weights after two epochs of SGD without shuffling, so
that tests/test_several_outputs.py checks clnet's numbers against Keras's own without importing
Keras (CI has no Keras).

    KERAS_BACKEND=torch python tests/make_keras_several_outputs_fixture.py

As tests/make_keras_optimizer_fixture.py explains, Keras's type promotion on the torch backend
rounds some float64 results to float32; the script lifts that cap.
"""
import json
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # noqa: E402
from keras.src.backend.common import dtypes  # noqa: E402

TITLE, BODY, TAGS, DEPARTMENTS, ROWS = 6, 9, 4, 3, 20


def main():
    keras.config.set_floatx("float64")
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"
    keras.utils.set_random_seed(0)
    title = keras.Input((TITLE,), name="title")
    body = keras.Input((BODY,), name="body")
    tags = keras.Input((TAGS,), name="tags")
    x = keras.layers.Concatenate()([keras.layers.Dense(5, "tanh")(title), keras.layers.Dense(7, "relu")(body), tags])
    priority = keras.layers.Dense(1, name="priority")(x)
    department = keras.layers.Dense(DEPARTMENTS, "softmax", name="department")(x)
    model = keras.Model([title, body, tags], [priority, department])
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(0, 0.3, w.shape) for w in model.get_weights()])
    weights = model.get_weights()
    xs = [rng.normal(size=(ROWS, TITLE)), rng.normal(size=(ROWS, BODY)), rng.integers(0, 2, (ROWS, TAGS)).astype(float)]
    ys = [rng.integers(0, 2, (ROWS, 1)).astype(float), np.eye(DEPARTMENTS)[rng.integers(0, DEPARTMENTS, ROWS)]]
    model.compile(keras.optimizers.SGD(0.1),
                  loss=[keras.losses.BinaryCrossentropy(from_logits=True), keras.losses.CategoricalCrossentropy()],
                  loss_weights=[1.0, 0.2], metrics=[[], ["accuracy"]])
    predictions = model.predict(xs, verbose=0)
    logs = model.evaluate(xs, ys, verbose=0, return_dict=True)
    history = model.fit(xs, ys, batch_size=8, epochs=2, shuffle=False, verbose=0)
    arrays = {f"w{i}": w for i, w in enumerate(weights)}
    arrays.update({f"after{i}": w for i, w in enumerate(model.get_weights())})
    arrays.update({f"x{i}": x for i, x in enumerate(xs)})
    arrays.update({f"y{i}": y for i, y in enumerate(ys)})
    arrays.update({f"p{i}": p for i, p in enumerate(predictions)})
    path = Path(__file__).parent / "data" / "keras_several_outputs.npz"
    np.savez_compressed(path, count=len(weights), logs=json.dumps(logs), history=json.dumps(history.history), **arrays)
    print(f"wrote {path}: {logs}")


if __name__ == "__main__":
    main()
