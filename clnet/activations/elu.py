from .base import Activation


class ELU(Activation):
    """Exponential linear unit: y = x for x > 0, else a (exp(x) - 1): `"elu"`, Keras's with alpha = a,
    1 by default. Parameters by name: `get("elu", a=0.5)`."""
    name, source, function, kernel_prefix = "elu", "activations/elu.cl", "elu", "ELU"
    vector_form = True
    defaults = {"a": 1.0}

    def to_onnx(self, graph, x):
        # Elu's alpha is a float32 attribute, so a float64 model's alpha is rounded to float there
        # (1.0, the default, is exact); onnxruntime (1.32) has no double Elu kernel.
        return graph.op("Elu", x, alpha=self.a)
