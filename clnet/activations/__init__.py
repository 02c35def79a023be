"""Activation families: each file holds a family's classes, its .cl file its OpenCL functions."""
from .base import Activation, get
from .linear import Linear
from .sigmoid import Sigmoid
from .tanh import Tanh
from .relu import ReLU, LReLU
from .swish import Swish
from .gelu import GELU
from .softplus import Softplus
from .elu import ELU
from .softmax import Softmax
# Keras's functions, by the families' names: from here on `activations.relu` is the function, not the module.
from .functions import elu, gelu, leaky_relu, linear, relu, sigmoid, silu, softmax, softplus, swish, tanh

__all__ = ["Activation", "get", "Linear", "Sigmoid", "Tanh", "ReLU", "LReLU", "Swish", "GELU", "Softplus", "ELU", "Softmax",
           "elu", "gelu", "leaky_relu", "linear", "relu", "sigmoid", "silu", "softmax", "softplus", "swish", "tanh"]
