"""Keras 3's PReLU layer: y = x for x >= 0, alpha x below, alpha a trainable weight of the
sample's shape, 1 along the shared axes (one alpha for all their elements)."""
from __future__ import annotations

import numpy as np

from .. import initializers
from ..cl.tensor import Tensor
from .base import BufferedLayer

# The terms of an alpha's gradient one work-item adds (see prelu.cl): a gradient of up to CHUNK
# terms (rows times the elements an alpha shares) takes one launch; a larger one is summed in
# chunks side by side, then the chunks' sums in a second launch.
CHUNK = 256


class PReLU(BufferedLayer):
    """Keras 3's `PReLU`: y = x for x ≥ 0, alpha · x below, alpha a trainable weight; any shape,
    `(batch, *shape) -> (batch, *shape)`, the input's mask goes on.

    - `alpha_initializer="zeros"`: as `clnet.initializers.get` takes it.
    - `shared_axes=None`: an axis or a list of them, numbered from 1 as Keras numbers them (the
      batch being 0), along which alpha has size 1 (one alpha for all their elements): `[1, 2]` on a
      Conv2D's `(height, width, channels)` gives one alpha per channel. An axis the input does not
      have raises when the layer is called.
    - `alpha_regularizer=None`, `alpha_constraint=None`: must be None (clnet's weights have no
      regularizers or constraints).

    Weight: alpha, of the sample's shape with 1 on `shared_axes` (Keras's layout). Its gradient is
    summed over the batch and the shared axes on the device."""
    mask_handling = "propagate"  # (a step at a time: the input's mask goes on)

    def __init__(self, alpha_initializer="zeros", alpha_regularizer=None, alpha_constraint=None, shared_axes=None,
                 name=None, input_shape=None):
        super().__init__(name, input_shape)
        for argument, value in (("alpha_regularizer", alpha_regularizer), ("alpha_constraint", alpha_constraint)):
            if value is not None:
                raise ValueError(f"PReLU {self.name!r}: {argument} must be None (clnet's weights have no "
                                 f"regularizers or constraints), got {value!r}")
        self._initializer_name = alpha_initializer
        self.initializer = initializers.get(alpha_initializer)
        axes = shared_axes if shared_axes is None or isinstance(shared_axes, (list, tuple)) else [shared_axes]
        if axes is not None and any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) or a < 1 for a in axes):
            raise ValueError(f"PReLU {self.name!r}: shared_axes must be None, an axis or a list of axes numbered "
                             f"from 1 (the batch axis is 0), got {shared_axes!r}")
        self.shared_axes = None if axes is None else [int(a) for a in axes]

    def compute_output_shape(self, input_shape):
        if self.shared_axes and max(self.shared_axes) > len(input_shape):
            raise ValueError(f"PReLU {self.name!r}: shared_axes {self.shared_axes} names an axis that inputs of "
                             f"shape {(None, *input_shape)} do not have (their sample axes are 1 to "
                             f"{len(input_shape)})")
        return input_shape

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.width = int(np.prod(shape))  # elements per sample
        shared = self.shared_axes or ()
        alpha_shape = tuple(1 if axis + 1 in shared else n for axis, n in enumerate(shape))  # Keras's
        self.alpha = store.add(self.initializer(alpha_shape, rng))
        self.share = self.width // self.alpha.size  # the elements of a sample each alpha scales
        # The broadcast as prelu.cl's two tables: each element's alpha, and each alpha's elements.
        alpha_of = np.broadcast_to(np.arange(self.alpha.size).reshape(alpha_shape), shape).ravel()
        self._alpha_of = Tensor.from_numpy(alpha_of.astype(np.int32), np.int32, self.rt)
        self._members = Tensor.from_numpy(np.argsort(alpha_of, kind="stable").astype(np.int32), np.int32, self.rt)
        program = self.rt.program(("layers/prelu.cl",), self.dtype)
        self._kernels = {name: self.rt.kernel(program, name, self.dtype) for name in (  # bound in allocate
            "FeedForwardPReLU", "CalcHiddenGradientPReLU", "CalcDeltaAlphaPReLU", "SumChunksPReLU")}
        return shape

    @property
    def parameters(self):
        return [self.alpha]

    def allocate(self, capacity):
        super().allocate(capacity)
        chunks = -(-capacity * self.share // CHUNK)
        self._chunk_sums = Tensor((chunks, self.alpha.size), self.dtype, self.rt) if chunks > 1 else None
        kernel = self._kernels.__getitem__
        alpha = {"alpha": self.alpha.value, "alpha_of": self._alpha_of, "width": self.width}
        self._forward = kernel("FeedForwardPReLU").bind(("inputs", "total"), outputs=self.outputs, **alpha)
        self._hidden = kernel("CalcHiddenGradientPReLU").bind(("inputs", "output_gr", "total"),
                                                              input_gr=self.input_grad, **alpha)
        # `sums`: alpha's gradient itself where the batch takes one chunk, else the chunks' sums.
        self._delta_alpha = kernel("CalcDeltaAlphaPReLU").bind(
            ("inputs", "output_gr", "sums", "count"), members=self._members, alphas=self.alpha.size,
            share=self.share, width=self.width, chunk=CHUNK)
        self._sum_chunks = kernel("SumChunksPReLU").bind(
            ("chunks",), sums=self._chunk_sums, alpha_gr=self.alpha.grad, alphas=self.alpha.size) if chunks > 1 else None

    def _launch(self, launch, *given, rows):
        total = rows * self.width
        launch((-(-total // 64) * 64,), None, *given, total)

    def forward(self, x, rows):
        self.x = x  # the gradients read x
        self._launch(self._forward, x, rows=rows)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        alphas, count = self.alpha.size, rows * self.share
        chunks = -(-count // CHUNK)
        sums = self.alpha.grad if chunks == 1 else self._chunk_sums
        # Nothing in the backward pass reads alpha's gradient: beside the input gradient
        # (Runtime.side_queue).
        self._delta_alpha((-(-alphas // 32) * 32, chunks), None, self.x, grad, sums, count, beside=True)
        if chunks > 1:
            self._sum_chunks((-(-alphas // 32) * 32,), None, chunks, beside=True)
        if not input_grad:
            return None
        self._launch(self._hidden, self.x, grad, rows=rows)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        # PRelu broadcasts its slope against x from the last axis back, as alpha of the sample's
        # shape broadcasts over the batch: Keras's weight as it is.
        return [graph.op("PRelu", inputs[0], graph.constant("alpha", self.get_weights()[0]))]

    def get_config(self):
        name = self._initializer_name
        return {**super().get_config(), "alpha_initializer": name if isinstance(name, str) else name.__name__,
                "alpha_regularizer": None, "alpha_constraint": None, "shared_axes": self.shared_axes}
