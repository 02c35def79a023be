"""Embedding's table gradient (the backward pass of a lookup), against numpy and PyTorch, and
against the plain form that clnet's kernel replaces.

    python -m benchmarks.embedding [--vocab 100,50000] [--batch 64] [--time 128] [--dim 128]
                                   [--device N] [--torch-device cpu]

The gradient of a (vocab, dim) table is, per row, the sum of the output gradients of the
batch's tokens with that id. Without float atomics (and to get the same sums on every run) it
is computed per row. `clnet` is the layer's backward pass: CountEmbeddingIds (integer atomics)
then CalcDeltaWeightsEmbedding, a work-group per row that writes zeros at once for an id the
batch lacks and otherwise lists its occurrences in token order, a window of ids at a time
checked by all its items (a prefix sum of their hits places each hit in the list). `scan` is
the plain form: one work-item per (row, column) reading every token's id, written here only to
be measured. numpy is np.add.at; torch is the backward of torch.nn.functional.embedding (a
sort and a segmented sum on its side). Times are medians of wall-clock runs with the device
finished.
"""
from __future__ import annotations

import argparse

import numpy as np

from .common import Table, emit_comparison, have_torch, seconds

SCAN = """
__kernel void ScanEmbeddingGradient(__global const TYPE *ids, __global const TYPE *gradients,
                                    __global TYPE *table_grad, const int tokens, const int dim)
{
    const int j = get_global_id(0), v = get_global_id(1);
    TYPE sum = 0;
    for (int i = 0; i < tokens; i++)
        if ((int)ids[i] == v)
            sum += gradients[(long)i * dim + j];
    table_grad[(long)v * dim + j] = sum;
}
"""


def case(vocab, batch, time, dim, torch_device, rng, scan_limit):
    import pyopencl as cl

    import clnet
    from clnet.cl.parameters import ParameterStore
    from clnet.layers import Embedding

    rt = clnet.runtime()
    tokens = batch * time
    ids = rng.integers(0, vocab, (batch, time))
    grad = rng.normal(size=(batch, time, dim)).astype(np.float32)
    want = np.zeros((vocab, dim), np.float32)
    np.add.at(want, ids.ravel(), grad.reshape(-1, dim))

    store = ParameterStore(rt, np.float32)
    layer = Embedding(vocab, dim, name="embedding")
    layer.build((time,), store, rng)
    store.allocate()
    layer.allocate(batch)
    x, g = clnet.Tensor.from_numpy(ids.astype(np.float32)), clnet.Tensor.from_numpy(grad)
    layer.forward(x, batch)
    ours = seconds(lambda: layer.backward(g, batch, False), rt.queue.finish)
    np.testing.assert_allclose(layer.gradients()[0], want, rtol=1e-4, atol=1e-4)

    scanned = None
    if vocab * tokens * dim <= scan_limit:  # vocab x tokens x dim comparisons: minutes at 50000 on a CPU
        program = cl.Program(rt.context, "#define TYPE float\n" + SCAN).build()
        scan = cl.Kernel(program, "ScanEmbeddingGradient")
        out = clnet.Tensor((vocab, dim), np.float32)
        scan.set_args(x.buffer, g.buffer, out.buffer, np.int32(tokens), np.int32(dim))
        scanned = seconds(lambda: cl.enqueue_nd_range_kernel(rt.queue, scan, (dim, vocab), None), rt.queue.finish,
                          budget=0.5, least=1)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)

    def numpy_step():
        table = np.zeros((vocab, dim), np.float32)
        np.add.at(table, ids.ravel(), grad.reshape(-1, dim))

    theirs = seconds(numpy_step)
    torch_seconds = None
    if have_torch():
        import torch
        table = torch.zeros((vocab, dim), device=torch_device, requires_grad=True)
        index = torch.from_numpy(ids).to(torch_device)
        upstream = torch.from_numpy(grad).to(torch_device)
        sync = torch.cuda.synchronize if torch_device == "cuda" else (lambda: None)

        def torch_step():
            table.grad = None
            torch.nn.functional.embedding(index, table).backward(upstream)

        torch_seconds = seconds(torch_step, sync)
    return ours, scanned, theirs, torch_seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", default="100,50000")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--time", type=int, default=128)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--device", help="clnet device index or name")
    parser.add_argument("--torch-device", default="cpu")
    parser.add_argument("--scan-limit", type=float, default=2e9, help="largest vocab x tokens x dim to scan")
    args = parser.parse_args(argv)
    import clnet
    if args.device is not None:
        clnet.set_device(args.device)
    rng = np.random.default_rng(0)
    results = []
    table = Table([("vocab", ">7"), ("tokens", ">8"), ("dim", ">5"), ("clnet ms", ">10.3f"), ("scan ms", ">10.3f"),
                   ("numpy ms", ">10.3f"), ("torch ms", ">10.3f"), ("clnet/numpy", ">13.2f"), ("clnet/torch", ">13.2f")])
    for vocab in (int(v) for v in args.vocab.split(",")):
        ours, scanned, theirs, torch_seconds = case(vocab, args.batch, args.time, args.dim, args.torch_device, rng,
                                                    args.scan_limit)
        row = {"vocab": vocab, "tokens": args.batch * args.time, "dim": args.dim, "clnet_ms": round(ours * 1e3, 3),
               "scan_ms": None if scanned is None else round(scanned * 1e3, 3), "numpy_ms": round(theirs * 1e3, 3),
               "torch_ms": None if torch_seconds is None else round(torch_seconds * 1e3, 3),
               "clnet_over_numpy": round(ours / theirs, 3),
               "clnet_over_torch": None if torch_seconds is None else round(ours / torch_seconds, 3)}
        results.append(row)
        table.row(*row.values())
    emit_comparison("embedding", results, args.torch_device)


if __name__ == "__main__":
    main()
