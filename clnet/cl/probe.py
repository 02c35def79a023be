"""Which CPU runtime runs our kernels fastest, measured rather than guessed from version strings.

With two or more OpenCL runtimes for the CPU (pip's PoCL 3.0, Debian's PoCL, Intel's runtime
from `clnet[intel]`), the default device is the one that trains fastest: each runs one training
step's products of the README's first layer (Dense 784 -> 256, relu, batch 128: forward, weight
and input gradient, 4 launches) with its untuned default tiles, and the smallest time wins. The
times are kept in $CLNET_CACHE_DIR/devices.json (default ~/.cache/clnet), keyed like tuning.json
by device, driver, clnet version and kernel text, so the probe runs once per machine and its
runtimes, about a second each plus the first compile. Each runtime is timed as fit runs it: with
a virtual machine's cores kept awake for PoCL (awake.py), which would otherwise be timed at the
half speed of vCPUs waking through the hypervisor.

The step itself is the products room's (clnet.products, above cl/ on the ladder): it hands this
module its measure and the sources it reads (measure_with) when it is imported, as `import clnet`
does.
"""
from __future__ import annotations

import hashlib
import os
import sys

from .._version import __version__
from ..cache import cache_dir, read_json, update_json
from . import awake
from .device import DeviceInfo

SIZE = (128, 784, 256)  # (batch, inputs, units)
METHOD = "cores kept awake"  # in the cache key: times taken another way are taken again
_measure = None    # DeviceInfo -> seconds of the probe step (see measure_with)
_sources: tuple[str, ...] = ()


def measure_with(measure, sources: tuple[str, ...]) -> None:
    """Have the probe time `measure(info)`, one training step's products of a SIZE layer, whose
    kernels come from `sources` (the cache key's digest reads them)."""
    global _measure, _sources
    _measure, _sources = measure, tuple(sources)


def _key(info: DeviceInfo) -> str:
    from .runtime import read_source
    digest = hashlib.sha256("".join(read_source(name) for name in _sources).encode()).hexdigest()[:12]
    return f"{info.name}|{info.platform_version.strip()}|{info.driver}|clnet {__version__}|{digest}|{METHOD}"


def step_seconds(info: DeviceInfo) -> float:
    """Seconds for one forward and backward pass of the probe layer on this device (best of 5 runs
    of 10 steps, after one that compiles), with the cores kept awake where fit keeps them."""
    if _measure is None:
        raise RuntimeError("the CPU runtime probe times clnet.products' kernels: import clnet (or clnet.products) "
                           "before choosing among CPU runtimes")
    with awake.keep_awake(info):
        return _measure(info)


def fastest(candidates: list[DeviceInfo]) -> tuple[DeviceInfo, dict[int, float]]:
    """The candidate with the shortest probe step, and every candidate's seconds (by index);
    measured where the cache has no entry."""
    path = cache_dir() / "devices.json"
    stored = read_json(path)
    seconds, measured = {}, {}
    for info in candidates:
        key = _key(info)
        if key not in stored:
            if not os.environ.get("CLNET_QUIET"):
                print(f"clnet: measuring {info.describe()} to choose the CPU runtime, once", file=sys.stderr)
            try:
                stored[key] = measured[key] = step_seconds(info)
            except Exception as error:  # a runtime that cannot run the probe is not chosen
                print(f"clnet: {info.name} failed the probe: {error}", file=sys.stderr)
                stored[key] = measured[key] = float("inf")
        seconds[info.index] = stored[key]
    if measured:
        try:
            update_json(path, measured)
        except OSError as error:  # unsaved: measured again next time
            print(f"clnet: could not save the runtime probe to {path}: {error}", file=sys.stderr)
    return min(candidates, key=lambda d: (seconds[d.index], d.index)), seconds
