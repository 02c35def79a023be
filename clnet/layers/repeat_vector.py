from __future__ import annotations

import numpy as np

from .base import BufferedLayer, layer_label


class RepeatVector(BufferedLayer):
    """Keras's `RepeatVector(n)`: `(batch, features) -> (batch, n, features)`, the input vector `n`
    times (a positive integer); its gradient is the sum over the `n` copies. Inputs of another rank
    raise a `ValueError` when the layer is called."""

    def __init__(self, n, name=None, input_shape=None):
        super().__init__(name, input_shape)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{layer_label('RepeatVector', name)}: n must be a positive integer, got {n!r}")
        self.n = int(n)

    def compute_output_shape(self, input_shape):
        if len(input_shape) != 1:
            raise ValueError(f"RepeatVector {self.name!r} expects inputs of shape (features,), got input_shape "
                             f"{tuple(input_shape)}")
        return (self.n, input_shape[0])

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        program = self.rt.program(("layers/repeat_vector.cl",), self.dtype)
        self._kernels = {name: self.rt.kernel(program, name, self.dtype)  # bound in allocate
                         for name in ("FeedForwardRepeatVector", "CalcHiddenGradientRepeatVector")}
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        sizes = {"features": self.input_shape[0], "n": self.n}
        self._forward = self._kernels["FeedForwardRepeatVector"].bind(("inputs",), outputs=self.outputs, **sizes)
        self._hidden = self._kernels["CalcHiddenGradientRepeatVector"].bind(("output_gr",), input_gr=self.input_grad,
                                                                            **sizes)

    def forward(self, x, rows):
        features = self.input_shape[0]
        self._forward((features, rows * self.n), None, x)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        features = self.input_shape[0]
        self._hidden((features, rows), None, grad)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        # (batch, features) -> (batch, 1, features) -> tiled n times along the new axis.
        axes = [1]
        if graph.opset >= 13:  # opset 13 moved Unsqueeze's axes from an attribute to an input
            column = graph.op("Unsqueeze", inputs[0], graph.constant("axes", axes))
        else:
            column = graph.op("Unsqueeze", inputs[0], axes=axes)
        return [graph.op("Tile", column, graph.constant("repeats", [1, self.n, 1]))]

    def get_config(self):
        return {**super().get_config(), "n": self.n}
