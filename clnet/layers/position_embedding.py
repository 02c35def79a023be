"""PositionEmbedding: a learned embedding per position, as keras_hub.layers.PositionEmbedding."""
from __future__ import annotations

import numpy as np

from .. import initializers
from ..cl.tensor import Tensor
from .base import Layer, layer_label


class PositionEmbedding(Layer):
    """keras_hub's arguments and weights: `embeddings` (sequence_length, features). On inputs of
    shape (..., positions, features) it returns the table's first `positions` rows broadcast to
    the input's shape (the caller adds them to the token embeddings); positions may be fewer than
    sequence_length. The output does not depend on the input's values: its input gradient is zeros.

    `sequence_length`: a positive integer, the most positions an input may have (more raise when
    the layer is called). `initializer="glorot_uniform"`: the table's, as `clnet.initializers.get`
    takes it. keras_hub's layer, not Keras's: a `.keras` archive of it is refused when writing."""

    def __init__(self, sequence_length, initializer="glorot_uniform", name=None, input_shape=None):
        super().__init__(name, input_shape)
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, (int, np.integer)) \
                or sequence_length < 1:
            raise ValueError(f"{layer_label('PositionEmbedding', name)}: sequence_length must be a positive integer, "
                             f"got {sequence_length!r}")
        self.sequence_length = int(sequence_length)
        self.initializer = initializers.get(initializer)
        self._initializer_name = initializer

    def compute_output_shape(self, input_shape):
        if len(input_shape) < 2 or input_shape[-2] > self.sequence_length:
            raise ValueError(f"{self.describe()} expects inputs of shape (..., positions, features) with at most "
                             f"sequence_length={self.sequence_length} positions, got {(None, *input_shape)}")
        return tuple(input_shape)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.features = shape[-1]
        # The slice of the table an input uses (positions x features), repeated over any leading axes.
        self.repeats = int(np.prod(shape[:-2]))
        self.width = shape[-2] * self.features
        table = self.initializer((self.sequence_length, self.features), rng)
        self.embeddings = store.add(table)  # (sequence_length, features)
        program = self.rt.program(("layers/position_embedding.cl",), self.dtype)
        self._kernels = {name: self.rt.kernel(program, name, self.dtype) for name in (  # bound in allocate
            "FeedForwardPositionEmbedding", "CalcDeltaWeightsPositionEmbedding")}
        return shape

    @property
    def parameters(self):
        return [self.embeddings] if self.built else []

    def allocate(self, capacity):
        super().allocate(capacity)
        self.outputs = Tensor((capacity, *self.output_shape), self.dtype, self.rt)
        self.input_grad = Tensor.zeros((capacity, *self.input_shape), self.dtype, self.rt)
        # The forward's arguments are all fixed (its work size says how many rows); the gradient's
        # launch gives dL/dy and the rows.
        self._forward = self._kernels["FeedForwardPositionEmbedding"].bind(
            (), table=self.embeddings.value, outputs=self.outputs, width=self.width)
        self._delta_weights = self._kernels["CalcDeltaWeightsPositionEmbedding"].bind(
            ("gradients", "rows"), table_grad=self.embeddings.grad, width=self.width)

    def forward(self, x, rows):
        self._forward((self.width, rows * self.repeats), None)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        self._delta_weights((self.sequence_length * self.features,), None, grad, rows * self.repeats,
                            beside=True)  # (see Runtime.side_queue)
        return self.input_grad if input_grad else None

    def to_onnx(self, graph, inputs):
        """The table's used rows (a Slice of the initializer) expanded to the input's shape."""
        used = graph.slice(graph.constant("embeddings", self.get_weights()[0]), [0], [self.output_shape[-2]], [0])
        return [graph.op("Expand", used, graph.op("Shape", inputs[0]))]

    def get_config(self):
        init = self._initializer_name
        return {**super().get_config(), "sequence_length": self.sequence_length,
                "initializer": init if isinstance(init, str) else init.__name__}
