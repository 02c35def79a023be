"""What a matrix product is on each device: its forms, the tiles each form takes, and the defines
and sources a program of that form is built from.

Three forms compute the same three products of a dense layer (z = x W + b, dL/dW with dL/db, and
dL/dx): register blocks on a CPU, local-memory tiles on a GPU, and on NVIDIA GPUs the tiles' two
tensor-core forms (MMA, WGMMA). A form is chosen by its tiles, a dict of defines: VW, the blocks
(FF_RM, ...) or TILE/WPT/TK, MMA or WGMMA (either with HALF: its 16-bit products, mma_half.cl or
wgmma_half.cl). The tuner
(tuner.py) picks them; the plan (plan.py) launches them."""
from __future__ import annotations

import numpy as np

from .. import activations
from ..cl.device import tensor_cores_used
from ..cl.runtime import SM90A

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
    W^T, see cpu_blocks.cl) is tried with WG 4 alone: the work-group side made no difference to it in
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


# The tensor-core forms' 16-bit products (mma_half.cl, wgmma_half.cl), by the compute dtype of a
# mixed-precision policy: HALF's value.
HALF_TYPES = {"bfloat16": 1, "float16": 2}


def half_candidates(rt, dtype, half: str | None) -> list[dict]:
    """The tuner's candidates where a layer's policy lets its products run in `half` ("bfloat16"
    or "float16"; None: none): every float32 candidate, and where the tensor-core forms can run,
    their tiles with 16-bit operands (HALF), which the tuner takes where they are faster; on Hopper
    the WGMMA form 32 deep a slice too (16-bit slices take half the local memory)."""
    candidates = tile_candidates(rt, dtype)
    if half is None or not tensor_core_form(rt, dtype):
        return candidates
    sixteen_bit = [{**tiles, "HALF": HALF_TYPES[half]} for tiles in candidates if on_tensor_cores(tiles)]
    if rt.info.warpgroup_products:
        sixteen_bit.append({"VW": 4, "TILE": 128, "WPT": 8, "TK": 32, "WGMMA": 1, "HALF": HALF_TYPES[half]})
    return candidates + sixteen_bit


def tensor_core_form(rt, dtype) -> bool:
    """Whether the tiled products' tensor-core forms (mma.cl: 3xTF32 with mma.sync; wgmma.cl: with
    Hopper's wgmma) are candidates here: float32 on an NVIDIA GPU of compute capability 8.0 or later (9.0 for
    WGMMA), unless CLNET_TENSOR_CORES=0 (their products keep 22 of each operand's 24 significant
    bits; see tensor_cores.cl)."""
    return tensor_cores_can_run(rt, dtype) and tensor_cores_used(rt.info)


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
    if tiles.get("HALF") and (not on_tensor_cores(tiles) or tiles["HALF"] not in HALF_TYPES.values()):
        raise ValueError(f"{owner}: tiles {tiles!r}: HALF (16-bit products: 1 bfloat16, 2 float16) is a setting of "
                         "the tensor-core forms (MMA, WGMMA)")
    if tiles.get("WGMMA") and not (tensor_cores_can_run(rt, dtype) and rt.info.warpgroup_products):
        raise ValueError(f"{owner}: tiles {tiles!r} ask for the warpgroup tensor-core form (WGMMA), which needs "
                         f"float32 on an NVIDIA GPU of compute capability 9.0 (H100, H200); the device is "
                         f"{rt.info.name!r} and floatx is {np.dtype(dtype).name}")


# How a CPU work-item walks the depth K (see cpu_blocks.cl): one register block over the whole depth,
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



def fused_activation(activation):
    """What a product's kernels apply as they store: an elementwise activation itself, else (softmax,
    which runs as kernels of its own after the product) the identity."""
    return activation if activation.elementwise else activations.Linear()


def stores_pre(activation) -> bool:
    """Whether a layer with this activation stores z (or, see stores_slopes, f'(z)): softmax reads
    it, and so does a derivative that does not follow from y alone."""
    return not (activation.elementwise and activation.derivative_from_output)


def stores_slopes(activation, tiles: dict) -> bool:
    """Whether the forward stores f'(z) in z's place: the GPU form (TILE), where the derivative
    needs z; the weight gradient then multiplies by it (see STORE_SLOPES in tiles.cl)."""
    return "TILE" in tiles and activation.elementwise and stores_pre(activation)



def layout(tiles: dict) -> tuple:
    """What fixes the weights' layout on the device: the vector width and the form (see cpu_blocks.cl)."""
    return tiles["VW"], "TILE" in tiles


# Every form's kernel sources: what a tuned choice among all the forms depends on.
PRODUCT_SOURCES = ("products/register_blocks.cl", "products/cpu_blocks.cl", "products/tiles.cl",
                   "products/tensor_cores.cl", "products/mma.cl", "products/mma_half.cl", "products/wgmma.cl",
                   "products/wgmma_half.cl", "products/gpu_tiles.cl")


def product_sources(tiles: dict) -> tuple[str, ...]:
    """The kernel sources of these tiles' form, in the order a program pastes them (after the fused
    activation's and activations/vector.cl); convolution.cl and multi_head_attention.cl follow them.
    A tiled form pastes tiles.cl, its tensor-core files if it is one, then gpu_tiles.cl (see tiles.cl)."""
    if "TILE" not in tiles:
        return ("products/register_blocks.cl", "products/cpu_blocks.cl")
    form = "wgmma" if tiles.get("WGMMA") else "mma" if tiles.get("MMA") else None
    if form is None:
        tensor_cores = ()
    else:  # the form's file, and its 16-bit products' after it
        tensor_cores = ("products/tensor_cores.cl", f"products/{form}.cl",
                        *((f"products/{form}_half.cl",) if tiles.get("HALF") else ()))
    return ("products/tiles.cl", *tensor_cores, "products/gpu_tiles.cl")
