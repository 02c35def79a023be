"""Writes tests/data/keras_metrics.npz: Keras 3's metrics (float32, their defaults and some
arguments) on predictions and targets drawn here, so that tests/test_metrics.py checks clnet's
device metrics against Keras's own numbers without importing Keras (CI has no Keras).

    KERAS_BACKEND=torch python tests/make_keras_metrics_fixture.py

Each case: predictions "<case>/p", targets "<case>/t" (and for weighted_* cases each sample's
weight "<case>/w") and, in the JSON entry "cases", the loss a clnet model would take those
targets with and each metric's class, arguments and result.
"""
import json
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # noqa: E402


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main():
    rng = np.random.default_rng(7)
    n = 53  # not a multiple of the tests' batch sizes
    logits = rng.normal(0, 2, (n, 1))
    binary_t = (rng.random((n, 1)) < 1 / (1 + np.exp(-logits))).astype(np.float32)
    classes_p = softmax(rng.normal(0, 1.5, (n, 6)))
    classes_ids = rng.integers(0, 6, n)
    labels_t = (rng.random((n, 4)) < 0.4).astype(np.float32)
    steps_p = softmax(rng.normal(0, 1, (n, 3, 5)))
    cases = {
        "binary": (1 / (1 + np.exp(-logits)), binary_t, "binary_crossentropy", [
            ("BinaryAccuracy", {}), ("BinaryAccuracy", {"threshold": 0.3, "name": "ba3"}),
            ("AUC", {}), ("AUC", {"curve": "PR", "name": "pr"}), ("AUC", {"summation_method": "minoring", "name": "lo"}),
            ("AUC", {"summation_method": "majoring", "name": "hi"}), ("AUC", {"num_thresholds": 17, "name": "a17"}),
            ("AUC", {"curve": "PR", "summation_method": "majoring", "name": "prhi"}),
            ("Precision", {}), ("Recall", {}), ("Precision", {"thresholds": 0.3, "name": "p3"}),
            ("Recall", {"thresholds": 0.7, "name": "r7"}), ("F1Score", {"threshold": 0.5}),
            ("MeanSquaredError", {}), ("MeanAbsoluteError", {}), ("RootMeanSquaredError", {}),
            ("MeanAbsolutePercentageError", {}), ("MeanSquaredLogarithmicError", {})]),
        "logits": (logits, binary_t, "mse", [("AUC", {"from_logits": True})]),
        "classes": (classes_p, np.eye(6, dtype=np.float32)[classes_ids], "categorical_crossentropy", [
            ("CategoricalAccuracy", {}), ("TopKCategoricalAccuracy", {}),
            ("TopKCategoricalAccuracy", {"k": 2, "name": "top2"}), ("F1Score", {}),
            ("F1Score", {"average": "micro", "name": "f1micro"}), ("F1Score", {"average": "macro", "name": "f1macro"}),
            ("F1Score", {"average": "weighted", "name": "f1weighted"}),
            ("FBetaScore", {"beta": 2.0, "average": "macro", "threshold": 0.2}),
            ("Precision", {"class_id": 2}), ("Recall", {"class_id": 4}), ("AUC", {}), ("AUC", {"curve": "PR", "name": "pr"}),
            ("MeanSquaredError", {})]),
        "ids": (classes_p, classes_ids.astype(np.float32), "sparse_categorical_crossentropy", [
            ("SparseCategoricalAccuracy", {}), ("SparseTopKCategoricalAccuracy", {}),
            ("SparseTopKCategoricalAccuracy", {"k": 2, "name": "top2"})]),
        "labels": (rng.random((n, 4)), labels_t, "binary_crossentropy", [
            ("BinaryAccuracy", {}), ("Precision", {}), ("Recall", {}), ("AUC", {}),
            ("F1Score", {"threshold": 0.5, "average": "macro"}), ("AUC", {"multi_label": True, "name": "ml"}),
            ("AUC", {"multi_label": True, "curve": "PR", "name": "mlpr"}),
            ("AUC", {"multi_label": True, "num_labels": 4, "label_weights": [1.0, 2.0, 0.5, 0.0], "name": "mlw"})]),
        "regression": (rng.normal(1, 1, (n, 3)), rng.normal(1, 1, (n, 3)), "mse", [
            ("MeanSquaredError", {}), ("MeanAbsoluteError", {}), ("RootMeanSquaredError", {}),
            ("MeanAbsolutePercentageError", {}), ("MeanSquaredLogarithmicError", {})]),
        "steps": (steps_p, rng.integers(0, 5, (n, 3)).astype(np.float32), "sparse_categorical_crossentropy", [
            ("SparseCategoricalAccuracy", {}), ("SparseTopKCategoricalAccuracy", {"k": 2})]),
    }
    # Weighted by a sample weight each (compile's weighted_metrics with fit's sample_weight).
    weights = rng.random(n) * 2
    weighted = {
        "binary": ["BinaryAccuracy", "AUC", "Precision", "Recall", "MeanSquaredError", "F1Score"],
        "classes": ["CategoricalAccuracy", "TopKCategoricalAccuracy", "AUC", "F1Score"],
        "steps": ["SparseCategoricalAccuracy", "SparseTopKCategoricalAccuracy"],
    }
    for case, names in weighted.items():
        p, t, loss, metrics = cases[case]
        cases[f"weighted_{case}"] = (p, t, loss, [(cls, kwargs) for cls, kwargs in metrics if cls in names
                                                  and cls not in [c for c, _ in metrics[:metrics.index((cls, kwargs))]]])
    arrays, entries = {}, {}
    for case, (p, t, loss, metrics) in cases.items():
        p, t = p.astype(np.float32), t.astype(np.float32)
        arrays[f"{case}/p"], arrays[f"{case}/t"] = p, t
        w = None
        if case.startswith("weighted_"):
            w = arrays[f"{case}/w"] = weights.astype(np.float32)
        results = []
        for cls, kwargs in metrics:
            metric = getattr(keras.metrics, cls)(**kwargs)
            metric.update_state(t, p, sample_weight=w)
            results.append([cls, kwargs, np.asarray(metric.result(), np.float64).tolist()])
        entries[case] = {"loss": loss, "metrics": results}
    arrays["cases"] = np.frombuffer(json.dumps(entries).encode(), np.uint8)
    path = Path(__file__).parent / "data" / "keras_metrics.npz"
    np.savez_compressed(path, **arrays)
    print(f"wrote {path} (Keras {keras.__version__}, {keras.backend.backend()})")


if __name__ == "__main__":
    main()
