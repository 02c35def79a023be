from .base import Activation


class GELU(Activation):
    """y = x Φ(x), Φ the standard normal CDF: `"gelu"`, Keras's with its default approximate=False
    (the exact erf form; `clnet.ops.gelu` also has the tanh approximation); no parameters."""
    name, source, function, kernel_prefix = "gelu", "activations/gelu.cl", "gelu", "GELU"
    vector_form = True

    def to_onnx(self, graph, x):
        return graph.gelu(x, approximate=False)
