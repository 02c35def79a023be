"""All parameters of a model in one flat device buffer (and the trainable ones' gradients in a
second), so that an optimizer updates every trainable parameter with a single kernel launch.

Non-trainable parameters (BatchNormalization's moving statistics) sit after the trainable ones:
the optimizer's range, its moments and the gradients cover only `values[:size]`."""
from __future__ import annotations

import numpy as np

from .runtime import Runtime
from .tensor import Tensor


class Parameter:
    """A slice of the store: `value` and `grad` are sub-buffer tensors of the device shape.

    `keras_index` has the parameter's Keras shape and holds, for each Keras element, its position
    in the flattened device array: layers may pad or reorder on the device (Dense keeps column
    panels) while weights, gradients and optimizer moments go in and out in Keras layout."""

    def __init__(self, initial: np.ndarray, keras_index: np.ndarray | None, trainable: bool):
        self.offset: int | None = None  # set when the store is allocated
        self.trainable = trainable
        self.shape = initial.shape
        self.size = initial.size
        self.keras_index = np.arange(self.size).reshape(self.shape) if keras_index is None else keras_index
        self.initial: np.ndarray | None = initial
        self.value: Tensor | None = None
        self.grad: Tensor | None = None  # None for a non-trainable parameter

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
        self.size = 0  # elements in the trainable range: values[:size], grads and optimizer moments
        self.values: Tensor | None = None
        self.grads: Tensor | None = None

    def add(self, initial: np.ndarray, keras_index: np.ndarray | None = None, trainable: bool = True) -> Parameter:
        if self.values is not None:
            raise RuntimeError("parameters cannot be added after the store was allocated")
        parameter = Parameter(np.asarray(initial, self.dtype), keras_index, trainable)
        self.parameters.append(parameter)
        return parameter

    def allocate(self) -> None:
        step = self.rt.alignment // self.dtype.itemsize  # sub-buffers must start aligned
        end = 0
        for trainable in (True, False):
            for p in self.parameters:
                if p.trainable == trainable:
                    p.offset = -(-end // step) * step
                    end = p.offset + p.size
            if trainable:
                end = self.size = -(-end // 4) * 4  # whole TYPE4 vectors for the update kernels
        host = np.zeros(end, self.dtype)
        for p in self.parameters:
            host[p.offset:p.offset + p.size] = p.initial.ravel()
            p.initial = None
        self.values = Tensor.from_numpy(host, rt=self.rt)
        self.grads = Tensor.zeros((self.size,), self.dtype, self.rt)
        item = self.dtype.itemsize
        for p in self.parameters:
            region = (p.offset * item, p.size * item)
            p.value = Tensor(p.shape, self.dtype, self.rt, self.values.buffer.get_sub_region(*region))
            if p.trainable:
                p.grad = Tensor(p.shape, self.dtype, self.rt, self.grads.buffer.get_sub_region(*region))
