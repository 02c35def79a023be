"""Tuned kernel parameters, measured once per (device, driver, dtype, clnet version) and kept
on disk in $CLNET_CACHE_DIR/tuning.json (default ~/.cache/clnet), so later runs start fast.
Processes that tune at once (MPI ranks) each add their results to the file under a lock
(cache.update_json), so that none is lost and measured again by the next run.

CLNET_TUNE=0 skips measuring and uses each kernel family's defaults (results already cached
are still used)."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import numpy as np

from .._version import __version__
from ..cache import cache_dir, read_json, update_json
from .runtime import Runtime, read_source

_memory: dict[str, dict] = {}


def _key(rt: Runtime, dtype, family: str, sources: tuple[str, ...], settings) -> str:
    info = rt.info
    # The kernels' text and the tuner's settings are part of the key: a changed kernel, or a
    # changed list to choose from or of sizes to measure, is measured again.
    text = "".join(read_source(name) for name in sources) + json.dumps(settings, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return (f"{family}|{info.name}|{info.platform_version.strip()}|{info.driver}|{np.dtype(dtype).name}"
            f"|clnet {__version__}|{digest}")


def tuned(rt: Runtime, dtype, family: str, sources: tuple[str, ...], tune, default, settings=()):
    """The cached result of `tune()` for this device, dtype, kernel text and tuner settings (what
    it chooses among and measures, as JSON); measured and stored if missing."""
    key = _key(rt, dtype, family, sources, settings)
    if key in _memory:
        return _memory[key]
    path = cache_dir() / "tuning.json"
    stored = read_json(path)
    if key in stored:
        result = stored[key]
    elif os.environ.get("CLNET_TUNE") == "0":
        result = default
    else:
        if not os.environ.get("CLNET_QUIET"):
            print(f"clnet: tuning {family} kernels for {rt.info.name} ({np.dtype(dtype).name}), once",
                  file=sys.stderr)
        result = tune()
        try:
            update_json(path, {key: result})
        except OSError as error:  # a read-only cache costs a re-tune next time, not a failure
            print(f"clnet: could not save tuning results to {path}: {error}", file=sys.stderr)
    _memory[key] = result
    return result


def best_seconds(rt: Runtime, run, repeats=5) -> float:
    """The fewest seconds `run` (which enqueues work on rt's queues) took of `repeats` calls, each
    timed until the device has finished it (the side queue's work too), after one call that builds
    and warms up what it needs: what a tuner compares its candidates by."""
    run()
    rt.finish()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        rt.finish()
        best = min(best, time.perf_counter() - started)
    return best


def kernel_times(rt: Runtime, run, repeats=5) -> dict[str, float]:
    """The device time of `run`'s kernels by OpenCL's profiling events, by kernel name: each
    launch's least time over `repeats` calls, summed over the launches of a name, after one call
    that builds and warms up. What a CPU's dense tuner compares by: the wall clock of a whole
    backward pass, less that of one without the input gradient, hid a measurably faster input
    gradient (HG_T) at 1024^3 on Intel's runtime, its launch gaps and its weight gradient's spread
    as large as the difference. Not where work runs beside (a GPU's side queue), which profiling
    puts on one queue."""
    was_profiling, kept = rt.profiling, list(rt.events)
    rt.set_profiling(True)
    try:
        run()
        rt.finish()
        best: dict[tuple[int, str], float] = {}
        for _ in range(repeats):
            rt.events.clear()
            run()
            rt.finish()
            for index, (name, event, _) in enumerate(rt.events):
                seconds = (event.profile.end - event.profile.start) * 1e-9
                best[index, name] = min(best.get((index, name), float("inf")), seconds)
        times: dict[str, float] = {}
        for (_, name), seconds in best.items():
            times[name] = times.get(name, 0.0) + seconds
        return times
    finally:
        rt.events[:] = kept
        rt.set_profiling(was_profiling)
