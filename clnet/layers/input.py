from __future__ import annotations

from .base import Layer, _shape


class Input(Layer):
    """Declares the shape of one sample (without the batch axis); computes nothing."""

    def __init__(self, shape, name=None):
        super().__init__(name, _shape("Input shape", shape))

    def forward(self, x, rows):
        return x

    def backward(self, grad, rows, input_grad, activation_done=False):
        return grad if input_grad else None

    def to_onnx(self, graph, inputs):
        return inputs

    def get_config(self):
        return {"name": self.name, "shape": list(self.input_shape)}
