from __future__ import annotations

import numpy as np

from .base import layer_label
from .flatten import View


class Reshape(View):
    """Keras's `Reshape(target_shape)`: `(batch, *input_shape) -> (batch, *target_shape)`, the
    sample's values in row-major order. `target_shape`: a tuple of positive integers without the
    batch axis, of which one may be -1 (inferred from the others); its product must be the sample's
    size, else a `ValueError` when the layer is called. No kernel runs: the output is a view of the
    input's buffer."""

    def __init__(self, target_shape, name=None, input_shape=None):
        super().__init__(name, input_shape)
        items = target_shape if isinstance(target_shape, (tuple, list)) else (target_shape,)
        if (not items or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s in items)
                or any(s < 1 and s != -1 for s in items) or list(items).count(-1) > 1):
            raise ValueError(f"{layer_label('Reshape', name)}: target_shape must be a tuple of positive integers with at most "
                             f"one -1, got {target_shape!r}")
        self.target_shape = tuple(int(s) for s in items)

    def compute_output_shape(self, input_shape):
        total = int(np.prod(input_shape))
        known = int(np.prod([s for s in self.target_shape if s != -1]))
        if -1 in self.target_shape and total % known == 0:
            return tuple(total // known if s == -1 else s for s in self.target_shape)
        if total != known or -1 in self.target_shape:
            raise ValueError(f"Reshape {self.name!r}: cannot reshape input_shape {tuple(input_shape)} ({total} "
                             f"values) into target_shape {self.target_shape}")
        return self.target_shape

    def to_onnx(self, graph, inputs):
        shape = graph.constant("shape", [0, *self.output_shape])  # 0 copies the (dynamic) batch
        return [graph.op("Reshape", inputs[0], shape)]

    def get_config(self):
        return {**super().get_config(), "target_shape": list(self.target_shape)}
