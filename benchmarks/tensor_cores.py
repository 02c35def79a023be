"""fp32 products on NVIDIA's tensor cores against clnet's tiles and torch.mm, in TFLOP/s and error.

    python -m benchmarks.tensor_cores [--sizes 8192x256x256,8192x256x1024,8192x1024x256,4096] [--device N]

Should clnet's GPU products use tensor cores? OpenCL has no API for them, but NVIDIA's compiler
takes inline PTX, so tensor_cores.cl runs mma.sync on them in three forms: plain TF32 (10-bit
mantissas), 3xTF32 (fp32's accuracy from three TF32 products, as CUTLASS's "fast fp32") and 3xTF32
with each slice's sum added in ordinary fp32 (see the .cl). Each is timed from OpenCL profiling
events (median of 20) at rows x n_in x units, the forward product's shape, beside clnet's forward
(benchmarks.gemm: bias and ReLU included) and torch.mm in fp32 on CUDA; the error is
max |C - C64| / max |C64| for standard normal operands, C64 their product in float64, beside
numpy's float32 product's. Needs an NVIDIA GPU of compute capability 8.0 or later.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from .common import Table, emit_comparison, have_torch, median
from .gemm import clnet_rates, parse_sizes, torch_rates

FORMS = {"tf32": 0, "3xtf32": 1, "3xtf32_exact_adds": 2}
TILE, TK, ITEMS = 128, 16, 256  # as tensor_cores.cl defines them


def tensor_core_device(rt):
    """rt's device, if tensor_cores.cl can run there; otherwise SystemExit saying why."""
    import pyopencl as cl
    device = rt.device
    if device.vendor_id != 0x10DE:
        raise SystemExit(f"benchmarks.tensor_cores needs an NVIDIA GPU; clnet's device is {device.name!r}"
                         " (choose one with --device)")
    try:
        major = device.compute_capability_major_nv
    except cl.Error:
        raise SystemExit(f"{device.name!r} does not report its compute capability (cl_nv_device_attribute_query)")
    if major < 8:
        raise SystemExit(f"{device.name!r} has compute capability {major}.x; mma.sync on TF32 needs 8.0 or later")
    return device


def tensor_core_rates(rt, rows, n_in, units, repeats=20):
    """{form: (TFLOP/s, error)} for C (rows, units) = A (rows, n_in) B (n_in, units)."""
    import pyopencl as cl
    if rows % TILE or units % TILE or n_in % TK:
        raise SystemExit(f"{rows}x{n_in}x{units}: rows and units must be multiples of {TILE}, n_in of {TK}")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((rows, n_in), np.float32), rng.standard_normal((n_in, units), np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    error = lambda c: float(np.abs(c - exact).max() / np.abs(exact).max())
    queue = cl.CommandQueue(rt.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    flags = cl.mem_flags
    a_buf = cl.Buffer(rt.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=a)
    b_buf = cl.Buffer(rt.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=b)
    c_buf = cl.Buffer(rt.context, flags.WRITE_ONLY, rows * units * 4)
    text = (Path(__file__).parent / "tensor_cores.cl").read_text()
    found = {"numpy_float32": (None, error(a @ b))}
    for name, form in FORMS.items():
        kernel = cl.Program(rt.context, text).build(options=[f"-DFORM={form}"]).TensorCoreProduct
        launch = lambda: kernel(queue, (units // TILE * ITEMS, rows // TILE), (ITEMS, 1), a_buf, b_buf, c_buf,
                                np.int32(rows), np.int32(units), np.int32(n_in))
        launch().wait()
        times = []
        for _ in range(repeats):
            event = launch()
            event.wait()
            times.append((event.profile.end - event.profile.start) * 1e-9)
        c = np.empty((rows, units), np.float32)
        cl.enqueue_copy(queue, c, c_buf).wait()
        found[name] = (2.0 * rows * n_in * units / median(times) / 1e12, error(c))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="8192x256x256,8192x256x1024,8192x1024x256,4096",
                        help="rows x n_in x units, or one number for a cube")
    parser.add_argument("--device", help="clnet device index or name")
    args = parser.parse_args(argv)
    import clnet
    if args.device is not None:
        clnet.set_device(args.device)
    rt = clnet.runtime()
    tensor_core_device(rt)
    table = Table([("rows x n_in x units", "<20"), ("clnet", ">8.1f"), ("torch", ">8.1f"), ("tf32", ">8.1f"),
                   ("3xtf32", ">8.1f"), ("exact+", ">8.1f"), ("  err numpy", ">12.1e"), ("tf32", ">9.1e"),
                   ("3xtf32", ">9.1e"), ("exact+", ">9.1e")],
                  "   TFLOP/s; error; exact+: 3xTF32 with exact adds")
    results = []
    for rows, n_in, units in parse_sizes(args.sizes):
        ours = clnet_rates(rows, n_in, units, 10)[0]["forward"] / 1e3
        torch_side = torch_rates(rows, n_in, units, "cuda")["forward"] / 1e3 if have_torch() else None
        cores = tensor_core_rates(rt, rows, n_in, units)
        row = {"size": [rows, n_in, units], "clnet_tflops": round(ours, 2),
               "torch_tflops": round(torch_side, 2) if torch_side else None,
               "numpy_float32_error": cores["numpy_float32"][1]}
        for name in FORMS:
            row[f"{name}_tflops"], row[f"{name}_error"] = round(cores[name][0], 2), cores[name][1]
            row[f"{name}_over_clnet"] = round(cores[name][0] / ours, 3)
        results.append(row)
        table.row(f"{rows}x{n_in}x{units}", ours, torch_side, *(cores[n][0] for n in FORMS),
                  cores["numpy_float32"][1], *(cores[n][1] for n in FORMS))
    emit_comparison("tensor_cores", results, "cuda")


if __name__ == "__main__":
    main()
