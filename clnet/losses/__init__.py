"""Losses: each family's CalcOutputGradient kernel writes the output gradient and the per-sample
loss and accuracy, which stay on the device until a progress update reads their sum."""
from .base import Loss, get
from .regression import MeanSquaredError, MeanAbsoluteError
from .crossentropy import CategoricalCrossentropy, SparseCategoricalCrossentropy, BinaryCrossentropy

__all__ = ["Loss", "get", "MeanSquaredError", "MeanAbsoluteError", "CategoricalCrossentropy",
           "SparseCategoricalCrossentropy", "BinaryCrossentropy"]
