from .base import Activation


class Softmax(Activation):
    """Row-wise softmax along the last axis, `"softmax"`: not elementwise, so it runs as its own
    kernels after the layer's product (a recurrent layer or LocallyConnected1D refuses it), and a
    cross-entropy loss at the model's output takes its derivative into its own gradient; no
    parameters."""
    name, source = "softmax", "activations/softmax.cl"
    elementwise = False

    def to_onnx(self, graph, x):
        graph.require_opset(13, "Softmax normalising along the last axis alone")
        return graph.op("Softmax", x, axis=-1)

    def program(self, rt, dtype):
        return rt.program((self.source,), dtype)
