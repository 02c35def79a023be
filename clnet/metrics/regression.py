"""Keras's regression metrics: the mean over positions of an error averaged over the last axis
(metrics/regression.cl)."""
from __future__ import annotations

import math

from .base import MeanMetric


class MeanSquaredError(MeanMetric):
    source, kind, aliases = "metrics/regression.cl", 0, ("mse", "MSE")

    def __init__(self, name="mean_squared_error", dtype=None):
        super().__init__(name, dtype)


class MeanAbsoluteError(MeanMetric):
    source, kind, aliases = "metrics/regression.cl", 1, ("mae", "MAE")

    def __init__(self, name="mean_absolute_error", dtype=None):
        super().__init__(name, dtype)


class MeanAbsolutePercentageError(MeanMetric):
    """100 |t - p| / max(|t|, 1e-7), as Keras."""
    source, kind, aliases = "metrics/regression.cl", 2, ("mape", "MAPE")

    def __init__(self, name="mean_absolute_percentage_error", dtype=None):
        super().__init__(name, dtype)


class MeanSquaredLogarithmicError(MeanMetric):
    """(log(max(p, 1e-7) + 1) - log(max(t, 1e-7) + 1))^2, as Keras."""
    source, kind, aliases = "metrics/regression.cl", 3, ("msle", "MSLE")

    def __init__(self, name="mean_squared_logarithmic_error", dtype=None):
        super().__init__(name, dtype)


class RootMeanSquaredError(MeanMetric):
    """The root of the mean squared error over every output column of every position."""
    source, kind = "metrics/regression.cl", 0

    def __init__(self, name="root_mean_squared_error", dtype=None):
        super().__init__(name, dtype)

    def result(self):
        return math.sqrt(super().result())
