"""The dense products on NVIDIA's tensor cores against the CUDA cores and torch.mm: TFLOP/s and error.

    python -m benchmarks.tensor_cores [--sizes 8192x256x256,8192x256x1024,8192x1024x256,4096] [--device N]

For each rows x n_in x units, a linear Dense layer in fixed forms of the same 128-square tiles:
the CUDA cores', the tensor cores' (products/mma.cl's form, 3xTF32) and, on Hopper (compute
capability 9.0), the warpgroup form (WGMMA, 3xTF32 with wgmma), and the MMA and WGMMA forms' 16-bit
products (mma_half.cl, wgmma_half.cl: operands rounded to bfloat16 or float16, what a
mixed-precision policy's Dense layers may run), and bfloat16 products of operands stored in 16 bits
(products/sixteen_bit.cl: what cuBLAS's bfloat16 products read; a 16-bit policy's large Dense
layers run it), each product
timed from OpenCL profiling events (median of single products); torch.mm
on CUDA in fp32, in TF32 (allow_tf32, one TF32 product: what PyTorch offers for speed), and on
bfloat16 and float16 tensors (cuBLAS's 16-bit products, what autocast runs). The error of each clnet product
is max |C - C64| / max |C64| for standard normal operands, C64 the product in float64, beside
numpy's float32 product's. Needs an NVIDIA GPU of compute capability 8.0 or later.

The forms PTX allows and clnet does not use (one TF32 product; 3xTF32 summed on the tensor cores
alone) were measured with this file's first version, commit c63b297 (RESULTS.md, 2026-11-24).
"""
from __future__ import annotations

import argparse

import numpy as np

from .common import Table, emit_comparison, have_torch
from .gemm import KERNELS, parse_sizes, product_rates, torch_rates

FORMS = {"cuda_cores": {"VW": 4, "TILE": 128, "WPT": 8, "TK": 16},
         "tensor_cores": {"VW": 4, "TILE": 128, "WPT": 8, "TK": 16, "MMA": 1},
         "warpgroup": {"VW": 4, "TILE": 128, "WPT": 8, "TK": 16, "WGMMA": 1},  # Hopper only
         "bfloat16": {"VW": 4, "TILE": 128, "WPT": 8, "TK": 16, "MMA": 1, "HALF": 1},
         "float16": {"VW": 4, "TILE": 128, "WPT": 8, "TK": 16, "MMA": 1, "HALF": 2},
         "warpgroup_bfloat16": {"VW": 4, "TILE": 128, "WPT": 8, "TK": 32, "WGMMA": 1, "HALF": 1},  # Hopper only
         "warpgroup_float16": {"VW": 4, "TILE": 128, "WPT": 8, "TK": 32, "WGMMA": 1, "HALF": 2}}


def clnet_products(tiles, x, w, dz, exact, repeats=10):
    """{product: (TFLOP/s, error)} of a linear Dense with these tiles, weights w, input x and
    output gradient dz; `exact`: the products in float64."""
    import clnet
    from clnet.cl.parameters import ParameterStore
    from clnet.layers import Dense

    rows, n_in = x.shape
    units = w.shape[1]
    store = ParameterStore(clnet.runtime(), np.float32)
    layer = Dense(units, tiles=tiles)
    layer.build((n_in,), store, np.random.default_rng(0))
    store.allocate()
    layer.allocate(rows)
    layer.set_weights([w, np.zeros(units)])
    x_t, dz_t = clnet.Tensor.from_numpy(x), clnet.Tensor.from_numpy(dz)
    rates = product_rates(layer, x_t, dz_t, repeats)
    z = layer.forward(x_t, rows).numpy()
    dx = layer.backward(dz_t, rows, True).numpy()
    got = {"forward": z, "weight_grad": layer.gradients()[0], "input_grad": dx}
    return {key: (rates[key] / 1e3, error(got[key], exact[key])) for key in KERNELS}


def stored_products(half, x, w, dz, exact, repeats=10):
    """{product: (TFLOP/s, error)} of the three products with x, w and dz stored in `half`
    (SixteenBitPlan), rounded to it on the device first."""
    import clnet
    from clnet.cl.tensor import Tensor
    from clnet.products import SixteenBitPlan
    from clnet.products.sixteen_bit import operand

    rows, n_in = x.shape
    units = w.shape[1]
    rt = clnet.runtime()
    plan = SixteenBitPlan(rt, half, n_in, units)
    x16, w16, dz16 = (operand(rt, *a.shape) for a in (x, w, dz))
    for source, target in zip((x, w, dz), (x16, w16, dz16)):
        plan.round(Tensor.from_numpy(source), target)
    z, grad, dx = Tensor((rows, units), np.float32), Tensor((n_in, units), np.float32), Tensor((rows, n_in), np.float32)
    launches = {"forward": lambda: plan.forward(x16, w16, z, rows),
                "weight_grad": lambda: plan.weight_gradient(x16, dz16, grad, rows),
                "input_grad": lambda: plan.input_gradient(dz16, w16, dx, rows)}
    flops = 2.0 * rows * n_in * units
    rates = {}
    for key, launch in launches.items():
        launch()
        taken = []
        for _ in range(repeats):
            with clnet.profile(print_table=False) as profile:
                launch()
            taken.append(sum(row[1] for row in profile.rows.values()))  # (a split product's SumSlices too)
        rates[key] = flops / float(np.median(taken)) / 1e12
    got = {"forward": z.numpy(), "weight_grad": grad.numpy(), "input_grad": dx.numpy()}
    return {key: (rates[key], error(got[key], exact[key])) for key in KERNELS}


def products(x, w, dz) -> dict:
    """The three products, as numpy computes them in the operands' float type."""
    return {"forward": x @ w, "weight_grad": x.T @ dz, "input_grad": dz @ w.T}


def error(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


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
    if not rt.info.tensor_cores:
        raise SystemExit(f"benchmarks.tensor_cores needs an NVIDIA GPU of compute capability 8.0 or later; "
                         f"clnet's device is {rt.info.name!r} (choose one with --device)")
    forms = [name for name in FORMS if not name.startswith("warpgroup") or rt.info.warpgroup_products]
    forms += ["stored_bfloat16"] * rt.info.warpgroup_products
    columns = {"cuda_cores": "cuda", "tensor_cores": "mma", "warpgroup": "wgmma", "bfloat16": "bf16",
               "float16": "f16", "warpgroup_bfloat16": "wg.bf16", "warpgroup_float16": "wg.f16",
               "stored_bfloat16": "st.bf16"}
    table = Table([("rows x n_in x units", "<20"), ("product", "<13")]
                  + [(columns[name], ">7.1f") for name in forms]
                  + [("torch", ">7.1f"), ("tf32", ">7.1f"), ("t.bf16", ">7.1f"), ("t.f16", ">7.1f")]
                  + [(f"err {columns[name]}", ">10.1e") for name in forms] + [("numpy", ">9.1e")],
                  f"   TFLOP/s: clnet's {', '.join(columns[name] for name in forms)} forms, torch.mm fp32 / TF32 / "
                  "bfloat16 / float16; errors")
    results = []
    for rows, n_in, units in parse_sizes(args.sizes):
        rng = np.random.default_rng(0)
        x, w, dz = (rng.standard_normal(s, np.float32) for s in ((rows, n_in), (n_in, units), (rows, units)))
        exact = products(*(a.astype(np.float64) for a in (x, w, dz)))
        ours = {name: stored_products("bfloat16", x, w, dz, exact) if name == "stored_bfloat16"
                else clnet_products(FORMS[name], x, w, dz, exact) for name in forms}
        fp32, tf32 = (torch_rates(rows, n_in, units, "cuda", tf32=allowed) if have_torch() else {}
                      for allowed in (False, True))
        bf16, f16 = (torch_rates(rows, n_in, units, "cuda", dtype=dtype) if have_torch() else {}
                     for dtype in ("bfloat16", "float16"))
        theirs = {key: error(c, exact[key]) for key, c in products(x, w, dz).items()}
        for product in KERNELS:
            cuda = ours["cuda_cores"][product][0]
            row = {"size": [rows, n_in, units], "product": product,
                   **{f"{name}_tflops": round(ours[name][product][0], 2) for name in forms},
                   **{f"{name}_over_cuda": round(ours[name][product][0] / cuda, 3) for name in forms[1:]},
                   "torch_fp32_tflops": round(fp32[product] / 1e3, 2) if fp32 else None,
                   "torch_tf32_tflops": round(tf32[product] / 1e3, 2) if tf32 else None,
                   "torch_bf16_tflops": round(bf16[product] / 1e3, 2) if bf16 else None,
                   "torch_f16_tflops": round(f16[product] / 1e3, 2) if f16 else None,
                   "stored_bfloat16_over_torch_bf16": (round(ours["stored_bfloat16"][product][0] * 1e3 / bf16[product], 3)
                                                       if bf16 and "stored_bfloat16" in ours else None),
                   **{f"{name}_error": ours[name][product][1] for name in forms},
                   "numpy_float32_error": theirs[product]}
            results.append(row)
            table.row(f"{rows}x{n_in}x{units}", product, *(ours[name][product][0] for name in forms),
                      row["torch_fp32_tflops"], row["torch_tf32_tflops"], row["torch_bf16_tflops"],
                      row["torch_f16_tflops"],
                      *(ours[name][product][1] for name in forms), theirs[product])
    emit_comparison("tensor_cores", results, "cuda")


if __name__ == "__main__":
    main()
