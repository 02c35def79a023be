"""Layers: one file each; a Dense layer's kernels live in dense.cl beside it."""
from .base import Layer
from .dense import Dense
from .activation import Activation, Softmax
from .flatten import Flatten
from .input import Input
from .merge import Add, Concatenate, Multiply

__all__ = ["Layer", "Dense", "Activation", "Softmax", "Flatten", "Input", "Add", "Multiply", "Concatenate"]
