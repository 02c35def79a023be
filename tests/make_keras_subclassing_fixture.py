"""Writes tests/data/keras_subclassing.npz: the models of tests/keras_patterns.py run by Keras 3
in float64 (a tower of add_weight layers under mse, a token-and-position transformer classifier
under sparse cross-entropy, a sequence-to-sequence LSTM over lengths of None under categorical
cross-entropy), each from weights drawn here: its predictions, its evaluate logs, its History and
its weights after two epochs of SGD without shuffling, per named layer (and the translator's
greedy decoding by its inference models, step by step), so that tests/test_keras_subclassing.py checks clnet's numbers against Keras's own without
importing Keras (CI has no Keras).

    KERAS_BACKEND=torch python tests/make_keras_subclassing_fixture.py

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

import keras_patterns  # noqa: E402
from keras_patterns import TEXT, TICKETS, TOWER, TRANSLATOR, greedy  # noqa: E402


def run(model, parts, x, y, loss, rng, prefix: str, arrays: dict, logs: dict, **compiled) -> None:
    for name, layer in parts.items():
        layer.set_weights([w + rng.normal(0, 0.3, w.shape) for w in layer.get_weights()])
        arrays.update({f"{prefix}/{name}/{i}": w for i, w in enumerate(layer.get_weights())})
    metrics = ["accuracy"] if isinstance(loss, str) and "crossentropy" in loss else None
    model.compile(keras.optimizers.SGD(0.1), loss, **({"metrics": metrics} | compiled))
    if not isinstance(x, (list, dict)):
        arrays[f"{prefix}/x"], arrays[f"{prefix}/y"] = x, y
    else:
        arrays[f"{prefix}/y"] = y if not isinstance(y, dict) else np.zeros(0)
    predictions = model.predict(x, verbose=0)
    for k, p in enumerate(predictions if isinstance(predictions, list) else [predictions]):
        arrays[f"{prefix}/predictions" + (f"/{k}" if isinstance(predictions, list) else "")] = p
    logs[prefix] = {"evaluate": model.evaluate(x, y, verbose=0, return_dict=True),
                    "history": model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history}
    for name, layer in parts.items():
        arrays.update({f"{prefix}/{name}/after{i}": w for i, w in enumerate(layer.get_weights())})


def main():
    keras.config.set_floatx("float64")
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"
    keras.utils.set_random_seed(0)
    tower_model, text_model, translator, tickets = keras_patterns.build(keras)
    rng = np.random.default_rng(0)
    arrays, logs = {}, {}
    model, parts = tower_model(TOWER["features"])
    x = rng.normal(size=(TOWER["rows"], TOWER["features"]))
    run(model, parts, x, np.tanh(x[:, :1] * 2), "mse", rng, "tower", arrays, logs)
    sizes = {k: v for k, v in TEXT.items() if k != "rows"}
    model, parts = text_model(**sizes)
    ids = rng.integers(0, TEXT["vocabulary"], (TEXT["rows"], TEXT["steps"])).astype(float)
    labels = rng.integers(0, TEXT["classes"], TEXT["rows"])
    run(model, parts, ids, labels, "sparse_categorical_crossentropy", rng, "text", arrays, logs)
    model, parts, sampler = translator(**{k: TRANSLATOR[k] for k in ("source_tokens", "target_tokens", "units")})
    rows, tokens = TRANSLATOR["rows"], TRANSLATOR["target_tokens"]
    source = np.eye(TRANSLATOR["source_tokens"])[rng.integers(0, TRANSLATOR["source_tokens"], (rows, TRANSLATOR["source_steps"]))]
    target = np.eye(tokens)[rng.integers(0, tokens, (rows, TRANSLATOR["target_steps"]))]
    run(model, parts, [source, target], np.roll(target, -1, axis=1), "categorical_crossentropy", rng, "translator",
        arrays, logs)
    arrays["translator/source"], arrays["translator/target"] = source, target
    arrays["translator/greedy"] = greedy(*sampler(), source[:1], 0, tokens, 4)
    model, parts = tickets(TICKETS["vocabulary"], TICKETS["tags"], TICKETS["departments"])
    rows = TICKETS["rows"]
    inputs = {"title": rng.integers(0, TICKETS["vocabulary"], (rows, TICKETS["title_steps"])).astype(float),
              "body": rng.integers(0, TICKETS["vocabulary"], (rows, TICKETS["body_steps"])).astype(float),
              "tags": rng.integers(0, 2, (rows, TICKETS["tags"])).astype(float)}
    targets = {"priority": rng.random((rows, 1)), "department": np.eye(TICKETS["departments"])[rng.integers(0, 4, rows)]}
    run(model, parts, inputs, targets, {"priority": keras.losses.BinaryCrossentropy(from_logits=True),
                                        "department": keras.losses.CategoricalCrossentropy(from_logits=True)},
        rng, "tickets", arrays, logs, loss_weights={"priority": 1.0, "department": 0.2})
    arrays.update({f"tickets/x/{k}": v for k, v in inputs.items()})
    arrays.update({f"tickets/y/{k}": v for k, v in targets.items()})
    path = Path(__file__).parent / "data" / "keras_subclassing.npz"
    np.savez_compressed(path, logs=json.dumps(logs), **arrays)
    print(f"wrote {path}: {logs}")


if __name__ == "__main__":
    main()
