"""All trainable parameters of a model in one flat device buffer (and their gradients in a
second), so that an optimizer updates every parameter with a single kernel launch."""
from __future__ import annotations

import numpy as np

from .runtime import Runtime
from .tensor import Tensor


class Parameter:
    """A slice of the store: `value` and `grad` are sub-buffer tensors of the device shape.

    `keras_index` has the parameter's Keras shape and holds, for each Keras element, its position
    in the flattened device array: layers may pad or reorder on the device (Dense keeps column
    panels) while weights, gradients and optimizer moments go in and out in Keras layout."""

    def __init__(self, offset: int, initial: np.ndarray, keras_index: np.ndarray | None):
        self.offset = offset
        self.shape = initial.shape
        self.size = initial.size
        self.keras_index = np.arange(self.size).reshape(self.shape) if keras_index is None else keras_index
        self.initial: np.ndarray | None = initial
        self.value: Tensor | None = None
        self.grad: Tensor | None = None

    def own(self, flat: np.ndarray) -> np.ndarray:
        """This parameter's slice of a flat store-sized array (a view)."""
        return flat[self.offset:self.offset + self.size]

    def to_keras(self, device: np.ndarray) -> np.ndarray:
        """A device-layout array of this parameter (any shape, `size` elements) in Keras layout."""
        return device.reshape(-1)[self.keras_index]

    def from_keras(self, array: np.ndarray, device: np.ndarray) -> None:
        """Write the Keras-layout `array` into `device`, a flat view of this parameter's elements."""
        device[self.keras_index] = array


class ParameterStore:
    def __init__(self, rt: Runtime, dtype):
        self.rt = rt
        self.dtype = np.dtype(dtype)
        self.parameters: list[Parameter] = []
        self.size = 0
        self.values: Tensor | None = None
        self.grads: Tensor | None = None

    def add(self, initial: np.ndarray, keras_index: np.ndarray | None = None) -> Parameter:
        if self.values is not None:
            raise RuntimeError("parameters cannot be added after the store was allocated")
        step = self.rt.alignment // self.dtype.itemsize  # sub-buffers must start aligned
        offset = -(-self.size // step) * step
        parameter = Parameter(offset, np.asarray(initial, self.dtype), keras_index)
        self.parameters.append(parameter)
        self.size = offset + parameter.size
        return parameter

    def allocate(self) -> None:
        self.size = -(-self.size // 4) * 4  # whole TYPE4 vectors for the update kernels
        host = np.zeros(self.size, self.dtype)
        for p in self.parameters:
            host[p.offset:p.offset + p.size] = p.initial.ravel()
            p.initial = None
        self.values = Tensor.from_numpy(host, rt=self.rt)
        self.grads = Tensor.zeros((self.size,), self.dtype, self.rt)
        item = self.dtype.itemsize
        for p in self.parameters:
            region = (p.offset * item, p.size * item)
            p.value = Tensor(p.shape, self.dtype, self.rt, self.values.buffer.get_sub_region(*region))
            p.grad = Tensor(p.shape, self.dtype, self.rt, self.grads.buffer.get_sub_region(*region))
