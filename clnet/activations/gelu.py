from .base import Activation


class GELU(Activation):
    """y = x Φ(x), Φ the standard normal CDF: Keras's "gelu" with its default approximate=False."""
    name, source, function, kernel_prefix = "gelu", "activations/gelu.cl", "gelu", "GELU"
