from .base import Activation


class ReLU(Activation):
    """y = max(x, 0)."""
    name, source, function, kernel_prefix = "relu", "activations/relu.cl", "relu", "ReLU"
    vector_form = True
    derivative_from_output = True

    def to_onnx(self, graph, x):
        return graph.op("Relu", x)


class LReLU(Activation):
    """Leaky ReLU: y = x for x > 0, else a x (Keras's LeakyReLU default slope 0.3)."""
    name, source, function, kernel_prefix = "lrelu", "activations/relu.cl", "lrelu", "LReLU"
    vector_form = True
    defaults = {"a": 0.3}

    def to_onnx(self, graph, x):
        if graph.dtype == "float32":
            return graph.op("LeakyRelu", x, alpha=self.a)
        # LeakyRelu's alpha is a float32 attribute: a double slope stays exact as a PRelu's tensor.
        return graph.op("PRelu", x, graph.constant("a", self.a))
