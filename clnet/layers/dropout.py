"""Keras's random regularisation layers, which act in fit and pass their input through in
evaluate and predict (and in ONNX): Dropout zeroes each element with probability `rate` and
scales the rest by 1 / (1 - rate) (inverted dropout, as Keras), SpatialDropout1D/2D/3D drop whole
channels, GaussianNoise adds normal noise. Their random numbers are hashed on the
device from (seed, step, element), see dropout.cl."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import BufferedLayer, Layer


def check_seed(kind: str, seed) -> int | None:
    """A random layer's `seed` argument: None or a non-negative integer."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"{kind} seed must be a non-negative integer or None, got {seed!r}")
    return None if seed is None else int(seed)


def seed_for_kernels(seed: int | None, rng: np.random.Generator) -> int:
    """The kernels' seed: the layer's, or by default one drawn from the model's seed (the rng of
    the layer's build). The kernels take a 32-bit int; the hash spreads it, so seeds beyond that
    wrap harmlessly."""
    return (seed if seed is not None else int(rng.integers(2**31))) % 2**31


class Dropout(BufferedLayer):
    """Keras's `Dropout(rate, noise_shape=None, seed=None)`: in `fit`, zeroes each element with
    probability `rate` and scales the others by 1 / (1 - rate) (inverted dropout, as Keras); in
    `evaluate`, `predict` and an ONNX export it passes its input through. Any shape, `(batch,
    *shape) -> (batch, *shape)`; the input's mask goes on.

    - `rate`: a number in [0, 1) (Keras also takes 1, which clnet refuses).
    - `noise_shape`: None (each element on its own), or the mask's shape with the batch axis, one
      entry per input axis, each 1, None or that axis's size; the axes of 1 share the mask: `(None,
      1, features)` drops the same features at every time step.
    - `seed`: None or a non-negative integer, the mask's seed; by default one drawn from the model's
      seed (`clnet.set_seed`, the model's `seed`).

    The mask is not drawn on the host: dropout.cl hashes (seed, step, element) on the device, so a
    step's mask is the same in its forward and backward passes and a resumed `fit` draws the same
    masks."""
    mask_handling = "propagate"  # (a step at a time: the input's mask goes on)

    def __init__(self, rate, noise_shape=None, seed=None, name=None, input_shape=None):
        super().__init__(name, input_shape)
        kind = type(self).__name__
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating)) or not 0 <= rate < 1:
            raise ValueError(f"{kind} rate must be a number in [0, 1), got {rate!r}")
        self.rate = float(rate)
        if noise_shape is not None:
            try:
                noise_shape = tuple(None if n is None else int(n) for n in noise_shape)
            except (TypeError, ValueError):
                raise TypeError(f"Dropout noise_shape must be a tuple of integers or None, got {noise_shape!r}") from None
        self.noise_shape = noise_shape
        self.seed = check_seed(kind, seed)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.width = int(np.prod(shape))
        self.kernel_seed = seed_for_kernels(self.seed, rng)
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
        self._kernels = {name: self.rt.kernel(program, name, self.dtype)  # bound in allocate
                         for name in ("FeedForwardDropout", "CalcHiddenGradientDropout")}
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        # The mask's seed and geometry are fixed; a launch gives the source, the elements and the step.
        mask = {"noise": self.noise, "rank": self.rank, "width": self.width, "seed": self.kernel_seed,
                "keep": 1.0 - self.rate}
        self._forward = self._kernels["FeedForwardDropout"].bind(("inputs", "total", "step"), outputs=self.outputs,
                                                                 **mask)
        self._backward = self._kernels["CalcHiddenGradientDropout"].bind(
            ("output_gr", "total", "step"), input_gr=self.input_grad, **mask)

    def _active(self) -> bool:
        return self.training and self.rate > 0

    def _launch(self, launch, source, rows):
        total = rows * self.width
        launch((-(-total // 64) * 64,), None, source, total, self.step)

    def forward(self, x, rows):
        if not self._active():
            return x
        self._launch(self._forward, x, rows)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        if not self._active():
            return grad
        self._launch(self._backward, grad, rows)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        return inputs  # an exported model infers, where Dropout passes its input through

    def get_config(self):
        return {**super().get_config(), "rate": self.rate,
                "noise_shape": None if self.noise_shape is None else list(self.noise_shape), "seed": self.seed}


class SpatialDropout(Dropout, registered=False):
    """Keras's SpatialDropout1D/2D/3D, on inputs of `spatial_rank` positional axes and one of
    channels: drops whole channels, the same at every position of a sample (adjacent positions
    of a feature map are correlated, so that dropping elements one by one regularises little),
    which is Dropout with noise shape (None, 1, ..., 1, channels) (channels_first: (None,
    channels, 1, ..., 1))."""
    mask_handling = "drop"  # (as Keras's, which does not support masking)

    spatial_rank = 0

    def __init__(self, rate, data_format=None, seed=None, name=None, input_shape=None):
        if data_format not in (None, "channels_last", "channels_first"):
            raise ValueError(f"{type(self).__name__} data_format must be 'channels_last', 'channels_first' or None "
                             f"(channels_last), got {data_format!r}")
        self.data_format = data_format or "channels_last"
        ones = (1,) * self.spatial_rank
        noise = (None, *ones, None) if self.data_format == "channels_last" else (None, None, *ones)
        super().__init__(rate, noise, seed, name, input_shape)

    def compute_output_shape(self, input_shape):
        if len(input_shape) != self.spatial_rank + 1:
            axes = ", ".join(("dim1", "dim2", "dim3")[:self.spatial_rank])
            layout = ("steps, features" if self.spatial_rank == 1 else f"{axes}, channels"
                      if self.data_format == "channels_last" else f"channels, {axes}")
            raise ValueError(f"{type(self).__name__} {self.name!r} takes inputs of shape (batch, {layout}), got "
                             f"{(None, *input_shape)}")
        return input_shape

    def get_config(self):
        config = super().get_config()
        del config["noise_shape"]  # (Keras's has none: the layer fixes it)
        return config | ({"data_format": self.data_format} if self.spatial_rank > 1 else {})


class SpatialDropout1D(SpatialDropout):
    """Keras's `SpatialDropout1D(rate, seed=None)` on `(batch, steps, features) -> (batch, steps,
    features)`: in `fit`, drops whole features, the same at every step of a sample (`Dropout` with
    `noise_shape=(None, 1, features)`), scaling the others by 1 / (1 - rate); the identity in
    `evaluate` and `predict`. `rate` in [0, 1), `seed` as Dropout's. Keras's takes no `data_format`,
    nor does this one. An input's mask is dropped with Keras's warning, as Keras's layer does not
    support masking."""
    spatial_rank = 1

    def __init__(self, rate, seed=None, name=None, input_shape=None):
        super().__init__(rate, None, seed, name, input_shape)


class SpatialDropout2D(SpatialDropout):
    """Keras's `SpatialDropout2D(rate, data_format=None, seed=None)` on `(batch, rows, cols,
    channels)` (`data_format="channels_first"`: `(batch, channels, rows, cols)`), output of the same
    shape: in `fit`, drops whole channels of a feature map, the same at every position (`Dropout`
    with `noise_shape=(None, 1, 1, channels)`), scaling the others by 1 / (1 - rate); the identity
    in `evaluate` and `predict`. `rate` in [0, 1); `data_format` `"channels_last"` (None's meaning)
    or `"channels_first"`; `seed` as Dropout's."""
    spatial_rank = 2


class SpatialDropout3D(SpatialDropout):
    """Keras's `SpatialDropout3D(rate, data_format=None, seed=None)` on `(batch, dim1, dim2, dim3,
    channels)` (`data_format="channels_first"`: `(batch, channels, dim1, dim2, dim3)`), output of
    the same shape: in `fit`, drops whole channels, the same at every position (`Dropout` with
    `noise_shape=(None, 1, 1, 1, channels)`), scaling the others by 1 / (1 - rate); the identity in
    `evaluate` and `predict`. `rate` in [0, 1); `data_format` `"channels_last"` (None's meaning) or
    `"channels_first"`; `seed` as Dropout's."""
    spatial_rank = 3


class GaussianNoise(Layer):
    """Keras's `GaussianNoise(stddev, seed=None)`: in `fit`, adds noise drawn from N(0, stddev²) to
    every element, anew each step; the gradient passes through unchanged. The identity in
    `evaluate`, `predict` and an ONNX export. Any shape, `(batch, *shape) -> (batch, *shape)`; the
    input's mask goes on.

    - `stddev`: a number in [0, 1], as Keras requires.
    - `seed`: None or a non-negative integer; by default one drawn from the model's seed. The noise
      is drawn on the device by Box–Muller from Dropout's hash of (seed, step, element), so a
      resumed `fit` draws the same noise."""
    mask_handling = "propagate"  # (a step at a time: the input's mask goes on)


    def __init__(self, stddev, seed=None, name=None, input_shape=None):
        super().__init__(name, input_shape)
        if (isinstance(stddev, bool) or not isinstance(stddev, (int, float, np.integer, np.floating))
                or not 0 <= stddev <= 1):
            raise ValueError(f"GaussianNoise stddev must be a number in [0, 1], as Keras's, got {stddev!r}")
        self.stddev = float(stddev)
        self.seed = check_seed("GaussianNoise", seed)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.width = int(np.prod(shape))
        self.kernel_seed = seed_for_kernels(self.seed, rng)
        program = self.rt.program(("layers/dropout.cl",), self.dtype)
        self._noise = self.rt.kernel(program, "FeedForwardGaussianNoise", self.dtype)  # bound in allocate
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        self.outputs = Tensor((capacity, *self.output_shape), self.dtype, self.rt)
        self._forward = self._noise.bind(("inputs", "total", "step"), outputs=self.outputs, seed=self.kernel_seed,
                                         stddev=self.stddev)

    def forward(self, x, rows):
        if not (self.training and self.stddev > 0):
            return x
        total = rows * self.width
        self._forward((-(-total // 64) * 64,), None, x, total, self.step)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        return grad if input_grad else None

    def to_onnx(self, graph, inputs):
        return inputs  # an exported model infers, where the noise is not added

    def get_config(self):
        return {**super().get_config(), "stddev": self.stddev, "seed": self.seed}
