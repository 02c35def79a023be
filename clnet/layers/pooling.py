"""Max and average pooling (1-D, 2-D, global), channels_last, with Keras's arguments; the kernels
are in pooling.cl: one launch forward, one backward."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .base import Layer
from .spatial import check_rank, int_tuple, onnx_channels_first, onnx_pads, padding_mode, window

# The kernels' GEOMETRY arguments (pooling.cl), in the order of _Pooling.geometry.
GEOMETRY = ("height", "width", "channels", "out_h", "out_w", "ph", "pw", "sh", "sw", "pad_top", "pad_left")
# On a GPU: the most work-items that share a position's channels, and the work-items a work-group.
POSITION_ITEMS, WORK_GROUP = 32, 128


class _Pooling(Layer):
    """Runs the pooling kernels over a 2-D window geometry that subclasses compute in `_windows`."""
    rank = 2
    use_max = True

    def _windows(self, height: int, width: int, input_shape: tuple) -> tuple:
        """((ph, pw), (sh, sw), (out_h, pad_top), (out_w, pad_left)) for a (height, width) image
        (`input_shape`, the layer's, names it in errors)."""
        raise NotImplementedError

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        height, width, channels = check_rank(self, self.input_shape, self.rank)
        (ph, pw), (sh, sw), (out_h, pad_top), (out_w, pad_left) = self._windows(height, width, self.input_shape)
        self.geometry = (height, width, channels, out_h, out_w, ph, pw, sh, sw, pad_top, pad_left)
        self.program = self.rt.program(("layers/pooling.cl",), self.dtype)
        return shape

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        height, width, channels, out_h, out_w = self.geometry[:5]
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt)       # (capacity, out_h, out_w, channels)
        # y^T (features, capacity), where the model says a Dense after a Flatten reads it (for
        # the first of the CNN's two pooling layers, which a convolution reads, it took most of
        # the forward's time).
        features = int(np.prod(self.output_shape))
        self.outputs.transposed = Tensor((features, capacity), dt, rt) if self.writes_transposed else None
        # Where each maximum came from (y * width + x); average pooling never reads it.
        self.argmax = Tensor((capacity * out_h * out_w * channels if self.use_max else 1,), np.int32, rt)
        self.input_grad = Tensor((capacity, *self.input_shape), dt, rt)     # dL/dx
        transposed, geometry = self.outputs.transposed, self._geometry()
        self._forward = rt.kernel(self.program, "FeedForwardPool", dt).bind(
            ("inputs", "positions"), outputs=self.outputs, outputs_t=transposed, argmax=self.argmax,
            ld=capacity if transposed is not None else 0, **geometry, use_max=int(self.use_max))
        # Windows that do not overlap (the usual strides = pool_size, and global pooling) let each
        # output write its own cell of the input gradient (pip's PoCL 3.0, 128 x 26 x 26 x 32:
        # far faster than with each input element gathering from the windows around it).
        (ph, pw), (sh, sw) = self.geometry[5:7], self.geometry[7:9]
        self.cells = sh >= ph and sw >= pw
        hidden = "CalcHiddenGradientPoolCells" if self.cells else "CalcHiddenGradientPool"
        self._hidden = rt.kernel(self.program, hidden, dt).bind(
            ("output_gr", "positions") if self.cells else ("output_gr",), argmax=self.argmax, input_gr=self.input_grad,
            **geometry, use_max=int(self.use_max))
        # The work-items a position's channels are shared among (pooling.cl): on a GPU its groups
        # of eight (or its channels one by one where they are not a multiple of 8), up to
        # POSITION_ITEMS, in work-groups of WORK_GROUP items; on a CPU one.
        groups = (channels // 8 if channels % 8 == 0 else channels) if rt.info.is_gpu else 1
        self._position_items = min(groups, POSITION_ITEMS)
        self._positions_launches = {}  # rows -> (global, local) sizes and positions

    def _positions_launch(self, rows: int) -> tuple:
        """(global sizes, local sizes, positions) of a launch over rows * out_h * out_w positions,
        _position_items work-items each."""
        if rows not in self._positions_launches:
            out_h, out_w = self.geometry[3:5]
            positions, items = rows * out_h * out_w, self._position_items
            if items == 1:
                launch = ((positions,), None)
            else:
                side = max(1, WORK_GROUP // items)
                launch = ((-(-positions // side) * side, items), (side, items))
            self._positions_launches[rows] = (*launch, np.int32(positions))
        return self._positions_launches[rows]

    def forward(self, x, rows):
        global_size, local_size, positions = self._positions_launch(rows)
        self._forward(global_size, local_size, x, positions)
        return self.outputs

    def _geometry(self) -> dict:
        """The geometry as the kernels' GEOMETRY arguments, by name."""
        return dict(zip(GEOMETRY, self.geometry))

    def backward(self, grad, rows, input_grad, activation_done=False):
        if not input_grad:
            return None
        if self.cells:
            global_size, local_size, positions = self._positions_launch(rows)
            self._hidden(global_size, local_size, grad, positions)
        else:
            height, width, channels = self.geometry[:3]
            self._hidden((channels, rows * height * width), None, grad)
        return self.input_grad


class _Pool(_Pooling):
    def __init__(self, pool_size=2, strides=None, padding="valid", name=None, input_shape=None):
        super().__init__(name, input_shape)
        self.pool_size = int_tuple(self, "pool_size", pool_size, self.rank)
        self.strides = self.pool_size if strides is None else int_tuple(self, "strides", strides, self.rank)
        self.padding = padding_mode(self, padding)

    def _windows(self, height, width, input_shape):
        two_d = lambda t: (1, *t) if self.rank == 1 else t
        pool, strides = two_d(self.pool_size), two_d(self.strides)
        axes = ("", "steps") if self.rank == 1 else ("height", "width")
        return (pool, strides, *(window(self, axis, length, p, s, 1, self.padding, "pool_size", input_shape)
                                 for axis, length, p, s in zip(axes, (height, width), pool, strides)))

    def compute_output_shape(self, input_shape):
        height, width, channels = check_rank(self, input_shape, self.rank)
        *_, (out_h, _), (out_w, _) = self._windows(height, width, input_shape)
        return (out_w, channels) if self.rank == 1 else (out_h, out_w, channels)

    def to_onnx(self, graph, inputs):
        """MaxPool or AveragePool between Transposes; 'same' as explicit pads, which MaxPool never
        picks and AveragePool does not count (count_include_pad=0), as the kernel."""
        ones = [1] * self.rank
        counting = {} if self.use_max else {"count_include_pad": 0}
        return [onnx_channels_first(graph, inputs[0], self.rank, "MaxPool" if self.use_max else "AveragePool",
                                    kernel_shape=list(self.pool_size), strides=list(self.strides),
                                    pads=onnx_pads(self, self.pool_size, self.strides, ones), **counting)]

    def get_config(self):
        return {**super().get_config(), "pool_size": list(self.pool_size), "strides": list(self.strides),
                "padding": self.padding}


class _GlobalPool(_Pooling):
    def __init__(self, keepdims=False, name=None, input_shape=None):
        super().__init__(name, input_shape)
        self.keepdims = bool(keepdims)

    def _windows(self, height, width, input_shape):
        return (height, width), (height, width), (1, 0), (1, 0)

    def compute_output_shape(self, input_shape):
        channels = check_rank(self, input_shape, self.rank)[2]
        return (1,) * self.rank + (channels,) if self.keepdims else (channels,)

    def to_onnx(self, graph, inputs):
        spatial = range(1, self.rank + 1)  # the axes after the batch, before the channels
        return [graph.reduce("ReduceMax" if self.use_max else "ReduceMean", inputs[0], spatial, self.keepdims)]

    def get_config(self):
        return {**super().get_config(), "keepdims": self.keepdims}


class MaxPooling2D(_Pool):
    """Keras's `MaxPooling2D(pool_size=2, strides=None, padding="valid")`, channels_last: the
    maximum of each `pool_size` window of `(batch, height, width, channels)`, taken every `strides`
    cells, per channel, `-> (batch, out_h, out_w, channels)`. The gradient goes to the element each
    window's maximum came from (the first where several tie).

    - `pool_size`: an int or a pair `(ph, pw)`, each at least 1.
    - `strides`: an int, a pair, or None (`pool_size`, Keras's default).
    - `padding`: `"valid"` (windows inside the input; out = (length - size) // stride + 1) or
      `"same"` (ceil(length / stride) outputs, the odd cell of padding after, as Keras splits it);
      padded cells are never the maximum.

    Keras's `data_format` is not taken: clnet's pooling is channels_last."""


class AveragePooling2D(_Pool):
    """Keras's `AveragePooling2D(pool_size=2, strides=None, padding="valid")`, channels_last: the
    mean of each `pool_size` window of `(batch, height, width, channels)`, taken every `strides`
    cells, per channel, `-> (batch, out_h, out_w, channels)`.

    - `pool_size`: an int or a pair `(ph, pw)`, each at least 1.
    - `strides`: an int, a pair, or None (`pool_size`, Keras's default).
    - `padding`: `"valid"` or `"same"` (ceil(length / stride) outputs, the odd cell of padding
      after, as Keras); with `"same"` the padded cells are not counted in a window's mean, as in
      Keras.

    Keras's `data_format` is not taken: clnet's pooling is channels_last."""
    use_max = False


class MaxPooling1D(_Pool):
    """Keras's `MaxPooling1D(pool_size=2, strides=None, padding="valid")` on `(batch, steps,
    channels) -> (batch, out_steps, channels)`: the maximum over each `pool_size` steps, taken every
    `strides` steps, per channel. The gradient goes to the element each window's maximum came from.

    - `pool_size`: an int (or a 1-tuple), at least 1.
    - `strides`: an int, or None (`pool_size`, Keras's default).
    - `padding`: `"valid"` or `"same"` (ceil(steps / strides) outputs, the odd step of padding
      after, as Keras); padded steps are never the maximum.

    Runs as a 2-D pooling of height 1. Keras's `data_format` is not taken: channels_last only."""
    rank = 1


class AveragePooling1D(_Pool):
    """Keras's `AveragePooling1D(pool_size=2, strides=None, padding="valid")` on `(batch, steps,
    channels) -> (batch, out_steps, channels)`: the mean over each `pool_size` steps, taken every
    `strides` steps, per channel.

    - `pool_size`: an int (or a 1-tuple), at least 1.
    - `strides`: an int, or None (`pool_size`, Keras's default).
    - `padding`: `"valid"` or `"same"` (ceil(steps / strides) outputs, the odd step of padding
      after, as Keras); padded steps are not counted in a mean.

    Runs as a 2-D pooling of height 1. Keras's `data_format` is not taken: channels_last only."""
    rank, use_max = 1, False


class GlobalMaxPooling2D(_GlobalPool):
    """Keras's `GlobalMaxPooling2D(keepdims=False)`: the maximum of each channel over the whole
    image, `(batch, height, width, channels) -> (batch, channels)`, or `(batch, 1, 1, channels)`
    with `keepdims=True`. The gradient goes to the element the maximum came from. Keras's
    `data_format` is not taken: channels_last only."""


class GlobalAveragePooling2D(_GlobalPool):
    """Keras's `GlobalAveragePooling2D(keepdims=False)`: the mean of each channel over the whole
    image, `(batch, height, width, channels) -> (batch, channels)`, or `(batch, 1, 1, channels)`
    with `keepdims=True`. Keras's `data_format` is not taken: channels_last only."""
    use_max = False


class GlobalMaxPooling1D(_GlobalPool):
    """Keras's `GlobalMaxPooling1D(keepdims=False)`: the maximum of each channel over the steps,
    `(batch, steps, channels) -> (batch, channels)`, or `(batch, 1, channels)` with `keepdims=True`.
    The gradient goes to the element the maximum came from. An input's mask is dropped with Keras's
    warning (Keras's layer does not read it either). Keras's `data_format` is not taken:
    channels_last only."""
    rank = 1


class GlobalAveragePooling1D(_GlobalPool):
    """Keras's `GlobalAveragePooling1D(keepdims=False)`: the mean of each channel over the steps,
    `(batch, steps, channels) -> (batch, channels)`, or `(batch, 1, channels)` with `keepdims=True`.
    A masked input (`Embedding(mask_zero=True)`, `Masking`) is averaged over the steps that hold
    data, as Keras's, and the output carries no mask. Keras's `data_format` is not taken:
    channels_last only."""
    rank, use_max = 1, False
    mask_handling = "consume"

    def compute_mask(self, inputs, mask):
        return None

    def allocate(self, capacity):
        super().allocate(capacity)
        steps, channels = self.geometry[1], self.geometry[2]  # (1-D: height 1, width the steps)
        transposed = self.outputs.transposed
        self._masked_forward = self.rt.kernel(self.program, "FeedForwardMaskedAverage", self.dtype).bind(
            ("inputs", "mask"), outputs=self.outputs, outputs_t=transposed if transposed is not None else self.outputs,
            ld=capacity if transposed is not None else 0, steps=steps, channels=channels)
        self._masked_hidden = self.rt.kernel(self.program, "CalcHiddenGradientMaskedAverage", self.dtype).bind(
            ("output_gr", "mask"), input_gr=self.input_grad, steps=steps, channels=channels)

    def forward(self, x, rows, mask=None):
        self.mask = mask
        if mask is None:
            return super().forward(x, rows)
        channels = self.geometry[2]
        self._masked_forward((channels, rows), None, x, mask)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        if self.mask is None or not input_grad:
            return super().backward(grad, rows, input_grad, activation_done)
        steps, channels = self.geometry[1], self.geometry[2]
        self._masked_hidden((channels, rows * steps), None, grad, self.mask)
        return self.input_grad
