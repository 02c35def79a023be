from .base import Activation


class Tanh(Activation):
    """y = tanh(x): `"tanh"`, as Keras's; no parameters. Its derivative, 1 - y², is computed from
    the output."""
    name, source, function, kernel_prefix = "tanh", "activations/tanh.cl", "hyperbolic_tangent", "Tanh"
    vector_form = True
    derivative_from_output = True

    def to_onnx(self, graph, x):
        return graph.op("Tanh", x)
