from .base import Activation


class Tanh(Activation):
    """y = tanh(x)."""
    name, source, function, kernel_prefix = "tanh", "activations/tanh.cl", "tanh", "Tanh"
