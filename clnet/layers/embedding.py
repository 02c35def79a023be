"""Embedding: integer token ids -> rows of a learned (input_dim, output_dim) table, as Keras's."""
from __future__ import annotations

import numpy as np

from .. import initializers
from ..cl.runtime import EXACT_INTEGERS
from ..cl.tensor import Tensor
from ..data import CHECK_BYTES
from .base import Layer, layer_label

# Ids each work-item of CalcDeltaWeightsEmbedding checks per window (at most 64): see the
# kernel's comment for the measurements. Halved where local memory cannot hold the list.
IDS_PER_ITEM = 32


class Embedding(Layer):
    """Keras 3's arguments, defaults and weight layout: `embeddings` (input_dim, output_dim).

    Ids reach the device in the model's float type, so `input_dim` is limited to what it holds
    exactly (float32: 2^24). Ids that come straight from a model input are checked on the host
    before anything runs (`check_input`); ids are not differentiable, so the input gradient is
    zeros, as Keras has none. With `mask_zero=True` id 0 is padding: the output carries Keras's
    mask, 1 where the id is not 0, which the layers after it read or pass on (see
    Layer.mask_handling); input_dim then counts the padding id too, as in Keras.

    `(batch, *ids) -> (batch, *ids, output_dim)`. `input_dim` and `output_dim`: positive integers;
    `embeddings_initializer="uniform"` (Keras's, uniform on [-0.05, 0.05]) as
    `clnet.initializers.get` takes it; `mask_zero=False`, a bool. Keras's regularizer, constraint,
    `weights` and `lora_rank` are not taken."""

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", mask_zero=False, name=None,
                 input_shape=None):
        super().__init__(name, input_shape)
        for argument, value in (("input_dim", input_dim), ("output_dim", output_dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{layer_label('Embedding', name)}: {argument} must be a positive integer, got {value!r}")
        if not isinstance(mask_zero, (bool, np.bool_)):
            raise TypeError(f"{layer_label('Embedding', name)}: mask_zero must be True or False, got {mask_zero!r}")
        self.input_dim, self.output_dim, self.mask_zero = int(input_dim), int(output_dim), bool(mask_zero)
        self.embeddings_initializer = initializers.get(embeddings_initializer)
        self._initializer_name = embeddings_initializer

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.output_dim)

    def makes_mask(self):
        return self.mask_zero

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        limit = EXACT_INTEGERS[self.dtype]
        if self.input_dim > limit:
            raise ValueError(f"{self.describe()}: input_dim={self.input_dim} is more ids than {self.dtype.name} "
                             f"holds exactly (the model carries ids in its float type: integers up to {limit}); "
                             "use floatx='float64' or a smaller vocabulary")
        self.positions = int(np.prod(self.input_shape))  # ids per sample
        table = self.embeddings_initializer((self.input_dim, self.output_dim), rng)
        self.embeddings = store.add(table)                  # (input_dim, output_dim)
        # The kernel's local memory: a list of LOCAL_SIZE * IDS_PER_ITEM ids and two rows of sums.
        per_item = IDS_PER_ITEM
        while per_item > 1 and 4 * self.rt.local_size * (per_item + 2) > self.rt.device.local_mem_size:
            per_item //= 2
        program = self.rt.program(("layers/embedding.cl",), self.dtype, {"IDS_PER_ITEM": per_item})
        self._kernels = {name: self.rt.kernel(program, name, self.dtype) for name in (  # bound in allocate
            "FeedForwardEmbedding", "CountEmbeddingIds", "CalcDeltaWeightsEmbedding")}
        # Per id: its occurrences in the batch and the first of them, reset by the kernel after use.
        self._counts = Tensor.zeros((self.input_dim,), np.int32, self.rt)                    # (input_dim,)
        self._first = Tensor.from_numpy(np.full(self.input_dim, 2**31 - 1, np.int32), rt=self.rt)  # (input_dim,)
        self._group = min(self.rt.local_size, self.output_dim)
        return shape

    @property
    def parameters(self):
        return [self.embeddings] if self.built else []

    def check_input(self, x, argument):
        """Ids straight from a model input: whole numbers in [0, input_dim), a block of rows at a
        time (a memmap is not read whole)."""
        rows = max(1, CHECK_BYTES // max(1, x[:1].nbytes))
        for start in range(0, len(x), rows):
            block = np.asarray(x[start:start + rows])
            bad = (block < 0) | (block >= self.input_dim) | (block != np.round(block))
            if bad.any():
                where = np.unravel_index(int(np.argmax(bad)), block.shape)
                value = block[where].item()
                value = int(value) if value == round(value) else value
                index = (start + int(where[0]), *(int(i) for i in where[1:]))
                problem = "not a whole number" if isinstance(value, float) else f"outside [0, {self.input_dim})"
                raise ValueError(f"{self.describe()} reads {argument} as token ids, integers in [0, {self.input_dim}) "
                                 f"(its input_dim); got {value!r} at index {index}, {problem}")

    def allocate(self, capacity):
        super().allocate(capacity)
        self.outputs = Tensor((capacity, *self.output_shape), self.dtype, self.rt)
        self.input_grad = Tensor.zeros((capacity, *self.input_shape), self.dtype, self.rt)  # ids: no gradient
        # Keras's mask, 1 where an id is not 0 (mask_zero); else a stand-in the kernel never writes.
        self.output_mask = Tensor((capacity, *self.input_shape) if self.mask_zero else (1,), self.dtype, self.rt)
        kernel = self._kernels.__getitem__
        ids = {"counts": self._counts, "first": self._first, "input_dim": self.input_dim}
        # Each kernel's arguments named once; a launch gives those that change, in the order bound.
        self._forward = kernel("FeedForwardEmbedding").bind(
            ("ids",), table=self.embeddings.value, outputs=self.outputs, mask=self.output_mask,
            input_dim=self.input_dim, output_dim=self.output_dim, mask_zero=int(self.mask_zero))
        self._count = kernel("CountEmbeddingIds").bind(("ids",), **ids)
        self._delta_weights = kernel("CalcDeltaWeightsEmbedding").bind(
            ("ids", "gradients", "tokens"), table_grad=self.embeddings.grad, output_dim=self.output_dim, **ids)

    def forward(self, x, rows):
        self.x = x
        self._forward((self.output_dim, rows * self.positions), None, x)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        # Nothing in the backward pass reads the table's gradient: beside it (Runtime.side_queue).
        self._count((rows * self.positions,), None, self.x, beside=True)
        self._delta_weights((self.input_dim * self._group,), (self._group,), self.x, grad, rows * self.positions,
                            beside=True)
        return self.input_grad if input_grad else None

    def to_onnx(self, graph, inputs):
        ids = graph.op("Cast", inputs[0], to=7)  # onnx.TensorProto.INT64: Gather's indices are integers
        return [graph.op("Gather", graph.constant("embeddings", self.get_weights()[0]), ids, axis=0)]

    def get_config(self):
        init = self._initializer_name
        return {**super().get_config(), "input_dim": self.input_dim, "output_dim": self.output_dim,
                "embeddings_initializer": init if isinstance(init, str) else init.__name__, "mask_zero": self.mask_zero}
