from .base import Activation


class Sigmoid(Activation):
    """y = a / (1 + exp(-x)) - b: `"sigmoid"`, Keras's sigmoid with the defaults a = 1, b = 0 (the MQL5
    book's parameters scale and shift it). Parameters by name: `get("sigmoid", a=2.0, b=1.0)`."""
    name, source, function, kernel_prefix = "sigmoid", "activations/sigmoid.cl", "sigmoid", "Sigmoid"
    defaults = {"a": 1.0, "b": 0.0}
    vector_form = True

    @property
    def derivative_from_output(self) -> bool:
        """Keras's sigmoid (a = 1, b = 0) only: its y is s itself; scaled or shifted, y + b can round
        to 0 or a where s does not."""
        return self.a == 1 and self.b == 0

    def to_onnx(self, graph, x):
        y = graph.op("Sigmoid", x)
        if self.a != 1:
            y = graph.op("Mul", y, graph.constant("a", self.a))
        if self.b != 0:
            y = graph.op("Sub", y, graph.constant("b", self.b))
        return y
