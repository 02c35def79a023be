from .base import Activation


class Swish(Activation):
    """y = x sigmoid(b x)."""
    name, source, function, kernel_prefix = "swish", "activations/swish.cl", "swish", "Swish"
    defaults = {"b": 1.0}
