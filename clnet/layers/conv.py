"""Conv1D and Conv2D (channels_last, Keras's arguments and weight layout), computed as the tuned
Dense products on a patch matrix (im2col, see conv.cl): the product of the patches and the
(kh * kw * in, filters) kernel is the layer's output, with bias and activation fused as in Dense."""
from __future__ import annotations

import numpy as np

from .. import activations, initializers
from ..cl.tensor import Tensor
from .base import Layer, check_weights
from .dense import Dense
from .spatial import check_rank, int_tuple, onnx_channels_first, onnx_pads, padding_mode, window


class _Conv(Layer):
    rank = 2

    def __init__(self, filters, kernel_size, strides=1, padding="valid", dilation_rate=1, activation=None,
                 use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros", name=None,
                 input_shape=None):
        super().__init__(name, input_shape)
        kind = type(self).__name__
        if isinstance(filters, bool) or not isinstance(filters, (int, np.integer)) or filters < 1:
            raise ValueError(f"{kind} {name!r}: filters must be a positive integer, got {filters!r}")
        self.filters = int(filters)
        self.kernel_size = int_tuple(self, "kernel_size", kernel_size, self.rank)
        self.strides = int_tuple(self, "strides", strides, self.rank)
        self.dilation_rate = int_tuple(self, "dilation_rate", dilation_rate, self.rank)
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:  # as Keras
            raise ValueError(f"{kind} {name!r}: strides > 1 cannot be combined with dilation_rate > 1, got "
                             f"strides={self.strides} and dilation_rate={self.dilation_rate}")
        self.padding = padding_mode(self, padding)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self._initializer_names = (kernel_initializer, bias_initializer)

    def _geometry(self, input_shape):
        """(height, width, channels) of the input, per axis (output length, padding before), and
        the kernel's size, strides and dilation, all in 2-D form."""
        shape = check_rank(self, input_shape, self.rank)
        two_d = lambda t: (1, *t) if self.rank == 1 else t
        kernel, strides, dilation = two_d(self.kernel_size), two_d(self.strides), two_d(self.dilation_rate)
        axes = ("steps",) if self.rank == 1 else ("height", "width")
        axes = ("",) * (2 - self.rank) + axes
        windows = [window(self, axis, length, k, s, d, self.padding, "kernel_size", input_shape)
                   for axis, length, k, s, d in zip(axes, shape[:2], kernel, strides, dilation)]
        return shape, windows, kernel, strides, dilation

    def compute_output_shape(self, input_shape):
        _, windows, *_ = self._geometry(input_shape)
        spatial = tuple(outputs for outputs, _ in windows)[2 - self.rank:]
        return (*spatial, self.filters)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        (height, width, channels), windows, kernel, strides, dilation = self._geometry(self.input_shape)
        (out_h, pad_top), (out_w, pad_left) = windows
        self.positions = out_h * out_w          # output positions per sample: rows of the patch matrix
        self.taps = kernel[0] * kernel[1]
        self.patch_size = self.taps * channels
        self.kernel_shape = (*self.kernel_size, channels, self.filters)  # Keras layout
        self.geometry = (height, width, channels, out_h, out_w, *kernel, *strides, *dilation, pad_top, pad_left)
        # Keras draws a convolution kernel with fans (receptive field x in, receptive field x filters).
        init = self.kernel_initializer
        self.product = Dense(self.filters, self.activation, self.use_bias,
                             lambda _, rng: init(self.kernel_shape, rng).reshape(self.patch_size, self.filters),
                             self.bias_initializer, name=f"{self.name}/product")
        self.product.build((self.patch_size,), store, rng)
        self.kernel, self.bias = self.product.kernel, (self.product.bias if self.use_bias else None)
        self.kernel.keras_index = self.kernel.keras_index.reshape(self.kernel_shape)
        # Softmax runs over the filters of each position; a loss may fold it only where that is
        # the whole output.
        self.output_activation = self.activation if self.activation.elementwise or self.positions == 1 else None
        self.program = self.rt.program(("layers/conv.cl",), self.dtype)
        return shape

    @property
    def parameters(self):
        return self.product.parameters if self.built else []

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        rows = capacity * self.positions
        self.product.allocate(rows)
        self.patches = Tensor((rows, self.patch_size), dt, rt)                 # (capacity * positions, K)
        self.patches.transposed = Tensor((self.patch_size, rows), dt, rt)      # (K, capacity * positions)
        # The product's (capacity * positions, filters) output is (capacity, out_h, out_w, filters);
        # its transpose is not the next layer's, so none is passed on.
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt, self.product.outputs.buffer)
        self.input_grad = Tensor((capacity, *self.input_shape), dt, rt)        # dL/dx
        self._patches = rt.kernel(self.program, "FeedForwardConvPatches", dt)
        self._hidden = rt.kernel(self.program, "CalcHiddenGradientConv", dt)

    def forward(self, x, rows):
        out_h, out_w = self.geometry[3:5]
        self._patches((out_w, rows * out_h, self.taps), None, x, self.patches, self.patches.transposed,
                      self.capacity * self.positions, *self.geometry)
        self.product.forward(self.patches, rows * self.positions)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        patch_grad = self.product.backward(grad, rows * self.positions, input_grad, activation_done)
        if not input_grad:
            return None
        height, width = self.geometry[:2]
        self._hidden((width, rows * height), None, patch_grad, self.input_grad, *self.geometry)
        return self.input_grad

    def get_weights(self):
        return self.product.get_weights() if self.built else []

    def gradients(self):
        return self.product.gradients()

    def set_weights(self, weights):
        shapes = [self.kernel_shape] + ([(self.filters,)] if self.use_bias else [])
        for parameter, array in zip(self.parameters, check_weights(self, weights, shapes)):
            device = np.zeros(parameter.size, self.dtype)
            parameter.from_keras(array, device)
            parameter.value.write(device.reshape(parameter.shape))

    def to_onnx(self, graph, inputs):
        """ONNX Conv between Transposes (it is channels_first), Keras's 'same' split as explicit
        pads, then the activation on the channels_last result."""
        kernel, *bias = self.get_weights()  # (*kernel_size, in, filters), (filters,)
        weight = kernel.transpose(self.rank + 1, self.rank, *range(self.rank))  # (filters, in, *kernel_size)
        operands = [graph.constant("kernel", weight)] + [graph.constant("bias", b) for b in bias]
        y = onnx_channels_first(graph, inputs[0], self.rank, "Conv", *operands, kernel_shape=list(self.kernel_size),
                                strides=list(self.strides), dilations=list(self.dilation_rate),
                                pads=onnx_pads(self, self.kernel_size, self.strides, self.dilation_rate))
        return [self.activation.to_onnx(graph, y)]

    def get_config(self):
        name = lambda init: init if isinstance(init, str) else init.__name__
        kernel_init, bias_init = self._initializer_names
        return {**super().get_config(), "filters": self.filters, "kernel_size": list(self.kernel_size),
                "strides": list(self.strides), "padding": self.padding,
                "dilation_rate": list(self.dilation_rate), "activation": self.activation.get_config(),
                "use_bias": self.use_bias, "kernel_initializer": name(kernel_init),
                "bias_initializer": name(bias_init)}


class Conv2D(_Conv):
    """2-D convolution over (height, width, channels) inputs; kernel (kh, kw, in, filters)."""
    rank = 2


class Conv1D(_Conv):
    """1-D convolution over (steps, channels) inputs; kernel (kernel_size, in, filters)."""
    rank = 1
