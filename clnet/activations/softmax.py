from .base import Activation


class Softmax(Activation):
    """Row-wise softmax: not elementwise, so it runs as its own kernels after the layer's product."""
    name, source = "softmax", "activations/softmax.cl"
    elementwise = False

    def program(self, rt, dtype):
        return rt.program((self.source,), dtype)
