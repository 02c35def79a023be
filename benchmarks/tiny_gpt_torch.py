"""examples/tiny_gpt.py's character-level GPT in clnet and in PyTorch, trained in one run from the
same initial weights, on the same windows in the same order, with the same Adam and steps.

    python -m benchmarks.tiny_gpt_torch                       # the example's default (2 blocks, d 64, T 64, batch 32)
    python -m benchmarks.tiny_gpt_torch --steps 90 --epochs 3 # a quicker look
    python -m benchmarks.tiny_gpt_torch --device 0 --torch-device cuda --blocks 4 --d-model 256 --context 256
    python -m benchmarks.tiny_gpt_torch ... --profile 40      # then clnet's kernels over 40 more steps
    python -m benchmarks.tiny_gpt_torch ... --torch-device cuda --cuda-graph   # also PyTorch's step as a CUDA graph
    python -m benchmarks.tiny_gpt_torch ... --bf16            # clnet under "mixed_bfloat16", PyTorch in bf16 autocast

The PyTorch model is written out with the weights in Keras's layout (clnet's get_weights), so
they are copied as they are: LayerNorm with Keras's epsilon 1e-3, the projections as matrix
products, scaled_dot_product_attention(is_causal=True), exact GELU, Adam with Keras's epsilon
1e-7. `--bf16`: clnet's model is made under the policy "mixed_bfloat16" (its Dense products may run
in bfloat16: clnet/dtype_policies.py) and PyTorch's forward runs in torch.autocast(bfloat16), its
weights and Adam in float32, as Keras's mixed precision keeps them. Prints each epoch's training loss of both, a table with the final validation
cross-entropies and their ratio (target: clnet within 5% of PyTorch) and the seconds per
training step (median over the epochs after the first, which pays for compiling and tuning) as
a ratio (target on the CPU: clnet at most 1.5x PyTorch's), then one JSON line.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from .common import clnet_epoch_timer, cpu_name, cuda_graph_steps, emit, median, versions

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import tiny_gpt  # noqa: E402


def run_clnet(args, model, train, val):
    import clnet

    times, losses = [], []

    class Losses(clnet.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            losses.append(logs["loss"])

    x, y = train
    model.compile(clnet.optimizers.Adam(args.learning_rate), "sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, steps_per_epoch=args.steps // args.epochs,
              shuffle=False, verbose=0, callbacks=[clnet_epoch_timer(times), Losses()])
    val_loss = model.evaluate(*val, batch_size=args.batch_size)
    if args.profile:  # device time per kernel over more steps, after the timed ones
        with clnet.profile(print_table=False) as profiled:
            model.fit(x, y, batch_size=args.batch_size, epochs=1, steps_per_epoch=args.profile, shuffle=False, verbose=0)
        print(f"clnet kernels over {args.profile} steps (device time):\n{profiled.table()}\n")
    info = clnet.runtime().info
    return times, losses, float(val_loss), f"{info.name} [{info.platform_version.strip()}]"


class TorchGPT:
    """The example's model over parameters in Keras layout, in get_weights() order."""

    def __init__(self, weights, args, device):
        import torch
        self.params = [torch.nn.Parameter(torch.tensor(w, device=device)) for w in weights]
        self.heads, self.blocks = args.heads, args.blocks

    def __call__(self, tokens):
        import torch.nn.functional as F
        w = iter(self.params)
        embedding, positions = next(w), next(w)
        x = embedding[tokens] + positions
        batch, length, d = x.shape
        norm = lambda x: F.layer_norm(x, (d,), next(w), next(w), eps=1e-3)
        # Kernels (in, heads, dim) and (heads, dim, out) as the matrices (in, heads * dim), (heads * dim, out).
        dense_in = lambda x: x @ (kernel := next(w)).reshape(kernel.shape[0], -1) + next(w).reshape(-1)
        dense = lambda x: x @ (kernel := next(w)).reshape(-1, kernel.shape[-1]) + next(w)
        for _ in range(self.blocks):
            h = norm(x)
            q, k, v = (dense_in(h).view(batch, length, self.heads, -1).transpose(1, 2) for _ in range(3))
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)       # (batch, heads, T, key_dim)
            x = x + dense(attended.transpose(1, 2).reshape(batch, length, -1))
            h = F.gelu(dense(norm(x)))
            x = x + dense(h)
        return dense(norm(x))                                                          # logits


def run_torch(args, weights, train, val, graph=False):
    import torch
    import torch.nn.functional as F

    device = torch.device(args.torch_device)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 products, as clnet's
    torch.backends.cudnn.allow_tf32 = False
    model = TorchGPT(weights, args, device)
    optimizer = torch.optim.Adam(model.params, lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-7,
                                 capturable=graph)
    x, y = (torch.from_numpy(a.astype(np.int64)).to(device) for a in train)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    cross_entropy = lambda logits, target: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    per_epoch = args.steps // args.epochs
    times, losses = [], []
    total = torch.zeros((), device=device)  # the epoch's summed loss

    def train_step(rows):  # rows: a slice, or (in a CUDA graph) a static index tensor
        optimizer.zero_grad(set_to_none=not graph)  # a graph's gradients stay where they are
        with torch.autocast(device.type, torch.bfloat16, enabled=args.bf16):
            loss = cross_entropy(model(x[rows]).float(), y[rows])
        loss.backward()
        optimizer.step()
        total.add_(loss.detach())

    step = train_step
    if graph:  # warm-up and capture train on the first batch 3 more times
        replay = cuda_graph_steps(torch, train_step, args.steps * args.batch_size, args.batch_size, device)
        positions = torch.arange(len(x), device=device)
        step = lambda rows: replay(positions[rows])
    for epoch in range(args.epochs):
        sync()
        started = time.perf_counter()
        total.zero_()
        for index in range(epoch * per_epoch, (epoch + 1) * per_epoch):
            step(slice(index * args.batch_size, (index + 1) * args.batch_size))
        sync()
        times.append(time.perf_counter() - started)
        losses.append(float(total) / per_epoch)
    with torch.no_grad():
        val_x, val_y = (torch.from_numpy(a.astype(np.int64)).to(device) for a in val)
        with torch.autocast(device.type, torch.bfloat16, enabled=args.bf16):
            val_loss = sum(float(cross_entropy(model(val_x[i:i + args.batch_size]).float(), val_y[i:i + args.batch_size]))
                           * len(val_x[i:i + args.batch_size]) for i in range(0, len(val_x), args.batch_size)) / len(val_x)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{cpu_name()} ({torch.get_num_threads()} threads)"
    return times, losses, val_loss, name + (", CUDA graph" if graph else "") + (", bf16 autocast" if args.bf16 else "")


def main(argv=None):
    parser, _ = tiny_gpt.arguments([], description=__doc__)
    parser.add_argument("--torch-device", default="cpu", help="torch: cpu or cuda")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="torch on cuda: also the whole step captured in a CUDA graph (Adam capturable), "
                             "beside the eager step")
    parser.add_argument("--profile", type=int, default=0, metavar="STEPS",
                        help="after timing, profile clnet's kernels over this many more steps")
    parser.add_argument("--bf16", action="store_true",
                        help="clnet under the policy mixed_bfloat16, PyTorch in bfloat16 autocast")
    args = parser.parse_args(argv)
    import clnet

    if args.device is not None:
        clnet.set_device(args.device)
    if args.bf16:
        clnet.mixed_precision.set_global_policy("mixed_bfloat16")
    vocabulary, train, val, _ = tiny_gpt.data(args)
    model = tiny_gpt.build_model(len(vocabulary), args.context, args.d_model, args.heads, args.blocks, args.seed)
    weights = model.get_weights()  # before any step: PyTorch starts from these
    results = {"clnet": run_clnet(args, model, train, val), "torch": run_torch(args, weights, train, val)}
    if args.cuda_graph:
        results["torch_cuda_graph"] = run_torch(args, weights, train, val, graph=True)
    labels = {"clnet": "clnet", "torch": "PyTorch eager", "torch_cuda_graph": "PyTorch CUDA graph"}

    per_epoch = args.steps // args.epochs
    step_seconds = {name: median(r[0][1:] or r[0]) / per_epoch for name, r in results.items()}
    for name, (_, losses, _, _) in results.items():
        print(f"{labels[name]:18} training loss per epoch: " + "  ".join(f"{l:.4f}" for l in losses))
    others = [name for name in results if name != "clnet"]
    print("\n| | clnet | " + " | ".join(f"{labels[o]} | clnet / {labels[o]}" for o in others) + " |")
    print("| --- | --- |" + " --- | --- |" * len(others))
    clnet_val, clnet_step = results["clnet"][2], step_seconds["clnet"]
    print(f"| validation cross-entropy | {clnet_val:.4f} | "
          + " | ".join(f"{results[o][2]:.4f} | {clnet_val / results[o][2]:.3f}" for o in others) + " |")
    print(f"| ms per training step | {1e3 * clnet_step:.2f} | "
          + " | ".join(f"{1e3 * step_seconds[o]:.2f} | {clnet_step / step_seconds[o]:.2f}" for o in others) + " |")
    print(f"\nclnet on {results['clnet'][3]}; PyTorch on {results['torch'][3]}\n")
    summary = {name: {"val_loss": round(r[2], 4), "train_loss": [round(l, 4) for l in r[1]],
                      "ms_per_step": round(1e3 * step_seconds[name], 3), "device": r[3]} for name, r in results.items()}
    emit({"benchmark": "tiny_gpt", "precision": "mixed_bfloat16" if args.bf16 else "float32", "blocks": args.blocks, "d_model": args.d_model, "heads": args.heads,
          "context": args.context, "batch": args.batch_size, "steps": per_epoch * args.epochs,
          "learning_rate": args.learning_rate, "vocabulary": len(vocabulary),
          "validation_windows": len(val[0]), **summary,
          "val_loss_ratio": round(clnet_val / results["torch"][2], 4),
          "step_time_ratio": round(clnet_step / step_seconds["torch"], 3),
          **({"step_time_ratio_cuda_graph": round(clnet_step / step_seconds["torch_cuda_graph"], 3)}
             if args.cuda_graph else {}),
          "versions": versions("clnet", "pyopencl", "torch")})


if __name__ == "__main__":
    main()
