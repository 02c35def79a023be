"""fit called epoch by epoch (a walk-forward loop, a script's own schedule) against one fit of as
many epochs, on the same arrays, with PyTorch's epoch over data already on its device beside.

    python -m benchmarks.fit_loop [--model readme|wide] [--epochs 4] [--samples N] [--batch B]
                                  [--dtype float32|float64] [--rounds 3] [--device D] [--torch-device cpu|cuda]
    mpirun -np 2 python -m benchmarks.fit_loop --strategy mpi ...   # under MPIDataParallel (rank 0 prints)

readme: the README's MLP on Fashion-MNIST (784-256-128-10); wide: 4096-4096-4096-10 on random
data (--samples 65536 is 1 GiB of float32). The arrays are given in --dtype: float64 is numpy's
default, which fit converts to the model's float32. Each is timed whole (call to return, the
device drained) after a warm-up fit that pays for compiling and tuning, the two forms taking turns
for --rounds rounds (medians). Prints one table and a JSON line: seconds for one fit of --epochs
epochs, for --epochs fits of one, their ratio, and PyTorch's seconds for as many epochs of the
same model (its data on its device once, as float32; not under --strategy mpi, whose ranks each
fit the whole arrays' share of every batch).
"""
from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np

from .common import Table, emit_comparison, fashion_mnist, have_torch, median

LEARNING_RATE = 1e-3


def data(args):
    if args.model == "readme":
        (x, y), _ = fashion_mnist()
        x, y = (x[:args.samples], y[:args.samples]) if args.samples else (x, y)
        return x.astype(args.dtype), y
    rng = np.random.default_rng(0)
    samples = args.samples or 65536
    return rng.standard_normal((samples, 4096), dtype=args.dtype), rng.integers(0, 10, samples)


def widths(args) -> list[int]:
    return [784, 256, 128, 10] if args.model == "readme" else [4096, 4096, 4096, 10]


def run_clnet(x, y, args) -> tuple[float, float, int, bool]:
    """(seconds of one fit, of the fits of one epoch, ranks, whether this process prints)."""
    import clnet
    from clnet.layers import Dense, Input

    if args.device is not None:
        clnet.set_device(args.device)
    sizes = widths(args)
    strategy = clnet.distribute.MPIDataParallel() if args.strategy == "mpi" else None
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = clnet.Sequential([Input((sizes[0],)), *[Dense(n, "relu") for n in sizes[1:-1]],
                                  Dense(sizes[-1], "softmax")], seed=0)
        model.compile(clnet.optimizers.Adam(LEARNING_RATE), "sparse_categorical_crossentropy", ["accuracy"])

    def timed(run) -> float:
        clnet.runtime().queue.finish()
        started = time.perf_counter()
        run()
        clnet.runtime().queue.finish()
        return time.perf_counter() - started

    fit = lambda epochs: model.fit(x, y, batch_size=args.batch, epochs=epochs, verbose=0)
    fit(1)  # compiles and tunes
    ones, loops = [], []
    for _ in range(args.rounds):
        ones.append(timed(lambda: fit(args.epochs)))
        loops.append(timed(lambda: [fit(1) for _ in range(args.epochs)]))
    if strategy is None:
        return median(ones), median(loops), 1, True
    return median(ones), median(loops), strategy.replicas, strategy.chief


def run_torch(x, y, args) -> float | None:
    if not have_torch():
        return None
    import torch

    device = torch.device(args.torch_device)
    torch.manual_seed(0)
    x, y = torch.from_numpy(x.astype(np.float32)).to(device), torch.from_numpy(y).to(device)
    sizes = widths(args)
    layers = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        layers += [torch.nn.Linear(n_in, n_out), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    loss_fn = torch.nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def epoch():
        for order in torch.randperm(len(x), device=device).split(args.batch):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x[order]), y[order]).backward()
            optimizer.step()

    epoch()
    sync()
    started = time.perf_counter()
    for _ in range(args.epochs):
        epoch()
    sync()
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["readme", "wide"], default="readme")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=0, help="the first N samples (0: all; wide: 65536)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default=None, help="clnet's device (CLNET_DEVICE's forms)")
    parser.add_argument("--torch-device", default="cpu")
    parser.add_argument("--strategy", choices=["none", "mpi"], default="none",
                        help="mpi: clnet under MPIDataParallel, started by mpirun (rank 0 prints)")
    args = parser.parse_args()
    x, y = data(args)
    one, loop, ranks, prints = run_clnet(x, y, args)
    if not prints:
        return
    torch_seconds = run_torch(x, y, args) if args.strategy == "none" else None
    table = Table([("model", "<8"), ("given", "<9"), ("ranks", ">6"), ("samples", ">9"), ("epochs", ">7"),
                   ("one fit s", ">11.3f"), ("fits of 1 s", ">13.3f"), ("loop/one", ">10.3f"), ("torch s", ">10.3f"),
                   ("one/torch", ">11.3f")])
    ratio_torch = None if torch_seconds is None else one / torch_seconds
    table.row(args.model, args.dtype, ranks, len(x), args.epochs, one, loop, loop / one, torch_seconds, ratio_torch)
    emit_comparison("fit_loop", [{"model": args.model, "samples": len(x), "epochs": args.epochs, "batch": args.batch,
                                  "dtype": args.dtype, "strategy": args.strategy, "ranks": ranks,
                                  "one_fit_s": one, "fits_of_one_s": loop, "loop_over_one": loop / one,
                                  "torch_s": torch_seconds, "one_over_torch": ratio_torch}],
                    args.torch_device)


if __name__ == "__main__":
    main()
