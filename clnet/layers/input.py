from __future__ import annotations

from .base import Call, Layer, _shape


class Input(Layer):
    """Declares the shape of one sample (without the batch axis); computes nothing.

    The first layer of a Sequential list, or the start of a functional graph:
    `x = Input((28, 28)); y = Dense(10)(Flatten()(x)); Model(x, y)`. `output` is the symbolic
    tensor it stands for, so it can be passed wherever a layer's output can."""

    name_prefix = "input_layer"  # as Keras's InputLayer

    def __init__(self, shape, name=None):
        super().__init__(name, _shape("Input shape", shape))
        Call(self, [], [self.input_shape])  # its output, the tensor it stands for

    @property
    def input(self):
        return self.output

    @property
    def shape(self) -> tuple:
        return self.output.shape

    def forward(self, x, rows):
        return x

    def backward(self, grad, rows, input_grad, activation_done=False):
        return grad if input_grad else None

    def to_onnx(self, graph, inputs):
        return inputs

    def get_config(self):
        return {"name": self.name, "shape": list(self.input_shape)}
