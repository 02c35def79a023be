"""Dropout: in fit, zeroes each element with probability `rate` and scales the rest by
1 / (1 - rate) (inverted dropout, as Keras); in evaluate and predict, passes its input through."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import Layer


class Dropout(Layer):
    def __init__(self, rate, noise_shape=None, seed=None, name=None, input_shape=None):
        """`noise_shape`: the mask's shape with the batch axis, 1 (or the input's size, or None)
        per axis; axes of 1 share the mask, e.g. (None, 1, features) drops the same features at
        every time step. `seed`: the mask's seed; by default one drawn from the model's seed."""
        super().__init__(name, input_shape)
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating)) or not 0 <= rate < 1:
            raise ValueError(f"Dropout rate must be a number in [0, 1), got {rate!r}")
        self.rate = float(rate)
        if noise_shape is not None:
            try:
                noise_shape = tuple(None if n is None else int(n) for n in noise_shape)
            except (TypeError, ValueError):
                raise TypeError(f"Dropout noise_shape must be a tuple of integers or None, got {noise_shape!r}") from None
        self.noise_shape = noise_shape
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"Dropout seed must be a non-negative integer or None, got {seed!r}")
        self.seed = None if seed is None else int(seed)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.width = int(np.prod(shape))
        # The kernel takes a 32-bit int; the hash spreads it, so seeds beyond that wrap harmlessly.
        self.kernel_seed = (self.seed if self.seed is not None else int(rng.integers(2**31))) % 2**31
        # The mask's geometry (see dropout.cl): nothing without a noise shape; else the sample's
        # dims and the mask's strides, 0 along the axes it broadcasts over.
        geometry = np.zeros(1, np.int32)
        self.rank = 0
        if self.noise_shape is not None:
            full = (None, *shape)
            if len(self.noise_shape) != len(full) or any(
                    n not in (None, 1, d) for n, d in zip(self.noise_shape, full) if d is not None):
                raise ValueError(f"Dropout {self.name!r} noise_shape must have one entry per input axis (batch "
                                 f"included), each 1, None or that axis's size; got {self.noise_shape} for inputs "
                                 f"of shape {full}")
            dims = [1 if n == 1 else None for n in self.noise_shape]  # mask dims; None: as the input
            strides, stride = [], 1
            for axis in range(len(full) - 1, -1, -1):
                broadcast = dims[axis] == 1
                strides.insert(0, 0 if broadcast else stride)
                stride *= 1 if broadcast or axis == 0 else full[axis]
            geometry = np.array([*shape, *strides], np.int32)
            self.rank = len(shape)
        self.noise = Tensor.from_numpy(geometry, np.int32, self.rt)  # (2 * rank + 1,), once
        program = self.rt.program(("layers/dropout.cl",), self.dtype)
        self._forward = self.rt.kernel(program, "FeedForwardDropout", self.dtype)
        self._backward = self.rt.kernel(program, "CalcHiddenGradientDropout", self.dtype)
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        self.outputs = Tensor((capacity, *self.output_shape), self.dtype, self.rt)
        self.input_grad = Tensor((capacity, *self.input_shape), self.dtype, self.rt)

    def _active(self) -> bool:
        return self.training and self.rate > 0

    def _launch(self, kernel, source, target, rows):
        total = rows * self.width
        kernel((-(-total // 64) * 64,), None, source, target, self.noise, self.rank, self.width, total,
               self.kernel_seed, self.step, 1.0 - self.rate)

    def forward(self, x, rows):
        if not self._active():
            return x
        self._launch(self._forward, x, self.outputs, rows)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        if not self._active():
            return grad
        self._launch(self._backward, grad, self.input_grad, rows)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        return inputs  # an exported model infers, where Dropout passes its input through

    def get_config(self):
        return {**super().get_config(), "rate": self.rate,
                "noise_shape": None if self.noise_shape is None else list(self.noise_shape), "seed": self.seed}
