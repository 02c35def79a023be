"""Test accuracy of the same short recipes in clnet and in Keras 3 over several seeds: mean,
spread, the difference of the means. The recipes are written once and built with either
library (clnet's layers take Keras's names and arguments); both read Fashion-MNIST alike.

    cnn          Conv2D(32, 3, relu), MaxPooling2D, Conv2D(64, 3, strides 2, relu),
                 BatchNormalization, GlobalAveragePooling2D, Dropout(0.3), Dense(10, softmax)
    lstm         each image's 28 rows as 28 steps: LSTM(64), Dense(10, softmax)
    transformer  the rows as 28 tokens: Dense(32), a residual MultiHeadAttention(2, 16) and a
                 residual feed-forward block (Dense(64, relu), Dense(32)), each followed by
                 LayerNormalization, GlobalAveragePooling1D, Dense(10, softmax)

Adam(1e-3), batch 64, sparse cross-entropy; the test accuracy after the last epoch. Keras must
be importable in the same environment (pip install keras==3.15.1 torch==2.13.0; KERAS_BACKEND=torch):

    KERAS_BACKEND=torch python -m benchmarks.accuracy_over_seeds --recipe cnn --seeds 8
    python -m benchmarks.accuracy_over_seeds --recipe cnn --frameworks clnet   # clnet alone

Prints one table and a JSON line.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from .common import cpu_name, device_name, emit, fashion_mnist, versions

EPOCHS = {"cnn": 3, "lstm": 2, "transformer": 2}


def build(recipe: str, lib):
    """The recipe's model with `lib` (keras, or clnet) and its layers module."""
    L = lib.layers
    if recipe == "cnn":
        return lib.Sequential([lib.Input((28, 28, 1)), L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(),
                               L.Conv2D(64, 3, strides=2, activation="relu"), L.BatchNormalization(),
                               L.GlobalAveragePooling2D(), L.Dropout(0.3), L.Dense(10, activation="softmax")])
    if recipe == "lstm":
        return lib.Sequential([lib.Input((28, 28)), L.LSTM(64), L.Dense(10, activation="softmax")])
    x = lib.Input((28, 28))
    h = L.Dense(32)(x)
    h = L.LayerNormalization()(L.Add()([h, L.MultiHeadAttention(2, 16)(h, h)]))
    h = L.LayerNormalization()(L.Add()([h, L.Dense(32)(L.Dense(64, activation="relu")(h))]))
    return lib.Model(x, L.Dense(10, activation="softmax")(L.GlobalAveragePooling1D()(h)))


def train(framework: str, recipe: str, seed: int, data, epochs: int) -> tuple[float, float]:
    """(test accuracy, seconds) of one run."""
    (x, y), (x_test, y_test) = data
    if framework == "keras":
        import keras as lib
        lib.utils.set_random_seed(seed)
    else:
        import clnet as lib
        lib.utils.set_random_seed(seed)
    shape = (28, 28, 1) if recipe == "cnn" else (28, 28)
    x, x_test = x.reshape(-1, *shape), x_test.reshape(-1, *shape)
    model = build(recipe, lib)
    model.compile(optimizer=lib.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    started = time.perf_counter()
    model.fit(x, y, batch_size=64, epochs=epochs, verbose=0)
    seconds = time.perf_counter() - started
    result = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    return float(result[1]), seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", choices=sorted(EPOCHS), action="append",
                        help="a recipe (repeat for several; default: all)")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, help="instead of the recipe's")
    parser.add_argument("--samples", type=int, help="train on the first N images only (a quick look, not a result)")
    parser.add_argument("--frameworks", default="clnet,keras")
    args = parser.parse_args(argv)
    data = fashion_mnist()
    if args.samples:
        data = ((data[0][0][:args.samples], data[0][1][:args.samples]), data[1])
    frameworks = args.frameworks.split(",")
    rows, runs = [], {}
    for recipe in args.recipe or sorted(EPOCHS):
        epochs = args.epochs or EPOCHS[recipe]
        means = {}
        for framework in frameworks:
            scores, times = [], []
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                accuracy, seconds = train(framework, recipe, seed, data, epochs)
                scores.append(accuracy)
                times.append(seconds)
                print(f"{recipe} {framework} seed {seed}: {accuracy:.4f} ({seconds:.0f} s)", flush=True)
            runs[f"{recipe}/{framework}"] = scores
            means[framework] = statistics.mean(scores)
            rows.append((recipe, framework, epochs, len(scores), means[framework],
                         statistics.stdev(scores) if len(scores) > 1 else 0.0, min(scores), max(scores),
                         statistics.median(times)))
        if {"clnet", "keras"} <= set(means):
            runs[f"{recipe}/clnet_minus_keras_points"] = 100 * (means["clnet"] - means["keras"])
    print(f"\n| recipe | framework | epochs | seeds | mean accuracy | std | min | max | s per run |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for recipe, framework, epochs, n, mean, std, low, high, seconds in rows:
        print(f"| {recipe} | {framework} | {epochs} | {n} | {mean:.4f} | {std:.4f} | {low:.4f} | {high:.4f} | {seconds:.0f} |")
    import clnet
    emit({"benchmark": "accuracy_over_seeds", "device": device_name(clnet.runtime().info), "cpu": cpu_name(),
          "keras_backend": os.environ.get("KERAS_BACKEND"), "samples": args.samples, "runs": runs,
          **versions("clnet", "keras", "torch")})


if __name__ == "__main__":
    main()
