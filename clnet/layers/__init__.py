"""Layers: one file each; a layer's kernels live in the .cl file of the same name beside it."""
from .base import Layer
from .dense import Dense
from .activation import Activation, Softmax
from .flatten import Flatten
from .input import Input
from .merge import Add, Concatenate, Multiply
from .dropout import Dropout
from .batch_normalization import BatchNormalization
from .layer_normalization import LayerNormalization
from .locally_connected import LocallyConnected1D

__all__ = ["Layer", "Dense", "Activation", "Softmax", "Flatten", "Input", "Add", "Multiply", "Concatenate", "Dropout",
           "BatchNormalization", "LayerNormalization", "LocallyConnected1D"]
