"""Datasets that load into numpy arrays, from local copies or a checksummed download."""
from . import fashion_mnist, imdb, mnist

__all__ = ["fashion_mnist", "imdb", "mnist"]
