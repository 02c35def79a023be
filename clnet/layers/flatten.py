from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import Layer


class Flatten(Layer):
    """(batch, d1, d2, ...) -> (batch, d1*d2*...). Row-major storage makes this free: the output
    is a view of the input buffer and no kernel runs."""

    def compute_output_shape(self, input_shape):
        return (int(np.prod(input_shape)),)

    def forward(self, x, rows):
        return Tensor((x.shape[0], *self.output_shape), x.dtype, x.rt, x.buffer)

    def backward(self, grad, rows, input_grad, activation_done=False):
        return Tensor((grad.shape[0], *self.input_shape), grad.dtype, grad.rt, grad.buffer) if input_grad else None
