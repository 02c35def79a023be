from .base import Activation


class Softmax(Activation):
    """Row-wise softmax: not elementwise, so it runs as its own kernels after the layer's product."""
    name, source = "softmax", "activations/softmax.cl"
    elementwise = False

    def to_onnx(self, graph, x):
        graph.require_opset(13, "Softmax normalising along the last axis alone")
        return graph.op("Softmax", x, axis=-1)

    def program(self, rt, dtype):
        return rt.program((self.source,), dtype)
