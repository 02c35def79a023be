"""Keras's confusion-matrix metrics: Precision, Recall, FBetaScore/F1Score and AUC, whose state
is counts (per column, or per threshold) summed on the device (metrics/confusion.cl); the
result is taken from the counts on the host, with Keras's formulas, when logs are read."""
from __future__ import annotations

import numpy as np

from .base import Metric

EPSILON = 1e-7  # Keras's backend.epsilon()


def _divide_no_nan(a, b):
    return np.where(b == 0, 0.0, a / np.where(b == 0, 1, b))


def _number(value, argument: str, owner: str, low=None, high=None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{owner} {argument} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


class _Columns(Metric):
    """Counts per output column (confusion.cl's UpdateColumns): true positives, false positives,
    false negatives and the targets' sum, each (cols,)."""
    source, kernel_name = "metrics/confusion.cl", "UpdateColumns"
    _direction = "up"  # (precision, recall and the F-scores)
    row_max = False
    labels_as_bool = True

    def state_size(self):
        return 4 * self.cols

    def bind_update(self, kernel):
        threshold = 0.0 if self.threshold is None else self.threshold
        return kernel.bind(("target", "outputs", "tokens", "positions", "row_weights", "weighted"), cols=self.cols,
                           row_max=int(self.row_max), threshold=float(threshold),
                           labels_as_bool=int(self.labels_as_bool), state=self.state)

    def update(self, target, output, tokens, row_weights, weighted):
        size = self.rt.local_size
        self.kernel((size,), (size,), target, output, tokens, self.weight_stride, row_weights, weighted)

    def counts(self):
        """(true positives, false positives, false negatives, targets' sum), each per column."""
        return self.state.numpy().astype(np.float64).reshape(4, self.cols)


class _PrecisionRecall(_Columns):
    """What Precision and Recall share: Keras's thresholds (one number), class_id (one column,
    else all columns' counts summed); top_k is not taken."""

    def __init__(self, thresholds=None, top_k=None, class_id=None, name=None, dtype=None):
        super().__init__(name, dtype)
        owner = type(self).__name__
        if top_k is not None:
            raise ValueError(f"{owner}: top_k is not supported by clnet (got top_k={top_k!r}); leave it None")
        if isinstance(thresholds, (list, tuple, np.ndarray)):
            raise ValueError(f"{owner} thresholds must be one number in clnet, got {thresholds!r}")
        self.threshold = 0.5 if thresholds is None else _number(thresholds, "thresholds", owner, 0, 1)
        self.thresholds = thresholds
        if class_id is not None and (isinstance(class_id, bool) or not isinstance(class_id, (int, np.integer))
                                     or class_id < 0):
            raise ValueError(f"{owner} class_id must be a non-negative integer or None, got {class_id!r}")
        self.class_id = None if class_id is None else int(class_id)

    def check_shape(self, output_shape):
        if self.class_id is not None and self.class_id >= output_shape[-1]:
            raise ValueError(f"metric {self.name!r}: class_id={self.class_id} is not a column of the output's "
                             f"{output_shape[-1]}")

    def selected(self):
        tp, fp, fn, _ = self.counts()
        if self.class_id is not None:
            return tp[self.class_id], fp[self.class_id], fn[self.class_id]
        return tp.sum(), fp.sum(), fn.sum()

    def get_config(self):
        return {"name": self.name, "thresholds": self.thresholds, "top_k": None, "class_id": self.class_id}


class Precision(_PrecisionRecall):
    """Keras's `Precision`: true positives / (true positives + false positives), a prediction
    positive where it is above the threshold and a target positive where it is not 0; 0 where
    nothing was predicted positive. The counts are summed per column on the device.

    - `thresholds=None`: one number in [0, 1] (None: 0.5); Keras's list of thresholds is refused.
    - `top_k=None`: must be None (refused otherwise: not yet supported).
    - `class_id=None`: one column's counts alone (a non-negative integer, a column of the output),
      else every column's summed.
    - `name="precision"`; `dtype=None`, Keras's argument, kept for its signature."""

    def __init__(self, thresholds=None, top_k=None, class_id=None, name="precision", dtype=None):
        super().__init__(thresholds, top_k, class_id, name, dtype)

    def result(self):
        tp, fp, _ = self.selected()
        return float(_divide_no_nan(tp, tp + fp))


class Recall(_PrecisionRecall):
    """Keras's `Recall`: true positives / (true positives + false negatives), a prediction positive
    where it is above the threshold and a target positive where it is not 0; 0 where no target was
    positive. The counts are summed per column on the device.

    - `thresholds=None`: one number in [0, 1] (None: 0.5); Keras's list of thresholds is refused.
    - `top_k=None`: must be None (refused otherwise: not yet supported).
    - `class_id=None`: one column's counts alone (a non-negative integer, a column of the output),
      else every column's summed.
    - `name="recall"`; `dtype=None`, Keras's argument, kept for its signature."""

    def __init__(self, thresholds=None, top_k=None, class_id=None, name="recall", dtype=None):
        super().__init__(thresholds, top_k, class_id, name, dtype)

    def result(self):
        tp, _, fn = self.selected()
        return float(_divide_no_nan(tp, tp + fn))


class FBetaScore(_Columns):
    """Keras's F-beta score per class (average=None: an array), or averaged ("micro": over the
    summed counts, "macro": the mean of the classes', "weighted": by each class's targets). With
    threshold=None a prediction is positive where it is its row's largest.

    Outputs must be `(batch, classes)`, as Keras's. `average=None`: None, `"micro"`, `"macro"` or
    `"weighted"`; `beta=1.0`: a positive number, recall counting beta times as much as precision;
    `threshold=None`: None or a number in (0, 1], a prediction positive above it;
    `name="fbeta_score"`; `dtype=None`, Keras's argument, kept for its signature (the per-class
    array is in the model's float type)."""
    labels_as_bool = False

    def __init__(self, average=None, beta=1.0, threshold=None, name="fbeta_score", dtype=None):
        super().__init__(name, dtype)
        owner = type(self).__name__
        if average not in (None, "micro", "macro", "weighted"):
            raise ValueError(f"{owner} average must be None, 'micro', 'macro' or 'weighted', got {average!r}")
        self.average = average
        self.beta = _number(beta, "beta", owner, 0)
        if self.beta <= 0:
            raise ValueError(f"{owner} beta must be above 0, got {beta!r}")
        if threshold is not None and _number(threshold, "threshold", owner, 0, 1) <= 0:
            raise ValueError(f"{owner} threshold must be in (0, 1], got {threshold!r}")
        self.threshold = None if threshold is None else float(threshold)
        self.row_max = threshold is None

    def check_shape(self, output_shape):
        if len(output_shape) != 1:
            raise ValueError(f"metric {self.name!r} ({type(self).__name__}) takes outputs of shape (batch, classes), "
                             f"as Keras's; got (batch, {', '.join(map(str, output_shape))})")

    def result(self):
        tp, fp, fn, positives = self.counts()
        if self.average == "micro":
            tp, fp, fn, positives = tp.sum(), fp.sum(), fn.sum(), positives.sum()
        precision = tp / (tp + fp + EPSILON)
        recall = tp / (tp + fn + EPSILON)
        b2 = self.beta ** 2
        score = precision * recall / (b2 * precision + recall + EPSILON) * (1 + b2)
        if self.average == "weighted":
            return float(np.sum(score * positives / (positives.sum() + EPSILON)))
        if self.average is not None:
            return float(np.mean(score))
        return score.astype(self.dtype_bound)

    def get_config(self):
        return {"name": self.name, "average": self.average, "beta": self.beta, "threshold": self.threshold}


class F1Score(FBetaScore):
    """Keras's `F1Score`: FBetaScore with beta 1, the harmonic mean of precision and recall, per
    class (an array) or averaged. `average=None`: None, `"micro"`, `"macro"` or `"weighted"`;
    `threshold=None`: None (a prediction positive where it is its row's largest) or a number in (0,
    1]; `name="f1_score"`; `dtype=None`, Keras's argument, kept for its signature. Outputs must be
    `(batch, classes)`."""

    def __init__(self, average=None, threshold=None, name="f1_score", dtype=None):
        super().__init__(average, 1.0, threshold, name, dtype)

    def get_config(self):
        return {"name": self.name, "average": self.average, "threshold": self.threshold}


class AUC(Metric):
    """The area under the ROC or the precision-recall curve, from counts at `num_thresholds`
    evenly spaced thresholds (Keras's bucketed update), every output column's predictions taken
    together, or with multi_label one curve per column and their mean (weighted by
    `label_weights` if given, as Keras's); summation_method "interpolation" (for PR, Davis and
    Goadrich's), "minoring" or "majoring".

    - `num_thresholds=200`: an integer above 1; the thresholds are evenly spaced over [0, 1].
    - `curve="ROC"`: `"ROC"` or `"PR"` (any case).
    - `summation_method="interpolation"`: `"interpolation"`, `"minoring"` or `"majoring"`.
    - `name="auc"`; `dtype=None`, Keras's argument, kept for its signature.
    - `thresholds=None`: must be None (Keras's list of thresholds is not yet supported): give
      `num_thresholds`.
    - `multi_label=False`: a bool; True for a curve per output column.
    - `num_labels=None`: with `multi_label`, the output's columns (checked against the output).
    - `label_weights=None`: with `multi_label`, one non-negative weight per column, not all 0.
    - `from_logits=False`: a bool; True where the predictions are logits, which the sigmoid maps
      to probabilities first."""
    source, kernel_name = "metrics/confusion.cl", "UpdateThresholds"
    _direction = "up"

    def __init__(self, num_thresholds=200, curve="ROC", summation_method="interpolation", name="auc",
                 dtype=None, thresholds=None, multi_label=False, num_labels=None, label_weights=None,
                 from_logits=False):
        super().__init__(name, dtype)
        if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, (int, np.integer)) or num_thresholds <= 1:
            raise ValueError(f"AUC num_thresholds must be an integer > 1, got {num_thresholds!r}")
        self.num_thresholds = int(num_thresholds)
        self.curve = str(curve).upper()
        if self.curve not in ("ROC", "PR"):
            raise ValueError(f"AUC curve must be 'ROC' or 'PR', got {curve!r}")
        self.summation_method = str(summation_method).lower()
        if self.summation_method not in ("interpolation", "minoring", "majoring"):
            raise ValueError("AUC summation_method must be 'interpolation', 'minoring' or 'majoring', "
                             f"got {summation_method!r}")
        if thresholds is not None:
            raise ValueError(f"AUC thresholds is not supported by clnet (got {thresholds!r}); leave it None and "
                             "give num_thresholds")
        if not isinstance(multi_label, (bool, np.bool_)):
            raise ValueError(f"AUC multi_label must be True or False, got {multi_label!r}")
        self.multi_label = bool(multi_label)
        if num_labels is not None and (isinstance(num_labels, bool) or not isinstance(num_labels, (int, np.integer))
                                       or num_labels < 1 or not self.multi_label):
            raise ValueError(f"AUC num_labels must be a positive integer, with multi_label=True, got {num_labels!r}")
        self.num_labels = None if num_labels is None else int(num_labels)
        if label_weights is not None:
            weights = np.asarray(label_weights, np.float64)
            if (not self.multi_label or weights.ndim != 1 or not np.all(np.isfinite(weights)) or np.any(weights < 0)
                    or not weights.sum() > 0):
                raise ValueError("AUC label_weights must be one non-negative number per label, not all 0, with "
                                 f"multi_label=True, got {label_weights!r}")
            label_weights = weights.tolist()
        self.label_weights = label_weights
        if not isinstance(from_logits, (bool, np.bool_)):
            raise ValueError(f"AUC from_logits must be True or False, got {from_logits!r}")
        self.from_logits = bool(from_logits)

    def check_shape(self, output_shape):
        labels = [n for n in (self.num_labels, None if self.label_weights is None else len(self.label_weights))
                  if n is not None]
        if self.multi_label and any(n != output_shape[-1] for n in labels):
            raise ValueError(f"metric {self.name!r}: num_labels or label_weights give {labels[0]} labels, but the "
                             f"output has {output_shape[-1]} columns")

    @property
    def labels(self) -> int:
        return self.cols if self.multi_label else 1

    def state_size(self):
        return 2 * self.num_thresholds * self.labels

    def bind_update(self, kernel):
        return kernel.bind(("target", "outputs", "elements", "per_row", "row_weights", "weighted"),
                           thresholds=self.num_thresholds, from_logits=int(self.from_logits), labels=self.labels,
                           state=self.state)

    def update(self, target, output, tokens, row_weights, weighted):
        size = self.rt.local_size
        self.kernel((size,), (size,), target, output, tokens * self.cols, self.weight_stride * self.cols,
                    row_weights, weighted)

    def result(self):
        counts = self.state.numpy().astype(np.float64).reshape(self.labels, 2, self.num_thresholds)
        areas = np.array([self._area(tp, fp) for tp, fp in counts])
        if not self.multi_label:
            return float(areas[0])
        if self.label_weights is None:
            return float(areas.mean())
        weights = np.asarray(self.label_weights)
        return float(np.sum(areas * weights) / weights.sum())

    def _area(self, tp, fp):
        """The area under one curve, from its counts at each threshold."""
        fn, tn = tp[0] - tp, fp[0] - fp  # threshold 0 counts every element
        if self.curve == "PR" and self.summation_method == "interpolation":
            return self._interpolated_pr(tp, fp, fn)
        recall = _divide_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = _divide_no_nan(fp, fp + tn), recall
        else:
            x, y = recall, _divide_no_nan(tp, tp + fp)
        heights = {"interpolation": (y[:-1] + y[1:]) / 2, "minoring": np.minimum(y[:-1], y[1:]),
                   "majoring": np.maximum(y[:-1], y[1:])}[self.summation_method]
        return np.sum((x[:-1] - x[1:]) * heights)

    @staticmethod
    def _interpolated_pr(tp, fp, fn):
        """Keras's interpolate_pr_auc (Davis and Goadrich's interpolation, in closed form)."""
        dtp = tp[:-1] - tp[1:]
        p = tp + fp
        dp = p[:-1] - p[1:]
        slope = _divide_no_nan(dtp, np.maximum(dp, 0))
        intercept = tp[1:] - slope * p[1:]
        both = (p[:-1] > 0) & (p[1:] > 0)
        ratio = np.where(both, _divide_no_nan(p[:-1], np.maximum(p[1:], 0)), 1.0)
        return np.sum(_divide_no_nan(slope * (dtp + intercept * np.log(ratio)), np.maximum(tp[1:] + fn[1:], 0)))

    def get_config(self):
        return {"name": self.name, "num_thresholds": self.num_thresholds, "curve": self.curve,
                "summation_method": self.summation_method, "multi_label": self.multi_label,
                "num_labels": self.num_labels, "label_weights": self.label_weights, "from_logits": self.from_logits}
