"""One large convolution's three products against PyTorch (cuDNN on a GPU), in GFLOP/s.

    python -m benchmarks.conv [--batch 64] [--size 56] [--channels 64] [--filters 64] [--torch-device cuda]

A Conv2D(filters, 3, padding="same") on (batch, size, size, channels) inputs: the forward pass,
the weight gradient (with the bias's) and the input gradient, each 2 * batch * size^2 * filters *
9 * channels flops. clnet's times are wall-clock around each part with the queue drained (so they
include whatever layout work the layer does), torch's around F.conv2d and aten's
convolution_backward for one gradient at a time, fp32 with TF32 off. Prints a table and one JSON
line.
"""
from __future__ import annotations

import argparse

import numpy as np

from .common import emit, seconds, versions


def clnet_seconds(batch, size, channels, filters):
    import clnet
    from clnet.cl.parameters import ParameterStore
    from clnet.layers import Conv2D

    rt = clnet.runtime()
    rng = np.random.default_rng(0)
    store = ParameterStore(rt, np.float32)
    layer = Conv2D(filters, 3, padding="same")
    layer.build((size, size, channels), store, rng)
    store.allocate()
    layer.allocate(batch)
    x = clnet.Tensor.from_numpy(rng.random((batch, size, size, channels), np.float32))
    grad = clnet.Tensor.from_numpy(rng.random((batch, size, size, filters), np.float32))
    sync = rt.queue.finish
    forward = seconds(lambda: layer.forward(x, batch), sync)
    weight_grad = seconds(lambda: layer.backward(grad, batch, False), sync)
    both = seconds(lambda: layer.backward(grad, batch, True), sync)
    return {"forward": forward, "weight_grad": weight_grad, "input_grad": both - weight_grad}, \
        f"{rt.info.name} [{rt.info.platform_version.strip()}]"


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
    args = parser.parse_args(argv)
    shape = (args.batch, args.size, args.channels, args.filters)
    flops = 2.0 * args.batch * args.size ** 2 * args.filters * 9 * args.channels
    ours, our_device = clnet_seconds(*shape)
    theirs, their_device = torch_seconds(*shape, args.torch_device)
    print(f"Conv2D {args.filters} 3x3 'same' on ({args.batch}, {args.size}, {args.size}, {args.channels}), GFLOP/s\n")
    print("| product | clnet | torch | clnet / torch |\n| --- | ---: | ---: | ---: |")
    result = {}
    for part in ("forward", "weight_grad", "input_grad"):
        mine, other = flops / ours[part] / 1e9, flops / theirs[part] / 1e9
        result[part] = {"clnet_gflops": round(mine, 1), "torch_gflops": round(other, 1), "ratio": round(mine / other, 3)}
        print(f"| {part} | {mine:.0f} | {other:.0f} | {mine / other:.2f} |")
    emit({"benchmark": "conv", "shape": shape, "results": result, "device": our_device, "torch_device": their_device,
          "versions": versions("torch", "pyopencl")})


if __name__ == "__main__":
    main()
