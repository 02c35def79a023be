"""LocallyConnected1D: Keras 2's locally connected layer, a 1-D convolution whose every output
position has its own weights (the sparsely connected layer whose output i sees inputs i..i+R-1)."""
from __future__ import annotations

import numpy as np

from .. import activations, initializers
from ..cl.tensor import Tensor
from .base import Layer


def _positive_int(argument: str, value) -> int:
    if isinstance(value, (tuple, list)) and len(value) == 1:  # Keras accepts (3,) for 3
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"LocallyConnected1D {argument} must be a positive integer, got {value!r}")
    return int(value)


class LocallyConnected1D(Layer):
    """Keras 2's `LocallyConnected1D` (Keras 3 has none): a 1-D convolution whose every output
    position has weights of its own, `(batch, steps, input_dim) -> (batch, out_steps, filters)`,
    out_steps = (steps - kernel_size) // strides + 1 (no padding, as Keras 2's `"valid"`). Output i
    sees the `kernel_size` steps from i · strides.

    - `filters`, `kernel_size`, `strides=1`: positive integers (a 1-tuple is taken too).
    - `activation=None`: an elementwise activation, fused into the kernel; softmax is refused (add a
      `Softmax()` layer after it).
    - `use_bias=True`, `kernel_initializer="glorot_uniform"`, `bias_initializer="zeros"`: as
      Dense's.

    Weights, as `get_weights()` gives them (Keras 2's layout): kernel `(out_steps, kernel_size ·
    input_dim, filters)`, then bias `(out_steps, filters)` with `use_bias`. Unlike Keras 2, the
    kernel initializer scales by one position's fans, `(kernel_size · input_dim, filters)`, as a
    Dense's (Keras 2's multiplies both by the output length, so that a long input's weights vanish).
    Keras 2's `padding`, `data_format` and `implementation` are not taken, and a `.keras` archive of
    it is refused when writing."""
    def __init__(self, filters, kernel_size, strides=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", name=None, input_shape=None):
        super().__init__(name, input_shape)
        self.filters = _positive_int("filters", filters)
        self.kernel_size = _positive_int("kernel_size", kernel_size)
        self.strides = _positive_int("strides", strides)
        self.activation = activations.get(activation)
        if not self.activation.elementwise:
            raise ValueError(f"LocallyConnected1D activation must be elementwise (it is fused into the kernel), got "
                             f"{self.activation.name!r}; add a Softmax() layer after it instead")
        self.use_bias = bool(use_bias)
        self._initializer_names = (kernel_initializer, bias_initializer)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.output_activation = self.activation

    def compute_output_shape(self, input_shape):
        if len(input_shape) != 2:
            raise ValueError(f"LocallyConnected1D {self.name!r} expects samples of shape (steps, input_dim), got "
                             f"input_shape {tuple(input_shape)}")
        if self.kernel_size > input_shape[0]:
            raise ValueError(f"LocallyConnected1D {self.name!r} kernel_size={self.kernel_size} is larger than the "
                             f"input's {input_shape[0]} steps (input_shape {tuple(input_shape)})")
        return ((input_shape[0] - self.kernel_size) // self.strides + 1, self.filters)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.steps, self.input_dim = self.input_shape
        self.positions = shape[0]
        self.taps = self.kernel_size * self.input_dim
        self.outs = self.positions * self.filters
        # Scaled by one position's fans, (taps, filters), as a Dense layer's (Keras 2 multiplies
        # both by the output length, which makes the weights of a long input vanish). Drawn as
        # the device layout, (taps, outs) (see locally_connected.cl); Keras's is (positions, taps, filters).
        kernel = initializers.draw(self.kernel_initializer, (self.taps, self.positions, self.filters), rng,
                                   fans=(self.taps, self.filters))
        keras_index = np.arange(kernel.size).reshape(kernel.shape).transpose(1, 0, 2)
        self.kernel = store.add(kernel.reshape(self.taps, self.outs), keras_index)  # (taps, outs)
        if self.use_bias:
            self.bias = store.add(self.bias_initializer((self.positions, self.filters), rng).reshape(-1),
                                  np.arange(self.outs).reshape(self.positions, self.filters))  # (outs,)
        else:
            self._zero_bias = Tensor.zeros((self.outs,), self.dtype, self.rt)  # the kernel always adds one
            self._bias_grad_sink = Tensor((self.outs,), self.dtype, self.rt)
        act = self.activation
        self.program = self.rt.program((act.source, "layers/locally_connected.cl"), self.dtype, {"ACT": act.function})
        return shape

    @property
    def parameters(self):
        return [self.kernel, self.bias] if self.use_bias else [self.kernel]

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        self.pre = Tensor((capacity, self.positions, self.filters), dt, rt)      # z
        self.outputs = Tensor((capacity, self.positions, self.filters), dt, rt)  # y = f(z)
        self.delta = Tensor((capacity, self.positions, self.filters), dt, rt)    # dL/dz
        self.input_grad = Tensor((capacity, self.steps, self.input_dim), dt, rt)
        kernel = lambda name: rt.kernel(self.program, name, dt)
        act, sizes = self.activation, dict(outs=self.outs, filters=self.filters, steps=self.steps,
                                           input_dim=self.input_dim, stride=self.strides)
        bias = self.bias.value if self.use_bias else self._zero_bias
        bias_grad = self.bias.grad if self.use_bias else self._bias_grad_sink
        self._forward = kernel("FeedForwardLocallyConnected").bind(
            ("inputs",), weights=self.kernel.value, bias=bias, pre=self.pre, outputs=self.outputs,
            kernel_size=self.kernel_size, a=act.a, b=act.b, **sizes)
        self._delta_bias = kernel("CalcDeltaBiasLocallyConnected").bind(
            ("output_gr", "rows", "apply_derivative"), outputs=self.outputs, pre=self.pre, delta=self.delta,
            bias_gr=bias_grad, outs=self.outs, a=act.a, b=act.b)
        self._delta_weights = kernel("CalcDeltaWeightsLocallyConnected").bind(
            ("inputs", "rows"), delta=self.delta, weights_gr=self.kernel.grad, **sizes)
        self._hidden = kernel("CalcHiddenGradientLocallyConnected").bind(
            delta=self.delta, weights=self.kernel.value, input_gr=self.input_grad, kernel_size=self.kernel_size,
            **sizes)

    def _items(self, n: int) -> int:
        return -(-n // 64) * 64

    def forward(self, x, rows):
        self.x = x
        self._forward((self._items(self.outs), rows), None, x, flops=2.0 * rows * self.outs * self.taps)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        """`activation_done`: `grad` is already dL/dz (a loss folded the activation in)."""
        self._delta_bias((self._items(self.outs),), None, grad, rows, int(not activation_done))
        flops = 2.0 * rows * self.outs * self.taps
        self._delta_weights((self._items(self.outs), self.taps), None, self.x, rows, flops=flops)
        if not input_grad:
            return None
        values = self.steps * self.input_dim
        self._hidden((self._items(values), rows), None, flops=flops)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        """Each position's window gathered by constant indices, then one MatMul per position
        (batched over the positions) with its own (taps, filters) kernel, the bias, the activation."""
        kernel, *bias = self.get_weights()  # (positions, taps, filters), (positions, filters)
        steps = np.arange(self.positions)[:, None] * self.strides + np.arange(self.kernel_size)
        windows = graph.op("Gather", inputs[0], graph.constant("windows", steps), axis=1)  # (batch, positions, k, in)
        patches = graph.op("Reshape", windows, graph.constant("patch_shape", [0, self.positions, self.taps]))
        by_position = graph.op("Transpose", patches, perm=[1, 0, 2])                 # (positions, batch, taps)
        z = graph.op("MatMul", by_position, graph.constant("kernel", kernel))        # (positions, batch, filters)
        z = graph.op("Transpose", z, perm=[1, 0, 2])                                 # (batch, positions, filters)
        if self.use_bias:
            z = graph.op("Add", z, graph.constant("bias", bias[0]))
        return [self.activation.to_onnx(graph, z)]

    def get_config(self):
        kernel_init, bias_init = self._initializer_names
        name = lambda init: init if isinstance(init, str) else init.__name__
        return {**super().get_config(), "filters": self.filters, "kernel_size": self.kernel_size,
                "strides": self.strides, "activation": self.activation.get_config(), "use_bias": self.use_bias,
                "kernel_initializer": name(kernel_init), "bias_initializer": name(bias_init)}
