"""BatchNormalization: normalises each channel with the batch's statistics in fit, and with the
moving statistics it keeps (non-trainable weights, updated on the device) in evaluate and predict."""
from __future__ import annotations

import numpy as np

from .. import initializers
from ..cl.tensor import Tensor
from .base import BufferedLayer, Layer


def split_axis(layer: Layer, axis: int, shape: tuple) -> tuple[int, int, int]:
    """A sample of `shape` seen as (outer, channels, inner) around `axis`, which counts the batch
    axis as Keras does (-1: the last; 0, the batch axis, is not allowed)."""
    rank = len(shape) + 1
    if not -rank < axis < rank or axis % rank == 0:
        raise ValueError(f"{type(layer).__name__} {layer.name!r} axis={axis} is out of range for inputs of shape "
                         f"{(None, *shape)}; expected a feature axis in [1, {rank - 1}] or [{1 - rank}, -1]")
    a = axis % rank - 1
    return int(np.prod(shape[:a])), shape[a], int(np.prod(shape[a + 1:]))


def check_axis(layer_type: str, axis) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{layer_type} axis must be an integer, got {axis!r}")
    return int(axis)


def check_positive(layer_type: str, argument: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not value > 0:
        raise ValueError(f"{layer_type} {argument} must be a positive number, got {value!r}")
    return float(value)


def work_groups(channels: int, inner: int, local: int, gpu: bool) -> tuple:
    """The training kernels' (global, local) sizes: work-groups of (block channels, lanes) (see
    batch_normalization.cl), up to 16 neighbouring channels when they are neighbours in memory
    (channels last). On a CPU one lane: a work-item walks all of its channel's elements, and
    nothing is reduced in local memory, whose barriers a CPU runtime pays for in every work-item,
    more than the parallel reduction saves there (benchmarks/RESULTS.md, BatchNormalization on a
    CPU)."""
    block = min(16, local, 1 << max(channels - 1, 0).bit_length()) if inner == 1 else 1
    lanes = local // block if gpu else 1
    return (-(-channels // block) * block, lanes), (block, lanes)


class BatchNormalization(BufferedLayer):
    """Keras's `BatchNormalization`: normalises each channel (the features along `axis`) to mean 0
    and variance 1, then scales by gamma and shifts by beta. Any shape, `(batch, *shape) -> (batch,
    *shape)`. In `fit` it uses the batch's mean and biased variance (over the batch and every other
    axis) and moves the moving statistics towards them, moving = moving · momentum + batch · (1 -
    momentum), on the device in the forward launch; in `evaluate`, `predict` and an ONNX export it
    uses the moving statistics. Frozen (`trainable = False`) it uses the moving statistics in `fit`
    too, as Keras 3's.

    - `axis=-1`: the channels' axis, one integer counted as Keras counts (the batch is 0, which is
      refused; Keras's list of axes is not taken).
    - `momentum=0.99`: in [0, 1].
    - `epsilon=1e-3`: a positive number added to the variance.
    - `center=True`, `scale=True`: whether beta and gamma exist (without, they are 0 and 1 and not
      weights).
    - `beta_initializer="zeros"`, `gamma_initializer="ones"`, `moving_mean_initializer="zeros"`,
      `moving_variance_initializer="ones"`: as `clnet.initializers.get` takes them.

    Weights, in Keras's order and layout, each `(channels,)`: gamma (with `scale`), beta (with
    `center`), moving_mean and moving_variance (not trainable). Keras's regularizers, constraints
    and `synchronized` are not taken. An input with a mask raises: its batch statistics would have
    to leave the padded steps out."""
    mask_handling = "refuse"
    mask_refusal = "its batch statistics would have to leave the padded steps out"

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones", moving_mean_initializer="zeros",
                 moving_variance_initializer="ones", name=None, input_shape=None):
        super().__init__(name, input_shape)
        self.axis = check_axis("BatchNormalization", axis)
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float, np.floating)) or not 0 <= momentum <= 1:
            raise ValueError(f"BatchNormalization momentum must be a number in [0, 1], got {momentum!r}")
        self.momentum = float(momentum)
        self.epsilon = check_positive("BatchNormalization", "epsilon", epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self._initializer_names = {"beta_initializer": beta_initializer, "gamma_initializer": gamma_initializer,
                                   "moving_mean_initializer": moving_mean_initializer,
                                   "moving_variance_initializer": moving_variance_initializer}
        self.initializers = {k: initializers.get(v) for k, v in self._initializer_names.items()}

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.outer, self.channels, self.inner = split_axis(self, self.axis, shape)
        c = (self.channels,)
        init = lambda key: self.initializers[key + "_initializer"](c, rng)
        # Keras's order: gamma, beta (when used), then the moving statistics, which the optimizer skips.
        self.gamma = store.add(init("gamma")) if self.scale else None              # (channels,)
        self.beta = store.add(init("beta")) if self.center else None               # (channels,)
        self.moving_mean = store.add(init("moving_mean"), trainable=False)         # (channels,)
        self.moving_variance = store.add(init("moving_variance"), trainable=False)  # (channels,)
        # Without scale or center the kernels read gamma = 1 or beta = 0 and write their gradient
        # to a sink.
        self._ones = Tensor.from_numpy(np.ones(c), self.dtype, self.rt)
        self._zeros = Tensor.zeros(c, self.dtype, self.rt)
        self._sink = Tensor(c, self.dtype, self.rt)
        self.batch_mean = Tensor(c, self.dtype, self.rt)      # (channels,) of the last training batch
        self.batch_inv_std = Tensor(c, self.dtype, self.rt)   # (channels,) 1 / sqrt(variance + epsilon)
        program = self.rt.program(("layers/batch_normalization.cl",), self.dtype)
        self._kernels = {name: self.rt.kernel(program, name, self.dtype) for name in (  # bound in allocate
            "FeedForwardBatchNorm", "FeedForwardBatchNormInference", "CalcHiddenGradientBatchNorm")}
        self._groups = work_groups(self.channels, self.inner, self.rt.local_size, self.rt.info.is_gpu)
        return shape

    @property
    def parameters(self):
        return [p for p in (self.gamma, self.beta, self.moving_mean, self.moving_variance) if p is not None]

    def allocate(self, capacity):
        super().allocate(capacity)
        kernel = self._kernels.__getitem__
        gamma, beta = self._gamma_beta()
        sizes = {"channels": self.channels, "inner": self.inner}
        moving_variance = self.moving_variance.value
        # Each kernel's arguments named once; a launch gives those that change, in the order bound.
        self._forward_batch = kernel("FeedForwardBatchNorm").bind(
            ("inputs", "count"), outputs=self.outputs, gamma=gamma, beta=beta, moving_mean=self.moving_mean.value,
            moving_variance=moving_variance, batch_mean=self.batch_mean, batch_inv_std=self.batch_inv_std,
            momentum=self.momentum, epsilon=self.epsilon, **sizes)
        self._forward_moving = kernel("FeedForwardBatchNormInference").bind(
            ("inputs", "total"), outputs=self.outputs, gamma=gamma, beta=beta, moving_mean=self.moving_mean.value,
            moving_variance=moving_variance, epsilon=self.epsilon, **sizes)
        # Frozen, the input gradient: the inference kernel on the gradient, mean and beta 0 (see backward).
        self._backward_moving = kernel("FeedForwardBatchNormInference").bind(
            ("inputs", "total"), outputs=self.input_grad, gamma=gamma, beta=self._zeros, moving_mean=self._zeros,
            moving_variance=moving_variance, epsilon=self.epsilon, **sizes)
        self._hidden = kernel("CalcHiddenGradientBatchNorm").bind(
            ("inputs", "output_gr", "count", "want_input_gr"), input_gr=self.input_grad, gamma=gamma,
            batch_mean=self.batch_mean, batch_inv_std=self.batch_inv_std,
            gamma_gr=self.gamma.grad if self.scale else self._sink,
            beta_gr=self.beta.grad if self.center else self._sink, **sizes)

    def _gamma_beta(self):
        return (self.gamma.value if self.scale else self._ones), (self.beta.value if self.center else self._zeros)

    def forward(self, x, rows):
        self.x = x
        if self.training and self.trainable:  # (frozen, it infers in training too, as Keras 3's)
            self._forward_batch(*self._groups, x, rows * self.outer * self.inner)
        else:
            self._normalise_moving(self._forward_moving, x, rows)
        return self.outputs

    def _normalise_moving(self, launch, x, rows):
        total = rows * self.outer * self.channels * self.inner
        launch((-(-total // 64) * 64,), None, x, total)

    def backward(self, grad, rows, input_grad, activation_done=False):
        """The training-mode gradient (fit is the only caller of backward). Frozen (trainable =
        False), the layer is the affine map of the moving statistics, whose input gradient is
        the inference kernel on the gradient, mean and beta 0: dL/dy gamma / sqrt(var + eps)."""
        if not self.trainable:
            if not input_grad:
                return None
            self._normalise_moving(self._backward_moving, grad, rows)
            return self.input_grad
        if not input_grad and not (self.scale or self.center):
            return None
        self._hidden(*self._groups, self.x, grad, rows * self.outer * self.inner, int(input_grad))
        return self.input_grad if input_grad else None

    def to_onnx(self, graph, inputs):
        """Inference form: ONNX BatchNormalization with the moving statistics, which normalises
        axis 1, so the layer's axis is moved there and back by Transposes (none for axis 1)."""
        rank = len(self.input_shape) + 1
        axis = self.axis % rank
        perm = [0, axis, *(a for a in range(1, rank) if a != axis)]
        weights = iter(self.get_weights())  # gamma (with scale), beta (with center), the moving statistics
        gamma = next(weights) if self.scale else np.ones(self.channels)
        beta = next(weights) if self.center else np.zeros(self.channels)
        mean, variance = weights
        # The op's epsilon attribute is a float32: a float32 (or float16) graph's (what the kernel adds), but a
        # float64 model's epsilon goes into the variance instead, which keeps its precision.
        operands = {"gamma": gamma, "beta": beta, "moving_mean": mean}
        if graph.dtype != np.float64:
            operands["moving_variance"], epsilon = variance, self.epsilon
        else:
            operands["moving_variance_plus_epsilon"], epsilon = variance + self.epsilon, 0.0
        x = inputs[0] if axis == 1 else graph.op("Transpose", inputs[0], perm=perm)
        y = graph.op("BatchNormalization", x, *(graph.constant(k, v) for k, v in operands.items()), epsilon=epsilon)
        return [y if axis == 1 else graph.op("Transpose", y, perm=[int(i) for i in np.argsort(perm)])]

    def get_config(self):
        name = lambda init: init if isinstance(init, str) else init.__name__
        return {**super().get_config(), "axis": self.axis, "momentum": self.momentum, "epsilon": self.epsilon,
                "center": self.center, "scale": self.scale,
                **{k: name(v) for k, v in self._initializer_names.items()}}
