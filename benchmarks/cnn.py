"""Fashion-MNIST CNN (Conv2D 32 3x3 relu, MaxPool 2, Conv2D 64 3x3 relu, MaxPool 2, Dense 128 relu,
Dense 10 softmax; Adam 1e-3) in clnet and PyTorch, taking turns in fresh processes.

    python -m benchmarks.cnn [--rounds 2] [--epochs 2] [--batch 128] [--samples N] [--policy mixed_bfloat16]
    python -m benchmarks.cnn --framework clnet|torch ...     # one run, one JSON line

The Dropout(0.3) of examples/fashion_mnist_cnn.py is left out on both sides: it is the
convolutions that are measured. Prints a table with each framework's median seconds per epoch
(epochs after the first, which pays for compiling and tuning) and its ratio to clnet, then one
JSON line. --samples trains on the first N images only (a quicker look; seconds are scaled to
a whole epoch of 60000). --policy mixed_bfloat16 trains clnet under that mixed-precision policy
and PyTorch's forward in bfloat16 autocast.
"""
from __future__ import annotations

import argparse
import time

from .common import alternate_runs, clnet_epoch_timer, cpu_name, emit, fashion_mnist, median, versions

LEARNING_RATE = 1e-3


def images(data, samples):
    (x, y), (x_test, y_test) = data
    x = x.reshape(-1, 28, 28, 1)[:samples]
    return (x, y[:samples]), (x_test.reshape(-1, 28, 28, 1), y_test)


def run_clnet(data, args):
    import clnet
    from clnet.layers import Conv2D, Dense, Flatten, Input, MaxPooling2D

    if args.device is not None:
        clnet.set_device(args.device)
    (x, y), (x_test, y_test) = data
    times = []
    clnet.mixed_precision.set_global_policy(args.policy)
    model = clnet.Sequential([Input((28, 28, 1)), Conv2D(32, 3, activation="relu"), MaxPooling2D(),
                              Conv2D(64, 3, activation="relu"), MaxPooling2D(), Flatten(), Dense(128, "relu"),
                              Dense(10, "softmax")], seed=0)
    model.compile(clnet.optimizers.Adam(LEARNING_RATE), "categorical_crossentropy", ["accuracy"])
    model.fit(x, y, batch_size=args.batch, epochs=args.epochs, verbose=0, callbacks=[clnet_epoch_timer(times)])
    accuracy = model.evaluate(x_test, y_test, batch_size=500)[1]
    info = clnet.runtime().info
    return times, accuracy, f"{info.name} [{info.platform_version.strip()}]", versions("clnet", "pyopencl")


def run_torch(data, args):
    import torch

    torch.manual_seed(0)
    (x, y), (x_test, y_test) = data
    # PyTorch's own layout, channels first.
    device = torch.device(args.torch_device)
    x, y = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous().to(device), torch.from_numpy(y).to(device)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    if device.type == "cuda":  # fp32 as clnet computes it, not TF32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    loss_fn = nn.CrossEntropyLoss()
    autocast = torch.autocast(device.type, torch.bfloat16, enabled=args.policy == "mixed_bfloat16")
    times = []
    for _ in range(args.epochs):
        started = time.perf_counter()
        order = torch.randperm(len(x), device=device)
        for first in range(0, len(x), args.batch):
            index = order[first:first + args.batch]
            optimizer.zero_grad()
            with autocast:
                loss = loss_fn(model(x[index]), y[index])
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    with torch.no_grad(), autocast:
        predicted = model(torch.from_numpy(x_test).permute(0, 3, 1, 2).to(device)).argmax(1).cpu().numpy()
    name = (torch.cuda.get_device_name(device) if device.type == "cuda"
            else f"{cpu_name()} ({torch.get_num_threads()} threads)")
    precision = ", bf16 autocast" if args.policy == "mixed_bfloat16" else ""
    return times, float((predicted == y_test).mean()), f"{name}, eager{precision}", versions("torch")


FRAMEWORKS = {"clnet": run_clnet, "torch": run_torch}


def one_run(args):
    data = images(fashion_mnist(), args.samples)
    times, accuracy, device, found_versions = FRAMEWORKS[args.framework](data, args)
    scale = 60000 / len(data[0][0])
    seconds = median(times[1:] or times) * scale
    emit({"benchmark": "cnn", "framework": args.framework, "policy": args.policy, "batch": args.batch, "epochs": args.epochs,
          "samples": len(data[0][0]), "seconds_per_epoch": round(seconds, 3),
          "first_epoch_seconds": round(times[0] * scale, 3), "test_accuracy": round(accuracy, 4),
          "device": device, "versions": found_versions})


def compare(args):
    results = alternate_runs("benchmarks.cnn", FRAMEWORKS, args, ["--epochs", str(args.epochs), "--batch", str(args.batch),
                                                                  "--samples", str(args.samples), "--policy", args.policy])
    base = median(r["seconds_per_epoch"] for r in results["clnet"])
    lines = [f"CNN 32c3-p2-64c3-p2-128-10, Adam 1e-3, {args.policy}, batch {args.batch}, {args.epochs} epochs of "
             f"{args.samples} samples per run, {args.rounds} rounds (medians; seconds scaled to 60000 samples)", "",
             "| framework | device | s/epoch | × clnet's time | test accuracy |", "| --- | --- | ---: | ---: | ---: |"]
    summary = {}
    for name, runs in results.items():
        seconds = median(r["seconds_per_epoch"] for r in runs)
        summary[name] = {"seconds_per_epoch": seconds, "over_clnet": round(seconds / base, 3),
                         "test_accuracy": median(r["test_accuracy"] for r in runs), "device": runs[0]["device"],
                         "runs": [r["seconds_per_epoch"] for r in runs], "versions": runs[0]["versions"]}
        lines.append(f"| {name} | {runs[0]['device'][:60]} | {seconds:.2f} | {seconds / base:.2f} | "
                     f"{summary[name]['test_accuracy']:.4f} |")
    print("\n".join(lines))
    emit({"benchmark": "cnn", "policy": args.policy, "batch": args.batch, "epochs": args.epochs, "samples": args.samples,
          "rounds": args.rounds, "results": summary})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), help="one run of one framework")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--device", help="clnet: device index or name")
    parser.add_argument("--torch-device", default="cpu", help="torch: cpu or cuda")
    parser.add_argument("--policy", default="float32", choices=["float32", "mixed_bfloat16"],
                        help="clnet's mixed-precision policy (PyTorch: bf16 autocast)")
    args = parser.parse_args(argv)
    (one_run if args.framework else compare)(args)


if __name__ == "__main__":
    main()
