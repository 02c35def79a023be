"""LocallyConnected1D on the sparsely connected network of a parallel-programming report
(shared/seeds/002: "Implementation of a Sparsely Connected multi-layer Neural Network using OpenMP
and CUDA"), in GFLOP/s, against numpy and torch.

    python -m benchmarks.locally_connected [--sizes 500,5000,50000,500000,1000000] [--layers 100]
                                           [--train-sizes 1000000,10000000] [--device N] [--torch-device cpu]

The report's network: L layers, each output i of a layer sees inputs i..i+R-1 (R = 3) with its own
weights and a bias, then a sigmoid; one input of N positions, so layer t has N - t(R - 1) outputs
and a forward pass does p = 2R sum_t (N - t(R - 1)) flops (its equation 3). That is
LocallyConnected1D(1, 3, activation="sigmoid") stacked L times on an input of shape (N, 1). The
report measures L = 100 with N from 500 to 1M on a GPU (its figure 4) and N = 5000, L = 500 with
OpenMP; both are rows here. `train` rows time one layer's training step (forward, bias and
activation derivative, weight gradient, input gradient: 4 kernels) at 10^6 and 10^7 positions,
counting 6R flops per output. Times are medians of wall-clock runs with the device finished.
"""
from __future__ import annotations

import argparse

import numpy as np

from .common import Table, emit_comparison, have_torch, seconds

R = 3


def network(n: int, layers: int, seed=0):
    """Each layer's (weights (outputs, R), bias (outputs,)), float32, as the layers draw them."""
    rng = np.random.default_rng(seed)
    params, size = [], n
    for _ in range(layers):
        size -= R - 1
        limit = np.sqrt(6 / (R + 1))
        params.append((rng.uniform(-limit, limit, (size, R)).astype(np.float32), np.zeros(size, np.float32)))
    return params


def flops_forward(n: int, layers: int) -> float:
    return 2.0 * R * sum(n - t * (R - 1) for t in range(1, layers + 1))


def clnet_forward(n, layers, params):
    import clnet
    from clnet.cl.parameters import ParameterStore
    from clnet.layers import LocallyConnected1D

    rt = clnet.runtime()
    store = ParameterStore(rt, np.float32)
    stack, shape = [], (n, 1)
    for t in range(layers):
        layer = LocallyConnected1D(1, R, activation="sigmoid", name=f"lc{t}")
        shape = layer.build(shape, store, np.random.default_rng(t))
        stack.append(layer)
    store.allocate()
    for layer, (w, b) in zip(stack, params):
        layer.allocate(1)
        layer.set_weights([w[:, :, None], b[:, None]])
    x = clnet.Tensor.from_numpy(np.random.default_rng(1).random((1, n, 1), np.float32))

    def forward():
        y = x
        for layer in stack:
            y = layer.forward(y, 1)
        return y

    return seconds(forward, rt.queue.finish), forward().numpy().ravel()


def numpy_forward(n, params):
    x = np.random.default_rng(1).random(n, np.float32)
    windows = np.lib.stride_tricks.sliding_window_view

    def forward():
        y = x
        for w, b in params:
            y = 1 / (1 + np.exp(-(np.einsum("pr,pr->p", windows(y, R), w) + b)))
        return y

    return seconds(forward), forward()


def torch_forward(n, params, device):
    import torch
    x = torch.from_numpy(np.random.default_rng(1).random(n, np.float32)).to(device)
    weights = [(torch.from_numpy(w).to(device), torch.from_numpy(b).to(device)) for w, b in params]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def forward():
        with torch.no_grad():
            y = x
            for w, b in weights:
                y = torch.sigmoid((y.unfold(0, R, 1) * w).sum(1) + b)
            return y

    return seconds(forward, sync), forward().cpu().numpy()


def train_rates(n, torch_device):
    """One layer's training step (4 kernels) in clnet, numpy and torch, in GFLOP/s."""
    import clnet
    from clnet.cl.parameters import ParameterStore
    from clnet.layers import LocallyConnected1D

    flops = 6.0 * R * (n - R + 1)
    rng = np.random.default_rng(2)
    x = rng.random(n, np.float32)
    grad = rng.random(n - R + 1, np.float32)
    w = rng.uniform(-1, 1, (n - R + 1, R)).astype(np.float32)
    b = np.zeros(n - R + 1, np.float32)

    rt = clnet.runtime()
    store = ParameterStore(rt, np.float32)
    layer = LocallyConnected1D(1, R, activation="sigmoid", name="lc")
    layer.build((n, 1), store, rng)
    store.allocate()
    layer.allocate(1)
    layer.set_weights([w[:, :, None], b[:, None]])
    xt, gt = clnet.Tensor.from_numpy(x.reshape(1, n, 1)), clnet.Tensor.from_numpy(grad.reshape(1, -1, 1))
    ours = seconds(lambda: (layer.forward(xt, 1), layer.backward(gt, 1, True)), rt.queue.finish)

    windows = np.lib.stride_tricks.sliding_window_view

    def numpy_step():
        y = 1 / (1 + np.exp(-(np.einsum("pr,pr->p", windows(x, R), w) + b)))
        delta = grad * y * (1 - y)
        dw = windows(x, R) * delta[:, None]
        dx = np.zeros_like(x)
        for r in range(R):
            dx[r:r + len(delta)] += w[:, r] * delta
        return dw, delta, dx

    theirs = seconds(numpy_step)
    torch_seconds = None
    if have_torch():
        import torch
        xt_, wt = torch.from_numpy(x).to(torch_device), torch.from_numpy(w).to(torch_device).requires_grad_()
        bt, gt_ = torch.from_numpy(b).to(torch_device).requires_grad_(), torch.from_numpy(grad).to(torch_device)
        xt_.requires_grad_()
        sync = torch.cuda.synchronize if torch_device == "cuda" else (lambda: None)

        def torch_step():
            y = torch.sigmoid((xt_.unfold(0, R, 1) * wt).sum(1) + bt)
            y.backward(gt_)

        torch_seconds = seconds(torch_step, sync)
    return flops / ours / 1e9, flops / theirs / 1e9, None if torch_seconds is None else flops / torch_seconds / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="500,5000,50000,500000,1000000", help="input positions N, L = --layers")
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--train-sizes", default="1000000,10000000")
    parser.add_argument("--device", help="clnet device index or name")
    parser.add_argument("--torch-device", default="cpu")
    args = parser.parse_args(argv)
    import clnet
    if args.device is not None:
        clnet.set_device(args.device)
    cases = [("forward", int(n), args.layers) for n in args.sizes.split(",")] + [("forward", 5000, 500)]
    cases += [("train", int(n), 1) for n in args.train_sizes.split(",") if n]
    results = []
    table = Table([("pass", "<9"), ("N", ">10"), ("L", ">5"), ("clnet", ">9.2f"), ("numpy", ">9.2f"), ("torch", ">9.2f"),
                   ("clnet/numpy", ">13.2f"), ("clnet/torch", ">13.2f")], "   GFLOP/s")
    for kind, n, layers in cases:
        if kind == "forward":
            params = network(n, layers)
            flops = flops_forward(n, layers)
            ours, y_ours = clnet_forward(n, layers, params)
            theirs, y_numpy = numpy_forward(n, params)
            np.testing.assert_allclose(y_ours, y_numpy, rtol=1e-4, atol=1e-5)  # the same network
            rates = [flops / ours / 1e9, flops / theirs / 1e9,
                     flops / torch_forward(n, params, args.torch_device)[0] / 1e9 if have_torch() else None]
        else:
            rates = list(train_rates(n, args.torch_device))
        row = {"pass": kind, "N": n, "L": layers, "clnet": round(rates[0], 3), "numpy": round(rates[1], 3),
               "torch": None if rates[2] is None else round(rates[2], 3),
               "clnet_over_numpy": round(rates[0] / rates[1], 3),
               "clnet_over_torch": None if rates[2] is None else round(rates[0] / rates[2], 3)}
        results.append(row)
        table.row(*row.values())
    emit_comparison("locally_connected", results, args.torch_device, R=R)


if __name__ == "__main__":
    main()
