from .base import Activation


class Sigmoid(Activation):
    """y = a / (1 + exp(-x)) - b."""
    name, source, function, kernel_prefix = "sigmoid", "activations/sigmoid.cl", "sigmoid", "Sigmoid"
    defaults = {"a": 1.0, "b": 0.0}
