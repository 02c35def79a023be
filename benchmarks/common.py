"""What the benchmarks share: the data, the device string, versions, medians, tables and the JSON line."""
from __future__ import annotations

import importlib.util
import json
import platform
import re
import statistics
import subprocess
import sys
import time


def fashion_mnist():
    """float32 images scaled to [0, 1] (flattened) and int64 labels, as every framework gets them."""
    from clnet.datasets import fashion_mnist
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data()
    scale = lambda x: (x.reshape(len(x), -1) / 255.0).astype("float32")
    return (scale(x_train), y_train.astype("int64")), (scale(x_test), y_test.astype("int64"))


def cpu_name() -> str:
    """The host CPU as results name it: its model name, and where /proc/cpuinfo tells them its
    family and model and widest vector instructions (a cloud's "AMD EPYC" is a Zen 3, 4 or 5 by
    family and model alone), so that numbers from two CPUs are never read as one ratio."""
    from clnet.cl.device import host_cpu
    cpu = host_cpu()
    name = cpu.get("model name") or platform.processor() or platform.machine()
    if "cpu family" not in cpu:
        return name
    flags = cpu["flags"]
    vectors = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{name} (family {cpu['cpu family']}, model {cpu.get('model', '?')}, {vectors})"


def device_name(info) -> str:
    """A clnet device as the results name it: its name and its OpenCL platform's version."""
    return f"{info.name} [{info.platform_version.strip()}]"


def have_torch() -> bool:
    """Whether PyTorch is installed; without it, its columns are left empty (None)."""
    return importlib.util.find_spec("torch") is not None


def versions(*modules: str) -> dict:
    found = {"python": platform.python_version()}
    for name in modules:
        try:
            found[name] = __import__(name).__version__
        except Exception:  # not installed: the result says so
            found[name] = None
    return found


def median(values) -> float:
    return statistics.median(values)


def emit(result: dict) -> None:
    """The one JSON line a benchmark prints last."""
    print(json.dumps(result, sort_keys=True), file=sys.stdout, flush=True)


def emit_comparison(benchmark: str, results: list[dict], torch_device: str, **fields) -> None:
    """The JSON line of a benchmark that compares clnet with numpy and PyTorch: its result rows,
    clnet's device, the CPU, PyTorch's device and the three versions, and any other `fields`."""
    import clnet
    emit({"benchmark": benchmark, "device": device_name(clnet.runtime().info), "cpu": cpu_name(),
          "torch_device": torch_device, "results": results, "versions": versions("clnet", "numpy", "torch"),
          **fields})


class Table:
    """A fixed-width text table, printed a row at a time as the results come in. `columns` are
    (title, format spec) pairs, such as ("clnet ms", ">10.3f"); a title takes its spec's alignment
    and width, and a missing value (None: PyTorch not installed, a case not run) prints as nan.
    `note` follows the header (the unit of the numbers)."""

    def __init__(self, columns: list[tuple[str, str]], note: str = ""):
        self.specs = [spec for _, spec in columns]
        print("".join(format(title, re.match(r"[<>^]?[0-9]*", spec).group()) for title, spec in columns) + note)

    def row(self, *values) -> None:
        print("".join(f"{float('nan') if value is None else value:{spec}}"
                      for value, spec in zip(values, self.specs, strict=True)))


def seconds(run, sync=lambda: None, budget=1.0, least=3) -> float:
    """Median seconds of `run` (after one warm-up call), repeated for at least `least` calls and
    `budget` seconds; `sync` waits for the device after each call."""
    run()
    sync()
    times = []
    started = time.perf_counter()
    while len(times) < least or time.perf_counter() - started < budget:
        t = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - t)
    return median(times)


def clnet_epoch_timer(times: list):
    """A clnet callback appending each epoch's seconds to `times`: the queue is drained when an
    epoch begins, and its last progress read has waited for the device when it ends."""
    import clnet
    from clnet.callbacks import Callback

    class EpochTimer(Callback):
        def on_epoch_begin(self, epoch, logs=None):
            clnet.runtime().queue.finish()
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.started)

    return EpochTimer()


def alternate_runs(module: str, frameworks, args, options: list[str]) -> dict[str, list[dict]]:
    """Each framework's JSON line from `python -m <module> --framework NAME <options>`, in fresh
    processes taking turns for args.rounds rounds; clnet gets args.device, torch args.torch_device."""
    results = {name: [] for name in frameworks}
    for _ in range(args.rounds):
        for name in frameworks:
            command = [sys.executable, "-m", module, "--framework", name, *options]
            if args.device is not None and name == "clnet":
                command += ["--device", args.device]
            if name == "torch":
                command += ["--torch-device", args.torch_device]
            out = subprocess.run(command, capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed:\n{out.stderr[-3000:]}")
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return results


def cuda_graph_steps(torch, train_step, samples: int, batch: int, device):
    """The whole training step captured once per batch size (the full batch and the epoch's last,
    shorter one) and replayed: the strongest PyTorch step there is, with no Python per kernel. A
    replay reads the batch's indices from a static buffer, as a captured graph must."""
    graphs = {}
    for rows in sorted({batch, samples % batch} - {0}):
        index = torch.arange(rows, device=device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph, as torch's documentation asks
            for _ in range(3):
                train_step(index)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            train_step(index)
        graphs[rows] = (graph, index)

    def step(order_slice):
        graph, index = graphs[len(order_slice)]
        index.copy_(order_slice)
        graph.replay()
    return step
