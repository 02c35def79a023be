"""The dense layer's three products against numpy and torch.mm, in GFLOP/s.

    python -m benchmarks.gemm [--sizes 128x784x256,1024,2048] [--device N] [--torch-device cuda]

For a batch of `rows` inputs x (rows, n_in), weights W (n_in, units) and the gradient dZ of the
outputs: forward x W (PerceptronFeedForward, bias and activation included), weight gradient x^T dZ
(CalcDeltaWeights) and input gradient dZ W^T (CalcHiddenGradient). clnet's times come from OpenCL
profiling events; numpy's and torch's from the wall clock around the same products; medians
of single products for all three. The layer is alone, as a model's last layer is: no layer reads
its y^T, so its forward does not write it (see Dense._transposed_input).
"""
from __future__ import annotations

import argparse

import numpy as np

from .common import Table, emit_comparison, have_torch, median, seconds

KERNELS = {"forward": "PerceptronFeedForward", "weight_grad": "CalcDeltaWeights", "input_grad": "CalcHiddenGradient"}


def clnet_rates(rows, n_in, units, repeats):
    import clnet
    from clnet.cl.parameters import ParameterStore
    from clnet.layers import Dense

    rt = clnet.runtime()
    rng = np.random.default_rng(0)
    store = ParameterStore(rt, np.float32)
    layer = Dense(units, "relu")
    layer.build((n_in,), store, rng)
    store.allocate()
    layer.allocate(rows)
    x = clnet.Tensor.from_numpy(rng.random((rows, n_in), np.float32))
    grad = clnet.Tensor.from_numpy(rng.random((rows, units), np.float32))
    return product_rates(layer, x, grad, repeats), layer.tiles


def product_rates(layer, x, grad, repeats):
    """{product: GFLOP/s} of a Dense layer's three products, input x and output gradient grad."""
    import clnet
    rows = x.shape[0]
    step = lambda: (layer.forward(x, rows), layer.backward(grad, rows, True))
    step()
    # Each step profiled on its own, so that clnet's rate is a median of single products, as
    # numpy's and torch's are (a mean counted every slow moment of a shared machine against it).
    taken = {key: [] for key in KERNELS}
    for _ in range(repeats):
        with clnet.profile(print_table=False) as profile:
            step()
        for key, name in KERNELS.items():
            taken[key].append(profile.rows[name][1] / profile.rows[name][0])
    flops = 2.0 * rows * layer.n_in * layer.units
    return {key: flops / median(times) / 1e9 for key, times in taken.items()}


def numpy_rates(rows, n_in, units):
    rng = np.random.default_rng(0)
    x, w, dz = (rng.random(s, np.float32) for s in ((rows, n_in), (n_in, units), (rows, units)))
    flops = 2.0 * rows * n_in * units
    return {"forward": flops / seconds(lambda: x @ w) / 1e9,
            "weight_grad": flops / seconds(lambda: x.T @ dz) / 1e9,
            "input_grad": flops / seconds(lambda: dz @ w.T) / 1e9}


def torch_rates(rows, n_in, units, device, tf32=False, dtype="float32"):
    """torch.mm's GFLOP/s for the three products; fp32 as fp32 (the comparison clnet makes)
    unless `tf32` allows CUDA's TF32 products; `dtype` "bfloat16" or "float16": on tensors of it."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = tf32
    x, w, dz = (torch.rand(s, device=device, dtype=getattr(torch, dtype))
                for s in ((rows, n_in), (n_in, units), (rows, units)))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    flops = 2.0 * rows * n_in * units
    return {"forward": flops / seconds(lambda: torch.mm(x, w), sync) / 1e9,
            "weight_grad": flops / seconds(lambda: torch.mm(x.t(), dz), sync) / 1e9,
            "input_grad": flops / seconds(lambda: torch.mm(dz, w.t()), sync) / 1e9}


def parse_sizes(text: str):
    sizes = []
    for item in text.split(","):
        parts = [int(p) for p in item.split("x")]
        sizes.append(tuple(parts) if len(parts) == 3 else (parts[0],) * 3)
    return sizes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="128x784x256,1024,2048", help="rows x n_in x units, or one number for a cube")
    parser.add_argument("--device", help="clnet device index or name")
    parser.add_argument("--torch-device", default="cpu")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    import clnet
    if args.device is not None:
        clnet.set_device(args.device)
    results = []
    table = Table([("rows x n_in x units", "<20"), ("product", "<13"), ("clnet", ">9.1f"), ("numpy", ">9.1f"),
                   ("torch", ">9.1f"), ("clnet/numpy", ">13.2f"), ("clnet/torch", ">13.2f")], "   GFLOP/s")
    for rows, n_in, units in parse_sizes(args.sizes):
        ours, tiles = clnet_rates(rows, n_in, units, args.repeats)
        theirs = numpy_rates(rows, n_in, units)
        torch_side = torch_rates(rows, n_in, units, args.torch_device) if have_torch() else {}
        for product in KERNELS:
            row = {"size": [rows, n_in, units], "product": product, "clnet": round(ours[product], 1),
                   "numpy": round(theirs[product], 1), "torch": round(torch_side[product], 1) if torch_side else None,
                   "clnet_over_numpy": round(ours[product] / theirs[product], 3),
                   "clnet_over_torch": round(ours[product] / torch_side[product], 3) if torch_side else None,
                   "tiles": tiles}
            results.append(row)
            table.row(f"{rows}x{n_in}x{units}", product, row["clnet"], row["numpy"], row["torch"],
                      row["clnet_over_numpy"], row["clnet_over_torch"])
    emit_comparison("gemm", results, args.torch_device)


if __name__ == "__main__":
    main()
