"""One large convolution's three products against PyTorch (cuDNN on a GPU), in GFLOP/s.

    python -m benchmarks.conv [--batch 64] [--size 56] [--channels 64] [--filters 64] [--torch-device cuda]
                              [--tiles TILE,WPT,TK ... | --tiles gpu]

A Conv2D(filters, 3, padding="same") on (batch, size, size, channels) inputs: the forward pass,
the weight gradient (with the bias's) and the input gradient, each 2 * batch * size^2 * filters *
9 * channels flops. clnet's times are wall-clock around each part with the queue drained (so they
include whatever layout work the layer does), torch's around F.conv2d and aten's
convolution_backward for one gradient at a time, fp32 with TF32 off. Prints a table and one JSON
line.

By default the layer takes its tiles as it would in a model (the autotuner's choice for the
device). --tiles measures the GPU form's kernels with each of the given local-memory tiles
instead (VW 4; TILE a multiple of WPT, WPT of 4), or with every tiled candidate the Dense tuner
tries (`--tiles gpu`), one table row per candidate and product: the tiles to compare on a GPU.
"""
from __future__ import annotations

import argparse

import numpy as np

from .common import emit, seconds, versions


def tile_choices(rt, given: list[str] | None) -> list[dict | None]:
    """The tiles to measure: None (the layer's own choice), the --tiles given, or with "gpu"
    every tiled candidate the Dense tuner tries on this device (a GPU)."""
    from clnet.products import tile_candidates
    if not given:
        return [None]
    if given == ["gpu"]:
        tiled = [tiles for tiles in tile_candidates(rt, np.float32) if "TILE" in tiles]
        if not tiled:
            raise SystemExit(f"--tiles gpu: the tuner tries no tiled candidates on {rt.info.name!r} (not a GPU)")
        return tiled
    choices = []
    for text in given:
        tile, wpt, tk = (int(v) for v in text.split(","))
        choices.append({"VW": 4, "TILE": tile, "WPT": wpt, "TK": tk})
    return choices


def label(tiles: dict | tuple | None) -> str:
    """TILE,WPT,TK (the input gradient's Winograd form's BM,TK,STAGES), or the forward's; the weight
    gradient's; the input gradient's."""
    if isinstance(tiles, tuple):
        return "; ".join(map(label, tiles))
    if tiles is not None and tiles.get("WINOGRAD"):
        if "TILE" in tiles:  # the weight gradient's, on tiled products
            return f"Winograd F(3x3,4x4) {tiles['TILE']},{tiles['WPT']},{tiles['TK']}"
        return f"Winograd F(4x4,3x3) {tiles['BM']},{tiles['TK']},{tiles['STAGES']}"
    return "tuned" if tiles is None else f"{tiles['TILE']},{tiles['WPT']},{tiles['TK']}"


def clnet_seconds(batch, size, channels, filters, tiles=None):
    import clnet
    from clnet.cl.parameters import ParameterStore
    from clnet.layers import Conv2D

    rt = clnet.runtime()
    rng = np.random.default_rng(0)
    store = ParameterStore(rt, np.float32)
    layer = Conv2D(filters, 3, padding="same", tiles=tiles)
    layer.build((size, size, channels), store, rng)
    store.allocate()
    layer.allocate(batch)
    x = clnet.Tensor.from_numpy(rng.random((batch, size, size, channels), np.float32))
    grad = clnet.Tensor.from_numpy(rng.random((batch, size, size, filters), np.float32))
    sync = rt.queue.finish
    forward = seconds(lambda: layer.forward(x, batch), sync)
    weight_grad = seconds(lambda: layer.backward(grad, batch, False), sync)
    both = seconds(lambda: layer.backward(grad, batch, True), sync)
    chosen = layer.plan.product_tiles if layer.tiled else None
    return {"forward": forward, "weight_grad": weight_grad, "input_grad": both - weight_grad}, \
        f"{rt.info.name} [{rt.info.platform_version.strip()}]", chosen


def torch_seconds(batch, size, channels, filters, device):
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    x = torch.rand(batch, channels, size, size, device=device)
    w = torch.rand(filters, channels, 3, 3, device=device)
    b = torch.rand(filters, device=device)
    grad = torch.rand(batch, filters, size, size, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    backward = lambda mask: torch.ops.aten.convolution_backward(grad, x, w, [filters], [1, 1], [1, 1], [1, 1],
                                                                 False, [0, 0], 1, mask)
    name = torch.cuda.get_device_name() + ", cuDNN" if device == "cuda" else "CPU"
    return {"forward": seconds(lambda: F.conv2d(x, w, b, padding=1), sync),
            "weight_grad": seconds(lambda: backward([False, True, True]), sync),
            "input_grad": seconds(lambda: backward([True, False, False]), sync)}, name


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--filters", type=int, default=64)
    parser.add_argument("--torch-device", default="cpu")
    parser.add_argument("--tiles", nargs="+", metavar="TILE,WPT,TK",
                        help='local-memory tiles of the GPU form to measure, or "gpu" for every tiled candidate')
    args = parser.parse_args(argv)
    shape = (args.batch, args.size, args.channels, args.filters)
    flops = 2.0 * args.batch * args.size ** 2 * args.filters * 9 * args.channels
    import clnet
    measured = []  # (tiles asked for, seconds per product, the tiles the layer ran)
    for tiles in tile_choices(clnet.runtime(), args.tiles):
        ours, our_device, chosen = clnet_seconds(*shape, tiles)
        measured.append((tiles, ours, chosen))
    theirs, their_device = torch_seconds(*shape, args.torch_device)
    print(f"Conv2D {args.filters} 3x3 'same' on ({args.batch}, {args.size}, {args.size}, {args.channels}), GFLOP/s\n")
    print("| tiles (TILE,WPT,TK) | product | clnet | torch | clnet / torch |\n| --- | --- | ---: | ---: | ---: |")
    results = []
    for tiles, ours, chosen in measured:
        result = {"tiles": chosen}
        name = label(tiles) + (f" ({label(chosen)})" if tiles is None and chosen else "")
        for part in ("forward", "weight_grad", "input_grad"):
            mine, other = flops / ours[part] / 1e9, flops / theirs[part] / 1e9
            result[part] = {"clnet_gflops": round(mine, 1), "torch_gflops": round(other, 1),
                            "ratio": round(mine / other, 3)}
            print(f"| {name} | {part} | {mine:.0f} | {other:.0f} | {mine / other:.2f} |")
        results.append(result)
    emit({"benchmark": "conv", "shape": shape, "results": results, "device": our_device,
          "torch_device": their_device, "versions": versions("torch", "pyopencl")})


if __name__ == "__main__":
    main()
