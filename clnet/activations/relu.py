from .base import Activation


class ReLU(Activation):
    """y = max(x, 0)."""
    name, source, function, kernel_prefix = "relu", "activations/relu.cl", "relu", "ReLU"


class LReLU(Activation):
    """Leaky ReLU: y = x for x > 0, else a x (Keras's LeakyReLU default slope 0.3)."""
    name, source, function, kernel_prefix = "lrelu", "activations/relu.cl", "lrelu", "LReLU"
    defaults = {"a": 0.3}
