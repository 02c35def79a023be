"""Writes tests/data/keras_optimizers.npz: real Keras 3 optimizers (float64) run for 20 steps on
fixed weights and gradients, so that tests/test_optimizers.py checks clnet against Keras's own
numbers without importing Keras (CI has no Keras).

    KERAS_BACKEND=torch python tests/make_keras_optimizer_fixture.py

The file holds the initial weights `w<i>`, the gradients `g<i>` (steps, *shape), each case's
weights after every step `<case>/w<i>` (steps, *shape), and `cases`: JSON of
{case: [clnet class name, config]}, a config both Keras and clnet take (a schedule as
{"class_name", "config"}); and `schedules` (JSON) with each schedule's values
`schedule/<case>` at steps 0, 1, ...

One liberty, so that Keras computes in float64 what it is asked to: on every backend but
TensorFlow, Keras's type promotion (keras/src/backend/common/dtypes.py, BIT64_TO_BIT32_DTYPE, "to
be aligned with JAX's default behavior") turns the result of ops.maximum/minimum into float32 even
for two float64 operands, so the clip factors of clipnorm (`maximum(norm, clipnorm)`) and
global_clipnorm (`minimum(1 / norm, 1 / clip_norm)`) come out rounded to float32: a relative
error up to ~1e-7 in every clipped gradient, even where nothing is clipped. The script lifts that
cap for float64, as Keras's TensorFlow backend has it; the formulas run are Keras's own.
"""
import json
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # noqa: E402
from keras.src.backend.common import dtypes  # noqa: E402

STEPS = 20
SHAPES = [(5,), (3, 2), (1,), (7, 3)]
CASES = {
    "sgd": ["SGD", {"learning_rate": 0.05}],
    "sgd_nesterov_global_clipnorm": ["SGD", {"learning_rate": 0.05, "momentum": 0.9, "nesterov": True,
                                             "global_clipnorm": 1.5}],
    "sgd_momentum_clipvalue": ["SGD", {"learning_rate": 0.05, "momentum": 0.8, "clipvalue": 0.5}],
    "sgd_piecewise_weight_decay": ["SGD", {
        "learning_rate": {"class_name": "PiecewiseConstantDecay",
                          "config": {"boundaries": [3, 8], "values": [0.1, 0.05, 0.01]}},
        "momentum": 0.9, "weight_decay": 0.05}],
    "adagrad_clipnorm": ["Adagrad", {"learning_rate": 0.1, "initial_accumulator_value": 0.3, "epsilon": 1e-6,
                                     "clipnorm": 0.7}],
    "rmsprop": ["RMSprop", {"learning_rate": 0.01, "rho": 0.8}],
    "rmsprop_centered_momentum_weight_decay": ["RMSprop", {"learning_rate": 0.01, "rho": 0.85, "momentum": 0.5,
                                                           "centered": True, "weight_decay": 0.05}],
    "adadelta_global_clipnorm": ["Adadelta", {"learning_rate": 1.0, "rho": 0.9, "global_clipnorm": 2.0}],
    "adam_exponential_staircase": ["Adam", {
        "learning_rate": {"class_name": "ExponentialDecay",
                          "config": {"initial_learning_rate": 0.01, "decay_steps": 4, "decay_rate": 0.5,
                                     "staircase": True}},
        "beta_1": 0.85, "beta_2": 0.99}],
    "adam_amsgrad_clipnorm": ["Adam", {"learning_rate": 0.02, "amsgrad": True, "clipnorm": 0.5}],
    "adamw_cosine_warmup": ["AdamW", {
        "learning_rate": {"class_name": "CosineDecay",
                          "config": {"initial_learning_rate": 0.01, "decay_steps": 10, "alpha": 0.1,
                                     "warmup_target": 0.05, "warmup_steps": 5}},
        "weight_decay": 0.1}],
}

# Schedules evaluated at steps 0 .. SCHEDULE_STEPS - 1: staircase, warmup, boundaries, the end of decay.
SCHEDULE_STEPS = 30
SCHEDULES = {
    "exponential": {"class_name": "ExponentialDecay",
                    "config": {"initial_learning_rate": 0.1, "decay_steps": 7, "decay_rate": 0.8}},
    "exponential_staircase": {"class_name": "ExponentialDecay",
                              "config": {"initial_learning_rate": 0.1, "decay_steps": 4, "decay_rate": 0.5,
                                         "staircase": True}},
    "cosine": {"class_name": "CosineDecay", "config": {"initial_learning_rate": 0.2, "decay_steps": 20}},
    "cosine_alpha_warmup": {"class_name": "CosineDecay",
                            "config": {"initial_learning_rate": 0.01, "decay_steps": 15, "alpha": 0.1,
                                       "warmup_target": 0.05, "warmup_steps": 6}},
    "piecewise": {"class_name": "PiecewiseConstantDecay",
                  "config": {"boundaries": [3, 8, 20], "values": [0.1, 0.05, 0.01, 0.001]}},
}


def keras_optimizer(class_name, config):
    config = dict(config)
    rate = config.pop("learning_rate")
    if isinstance(rate, dict):
        rate = getattr(keras.optimizers.schedules, rate["class_name"])(**rate["config"])
    return getattr(keras.optimizers, class_name)(learning_rate=rate, **config)


def main():
    keras.config.set_floatx("float64")
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"
    assert dtypes.result_type("float64", "float64") == "float64"
    rng = np.random.default_rng(2026)
    weights = [rng.normal(size=shape) for shape in SHAPES]
    grads = [rng.normal(size=(STEPS, *shape)) * 1.5 for shape in SHAPES]
    arrays = {f"w{i}": w for i, w in enumerate(weights)}
    arrays.update({f"g{i}": g for i, g in enumerate(grads)})
    for case, (class_name, config) in CASES.items():
        optimizer = keras_optimizer(class_name, config)
        variables = [keras.Variable(w, dtype="float64") for w in weights]
        trajectory = [[] for _ in weights]
        for step in range(STEPS):
            optimizer.apply([keras.ops.convert_to_tensor(g[step], dtype="float64") for g in grads], variables)
            for i, v in enumerate(variables):
                trajectory[i].append(keras.ops.convert_to_numpy(v.value))
        assert int(optimizer.iterations) == STEPS
        arrays.update({f"{case}/w{i}": np.stack(t) for i, t in enumerate(trajectory)})
    for case, entry in SCHEDULES.items():
        schedule = getattr(keras.optimizers.schedules, entry["class_name"])(**entry["config"])
        arrays[f"schedule/{case}"] = np.array([float(schedule(step)) for step in range(SCHEDULE_STEPS)])
    arrays["cases"] = np.array(json.dumps(CASES))
    arrays["schedules"] = np.array(json.dumps(SCHEDULES))
    arrays["keras_version"] = np.array(keras.__version__)
    path = Path(__file__).parent / "data" / "keras_optimizers.npz"
    path.parent.mkdir(exist_ok=True)
    np.savez_compressed(path, **arrays)
    print(f"wrote {path} ({path.stat().st_size} bytes) with Keras {keras.__version__}, backend {keras.backend.backend()}")


if __name__ == "__main__":
    main()
