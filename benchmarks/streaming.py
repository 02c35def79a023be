"""Streaming against resident data: the README's Fashion-MNIST MLP (Flatten, 256 relu, 128 relu,
10 softmax; Adam 1e-3, batch 128) trained with its data set on the device, then streamed from
host memory (CLNET_DEVICE_MEMORY=0), from a memmap on disk, and from a PyDataset.

    python -m benchmarks.streaming [--rounds 3] [--epochs 3] [--batch 128] [--device N] [--synthetic]

Prints one table and one JSON line: seconds per epoch (median over epochs after the first, then
over rounds) of each way in, its ratio to resident in the same round (median over rounds; the
issue asks for <= 1.2), and whether all ended with the same weights (they must: streaming never
changes a result).
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from .common import clnet_epoch_timer, emit, fashion_mnist, median, versions


def train(x, y, args, budget: str | None, shuffle: bool):
    import clnet
    from clnet.layers import Dense, Input

    if budget is None:
        os.environ.pop("CLNET_DEVICE_MEMORY", None)
    else:
        os.environ["CLNET_DEVICE_MEMORY"] = budget
    times = []


    model = clnet.Sequential([Input((784,)), Dense(256, "relu"), Dense(128, "relu"), Dense(10, "softmax")], seed=0)
    model.compile(clnet.optimizers.Adam(1e-3), "categorical_crossentropy", ["accuracy"])
    if y is None:  # a PyDataset; shuffle=False so that it sees the arrays' sequential batches
        model.fit(x, epochs=args.epochs, verbose=0, callbacks=[clnet_epoch_timer(times)], shuffle=False)
    else:
        model.fit(x, y, batch_size=args.batch, epochs=args.epochs, verbose=0, callbacks=[clnet_epoch_timer(times)],
                  shuffle=shuffle)
    return median(times[1:] or times), model.get_weights()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", help="clnet device index or name")
    parser.add_argument("--synthetic", action="store_true",
                        help="random data of Fashion-MNIST's shape, for a machine without the data set")
    args = parser.parse_args(argv)
    import clnet

    if args.device is not None:
        clnet.set_device(args.device)
    if args.synthetic:  # the time of a step does not depend on the values
        rng = np.random.default_rng(0)
        x, y = rng.random((60000, 784), np.float32), rng.integers(0, 10, 60000)
    else:
        (x, y), _ = fashion_mnist()

    class Batched(clnet.PyDataset):
        def __len__(self):
            return -(-len(x) // args.batch)

        def __getitem__(self, index):
            part = slice(index * args.batch, (index + 1) * args.batch)
            return x[part], y[part]

    runs = {}  # name -> [(seconds per epoch, weights)], one per round
    with tempfile.TemporaryDirectory() as folder:
        mapped = np.memmap(os.path.join(folder, "x.dat"), dtype=x.dtype, mode="w+", shape=x.shape)
        mapped[:] = x
        mapped.flush()
        ways = {"resident, shuffled": lambda: train(x, y, args, None, shuffle=True),
                "streamed array, shuffled": lambda: train(x, y, args, "0", shuffle=True),
                "streamed memmap, shuffled": lambda: train(mapped, y, args, "0", shuffle=True),
                "resident, in order": lambda: train(x, y, args, None, shuffle=False),
                "PyDataset, in order": lambda: train(Batched(), None, args, None, shuffle=False)}
        for _ in range(args.rounds):  # interleaved, so that a slow minute of a shared machine hits all
            for name, run in ways.items():
                runs.setdefault(name, []).append(run())
        del mapped
    info = clnet.runtime().info
    device = f"{info.name} [{info.platform_version.strip()}]"
    data = "random" if args.synthetic else "Fashion-MNIST"
    print(f"clnet streaming, MLP 784-256-128-10, batch {args.batch}, {len(x)} {data} samples, on {device}")
    print(f"{'data':<28}{'s/epoch':>10}{'vs resident':>13}{'same weights':>14}")
    result = {}
    for name, rounds in runs.items():
        reference = runs["resident, " + name.split(", ")[-1]]
        # The ratio to resident in the same round, median over rounds.
        ratio = median([seconds / base for (seconds, _), (base, _) in zip(rounds, reference)])
        same = all(np.array_equal(a, b) for (_, w), (_, r) in zip(rounds, reference) for a, b in zip(w, r))
        seconds = median([seconds for seconds, _ in rounds])
        print(f"{name:<28}{seconds:>10.3f}{ratio:>12.2f}x{'yes' if same else 'NO':>14}")
        result[name] = {"seconds_per_epoch": round(seconds, 4), "vs_resident": round(ratio, 3),
                                "same_weights": same}
    emit({"benchmark": "streaming", "data": data, "batch": args.batch, "epochs": args.epochs, "device": device,
          "results": result, "versions": versions("clnet", "pyopencl")})


if __name__ == "__main__":
    main()
