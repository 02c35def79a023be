"""A convolution's three products on one device, in one form: the plan a Conv layer holds.

The product of the patch matrix and the (kh * kw * channels, filters) kernel is the
convolution's output; convolution_blocks.cl (a CPU's register blocks) and convolution_tiles.cl (a
GPU's local-memory tiles, on gpu_tiles.cl's) compute it and its gradients without writing the
patches. `ConvPlan` owns what those kernels need beyond the layer's tensors (f'(z) or z, delta
in the form's layout, split-K slices or block sums, W laid out per input channel), their launch
geometry, and launches the three products by name: `forward`, `weight_gradient`,
`input_gradient`. The tuner times a plan with operands of its own (`ConvPlan.standalone`)."""
from __future__ import annotations

from .. import activations
from ..cl.tensor import Tensor
from .forms import (fused_activation, kernel_defines, on_tensor_cores, product_sources, program_defines, stores_pre,
                    tile_candidates)
from . import winograd, winograd_forward, winograd_weights
from .convolution_geometry import FRAME, GEOMETRY, delta_frame
from .plan import Operand, bias_operands, split_k

CONVOLUTION_SOURCES = ("products/convolution.cl", "products/convolution_blocks.cl", "products/convolution_tiles.cl")
# The CPU form's program: the register-block product, then the two files of that form.
CONVOLUTION_CPU_SOURCES = ("products/register_blocks.cl", *CONVOLUTION_SOURCES[:2])
# About this many output positions (whole lines of out_w) per work-item of the CPU form's
# CalcDeltaWeightsConv block sums: enough chunks to keep every core busy, few enough that summing
# them is cheap (at 256 on pip's PoCL 3.0 the CNN's second layer ran slower, its sums taking
# markedly longer).
CHUNK = 512


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


# The CPU form's vectors of columns per work-item, by product, and what its columns are: the
# forward's and the weight gradient's are filters, the input gradient's channels.
COLUMN_VECTORS = (("FF_CN", "filters"), ("DW_CN", "filters"), ("HG_CN", "channels"))


def fit_columns(tiles: dict, filters: int, channels: int) -> dict:
    """The CPU form's `tiles` with each product's vectors of columns per work-item (FF_CN, DW_CN,
    HG_CN; 1 where absent) halved until they divide its columns' vectors (filters or channels
    padded to VW), and left out where 1, the kernels' default."""
    vw, fitted = tiles["VW"], {k: v for k, v in tiles.items() if k not in dict(COLUMN_VECTORS)}
    columns = {"filters": -(-filters // vw), "channels": -(-channels // vw)}
    for key, what in COLUMN_VECTORS:
        vectors = tiles.get(key, 1)
        while columns[what] % vectors:
            vectors //= 2
        if vectors > 1:
            fitted[key] = vectors
    return fitted


def tiled_candidates(rt, dtype) -> list[dict]:
    """The tuner's candidates of a convolution's tiled form: the CUDA-core tiles (its gathers and
    epilogues take their layout, not the tensor-core forms')."""
    return [tiles for tiles in tile_candidates(rt, dtype) if "TILE" in tiles and not on_tensor_cores(tiles)]


class ConvPlan:
    """y = f(patches W + b) over up to `capacity` samples, dL/dW with dL/db, and dL/dx, on runtime
    `rt` in `dtype`, for a convolution of `geometry` (GEOMETRY's thirteen sizes) with `filters`
    filters, with `activation`'s elementwise part fused into the forward (softmax, over each
    position's filters, is the layer's own kernel after it).

    `tiles`: the CPU form's register blocks (a dict without TILE, with DW_RM, the weight
    gradient's block: weight_block_rows, and optionally each product's vectors of columns per
    work-item, FF_CN, DW_CN and HG_CN, fitted here: fit_columns), or the tiled form's three
    tiles (forward, weight gradient, input gradient; each its own best, see
    tuner.convolution_tiles; where Winograd's forms are taken, their plans are `winograd_forward`
    (F(4x4, 3x3), winograd_forward.py), `winograd_weights` (F(3x3, 4x4), winograd_weights.py) and
    `winograd` (the input gradient's F(4x4, 3x3), winograd.py), else None). Bound once to the
    layer's operands, which keep their buffers for the plan's life: `weights` and `bias`
    (parameters with `.value` and `.grad`, W in the products' column panels, units_p = filters
    padded to VW; bias None without one), `outputs` y (capacity, out_h, out_w, filters) and
    `input_grad` dL/dx (capacity, height, width, channels). `chunk`: the CPU form's output
    positions per work-item of the weight gradient's block sums (CHUNK)."""

    def __init__(self, rt, dtype, tiles, activation, geometry: tuple, filters: int, capacity: int, *, weights,
                 bias, outputs: Tensor, input_grad: Tensor, chunk: int = CHUNK):
        self.rt, self.dtype, self.geometry, self.filters = rt, dtype, tuple(geometry), filters
        height, width, channels, out_h, out_w, kh, kw = self.geometry[:7]
        self.tiled = isinstance(tiles, tuple)
        self.product_tiles = tiles if self.tiled else None  # (forward, weight gradient, input gradient)
        # (the tiled form's vector width: the weight gradient's tiles, which are always tiled tiles)
        self.tiles = tiles[1] if self.tiled else fit_columns(tiles, filters, channels)
        tiles = self.product_tiles or self.tiles
        self.positions, self.patch_size = out_h * out_w, kh * kw * channels
        vw, dt = self.tiles["VW"], dtype
        self.filters_p, self.channels_p = -(-filters // vw) * vw, -(-channels // vw) * vw
        fused = fused_activation(activation)
        self.weights, self.outputs, self.input_grad = weights, outputs, input_grad
        self.bias, self.bias_grad = bias_operands(bias, self.filters_p, dt, rt)
        rows, geometry = capacity * self.positions, dict(zip(GEOMETRY, self.geometry))
        shape = outputs.shape
        if self.tiled:  # built on gpu_tiles.cl's tiles (and its SumSplits); f'(z) stored by the forward
            # Each product's program; the Winograd weight gradient's pastes its own after its tiles' (it
            # uses their products), the Winograd forward's and input gradient's are their own.
            forward_program, weight_program, input_program = (
                None if winograd.is_winograd(form) and product != 1 else
                rt.program((fused.source, *product_sources(form), "products/convolution.cl",
                            "products/convolution_tiles.cl",
                            *(winograd_weights.SOURCES if winograd.is_winograd(form) else ())), dt,
                           {"ACT": fused.function, **kernel_defines(form)})
                for product, form in enumerate(tiles))
            self.slopes = Tensor(shape, dt, rt)                                          # f'(z)
            self.frame = delta_frame(self.geometry)
            # dL/dz in its frame of zeros (convolution_tiles.cl's FRAME): (capacity, frame_h, frame_w, filters_p)
            self.delta = Tensor.zeros((capacity, *self.frame[:2], self.filters_p), dt, rt)
            frame = dict(zip(FRAME, self.frame))
            if forward_program is None:  # the forward by F(4x4, 3x3) (winograd_forward.py)
                self.winograd_forward = winograd_forward.WinogradForwardPlan(
                    rt, dt, tiles[0], fused, self.geometry, filters, self.filters_p, capacity, weights=weights.value,
                    bias=self.bias, outputs=outputs, slopes=self.slopes)
            else:
                self.winograd_forward = None
                self._forward = rt.kernel(forward_program, "FeedForwardConv", dt).bind(
                    ("inputs", "M"), weights=weights.value, bias=self.bias, outputs=outputs, slopes=self.slopes,
                    filters=filters, filters_p=self.filters_p, a=fused.a, b=fused.b, **geometry)
            if winograd.is_winograd(tiles[1]):  # the weight gradient by F(3x3, 4x4) (winograd_weights.py)
                self.winograd_weights = winograd_weights.WinogradWeightPlan(
                    rt, dt, tiles[1], weight_program, self.geometry, self.frame, filters, self.filters_p, capacity,
                    slopes=self.slopes, delta=self.delta, weights_grad=weights.grad, bias_grad=self.bias_grad)
            else:
                self.winograd_weights = None
                self._bind_splits(rows, weight_program)
                # dL/dW and dL/db go to the split-K slices where a batch is split (weight_gradient).
                self._delta_weights = rt.kernel(weight_program, "CalcDeltaWeightsConv", dt).bind(
                    ("inputs", "output_gr", "delta_weights", "delta_bias", "M", "apply_derivative", "write_delta"),
                    slopes=self.slopes, delta=self.delta, filters=filters, filters_p=self.filters_p,
                    chunk=self._split_chunk, **geometry, **frame)
            if input_program is None:  # the input gradient by F(4x4, 3x3) (winograd.py)
                self.winograd = winograd.WinogradPlan(rt, dt, tiles[2], self.geometry, self.frame, self.filters_p,
                                                       capacity, delta=self.delta, weights=weights.value,
                                                       input_grad=input_grad)
                return
            self.winograd = None
            self._hidden = rt.kernel(input_program, "CalcHiddenGradientConv", dt).bind(
                ("P",), delta=self.delta, weights=weights.value, input_gr=input_grad, filters_p=self.filters_p,
                **geometry, **frame)
            return
        # The CPU form: f' on vectors from y, and z where it does not follow from y (as Dense's).
        store_pre = stores_pre(fused)
        program = rt.program((fused.source, "activations/vector.cl", *CONVOLUTION_CPU_SOURCES), dt,
                             program_defines(fused, store_pre, tiles))
        self.z = Tensor(shape, dt, rt) if store_pre else None                            # z, or none
        self.chunk_lines = max(1, chunk // out_w)                                         # lines per chunk
        chunks = -(-capacity * out_h // self.chunk_lines)
        self.partials = Tensor((chunks, self.patch_size + 1, self.filters_p), dt, rt)
        # (channels_p / VW, taps * filters_p, VW): column panels of W^T; the channels' padding stays 0.
        self.weights_t = Tensor.zeros((self.channels_p // vw, kh * kw * self.filters_p, vw), dt, rt)
        self.delta = Tensor(shape, dt, rt)                                                # dL/dz
        # (max(channels, filters)): the padding's inputs, and the delta rows of pixels no window covers.
        self.zeros = Tensor.zeros((max(channels, filters),), dt, rt)
        self._forward = rt.kernel(program, "FeedForwardConv", dt).bind(
            ("inputs", "M"), weights=weights.value, bias=self.bias, zeros=self.zeros, outputs=outputs, pre=self.z,
            filters=filters, a=fused.a, b=fused.b, **geometry)
        self._delta_weights = rt.kernel(program, "CalcDeltaWeightsConv", dt).bind(
            ("inputs", "output_gr", "lines", "apply_derivative", "write_delta"), outputs=outputs,
            pre=outputs if self.z is None else self.z, partials=self.partials, delta=self.delta, filters=filters,
            filters_p=self.filters_p, chunk=self.chunk_lines, a=fused.a, b=fused.b, **geometry)
        self._sum = rt.kernel(program, "SumDeltaWeightsConv", dt).bind(
            ("chunks",), partials=self.partials, weights=weights.value, delta_weights=weights.grad,
            delta_bias=self.bias_grad, weights_t=self.weights_t, filters_p=self.filters_p, **geometry)
        # dL/dz: the incoming gradient, or delta where the weight gradient wrote it.
        self._hidden = rt.kernel(program, "CalcHiddenGradientConv", dt).bind(
            ("delta", "P"), weights_t=self.weights_t, zeros=self.zeros, input_gr=input_grad, filters=filters,
            filters_p=self.filters_p, **geometry)

    @classmethod
    def standalone(cls, rt, dtype, tiles, geometry: tuple, filters: int, capacity: int, rng) -> "ConvPlan":
        """A plan over operands of its own (random weights, ReLU), for timing a form without a layer."""
        height, width, channels, out_h, out_w, kh, kw = geometry[:7]
        tiled = isinstance(tiles, tuple)
        vw = (tiles[1] if tiled else tiles)["VW"]
        filters_p = -(-filters // vw) * vw
        panel = filters_p if tiled else vw  # W's column panels, as Dense lays them out for the form
        parameter = lambda shape: Operand.random(shape, dtype, rt, rng)
        return cls(rt, dtype, tiles, activations.get("relu"), geometry, filters, capacity,
                   weights=parameter((filters_p // panel, kh * kw * channels, panel)), bias=parameter((filters_p,)),
                   outputs=Tensor((capacity, out_h, out_w, filters), dtype, rt),
                   input_grad=Tensor((capacity, height, width, channels), dtype, rt))

    def _bind_splits(self, rows, program):
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
                delta_weights=self.weights.grad, delta_bias=self.bias_grad, weights=self.patch_size * self.filters_p,
                units_p=self.filters_p)

    def splits(self, positions: int) -> tuple[int, int]:
        """(splits, positions per split) of the tiled weight gradient over a batch of
        `positions`: the full batch's chunks, so a shorter batch needs no more slices; where
        there are several, SumSplits adds them in a launch of its own. (The CPU form sums block
        sums instead; the Winograd form's products split along its tiles, summed in its own last
        launch.)"""
        if not self.tiled or self.winograd_weights is not None:
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

    def _columns(self, key: str) -> int:
        """The columns a work-item of the CPU form's product `key` (FF_CN, DW_CN, HG_CN) covers."""
        return self.tiles["VW"] * self.tiles.get(key, 1)

    def _flops(self, rows: int) -> float:
        return 2.0 * rows * self.positions * self.patch_size * self.filters

    def forward(self, x: Tensor, rows: int) -> None:
        """outputs = f(patches W + b) over `rows` samples, keeping f'(z) (GPU form) or z (CPU form,
        where f' does not follow from y) for the backward."""
        positions = rows * self.positions
        if self.tiled and self.winograd_forward is not None:
            self.winograd_forward.forward(x, rows)
        elif self.tiled:
            self._forward(*self._tiled_launch(0, self.filters, positions), x, positions, flops=self._flops(rows))
        else:
            self._forward((self.filters_p // self._columns("FF_CN"), -(-positions // self.tiles["FF_RM"])), None,
                          x, positions, flops=self._flops(rows))

    def _writes_delta(self, apply_derivative: bool, input_gradient: bool) -> bool:
        """Whether the weight gradient writes delta = dL/dz for the input gradient: the tiled form
        always where one follows (framed, see convolution_tiles.cl); the CPU form where delta is
        not dL/dy itself and the input gradient or the weight gradient's later blocks of rows read
        it back."""
        if self.tiled:
            return input_gradient
        return apply_derivative and (input_gradient or self.patch_size > self.tiles["DW_RM"])

    def weight_gradient(self, x: Tensor, grad: Tensor, rows: int, apply_derivative: bool,
                        input_gradient: bool) -> None:
        """dL/dW and dL/db into the parameters' gradients from x and dL/dy (`grad`; dL/dz where
        not `apply_derivative`) over `rows` samples, and delta for the input gradient where
        `input_gradient` follows."""
        write_delta = self._writes_delta(apply_derivative, input_gradient)
        positions = rows * self.positions
        if self.tiled and self.winograd_weights is not None:
            self.winograd_weights.weight_gradient(x, grad, rows, apply_derivative, write_delta)
            return
        if self.tiled:  # one product, its split-K slices (if any) added by SumSplits
            splits, _ = self.splits(positions)
            weight_out, bias_out = ((self._weight_slices, self._bias_slices) if splits > 1 else
                                    (self.weights.grad, self.bias_grad))
            self._delta_weights(*self._tiled_launch(1, self.filters_p, self.patch_size + 1, splits), x, grad,
                                weight_out, bias_out, positions, int(apply_derivative), int(write_delta),
                                flops=self._flops(rows))
            if splits > 1:
                self._sum_splits((self.patch_size * self.filters_p + self.filters_p,), None, splits, beside=True)
            return
        lines = rows * self.geometry[3]
        chunks = -(-lines // self.chunk_lines)
        # Each work-item its own work-group: PoCL 3.0 put the second layer's 124 in one, run by one core.
        self._delta_weights((self.filters_p // self._columns("DW_CN"), chunks), (1, 1), x, grad, lines,
                            int(apply_derivative), int(write_delta), flops=self._flops(rows))
        self._sum((self.filters_p, self.patch_size + 1), None, chunks)

    def input_gradient(self, grad: Tensor, rows: int, apply_derivative: bool) -> None:
        """dL/dx into input_grad over `rows` samples, after weight_gradient(..., input_gradient=True)
        with the same `grad` and `apply_derivative`: from the delta it wrote, or from dL/dy where that
        is dL/dz (the CPU form)."""
        pixels = rows * self.geometry[0] * self.geometry[1]
        if self.tiled and self.winograd is not None:
            self.winograd.input_gradient(rows)
        elif self.tiled:
            self._hidden(*self._tiled_launch(2, self.geometry[2], pixels), pixels, flops=self._flops(rows))
        else:
            delta = self.delta if self._writes_delta(apply_derivative, True) else grad
            self._hidden((self.channels_p // self._columns("HG_CN"), -(-pixels // self.tiles["FF_RM"])), None, delta,
                         pixels, flops=self._flops(rows))
