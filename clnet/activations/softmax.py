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

    def launches(self, rt, dtype, cols: int, outputs, input_grad, inputs=None):
        """Its two kernels over rows of `cols`, bound by name (Kernel.bind): the forward, y =
        softmax(z) into `outputs` (z given at each launch, unless bound here as `inputs`), and the
        derivative, dL/dz into `input_grad` from y and dL/dy, given at each launch."""
        program = self.program(rt, dtype)
        given = {} if inputs is None else {"inputs": inputs}
        forward = rt.kernel(program, "SoftMaxActivation", dtype).bind(() if given else ("inputs",), outputs=outputs,
                                                                       cols=cols, **given)
        derivative = rt.kernel(program, "SoftMaxDerivative", dtype).bind(("output_gr",), outputs=outputs,
                                                                          input_gr=input_grad, cols=cols)
        return forward, derivative
