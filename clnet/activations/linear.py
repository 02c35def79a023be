from .base import Activation


class Linear(Activation):
    """y = a x + b: `"linear"` (also `None`, `"none"`), the identity with the defaults a = 1, b = 0,
    as Keras's `"linear"`. Parameters by name: `get("linear", a=2.0, b=1.0)`."""
    name, source, function, kernel_prefix = "linear", "activations/linear.cl", "linear", "Linear"
    vector_form = True
    derivative_from_output = True
    defaults = {"a": 1.0, "b": 0.0}

    def to_onnx(self, graph, x):
        if self.a != 1:
            x = graph.op("Mul", x, graph.constant("a", self.a))
        if self.b != 0:
            x = graph.op("Add", x, graph.constant("b", self.b))
        return x
