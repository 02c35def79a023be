"""Layers: one file each (or per family), its kernels in a .cl file of the same name."""
from .base import Layer
from .dense import Dense
from .activation import Activation, Softmax
from .flatten import Flatten
from .input import Input
from .conv import Conv1D, Conv2D
from .pooling import (AveragePooling1D, AveragePooling2D, GlobalAveragePooling1D, GlobalAveragePooling2D,
                      GlobalMaxPooling1D, GlobalMaxPooling2D, MaxPooling1D, MaxPooling2D)
from .reshape import Reshape
from .zero_padding import ZeroPadding2D

__all__ = ["Layer", "Dense", "Activation", "Softmax", "Flatten", "Input", "Conv1D", "Conv2D",
           "MaxPooling1D", "MaxPooling2D", "AveragePooling1D", "AveragePooling2D", "GlobalMaxPooling1D",
           "GlobalMaxPooling2D", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "Reshape", "ZeroPadding2D"]
