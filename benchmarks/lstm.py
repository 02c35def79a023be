"""LSTM(128) over sequences of 64 steps of 32 features, then Dense(10) with softmax cross-entropy,
Adam 1e-3, batch 64: the training step's time in clnet and in PyTorch (torch.nn.LSTM), taking
turns in fresh processes.

    python -m benchmarks.lstm [--rounds 2] [--epochs 3] [--steps 16] [--torch-device cpu|cuda] [--cuda-graph]
    python -m benchmarks.lstm --framework clnet|torch ...     # one run, one JSON line
    python -m benchmarks.lstm --bidirectional ...             # Bidirectional(LSTM(128)): both final states
    python -m benchmarks.lstm --layers 2 ...                  # LSTM(128) layers stacked (sequences between)
    python -m benchmarks.lstm --lengths 32,96 ...             # batches of these lengths in turn
    python -m benchmarks.lstm --framework clnet --profile     # and clnet's device time per kernel
    python -m benchmarks.lstm --cell gru ...                  # GRU(128) (Keras's reset_after form) instead

With --bidirectional the layer is clnet's Bidirectional(LSTM(128)) (concat) and PyTorch's
nn.LSTM(bidirectional=True) with its two final states joined, into Dense(10). With --lengths the
batches take those lengths in turn (bucketed sequences): clnet's model is Input((None, 32)) fed
by a PyDataset, so that every batch switches its instantiation; PyTorch runs each batch as it is.
With --layers N, N such layers (each Bidirectional with --bidirectional), all but the last
returning sequences, as nn.LSTM(num_layers=N): the layers above the first pass their input's
gradient down. With --cell gru every LSTM is a GRU: clnet's GRU(128) with Keras's defaults
(reset_after=True) and torch.nn.GRU, which computes that same form.

Each run trains `epochs` epochs of `steps` batches of random data (the time is what is measured)
and reports the median seconds per training step over the epochs after the first, which pays for
compiling programs and tuning. Prints a table with each framework's milliseconds per step and its
ratio to clnet's, then one JSON line. With --cuda-graph (and --torch-device cuda) PyTorch's whole
training step is captured once as a CUDA graph and replayed, as benchmarks.mlp does: the fastest
PyTorch step there is, with no Python per kernel.
"""
from __future__ import annotations

import argparse
import time

from .common import alternate_runs, clnet_epoch_timer, cpu_name, cuda_graph_steps, emit, median, versions

LEARNING_RATE = 1e-3
STEPS, FEATURES, UNITS, CLASSES = 64, 32, 128, 10


def data(args):
    import numpy as np
    rng = np.random.default_rng(0)
    samples = args.batch * args.steps
    return (rng.normal(size=(samples, STEPS, FEATURES)).astype("float32"),
            rng.integers(0, CLASSES, samples).astype("int64"))


def batches_of_lengths(args) -> list:
    """--lengths: (x, y) per batch, the lengths in turn."""
    import numpy as np
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(args.batch, args.lengths[k % len(args.lengths)], FEATURES)).astype("float32"),
             rng.integers(0, CLASSES, args.batch).astype("int64")) for k in range(args.steps)]


def run_clnet(args):
    import clnet
    from clnet.layers import GRU, LSTM, Bidirectional, Dense, Input

    if args.device is not None:
        clnet.set_device(args.device)
    cell = {"lstm": LSTM, "gru": GRU}[args.cell]
    recurrent = [cell(UNITS, return_sequences=layer < args.layers - 1) for layer in range(args.layers)]
    if args.bidirectional:
        recurrent = [Bidirectional(layer) for layer in recurrent]
    length = None if args.lengths else STEPS
    model = clnet.Sequential([Input((length, FEATURES)), *recurrent, Dense(CLASSES, "softmax")], seed=0)
    model.compile(clnet.optimizers.Adam(LEARNING_RATE), "sparse_categorical_crossentropy")
    times = []
    if args.lengths:
        class Bucketed(clnet.PyDataset):
            batches = batches_of_lengths(args)

            def __len__(self):
                return len(self.batches)

            def __getitem__(self, index):
                return self.batches[index]

        model.fit(Bucketed(), epochs=args.epochs, verbose=0, shuffle=False, callbacks=[clnet_epoch_timer(times)])
    else:
        x, y = data(args)
        model.fit(x, y, batch_size=args.batch, epochs=args.epochs, verbose=0, shuffle=False,
                  callbacks=[clnet_epoch_timer(times)])
        if args.profile:  # device time per kernel over one more epoch, after the timed ones
            with clnet.profile(print_table=False) as profiled:
                model.fit(x, y, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
            print(f"clnet kernels over {args.steps} steps (device time):\n{profiled.table()}\n")
    info = clnet.runtime().info
    return times, f"{info.name} [{info.platform_version.strip()}]", versions("clnet", "pyopencl")


def run_torch(args):
    import torch

    torch.manual_seed(0)
    device = torch.device(args.torch_device)
    x, y = (torch.from_numpy(a).to(device) for a in data(args))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            cell = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[args.cell]
            self.recurrent = cell(FEATURES, UNITS, num_layers=args.layers, batch_first=True,
                                  bidirectional=args.bidirectional)
            self.head = torch.nn.Linear(UNITS * (1 + args.bidirectional), CLASSES)

        def forward(self, x):
            _, h = self.recurrent(x)  # (layers * directions, batch, units): each final h
            h = h[0] if args.cell == "lstm" else h  # (LSTM's: (h, c))
            return self.head(torch.cat(list(h[-(1 + args.bidirectional):]), 1))  # the last layer's

    model = Net().to(device)
    if device.type == "cuda":  # fp32 as clnet computes it, not TF32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, capturable=args.cuda_graph)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(index):
        optimizer.zero_grad(set_to_none=False)
        loss_fn(model(x.index_select(0, index)), y.index_select(0, index)).backward()
        optimizer.step()

    step = cuda_graph_steps(torch, train_step, len(x), args.batch, device) if args.cuda_graph else train_step
    batches = torch.arange(len(x), device=device)
    bucketed = [tuple(torch.from_numpy(a).to(device) for a in batch) for batch in batches_of_lengths(args)] \
        if args.lengths else []

    def bucketed_step(xb, yb):
        optimizer.zero_grad(set_to_none=False)
        loss_fn(model(xb), yb).backward()
        optimizer.step()

    times = []
    for _ in range(args.epochs):
        started = time.perf_counter()
        for xb, yb in bucketed:
            bucketed_step(xb, yb)
        for first in range(0, len(x), args.batch) if not bucketed else ():
            step(batches[first:first + args.batch])
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    name = (f"{torch.cuda.get_device_name(device)}, cuDNN" if device.type == "cuda"
            else f"{cpu_name()} ({torch.get_num_threads()} threads)")
    return times, f"{name}, {'CUDA graph' if args.cuda_graph else 'eager'}", versions("torch")


FRAMEWORKS = {"clnet": run_clnet, "torch": run_torch}


def one_run(args):
    times, device, found_versions = FRAMEWORKS[args.framework](args)
    step = median(times[1:] or times) / args.steps
    emit({"benchmark": "lstm", "cell": args.cell, "framework": args.framework, "layers": args.layers,
          "batch": args.batch, "epochs": args.epochs, "steps_per_epoch": args.steps, "seconds_per_step": round(step, 6),
          "first_epoch_seconds": round(times[0], 3), "device": device, "versions": found_versions})


def compare(args):
    options = ["--epochs", str(args.epochs), "--batch", str(args.batch), "--steps", str(args.steps)]
    options += ["--cuda-graph"] * args.cuda_graph + ["--bidirectional"] * args.bidirectional
    options += ["--layers", str(args.layers), "--cell", args.cell]
    options += ["--lengths", ",".join(map(str, args.lengths))] if args.lengths else []
    results = alternate_runs("benchmarks.lstm", FRAMEWORKS, args, options)
    base = median(r["seconds_per_step"] for r in results["clnet"])
    layer = f"{args.cell.upper()}({UNITS})"
    layer = f"Bidirectional({layer})" if args.bidirectional else layer
    layer = f"{args.layers} x {layer}" if args.layers > 1 else layer
    over = f"batches of {'/'.join(map(str, args.lengths))} steps in turn" if args.lengths else f"{STEPS} steps"
    lines = [f"{layer} over {over} of {FEATURES} features -> Dense({CLASSES}), Adam, batch {args.batch}, "
             f"{args.epochs} epochs of {args.steps} steps per run, {args.rounds} rounds (medians)", "",
             "| framework | device | ms/step | × clnet's time |", "| --- | --- | ---: | ---: |"]
    summary = {}
    for name, runs in results.items():
        seconds = median(r["seconds_per_step"] for r in runs)
        summary[name] = {"seconds_per_step": seconds, "over_clnet": round(seconds / base, 3),
                         "device": runs[0]["device"], "runs": [r["seconds_per_step"] for r in runs],
                         "versions": runs[0]["versions"]}
        lines.append(f"| {name} | {runs[0]['device'][:60]} | {1000 * seconds:.1f} | {seconds / base:.2f} |")
    print("\n".join(lines))
    emit({"benchmark": "lstm", "cell": args.cell, "bidirectional": args.bidirectional, "layers": args.layers,
          "lengths": args.lengths, "batch": args.batch, "epochs": args.epochs, "steps_per_epoch": args.steps,
          "rounds": args.rounds, "clnet_over_torch": round(base / summary["torch"]["seconds_per_step"], 3),
          "results": summary})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), help="one run of one framework")
    parser.add_argument("--cell", choices=["lstm", "gru"], default="lstm", help="the recurrent layer, both frameworks")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=16, help="training steps (batches) per epoch")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", help="clnet: device index or name")
    parser.add_argument("--torch-device", default="cpu", help="torch: cpu or cuda")
    parser.add_argument("--cuda-graph", action="store_true", help="torch: capture the training step as a CUDA graph")
    parser.add_argument("--bidirectional", action="store_true", help="Bidirectional(LSTM): both frameworks")
    parser.add_argument("--layers", type=int, default=1, help="LSTM layers stacked (sequences between them)")
    parser.add_argument("--lengths", type=lambda text: [int(n) for n in text.split(",")],
                        help="batches of these lengths in turn, e.g. 32,96 (clnet: Input((None, 32)))")
    parser.add_argument("--profile", action="store_true",
                        help="with --framework clnet: print the device time per kernel over one more epoch")
    args = parser.parse_args(argv)
    if args.layers < 1:
        parser.error(f"--layers must be at least 1, got {args.layers}")
    if args.profile and (args.framework != "clnet" or args.lengths):
        parser.error("--profile profiles one run of clnet's: give --framework clnet, without --lengths")
    (one_run if args.framework else compare)(args)


if __name__ == "__main__":
    main()
