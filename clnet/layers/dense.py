"""Dense (fully connected) layer: the book's perceptron layer, with the activation fused."""
from __future__ import annotations

import math
import os

import numpy as np

from .. import activations, initializers
from ..cl.parameters import ParameterStore
from ..cl.runtime import SM90A, BuildError
from ..cl.tensor import Tensor
from ..cl.tuning import best_seconds, kernel_seconds, tuned
from .base import Layer, check_weights


def tile_candidates(rt, dtype) -> list[dict]:
    """Vector widths, output blocks per work-item and work-group shapes that the autotuner tries.

    CPUs want explicit vectors of one or two SIMD registers and several outputs per work-item:
    two registers by 6 rows (12 accumulators, the usual AVX2 micro-kernel) come first, as enough
    independent multiply-adds to hide each one's latency without spilling (their measurements
    against one register by 8 rows are in benchmarks/RESULTS.md). GPUs want many work-items with a
    small block each. The device's widest vector (at most 64 bytes) and the CPU form's panels'
    VW >= 4 limit the width. The register size is the device's native vector width (PoCL 3.1
    also names its LLVM target in the device name; PoCL 3.0 and Intel's runtime do not). FF_NB,
    FF_KB and the like: a CPU work-item's register blocks and K-block depth (below), per kernel;
    a candidate gives all three kernels the same, and the tuner takes each kernel's from the
    candidate fastest for it (_fastest_setting). WG is the work-group side on a CPU (0: the
    runtime's choice), a launch setting rather than a kernel define. HG_T (the input gradient from
    W^T, see dense.cl) is tried with WG 4 alone: the work-group side made no difference to it in
    the sweeps, and this halves the candidates it adds.
    """
    if rt.info.is_gpu:
        blocked = [{"VW": 4, "FF_RM": rm, "DW_RM": rm, "HG_RM": rm, "WG": 0} for rm in (1, 2, 4)]
        tiled = [{"VW": 4, "TILE": tile, "WPT": wpt, "TK": tk}
                 for tile, wpt, tk in ((64, 4, 16), (64, 8, 16), (128, 8, 16), (128, 8, 32))]
        tensor = [{"VW": 4, "TILE": 128, "WPT": 8, "TK": tk, "MMA": 1} for tk in (16, 32)]
        if rt.info.warpgroup_products:
            tensor.append({"VW": 4, "TILE": 128, "WPT": 8, "TK": 16, "WGMMA": 1})
        return blocked + tiled + (tensor if tensor_core_form(rt, dtype) else [])
    itemsize = np.dtype(dtype).itemsize
    register_bytes = rt.info.vector_bytes(itemsize)
    lanes = register_bytes // itemsize
    widest = rt.info.widest_vector_bytes
    widths = [lanes * n for n in (2, 1) if 4 <= lanes * n <= 16 and lanes * n * itemsize <= widest]
    return [{"VW": vw, "FF_RM": rm, "DW_RM": rm, "HG_RM": rm, **per_kernel(depth), "HG_T": hg_t, "WG": wg}
            for vw in widths for depth in (UNBLOCKED, K_BLOCKED) for rm in (6, 8, 4) for wg in (4, 2)
            for hg_t in ((0, 1) if wg == 4 else (0,))]  # the first: CLNET_TUNE=0


def tensor_core_form(rt, dtype) -> bool:
    """Whether dense.cl's tensor-core forms (MMA: 3xTF32 with mma.sync; WGMMA: with Hopper's wgmma)
    are candidates here: float32 on an NVIDIA GPU of compute capability 8.0 or later (9.0 for
    WGMMA), unless CLNET_TENSOR_CORES=0 (their products keep 22 of each operand's 24 significant
    bits; see dense.cl)."""
    return tensor_cores_can_run(rt, dtype) and os.environ.get("CLNET_TENSOR_CORES") != "0"


def tensor_cores_can_run(rt, dtype) -> bool:
    """Whether the tensor-core form can run here at all: float32 on NVIDIA's TF32 tensor cores."""
    return np.dtype(dtype) == np.float32 and rt.info.tensor_cores


def on_tensor_cores(tiles: dict) -> bool:
    """Whether these tiles are one of the tensor-core forms (MMA or WGMMA)."""
    return bool(tiles.get("MMA") or tiles.get("WGMMA"))


def check_tensor_core_form(rt, dtype, tiles, owner: str) -> None:
    """A ValueError naming `owner` where fixed `tiles` ask for a tensor-core form here and it
    cannot run (NVIDIA's compiler alone takes its inline PTX, and wgmma is Hopper's alone)."""
    if not isinstance(tiles, dict):
        return
    if tiles.get("MMA") and not tensor_cores_can_run(rt, dtype):
        raise ValueError(f"{owner}: tiles {tiles!r} ask for the tensor-core form (MMA), which needs float32 on an "
                         f"NVIDIA GPU of compute capability 8.0 or later; the device is {rt.info.name!r} and "
                         f"floatx is {np.dtype(dtype).name}")
    if tiles.get("WGMMA") and not (tensor_cores_can_run(rt, dtype) and rt.info.warpgroup_products):
        raise ValueError(f"{owner}: tiles {tiles!r} ask for the warpgroup tensor-core form (WGMMA), which needs "
                         f"float32 on an NVIDIA GPU of compute capability 9.0 (H100, H200); the device is "
                         f"{rt.info.name!r} and floatx is {np.dtype(dtype).name}")


# How a CPU work-item walks the depth K (see dense.cl): one register block over the whole depth,
# or NB blocks stacked down the rows, KB deep at a time. At 2048^3, where a work-group's panels
# outgrow L2, K-blocking made PoCL 3.1 far faster and PoCL 3.0 faster too; at 1024^3 it slowed
# PoCL 3.0 somewhat, and Intel's runtime ran the same either way: the tuner chooses, for each
# kernel on its own (on Intel's runtime at 1024^3 and 2048^3 the forward and the weight gradient
# ran slightly faster unblocked, the input gradient slightly slower; benchmarks/RESULTS.md, dense
# products with K-blocking on three CPU runtimes, and K-blocking per kernel).
UNBLOCKED = {"NB": 1, "KB": 0}
K_BLOCKED = {"NB": 8, "KB": 256}
KERNEL_PREFIXES = ("FF", "DW", "HG")  # PerceptronFeedForward, CalcDeltaWeights, CalcHiddenGradient
LAUNCH_KEYS = ("WG",)
MIN_SPLIT_ROWS = 256  # the fewest batch rows one split-K work-group sums (see split_k)


def per_kernel(depth: dict) -> dict:
    """NB and KB as each CPU kernel's own define: FF_NB, FF_KB, DW_NB, ..."""
    return {f"{kernel}_{key}": value for kernel in KERNEL_PREFIXES for key, value in depth.items()}


def kernel_defines(tiles: dict) -> dict:
    """The program's defines for these tiles; CPU tiles without a kernel's NB and KB leave that
    kernel unblocked."""
    defaults = {} if "TILE" in tiles else per_kernel(UNBLOCKED)
    if tiles.get("WGMMA"):
        defaults[SM90A] = 1  # the runtime must uncover HOPPER()'s instructions (Runtime._sm90a_program)
    return {**defaults, **{k: v for k, v in tiles.items() if k not in LAUNCH_KEYS}}


def program_defines(fused, store_pre: bool, tiles: dict, store_slopes: bool = False) -> dict:
    """The dense program's defines: the activation fused into the forward (and whether it has a
    vector form), whether it stores z or f'(z) (see stores_pre, stores_slopes) and the tiles."""
    return {"ACT": fused.function, "ACT_VECTOR": int(fused.vector_form), "STORE_PRE": int(store_pre),
            "STORE_SLOPES": int(store_slopes), **kernel_defines(tiles)}


def dense_program(rt, dtype, activation, tiles: dict):
    """The dense kernels of a layer with this activation (the elementwise ones fused into the
    forward; softmax's input stored), with these tiles."""
    fused = activation if activation.elementwise else activations.Linear()
    slopes = stores_slopes(activation, tiles)
    return rt.program((fused.source, "activations/vector.cl", "layers/dense.cl"), dtype,
                      program_defines(fused, stores_pre(activation) and not slopes, tiles, slopes))


def stores_pre(activation) -> bool:
    """Whether a layer with this activation stores z (or, see stores_slopes, f'(z)): softmax reads
    it, and so does a derivative that does not follow from y alone."""
    return not (activation.elementwise and activation.derivative_from_output)


def stores_slopes(activation, tiles: dict) -> bool:
    """Whether the forward stores f'(z) in z's place: the GPU form (TILE), where the derivative
    needs z; the weight gradient then multiplies by it (see STORE_SLOPES in dense.cl)."""
    return "TILE" in tiles and activation.elementwise and stores_pre(activation)


def usable_candidates(rt, dtype, candidates: list[dict] | None = None) -> list[dict]:
    """The candidates (by default every one of tile_candidates) whose programs build on this device."""
    usable = []
    relu = activations.get("relu")
    for tiles in tile_candidates(rt, dtype) if candidates is None else candidates:
        try:
            dense_program(rt, dtype, relu, tiles)
        except BuildError:
            continue
        usable.append(tiles)
    if not usable:
        raise BuildError(f"none of the dense kernel variants builds on {rt.info.name!r}")
    return usable


def matrix_tiles(rt, dtype, n_in: int, units: int, rows: int | None = None) -> dict:
    """The autotuner's choice for a layer of this size on this device, measured once per device.

    The tuner measures a few layer sizes and keeps the fastest candidate for each, all with one
    weight layout (vector width, and panels or tiles); a layer takes the choice made at the size
    nearest its own, in log scale (without `rows`, the batch, while its weights are laid out).
    """
    candidates = tile_candidates(rt, dtype)
    # Keyed by everything the choice depends on: the kernels' text (common.cl included), the
    # candidates and the sizes measured.
    choices = tuned(rt, dtype, "dense", ("cl/common.cl", "activations/vector.cl", "layers/dense.cl"),
                    lambda: _tune(rt, dtype, usable_candidates(rt, dtype)),
                    [{"size": [1, 1, 1], "tiles": candidates[0]}], {"candidates": candidates, "sizes": _sizes(rt)})
    wanted = (rows, n_in, units)
    distance = lambda choice: sum(abs(math.log(have / want)) for have, want in zip(choice["size"], wanted) if want)
    return min(choices, key=distance)["tiles"]


def split_k(rt, tiles: dict, n_in: int, units_p: int, rows: int, waves: int = 1) -> tuple[int, int]:
    """(splits, rows per split) of a tiled weight gradient's sum over `rows` batch rows: split
    when its (n_in, units_p) result has too few tiles to fill the device `waves` times, in chunks
    of at least MIN_SPLIT_ROWS rows (a multiple of TK). Dense fills it once: with the WGMMA
    tiles, the tiny GPT's 17 weight gradients and their SumSplits took least time on a GPU
    filling it once, more filling it twice and more again four times (alternated runs; with the
    CUDA-core tiles it made no difference)."""
    tile = tiles["TILE"]
    blocks = -(-n_in // tile) * -(-units_p // tile)
    splits = max(1, min(waves * rt.info.cl_device.max_compute_units // blocks, rows // MIN_SPLIT_ROWS))
    if splits == 1:
        return 1, rows
    chunk = -(-(-(-rows // splits)) // tiles["TK"]) * tiles["TK"]
    return -(-rows // chunk), chunk


def layout(tiles: dict) -> tuple:
    """What fixes the weights' layout on the device: the vector width and the form (see dense.cl)."""
    return tiles["VW"], "TILE" in tiles


def _sizes(rt) -> list[tuple[int, int, int]]:
    """The layer sizes (rows, n_in, units) the tuner measures. Layers large enough to fill the
    device, small enough to take milliseconds. A GPU measures an MLP-sized layer at two batches,
    where more work-groups win, larger ones, where bigger tiles do, and a tall one, a
    transformer's layer over (batch x time) rows: without it the tiny GPT's layers (8192 rows of
    256 or 1024) took the tiles chosen at 1024^3, and ran slower than with 128-tiles
    (benchmarks/RESULTS.md, the tiny GPT's Dense layers in the tuner's sizes). Likewise the README
    MLP at batch 1024 took 1024^3's WGMMA tiles, 16 work-groups for its first layer, far fewer than
    a large GPU's SMs; with the 1024-row MLP layer measured it takes 64-tiles, and its forwards and
    weight gradients run faster. That size then stood nearest the GPT's second feed-forward layer
    (8192 x 1024 -> 256), which lost its WGMMA tiles (the step's products took markedly longer):
    the tall layer is measured both ways round. A CPU measures a small layer, a cube, and a layer
    whose weights (16 MiB) and inputs outgrow its caches, where K-blocking wins (PoCL, 512 x 2048 x
    2048: a faster forward; at 256 rows it made no difference, at 1024^3 PoCL 3.0 ran faster
    without). That layer has 1024 rows: at 512 the input gradient's W^T (HG_T), 16 MiB written
    every step on Intel's runtime, cost what its product gained, and the tuner gave 2048^3 the
    form without, measurably slower there."""
    if rt.info.is_gpu:
        return [(128, 784, 256), (1024, 784, 256), (1024, 1024, 1024), (2048, 2048, 2048), (8192, 256, 1024),
                (8192, 1024, 256)]
    return [(256, 512, 512), (1024, 1024, 1024), (1024, 2048, 2048)]


def _tune(rt, dtype, candidates) -> list[dict]:
    sizes = _sizes(rt)
    measured = [{} for _ in candidates]  # per candidate: {(size, kernel): seconds}
    seconds = best_seconds if rt.info.is_gpu else kernel_seconds  # (see kernel_seconds)
    for size in sizes:
        rows, n_in, units = size
        rng = np.random.default_rng(0)
        x = Tensor.from_numpy(rng.random((rows, n_in)), dtype, rt)
        grad = Tensor.from_numpy(rng.random((rows, units)), dtype, rt)
        for tiles, times in zip(candidates, measured):
            store = ParameterStore(rt, dtype)
            layer = Dense(units, "relu", tiles=tiles)
            layer.build((n_in,), store, rng)
            store.allocate()
            layer.allocate(rows)
            forward = seconds(rt, lambda: layer.forward(x, rows))
            weight_grad = seconds(rt, lambda: layer.backward(grad, rows, False))
            input_grad = seconds(rt, lambda: layer.backward(grad, rows, True)) - weight_grad
            times.update({(size, "FF"): forward, (size, "DW"): weight_grad, (size, "HG"): input_grad})
    # The fastest setting per (layout, size); then the layout that does best over all sizes,
    # each size counted relative to its fastest setting of any layout.
    layouts = {layout(tiles) for tiles in candidates}
    fastest = {(form, size): _fastest_setting([(tiles, times) for tiles, times in zip(candidates, measured)
                                                if layout(tiles) == form], size)
               for form in layouts for size in sizes}
    best = {size: min(fastest[form, size][1] for form in layouts) for size in sizes}
    form = min(layouts, key=lambda form: sum(fastest[form, size][1] / best[size] for size in sizes))
    return [{"size": list(size), "tiles": fastest[form, size][0]} for size in sizes]


def _fastest_setting(measured: list[tuple[dict, dict]], size) -> tuple[dict, float]:
    """The fastest tiles at this size and their seconds for the three products. Blocked
    candidates differing only in a kernel's blocks (its RM, NB and KB) share a weight layout and
    launch settings, so each kernel takes its own fastest blocks; anything else is compared as a
    whole."""
    block_keys = {key for keys in BLOCK_KEYS.values() for key in keys}
    families: dict[tuple, dict] = {}
    for tiles, times in measured:
        family = tuple(sorted((k, v) for k, v in tiles.items() if k not in block_keys))
        choice = families.setdefault(family, {"tiles": dict(tiles), "seconds": {}})
        for kernel, keys in BLOCK_KEYS.items():
            if times[size, kernel] < choice["seconds"].get(kernel, float("inf")):
                choice["seconds"][kernel] = times[size, kernel]
                choice["tiles"].update({key: tiles[key] for key in keys if key in tiles})
    choice = min(families.values(), key=lambda c: sum(c["seconds"].values()))
    return choice["tiles"], sum(choice["seconds"].values())


BLOCK_KEYS = {kernel: (f"{kernel}_RM", f"{kernel}_NB", f"{kernel}_KB") for kernel in KERNEL_PREFIXES}
BLOCK_KEYS["HG"] += ("HG_T",)  # the input gradient's form, too (see HG_T in dense.cl)


class Dense(Layer):
    """Keras's `Dense`: y = activation(x · kernel + bias), the MQL5 book's perceptron layer with the
    activation fused into the product's launch. `(batch, features) -> (batch, units)`; on `(batch,
    ..., features)` it applies to the last axis, the same at every position, as Keras's does: one
    product over batch × positions rows. The input's mask goes on.

    - `units`: a positive integer.
    - `activation=None`: anything `clnet.activations.get` takes (None, a name such as `"relu"`, a
      config dict, an Activation); the elementwise ones run inside the product's kernel, softmax as
      its own kernels after it, which a cross-entropy loss may take over.
    - `use_bias=True`.
    - `kernel_initializer="glorot_uniform"`, `bias_initializer="zeros"`: a name
      `clnet.initializers.get` knows or a callable `(shape, rng) -> array`.
    - `tiles=None` (clnet's own): fixes the kernels' form, vector width and blocks, a dict as
      `clnet.layers.dense.tile_candidates` lists them (a tensor-core form, MMA or WGMMA, only where
      it can run, else a `ValueError`); by default the autotuner's choice for this device and size
      (`CLNET_TUNE=0`: each family's default without measuring).

    Weights, as `get_weights()` gives them (Keras's layout): kernel `(features, units)`, then bias
    `(units,)` with `use_bias`. On the device the kernel is laid out in column panels padded to the
    vector width (see dense.cl); `get_weights`/`set_weights` convert. Keras's regularizers,
    constraints and `lora_rank` are not taken."""
    mask_handling = "propagate"  # (a step at a time: the input's mask goes on)

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", name=None, input_shape=None, tiles=None):
        super().__init__(name, input_shape)
        self.fixed_tiles = tiles
        if isinstance(units, bool) or not isinstance(units, (int, np.integer)) or units < 1:
            raise ValueError(f"Dense units must be a positive integer, got {units!r}")
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self._initializer_names = (kernel_initializer, bias_initializer)
        self.output_activation = self.activation
        self._gradient_parts, self._part_done = 1, None  # see hand_over_gradients

    @property
    def adds_to_output(self):
        """A linear layer adds a residual to y in its forward launch (see Layer.adds_to_output)."""
        return isinstance(self.activation, activations.Linear)

    @property
    def reads_transposed(self):
        """Whether the weight gradient reads x^T (the CPU form's, see _transposed_input); the GPU
        form's reads x."""
        return not self.tiled

    def compute_output_shape(self, input_shape):
        # As Keras: on (..., features) the kernel applies to the last axis, the same at every position.
        return (*input_shape[:-1], self.units)

    def build(self, input_shape, store: ParameterStore, rng):
        shape = super().build(input_shape, store, rng)
        self.n_in = self.input_shape[-1]
        # Positions per sample: on (time, features) inputs the product runs over batch * time rows.
        self.positions = int(np.prod(self.input_shape[:-1]))
        check_tensor_core_form(self.rt, self.dtype, self.fixed_tiles, f"Dense {self.name!r}")
        # The weights' layout is fixed here; the blocks or tiles, which may differ with the batch
        # size, when the batch buffers are made (allocate).
        self.layout = layout(self.fixed_tiles or matrix_tiles(self.rt, self.dtype, self.n_in, self.units))
        vw, self.tiled = self.layout
        self.units_p = -(-self.units // vw) * vw
        # Column panels of width `panel` (see dense.cl); the GPU form's single panel is row-major.
        self.panel = self.units_p if self.tiled else vw
        self.panels = self.units_p // self.panel
        self._declare_weights(store, rng)
        act = self.activation
        self._fused = act if act.elementwise else activations.Linear()
        if not act.elementwise:
            self.act_program = act.program(self.rt, self.dtype)
        return shape

    def _declare_weights(self, store, rng):
        kernel, kernel_index, bias = self._drawn_weights(self.units, rng)
        self.kernel = store.add(kernel, kernel_index)
        if self.use_bias:
            self.bias = store.add(bias, np.arange(self.units))

    def _drawn_weights(self, units: int, rng):
        """A (n_in, units) kernel from the initializer in the device layout, column panels of
        `panel` columns (units_p of them at most), with its keras_index; and the bias, (units_p,)."""
        units_p = -(-units // self.layout[0]) * self.layout[0]
        panel = min(self.panel, units_p)
        panels = units_p // panel
        kernel_index = (np.arange(self.n_in * units_p).reshape(panels, self.n_in, panel)
                        .transpose(1, 0, 2).reshape(self.n_in, units_p)[:, :units])
        kernel = np.zeros(self.n_in * units_p)
        kernel[kernel_index] = self.kernel_initializer((self.n_in, units), rng)
        bias = np.zeros(units_p)
        if self.use_bias:
            bias[:units] = self.bias_initializer((units,), rng)
        return kernel.reshape(panels, self.n_in, panel), kernel_index, bias

    @property
    def parameters(self):
        return [self.kernel, self.bias] if self.use_bias else [self.kernel]

    def _tuned_tiles(self, rows: int) -> dict:
        """The tiles for a batch of `rows` product rows: the tuner's choice at this size."""
        return matrix_tiles(self.rt, self.dtype, self.n_in, self.units, rows)

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        self.batch_capacity = capacity
        capacity = self.capacity = capacity * self.positions  # product rows: samples x positions
        self.tiles = self.fixed_tiles or self._tuned_tiles(capacity)
        assert layout(self.tiles) == self.layout, "every tuned size shares the weights' layout"
        program = dense_program(rt, dt, self.activation, self.tiles)
        # y = f(z), (batch capacity, *positions, units): the same rows, seen with the sample shape.
        self.outputs = Tensor((self.batch_capacity, *self.output_shape), dt, rt)
        # What the forward keeps beside y for the backward, (capacity, units): z = x W + b, for
        # softmax and the CPU form's derivative, or on the GPU its f'(z) (stores_slopes); where
        # the derivative follows from y (ReLU, linear, tanh), nothing, and the derivative reads y
        # in its place: one output fewer to write (see STORE_PRE in dense.cl).
        self.kept = Tensor((capacity, self.units), dt, rt) if stores_pre(self.activation) else self.outputs
        # y^T, which the next layer's weight gradient reads along rows, where the model says a
        # layer reads it (writes_transposed): no layer reads a last layer's, whose forward is
        # then one output lighter (measurably faster at 1024^3 on Intel's runtime). Softmax is
        # applied after the product kernel, so a softmax layer's y^T would be stale: none.
        written = self.writes_transposed and self.activation.elementwise
        self.outputs_t = Tensor((self.units, capacity), dt, rt) if written else None
        self.outputs.transposed = self.outputs_t
        self.delta = Tensor((self.panels, capacity, self.panel), dt, rt)  # dL/dz, column panels
        # The input gradient's operands: on the GPU the row-major delta and W; on a CPU delta in
        # row panels and W (see CalcHiddenGradient), or, with HG_T, the row-major delta and W^T.
        self.weights_t = None
        if self.tiled:
            self.delta_rows = self.delta
        elif self.tiles.get("HG_T"):
            vw = self.tiles["VW"]
            self.delta_rows = Tensor((capacity, self.units_p), dt, rt)  # (rows, units_p)
            self.weights_t = Tensor.zeros((-(-self.n_in // vw), self.units_p, vw), dt, rt)  # W^T, column panels
        else:
            vw = self.tiles["VW"]
            self.delta_rows = Tensor((-(-capacity // vw), self.units_p, vw), dt, rt)  # row panels
        self.input_grad = Tensor((self.batch_capacity, *self.input_shape), dt, rt)  # dL/dx
        if not self.use_bias:  # the kernels always read a bias and write its gradient
            self._zero_bias = Tensor.zeros((self.units_p,), dt, rt)
            self._bias_grad_sink = Tensor((self.units_p,), dt, rt)
        self._geometries = {}  # (block, columns, rows) -> launch sizes, for these tiles
        splits = self._splits(capacity)[0]
        if splits > 1:  # split-K slices of the weight and bias gradients (GPU form)
            self._weight_slices = Tensor((splits, self.n_in, self.units_p), dt, rt)
            self._bias_slices = Tensor((splits, self.units_p), dt, rt)
            self._sum_splits = rt.kernel(program, "SumSplits", dt)
        if not self.activation.elementwise:
            self.act_grad = Tensor((capacity, self.units), dt, rt)
            self._softmax = rt.kernel(self.act_program, "SoftMaxActivation", dt)
            self._softmax_derivative = rt.kernel(self.act_program, "SoftMaxDerivative", dt)
        kernel = lambda name: rt.kernel(program, name, dt)
        self._forward = kernel("PerceptronFeedForward")
        if not self.tiled:  # the GPU form's weight gradient makes delta and the bias gradient itself
            self._delta_bias = kernel("CalcDeltaBias")
        self._delta_weights = kernel("CalcDeltaWeights")
        self._hidden = kernel("CalcHiddenGradient")
        if not self.tiled:
            self._transpose = kernel("Transpose")
        self._panel_argument = (self.panel,) if self.tiled else ()  # the GPU form's panels (see dense.cl)
        self._input_t = None  # x^T, made here only when the layer below does not provide it

    def _geometry(self, block, columns, rows, splits=1):
        """Launch settings, remembered (on a GPU the Python of a step is what a small layer's
        step costs): for a product writing a (rows, columns) result, (global, local) sizes; for
        "splits", (splits, chunk) at `rows` rows."""
        key = (block, columns, rows, splits)
        if key not in self._geometries:
            self._geometries[key] = (self._splits(rows) if block == "splits"
                                     else self._launch_sizes(block, columns, rows, splits))
        return self._geometries[key]

    def _launch_sizes(self, block, columns, rows, splits):
        """A TILE-square work-group per block of the result (times `splits` along the third
        axis), or one work-item per `block` rows x VW columns."""
        tiles = self.tiles
        if self.tiled:
            side = tiles["TILE"] // tiles["WPT"]
            blocks = lambda n: -(-n // tiles["TILE"]) * side
            if splits > 1:
                return (blocks(columns), blocks(rows), splits), (side, side, 1)
            return (blocks(columns), blocks(rows)), (side, side)
        blocks = kernel_defines(tiles)[block.replace("_RM", "_NB")]
        work = (-(-columns // tiles["VW"]), -(-rows // (tiles[block] * blocks)))
        side = tiles["WG"]
        if not side:
            return work, None
        return tuple(-(-n // side) * side for n in work), (side, side)

    def gradient_parts(self, parts: int) -> list[tuple[int, int]]:
        """The GPU form computes a large kernel's gradient in `parts` launches of whole tiles of rows
        (see CalcDeltaWeights) where a distribution copies each off the device while the next
        computes: what is left to copy once the backward pass ends is then only the last part, not
        the whole kernel's gradient, so the copies of a wide first layer hide behind the compute
        (measured in benchmarks/RESULTS.md, data-parallel training). The parts' flat ranges in the
        store's gradients."""
        blocks = self._weight_row_blocks(parts)
        return [self._flat_rows(first, end) for first, end in blocks] if len(blocks) > 1 else []

    def hand_over_gradients(self, parts: int, done) -> None:
        self._gradient_parts, self._part_done = (parts, done) if done is not None else (1, None)

    def _weight_row_blocks(self, parts: int, splits: int = 1) -> list[tuple[int, int]]:
        """dL/dW's rows, (n_in, units_p), that the GPU form's weight-gradient launches compute: all
        in one, unless `parts` > 1 are asked for, dL/dW is one row-major panel (a part's rows are
        then contiguous) and is not split along the batch; then up to `parts` of whole tiles."""
        tiles = getattr(self, "tiles", None)
        if parts <= 1 or not self.tiled or tiles is None or self.panels > 1 or splits > 1:
            return [(0, self.n_in)]
        count = -(-self.n_in // tiles["TILE"])
        bounds = sorted({min(self.n_in, tiles["TILE"] * (count * i // parts)) for i in range(parts + 1)})
        return list(zip(bounds, bounds[1:]))

    def _flat_rows(self, first: int, end: int) -> tuple[int, int]:
        """Where dL/dW's rows [first, end) lie in the store's flat gradients."""
        return self.kernel.offset + first * self.units_p, self.kernel.offset + end * self.units_p

    def _splits(self, rows: int) -> tuple[int, int]:
        """(splits, rows per split) of the weight gradient's sum over the batch (see split_k);
        the CPU form never splits it."""
        return split_k(self.rt, self.tiles, self.n_in, self.units_p, rows) if self.tiled else (1, rows)

    def _transposed_input(self, rows: int) -> Tensor:
        """x^T (n_in, capacity), for the CPU form's weight gradient: from the layer below if it
        wrote one of that shape (a Dense on the same positions, or a pooling layer, told by the
        model that this layer reads it; a Flatten passes on a transpose of another shape), else
        transposed here."""
        given = getattr(self.x, "transposed", None)
        if given is not None and given.shape == (self.n_in, self.capacity):
            return given
        if self._input_t is None:
            self._input_t = Tensor((self.n_in, self.capacity), self.dtype, self.rt)
        self.transpose(self.x, self._input_t, self.n_in, rows)
        return self._input_t

    def transpose(self, x: Tensor, target: Tensor, cols: int, rows: int) -> None:
        """target (cols, ld) = x^T for x's first `rows` rows of `cols` (the CPU form's kernel)."""
        self._transpose((rows, cols), None, x, target, cols, rows, target.shape[1])

    def _row_group(self) -> int:
        # Softmax reduces a row with a work-group (Runtime.row_group) on a GPU; on a CPU with one
        # work-item, as the runtime runs a work-group's items in loops split at each barrier (the
        # tiny GPT's (2048, 113) softmax ran far faster that way on PoCL 3.1).
        if not self.rt.info.is_gpu:
            return 1
        return self.rt.row_group(self.units)

    def forward(self, x, rows, add=None):
        """y = f(x W + b), or with `add` (a linear layer's, see Layer.adds_to_output) x W + b + add."""
        self.forward_logits(x, rows, add)
        if not self.activation.elementwise:
            rows *= self.positions
            group = self._row_group()
            self._softmax((rows * group,), (group,), self.kept, self.outputs, self.units)
        return self.outputs

    def forward_logits(self, x, rows, add=None):
        """The product with the elementwise activation fused; returns z, softmax's input, for a
        loss that takes the softmax itself (see Step._forward_loss)."""
        if add is not None and not self.adds_to_output:
            raise ValueError(f"Dense {self.name!r} adds a residual only with a linear activation, not "
                             f"{type(self.activation).__name__}")
        self.x = x
        rows *= self.positions
        bias = self.bias.value if self.use_bias else self._zero_bias
        a, b = self._fused.a, self._fused.b
        outputs_t, ld = self.outputs.transposed_arguments()  # ld 0: no y^T
        self._forward(*self._geometry("FF_RM", self.units, rows),
                      x, self.kernel.value, bias, add, self.kept, self.outputs, outputs_t,
                      rows, self.n_in, self.units, self.units_p, ld, int(add is not None), a, b,
                      *self._panel_argument, flops=2.0 * rows * self.n_in * self.units)
        return self.kept

    def backward(self, grad, rows, input_grad, activation_done=False):
        """`activation_done`: `grad` is already dL/dz (a loss folded the activation in)."""
        rows *= self.positions
        apply_derivative = not activation_done
        if apply_derivative and not self.activation.elementwise:
            group = self._row_group()
            self._softmax_derivative((rows * group,), (group,), self.outputs, grad, self.act_grad, self.units)
            grad, apply_derivative = self.act_grad, False
        bias_grad = self.bias.grad if self.use_bias else self._bias_grad_sink
        a, b = self._fused.a, self._fused.b
        flops = 2.0 * rows * self.n_in * self.units
        # Where delta = dL/dz is dL/dy itself (no derivative to apply, or the identity's), the GPU
        # form's input gradient reads dL/dy, (rows, units), and need not wait for the weight
        # gradient, which then runs beside it (Runtime.side_queue) and writes no delta.
        identity = isinstance(self.activation, activations.Linear) and self.activation.a == 1
        delta_is_grad = self.tiled and (not apply_derivative or identity)
        if self.tiled:  # one launch: delta, the bias gradient and the weight gradient (see dense.cl)
            splits, chunk = self._geometry("splits", 0, rows)
            weight_out, bias_out = ((self._weight_slices, self._bias_slices) if splits > 1 else
                                    (self.kernel.grad, bias_grad))
            blocks = self._weight_row_blocks(self._gradient_parts, splits)  # or a launch per part
            for first, end in blocks:
                event = self._delta_weights(*self._geometry("DW_RM", self.units_p, end - first, splits),
                                            self.x, grad, self.kept, None if delta_is_grad else self.delta,
                                            weight_out, bias_out, rows, self.n_in, self.units, self.units_p, chunk,
                                            a, b, int(apply_derivative), self.panel, first,
                                            flops=flops * (end - first) / self.n_in, beside=delta_is_grad)
                if len(blocks) > 1:
                    self._part_done(*self._flat_rows(first, end), event)
        else:
            splits = 1
            # On a CPU a work-item per compute unit's share of the column panels, each its own
            # work-group: PoCL 3.0 put the 16 of a GELU layer of 256 units in one group, one core.
            panels = self.units_p // self.tiles["VW"]
            gpu = self.rt.info.is_gpu
            share = 1 if gpu else -(-panels // self.rt.info.compute_units)
            self._delta_bias((-(-panels // share),), None if gpu else (1,), grad, self.outputs, self.kept, self.delta,
                             self.delta_rows, bias_grad, self.kernel.value, self.weights_t, rows, self.units,
                             self.units_p, self.capacity, a, b, int(apply_derivative), share, self.n_in,
                             int(input_grad))
            self._delta_weights(*self._geometry("DW_RM", self.units_p, self.n_in), self._transposed_input(rows),
                                self.delta, self.kernel.grad, rows, self.n_in, self.units_p, self.capacity, flops=flops)
        if splits > 1:
            weights = self.n_in * self.units_p
            self._sum_splits((weights + self.units_p,), None, self._weight_slices, self._bias_slices,
                             self.kernel.grad, bias_grad, splits, weights, self.units_p, beside=True)
        if not input_grad:
            return None
        # The CPU form without HG_T computes the transpose, (n_in, rows), a VW-row panel of the batch at a time.
        hg_t = self.tiles.get("HG_T")
        columns, products = (self.n_in, rows) if self.tiled or hg_t else (rows, self.n_in)
        weights = self.weights_t if hg_t else self.kernel.value
        self._hidden(*self._geometry("HG_RM", columns, products),
                     grad if delta_is_grad else self.delta_rows, weights, self.input_grad, rows,
                     self.n_in, self.units if delta_is_grad else self.units_p, *self._panel_argument, flops=flops)
        return self.input_grad

    def to_onnx(self, graph, inputs):
        kernel, *bias = self.get_weights()                     # (n_in, units), (units,)
        kernel = graph.constant("kernel", kernel)
        if self.use_bias and self.positions == 1 and len(self.input_shape) == 1:
            z = graph.op("Gemm", inputs[0], kernel, graph.constant("bias", bias[0]))
        else:  # Gemm is 2-D only; MatMul broadcasts over the leading axes
            z = graph.op("MatMul", inputs[0], kernel)
            if self.use_bias:
                z = graph.op("Add", z, graph.constant("bias", bias[0]))
        return [self.activation.to_onnx(graph, z)]

    def get_weights(self):
        return [p.to_keras(p.value.numpy()) for p in self.parameters]

    def gradients(self):
        return [p.to_keras(p.grad.numpy()) for p in self.parameters]

    def set_weights(self, weights):
        self.require_built("set_weights")
        shapes = [(self.n_in, self.units)] + ([(self.units,)] if self.use_bias else [])
        for parameter, array in zip(self.parameters, check_weights(self, weights, shapes)):
            device = np.zeros(parameter.size, self.dtype)
            parameter.from_keras(array, device)
            parameter.value.write(device.reshape(parameter.shape))

    def get_config(self):
        kernel_init, bias_init = self._initializer_names
        name = lambda init: init if isinstance(init, str) else init.__name__
        return {**super().get_config(), "units": self.units, "activation": self.activation.get_config(),
                "use_bias": self.use_bias, "kernel_initializer": name(kernel_init),
                "bias_initializer": name(bias_init)}


class JoinedDense(Dense, registered=False):
    """`parts` linear Dense layers of `width` units each over one input, run as one of parts x width
    units: MultiHeadAttention's query, key and value projections of a self-attention, one product a
    pass instead of three and no sum of their three input gradients. Each part's kernel and bias
    stay weights of their own (in Keras's layout, as a Dense of `width` units lays them out), back to
    back in the store: the joined kernel is the parts' column panels side by side, which on a GPU
    are panels of `width` columns (see dense.cl). Only where `joinable` says so."""

    def __init__(self, parts: int, width: int, use_bias, kernel_initializer, bias_initializer, name, tiles=None):
        super().__init__(parts * width, None, use_bias, kernel_initializer, bias_initializer, name, tiles=tiles)
        self.parts, self.width = parts, width

    @staticmethod
    def joinable(rt, dtype, n_in: int, width: int, parts: int, tiles=None) -> bool:
        """Whether parts of `width` units over n_in inputs join here (with these tiles, or the
        tuner's): each part whole panels of the layout (in the GPU form, whole 64-wide tiles, the
        smallest the tuner offers, or the fixed tiles'), and each part's kernel and bias whole
        alignment steps of the store, so that nothing pads them apart."""
        vw, tiled = layout(tiles or matrix_tiles(rt, dtype, n_in, parts * width))
        step = rt.alignment // np.dtype(dtype).itemsize
        panel = (tiles or {}).get("TILE", 64) if tiled else vw
        return width % panel == 0 and (n_in * width) % step == 0 and width % step == 0

    def _declare_weights(self, store, rng):
        if self.tiled:
            self.panel, self.panels = self.width, self.parts
        drawn = [self._drawn_weights(self.width, rng) for _ in range(self.parts)]  # Keras's order of draws
        self.part_kernels = [store.add(kernel, index) for kernel, index, _ in drawn]
        self.part_biases = [store.add(bias, np.arange(self.width)) for *_, bias in drawn] if self.use_bias else []
        self._store = store

    @property
    def parameters(self):
        if not self.use_bias:
            return list(self.part_kernels)
        return [p for pair in zip(self.part_kernels, self.part_biases) for p in pair]

    def _tuned_tiles(self, rows: int) -> dict:
        """The tuner's tiles, or where their TILE would straddle two parts, the first tiled
        candidate whose TILE does not (64 divides the width, see joinable)."""
        tiles = super()._tuned_tiles(rows)  # (fixed tiles are never replaced: joinable checked them)
        if not self.tiled or self.width % tiles["TILE"] == 0:
            return tiles
        return next(t for t in tile_candidates(self.rt, self.dtype) if "TILE" in t and self.width % t["TILE"] == 0)

    def allocate(self, capacity):
        self.kernel = self._store.joined(self.part_kernels)
        if self.use_bias:
            self.bias = self._store.joined(self.part_biases)
        super().allocate(capacity)
