from .base import Activation


class Linear(Activation):
    """y = a x + b; the identity by default (activation=None)."""
    name, source, function, kernel_prefix = "linear", "activations/linear.cl", "linear", "Linear"
    defaults = {"a": 1.0, "b": 0.0}
