"""The host's cost of one kernel launch with its arguments by position and by name.

    python -m benchmarks.launch_cost [--calls 100000] [--repeats 3] [--device D]

The loss kernel (CalcOutputGradient, 17 arguments) launched with the enqueue itself replaced by a
no-op, so that only what clnet and pyopencl do on the host is timed: the same arguments each call,
as a training step's launches mostly are; by position, by name, and bound by name once
(Kernel.bind) with eight given at each launch, as a training step gives them. Prints one table and a JSON line (microseconds a call).
"""
from __future__ import annotations

import argparse
import timeit

import numpy as np

from .common import Table, emit, versions


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None, help="clnet's device (CLNET_DEVICE's forms)")
    args = parser.parse_args()

    import clnet
    import clnet.losses
    from clnet.cl import runtime as cl_runtime
    from clnet.cl.tensor import Tensor

    if args.device is not None:
        clnet.set_device(args.device)
    rt = clnet.runtime()
    kernel = rt.kernel(clnet.losses.get("sparse_categorical_crossentropy").program(rt, np.float32),
                       "CalcOutputGradient", np.float32)
    t, h = Tensor((4, 8), np.float32, rt), Tensor((4,), np.float32, rt)
    values = (t, t, t, h, h, 0, 1, 1, 8, 2, 1, 0.25, h, 0, h, 0, h)
    named = dict(zip(kernel.names, values))
    kernel((4,), (4,), *values)
    cl_runtime.cl.enqueue_nd_range_kernel = lambda *a, **k: None  # the host's side alone
    # Bound once, as Step binds it: a step gives the eight that may change by position.
    varying = ("target", "outputs", "first", "unweighted_scale", "row_weights", "weighted", "mask", "masked")
    bound = kernel.bind(varying, **{k: v for k, v in named.items() if k not in varying})
    step = tuple(named[k] for k in varying)
    forms = {"by position": lambda: kernel((4,), (4,), *values),
             "by name": lambda: kernel((4,), (4,), **named),
             "bound": lambda: bound((4,), (4,), *step)}
    table = Table([("form", "<13"), *[(f"repeat {i + 1} us", ">13.2f") for i in range(args.repeats)]])
    results = {}
    for form, call in forms.items():
        results[form] = [timeit.timeit(call, number=args.calls) / args.calls * 1e6 for _ in range(args.repeats)]
        table.row(form, *results[form])
    emit({"benchmark": "launch_cost", "device": f"{rt.info.name} [{rt.info.platform_version.strip()}]",
          "arguments": kernel.arity, "microseconds": results, "versions": versions("clnet", "pyopencl")})


if __name__ == "__main__":
    main()
