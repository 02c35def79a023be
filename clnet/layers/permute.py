from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import BufferedLayer, layer_label


class Permute(BufferedLayer):
    """Reorders each sample's axes, as Keras's Permute: `dims` numbers the input's axes from 1
    (the batch axis stays first), e.g. (2, 1) swaps the two axes of (steps, features)."""

    def __init__(self, dims, name=None, input_shape=None):
        super().__init__(name, input_shape)
        items = tuple(dims) if isinstance(dims, (tuple, list)) else None
        if (not items or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in items)
                or sorted(items) != list(range(1, len(items) + 1))):
            raise ValueError(f"{layer_label('Permute', name)}: dims must be a permutation of 1, ..., rank (the sample axes, "
                             f"numbered from 1), got {dims!r}")
        self.dims = tuple(int(d) for d in items)

    def compute_output_shape(self, input_shape):
        if len(input_shape) != len(self.dims):
            raise ValueError(f"Permute {self.name!r}: dims {self.dims} reorder {len(self.dims)} axes, but the "
                             f"input_shape {tuple(input_shape)} has {len(input_shape)}")
        return tuple(input_shape[d - 1] for d in self.dims)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.width = int(np.prod(shape))
        order = [d - 1 for d in self.dims]  # output axis k is input axis order[k]
        self.forward_geometry = self._geometry(self.input_shape, order)
        self.backward_geometry = self._geometry(shape, list(np.argsort(order)))
        # (bound in allocate)
        self._permute = self.rt.kernel(self.rt.program(("layers/permute.cl",), self.dtype), "PermuteAxes", self.dtype)
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        # One kernel, bound twice: the forward gather into the outputs, the backward one into the
        # input's gradient.
        sizes = {"rank": len(self.dims), "width": self.width}
        self._forward = self._permute.bind(("source", "total"), target=self.outputs,
                                           geometry=self.forward_geometry, **sizes)
        self._backward = self._permute.bind(("source", "total"), target=self.input_grad,
                                            geometry=self.backward_geometry, **sizes)

    def _geometry(self, source_shape, order) -> Tensor:
        """permute.cl's geometry for gathering a (rows, *source_shape) tensor into its axes `order`."""
        strides = np.cumprod([1, *source_shape[:0:-1]])[::-1]  # row-major strides of the source's axes
        geometry = [source_shape[a] for a in order] + [int(strides[a]) for a in order]
        return Tensor.from_numpy(np.array(geometry, np.int32), np.int32, self.rt)  # once, as Dropout's

    def _launch(self, launch, source, rows):
        total = rows * self.width
        launch((-(-total // 64) * 64,), None, source, total)

    def forward(self, x, rows):
        self._launch(self._forward, x, rows)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        self._launch(self._backward, grad, rows)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        return [graph.op("Transpose", inputs[0], perm=[0, *self.dims])]

    def get_config(self):
        return {**super().get_config(), "dims": list(self.dims)}
