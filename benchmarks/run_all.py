"""Every framework's MLP benchmark, alternating, then the GEMM benchmark: one table, one JSON line.

    python -m benchmarks.run_all [--rounds 2] [--epochs 3] [--frameworks clnet,torch,torch-fused,numpy,tinygrad]
                                 [--torch-device cpu|cuda] [--out table.md]

Each run is a fresh process, and the frameworks take turns round after round, so that a noisy
machine slows all of them alike; the table reports medians and the ratio to clnet.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict

from .common import cpu_name, emit, median

RUNS = {
    "clnet": ["--framework", "clnet"],
    "torch": ["--framework", "torch"],
    "torch-fused": ["--framework", "torch", "--fused"],
    "numpy": ["--framework", "numpy"],
    "tinygrad": ["--framework", "tinygrad"],
}


def run(module: str, arguments: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", module, *arguments], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(arguments)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--frameworks", default=",".join(RUNS))
    parser.add_argument("--torch-device", default="cpu")
    parser.add_argument("--gemm-sizes", default="128x784x256,1024,2048")
    parser.add_argument("--out", help="also write the table (Markdown) to this file")
    args = parser.parse_args(argv)
    names = args.frameworks.split(",")
    results = defaultdict(list)
    for _ in range(args.rounds):
        for name in names:
            extra = ["--device", args.torch_device] if name.startswith("torch") else []
            results[name].append(run("benchmarks.mlp", RUNS[name] + extra + ["--epochs", str(args.epochs),
                                                                           "--batch", str(args.batch)]))
    gemm = run("benchmarks.gemm", ["--sizes", args.gemm_sizes, "--torch-device", args.torch_device])

    base = median(r["seconds_per_epoch"] for r in results["clnet"]) if "clnet" in results else None
    host = f"host CPU: {cpu_name()}"  # in every table: numbers from two CPUs are never one ratio
    lines = [f"MLP 784-256-128-10, Adam 1e-3, batch {args.batch}, {args.epochs} epochs per run, "
             f"{args.rounds} rounds (medians); {host}", "",
             "| framework | device | s/epoch | × clnet's time | test accuracy |", "| --- | --- | ---: | ---: | ---: |"]
    summary = {}
    for name in names:
        seconds = median(r["seconds_per_epoch"] for r in results[name])
        accuracy = median(r["test_accuracy"] for r in results[name])
        ratio = seconds / base if base else float("nan")
        summary[name] = {"seconds_per_epoch": seconds, "over_clnet": round(ratio, 3), "test_accuracy": accuracy,
                         "device": results[name][0]["device"], "runs": [r["seconds_per_epoch"] for r in results[name]],
                         "versions": results[name][0]["versions"]}
        lines.append(f"| {name} | {results[name][0]['device']} | {seconds:.3f} | {ratio:.2f} | {accuracy:.4f} |")
    lines += ["", f"Dense products, GFLOP/s, on {gemm['device']}; {host}", "",
              "| rows × in × units | product | clnet | numpy | torch | clnet/numpy | clnet/torch | clnet's tiles |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in gemm["results"]:
        size = "×".join(map(str, row["size"]))
        lines.append(f"| {size} | {row['product']} | {row['clnet']} | {row['numpy']} | {row['torch']} | "
                     f"{row['clnet_over_numpy']:.2f} | {row['clnet_over_torch'] if row['clnet_over_torch'] is not None else '-'} | "
                     f"{' '.join(f'{k}={v}' for k, v in row['tiles'].items())} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    # Versions as the child processes that ran each framework saw them (a GPU run's torch is not
    # necessarily the parent's).
    found = {}
    for versions in [s["versions"] for s in summary.values()] + [gemm["versions"]]:
        found.update({k: v for k, v in versions.items() if v is not None})
    emit({"benchmark": "run_all", "cpu": cpu_name(), "mlp": summary, "gemm": gemm["results"],
          "gemm_device": gemm["device"], "versions": found})


if __name__ == "__main__":
    main()
