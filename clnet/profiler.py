"""clnet.profile(): OpenCL profiling events per kernel, printed as one table."""
from __future__ import annotations

import sys
from collections import defaultdict
from contextlib import contextmanager

from .cl.runtime import runtime


class Profile:
    """The kernels one profile() block launched on `device` (its description)."""

    def __init__(self, device: str):
        self.device = device
        self.rows: dict[str, list[float]] = {}  # kernel -> [calls, seconds, flops]

    def collect(self, events) -> None:
        totals = defaultdict(lambda: [0, 0.0, 0.0])
        for name, event, flops in events:
            row = totals[name]
            row[0] += 1
            row[1] += (event.profile.end - event.profile.start) * 1e-9
            row[2] += flops
        self.rows = dict(totals)

    @property
    def total_seconds(self) -> float:
        return sum(row[1] for row in self.rows.values())

    def table(self) -> str:
        total = self.total_seconds
        lines = [f"{'kernel':<24}{'calls':>8}{'total ms':>11}{'share':>8}{'GFLOP/s':>10}"]
        for name, (calls, seconds, flops) in sorted(self.rows.items(), key=lambda kv: -kv[1][1]):
            rate = f"{flops / seconds / 1e9:10.1f}" if flops and seconds else f"{'':>10}"
            lines.append(f"{name:<24}{calls:>8}{seconds * 1e3:>11.2f}{seconds / total if total else 0:>8.1%}{rate}")
        lines.append(f"{'total':<24}{sum(r[0] for r in self.rows.values()):>8}{total * 1e3:>11.2f}")
        if not self.rows:
            lines.append(f"(no kernel ran on {self.device} inside the block: a model on another device, such as a "
                         "DataParallel's replicas outside strategy.scope(), is not profiled)")
        return "\n".join(lines)


@contextmanager
def profile(print_table: bool = True, file=None):
    """Record every kernel launched inside the block; on exit print (and keep) the table.

        with clnet.profile() as p:
            model.fit(x, y, epochs=1)
        p.rows  # {kernel: [calls, seconds, flops]}
    """
    rt = runtime()
    rt.events.clear()
    rt.set_profiling(True)
    result = Profile(rt.info.describe())
    try:
        yield result
    finally:
        rt.queue.finish()
        result.collect(rt.events)
        rt.events.clear()
        rt.set_profiling(False)
        if print_table:
            print(result.table(), file=file or sys.stderr)
