from .base import Activation


class Swish(Activation):
    """y = x sigmoid(b x): `"swish"`, also Keras's name `"silu"`, with b = 1 by default (Keras's
    silu). Parameters by name: `get("swish", b=1.702)`."""
    name, source, function, kernel_prefix = "swish", "activations/swish.cl", "swish", "Swish"
    vector_form = True
    defaults = {"b": 1.0}

    def to_onnx(self, graph, x):
        bx = x if self.b == 1 else graph.op("Mul", x, graph.constant("b", self.b))
        if graph.dtype != "float64":
            return graph.op("Mul", x, graph.op("Sigmoid", bx))
        # onnxruntime (1.23 at least) fuses x * Sigmoid(b x) into QuickGelu, which has no double
        # kernel; a float64 model writes the kernel's own formula, x / (1 + exp(-b x)).
        exp = graph.op("Exp", graph.op("Neg", bx))
        return graph.op("Div", x, graph.op("Add", graph.constant("one", 1.0), exp))
