"""The four CPU benchmarks against PyTorch CPU, each round in fresh processes: one table, one JSON line.

    python -m benchmarks.cpu_table [--rounds 5] [--benchmarks mlp,cnn,lstm,gpt] [--device intel]
                                   [--targets mlp=1.0,cnn=1.2,lstm=1.5,gpt=1.5]

The README's MLP epoch (benchmarks.mlp: 60 000 Fashion-MNIST images, 3 epochs a process), the
Fashion-MNIST CNN epoch (benchmarks.cnn, 12 800 images a process, seconds scaled to 60 000), the
LSTM(128) step (benchmarks.lstm) and the tiny GPT step (benchmarks.tiny_gpt_torch, 60 steps). For
the first three, clnet and PyTorch each run in a fresh process, taking turns, round after round;
the tiny GPT's script trains both from the same weights in one process, a fresh one each round.
Each round's ratio is clnet's time over PyTorch's in that round: one process can be slow on a
shared machine, so a target holds where it holds in every round, not in the median (issue 45).
The table names the host CPU (family, model, vector width) and clnet's device and runtime, so that
numbers from two CPUs are never read as one ratio. `--device` is clnet's (CLNET_DEVICE's values:
an index, "intel", "PoCL 3.1"); PyTorch runs with its own default threads.
"""
from __future__ import annotations

import argparse

from .common import cpu_name, emit, median
from .run_all import run

# name: (what is timed, its unit, module, extra arguments, the JSON field holding a framework's
# time, the factor from that field to the unit)
BENCHMARKS = {
    "mlp": ("README MLP epoch", "s", "benchmarks.mlp", ["--epochs", "3"], "seconds_per_epoch", 1.0),
    "cnn": ("Fashion-MNIST CNN epoch", "s", "benchmarks.cnn", ["--epochs", "3", "--samples", "12800"],
            "seconds_per_epoch", 1.0),
    "lstm": ("LSTM(128) step", "ms", "benchmarks.lstm", [], "seconds_per_step", 1e3),
    "gpt": ("tiny GPT step", "ms", "benchmarks.tiny_gpt_torch", ["--steps", "60"], "ms_per_step", 1.0),
}


def parse_targets(text: str | None) -> dict[str, float]:
    """{"mlp": 1.0, ...} from "mlp=1.0,cnn=1.2"; names must be BENCHMARKS'."""
    targets = {}
    for item in filter(None, (text or "").split(",")):
        name, _, value = item.partition("=")
        if name not in BENCHMARKS:
            raise ValueError(f"--targets: unknown benchmark {name!r} in {item!r}; expected one of {sorted(BENCHMARKS)}")
        try:
            targets[name] = float(value)
        except ValueError:
            raise ValueError(f"--targets: {item!r} needs a number after '=', e.g. {name}=1.0") from None
    return targets


def one_round(name: str, device: str | None) -> tuple[float, float, dict]:
    """(clnet's time, PyTorch's time, clnet's JSON line) of one round of benchmark `name`."""
    _, _, module, extra, field, scale = BENCHMARKS[name]
    device_option = ["--device", device] if device is not None else []
    if name == "gpt":  # both frameworks in one process, from the same weights
        result = run(module, extra + device_option)
        return result["clnet"][field] * scale, result["torch"][field] * scale, result["clnet"]
    clnet = run(module, ["--framework", "clnet", *extra, *device_option])
    torch = run(module, ["--framework", "torch", *extra])  # (each module's PyTorch runs on the CPU by default)
    return clnet[field] * scale, torch[field] * scale, clnet


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS), help="some of " + ",".join(BENCHMARKS))
    parser.add_argument("--device", help="clnet's device: an index or a name, as CLNET_DEVICE takes")
    parser.add_argument("--targets", help="the most clnet's time may be of PyTorch's, e.g. mlp=1.0,cnn=1.2")
    args = parser.parse_args(argv)
    names = args.benchmarks.split(",")
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"--benchmarks: unknown {unknown}; expected some of {sorted(BENCHMARKS)}")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    try:
        targets = parse_targets(args.targets)
    except ValueError as error:
        parser.error(str(error))

    summary, device = {}, None
    for name in names:
        runs = [one_round(name, args.device) for _ in range(args.rounds)]
        device = device or runs[0][2].get("device")
        ratios = [round(c / t, 3) for c, t, _ in runs]
        summary[name] = {"clnet": [round(c, 4) for c, _, _ in runs], "torch": [round(t, 4) for _, t, _ in runs],
                         "ratios": ratios, "median_ratio": round(median(ratios), 3)}
        if name == "mlp":  # the images an epoch held: the README's 60 000 unless the data set was cut
            summary[name]["images"] = runs[0][2]["samples"]
        if name in targets:
            summary[name]["target"] = targets[name]
            summary[name]["rounds_within"] = sum(r <= targets[name] for r in ratios)

    host = cpu_name()
    lines = [f"clnet ÷ PyTorch CPU, {args.rounds} rounds of fresh processes; host CPU: {host}; clnet on {device}", "",
             "| benchmark | clnet | PyTorch | clnet ÷ PyTorch, each round | median | target: rounds within |",
             "| --- | --- | --- | --- | ---: | --- |"]
    fmt = lambda values: ", ".join(f"{v:.3g}" for v in values)
    for name, row in summary.items():
        what, unit = BENCHMARKS[name][:2]
        images = f" ({row['images']} images)" if "images" in row else ""
        held = (f"≤ {row['target']}: {row['rounds_within']} of {args.rounds}" if "target" in row else "—")
        lines.append(f"| {what}{images}, {unit} | {fmt(row['clnet'])} | {fmt(row['torch'])} | "
                     f"{', '.join(f'{r:.2f}' for r in row['ratios'])} | {row['median_ratio']:.2f} | {held} |")
    print("\n".join(lines))
    emit({"benchmark": "cpu_table", "cpu": host, "device": device, "rounds": args.rounds, "results": summary})


if __name__ == "__main__":
    main()
