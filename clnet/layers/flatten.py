from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import Layer


class View(Layer, registered=False):
    """A layer whose output is its input with another sample shape (compute_output_shape). Row-major
    storage makes that free: the output is a view of the input buffer and no kernel runs."""

    @property
    def reads_transposed(self):
        return self.writes_transposed  # the input's y^T is the output's

    def forward(self, x, rows):
        self._output = _view(getattr(self, "_output", None), x, self.output_shape)
        return self._output

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        self._input_grad = _view(getattr(self, "_input_grad", None), grad, self.input_shape)
        return self._input_grad


class Flatten(View):
    """Keras's `Flatten()`: `(batch, d1, d2, ...) -> (batch, d1 · d2 · ...)`, the sample's values in
    row-major order. No kernel runs: the output is a view of the input's buffer. Takes no arguments
    besides `name` (and `input_shape`); Keras's `data_format` is not taken (channels_last only). An
    input's mask is dropped, with Keras's warning."""

    def compute_output_shape(self, input_shape):
        return (int(np.prod(input_shape)),)

    def to_onnx(self, graph, inputs):
        return [graph.op("Flatten", inputs[0], axis=1)]  # axis 0, the batch, stays


def _view(previous: Tensor | None, tensor: Tensor, sample_shape) -> Tensor:
    """`tensor`'s buffer seen with another sample shape; the same object while the buffer is the
    same, so that kernels see an unchanged argument and skip setting it again."""
    if previous is None or previous.buffer is not tensor.buffer or previous.shape[0] != tensor.shape[0]:
        previous = Tensor((tensor.shape[0], *sample_shape), tensor.dtype, tensor.rt, tensor.buffer)
    previous.transposed = tensor.transposed  # (features, capacity) whatever the sample shape
    return previous
