"""Keras's accuracy metrics: each the mean over positions of a hit (metrics/accuracy.cl).

compile's "accuracy" (and "acc") stays the loss kernel's own hit, computed in the same launch as
the loss (binary where the loss is binary cross-entropy, else the argmax's); these are the named
variants and their arguments."""
from __future__ import annotations

import numpy as np

from .base import MeanMetric


class BinaryAccuracy(MeanMetric):
    """Keras's `BinaryAccuracy`: the share of columns where (prediction > `threshold`) equals the
    target (targets 0 or 1), over every position. `name="binary_accuracy"`; `dtype=None`, Keras's
    argument, kept for its signature (a clnet metric computes in the model's float type);
    `threshold=0.5`, a finite number."""
    source, kind = "metrics/accuracy.cl", 0
    _direction = "up"

    def __init__(self, name="binary_accuracy", dtype=None, threshold=0.5):
        super().__init__(name, dtype)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)) \
                or not np.isfinite(threshold):
            raise ValueError(f"BinaryAccuracy threshold must be a number, got {threshold!r}")
        self.threshold = float(threshold)

    def parameter(self):
        return self.threshold

    def get_config(self):
        return {"name": self.name, "threshold": self.threshold}


class CategoricalAccuracy(MeanMetric):
    """Keras's `CategoricalAccuracy`: 1 where the largest prediction and the largest target (a
    one-hot row) are in the same column, else 0, averaged over the positions. Targets must be a
    column per class (a sparse loss's class ids raise: use `SparseCategoricalAccuracy`).
    `name="categorical_accuracy"`; `dtype=None`, Keras's argument, kept for its signature."""
    source, kind, reads_probabilities = "metrics/accuracy.cl", 1, False
    _direction = "up"

    def __init__(self, name="categorical_accuracy", dtype=None):
        super().__init__(name, dtype)


class SparseCategoricalAccuracy(MeanMetric):
    """Keras's `SparseCategoricalAccuracy`: 1 where the largest prediction is at the target's class
    id, else 0, averaged over the positions. Targets must be class ids, as
    `"sparse_categorical_crossentropy"` takes them. `name="sparse_categorical_accuracy"`;
    `dtype=None`, Keras's argument, kept for its signature."""
    source, kind, reads_probabilities, targets = "metrics/accuracy.cl", 2, False, "ids"
    _direction = "up"

    def __init__(self, name="sparse_categorical_accuracy", dtype=None):
        super().__init__(name, dtype)


class TopKCategoricalAccuracy(MeanMetric):
    """Keras's `TopKCategoricalAccuracy`: 1 where the target's class (a one-hot row's largest) is
    among the `k` largest predictions, averaged over the positions. `k=5`: a positive integer, at
    most the output's classes (more raise a `ValueError`, as Keras's top_k fails).
    `name="top_k_categorical_accuracy"`; `dtype=None`, Keras's argument, kept for its signature."""
    source, kind, reads_probabilities = "metrics/accuracy.cl", 3, False
    _direction = "up"

    def __init__(self, k=5, name="top_k_categorical_accuracy", dtype=None):
        super().__init__(name, dtype)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"{type(self).__name__} k must be a positive integer, got {k!r}")
        self.k = int(k)

    def check_shape(self, output_shape):
        if self.k > output_shape[-1]:  # Keras's top_k fails there too
            raise ValueError(f"metric {self.name!r}: k={self.k} is more than the output's {output_shape[-1]} classes")

    def parameter(self):
        return self.k

    def get_config(self):
        return {"name": self.name, "k": self.k}


class SparseTopKCategoricalAccuracy(TopKCategoricalAccuracy):
    """Keras's `SparseTopKCategoricalAccuracy`: 1 where the target's class id is among the `k`
    largest predictions, averaged over the positions. `k=5`: a positive integer, at most the
    output's classes. `name="sparse_top_k_categorical_accuracy"`; `dtype=None`, Keras's argument,
    kept for its signature."""
    kind, targets = 4, "ids"

    def __init__(self, k=5, name="sparse_top_k_categorical_accuracy", dtype=None):
        super().__init__(k, name, dtype)


def accuracy_for(loss_name: str, output_shape: tuple) -> MeanMetric:
    """The accuracy Keras computes for "accuracy" under this loss (compile_utils.get_metric):
    binary for one output column or binary cross-entropy, sparse for class ids, else categorical."""
    if loss_name == "binary_crossentropy" or output_shape[-1] == 1:
        return BinaryAccuracy(name="accuracy")
    if loss_name == "sparse_categorical_crossentropy":
        return SparseCategoricalAccuracy(name="accuracy")
    return CategoricalAccuracy(name="accuracy")
