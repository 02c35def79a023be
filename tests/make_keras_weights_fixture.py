"""Writes tests/data/keras_weights.npz: Keras 3 in float64 fitting and evaluating with class_weight
and sample_weight (a softmax classifier under sparse cross-entropy with accuracy; a Dense over
steps under mse), from weights drawn here: its History, its evaluate logs and its weights after two
epochs of SGD without shuffling, so that tests/test_sample_weights.py checks clnet's numbers
against Keras's own without importing Keras (CI has no Keras).

    KERAS_BACKEND=torch python tests/make_keras_weights_fixture.py

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

CLASS_WEIGHT = {0: 0.5, 2: 3.0}


def main():
    keras.config.set_floatx("float64")
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"
    rng = np.random.default_rng(0)
    arrays, logs = {}, {}
    runs = {
        "classes": (keras.Input((4,)), lambda x: keras.layers.Dense(3, activation="softmax")(x),
                    rng.normal(size=(12, 4)), rng.integers(0, 3, 12), "sparse_categorical_crossentropy"),
        "steps": (keras.Input((5, 3)), lambda x: keras.layers.Dense(2)(x),
                  rng.normal(size=(12, 5, 3)), rng.normal(size=(12, 5, 2)), "mse"),
    }
    for name, (inputs, layer, x, y, loss) in runs.items():
        model = keras.Model(inputs, layer(inputs))
        model.set_weights([rng.normal(0, 0.5, w.shape) for w in model.get_weights()])
        arrays.update({f"{name}/w{i}": w for i, w in enumerate(model.get_weights())})
        model.compile(keras.optimizers.SGD(0.1), loss, metrics=["accuracy"] if "crossentropy" in loss else None)
        sample_weight = rng.uniform(0, 2, len(x))
        if name == "steps":  # (Keras broadcasts a weight over the steps only from shape (samples, 1))
            sample_weight = sample_weight[:, None]
        fitted = {"class_weight": CLASS_WEIGHT} if name == "classes" else {"sample_weight": sample_weight}
        history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, **fitted).history
        evaluated = model.evaluate(x, y, sample_weight=sample_weight, verbose=0, return_dict=True)
        logs[name] = {"history": history, "evaluate": evaluated}
        arrays.update({f"{name}/x": x, f"{name}/y": y, f"{name}/sample_weight": sample_weight})
        arrays.update({f"{name}/after{i}": w for i, w in enumerate(model.get_weights())})
    path = Path(__file__).parent / "data" / "keras_weights.npz"
    np.savez_compressed(path, logs=json.dumps(logs), class_weight=json.dumps(CLASS_WEIGHT), **arrays)
    print(f"wrote {path}: {logs}")


if __name__ == "__main__":
    main()
