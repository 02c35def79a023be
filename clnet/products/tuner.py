"""The autotuner of the matrix products: which tiles run fastest on this device, measured once per
device (the dense products) or per convolution (a convolution's three tiled products) on the
products' kernels alone (a plan with operands of its own, no layer) and kept in the tuning cache
(clnet.cl.tuning)."""
from __future__ import annotations

import math
import time

import numpy as np

from .. import activations
from ..cl.probe import SIZE
from ..cl.runtime import BuildError, Runtime
from ..cl.tensor import Tensor
from ..cl.tuning import best_seconds, kernel_times, tuned
from .convolution import (COLUMN_VECTORS, CONVOLUTION_CPU_SOURCES, CONVOLUTION_SOURCES, ConvPlan, fit_columns,
                          tiled_candidates)
from .forms import KERNEL_PREFIXES, PRODUCT_SOURCES, UNBLOCKED, half_candidates, layout, per_kernel, tile_candidates
from .plan import DensePlan, dense_program
from . import sixteen_bit, sixteen_bit_convolution, winograd, winograd_forward, winograd_weights
from .sixteen_bit_convolution import SixteenBitConvPlan


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


def matrix_tiles(rt, dtype, n_in: int, units: int, rows: int | None = None, half: str | None = None) -> dict:
    """The autotuner's choice for a layer of this size on this device, measured once per device.

    The tuner measures a few layer sizes and keeps the fastest candidate for each, all with one
    weight layout (vector width, and panels or tiles); a layer takes the choice made at the size
    nearest its own, in log scale (without `rows`, the batch, while its weights are laid out).
    `half` ("bfloat16", "float16"): the layer's policy lets its products run in 16 bits, so the
    16-bit tensor-core tiles are candidates too (half_candidates), tuned once more per device.
    """
    candidates = half_candidates(rt, dtype, half)
    # Keyed by everything the choice depends on: the kernels' text (common.cl included), the
    # candidates and the sizes measured.
    family = "dense" if candidates == tile_candidates(rt, dtype) else f"dense_{half}"
    choices = tuned(rt, dtype, family, ("cl/common.cl", "activations/vector.cl", *PRODUCT_SOURCES),
                    lambda: _tune(rt, dtype, usable_candidates(rt, dtype, candidates)),
                    [{"size": [1, 1, 1], "tiles": candidates[0]}],
                    {"candidates": candidates, "sizes": _sizes(rt), "columns": [] if rt.info.is_gpu else COLUMN_BLOCKS})
    wanted = (rows, n_in, units)
    distance = lambda choice: sum(abs(math.log(have / want)) for have, want in zip(choice["size"], wanted) if want)
    return min(choices, key=distance)["tiles"]


# What a convolution's tiled form compiles, whichever products it takes (the tuners' cache keys).
TILED_CONVOLUTION_SOURCES = ("cl/common.cl", *PRODUCT_SOURCES, *CONVOLUTION_SOURCES, *winograd.SOURCES,
                             *winograd_weights.SOURCES, *winograd_forward.SOURCES)


def convolution_tiles(rt, dtype, geometry: tuple, filters: int, batch: int) -> tuple[dict, dict, dict]:
    """The tiles of a convolution's tiled (GPU) form: forward, weight gradient and input gradient,
    measured once per device on a convolution of this `geometry` (ConvPlan's), `filters` and
    `batch` samples. Each product gathers differently, so each has its own best: on a GPU,
    benchmarks/conv.py's layer ran its forward and input gradient faster with 64/8/16 than with
    64/4/16, and its weight gradient far faster with 64/4/16 (the forward and input gradient feed
    8 x 8 blocks per work-item, the weight gradient's gather, whose window moves at every depth,
    does not). And each layer size has its own: at a quarter of that batch the input gradient ran
    faster on 64/4/16, whose work-groups are four times as many work-items (benchmarks/RESULTS.md,
    one large convolution: tiles per product and per layer). Where Winograd's forms apply (3 x 3
    kernels at stride 1, on GPUs), they are candidates too: F(4x4, 3x3) for the forward and the
    input gradient, F(3x3, 4x4) for the weight gradient."""
    candidates = tiled_candidates(rt, dtype)
    fast = winograd.candidates(rt, dtype, geometry)
    fast_weights = winograd_weights.candidates(rt, dtype, geometry, candidates)
    settings = {"candidates": candidates, "winograd": fast, "winograd_weights": fast_weights,
                "geometry": list(geometry), "filters": filters, "batch": batch}
    chosen = tuned(rt, dtype, "conv", TILED_CONVOLUTION_SOURCES,
                   lambda: tune_convolution(rt, dtype, candidates, geometry, filters, batch, fast, fast_weights),
                   [candidates[0]] * 3, settings)
    return tuple(chosen)


def convolution_in_sixteen_bits(rt, half: str, geometry: tuple, filters: int, batch: int, tiles: tuple) -> bool:
    """Whether a convolution of this `geometry` (ConvPlan's), `filters` and `batch` samples, whose
    policy lets its products run in `half`, runs its training step (forward, weight gradient,
    input gradient) faster on operands stored in 16 bits (SixteenBitConvPlan, where it takes the
    convolution) than in the tiled form's `tiles` (convolution_tiles' choice), measured once per
    device. Writing the patch matrix costs the 16-bit form what the float forms' gathers do not:
    a small convolution's step may be faster without it."""
    settings = {"half": half, "tiles": list(tiles), "geometry": list(geometry), "filters": filters, "batch": batch}
    sources = (*TILED_CONVOLUTION_SOURCES, *sixteen_bit.SOURCES, *sixteen_bit_convolution.SOURCES)
    return bool(tuned(rt, np.float32, f"conv_{half}", sources,
                      lambda: _faster_in_sixteen_bits(rt, half, geometry, filters, batch, tiles), False, settings))


def _faster_in_sixteen_bits(rt, half: str, geometry: tuple, filters: int, batch: int, tiles: tuple) -> bool:
    """convolution_in_sixteen_bits' measurement: the two plans' steps, each the best of best_seconds'."""
    rng = np.random.default_rng(0)
    x, grad = _convolution_operands(rt, np.float32, geometry, filters, batch, rng)
    step = lambda plan: lambda: _training_step(plan, x, grad, batch)
    tiled = best_seconds(rt, step(ConvPlan.standalone(rt, np.float32, tuple(tiles), geometry, filters, batch, rng)))
    try:
        sixteen = SixteenBitConvPlan.standalone(rt, half, geometry, filters, batch, rng)
    except BuildError:
        return False
    return best_seconds(rt, step(sixteen)) < tiled


def tune_convolution(rt, dtype, candidates: list[dict], geometry: tuple, filters: int, batch: int,
                     winograd_forms: list[dict] = (), weight_gradient_forms: list[dict] = ()) -> list[dict]:
    """[forward, weight gradient, input gradient] tiles for a convolution of `geometry` and
    `filters` over `batch` samples: each product's fastest candidate, the others' tiles fixed (the
    earlier products' choices, the later ones' first candidate that builds). The forward is timed
    alone, the weight gradient without the input gradient, the input gradient after the weight
    gradient that writes its delta (whose tiles are chosen by then); `winograd_forms` (winograd.py's
    tiles) compete for the forward and the input gradient, `weight_gradient_forms`
    (winograd_weights.py's) for the weight gradient. Candidates whose programs do not build on
    the device are passed over."""
    rng = np.random.default_rng(0)
    x, grad = _convolution_operands(rt, dtype, geometry, filters, batch, rng)

    def planned(tiles):
        try:
            return ConvPlan.standalone(rt, dtype, tiles, geometry, filters, batch, rng)
        except BuildError:
            return None

    usable = [tiles for tiles in candidates if planned((tiles,) * 3)]
    if not usable:
        raise BuildError(f"none of the convolution's tiled kernel variants builds on {rt.info.name!r}")
    chosen = [usable[0]] * 3
    fast = winograd_forms, weight_gradient_forms, winograd_forms  # each product's Winograd forms
    for product in range(3):
        best = math.inf
        for candidate in usable + list(fast[product]):
            plan = planned(tuple(candidate if p == product else chosen[p] for p in range(3)))
            if plan is None:
                continue
            plan.forward(x, batch)
            run = (lambda: plan.forward(x, batch),
                   lambda: plan.weight_gradient(x, grad, batch, True, False),
                   lambda: (plan.weight_gradient(x, grad, batch, True, True),
                            plan.input_gradient(grad, batch, True)))[product]
            seconds = best_seconds(rt, run)
            if seconds < best:
                chosen[product], best = candidate, seconds
    return chosen


def _convolution_operands(rt, dtype, geometry: tuple, filters: int, batch: int, rng) -> tuple[Tensor, Tensor]:
    """x and dL/dy of `batch` samples for a convolution of `geometry` and `filters`, uniform in
    [0, 1) from `rng`: what the convolution tuners time plans on."""
    height, width, channels, out_h, out_w = geometry[:5]
    x = Tensor.from_numpy(rng.random((batch, height, width, channels)), dtype, rt)
    return x, Tensor.from_numpy(rng.random((batch, out_h, out_w, filters)), dtype, rt)


def _training_step(plan, x: Tensor, grad: Tensor, batch: int) -> None:
    """A convolution plan's training step over x and dL/dy: the forward, the weight gradient
    (keeping dL/dz) and the input gradient."""
    plan.forward(x, batch)
    plan.weight_gradient(x, grad, batch, True, True)
    plan.input_gradient(grad, batch, True)


# The CPU form's vectors of columns per work-item that convolution_columns tries, and the least
# work per product (flops over the batch) for which it measures: smaller products run in well
# under a millisecond, where the choice is lost in the launch's own cost.
COLUMN_CANDIDATES = (1, 2, 4)
MIN_TUNED_FLOPS = 1e7
# The most samples convolution_columns measures at: a larger batch only adds work-items, far more
# than a CPU's cores already, and the choice is the register block's; so one measurement serves
# every batch from here up (a model's training batch and its larger evaluation batch alike).
COLUMN_BATCH = 128


def convolution_columns(rt, dtype, tiles: dict, geometry: tuple, filters: int, batch: int) -> dict:
    """The CPU form's `tiles` with each product's vectors of columns per work-item (FF_CN,
    DW_CN, HG_CN: COLUMN_CANDIDATES, fitted to the filters and channels), measured once per
    device on a convolution of this `geometry` (ConvPlan's), `filters` and `batch` samples, its
    products told apart by their kernels' profiling events, in rounds (see _tune). Which is best
    depends on the CPU and the runtime's compiler: where a vector is one of 32 registers (AVX-512
    code), a row of one register leaves the loops as many loads as products and wider rows win;
    where it is two of 16 (pip's PoCL 3.0 on AVX2), wider rows spill (benchmarks/RESULTS.md, the
    convolution's CPU form with several vectors of columns a work-item). Measured at the power of
    two at or below `batch`, at most COLUMN_BATCH samples. Without a choice to make, or for a
    convolution too small to tell (MIN_TUNED_FLOPS), `tiles` as they are."""
    channels, out_h, out_w, kh, kw = geometry[2:7]
    batch = min(COLUMN_BATCH, 1 << (max(batch, 1).bit_length() - 1))
    flops = 2.0 * batch * out_h * out_w * kh * kw * channels * filters
    candidates = []
    for vectors in COLUMN_CANDIDATES:
        fitted = fit_columns({**tiles, **{key: vectors for key, _ in COLUMN_VECTORS}}, filters, channels)
        if fitted not in candidates:
            candidates.append(fitted)
    if len(candidates) == 1 or flops < MIN_TUNED_FLOPS:
        return candidates[0]
    settings = {"candidates": candidates, "geometry": list(geometry), "filters": filters, "batch": batch}
    return tuned(rt, dtype, "conv_columns", ("cl/common.cl", "activations/vector.cl", *CONVOLUTION_CPU_SOURCES),
                 lambda: _tune_columns(rt, dtype, candidates, geometry, filters, batch), candidates[0], settings)


def _tune_columns(rt, dtype, candidates: list[dict], geometry: tuple, filters: int, batch: int) -> dict:
    """convolution_columns' measurement: each product's kernel timed under every candidate, the
    least of ROUNDS rounds kept, and each product's vectors taken from its fastest candidate."""
    rng = np.random.default_rng(0)
    x, grad = _convolution_operands(rt, dtype, geometry, filters, batch, rng)
    plans = [ConvPlan.standalone(rt, dtype, tiles, geometry, filters, batch, rng) for tiles in candidates]
    least = [{} for _ in candidates]  # per candidate: {kernel name: seconds}
    for _ in range(ROUNDS):
        for plan, times in zip(plans, least):
            step = lambda: _training_step(plan, x, grad, batch)
            for kernel, seconds in kernel_times(rt, step, repeats=1).items():
                times[kernel] = min(times.get(kernel, math.inf), seconds)
    chosen = dict(candidates[0])
    for (key, _), kernel in zip(COLUMN_VECTORS, ("FeedForwardConv", "CalcDeltaWeightsConv", "CalcHiddenGradientConv")):
        fastest = min(zip(candidates, least), key=lambda pair: pair[1][kernel])[0]
        chosen.pop(key, None)
        if key in fastest:
            chosen[key] = fastest[key]
    return chosen


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
    form without, measurably slower there. A CPU measures a transformer's tall, narrow layer too,
    both ways round, as the tiny GPT's (2048 rows of 64 and 256): its W^T is small, and the
    input gradient without it (delta in row panels, written an element at a time) took the GPT's
    layers far longer than the form with W^T, which the larger sizes' choice had denied them."""
    if rt.info.is_gpu:
        return [(128, 784, 256), (1024, 784, 256), (1024, 1024, 1024), (2048, 2048, 2048), (8192, 256, 1024),
                (8192, 1024, 256)]
    return [(256, 512, 512), (1024, 1024, 1024), (1024, 2048, 2048), (2048, 64, 256), (2048, 256, 64)]


# How many times each candidate is measured at a size, in rounds over all of them (see _tune).
ROUNDS = 3


def _tune(rt, dtype, candidates) -> list[dict]:
    """The tuned choice at each size of _sizes. Each candidate's kernels are timed once a round
    (after a warm-up run), in ROUNDS rounds over all the candidates, and the least of its rounds
    kept: on a shared machine a kernel's time moves by up to twice from one second to the next,
    and five runs of one candidate back to back fell within one slow spell, so that two tunings
    of the same code chose differently (benchmarks/RESULTS.md, the dense tuner in rounds). A round
    spreads a candidate's runs over the whole sweep, as many runs as before. On a CPU the kernels
    are told apart by their profiling events: the input gradient is its own kernel and what it
    adds to the bias gradient's (delta for it, and W^T), not the difference of two whole
    backward passes, which took the weight gradient's spread into it. On a CPU the choice at each
    size is then measured again beside its vectors of columns per work-item (_column_variants)."""
    sizes = _sizes(rt)
    measured = [{} for _ in candidates]  # per candidate: {(size, kernel): seconds}
    for size in sizes:
        for result, times in zip(measured, _measure(rt, dtype, candidates, size)):
            result.update(times)
    # The fastest setting per (layout, size); then the layout that does best over all sizes,
    # each size counted relative to its fastest setting of any layout.
    layouts = {layout(tiles) for tiles in candidates}
    fastest = {(form, size): _fastest_setting([(tiles, times) for tiles, times in zip(candidates, measured)
                                                if layout(tiles) == form], size)
               for form in layouts for size in sizes}
    best = {size: min(fastest[form, size][1] for form in layouts) for size in sizes}
    form = min(layouts, key=lambda form: sum(fastest[form, size][1] / best[size] for size in sizes))
    chosen = []
    for size in sizes:
        tiles = fastest[form, size][0]
        if not rt.info.is_gpu:
            variants = usable_candidates(rt, dtype, [tiles, *_column_variants(tiles)])
            tiles = _fastest_setting(list(zip(variants, _measure(rt, dtype, variants, size))), size)[0]
        chosen.append({"size": list(size), "tiles": tiles})
    return chosen


# The CPU form's vectors of columns per work-item (FF_CN, DW_CN, HG_CN; see cpu_blocks.cl) and the
# rows of their register blocks that _tune measures beside its first choice at each size. Where a
# vector is one of 32 registers (AVX-512 code) two vectors of columns by 6 or 8 rows ran the tiny
# GPT's products faster than any block of one vector (by 4 rows, never the fastest there); where
# it is two of 16 (pip's PoCL 3.0 on AVX2) they spill (benchmarks/RESULTS.md, the dense CPU form
# with two vectors of columns a work-item). Measured after the rest is chosen, for a few more
# kernels' runs instead of twice the candidates; unblocked (UNBLOCKED), so that every size's
# variants are the same few programs: each program a first run builds cost it seconds on PoCL
# (with the blocks of each size's choice, a cold tuning took over two minutes longer).
COLUMN_BLOCKS = ((2, 6), (2, 8))  # (vectors, rows)


def _column_variants(tiles: dict) -> list[dict]:
    """`tiles` with each of COLUMN_BLOCKS as every kernel's vectors and rows, unblocked (the tuner
    then takes each kernel's own fastest, see _fastest_setting)."""
    return [{**tiles, **per_kernel(UNBLOCKED), **{f"{kernel}_CN": vectors for kernel in KERNEL_PREFIXES},
             **{f"{kernel}_RM": rows for kernel in KERNEL_PREFIXES}} for vectors, rows in COLUMN_BLOCKS]


def _measure(rt, dtype, candidates: list[dict], size: tuple[int, int, int]) -> list[dict]:
    """Per candidate, {(size, "FF" | "DW" | "HG"): seconds} of its three products at `size`, the
    least of ROUNDS rounds over all the candidates (see _tune)."""
    rows, n_in, units = size
    # (run -> {kernel name: seconds}; on a GPU, wall clock: {"all": seconds}; see tuning.kernel_times)
    times_of = ((lambda run: {"all": best_seconds(rt, run, repeats=1)}) if rt.info.is_gpu
                else (lambda run: kernel_times(rt, run, repeats=1)))
    rng = np.random.default_rng(0)
    x = Tensor.from_numpy(rng.random((rows, n_in)), dtype, rt)
    grad = Tensor.from_numpy(rng.random((rows, units)), dtype, rt)
    least = [{} for _ in candidates]  # per candidate: {(run, kernel name): seconds}, over the rounds
    for _ in range(ROUNDS):
        for tiles, times in zip(candidates, least):
            plan = DensePlan.standalone(rt, dtype, tiles, rows, n_in, units, rng)
            runs = {"FF": lambda: plan.forward(x, rows),
                    "DW": lambda: plan.weight_gradient(x, grad, rows, True, False),
                    "DW+HG": lambda: (plan.weight_gradient(x, grad, rows, True, True),
                                      plan.input_gradient(grad, rows, True))}
            for run_name, run in runs.items():
                for kernel, seconds in times_of(run).items():
                    times[run_name, kernel] = min(times.get((run_name, kernel), math.inf), seconds)
    measured = []
    for times in least:
        total = lambda run_name: sum(v for (r, _), v in times.items() if r == run_name)
        if rt.info.is_gpu:
            input_grad = total("DW+HG") - total("DW")
        else:
            input_grad = (times["DW+HG", "CalcHiddenGradient"]
                          + max(0.0, times["DW+HG", "CalcDeltaBias"] - times["DW", "CalcDeltaBias"]))
        measured.append({(size, "FF"): total("FF"), (size, "DW"): total("DW"), (size, "HG"): input_grad})
    return measured


def _fastest_setting(measured: list[tuple[dict, dict]], size) -> tuple[dict, float]:
    """The fastest tiles at this size and their seconds for the three products. Blocked
    candidates differing only in a kernel's blocks (its RM, NB, KB and CN) share a weight layout and
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
                for key in keys:  # (a key the fastest leaves out takes its default)
                    if key in tiles:
                        choice["tiles"][key] = tiles[key]
                    else:
                        choice["tiles"].pop(key, None)
    choice = min(families.values(), key=lambda c: sum(c["seconds"].values()))
    return choice["tiles"], sum(choice["seconds"].values())


BLOCK_KEYS = {kernel: (f"{kernel}_RM", f"{kernel}_NB", f"{kernel}_KB", f"{kernel}_CN") for kernel in KERNEL_PREFIXES}
BLOCK_KEYS["HG"] += ("HG_T",)  # the input gradient's form, too (see HG_T in cpu_blocks.cl)



def probe_step_seconds(info) -> float:
    """Seconds for one training step's products (forward, weight and input gradient, 4 launches) of
    the device probe's layer (clnet.cl.probe.SIZE, ReLU) with the untuned default tiles on the
    device `info` describes: best of 5 runs of 10 steps, after one that compiles."""
    rt = Runtime(info)
    rows, n_in, units = SIZE
    rng = np.random.default_rng(0)
    plan = DensePlan.standalone(rt, np.float32, tile_candidates(rt, np.float32)[0], rows, n_in, units, rng)
    x = Tensor.from_numpy(rng.random((rows, n_in)), np.float32, rt)
    grad = Tensor.from_numpy(rng.random((rows, units)), np.float32, rt)
    best = float("inf")
    for repeat in range(6):
        started = time.perf_counter()
        for _ in range(10):
            plan.forward(x, rows)
            plan.weight_gradient(x, grad, rows, True, True)
            plan.input_gradient(grad, rows, True)
        rt.finish()
        if repeat:  # the first run compiles
            best = min(best, (time.perf_counter() - started) / 10)
    return best
