"""Whether a device's half arithmetic (cl_khr_fp16) is faster than its float: GFLOP/s of the same
chains of multiply-adds on half16 and on float16 vectors, numpy's and PyTorch CPU's float16 and
float32 beside.

    python -m benchmarks.half_arithmetic [--device N] [--iterations 2000]

A 16-bit dtype policy could compute in half where this says half pays; on the CPUs measured
(benchmarks/RESULTS.md) Intel's runtime, the one CPU runtime with cl_khr_fp16, runs half at a
fraction of float's rate, so clnet computes such a policy in float32 on every CPU (`clnet devices`'
16-bit column). Each work-item runs four dependent chains of `fma` on 16-wide vectors, from values
that stay small; the rate counts 2 flops a lane a multiply-add. numpy's and PyTorch's rates are the
same chains on arrays of the same size (a tenth of the iterations), for scale: whether the host's
own libraries find half faster than float on this CPU.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from .common import Table, cpu_name, device_name, emit, have_torch, median

SOURCE = """
#ifdef HALF
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif
__kernel void Chains(__global T16 *x, const int iterations)
{
    const int i = get_global_id(0);
    T16 a = x[i], b = a * (T)0.5f, c = a + (T)1.0f, d = b - c, e = a * a;
    for (int k = 0; k < iterations; k++) {
        a = fma(a, b, c);
        d = fma(d, b, c);
        e = fma(e, b, c);
        b = fma(b, c, a);
    }
    x[i] = a + d + e + b;
}
"""
WORK_ITEMS = 4096


def device_rate(rt, dtype, iterations: int, repeats: int = 5) -> float:
    """GFLOP/s of Chains on `dtype` (float16 builds it in half) on runtime `rt`'s device."""
    import pyopencl as cl
    half = dtype == np.float16
    options = ["-DT=half", "-DT16=half16", "-DHALF"] if half else ["-DT=float", "-DT16=float16"]
    kernel = cl.Program(rt.context, SOURCE).build(options=options).Chains
    x = np.full(WORK_ITEMS * 16, 0.001, dtype)
    buffer = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    kernel(rt.queue, (WORK_ITEMS,), None, buffer, np.int32(iterations))
    rt.queue.finish()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        kernel(rt.queue, (WORK_ITEMS,), None, buffer, np.int32(iterations))
        rt.queue.finish()
        times.append(time.perf_counter() - started)
    return WORK_ITEMS * 16 * iterations * 4 * 2 / median(times) / 1e9


def host_rate(full, iterations: int) -> float:
    """The same chains on WORK_ITEMS * 16 elements from `full(size, value)` (numpy's or PyTorch's
    arrays of one type), a tenth of the iterations."""
    a = full(WORK_ITEMS * 16, 0.001)
    b, c = a * 0.5, a + 1
    d, e = b - c, a * a
    steps = max(1, iterations // 10)
    started = time.perf_counter()
    for _ in range(steps):
        a = a * b + c
        d = d * b + c
        e = e * b + c
        b = b * c + a
    return WORK_ITEMS * 16 * steps * 4 * 2 / (time.perf_counter() - started) / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", help="clnet device index or name")
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.iterations < 1:
        parser.error(f"--iterations must be at least 1, got {args.iterations}")
    import clnet

    if args.device is not None:
        clnet.set_device(args.device)
    rt = clnet.runtime()
    if not rt.info.fp16:
        parser.error(f"{rt.info.describe()} has no half arithmetic (cl_khr_fp16): nothing to compare; "
                     "`python -m clnet devices` lists which devices have it (--device chooses one)")
    types = {"float": (np.float32, "float32"), "half": (np.float16, "float16")}
    rates = {name: device_rate(rt, t, args.iterations) for name, (t, _) in types.items()}
    numpy = {name: host_rate(lambda size, value: np.full(size, value, t), args.iterations) for name, (t, _) in types.items()}
    torch = {name: None for name in types}
    if have_torch():
        import torch as pt
        torch = {name: host_rate(lambda size, value: pt.full((size,), value, dtype=getattr(pt, t)), args.iterations)
                 for name, (_, t) in types.items()}
    print(f"clnet's device: {device_name(rt.info)}; host CPU: {cpu_name()}")
    table = Table([("type", "<6"), ("clnet GFLOP/s", ">14.1f"), ("numpy GFLOP/s", ">14.2f"), ("torch GFLOP/s", ">14.2f")])
    for name in types:
        table.row(name, rates[name], numpy[name], torch[name])
    ratio = lambda r: round(r["half"] / r["float"], 3) if r["half"] is not None else None
    print(f"half ÷ float: clnet's device {ratio(rates)}, numpy {ratio(numpy)}, PyTorch CPU {ratio(torch)}")
    emit({"benchmark": "half_arithmetic", "device": device_name(rt.info), "cpu": cpu_name(), "iterations": args.iterations,
          "gflops": {side: {k: v if v is None else round(v, 2) for k, v in r.items()}
                     for side, r in (("clnet", rates), ("numpy", numpy), ("torch", torch))},
          "half_over_float": {"clnet": ratio(rates), "numpy": ratio(numpy), "torch": ratio(torch)}})


if __name__ == "__main__":
    main()
