from .base import Activation


class ReLU(Activation):
    """y = max(x, 0): `"relu"`, as Keras's `"relu"` with its defaults; no parameters (the `ReLU` layer
    and `clnet.activations.relu` take Keras's `max_value`, `negative_slope` and `threshold`)."""
    name, source, function, kernel_prefix = "relu", "activations/relu.cl", "relu", "ReLU"
    vector_form = True
    derivative_from_output = True

    def to_onnx(self, graph, x):
        return graph.op("Relu", x)


class LReLU(Activation):
    """Leaky ReLU: y = x for x > 0, else a x: `"lrelu"`, slope a = 0.3 by default (Keras's LeakyReLU
    layer's); Keras's name `"leaky_relu"` gives a = 0.2, its function's default. Parameters by name:
    `get("lrelu", a=0.1)`."""
    name, source, function, kernel_prefix = "lrelu", "activations/relu.cl", "lrelu", "LReLU"
    vector_form = True
    defaults = {"a": 0.3}

    def to_onnx(self, graph, x):
        if graph.dtype != "float64":
            return graph.op("LeakyRelu", x, alpha=self.a)
        # LeakyRelu's alpha is a float32 attribute: a double slope stays exact as a PRelu's tensor.
        return graph.op("PRelu", x, graph.constant("a", self.a))
