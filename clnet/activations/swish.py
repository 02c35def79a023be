from .base import Activation


class Swish(Activation):
    """y = x sigmoid(b x)."""
    name, source, function, kernel_prefix = "swish", "activations/swish.cl", "swish", "Swish"
    defaults = {"b": 1.0}

    def to_onnx(self, graph, x):
        bx = x if self.b == 1 else graph.op("Mul", x, graph.constant("b", self.b))
        return graph.op("Mul", x, graph.op("Sigmoid", bx))
