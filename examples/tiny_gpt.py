"""Train a character-level GPT on Debian's fortunes with clnet, then sample from it.

    python examples/tiny_gpt.py                      # 2 blocks, d_model 64, 4 heads, 64 characters, 600 steps
    python examples/tiny_gpt.py --steps 100          # a quicker look
    python examples/tiny_gpt.py --blocks 4 --d-model 128 --context 128 --steps 3000   # larger

The text is every fortune file in /usr/share/games/fortunes (`apt-get install fortunes`; the
.dat indexes and the .u8 links are skipped), fortunes separated by blank lines where the files
have '%' lines; the last 10% of it is held out for validation. Training reads windows of
`--context` + 1 characters at random places of the first 90% (the input is the window less its
last character, the target the window less its first), the same windows in the same order on
every run with the same seed; validation reads consecutive windows of the last 10%.

The model: token and position embeddings, then per block LayerNorm -> causal MultiHeadAttention
-> residual add -> LayerNorm -> Dense(4 d, GELU) -> Dense(d) -> residual add; a last LayerNorm
and Dense(vocabulary, softmax), trained with sparse categorical cross-entropy and Adam.
benchmarks/tiny_gpt_torch.py trains the same model in PyTorch from the same weights.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

FORTUNES = Path("/usr/share/games/fortunes")


def load_text(directory: Path = FORTUNES) -> str:
    """Every fortune of every plain fortune file (sorted by name), separated by blank lines."""
    files = sorted(p for p in Path(directory).iterdir()
                   if p.is_file() and not p.is_symlink() and p.suffix != ".dat")
    if not files:
        raise FileNotFoundError(f"no fortune files in {directory}; install them with: apt-get install fortunes")
    fortunes = []
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        fortunes += [f.strip("\n") for f in text.replace("\r\n", "\n").split("\n%\n") if f.strip()]
    return "\n\n".join(fortunes) + "\n"


def encode(text: str):
    """(ids as int32, vocabulary): one id per distinct character, in sorted order."""
    vocabulary = sorted(set(text))
    index = {c: i for i, c in enumerate(vocabulary)}
    return np.array([index[c] for c in text], np.int32), vocabulary


def split(ids: np.ndarray, held_out: float = 0.1):
    cut = int(len(ids) * (1 - held_out))
    return ids[:cut], ids[cut:]


def training_windows(ids: np.ndarray, count: int, context: int, seed: int):
    """`count` (input, target) windows at random starts of `ids`, drawn from `seed` alone."""
    starts = np.random.default_rng(seed).integers(0, len(ids) - context - 1, count)
    windows = ids[starts[:, None] + np.arange(context + 1)]
    return windows[:, :-1], windows[:, 1:]


def validation_windows(ids: np.ndarray, context: int, count: int):
    """Up to `count` consecutive, non-overlapping windows from the start of `ids`."""
    count = min(count, (len(ids) - 1) // context)
    windows = ids[np.arange(count)[:, None] * context + np.arange(context + 1)]
    return windows[:, :-1], windows[:, 1:]


def build_model(vocabulary: int, context: int, d_model: int, heads: int, blocks: int, seed: int,
                dropout: float = 0.0, floatx: str = "float32"):
    import clnet
    from clnet.layers import Add, Dense, Embedding, Input, LayerNormalization, MultiHeadAttention, PositionEmbedding

    tokens = Input((context,), name="tokens")
    x = Embedding(vocabulary, d_model, name="token_embedding")(tokens)
    x = Add(name="embeddings")([x, PositionEmbedding(context, name="position_embedding")(x)])
    for b in range(blocks):
        h = LayerNormalization(name=f"block{b}_norm1")(x)
        h = MultiHeadAttention(heads, d_model // heads, dropout=dropout, name=f"block{b}_attention")(
            h, h, use_causal_mask=True)
        x = Add(name=f"block{b}_residual1")([x, h])
        h = LayerNormalization(name=f"block{b}_norm2")(x)
        h = Dense(4 * d_model, "gelu", name=f"block{b}_mlp_in")(h)
        h = Dense(d_model, name=f"block{b}_mlp_out")(h)
        x = Add(name=f"block{b}_residual2")([x, h])
    x = LayerNormalization(name="final_norm")(x)
    outputs = Dense(vocabulary, "softmax", name="next_character")(x)
    return clnet.Model(tokens, outputs, name="tiny_gpt", floatx=floatx, seed=seed)


def sample(model, prompt_ids: np.ndarray, length: int, vocabulary: list[str], rng, temperature: float = 0.8) -> str:
    """`length` characters after `prompt_ids` (as long as the context), one predict per character."""
    context = np.array(prompt_ids, np.int32)
    out = []
    for _ in range(length):
        p = model.predict(context[None], batch_size=1)[0, -1].astype(np.float64)
        p = np.exp(np.log(np.maximum(p, 1e-12)) / temperature)
        next_id = rng.choice(len(p), p=p / p.sum())
        out.append(vocabulary[next_id])
        context = np.append(context[1:], next_id)
    return "".join(out)


def arguments(argv=None, description=__doc__):
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=64, help="characters per window (T)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=600, help="training steps in all")
    parser.add_argument("--epochs", type=int, default=3, help="the steps are split into this many epochs")
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--validation-windows", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.0, help="attention dropout")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", help="clnet device index or name (default: CLNET_DEVICE, else the first GPU)")
    return parser, parser.parse_args(argv)


def data(args):
    """(vocabulary, (x, y) training windows, (x, y) validation windows, validation ids)."""
    ids, vocabulary = encode(load_text())
    train_ids, val_ids = split(ids)
    train = training_windows(train_ids, args.steps * args.batch_size, args.context, args.seed)
    val = validation_windows(val_ids, args.context, args.validation_windows)
    return vocabulary, train, val, val_ids


def main(argv=None):
    _, args = arguments(argv)
    import clnet
    from clnet.callbacks import Callback

    if args.device is not None:
        clnet.set_device(args.device)
    vocabulary, (x, y), (x_val, y_val), val_ids = data(args)
    print(f"{len(vocabulary)} characters; {len(x)} training windows of {args.context}, {len(x_val)} validation windows")
    model = build_model(len(vocabulary), args.context, args.d_model, args.heads, args.blocks, args.seed, args.dropout)
    model.compile(clnet.optimizers.Adam(args.learning_rate), "sparse_categorical_crossentropy")
    model.summary()

    class Report(Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            print(f"epoch {epoch + 1}/{args.epochs}: train loss {logs['loss']:.4f}  validation loss "
                  f"{logs['val_loss']:.4f}  ({time.perf_counter() - self.started:.1f} s)", flush=True)

    # The windows are already in random order: each epoch continues through them (no shuffle).
    model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, steps_per_epoch=args.steps // args.epochs,
              shuffle=False, validation_data=(x_val, y_val), verbose=0, callbacks=[Report()])
    rng = np.random.default_rng(args.seed)
    for start in rng.integers(0, len(val_ids) - args.context, 3):
        prompt = val_ids[start:start + args.context]
        print("----\n" + "".join(vocabulary[i] for i in prompt) + "|" + sample(model, prompt, 120, vocabulary, rng))


if __name__ == "__main__":
    main()
