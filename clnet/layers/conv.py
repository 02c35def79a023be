"""Conv1D and Conv2D (channels_last, Keras's arguments and weight layout). The product of the
patch matrix and the (kh * kw * in, filters) kernel is the layer's output, with bias and
activation fused as in Dense. conv.cl's implicit products compute it without writing the
patches, in either form of the Dense products: register blocks on a CPU, local-memory tiles on
a GPU (the tiled form). See conv.cl."""
from __future__ import annotations

import math

import numpy as np

from .. import activations, initializers
from ..cl.parameters import ParameterStore
from ..cl.runtime import BuildError
from ..cl.tensor import Tensor
from ..cl.tuning import best_seconds, tuned
from .base import Layer, check_weights, layer_label
from ..products import (PRODUCT_SOURCES, kernel_defines, on_tensor_cores, product_sources, program_defines, split_k,
                        stores_pre, tile_candidates, tuner)
from .dense import Dense
from .spatial import check_rank, int_tuple, onnx_channels_first, onnx_pads, padding_mode, window

# The kernels' GEOMETRY and FRAME arguments (conv.cl), in the order of BaseConv.geometry and
# BaseConv.frame (delta_frame); both forms name them alike.
GEOMETRY = ("height", "width", "channels", "out_h", "out_w", "kh", "kw", "sh", "sw", "dh", "dw", "pad_top", "pad_left")
FRAME = ("frame_h", "frame_w", "frame_top", "frame_left")


class BaseConv(Layer, registered=False):
    rank = 2
    # About this many output positions (whole lines of out_w) per work-item of CalcDeltaWeightsConv's
    # block sums: enough chunks to keep every core busy, few enough that summing them is cheap (at
    # 256 on pip's PoCL 3.0 the CNN's second layer ran slower, its sums taking markedly longer).
    chunk = 512

    def __init__(self, filters, kernel_size, strides=1, padding="valid", dilation_rate=1, activation=None,
                 use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros", name=None,
                 input_shape=None, tiles=None):
        super().__init__(name, input_shape)
        kind = type(self).__name__
        if isinstance(tiles, tuple) and (len(tiles) != 3 or not all(isinstance(t, dict) and "TILE" in t for t in tiles)):
            raise ValueError(f"{layer_label(kind, name)}: tiles as a tuple must be three tiled forms' tiles (forward, weight "
                             f"gradient, input gradient), got {tiles!r}")
        for form, owners in (("MMA", "Dense's and MultiHeadAttention's"), ("WGMMA", "Dense's")):
            if any(isinstance(t, dict) and t.get(form) for t in (tiles if isinstance(tiles, tuple) else (tiles,))):
                raise ValueError(f"{layer_label(kind, name)}: the tensor-core form ({form}) is {owners}, not a convolution's "
                                 f"(conv.cl's gathers and epilogues take the CUDA-core tiles' layout), got tiles "
                                 f"{tiles!r}")
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
        # Keras draws a convolution kernel with fans (receptive field x in, receptive field x filters).
        init = self.kernel_initializer
        self.product = Dense(self.filters, self.activation, self.use_bias,
                             lambda _, rng: init(self.kernel_shape, rng).reshape(self.patch_size, self.filters),
                             self.bias_initializer, name=f"{self.name}/product",
                             tiles=self.fixed_tiles[0] if isinstance(self.fixed_tiles, tuple) else self.fixed_tiles)
        self.product.build((self.patch_size,), store, rng)
        self.kernel, self.bias = self.product.kernel, (self.product.bias if self.use_bias else None)
        self.kernel.keras_index = self.kernel.keras_index.reshape(self.kernel_shape)
        # Softmax runs over the filters of each position; a loss may fold it only where that is
        # the whole output.
        self.output_activation = self.activation if self.activation.elementwise or self.positions == 1 else None
        self.tiled = self.product.tiled
        act = self.activation
        self._fused = act if act.elementwise else activations.Linear()
        return shape

    @property
    def parameters(self):
        return self.product.parameters if self.built else []

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        rows = capacity * self.positions
        if self.tiled:  # (forward, weight gradient, input gradient)
            fixed = self.fixed_tiles
            self.product_tiles = (fixed if isinstance(fixed, tuple) else (fixed,) * 3) if fixed else \
                conv_tiles(rt, dt, self, capacity)
            self.tiles = self.product_tiles[0]
        else:  # the weight gradient's block, about 4 rows of the patch matrix (weight_block_rows),
            # whatever Dense's tuner picked: see there.
            self.tiles = self.fixed_tiles or dict(tuner.matrix_tiles(rt, dt, self.patch_size, self.filters, rows),
                                                  DW_RM=weight_block_rows(self.patch_size))
        vw, channels = self.tiles["VW"], self.geometry[2]
        self.filters_p, self.channels_p = self.product.units_p, -(-channels // vw) * vw
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt)                    # y = f(z)
        if self.tiled:  # built on gpu_tiles.cl's tiles (and its SumSplits); f'(z) stored by the forward
            forward_program, weight_program, input_program = (
                rt.program((self._fused.source, *product_sources(tiles), "layers/conv.cl"), dt,
                           {"ACT": self._fused.function, **kernel_defines(tiles)}) for tiles in self.product_tiles)
            self.slopes = Tensor((capacity, *self.output_shape), dt, rt)                 # f'(z)
            self.frame = delta_frame(self.geometry)
            # dL/dz in its frame of zeros (conv.cl's FRAME): (capacity, frame_h, frame_w, filters_p)
            self.delta = Tensor.zeros((capacity, *self.frame[:2], self.filters_p), dt, rt)
        else:  # f' on vectors from y, and z where it does not follow from y (as Dense's CPU form)
            store_pre = stores_pre(self._fused)
            program = rt.program((self._fused.source, "activations/vector.cl", "layers/conv.cl"), dt,
                                 program_defines(self._fused, store_pre, self.tiles))
            self.z = Tensor((capacity, *self.output_shape), dt, rt) if store_pre else None  # z, or none
            out_h, out_w = self.geometry[3:5]
            self.chunk_lines = max(1, self.chunk // out_w)                              # lines per chunk
            chunks = -(-capacity * out_h // self.chunk_lines)
            self.partials = Tensor((chunks, self.patch_size + 1, self.filters_p), dt, rt)
            # (channels_p / VW, taps * filters_p, VW): column panels of W^T; the channels' padding stays 0.
            self.weights_t = Tensor.zeros((self.channels_p // vw, self.taps * self.filters_p, vw), dt, rt)
            self.delta = Tensor((capacity, *self.output_shape), dt, rt)                  # dL/dz
            # (max(channels, filters)): the padding's inputs, and the delta rows of pixels no window covers.
            self.zeros = Tensor.zeros((max(channels, self.filters),), dt, rt)
        self.input_grad = Tensor((capacity, *self.input_shape), dt, rt)                  # dL/dx
        if not self.use_bias:  # the kernels always read a bias and write its gradient
            self._zero_bias = Tensor.zeros((self.filters_p,), dt, rt)
            self._bias_grad_sink = Tensor((self.filters_p,), dt, rt)
        bias = self.product.bias.value if self.use_bias else self._zero_bias
        self._bias_grad = self.product.bias.grad if self.use_bias else self._bias_grad_sink
        softmax = not self.activation.elementwise  # the product writes z, softmax then y
        if softmax:
            self.pre = Tensor((capacity, *self.output_shape), dt, rt)                    # z, softmax's input
            self.act_grad = Tensor((capacity, *self.output_shape), dt, rt)               # dL/dz
            self._softmax, self._softmax_derivative = self.activation.launches(
                rt, dt, self.filters, self.outputs, self.act_grad, inputs=self.pre)
        # Each kernel's arguments named once: a launch gives only the batch's (see Kernel.bind).
        kernel, fused, geometry = self.kernel, self._fused, dict(zip(GEOMETRY, self.geometry))
        y = self.pre if softmax else self.outputs  # the product's y (softmax's z)
        if self.tiled:
            frame = dict(zip(FRAME, self.frame))
            self._allocate_splits(rows, weight_program)
            self._forward = rt.kernel(forward_program, "FeedForwardConv", dt).bind(
                ("inputs", "M"), weights=kernel.value, bias=bias, outputs=y, slopes=self.slopes,
                filters=self.filters, filters_p=self.filters_p, a=fused.a, b=fused.b, **geometry)
            # dL/dW and dL/db go to the split-K slices where a batch is split (_tiled_weight_gradient).
            self._delta_weights = rt.kernel(weight_program, "CalcDeltaWeightsConv", dt).bind(
                ("inputs", "output_gr", "delta_weights", "delta_bias", "M", "apply_derivative", "write_delta"),
                slopes=self.slopes, delta=self.delta, filters=self.filters, filters_p=self.filters_p,
                chunk=self._split_chunk, **geometry, **frame)
            self._hidden = rt.kernel(input_program, "CalcHiddenGradientConv", dt).bind(
                ("P",), delta=self.delta, weights=kernel.value, input_gr=self.input_grad, filters_p=self.filters_p,
                **geometry, **frame)
        else:
            self._forward = rt.kernel(program, "FeedForwardConv", dt).bind(
                ("inputs", "M"), weights=kernel.value, bias=bias, zeros=self.zeros, outputs=y, pre=self.z,
                filters=self.filters, a=fused.a, b=fused.b, **geometry)
            self._delta_weights = rt.kernel(program, "CalcDeltaWeightsConv", dt).bind(
                ("inputs", "output_gr", "lines", "apply_derivative", "write_delta"), outputs=y,
                pre=y if self.z is None else self.z, partials=self.partials, delta=self.delta, filters=self.filters,
                filters_p=self.filters_p, chunk=self.chunk_lines, a=fused.a, b=fused.b, **geometry)
            self._sum = rt.kernel(program, "SumDeltaWeightsConv", dt).bind(
                ("chunks",), partials=self.partials, weights=kernel.value, delta_weights=kernel.grad,
                delta_bias=self._bias_grad, weights_t=self.weights_t, filters_p=self.filters_p, **geometry)
            # dL/dz: the incoming gradient, or delta where the weight gradient wrote it.
            self._hidden = rt.kernel(program, "CalcHiddenGradientConv", dt).bind(
                ("delta", "P"), weights_t=self.weights_t, zeros=self.zeros, input_gr=self.input_grad,
                filters=self.filters, filters_p=self.filters_p, **geometry)

    def _allocate_splits(self, rows, program):
        """The tiled weight gradient's split-K slices, for batches of up to `rows` positions. Its
        result has K + 1 rows (the bias's is the last); the split is Dense's rule (split_k) at
        the full batch, but filling the device 8 times, not twice: each work-group's gather walks
        its positions' windows, and more of them in flight hide that (benchmarks/conv.py's layer on
        a GPU ran markedly faster filling it 8 times than twice or 4 times, and little faster
        again with 16)."""
        rt, dt = self.rt, self.dtype
        splits, self._split_chunk = split_k(rt, self.product_tiles[1], self.patch_size + 1, self.filters_p, rows,
                                            waves=8)
        if splits > 1:
            self._weight_slices = Tensor((splits, self.patch_size, self.filters_p), dt, rt)  # (splits, K, filters_p)
            self._bias_slices = Tensor((splits, self.filters_p), dt, rt)                     # (splits, filters_p)
            self._sum_splits = rt.kernel(program, "SumSplits", dt).bind(
                ("splits",), weight_slices=self._weight_slices, bias_slices=self._bias_slices,
                delta_weights=self.kernel.grad, delta_bias=self._bias_grad, weights=self.patch_size * self.filters_p,
                units_p=self.filters_p)

    def _splits(self, positions: int) -> tuple[int, int]:
        """(splits, positions per split) of the tiled weight gradient over a batch of
        `positions`: the full batch's chunks, so a shorter batch needs no more slices. (The CPU
        form sums block sums instead.)"""
        if not self.tiled:
            return 1, positions
        return -(-positions // self._split_chunk), self._split_chunk

    def _tiled_launch(self, product, columns, rows, splits=1):
        """(global, local) sizes of tiled product `product` (0 the forward, 1 the weight gradient, 2
        the input gradient, product_tiles' order) writing a (rows, columns) result: a TILE-square
        work-group per block, `splits` of them along the third axis."""
        tiles = self.product_tiles[product]
        tile, side = tiles["TILE"], tiles["TILE"] // tiles["WPT"]
        blocks = lambda n: -(-n // tile) * side
        return (blocks(columns), blocks(rows), splits), (side, side, 1)

    def _row_group(self) -> int:
        return self.rt.row_group(self.filters)

    def forward(self, x, rows):
        self.x = x
        positions = rows * self.positions
        flops = 2.0 * positions * self.patch_size * self.filters
        if self.tiled:
            self._forward(*self._tiled_launch(0, self.filters, positions), x, positions, flops=flops)
        else:
            self._forward((self.filters_p // self.tiles["VW"], -(-positions // self.tiles["FF_RM"])), None,
                          x, positions, flops=flops)
        if not self.activation.elementwise:  # the product wrote z, softmax then y
            group = self._row_group()
            self._softmax((positions * group,), (group,))
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        apply_derivative = not activation_done
        positions = rows * self.positions
        if apply_derivative and not self.activation.elementwise:
            group = self._row_group()
            self._softmax_derivative((positions * group,), (group,), grad)
            grad, apply_derivative = self.act_grad, False
        tiles = self.tiles
        flops = 2.0 * positions * self.patch_size * self.filters
        # The weight gradient also writes delta = dL/dz where the input gradient wants it: the tiled
        # form's always (framed, see conv.cl), the CPU form's where it is not dL/dy itself (and for
        # the CPU form's later blocks of rows of dL/dW, which read it back).
        if self.tiled:
            write_delta = input_grad
            self._tiled_weight_gradient(grad, positions, apply_derivative, write_delta, flops)
        else:
            write_delta = apply_derivative and (input_grad or self.patch_size > tiles["DW_RM"])
            lines = rows * self.geometry[3]
            chunks = -(-lines // self.chunk_lines)
            # Each work-item its own work-group: PoCL 3.0 put the second layer's 124 in one, run by one core.
            self._delta_weights((self.filters_p // tiles["VW"], chunks), (1, 1), self.x, grad, lines,
                                int(apply_derivative), int(write_delta), flops=flops)
            self._sum((self.filters_p, self.patch_size + 1), None, chunks)
        if write_delta:
            grad = self.delta
        if not input_grad:
            return None
        pixels = rows * int(np.prod(self.geometry[:2]))
        if self.tiled:
            self._hidden(*self._tiled_launch(2, self.geometry[2], pixels), pixels, flops=flops)
        else:
            self._hidden((self.channels_p // tiles["VW"], -(-pixels // tiles["FF_RM"])), None, grad, pixels,
                         flops=flops)
        return self.input_grad

    def _tiled_weight_gradient(self, grad, positions, apply_derivative, write_delta, flops):
        """dL/dW and dL/db in one tiled product, its split-K slices (if any) added by SumSplits;
        with `write_delta`, delta into self.delta too. (Each split's positions, the chunk, are
        bound: the full batch's, _splits.)"""
        splits, _ = self._splits(positions)
        weight_out, bias_out = ((self._weight_slices, self._bias_slices) if splits > 1 else
                                (self.kernel.grad, self._bias_grad))
        self._delta_weights(*self._tiled_launch(1, self.filters_p, self.patch_size + 1, splits), self.x, grad,
                            weight_out, bias_out, positions, int(apply_derivative), int(write_delta), flops=flops)
        if splits > 1:
            weights = self.patch_size * self.filters_p
            self._sum_splits((weights + self.filters_p,), None, splits, beside=True)

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
    - `tiles=None` (clnet's own): fixes the products' form as Dense's does, or a tuple of three
      tiled forms' tiles (forward, weight gradient, input gradient) to fix them apart; the
      tensor-core forms are Dense's alone and refused here.

    Weights, as `get_weights()` gives them (Keras's layout): kernel `(kh, kw, channels, filters)`,
    then bias `(filters,)` with `use_bias`. conv.cl computes the product of the patches and the
    kernel without writing the patches. Keras's `data_format`, `groups`, regularizers and
    constraints are not taken. An input's mask is dropped, with Keras's warning."""
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


def delta_frame(geometry) -> tuple[int, int, int, int]:
    """(frame_h, frame_w, frame_top, frame_left) of the tiled form's dL/dz (conv.cl's FRAME): at
    stride 1, room for every tap of every input pixel, (k - 1) * dilation - padding zeros before
    the outputs where that is positive and whatever the input reaches past them after; at larger
    strides, none."""
    height, width, _, out_h, out_w, kh, kw, sh, sw, dh, dw, pad_top, pad_left = geometry
    if (sh, sw) != (1, 1):
        return out_h, out_w, 0, 0
    top, left = max(0, (kh - 1) * dh - pad_top), max(0, (kw - 1) * dw - pad_left)
    return max(height + pad_top, out_h) + top, max(width + pad_left, out_w) + left, top, left


def weight_block_rows(depth: int) -> int:
    """The CPU form's weight gradient block: rows of the patch matrix per block, about 4, the
    same in every block of the `depth` (K) rows: 9 x 1 where K = 9 (a first layer on one channel:
    shorter blocks must store delta for the later ones to read: with blocks of 3 or 5 the CNN's
    first layer took markedly longer per step), 4 x 72 where K = 288. Since delta is formed
    once (the first block) and loaded by the others, a block's accumulators are what limit it:
    with VW 16 on AVX2, 4 rows keep 8 of the 16 vector registers (the CNN's second layer ran
    fastest with 4 rows: on Debian's PoCL 3.1 against 2, 3, 6 or 8, on pip's PoCL 3.0 against
    8)."""
    if depth <= 10:
        return depth
    return -(-depth // -(-depth // 4))


def tiled_candidates(rt, dtype) -> list[dict]:
    """The tuner's candidates of the tiled form (not the tensor-core form: see BaseConv)."""
    return [tiles for tiles in tile_candidates(rt, dtype) if "TILE" in tiles and not on_tensor_cores(tiles)]


def conv_tiles(rt, dtype, layer: BaseConv, batch: int) -> tuple[dict, dict, dict]:
    """The tiles of the tiled (GPU) form's forward, weight gradient and input gradient, measured
    once per device on a convolution like `layer` (its geometry, `batch` samples). Each product
    gathers differently, so each has its own best: on a GPU, benchmarks/conv.py's layer ran its
    forward and input gradient faster with 64/8/16 than with 64/4/16, and its weight gradient far
    faster with 64/4/16 (the forward and input gradient feed 8 x 8 blocks per work-item,
    the weight gradient's gather, whose window moves at every depth, does not). And each layer
    size has its own: at a quarter of that batch
    the input gradient ran faster on 64/4/16, whose work-groups are four times as many work-items
    (benchmarks/RESULTS.md, one large convolution: tiles per product and per layer)."""
    candidates = tiled_candidates(rt, dtype)
    settings = {"candidates": candidates, "layer": type(layer).__name__, "input_shape": list(layer.input_shape),
                "filters": layer.filters, "kernel_size": list(layer.kernel_size), "strides": list(layer.strides),
                "padding": layer.padding, "dilation_rate": list(layer.dilation_rate), "batch": batch}
    make = lambda tiles: type(layer)(layer.filters, layer.kernel_size, layer.strides, layer.padding,
                                     layer.dilation_rate, "relu", tiles=tiles)
    chosen = tuned(rt, dtype, "conv", ("cl/common.cl", *PRODUCT_SOURCES, "layers/conv.cl"),
                   lambda: tune_conv(rt, dtype, candidates, make, layer.input_shape, batch), [candidates[0]] * 3,
                   settings)
    return tuple(chosen)


def tune_conv(rt, dtype, candidates, make, input_shape, batch) -> list[dict]:
    """[forward, weight gradient, input gradient] tiles for the layers `make(tiles)` on (batch,
    *input_shape) inputs: each product's fastest candidate, the others' tiles fixed (the earlier
    products' choices, the later ones' first candidate that builds). The forward is timed alone,
    the weight gradient as the backward pass without the input gradient, the input gradient as
    the whole backward pass. Candidates whose programs do not build on the device are passed over."""
    rng = np.random.default_rng(0)
    x = Tensor.from_numpy(rng.random((batch, *input_shape)), dtype, rt)

    def allocated(tiles):
        layer, store = make(tiles), ParameterStore(rt, dtype)
        try:
            layer.build(input_shape, store, rng)
            store.allocate()
            layer.allocate(batch)
        except BuildError:
            return None
        return layer

    usable = [tiles for tiles in candidates if allocated((tiles,) * 3)]
    chosen = [usable[0]] * 3
    for product in range(3):
        best = math.inf
        for candidate in usable:
            tiles = tuple(candidate if p == product else chosen[p] for p in range(3))
            layer = allocated(tiles)
            grad = Tensor.from_numpy(rng.random((batch, *layer.output_shape)), dtype, rt)
            layer.forward(x, batch)
            run = (lambda: layer.forward(x, batch), lambda: layer.backward(grad, batch, False),
                   lambda: layer.backward(grad, batch, True))[product]
            seconds = best_seconds(rt, run)
            if seconds < best:
                chosen[product], best = candidate, seconds
    return chosen
