"""Keras's metrics, computed on the device: after each batch's loss, one launch per metric adds
the batch's statistics to the metric's state; a progress update reads it once. compile takes
them by Keras's names ("AUC", "mse", "precision", ...) or as objects; "accuracy" is the loss
kernel's own hit (no launch of its own)."""
from .base import Metric, MeanMetric, get
from .accuracy import (BinaryAccuracy, CategoricalAccuracy, SparseCategoricalAccuracy, TopKCategoricalAccuracy,
                       SparseTopKCategoricalAccuracy, accuracy_for)
from .regression import (MeanSquaredError, MeanAbsoluteError, MeanAbsolutePercentageError,
                         MeanSquaredLogarithmicError, RootMeanSquaredError)
from .confusion import Precision, Recall, FBetaScore, F1Score, AUC

__all__ = ["Metric", "MeanMetric", "get", "BinaryAccuracy", "CategoricalAccuracy", "SparseCategoricalAccuracy",
           "TopKCategoricalAccuracy", "SparseTopKCategoricalAccuracy", "MeanSquaredError", "MeanAbsoluteError",
           "MeanAbsolutePercentageError", "MeanSquaredLogarithmicError", "RootMeanSquaredError", "Precision",
           "Recall", "FBetaScore", "F1Score", "AUC", "accuracy_for"]
