"""Datasets that load into numpy arrays, from local copies or a checksummed download."""
from . import fashion_mnist

__all__ = ["fashion_mnist"]
