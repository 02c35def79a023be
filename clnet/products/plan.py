"""A dense layer's three products on one device, in one form: the plan a layer holds.

`DensePlan` owns what the products need beyond the layer's own tensors (delta in the form's
layout, W^T or row panels for the input gradient, split-K slices, x^T where the layer below gives
none), the kernels of its program and their launch geometry, and launches the three products by
name: `forward`, `weight_gradient`, `input_gradient`. A layer keeps its weights, outputs and
input gradient and binds them to the plan when it allocates; the tuner and the device probe time
a plan with operands of its own (`DensePlan.standalone`)."""
from __future__ import annotations

from .. import activations
from ..cl.tensor import Tensor
from .forms import fused_activation, kernel_defines, product_sources, program_defines, stores_pre, stores_slopes

MIN_SPLIT_ROWS = 256  # the fewest batch rows one split-K work-group sums (see split_k)
# The shallowest forward (n_in) that is split: its end is one launch more, which a small model's
# step, bound by the host's launches on a GPU, pays in full, while the sums it would shorten over a
# short depth were short already (the README MLP's 784 stays whole, the CNN's 1600-deep Dense splits).
MIN_FORWARD_SPLIT_DEPTH = 1024


def split_k(rt, tiles: dict, m: int, n: int, depth: int, waves: int = 1) -> tuple[int, int]:
    """(splits, depths per split) of a tiled product's sums over `depth` (a weight gradient's batch
    rows, a forward's n_in): split when its (m, n) result has too few tiles to fill the device
    `waves` times, in chunks of at least MIN_SPLIT_ROWS depths (a multiple of TK). Dense fills it
    once: with the WGMMA tiles, the tiny GPT's 17 weight gradients and their SumSplits took least
    time on a GPU filling it once, more filling it twice and more again four times (alternated
    runs; with the CUDA-core tiles it made no difference)."""
    tile = tiles["TILE"]
    blocks = -(-m // tile) * -(-n // tile)
    splits = max(1, min(waves * rt.info.cl_device.max_compute_units // blocks, depth // MIN_SPLIT_ROWS))
    if splits == 1:
        return 1, depth
    chunk = -(-(-(-depth // splits)) // tiles["TK"]) * tiles["TK"]
    return -(-depth // chunk), chunk


def dense_program(rt, dtype, activation, tiles: dict):
    """The dense kernels of a layer with this activation (the elementwise ones fused into the
    forward; softmax's input stored), with these tiles."""
    fused = fused_activation(activation)
    slopes = stores_slopes(activation, tiles)
    return rt.program((fused.source, "activations/vector.cl", *product_sources(tiles)), dtype,
                      program_defines(fused, stores_pre(activation) and not slopes, tiles, slopes))


class DensePlan:
    """y = f(x W + b) over up to `capacity` rows, dL/dW with dL/db, and dL/dx, on runtime `rt` in
    `dtype` (float32 or float64), in the form `tiles` choose (see forms.py), with `activation`'s
    elementwise part fused into the forward (softmax runs after it, the layer's own kernel); x has
    `n_in` features, y `units`.

    Bound once to the layer's operands, which keep their buffers for the plan's life: `weights`
    and `bias` (parameters with `.value` and `.grad`; bias None without one), W laid out in column
    panels of `panel` columns (cpu_blocks.cl); `outputs` y and `kept` (z, f'(z), or y itself where
    nothing is kept: stores_pre, stores_slopes), both (capacity, units) rows; `input_grad` dL/dx,
    (capacity, n_in) rows. A y^T the next layer reads goes in `outputs.transposed`, set before."""

    def __init__(self, rt, dtype, tiles: dict, activation, n_in: int, units: int, panel: int, capacity: int, *,
                 weights, bias, outputs: Tensor, kept: Tensor, input_grad: Tensor):
        self.rt, self.dtype, self.tiles = rt, dtype, tiles
        self.n_in, self.units, self.capacity = n_in, units, capacity
        self.tiled = "TILE" in tiles
        vw = tiles["VW"]
        self.units_p = -(-units // vw) * vw
        self.panel, self.panels = panel, self.units_p // panel
        self.weights, self.outputs, self.kept, self.input_grad = weights, outputs, kept, input_grad
        self._fused = fused_activation(activation)
        # Where delta = dL/dz is dL/dy itself (see _delta_is_grad): the identity's derivative.
        self._identity = isinstance(activation, activations.Linear) and activation.a == 1
        dt = dtype
        self.bias, self.bias_grad = bias_operands(bias, self.units_p, dt, rt)
        program = dense_program(rt, dt, activation, tiles)
        self.delta = Tensor((self.panels, capacity, panel), dt, rt)  # dL/dz, column panels
        # The CPU form's input gradient reads delta in row panels and W (see CalcHiddenGradient), or,
        # with HG_T, delta's own column panels and W^T; the GPU form's reads delta and W.
        hg_t = tiles.get("HG_T")
        self.delta_rows = (Tensor((-(-capacity // vw), self.units_p, vw), dt, rt)  # row panels
                           if not self.tiled and not hg_t else None)
        self.weights_t = Tensor.zeros((-(-n_in // vw), self.units_p, vw), dt, rt) if hg_t else None  # W^T, column panels
        self._geometries = {}  # (block, columns, rows, splits) -> launch sizes, for these tiles
        splits = self.splits(capacity)[0]
        if splits > 1:  # split-K slices of the weight and bias gradients (GPU form)
            self._weight_slices = Tensor((splits, n_in, self.units_p), dt, rt)  # (splits, n_in, units_p)
            self._bias_slices = Tensor((splits, self.units_p), dt, rt)          # (splits, units_p)
        kernel = lambda name: rt.kernel(program, name, dt)
        fused, sizes = self._fused, {"n_in": n_in, "units_p": self.units_p}
        panel_argument = {"panel": panel} if self.tiled else {}  # the GPU form's panels (see gpu_tiles.cl)
        outputs_t, ld = outputs.transposed_arguments()  # ld 0: no y^T
        # Each kernel's arguments named once; a launch gives those that change, in the order bound.
        self._forward = kernel("PerceptronFeedForward").bind(
            ("inputs", "residual", "rows", "adding", *(("slices", "chunk") if self.tiled else ())), weights=weights.value,
            bias=self.bias, kept=kept, outputs=outputs, outputs_t=outputs_t, units=units, ld=ld, a=fused.a, b=fused.b,
            **sizes, **panel_argument)
        if self.tiled:
            self._finish_forward = kernel("FinishFeedForward").bind(
                ("slices", "splits", "residual", "rows", "adding"), bias=self.bias, kept=kept, outputs=outputs,
                outputs_t=outputs_t, units=units, ld=ld, a=fused.a, b=fused.b)
            self._forward_slices = None  # (splits, rows, units) of a split forward, grown as needed
            self._delta_weights = kernel("CalcDeltaWeights").bind(
                ("inputs", "output_gr", "delta", "delta_weights", "delta_bias", "rows", "chunk", "apply_derivative",
                 "first_row"), slopes=kept, units=units, a=fused.a, b=fused.b, **sizes, **panel_argument)
            self._hidden = kernel("CalcHiddenGradient").bind(("delta", "rows", "depth"), weights=weights.value,
                                                             input_gr=input_grad, n_in=n_in, panel=panel)
        else:
            # On a CPU two work-items per compute unit, each a share of the column panels and its
            # own work-group: PoCL 3.0 put the 16 of a GELU layer of 256 units in one group, one
            # core; one a compute unit ran slower than two on both CPU runtimes (benchmarks/RESULTS.md).
            panels = self.units_p // vw
            share = 1 if rt.info.is_gpu else -(-panels // (2 * rt.info.compute_units))
            self._delta_bias_groups = -(-panels // share)
            self._delta_bias = kernel("CalcDeltaBias").bind(
                ("output_gr", "rows", "apply_derivative", "input_gradient"), outputs=outputs, kept=kept,
                delta=self.delta, delta_rows=self.delta if hg_t else self.delta_rows,  # (unread with HG_T)
                delta_bias=self.bias_grad, weights=weights.value, weights_t=self.weights_t, units=units,
                capacity=capacity, a=fused.a, b=fused.b, panels=share, **sizes)
            self._delta_weights = kernel("CalcDeltaWeights").bind(("inputs_t", "rows"), delta=self.delta,
                                                                  delta_weights=weights.grad, capacity=capacity,
                                                                  **sizes)
            read = ({"weights_t": self.weights_t, "delta": self.delta, "capacity": capacity} if hg_t
                    else {"weights": weights.value, "delta_rows": self.delta_rows})
            self._hidden = kernel("CalcHiddenGradient").bind(("rows",), input_gr=input_grad, **read, **sizes)
            self._transpose = kernel("Transpose").bind(("x", "xt", "cols", "rows", "ld"))
        if splits > 1:
            self._sum_splits = kernel("SumSplits").bind(
                ("splits",), weight_slices=self._weight_slices, bias_slices=self._bias_slices,
                delta_weights=weights.grad, delta_bias=self.bias_grad, weights=n_in * self.units_p,
                units_p=self.units_p)
        self._input_t = None  # x^T, made here only when the layer below does not provide it

    @classmethod
    def standalone(cls, rt, dtype, tiles: dict, rows: int, n_in: int, units: int, rng, activation=None):
        """A plan over operands of its own (random weights, ReLU unless `activation` is given), for
        timing a form without a layer."""
        activation = activation or activations.get("relu")
        vw, tiled = tiles["VW"], "TILE" in tiles
        units_p = -(-units // vw) * vw
        panel = units_p if tiled else vw
        parameter = lambda shape: Operand.random(shape, dtype, rt, rng)
        outputs = Tensor((rows, units), dtype, rt)
        kept = Tensor((rows, units), dtype, rt) if stores_pre(activation) else outputs
        return cls(rt, dtype, tiles, activation, n_in, units, panel, rows,
                   weights=parameter((units_p // panel, n_in, panel)), bias=parameter((units_p,)), outputs=outputs,
                   kept=kept, input_grad=Tensor((rows, n_in), dtype, rt))

    def splits(self, rows: int) -> tuple[int, int]:
        """(splits, rows per split) of the weight gradient's sum over the batch (see split_k);
        the CPU form never splits it."""
        return split_k(self.rt, self.tiles, self.n_in, self.units_p, rows) if self.tiled else (1, rows)

    def forward_splits(self, rows: int) -> tuple[int, int]:
        """(splits, depths per split) of the forward's sums over n_in at `rows` rows (see split_k);
        the CPU form and depths below MIN_FORWARD_SPLIT_DEPTH never split them."""
        if not self.tiled or self.n_in < MIN_FORWARD_SPLIT_DEPTH:
            return 1, self.n_in
        return split_k(self.rt, self.tiles, rows, self.units_p, self.n_in)

    def weight_row_blocks(self, parts: int, splits: int = 1) -> list[tuple[int, int]]:
        """dL/dW's rows, (n_in, units_p), that the GPU form's weight-gradient launches compute: all
        in one, unless `parts` > 1 are asked for, dL/dW is one row-major panel (a part's rows are
        then contiguous) and is not split along the batch; then up to `parts` of whole tiles."""
        if parts <= 1 or not self.tiled or self.panels > 1 or splits > 1:
            return [(0, self.n_in)]
        count = -(-self.n_in // self.tiles["TILE"])
        bounds = sorted({min(self.n_in, self.tiles["TILE"] * (count * i // parts)) for i in range(parts + 1)})
        return list(zip(bounds, bounds[1:]))

    def _geometry(self, block, columns, rows, splits=1):
        """Launch settings, remembered (on a GPU the Python of a step is what a small layer's
        step costs): for a product writing a (rows, columns) result, (global, local) sizes; for
        "splits" and "forward splits", the weight gradient's and the forward's (splits, chunk) at
        `rows` rows."""
        key = (block, columns, rows, splits)
        if key not in self._geometries:
            if block == "splits":
                self._geometries[key] = self.splits(rows)
            elif block == "forward splits":
                self._geometries[key] = self.forward_splits(rows)
            else:
                self._geometries[key] = self._launch_sizes(block, columns, rows, splits)
        return self._geometries[key]

    def _launch_sizes(self, block, columns, rows, splits):
        """A TILE-square work-group per block of the result (times `splits` along the third
        axis), or one work-item per `block` rows (times NB) x CN * VW columns."""
        tiles = self.tiles
        if self.tiled:
            side = tiles["TILE"] // tiles["WPT"]
            blocks = lambda n: -(-n // tiles["TILE"]) * side
            if splits > 1:
                return (blocks(columns), blocks(rows), splits), (side, side, 1)
            return (blocks(columns), blocks(rows)), (side, side)
        blocks = kernel_defines(tiles)[block.replace("_RM", "_NB")]
        vectors = tiles.get(block.replace("_RM", "_CN"), 1)  # column vectors per work-item
        work = (-(-columns // (tiles["VW"] * vectors)), -(-rows // (tiles[block] * blocks)))
        side = tiles["WG"]
        if not side:
            return work, None
        return tuple(-(-n // side) * side for n in work), (side, side)

    def _transposed_input(self, x: Tensor, rows: int) -> Tensor:
        """x^T (n_in, capacity), for the CPU form's weight gradient: from the layer below if it
        wrote one of that shape (a Dense on the same positions, or a pooling layer, told by the
        model that this layer reads it; a Flatten passes on a transpose of another shape), else
        transposed here."""
        given = getattr(x, "transposed", None)
        if given is not None and given.shape == (self.n_in, self.capacity):
            return given
        if self._input_t is None:
            self._input_t = Tensor((self.n_in, self.capacity), self.dtype, self.rt)
        self.transpose(x, self._input_t, self.n_in, rows)
        return self._input_t

    def transpose(self, x: Tensor, target: Tensor, cols: int, rows: int) -> None:
        """target (cols, ld) = x^T for x's first `rows` rows of `cols` (the CPU form's kernel)."""
        self._transpose((rows, cols), None, x, target, cols, rows, target.shape[1])

    def forward(self, x: Tensor, rows: int, add: Tensor | None = None) -> None:
        """outputs = f(x W + b) (with `add`, a linear layer's residual, x W + b + add) over `rows`
        rows, keeping z or f'(z) in `kept` where the backward reads it. The GPU form splits the sums
        along n_in where the result has too few blocks to fill the device (split_k), and one more
        launch ends it (FinishFeedForward)."""
        flops, adding = 2.0 * rows * self.n_in * self.units, int(add is not None)
        if not self.tiled:
            self._forward(*self._geometry("FF_RM", self.units, rows), x, add, rows, adding, flops=flops)
            return
        splits, chunk = self._geometry("forward splits", 0, rows)
        if splits == 1:
            self._forward(*self._geometry("FF_RM", self.units, rows), x, add, rows, adding, None, chunk, flops=flops)
            return
        size = splits * rows * self.units
        if self._forward_slices is None or self._forward_slices.shape[0] < size:
            self._forward_slices = Tensor((size,), self.dtype, self.rt)
        slices = self._forward_slices
        self._forward(*self._geometry("FF_RM", self.units, rows, splits), x, None, rows, 0, slices, chunk, flops=flops)
        items = -(-rows * self.units // self.rt.local_size) * self.rt.local_size
        self._finish_forward((items,), (self.rt.local_size,), slices, splits, add, rows, adding)

    def _delta_is_grad(self, apply_derivative: bool) -> bool:
        """Whether the GPU form's input gradient reads dL/dy, (rows, units), as delta = dL/dz:
        where there is no derivative to apply, or the identity's. It need not then wait for the
        weight gradient, which runs beside it (Runtime.side_queue) and writes no delta."""
        return self.tiled and (not apply_derivative or self._identity)

    def weight_gradient(self, x: Tensor, grad: Tensor, rows: int, apply_derivative: bool, input_gradient: bool,
                        parts: int = 1, done=None) -> None:
        """dL/dW and dL/db into the parameters' gradients from x and dL/dy (`grad`; dL/dz where
        not `apply_derivative`), and delta for the input gradient where `input_gradient` follows.
        With `parts` > 1 the GPU form computes dL/dW in launches of whole tiles of rows
        (weight_row_blocks), calling done(first, end, event) after each."""
        flops = 2.0 * rows * self.n_in * self.units
        if self.tiled:  # one launch: delta, the bias gradient and the weight gradient (see gpu_tiles.cl)
            delta_is_grad = self._delta_is_grad(apply_derivative)
            splits, chunk = self._geometry("splits", 0, rows)
            weight_out, bias_out = ((self._weight_slices, self._bias_slices) if splits > 1 else
                                    (self.weights.grad, self.bias_grad))
            blocks = self.weight_row_blocks(parts, splits)  # or a launch per part
            for first, end in blocks:
                event = self._delta_weights(*self._geometry("DW_RM", self.units_p, end - first, splits), x, grad,
                                            None if delta_is_grad else self.delta, weight_out, bias_out, rows, chunk,
                                            int(apply_derivative), first, flops=flops * (end - first) / self.n_in,
                                            beside=delta_is_grad)
                if len(blocks) > 1:
                    done(first, end, event)
            if splits > 1:
                self._sum_splits((self.n_in * self.units_p + self.units_p,), None, splits, beside=True)
        else:
            self._delta_bias((self._delta_bias_groups,), None if self.rt.info.is_gpu else (1,), grad, rows,
                             int(apply_derivative), int(input_gradient))
            self._delta_weights(*self._geometry("DW_RM", self.units_p, self.n_in), self._transposed_input(x, rows), rows,
                                flops=flops)

    def input_gradient(self, grad: Tensor, rows: int, apply_derivative: bool) -> Tensor:
        """input_grad = dL/dz W^T over `rows` rows, after weight_gradient(..., input_gradient=True)
        with the same `grad` and `apply_derivative` (it made delta)."""
        delta_is_grad = self._delta_is_grad(apply_derivative)
        # The CPU form without HG_T computes the transpose, (n_in, rows), a VW-row panel of the batch at a time.
        hg_t = self.tiles.get("HG_T")
        columns, products = (self.n_in, rows) if self.tiled or hg_t else (rows, self.n_in)
        flops = 2.0 * rows * self.n_in * self.units
        if self.tiled:
            self._hidden(*self._geometry("HG_RM", columns, products), grad if delta_is_grad else self.delta, rows,
                         self.units if delta_is_grad else self.units_p, flops=flops)
        else:
            self._hidden(*self._geometry("HG_RM", columns, products), rows, flops=flops)
        return self.input_grad


class Operand:
    """A standalone plan's weight or bias, as a layer's parameter: its `value` and its `grad`."""

    def __init__(self, value: Tensor, grad: Tensor):
        self.value, self.grad = value, grad

    @classmethod
    def random(cls, shape: tuple, dtype, rt, rng) -> "Operand":
        """Values uniform in [-0.5, 0.5) from `rng`, a zero gradient."""
        return cls(Tensor.from_numpy(rng.random(shape) - 0.5, dtype, rt), Tensor.zeros(shape, dtype, rt))


def bias_operands(bias, units_p: int, dtype, rt) -> tuple[Tensor, Tensor]:
    """(bias, bias gradient) a plan's kernels read and write: the parameter's, or without one
    (None) zeros and a gradient nobody reads, since the kernels always take a bias."""
    if bias is None:
        return Tensor.zeros((units_p,), dtype, rt), Tensor((units_p,), dtype, rt)
    return bias.value, bias.grad
