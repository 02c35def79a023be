"""Data-parallel training of the Fashion-MNIST MLP (784-256-128-10, Adam, float32, global batch 128
by default): samples per second on one device, on N devices of one process (clnet.distribute.DataParallel over
N PoCL pthread devices, or GPUs) and on N MPI ranks (MPIDataParallel, mpirun -np N on 127.0.0.1: the
ranks meet in shared memory and each device sums, `mpi`, or host threads sum there, `mpi-host`, or
MPI's all-reduce does, `mpi-flat`; `mpi-bf16` and `mpi-flat-bf16` with compression="bf16"), against
PyTorch's DistributedDataParallel (gloo, or NCCL) with one and N processes (--ranks N, 2 by default);
the communication share of a step from OpenCL profiling events (the gradient copies) and the host's
reduction time; and a model of the step time on N devices (or machines) from the measured compute and stated all-reduce
bandwidths, 25 and 100 GB/s unless given: where scaling stops paying.

    python -m benchmarks.data_parallel [--epochs 3] [--samples 60000] [--bandwidth 25e9,100e9]
    python -m benchmarks.data_parallel --run single     # one configuration's JSON (SYNTHETIC=1: random data)
    python -m benchmarks.data_parallel --gpu --model wide --batch 8192 --samples 65536
                                                        # two GPUs: clnet on 1, DataParallel on 2, MPI 1 + 1;
                                                        # PyTorch on 1 and DDP (NCCL) on 2
    python -m benchmarks.data_parallel --gpu --one-device --model wide --batch 8192 --samples 65536
                                                        # both replicas (and both ranks) on one GPU: the
                                                        # reduction's cost, where one GPU is at hand
    python -m benchmarks.data_parallel --gpu --model wide --batch 8192 --reduction devices --configs dp
                                                        # one configuration beside clnet's one device
    python -m benchmarks.data_parallel --gpu --ranks 4 --model wide --batch 32768 --samples 131072
                                                        # four GPUs

Models (--model): the README's MLP (784-256-128-10), `wide` (4096-4096-4096-10 on random inputs of
4096 features), the CNN example's (Conv 32, pool, Conv 64, pool, Dense 128, Dense 10) and `gpt`,
examples/tiny_gpt.py's model with 4 blocks, d 256, 4 heads, T 256 on random windows of 96
characters (PyTorch: benchmarks.tiny_gpt_torch's, from random weights of the same shapes).

Prints one table and one JSON line. Each configuration runs in its own process(es): OpenCL's device
list is fixed per process, and MPI's ranks are processes.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from .common import cpu_name, emit, fashion_mnist, median, versions

LEARNING_RATE = 1e-3
# Two replicas on the 2-core machine: each device (or rank's device) one core, as each PyTorch DDP
# process gets one thread, so that no configuration runs more threads than there are cores.
ONE_CORE = {"POCL_MAX_PTHREAD_COUNT": "1"}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_btl": "self,tcp",
           "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"}


WIDE = 4096  # the wide MLP's inputs and hidden units
GPT = {"vocabulary": 96, "context": 256, "d_model": 256, "heads": 4, "blocks": 4}  # the tiny GPT's sizes
CONFIGS = ("single", "dp", "mpi", "mpi-bf16", "mpi-host", "mpi-flat", "mpi-flat-bf16", "torch", "torch-ddp")


def data(samples: int, model: str = "mlp"):
    """(x, y): Fashion-MNIST's first `samples` (as images for the CNN), or random inputs for the
    wide MLP (and with SYNTHETIC=1, for a machine without the dataset); for the GPT, random
    windows and the next character of each position."""
    if model == "gpt":
        windows = np.random.default_rng(0).integers(0, GPT["vocabulary"], (samples, GPT["context"] + 1), np.int32)
        return windows[:, :-1], windows[:, 1:]
    features = WIDE if model == "wide" else 784
    if model == "wide" or os.environ.get("SYNTHETIC"):
        rng = np.random.default_rng(0)
        x, y = rng.random((samples, features), np.float32), rng.integers(0, 10, samples)
    else:
        (x, y), _ = fashion_mnist()
        x, y = x[:samples], y[:samples]
    return (x.reshape(-1, 28, 28, 1), y) if model == "cnn" else (x, y)


def clnet_model(name: str):
    import clnet
    from clnet.layers import Conv2D, Dense, Flatten, Input, MaxPooling2D

    if name == "gpt":
        from .tiny_gpt_torch import tiny_gpt
        return tiny_gpt.build_model(GPT["vocabulary"], GPT["context"], GPT["d_model"], GPT["heads"], GPT["blocks"],
                                    seed=0)
    layers = {"mlp": lambda: [Input((784,)), Dense(256, "relu"), Dense(128, "relu"), Dense(10, "softmax")],
              "wide": lambda: [Input((WIDE,)), Dense(WIDE, "relu"), Dense(WIDE, "relu"), Dense(10, "softmax")],
              "cnn": lambda: [Input((28, 28, 1)), Conv2D(32, 3, activation="relu"), MaxPooling2D(),
                              Conv2D(64, 3, activation="relu"), MaxPooling2D(), Flatten(), Dense(128, "relu"),
                              Dense(10, "softmax")]}[name]()
    return clnet.Sequential(layers, seed=0, floatx="float32")


def torch_model(name: str):
    torch = __import__("torch")
    nn = torch.nn
    if name == "gpt":
        return TorchGPTModule(torch)
    if name == "cnn":  # channels first, as PyTorch's own
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    sizes = [784, 256, 128, 10] if name == "mlp" else [WIDE, WIDE, WIDE, 10]
    layers = []
    for n_in, n_out in zip(sizes, sizes[1:]):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def gpt_weights(rng) -> list[np.ndarray]:
    """Random weights of the tiny GPT in Keras's layout and get_weights() order (normal, 0.02)."""
    v, t, d, h = GPT["vocabulary"], GPT["context"], GPT["d_model"], GPT["heads"]
    norm = [np.ones(d), np.zeros(d)]
    shapes = [(v, d), (t, d)]
    block = [*norm, *[(d, h, d // h), (h, d // h)] * 3, (h, d // h, d), (d,), *norm, (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    weights = [rng.normal(0, 0.02, s) for s in shapes]
    for _ in range(GPT["blocks"]):
        weights += [w if isinstance(w, np.ndarray) else rng.normal(0, 0.02, w) for w in block]
    weights += [*norm, rng.normal(0, 0.02, (d, v)), np.zeros(v)]
    return [w.astype(np.float32) for w in weights]


def TorchGPTModule(torch):
    """benchmarks.tiny_gpt_torch's GPT as an nn.Module (DistributedDataParallel takes modules)."""
    from types import SimpleNamespace

    from .tiny_gpt_torch import TorchGPT

    class Module(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt = TorchGPT(gpt_weights(np.random.default_rng(0)), SimpleNamespace(**GPT), "cpu")
            self.params = torch.nn.ParameterList(self.gpt.params)

        def forward(self, tokens):
            return self.gpt(tokens)

    return Module()


# -- one configuration, in its own process ------------------------------------------------------
def run_clnet(kind: str, args) -> dict:
    import clnet

    x, y = data(args.samples, args.model)
    if kind.startswith("mpi") and args.gpu and not args.one_device:  # the GPUs in turn by local rank
        gpus = [d.index for d in clnet.devices() if d.is_gpu]
        clnet.set_device(gpus[int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]) % len(gpus)])
    devices = list(range(args.ranks))
    if args.one_device:  # the first device N times, each replica with a context of its own
        info = clnet.runtime().info
        devices = [dataclasses.replace(info, index=info.index + 100 * i) for i in range(args.ranks)]
    strategy = {"single": lambda: None,
                "dp": lambda: clnet.distribute.DataParallel(devices=devices, reduction=args.reduction),
                "mpi": lambda: clnet.distribute.MPIDataParallel(bucket_mb=args.bucket_mb),
                "mpi-bf16": lambda: clnet.distribute.MPIDataParallel(bucket_mb=args.bucket_mb, compression="bf16"),
                "mpi-host": lambda: clnet.distribute.MPIDataParallel(bucket_mb=args.bucket_mb, sum_on="host"),
                "mpi-flat": lambda: clnet.distribute.MPIDataParallel(bucket_mb=args.bucket_mb,
                                                                     hierarchical=False),
                "mpi-flat-bf16": lambda: clnet.distribute.MPIDataParallel(bucket_mb=args.bucket_mb, hierarchical=False,
                                                                          compression="bf16")}[kind]()
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = clnet_model(args.model)
        model.compile(clnet.optimizers.Adam(LEARNING_RATE), "sparse_categorical_crossentropy", ["accuracy"])

    class Timer(clnet.callbacks.Callback):
        def __init__(self, times):
            super().__init__()
            self.times = times

        def on_epoch_begin(self, epoch, logs=None):
            for rt in runtimes():
                rt.queue.finish()
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):  # the epoch's loss read waited for every replica
            self.times.append(time.perf_counter() - self.started)

    def runtimes():
        replicas = strategy.replica_models if isinstance(strategy, clnet.distribute.DataParallel) else []
        return [model.rt] + [r.rt for r in replicas]

    times, profiled = [], []
    model.fit(x, y, batch_size=args.batch, epochs=args.epochs, verbose=0, callbacks=[Timer(times)])
    # One more epoch with profiling events on every local device: kernels, and the gradient copies.
    for rt in runtimes():
        rt.events.clear()
        rt.set_profiling(True)
    reduce_before = strategy.reduce_seconds if strategy else 0.0
    model.fit(x, y, batch_size=args.batch, epochs=1, verbose=0, callbacks=[Timer(profiled)])
    wall = profiled[0]
    kernel_seconds, copy_seconds = [], []
    for rt in runtimes():
        rt.queue.finish()
        spans = [(name, (e.profile.end - e.profile.start) * 1e-9) for name, e, _ in rt.events]
        kernel_seconds.append(sum(s for n, s in spans if not n.startswith("Reduce")))
        copy_seconds.append(sum(s for n, s in spans if n.startswith("Reduce")))
        rt.set_profiling(False)
    steps = -(-len(x) // args.batch)
    reduce_seconds = (strategy.reduce_seconds - reduce_before) if strategy else 0.0
    ranks = strategy.replicas if strategy else 1
    seconds = median(times[1:] or times)
    info = model.rt.info
    return {"framework": "clnet", "config": kind, "replicas": ranks, "rank": getattr(strategy, "rank", 0),
            "seconds_per_epoch": seconds, "samples_per_second": len(x) / seconds, "step_ms": seconds / steps * 1e3,
            # per step, from events: the busiest device's kernels, its gradient copies, and the host reduction
            "kernel_ms": max(kernel_seconds) / steps * 1e3, "copy_ms": max(copy_seconds) / steps * 1e3,
            "reduce_ms": reduce_seconds / steps * 1e3, "profiled_step_ms": wall / steps * 1e3,
            "gradient_bytes": model.store.size * model.dtype.itemsize,
            "device": f"{info.name} [{info.platform_version.strip()}]", "versions": versions("clnet", "pyopencl")}


def run_torch(kind: str, args) -> dict:
    """PyTorch, the same model, one process or DistributedDataParallel (each rank its part of every
    batch, gradients all-reduced in buckets overlapping the backward pass): on the CPU over gloo,
    with --gpu on one GPU per rank over NCCL (fp32, TF32 off, as clnet computes)."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = torch.device(f"cuda:{rank}" if args.gpu else "cpu")
    if args.gpu:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    if world > 1:
        dist.init_process_group("nccl" if args.gpu else "gloo")
    x, y = (torch.from_numpy(a.astype(np.int64) if a.dtype.kind == "i" else a).to(device)
            for a in data(args.samples, args.model))
    if args.model == "cnn":
        x = x.permute(0, 3, 1, 2).contiguous()
    torch.manual_seed(0)
    model = torch_model(args.model).to(device)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank] if args.gpu else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    share = args.batch // world
    for epoch in range(args.epochs):
        started = time.perf_counter()
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch)).to(device)
        for first in range(0, len(x), args.batch):
            index = order[first:first + args.batch][rank * share:(rank + 1) * share]
            optimizer.zero_grad()
            out = model(x[index])
            loss_fn(out.reshape(-1, out.shape[-1]), y[index].reshape(-1)).backward()
            optimizer.step()
        if args.gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    if world > 1:
        dist.destroy_process_group()
    seconds = median(times[1:] or times)
    return {"framework": "torch", "config": kind, "replicas": world, "rank": rank, "seconds_per_epoch": seconds,
            "samples_per_second": len(x) / seconds, "step_ms": seconds / -(-len(x) // args.batch) * 1e3,
            "device": torch.cuda.get_device_name(device) if args.gpu else
            f"{cpu_name()} ({torch.get_num_threads()} threads per process)", "versions": versions("torch")}


# -- the driver ------------------------------------------------------------------------------------
def child(argv: list[str], env: dict, launcher: list[str] = (), processes: int = 1) -> dict:
    """Rank 0's result of a configuration run by `launcher` (mpirun), or as `processes` processes
    told their RANK and WORLD_SIZE (PyTorch's env:// rendezvous)."""
    command = [*launcher, sys.executable, "-m", "benchmarks.data_parallel", *argv]
    base = {**os.environ, "CLNET_QUIET": "1", **env}
    runs = [subprocess.Popen(command, env={**base, "RANK": str(rank), "WORLD_SIZE": str(processes)} if processes > 1
                             else base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for rank in range(processes)]
    outputs = [run.communicate() for run in runs]
    for run, (out, err) in zip(runs, outputs):
        if run.returncode:
            raise RuntimeError(f"{' '.join(command)} failed:\n{out}\n{err}")
    return next(json.loads(line) for out, _ in outputs for line in out.splitlines() if line.startswith("{"))


def allreduce_ms(gradient_bytes: int, bandwidth: float, n: int) -> float:
    """A ring all-reduce sends and receives 2 (n - 1) / n of the gradients through each link."""
    return 2 * (n - 1) / n * gradient_bytes / bandwidth * 1e3


def cpu_model(compute_ms: float, fixed_ms: float, gradient_bytes: int, bandwidth: float, n: int) -> float:
    """Step milliseconds on n devices from this machine's single-device step: the kernels' time
    divides by n, the host's per-step work does not, and the gradients are all-reduced."""
    return compute_ms / n + fixed_ms + allreduce_ms(gradient_bytes, bandwidth, n)


def gpu_model(measured: dict, batch: int, bandwidth: float) -> dict[int, float]:
    """Step milliseconds on n GPUs, one MPI rank each, for a global `batch`: a rank's measured
    single-GPU step at batch / n (measured: {"step_ms": {batch: ms}}, benchmarks/results/), plus
    the all-reduce. Only the n whose shard was measured."""
    steps = {int(b): ms for b, ms in measured["step_ms"].items()}
    return {n: steps[batch // n] + allreduce_ms(measured["gradient_bytes"], bandwidth, n)
            for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if batch % n == 0 and batch // n in steps}


def efficient_up_to(model: dict[int, float]) -> int:
    """The largest n whose speed-up is at least n / 2 (parallel efficiency 50%)."""
    return max(n for n, ms in model.items() if model[1] / ms / n >= 0.5)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128, help="the global batch, split across the replicas")
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--bandwidth", type=lambda text: [float(b) for b in text.split(",")], default=[25e9, 100e9],
                        help="all-reduce bandwidths in bytes/s for the model of N devices or machines, "
                             "comma-separated (default: 25 and 100 GB/s, a PCIe 4.0 x16 link or a 200 Gb/s "
                             "network, and an 800 Gb/s one)")
    parser.add_argument("--gpu-steps", help="JSON of one GPU's step time by batch (benchmarks/results/"
                        "h100-mlp-step-by-batch.json) for the N-GPU model")
    parser.add_argument("--run", choices=CONFIGS,
                        help="run one configuration in this process (mpi: under mpirun) and print its JSON")
    parser.add_argument("--model", choices=["mlp", "wide", "cnn", "gpt"], default="mlp")
    parser.add_argument("--gpu", action="store_true", help="the first N OpenCL devices (GPUs) and CUDA")
    parser.add_argument("--ranks", type=int, choices=[2, 4, 8], default=2,
                        help="N: DataParallel's devices, MPI's ranks and DDP's processes")
    parser.add_argument("--reduction", choices=["host", "devices"], default="host",
                        help="DataParallel's reduction (clnet.distribute.DataParallel)")
    parser.add_argument("--one-device", action="store_true",
                        help="both replicas (DataParallel: own contexts; MPI: both ranks) on the first device: what "
                             "the reduction costs where two devices are not at hand; no DDP")
    parser.add_argument("--bucket-mb", type=float, default=None,
                        help="MPIDataParallel's bucket_mb: the gradient pieces' least size (default: its own)")
    parser.add_argument("--configs", type=lambda text: text.split(","), default=list(CONFIGS),
                        help="which configurations to run, comma-separated (default: all of "
                             f"{','.join(CONFIGS)}); single, the ratios' and the model's base, always runs")
    args = parser.parse_args(argv)
    if set(args.configs) - set(CONFIGS) or ("torch-ddp" in args.configs and "torch" not in args.configs):
        parser.error(f"--configs: a comma-separated subset of {','.join(CONFIGS)}, torch with torch-ddp (its ratios' "
                     f"base), got {','.join(args.configs)}")
    if args.run:  # a child: one configuration
        result = run_torch(args.run, args) if args.run.startswith("torch") else run_clnet(args.run, args)
        if result["rank"] == 0:
            print(json.dumps(result), flush=True)
        return
    common = ["--epochs", str(args.epochs), "--samples", str(args.samples), "--batch", str(args.batch),
              "--ranks", str(args.ranks),
              "--model", args.model, "--reduction", args.reduction, *(["--gpu"] if args.gpu else []),
              *(["--one-device"] if args.one_device else []),
              *(["--bucket-mb", str(args.bucket_mb)] if args.bucket_mb else [])]
    # Every clnet configuration on pip's PoCL (the README's default device), each replica one core;
    # with --gpu on the first GPU, the first two, or one each.
    n = args.ranks
    pthreads = {"POCL_DEVICES": " ".join(["pthread"] * n), **ONE_CORE}
    one, several = ({"CLNET_DEVICE": "0"}, {}) if args.gpu else ({"CLNET_DEVICE": "pthread"}, pthreads)
    # (--bind-to none: a rank's threads that sum in shared memory may use the host's other cores)
    mpirun = [shutil.which("mpirun") or "mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n),
              "--host", f"127.0.0.1:{n}"]
    if args.one_device:
        several = one
    ranks_env = {**one, **MPI_ENV, **({} if args.gpu else ONE_CORE)}
    runs = {"single": lambda: child(["--run", "single", *common], one),
            "dp": lambda: child(["--run", "dp", *common], several),
            "mpi": lambda: child(["--run", "mpi", *common], ranks_env, mpirun),
            "mpi-bf16": lambda: child(["--run", "mpi-bf16", *common], ranks_env, mpirun),
            "mpi-host": lambda: child(["--run", "mpi-host", *common], ranks_env, mpirun),
            "mpi-flat": lambda: child(["--run", "mpi-flat", *common], ranks_env, mpirun),
            "mpi-flat-bf16": lambda: child(["--run", "mpi-flat-bf16", *common], ranks_env, mpirun),
            "torch": lambda: child(["--run", "torch", *common], {}),
            "torch-ddp": lambda: child(["--run", "torch-ddp", *common],
                                       {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"}, processes=n)}
    if args.one_device:  # NCCL takes one GPU per process
        del runs["torch-ddp"]
    results = [runs[name]() for name in runs if name == "single" or name in args.configs]
    base = {r["framework"]: r["samples_per_second"] for r in results if r["replicas"] == 1}
    print(f"{'configuration':<44}{'samples/s':>11}{'× 1 rank':>9}{'step ms':>9}{'comm. share':>13}")
    devices = ("GPUs" if args.gpu else "PoCL devices") if not args.one_device else "replicas on 1 device"
    labels = {"single": "clnet, 1 device", "dp": f"clnet DataParallel, {n} {devices}",
              "mpi": f"clnet MPIDataParallel, {n} ranks", "mpi-bf16": "  the same, gradients in bfloat16",
              "mpi-host": "  the same, summed on host threads",
              "mpi-flat": "  the same, MPI's all-reduce", "mpi-flat-bf16": "  MPI's all-reduce, in bfloat16",
              "torch": "PyTorch, 1 process",
              "torch-ddp": f"PyTorch DDP ({'NCCL' if args.gpu else 'gloo'}), {n} processes"}
    for r in results:
        comm = ""
        if r["framework"] == "clnet" and r["replicas"] > 1:
            r["communication_share"] = (r["copy_ms"] + r["reduce_ms"]) / r["profiled_step_ms"]
            comm = f"{r['communication_share']:.1%}"
        print(f"{labels[r['config']]:<44}{r['samples_per_second']:>11.0f}"
              f"{r['samples_per_second'] / base[r['framework']]:>9.2f}{r['step_ms']:>9.2f}{comm:>13}")
    single = results[0]
    # The model's compute is the single device's kernel time per step from the profiled epoch; the
    # rest of that epoch's step is the host's (launches, the loss read), which N devices do not divide.
    compute, fixed = single["kernel_ms"], max(single["profiled_step_ms"] - single["kernel_ms"], 0.0)
    models = {}
    for bandwidth in args.bandwidth:
        models[bandwidth] = {n: cpu_model(compute, fixed, single["gradient_bytes"], bandwidth, n)
                             for n in (1, 2, 4, 8, 16, 32)}
        print(f"\nmodel, {single['gradient_bytes'] / 1e6:.2f} MB of gradients all-reduced at "
              f"{bandwidth / 1e9:g} GB/s; compute {compute:.2f} ms/step divided by N, "
              f"{fixed:.2f} ms/step of host work not:")
        show(models[bandwidth])
    result = {"benchmark": "data_parallel", "model": args.model, "gpu": args.gpu, "reduction": args.reduction,
              "ranks": n,
              "batch": args.batch, "epochs": args.epochs, "samples": args.samples,
              "bandwidths": args.bandwidth, "results": results,
              "model_step_ms": models,
              "model_efficient_up_to": {bandwidth: efficient_up_to(model) for bandwidth, model in models.items()}}
    if args.gpu_steps:
        with open(args.gpu_steps) as f:
            measured = json.load(f)
        result["gpu_model_step_ms"] = {}
        for bandwidth in args.bandwidth:
            for batch in (128, 1024, 8192):
                model = gpu_model(measured, batch, bandwidth)
                print(f"\n{measured['device']}, one rank per GPU, global batch {batch}, {bandwidth / 1e9:g} GB/s: "
                      "measured step at batch/N + all-reduce")
                show(model)
                result["gpu_model_step_ms"].setdefault(bandwidth, {})[batch] = model
    emit(result)


def show(model: dict[int, float]) -> None:
    print("  " + "  ".join(f"N={n}: {ms:.2f} ms ({model[1] / ms:.2f}x)" for n, ms in model.items()))
    print(f"  scaling stops paying (parallel efficiency below 50%) beyond N={efficient_up_to(model)}")


if __name__ == "__main__":
    main()
