"""Writes tests/data/keras_mixed_precision.keras, an archive Keras 3 saved of a model made under
the global policy "mixed_float16" (Dense layers computing in float16, a last Activation given
dtype="float32", as Keras's mixed-precision guide has it), trained a few steps, and
tests/data/keras_mixed_precision.npz: its inputs, Keras's predictions under the policy, and
Keras's predictions of the same weights in float32, so that tests/test_mixed_precision.py checks
that clnet reads the policies and predicts as Keras does without importing Keras (CI has no Keras).

    KERAS_BACKEND=torch python tests/make_keras_mixed_precision_fixture.py

(The archive does not depend on the backend; it was written with KERAS_BACKEND=jax.)
"""
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # noqa: E402
from keras import layers as L  # noqa: E402

HERE = Path(__file__).parent / "data"


def make(policy: str) -> keras.Model:
    keras.mixed_precision.set_global_policy(policy)
    model = keras.Sequential([keras.Input((6,)), L.Dense(16, activation="relu"), L.Dense(8, activation="tanh"),
                              L.Dense(3), L.Activation("softmax", dtype="float32")])
    keras.mixed_precision.set_global_policy("float32")
    return model


def main():
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(40, 6)).astype("float32"), rng.integers(0, 3, 40)
    model = make("mixed_float16")
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    model.save(HERE / "keras_mixed_precision.keras")
    twin = make("float32")
    twin.set_weights(model.get_weights())
    np.savez_compressed(HERE / "keras_mixed_precision.npz", x=x, mixed=model.predict(x, verbose=0),
                        float32=twin.predict(x, verbose=0))
    print(f"wrote {HERE / 'keras_mixed_precision.keras'}: optimizer {type(model.optimizer).__name__}, "
          f"largest mixed - float32 difference {np.abs(model.predict(x, verbose=0) - twin.predict(x, verbose=0)).max():.2e}")


if __name__ == "__main__":
    main()
