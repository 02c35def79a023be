"""Writes tests/data/keras_prelu.npz: a Keras 3 model (float64) of Dense, PReLU with one alpha per
feature (shared_axes=[1]), PReLU with one per element, Flatten and Dense, its outputs, its MSE
loss and its weights after one SGD step, so that tests/test_prelu_noise.py checks clnet's PReLU
(alpha's layout, the forward pass, both gradients) against Keras's own without importing Keras
(CI has no Keras).

    KERAS_BACKEND=torch python tests/make_keras_prelu_fixture.py

The first Dense's feature 0 is exactly 0 for every input (a zero kernel column and bias): Keras's
PReLU, relu(x) - alpha relu(-x), passes no gradient at x = 0, so that column stays 0 after the
step, which clnet must do too. As tests/make_keras_optimizer_fixture.py explains, Keras's type
promotion on the torch backend rounds some float64 results to float32; the script lifts that cap.
"""
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # noqa: E402
from keras.src.backend.common import dtypes  # noqa: E402

STEPS, FEATURES, UNITS, OUTPUTS, ROWS = 4, 3, 5, 2, 6


def main():
    keras.config.set_floatx("float64")
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"
    assert dtypes.result_type("float64", "float64") == "float64"
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((STEPS, FEATURES)), keras.layers.Dense(UNITS),
                              keras.layers.PReLU(shared_axes=[1]), keras.layers.PReLU(), keras.layers.Flatten(),
                              keras.layers.Dense(OUTPUTS)])
    rng = np.random.default_rng(0)
    # Weights away from their initial zeros (alphas on both sides of 0), but feature 0 of the
    # first Dense, which stays 0.
    weights = [w + rng.normal(0, 0.5, w.shape) for w in model.get_weights()]
    weights[0][:, 0], weights[1][0] = 0, 0
    model.set_weights(weights)
    x, t = rng.normal(size=(ROWS, STEPS, FEATURES)), rng.normal(size=(ROWS, OUTPUTS))
    model.compile(keras.optimizers.SGD(0.5), "mse")
    y = model.predict(x, verbose=0)
    loss = model.evaluate(x, t, verbose=0)
    model.train_on_batch(x, t)
    arrays = {f"w{i}": w for i, w in enumerate(weights)}
    arrays.update({f"after{i}": w for i, w in enumerate(model.get_weights())})
    path = Path(__file__).parent / "data" / "keras_prelu.npz"
    np.savez_compressed(path, x=x, t=t, y=y, loss=loss, count=len(weights), **arrays)
    print(f"wrote {path}: loss {loss:.6f}")


if __name__ == "__main__":
    main()
