"""Where a clnet training step's time goes: wall time per step, device time per kernel, launches
per step, and the host's Python time by function (cProfile), for the README's MLP.

    python -m benchmarks.step_profile [--batch 128 1024] [--epochs 2]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

from .common import clnet_epoch_timer, emit, fashion_mnist, median


def main(argv=None):
    import clnet
    from clnet.layers import Dense, Input

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 128, 1024])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    (x, y), _ = fashion_mnist()
    rt = clnet.runtime()
    for batch in args.batch:
        model = clnet.Sequential([Input((784,)), Dense(256, "relu"), Dense(128, "relu"), Dense(10, "softmax")], seed=0)
        model.compile(clnet.optimizers.Adam(1e-3), "categorical_crossentropy", ["accuracy"])
        times = []
        model.fit(x, y, batch_size=batch, epochs=args.epochs, verbose=0, callbacks=[clnet_epoch_timer(times)])
        steps = -(-len(x) // batch)
        before = rt.launches
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
        launches = (rt.launches - before) / steps
        with clnet.profile(print_table=False) as p:
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
        profiler = cProfile.Profile()
        rt.queue.finish()
        started = time.perf_counter()
        profiler.enable()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
        profiler.disable()
        profiled = time.perf_counter() - started
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
        epoch = median(times[1:] or times)
        print(f"== batch {batch}: {epoch:.4f} s/epoch, {epoch / steps * 1e6:.1f} us/step, {launches:.2f} launches/step, "
              f"kernels {p.total_seconds / steps * 1e6:.1f} us/step (profiled)")
        print(p.table())
        print(out.getvalue())
        emit({"benchmark": "step_profile", "batch": batch, "seconds_per_epoch": round(epoch, 4),
              "us_per_step": round(epoch / steps * 1e6, 1), "launches_per_step": launches,
              "kernel_us_per_step": round(p.total_seconds / steps * 1e6, 1),
              "cprofile_epoch_seconds": round(profiled, 4), "device": rt.info.name})


if __name__ == "__main__":
    main()
