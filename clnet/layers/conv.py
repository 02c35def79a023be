"""Conv1D and Conv2D (channels_last, Keras's arguments and weight layout). The product of the
patch matrix and the (kh * kw * in, filters) kernel is the layer's output, with bias and
activation fused as in Dense. The layer holds a plan (clnet.products.ConvPlan) whose implicit
products compute it without writing the patches, in either form of the Dense products: register
blocks on a CPU, local-memory tiles on a GPU (the tiled form). Under a 16-bit mixed-precision
policy on Hopper, where the tuner measures its step faster, the plan is SixteenBitConvPlan: the
patches written in 16 bits and the products on the tensor cores."""
from __future__ import annotations

import numpy as np

from .. import activations, initializers
from ..cl.tensor import Tensor
from ..products import (CHUNK, ConvPlan, SixteenBitConvPlan, is_winograd, tuner, weight_block_rows,
                        winograd_applies)
from .base import Layer, check_weights, layer_label
from .dense import Dense
from .spatial import check_rank, int_tuple, onnx_channels_first, onnx_pads, padding_mode, window

class BaseConv(Layer, registered=False):
    rank = 2
    chunk = CHUNK  # the CPU form's output positions per work-item of its weight gradient's block sums

    def __init__(self, filters, kernel_size, strides=1, padding="valid", dilation_rate=1, activation=None,
                 use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros", name=None,
                 input_shape=None, tiles=None):
        super().__init__(name, input_shape)
        kind = type(self).__name__
        # Each product's tiles: a tiled form's (TILE); the weight gradient's may add WINOGRAD (its
        # Winograd form runs its products on them), the forward's and the input gradient's Winograd
        # forms have tiles of their own (no TILE).
        tiled = lambda t: isinstance(t, dict) and "TILE" in t
        own = lambda t: isinstance(t, dict) and tiled(t) != is_winograd(t)  # tiled, or Winograd's own
        if isinstance(tiles, tuple) and (len(tiles) != 3 or not own(tiles[0]) or not tiled(tiles[1])
                                         or not own(tiles[2])):
            raise ValueError(f"{layer_label(kind, name)}: tiles as a tuple must be three tiled forms' tiles (forward, "
                             f"weight gradient, input gradient; each may be a Winograd form's), got {tiles!r}")
        if isinstance(tiles, dict) and is_winograd(tiles):
            raise ValueError(f"{layer_label(kind, name)}: the Winograd forms' tiles are given per product, in a tuple "
                             f"(forward, weight gradient, input gradient), got tiles {tiles!r}")
        for form, owners in (("MMA", "Dense's and MultiHeadAttention's"), ("WGMMA", "Dense's")):
            if any(isinstance(t, dict) and t.get(form) for t in (tiles if isinstance(tiles, tuple) else (tiles,))):
                raise ValueError(f"{layer_label(kind, name)}: the tensor-core form ({form}) is {owners}, not a convolution's "
                                 f"(convolution_tiles.cl's gathers and epilogues take the CUDA-core tiles' layout), "
                                 f"got tiles {tiles!r}")
        self.fixed_tiles = tiles
        if isinstance(filters, bool) or not isinstance(filters, (int, np.integer)) or filters < 1:
            raise ValueError(f"{layer_label(kind, name)}: filters must be a positive integer, got {filters!r}")
        self.filters = int(filters)
        self.kernel_size = int_tuple(self, "kernel_size", kernel_size, self.rank)
        self.strides = int_tuple(self, "strides", strides, self.rank)
        self.dilation_rate = int_tuple(self, "dilation_rate", dilation_rate, self.rank)
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:  # as Keras
            raise ValueError(f"{layer_label(kind, name)}: strides > 1 cannot be combined with dilation_rate > 1, got "
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
        fixed = self.fixed_tiles
        for product, which in ((0, "forward"), (1, "weight gradient"), (2, "input gradient")):
            if isinstance(fixed, tuple) and is_winograd(fixed[product]) and not winograd_applies(self.geometry):
                raise ValueError(f"{type(self).__name__} {self.name!r}: the Winograd {which} (tiles "
                                 f"{fixed[product]!r}) takes a 3 x 3 kernel at stride 1 without dilation, got "
                                 f"kernel_size {self.kernel_size}, strides {self.strides}, "
                                 f"dilation_rate {self.dilation_rate}")
        # Keras draws a convolution kernel with fans (receptive field x in, receptive field x filters).
        init = self.kernel_initializer
        self.product = Dense(self.filters, self.activation, self.use_bias,
                             lambda _, rng: init(self.kernel_shape, rng).reshape(self.patch_size, self.filters),
                             self.bias_initializer, name=f"{self.name}/product", dtype=self.dtype_policy,
                             tiles=self._layout_tiles())
        self.product.build((self.patch_size,), store, rng)
        self.kernel, self.bias = self.product.kernel, (self.product.bias if self.use_bias else None)
        self.kernel.keras_index = self.kernel.keras_index.reshape(self.kernel_shape)
        # Softmax runs over the filters of each position; a loss may fold it only where that is
        # the whole output.
        self.output_activation = self.activation if self.activation.elementwise or self.positions == 1 else None
        self.tiled = self.product.tiled
        return shape

    def _layout_tiles(self):
        """The fixed tiles that fix the weights' layout (Dense's): a tuple's weight gradient's, always
        a tiled form's (without the Winograd form's mark), else the tiles themselves."""
        fixed = self.fixed_tiles
        if not isinstance(fixed, tuple):
            return fixed
        return {key: value for key, value in fixed[1].items() if key != "WINOGRAD"}

    @property
    def parameters(self):
        return self.product.parameters if self.built else []

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        if self.tiled:  # (forward, weight gradient, input gradient)
            fixed = self.fixed_tiles
            tiles = (fixed if isinstance(fixed, tuple) else (fixed,) * 3) if fixed else \
                tuner.convolution_tiles(rt, dt, self.geometry, self.filters, capacity)
        else:  # Dense's tuner's vector width and blocks, the weight gradient's block about 4 rows of
            # the patch matrix (weight_block_rows), each product's columns per work-item measured.
            tiles = self.fixed_tiles or tuner.convolution_columns(rt, dt, dict(
                tuner.matrix_tiles(rt, dt, self.patch_size, self.filters, capacity * self.positions),
                DW_RM=weight_block_rows(self.patch_size)), self.geometry, self.filters, capacity)
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt)                    # y = f(z)
        self.input_grad = Tensor((capacity, *self.input_shape), dt, rt)                  # dL/dx
        softmax = not self.activation.elementwise  # the product writes z, softmax then y
        if softmax:
            self.pre = Tensor((capacity, *self.output_shape), dt, rt)                    # z, softmax's input
            self.act_grad = Tensor((capacity, *self.output_shape), dt, rt)               # dL/dz
            self._softmax, self._softmax_derivative = self.activation.launches(
                rt, dt, self.filters, self.outputs, self.act_grad, inputs=self.pre)
        operands = dict(weights=self.kernel, bias=self.bias, outputs=self.pre if softmax else self.outputs,
                        input_grad=self.input_grad)
        # Under a 16-bit policy, the products in its 16 bits on operands stored in 16 bits
        # (products/sixteen_bit_convolution.py), where they can run and the tuner measures the step faster.
        half, panel = self.product.half, self.product.panel
        if (self.tiled and half and SixteenBitConvPlan.takes(rt, self.geometry, self.filters, panel)
                and tuner.convolution_in_sixteen_bits(rt, half, self.geometry, self.filters, capacity, tiles)):
            self.plan = SixteenBitConvPlan(rt, half, self.activation, self.geometry, self.filters, panel, capacity,
                                           **operands)
        else:
            self.plan = ConvPlan(rt, dt, tiles, self.activation, self.geometry, self.filters, capacity, **operands,
                                 chunk=self.chunk)

    def _row_group(self) -> int:
        return self.rt.row_group(self.filters)

    def forward(self, x, rows):
        self.x = x
        self.plan.forward(x, rows)
        if not self.activation.elementwise:  # the product wrote z, softmax then y
            group = self._row_group()
            self._softmax((rows * self.positions * group,), (group,))
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        apply_derivative = not activation_done
        if apply_derivative and not self.activation.elementwise:
            group = self._row_group()
            self._softmax_derivative((rows * self.positions * group,), (group,), grad)
            grad, apply_derivative = self.act_grad, False
        self.plan.weight_gradient(self.x, grad, rows, apply_derivative, input_grad)
        if not input_grad:
            return None
        self.plan.input_gradient(grad, rows, apply_derivative)
        return self.input_grad

    def get_weights(self):
        return self.product.get_weights() if self.built else []

    def gradients(self):
        return self.product.gradients()

    def set_weights(self, weights):
        self.require_built("set_weights")
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


class Conv2D(BaseConv):
    """Keras's `Conv2D`, channels_last: a 2-D convolution (a cross-correlation, as Keras's) of
    `(batch, height, width, channels)` with `filters` kernels, `-> (batch, out_h, out_w, filters)`,
    bias and activation fused as in Dense.

    - `filters`: a positive integer.
    - `kernel_size`: an int or a pair `(kh, kw)`, each at least 1.
    - `strides=1`: an int or a pair.
    - `padding="valid"`: `"valid"` (out = (length - extent) // stride + 1) or `"same"` (ceil(length
      / stride) outputs, odd padding split as Keras splits it: the extra cell after); any case.
    - `dilation_rate=1`: an int or a pair; strides above 1 and dilation above 1 together are
      refused, as Keras refuses them.
    - `activation=None`, `use_bias=True`, `kernel_initializer="glorot_uniform"`,
      `bias_initializer="zeros"`: as Dense's (softmax runs over the filters of each position).
    - `tiles=None` (clnet's own): fixes the products' form as Dense's does (the CPU form's also
      takes FF_CN, DW_CN, HG_CN: vectors of filters or channels per work-item of the forward,
      weight gradient and input gradient, which the tuner otherwise measures per convolution), or
      a tuple of three tiled forms' tiles (forward, weight gradient, input gradient) to fix them
      apart, the weight gradient's possibly Winograd's F(3x3, 4x4) (tiled tiles with `"WINOGRAD": 1`)
      and the forward's and the input gradient's Winograd's F(4x4, 3x3) (`{"WINOGRAD": 1, "BM": 64,
      "TK": 16, "STAGES": 2}`), all for 3 x 3 kernels at stride 1 without dilation (the tuner
      measures them beside the tiles on GPUs); the tensor-core forms are Dense's alone and refused here.

    Weights, as `get_weights()` gives them (Keras's layout): kernel `(kh, kw, channels, filters)`,
    then bias `(filters,)` with `use_bias`. Its plan (clnet.products.ConvPlan) computes the
    product of the patches and the kernel without writing the patches; under `mixed_bfloat16` or
    `mixed_float16` on Hopper (channels and filters multiples of 8), where the tuner measures the
    step faster, the products run on the tensor cores in 16 bits over patches written in 16 bits
    (clnet.products.SixteenBitConvPlan), variables and outputs staying float32. Keras's `data_format`,
    `groups`, regularizers and constraints are not taken. An input's mask is dropped, with Keras's warning."""
    rank = 2


class Conv1D(BaseConv):
    """Keras's `Conv1D`, channels_last: a 1-D convolution of `(batch, steps, channels)` with
    `filters` kernels, `-> (batch, out_steps, filters)`, bias and activation fused as in Dense; it
    runs as a Conv2D of height 1.

    - `filters`: a positive integer.
    - `kernel_size`: an int (or a 1-tuple), at least 1.
    - `strides=1`, `dilation_rate=1`: ints (or 1-tuples); both above 1 together are refused, as in
      Keras.
    - `padding="valid"`: `"valid"`, `"same"` (ceil(steps / strides) outputs, the extra padding
      after), or `"causal"`: output t sees inputs up to t, (kernel_size - 1) · dilation_rate zeros
      before the sequence and none after.
    - `activation=None`, `use_bias=True`, `kernel_initializer="glorot_uniform"`,
      `bias_initializer="zeros"`, `tiles=None`: as Conv2D's.

    Weights, as `get_weights()` gives them (Keras's layout): kernel `(kernel_size, channels,
    filters)`, then bias `(filters,)` with `use_bias`. Keras's `data_format`, `groups`, regularizers
    and constraints are not taken. An input's mask is dropped, with Keras's warning."""
    rank = 1
