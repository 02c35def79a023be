"""Keras's regression metrics: the mean over positions of an error averaged over the last axis
(metrics/regression.cl)."""
from __future__ import annotations

import math

from .base import MeanMetric


class MeanSquaredError(MeanMetric):
    """Keras's `MeanSquaredError` metric (also `"mse"`, `"MSE"`, `"mean_squared_error"`): the mean
    over positions of (prediction - target)², averaged over the last axis, summed on the device
    after each batch. `name="mean_squared_error"`: the name in the logs; `dtype=None`: Keras's
    argument, kept for its signature (a clnet metric computes in the model's float type)."""
    source, kind, aliases = "metrics/regression.cl", 0, ("mse", "MSE")
    _direction = "down"

    def __init__(self, name="mean_squared_error", dtype=None):
        super().__init__(name, dtype)


class MeanAbsoluteError(MeanMetric):
    """Keras's `MeanAbsoluteError` metric (also `"mae"`, `"MAE"`, `"mean_absolute_error"`): the mean
    over positions of |prediction - target|, averaged over the last axis, summed on the device after
    each batch. `name="mean_absolute_error"`: the name in the logs; `dtype=None`: Keras's argument,
    kept for its signature (a clnet metric computes in the model's float type)."""
    source, kind, aliases = "metrics/regression.cl", 1, ("mae", "MAE")
    _direction = "down"

    def __init__(self, name="mean_absolute_error", dtype=None):
        super().__init__(name, dtype)


class MeanAbsolutePercentageError(MeanMetric):
    """Keras's `MeanAbsolutePercentageError` (also `"mape"`, `"MAPE"`): 100 |t - p| / max(|t|,
    1e-7), averaged over the last axis and the positions, as Keras.
    `name="mean_absolute_percentage_error"`; `dtype=None`, Keras's argument, kept for its signature
    (a clnet metric computes in the model's float type)."""
    source, kind, aliases = "metrics/regression.cl", 2, ("mape", "MAPE")
    _direction = "down"

    def __init__(self, name="mean_absolute_percentage_error", dtype=None):
        super().__init__(name, dtype)


class MeanSquaredLogarithmicError(MeanMetric):
    """Keras's `MeanSquaredLogarithmicError` (also `"msle"`, `"MSLE"`): (log(max(p, 1e-7) + 1) -
    log(max(t, 1e-7) + 1))², averaged over the last axis and the positions, as Keras.
    `name="mean_squared_logarithmic_error"`; `dtype=None`, Keras's argument, kept for its signature
    (a clnet metric computes in the model's float type)."""
    source, kind, aliases = "metrics/regression.cl", 3, ("msle", "MSLE")
    _direction = "down"

    def __init__(self, name="mean_squared_logarithmic_error", dtype=None):
        super().__init__(name, dtype)


class RootMeanSquaredError(MeanMetric):
    """Keras's `RootMeanSquaredError`: the root of the mean squared error over every output column
    of every position (the square root is taken of the whole epoch's mean, as Keras's).
    `name="root_mean_squared_error"`; `dtype=None`, Keras's argument, kept for its signature (a
    clnet metric computes in the model's float type)."""
    source, kind = "metrics/regression.cl", 0
    _direction = "down"

    def __init__(self, name="root_mean_squared_error", dtype=None):
        super().__init__(name, dtype)

    def result(self):
        return math.sqrt(super().result())
