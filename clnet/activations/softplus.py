from .base import Activation


class Softplus(Activation):
    """y = log(1 + exp(x)): `"softplus"`, as Keras's; no parameters."""
    name, source, function, kernel_prefix = "softplus", "activations/softplus.cl", "softplus", "Softplus"
    vector_form = True

    def to_onnx(self, graph, x):
        return graph.op("Softplus", x)
