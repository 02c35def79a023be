"""One large convolution's three products against PyTorch (cuDNN on a GPU), in GFLOP/s.

    python -m benchmarks.conv [--batch 64] [--size 56] [--channels 64] [--filters 64] [--torch-device cuda]
                              [--tiles TILE,WPT,TK ... | --tiles gpu | --accuracy]
                              [--policy mixed_bfloat16 | mixed_float16]

A Conv2D(filters, 3, padding="same") on (batch, size, size, channels) inputs: the forward pass,
the weight gradient (with the bias's) and the input gradient, each 2 * batch * size^2 * filters *
9 * channels flops. clnet's times are wall-clock around each part with the queue drained (so they
include whatever layout work the layer does), torch's around F.conv2d and aten's
convolution_backward for one gradient at a time, fp32 with TF32 off. Prints a table and one JSON
line. With a 16-bit --policy, clnet's layer is made under it (its products on the tensor cores in
16 bits where the tuner measures that faster) and PyTorch's operands are that type, channels last.

By default the layer takes its tiles as it would in a model (the autotuner's choice for the
device). --tiles measures the GPU form's kernels with each of the given local-memory tiles
instead (VW 4; TILE a multiple of WPT, WPT of 4), or with every tiled candidate the Dense tuner
tries (`--tiles gpu`), one table row per candidate and product: the tiles to compare on a GPU.

--accuracy measures error instead of time: each product's largest difference from PyTorch's
float64 convolution (CPU), over the reference's largest magnitude, for the layer's own tiles, the
direct tiled form and every product by Winograd (forced by tiles; on any device), in float32, with
PyTorch's own float32 on --torch-device beside them.
"""
from __future__ import annotations

import argparse

import numpy as np

from .common import cpu_name, device_name, emit, seconds, versions


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


def label(tiles: dict | tuple | str | None) -> str:
    """TILE,WPT,TK (the input gradient's Winograd form's BM,TK,STAGES), or the forward's; the weight
    gradient's; the input gradient's; a form without tiles by its name."""
    if isinstance(tiles, tuple):
        return "; ".join(map(label, tiles))
    if isinstance(tiles, str):
        return tiles
    if tiles is not None and tiles.get("WINOGRAD"):
        if "TILE" in tiles:  # the weight gradient's, on tiled products
            return f"Winograd F(3x3,4x4) {tiles['TILE']},{tiles['WPT']},{tiles['TK']}"
        return f"Winograd F(4x4,3x3) {tiles['BM']},{tiles['TK']},{tiles['STAGES']}"
    return "tuned" if tiles is None else f"{tiles['TILE']},{tiles['WPT']},{tiles['TK']}"


def clnet_seconds(batch, size, channels, filters, tiles=None, policy="float32"):
    import clnet
    from clnet.cl.parameters import ParameterStore
    from clnet.layers import Conv2D
    from clnet.products import SixteenBitConvPlan

    clnet.mixed_precision.set_global_policy(policy)
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
    sixteen = isinstance(layer.plan, SixteenBitConvPlan)
    chosen = "16-bit operands" if sixteen else layer.plan.product_tiles if layer.tiled else None
    return {"forward": forward, "weight_grad": weight_grad, "input_grad": both - weight_grad}, \
        f"{rt.info.name} [{rt.info.platform_version.strip()}]", chosen


def torch_seconds(batch, size, channels, filters, device, policy="float32"):
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    half = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}.get(policy)
    made = lambda *shape: (torch.rand(*shape, device=device) if half is None else
                           torch.rand(*shape, device=device, dtype=half).to(memory_format=torch.channels_last))
    x, w, grad = made(batch, channels, size, size), made(filters, channels, 3, 3), made(batch, filters, size, size)
    b = torch.rand(filters, device=device, dtype=half or torch.float32)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    backward = lambda mask: torch.ops.aten.convolution_backward(grad, x, w, [filters], [1, 1], [1, 1], [1, 1],
                                                                 False, [0, 0], 1, mask)
    name = torch.cuda.get_device_name() + ", cuDNN" if device == "cuda" else "CPU"
    return {"forward": seconds(lambda: F.conv2d(x, w, b, padding=1), sync),
            "weight_grad": seconds(lambda: backward([False, True, True]), sync),
            "input_grad": seconds(lambda: backward([True, False, False]), sync)}, name


# The accuracy table's forms: the direct tiled form, and every product by Winograd (the weight
# gradient's products on the same tiles).
DIRECT = {"VW": 4, "TILE": 32, "WPT": 8, "TK": 8}
ACCURACY_FORMS = {"direct tiles": (DIRECT,) * 3,
                  "Winograd": ({"WINOGRAD": 1, "BM": 64, "TK": 16, "STAGES": 2}, {**DIRECT, "WINOGRAD": 1},
                               {"WINOGRAD": 1, "BM": 64, "TK": 16, "STAGES": 2})}


def clnet_values(x, kernel, bias, grad, tiles=None):
    """y, dL/dW and dL/dx of clnet's Conv2D(filters, 3, padding="same") over channels-last float32
    arrays (kernel in Keras's layout), in the form these tiles fix (None: the layer's own)."""
    import clnet
    from clnet.cl.parameters import ParameterStore
    from clnet.layers import Conv2D

    rt, batch = clnet.runtime(), len(x)
    store = ParameterStore(rt, np.float32)
    layer = Conv2D(kernel.shape[-1], 3, padding="same", tiles=tiles)
    layer.build(x.shape[1:], store, np.random.default_rng(0))
    store.allocate()
    layer.set_weights([kernel, bias])
    layer.allocate(batch)
    y = layer.forward(clnet.Tensor.from_numpy(x.reshape(batch, -1)), batch).numpy()[:batch]
    dx = layer.backward(clnet.Tensor.from_numpy(grad.reshape(batch, -1)), batch, True).numpy()[:batch]
    return {"forward": y.reshape(grad.shape), "weight_grad": layer.gradients()[0], "input_grad": dx.reshape(x.shape)}


def torch_values(x, kernel, bias, grad, device):
    """y, dL/dW and dL/dx of PyTorch's float32 convolution on `device` (cuDNN on a GPU), channels last."""
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.allow_tf32 = False
    nchw = lambda a: torch.tensor(a, device=device).permute(0, 3, 1, 2).contiguous()
    x32 = nchw(x).requires_grad_()
    w32 = torch.tensor(kernel, device=device).permute(3, 2, 0, 1).contiguous().requires_grad_()
    y32 = F.conv2d(x32, w32, torch.tensor(bias, device=device), padding=1)
    dx32, dw32 = torch.autograd.grad(y32, (x32, w32), nchw(grad))
    return {"forward": y32.detach().permute(0, 2, 3, 1).cpu().numpy(),
            "weight_grad": dw32.permute(2, 3, 1, 0).cpu().numpy(), "input_grad": dx32.permute(0, 2, 3, 1).cpu().numpy()}


def accuracy(batch, size, channels, filters, device):
    """Each form's largest error per product over the float64 reference's largest magnitude, and
    PyTorch's float32 on `device` beside them."""
    import torch
    import torch.nn.functional as F
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, size, size, channels)).astype(np.float32)
    kernel = (rng.normal(size=(3, 3, channels, filters)) / np.sqrt(9 * channels)).astype(np.float32)
    bias = (rng.normal(size=filters) / 10).astype(np.float32)
    grad = rng.normal(size=(batch, size, size, filters)).astype(np.float32)
    nchw = lambda a: torch.tensor(a, dtype=torch.float64).permute(0, 3, 1, 2)
    x64 = nchw(x).requires_grad_()
    w64 = torch.tensor(kernel, dtype=torch.float64).permute(3, 2, 0, 1).requires_grad_()
    y64 = F.conv2d(x64, w64, torch.tensor(bias, dtype=torch.float64), padding=1)
    dx64, dw64 = torch.autograd.grad(y64, (x64, w64), nchw(grad))
    reference = {"forward": y64.detach().permute(0, 2, 3, 1).numpy(), "weight_grad": dw64.permute(2, 3, 1, 0).numpy(),
                 "input_grad": dx64.permute(0, 2, 3, 1).numpy()}
    measured = {name: clnet_values(x, kernel, bias, grad, tiles)
                for name, tiles in {"tuned": None, **ACCURACY_FORMS}.items()}
    measured[f"PyTorch float32 ({device})"] = torch_values(x, kernel, bias, grad, device)
    return {name: {part: float(np.abs(values[part] - want).max() / np.abs(want).max())
                   for part, want in reference.items()} for name, values in measured.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--filters", type=int, default=64)
    parser.add_argument("--torch-device", default="cpu")
    parser.add_argument("--tiles", nargs="+", metavar="TILE,WPT,TK",
                        help='local-memory tiles of the GPU form to measure, or "gpu" for every tiled candidate')
    parser.add_argument("--accuracy", action="store_true",
                        help="each form's error against PyTorch's float64 convolution instead of times")
    parser.add_argument("--policy", default="float32", choices=["float32", "mixed_bfloat16", "mixed_float16"],
                        help="clnet's mixed-precision policy, and PyTorch's operands in its 16 bits")
    args = parser.parse_args(argv)
    shape = (args.batch, args.size, args.channels, args.filters)
    if args.accuracy:
        errors = accuracy(*shape, args.torch_device)
        print(f"Conv2D {args.filters} 3x3 'same' on ({args.batch}, {args.size}, {args.size}, {args.channels}), "
              "float32: largest error over the float64 reference's largest magnitude\n")
        print("| form | forward | weight grad | input grad |\n| --- | ---: | ---: | ---: |")
        for name, parts in errors.items():
            cells = " | ".join(f"{parts[part]:.1e}" for part in ("forward", "weight_grad", "input_grad"))
            print(f"| {name} | {cells} |")
        import clnet
        device = device_name(clnet.runtime().info)
        emit({"benchmark": "conv_accuracy", "shape": shape, "errors": errors, "device": device, "cpu": cpu_name(),
              "versions": versions("torch", "pyopencl")})
        return
    flops = 2.0 * args.batch * args.size ** 2 * args.filters * 9 * args.channels
    import clnet
    measured = []  # (tiles asked for, seconds per product, the tiles the layer ran)
    for tiles in tile_choices(clnet.runtime(), args.tiles):
        ours, our_device, chosen = clnet_seconds(*shape, tiles, args.policy)
        measured.append((tiles, ours, chosen))
    theirs, their_device = torch_seconds(*shape, args.torch_device, args.policy)
    print(f"Conv2D {args.filters} 3x3 'same' on ({args.batch}, {args.size}, {args.size}, {args.channels}), "
          f"{args.policy}, GFLOP/s\n")
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
    emit({"benchmark": "conv", "shape": shape, "policy": args.policy, "results": results, "device": our_device,
          "torch_device": their_device, "versions": versions("torch", "pyopencl")})


if __name__ == "__main__":
    main()
