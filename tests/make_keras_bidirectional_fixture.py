"""Writes tests/data/keras_bidirectional.npz: what Keras 3 computes with Bidirectional, in float64,
for tests/test_bidirectional.py. Run it with Keras 3 and PyTorch installed (not needed by the tests):

    KERAS_BACKEND=torch python tests/make_keras_bidirectional_fixture.py

Per case (kind, merge mode, return_sequences): random weights in Keras's layout (the forward
layer's, then the backward layer's), an input batch and Keras's outputs. Two more: return_state
with initial states (LSTM, GRU), and the weight gradients of a mean squared error of
Bidirectional(LSTM, "mul"), from PyTorch's autograd through the Keras model.
"""
from pathlib import Path

import keras
import numpy as np
import torch

keras.config.set_floatx("float64")
rng = np.random.default_rng(2026)
KINDS = {"SimpleRNN": keras.layers.SimpleRNN, "LSTM": keras.layers.LSTM, "GRU": keras.layers.GRU}
ROWS, STEPS, FEATURES, UNITS = 3, 4, 3, 5
out = {}


def randomized(model):
    weights = [0.6 * rng.normal(size=w.shape) for w in model.get_weights()]
    model.set_weights(weights)
    return weights


def store(case, weights, inputs, outputs):
    for i, w in enumerate(weights):
        out[f"{case}/w{i}"] = w
    for i, x in enumerate(inputs):
        out[f"{case}/x{i}"] = x
    for i, y in enumerate(outputs if isinstance(outputs, (list, tuple)) else [outputs]):
        out[f"{case}/y{i}"] = np.asarray(y)


for kind, cls in KINDS.items():
    for mode in ["concat", "sum", "ave", "mul", None]:
        for sequences in (False, True):
            x_in = keras.Input((STEPS, FEATURES))
            y = keras.layers.Bidirectional(cls(UNITS, return_sequences=sequences), merge_mode=mode)(x_in)
            model = keras.Model(x_in, y)
            weights = randomized(model)
            x = rng.normal(size=(ROWS, STEPS, FEATURES))
            store(f"{kind}/{mode}/{int(sequences)}", weights, [x], model.predict(x, verbose=0))

for kind in ("LSTM", "GRU"):
    count = 2 if kind == "LSTM" else 1
    x_in = keras.Input((STEPS, FEATURES))
    states = [keras.Input((UNITS,)) for _ in range(2 * count)]
    outputs = keras.layers.Bidirectional(KINDS[kind](UNITS, return_sequences=True, return_state=True))(
        x_in, initial_state=states)
    model = keras.Model([x_in, *states], outputs)
    weights = randomized(model)
    inputs = [rng.normal(size=(ROWS, STEPS, FEATURES))] + [rng.normal(size=(ROWS, UNITS)) for _ in states]
    store(f"{kind}/states", weights, inputs, model.predict(inputs, verbose=0))

# Gradients: Bidirectional(LSTM, "mul", return_sequences), mean squared error. (No Dense after it:
# Keras's Dense on (batch, steps, features) in float64 is off from numpy by 1.4e-8 on this backend.)
x_in = keras.Input((STEPS, FEATURES))
model = keras.Sequential([x_in, keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True),
                                                           merge_mode="mul")])
weights = randomized(model)
x, target = rng.normal(size=(ROWS, STEPS, FEATURES)), rng.normal(size=(ROWS, STEPS, UNITS))
# In float64 throughout: keras.losses computes in float32 whatever floatx is.
loss = torch.mean((model(torch.tensor(x)) - torch.tensor(target)) ** 2)
loss.backward()
store("gradients", weights, [x, target], [loss.detach().numpy()] + [v.value.grad.numpy() for v in model.weights])

path = Path(__file__).parent / "data" / "keras_bidirectional.npz"
np.savez_compressed(path, **out)
print(f"wrote {path}: {len(out)} arrays, keras {keras.__version__}")
