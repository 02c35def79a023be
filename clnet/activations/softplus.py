from .base import Activation


class Softplus(Activation):
    """y = log(1 + exp(x))."""
    name, source, function, kernel_prefix = "softplus", "activations/softplus.cl", "softplus", "Softplus"

    def to_onnx(self, graph, x):
        return graph.op("Softplus", x)
