from .base import Activation


class GELU(Activation):
    """y = x Φ(x), Φ the standard normal CDF: `"gelu"`, Keras's with its default approximate=False
    (the exact erf form; `clnet.ops.gelu` also has the tanh approximation); no parameters."""
    name, source, function, kernel_prefix = "gelu", "activations/gelu.cl", "gelu", "GELU"
    vector_form = True

    def to_onnx(self, graph, x):
        # ONNX's Gelu op arrives in opset 20; the same formula from Erf works in every opset.
        erf = graph.op("Erf", graph.op("Mul", x, graph.constant("rsqrt2", 0.5 ** 0.5)))
        one_plus = graph.op("Add", graph.constant("one", 1.0), erf)
        return graph.op("Mul", graph.op("Mul", x, graph.constant("half", 0.5)), one_plus)
