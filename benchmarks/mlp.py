"""Fashion-MNIST MLP (Flatten, 256 relu, 128 relu, 10 softmax; Adam 1e-3) in one framework.

    python -m benchmarks.mlp --framework clnet|torch|numpy|tinygrad [--batch 128] [--epochs 3]

Prints one JSON line: seconds per epoch (median over epochs after the first, which pays for
compiling and tuning), samples per second, test accuracy, the device string and versions.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from .common import clnet_epoch_timer, cpu_name, cuda_graph_steps, emit, fashion_mnist, median, versions

LEARNING_RATE = 1e-3


def run_clnet(data, args):
    import clnet
    from clnet.layers import Dense, Input

    if args.device is not None:
        clnet.set_device(args.device)
    (x, y), (x_test, y_test) = data
    times = []


    model = clnet.Sequential([Input((784,)), Dense(256, "relu"), Dense(128, "relu"), Dense(10, "softmax")], seed=0)
    model.compile(clnet.optimizers.Adam(LEARNING_RATE), "categorical_crossentropy", ["accuracy"])
    model.fit(x, y, batch_size=args.batch, epochs=args.epochs, verbose=0, callbacks=[clnet_epoch_timer(times)])
    accuracy = model.evaluate(x_test, y_test, batch_size=1000)[1]
    info = clnet.runtime().info
    return times, accuracy, f"{info.name} [{info.platform_version.strip()}]", versions("clnet", "pyopencl")


def run_torch(data, args):
    import torch

    device = torch.device(args.device or "cpu")
    torch.manual_seed(0)
    (x, y), (x_test, y_test) = data
    x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, fused=args.fused or None,
                                 capturable=args.cuda_graph)
    loss_fn = torch.nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def train_step(index):
        optimizer.zero_grad(set_to_none=False)
        loss = loss_fn(model(x.index_select(0, index)), y.index_select(0, index))
        loss.backward()
        optimizer.step()

    step = cuda_graph_steps(torch, train_step, len(x), args.batch, device) if args.cuda_graph else train_step
    times = []
    for _ in range(args.epochs):
        sync()
        started = time.perf_counter()
        order = torch.randperm(len(x), device=device)
        for first in range(0, len(x), args.batch):
            step(order[first:first + args.batch])
        sync()
        times.append(time.perf_counter() - started)
    with torch.no_grad():
        predicted = model(torch.from_numpy(x_test).to(device)).argmax(1).cpu().numpy()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{cpu_name()} ({torch.get_num_threads()} threads)"
    label = "torch" + (" fused Adam" if args.fused else "") + (" CUDA graph" if args.cuda_graph else "")
    return times, float((predicted == y_test).mean()), name, versions("torch") | {"variant": label}


def run_numpy(data, args):
    """A hand-written float32 MLP with Adam: what a careful person writes without a framework."""
    (x, y), (x_test, y_test) = data
    rng = np.random.default_rng(0)
    sizes = [784, 256, 128, 10]
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        limit = np.sqrt(6 / (fan_in + fan_out))
        params += [rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32), np.zeros(fan_out, np.float32)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    beta1, beta2, eps, step = 0.9, 0.999, 1e-7, 0

    def forward(batch):
        h1 = np.maximum(batch @ params[0] + params[1], 0)
        h2 = np.maximum(h1 @ params[2] + params[3], 0)
        return h1, h2, h2 @ params[4] + params[5]

    times = []
    for _ in range(args.epochs):
        started = time.perf_counter()
        order = rng.permutation(len(x))
        for first in range(0, len(x), args.batch):
            index = order[first:first + args.batch]
            xb, yb = x[index], y[index]
            h1, h2, logits = forward(xb)
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(yb)), yb] -= 1
            d3 = p / len(yb)
            d2 = (d3 @ params[4].T) * (h2 > 0)
            d1 = (d2 @ params[2].T) * (h1 > 0)
            grads = [xb.T @ d1, d1.sum(0), h1.T @ d2, d2.sum(0), h2.T @ d3, d3.sum(0)]
            step += 1
            c1, c2 = 1 - beta1 ** step, 1 - beta2 ** step
            for i, g in enumerate(grads):
                m[i] = beta1 * m[i] + (1 - beta1) * g
                v[i] = beta2 * v[i] + (1 - beta2) * g * g
                params[i] -= LEARNING_RATE * (m[i] / c1) / (np.sqrt(v[i] / c2) + eps)
        times.append(time.perf_counter() - started)
    accuracy = float((forward(x_test)[2].argmax(1) == y_test).mean())
    return times, accuracy, f"{cpu_name()} (numpy, OpenBLAS)", versions("numpy")


def run_tinygrad(data, args):
    os.environ.setdefault("DEV", "CL")  # tinygrad's OpenCL backend, on the same PoCL as clnet
    os.environ.setdefault("TRAINING", "1")  # its optimizers refuse to step otherwise
    from tinygrad import Device, Tensor, TinyJit, nn

    (x, y), (x_test, y_test) = data
    Tensor.manual_seed(0)

    class MLP:
        def __init__(self):
            self.layers = [nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)]

        def __call__(self, t):
            t = self.layers[0](t).relu()
            t = self.layers[1](t).relu()
            return self.layers[2](t)

    model = MLP()
    optimizer = nn.optim.Adam(nn.state.get_parameters(model), lr=LEARNING_RATE)
    x_dev, y_dev = Tensor(x), Tensor(y.astype(np.int32))

    @TinyJit
    def step(index):
        optimizer.zero_grad()
        loss = model(x_dev[index]).sparse_categorical_crossentropy(y_dev[index]).backward()
        optimizer.step()
        return loss

    rng = np.random.default_rng(0)
    times = []
    full = len(x) - len(x) % args.batch  # the jitted step wants one batch shape
    for _ in range(args.epochs):
        started = time.perf_counter()
        order = rng.permutation(len(x))[:full].astype(np.int32)
        for first in range(0, full, args.batch):
            step(Tensor(order[first:first + args.batch])).realize()
        Device[Device.DEFAULT].synchronize()
        times.append(time.perf_counter() - started)
    predicted = model(Tensor(x_test)).argmax(1).numpy()
    from importlib.metadata import version
    return (times, float((predicted == y_test).mean()), f"{Device.DEFAULT} (tinygrad)",
            versions() | {"tinygrad": version("tinygrad")})


FRAMEWORKS = {"clnet": run_clnet, "torch": run_torch, "numpy": run_numpy, "tinygrad": run_tinygrad}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), required=True)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", help="clnet: device index or name; torch: cpu or cuda")
    parser.add_argument("--fused", action="store_true", help="torch: fused Adam")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="torch on cuda: the whole step captured in a CUDA graph (Adam capturable)")
    args = parser.parse_args(argv)
    data = fashion_mnist()
    times, accuracy, device, found_versions = FRAMEWORKS[args.framework](data, args)
    steady = times[1:] or times
    seconds = median(steady)
    emit({"benchmark": "mlp", "framework": found_versions.pop("variant", args.framework), "batch": args.batch,
          "epochs": args.epochs, "samples": len(data[0][0]), "seconds_per_epoch": round(seconds, 4),
          "first_epoch_seconds": round(times[0], 4),
          "samples_per_second": round(len(data[0][0]) / seconds, 1), "test_accuracy": round(accuracy, 4),
          "device": device, "versions": found_versions})


if __name__ == "__main__":
    main()
