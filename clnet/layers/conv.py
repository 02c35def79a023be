"""Conv1D and Conv2D (channels_last, Keras's arguments and weight layout). The product of the
patch matrix and the (kh * kw * in, filters) kernel is the layer's output, with bias and
activation fused as in Dense. On a CPU (the Dense products' register-block form) conv.cl's
implicit products compute it without writing the patches; on a GPU (the tiled form) the patches
are written (im2col) and multiplied by the tiled Dense products. See conv.cl."""
from __future__ import annotations

import numpy as np

from .. import activations, initializers
from ..cl.tensor import Tensor
from .base import Layer, check_weights
from .dense import Dense, kernel_defines, matrix_tiles
from .spatial import check_rank, int_tuple, onnx_channels_first, onnx_pads, padding_mode, window


class _Conv(Layer):
    rank = 2
    # About this many output positions (whole lines of out_w) per work-item column of
    # CalcDeltaWeightsConv's block sums: enough chunks to keep every core busy on a first layer's
    # few weights, few enough that summing them is cheap.
    chunk = 512

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
        self.padding = padding_mode(self, padding, causal=self.rank == 1)
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
        self.implicit = not self.product.tiled
        act = self.activation
        self._fused = act if act.elementwise else activations.Linear()
        if self.implicit and not act.elementwise:
            self.act_program = act.program(self.rt, self.dtype)
        return shape

    @property
    def parameters(self):
        return self.product.parameters if self.built else []

    def allocate(self, capacity):
        super().allocate(capacity)
        if not self.implicit:
            return self._allocate_patches(capacity)
        rt, dt = self.rt, self.dtype
        rows = capacity * self.positions
        # The weight gradient's block, 8 rows of the patch matrix: each position's delta, read
        # once per block, costs more than the Dense product's (it is computed from dL/dy and f'(z)),
        # so taller blocks pay where Dense's tuner picks 4 or 6 (pip's PoCL 3.0, the example's CNN:
        # 14.9-18.5 ms per step with 4 rows, 13.5-14.3 with 6, 11.2-11.4 with 8).
        self.tiles = dict(matrix_tiles(rt, dt, self.patch_size, self.filters, rows), DW_RM=8)
        program = rt.program((self._fused.source, "layers/conv.cl"), dt,
                             {"ACT": self._fused.function, **kernel_defines(self.tiles)})
        vw, channels = self.tiles["VW"], self.geometry[2]
        self.filters_p, self.channels_p = self.product.units_p, -(-channels // vw) * vw
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt)                    # y = f(z)
        self.slopes = Tensor((capacity, *self.output_shape), dt, rt)                     # f'(z)
        out_h, out_w = self.geometry[3:5]
        self.chunk_lines = max(1, self.chunk // out_w)                                  # lines per chunk
        chunks = -(-capacity * out_h // self.chunk_lines)
        self.partials = Tensor((chunks, self.patch_size + 1, self.filters_p), dt, rt)
        # (taps, filters_p, channels_p): the channels' padding stays 0.
        self.weights_t = Tensor.zeros((self.taps, self.filters_p, self.channels_p), dt, rt)
        self.zeros = Tensor.zeros((channels,), dt, rt)                                   # the padding's inputs
        self.input_grad = Tensor((capacity, *self.input_shape), dt, rt)                  # dL/dx
        if not self.use_bias:  # the kernels always read a bias and write its gradient
            self._zero_bias = Tensor.zeros((self.filters_p,), dt, rt)
            self._bias_grad_sink = Tensor((self.filters_p,), dt, rt)
        if not self.activation.elementwise:
            self.pre = Tensor((capacity, *self.output_shape), dt, rt)                    # z, softmax's input
            self.act_grad = Tensor((capacity, *self.output_shape), dt, rt)               # dL/dz
            self._softmax = rt.kernel(self.act_program, "SoftMaxActivation", dt)
            self._softmax_derivative = rt.kernel(self.act_program, "SoftMaxDerivative", dt)
        self._forward = rt.kernel(program, "FeedForwardConv", dt)
        self._delta_weights = rt.kernel(program, "CalcDeltaWeightsConv", dt)
        self._sum = rt.kernel(program, "SumDeltaWeightsConv", dt)
        self._hidden = rt.kernel(program, "CalcHiddenGradientConv", dt)

    def _allocate_patches(self, capacity):
        rt, dt = self.rt, self.dtype
        rows = capacity * self.positions
        self.product.allocate(rows)
        program = rt.program(("layers/conv.cl",), dt, kernel_defines(self.product.tiles))
        self.patches = Tensor((rows, self.patch_size), dt, rt)                 # (capacity * positions, K)
        self.patches.transposed = Tensor((self.patch_size, rows), dt, rt)      # (K, capacity * positions)
        # The product's (capacity * positions, filters) output is (capacity, out_h, out_w, filters);
        # its transpose is not the next layer's, so none is passed on.
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt, self.product.outputs.buffer)
        self.input_grad = Tensor((capacity, *self.input_shape), dt, rt)        # dL/dx
        self._patches = rt.kernel(program, "FeedForwardConvPatches", dt)
        self._hidden = rt.kernel(program, "CalcHiddenGradientPatches", dt)

    def _row_group(self) -> int:
        # Softmax reduces a row with a power-of-two work-group of at most LOCAL_SIZE items.
        return min(self.rt.local_size, 1 << max(self.filters - 1, 0).bit_length())

    def forward(self, x, rows):
        self.x = x
        out_h, out_w = self.geometry[3:5]
        if not self.implicit:
            self._patches((out_w, rows * out_h, self.taps), None, x, self.patches, self.patches.transposed,
                          self.capacity * self.positions, *self.geometry)
            self.product.forward(self.patches, rows * self.positions)
            return self.outputs
        positions = rows * self.positions
        bias = self.product.bias.value if self.use_bias else self._zero_bias
        softmax = not self.activation.elementwise  # the product writes z, softmax then y
        self._forward((self.filters_p // self.tiles["VW"], -(-positions // self.tiles["FF_RM"])), None,
                      x, self.kernel.value, bias, self.zeros, self.pre if softmax else self.outputs, self.slopes,
                      positions, self.filters, self._fused.a, self._fused.b, *self.geometry,
                      flops=2.0 * positions * self.patch_size * self.filters)
        if softmax:
            group = self._row_group()
            self._softmax((positions * group,), (group,), self.pre, self.outputs, self.filters)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not self.implicit:
            patch_grad = self.product.backward(grad, rows * self.positions, input_grad, activation_done)
            if not input_grad:
                return None
            height, width = self.geometry[:2]
            self._hidden((width, rows * height), None, patch_grad, self.input_grad, *self.geometry)
            return self.input_grad
        apply_derivative = not activation_done
        positions = rows * self.positions
        if apply_derivative and not self.activation.elementwise:
            group = self._row_group()
            self._softmax_derivative((positions * group,), (group,), self.outputs, grad, self.act_grad, self.filters)
            grad, apply_derivative = self.act_grad, False
        tiles = self.tiles
        lines = rows * self.geometry[3]
        chunks = -(-lines // self.chunk_lines)
        flops = 2.0 * positions * self.patch_size * self.filters
        self._delta_weights((self.filters_p // tiles["VW"], -(-self.patch_size // tiles["DW_RM"]), chunks), None,
                            self.x, grad, self.slopes, self.partials, lines, self.filters, self.filters_p,
                            self.chunk_lines, int(apply_derivative), *self.geometry, flops=flops)
        bias_grad = self.product.bias.grad if self.use_bias else self._bias_grad_sink
        self._sum((self.filters_p, self.patch_size + 1), None, self.partials, self.kernel.value, self.kernel.grad,
                  bias_grad, self.weights_t, chunks, self.filters_p, self.channels_p, *self.geometry)
        if not input_grad:
            return None
        pixels = rows * int(np.prod(self.geometry[:2]))
        self._hidden((self.channels_p // tiles["VW"], -(-pixels // tiles["HG_RM"])), None, grad, self.slopes,
                     self.weights_t, self.input_grad, pixels, self.filters, self.filters_p, self.channels_p,
                     int(apply_derivative), *self.geometry, flops=flops)
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
    """1-D convolution over (steps, channels) inputs; kernel (kernel_size, in, filters). padding
    may also be 'causal' (output t sees inputs up to t: (kernel_size - 1) * dilation_rate zeros
    before the sequence, none after)."""
    rank = 1
