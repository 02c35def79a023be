"""Writes tests/data/keras_recurrent_states.npz: for SimpleRNN, LSTM and GRU, a Keras 3 encoder-
decoder (float64): the encoder's final states (return_state, go_backwards) start the decoder
(initial_state), whose every-step output and own final states are concatenated into a Dense. It
stores each layer's weights, the inputs, Keras's outputs, its MSE loss, and each layer's weights
after one SGD step, so that tests/test_recurrent.py checks clnet's return_state and initial_state
(forward and gradients) against Keras's own without importing Keras (CI has no Keras).

    KERAS_BACKEND=torch python tests/make_keras_recurrent_states_fixture.py

As tests/make_keras_optimizer_fixture.py explains, Keras's type promotion on the torch backend
rounds some float64 results to float32; the script lifts that cap.
"""
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # noqa: E402
from keras.src.backend.common import dtypes  # noqa: E402

KINDS = ("SimpleRNN", "LSTM", "GRU")
LAYERS = ("encoder", "decoder", "head")
SOURCE, TARGET, UNITS, ROWS = (5, 3), (4, 2), 3, 6


def model(kind: str):
    source, target = keras.Input(SOURCE, name="source"), keras.Input(TARGET, name="target")
    layer = getattr(keras.layers, kind)
    _, *states = layer(UNITS, return_state=True, go_backwards=True, name="encoder")(source)
    y, *decoded = layer(UNITS, return_sequences=True, return_state=True, name="decoder")(target,
                                                                                        initial_state=states)
    joined = keras.layers.Concatenate()([keras.layers.Flatten()(y), *decoded])
    return keras.Model([source, target], keras.layers.Dense(2, name="head")(joined))


def main():
    keras.config.set_floatx("float64")
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    arrays = {}
    for kind in KINDS:
        net = model(kind)
        for name in LAYERS:  # away from the initial zeros and ones, so that every weight matters
            layer = net.get_layer(name)
            layer.set_weights([w + rng.normal(0, 0.3, w.shape) for w in layer.get_weights()])
            arrays.update({f"{kind}/{name}/w{i}": w for i, w in enumerate(layer.get_weights())})
        xs = [rng.normal(size=(ROWS, *SOURCE)), rng.normal(size=(ROWS, *TARGET))]
        target = rng.normal(size=(ROWS, 2))
        net.compile(keras.optimizers.SGD(0.5), "mse")
        arrays[f"{kind}/source"], arrays[f"{kind}/target"], arrays[f"{kind}/labels"] = *xs, target
        arrays[f"{kind}/y"] = net.predict(xs, verbose=0)
        arrays[f"{kind}/loss"] = net.evaluate(xs, target, verbose=0)
        net.train_on_batch(xs, target)
        for name in LAYERS:
            arrays.update({f"{kind}/{name}/after{i}": w for i, w in enumerate(net.get_layer(name).get_weights())})
        print(f"{kind}: loss {arrays[f'{kind}/loss']:.6f}")
    path = Path(__file__).parent / "data" / "keras_recurrent_states.npz"
    np.savez_compressed(path, **arrays)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
