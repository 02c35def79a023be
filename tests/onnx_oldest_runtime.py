"""Every kind of model clnet exports, written with target="mt5" and run in the oldest onnxruntime
PyPI has for this Python: MetaTrader 5 embeds onnxruntime 1.14, older than the one the tests use.
.ci/onnx-oldest-runtime makes that runtime's virtualenv and runs both steps:

    python tests/onnx_oldest_runtime.py export DIR   # with clnet: DIR/NAME@OPSET.onnx, .inputs.npz, .outputs.npz
    python tests/onnx_oldest_runtime.py run DIR      # with onnxruntime and numpy only

`run` prints the onnxruntime version and a line per file: its largest difference from clnet's
predictions at batch 1 and 7, and the output's scale (max |prediction| over the 7 rows). A file
passes where |onnxruntime - clnet| <= 1e-5 (|clnet| + scale), float32's tolerance in tests/test_onnx.py;
`run` exits 1 if any file fails or does not load.
"""
import os
import sys
import time
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent
OPSETS = (17, 18)  # clnet's default, and the newest that MetaTrader's onnxruntime 1.14 implements
RTOL = 1e-5


def models():
    """(name, model, inputs) for each model checked, float32: every example of tests/test_onnx.py
    (each layer class, op and activation) and the models people take to MetaTrader."""
    import clnet
    from clnet.layers import (LSTM, GRU, Activation, BatchNormalization, Bidirectional, Conv1D, Conv2D, Dense,
                              Dropout, Flatten, Input, MaxPooling2D, MultiHeadAttention, ReLU)
    sys.path[:0] = [str(TESTS), str(TESTS.parent / "examples")]
    import test_onnx
    import tiny_gpt

    rng = np.random.default_rng(0)
    normal = lambda *shape: rng.normal(size=(7, *shape)).astype(np.float32)
    for name in sorted({**test_onnx.LAYER_EXAMPLES, **test_onnx.GRAPH_EXAMPLES, **test_onnx.ATTENTION_EXAMPLES,
                        **test_onnx.OP_EXAMPLES}):
        for i, (model, xs) in enumerate(test_onnx.example_models(name, np.float32, rng)):
            yield f"{name}_{i}", model, xs
    for name, make in sorted(test_onnx.CONSTANT_EXAMPLES.items()):
        x = Input((3, 4))
        yield name, clnet.Model(x, make()(x), seed=3), [normal(3, 4)]
    for activation, params in test_onnx.ACTIVATIONS:
        function = clnet.activations.get(activation, **params)
        yield (f"activation_{activation}{''.join(f'_{k}{v}' for k, v in params.items())}",
               test_onnx.built([Activation(activation, **params), Flatten(), Dense(6, function)], (3, 4)),
               [normal(3, 4)])

    def sequential(*layers, seed=1):
        return clnet.Sequential(list(layers), seed=seed)

    yield "mlp", sequential(Input((28, 28)), Flatten(), Dense(256, "relu"), Dense(128, "relu"), Dense(10, "softmax")), \
        [rng.random((7, 28, 28), np.float32)]
    yield "fashion_mnist_cnn", sequential(
        Input((28, 28, 1)), Conv2D(32, 3, activation="relu"), MaxPooling2D(), Conv2D(64, 3, activation="relu"),
        MaxPooling2D(), Flatten(), Dense(128, "relu"), Dropout(0.3), Dense(10, "softmax")), \
        [rng.random((7, 28, 28, 1), np.float32)]
    batch_norm_cnn = sequential(Input((16, 16, 3)), Conv2D(8, 3, use_bias=False), BatchNormalization(), ReLU(),
                                MaxPooling2D(), Conv2D(8, 3, padding="same"), BatchNormalization(), ReLU(),
                                Flatten(), Dense(3, "softmax"))
    for layer in batch_norm_cnn.layers:  # moving statistics away from 0 and 1, so the layer is no identity
        if isinstance(layer, BatchNormalization):
            layer.set_weights([rng.uniform(0.5, 2.0, w.shape) for w in layer.get_weights()])
    yield "batch_norm_cnn", batch_norm_cnn, [normal(16, 16, 3)]
    # Windows of 60 steps of 5 features, as an expert advisor feeds them.
    yield "lstm", sequential(Input((60, 5)), LSTM(32), Dense(1)), [normal(60, 5)]
    yield "gru", sequential(Input((60, 5)), GRU(32, return_sequences=True), GRU(16), Dense(3, "softmax")), \
        [normal(60, 5)]
    yield "bidirectional_lstm", sequential(Input((60, 5)), Bidirectional(LSTM(16, return_sequences=True)),
                                           Bidirectional(LSTM(8)), Dense(1)), [normal(60, 5)]
    yield "causal_conv1d", sequential(Input((60, 5)), Conv1D(16, 3, padding="causal", activation="relu"),
                                      Conv1D(16, 3, padding="causal", dilation_rate=2, activation="relu"),
                                      Conv1D(16, 3, padding="causal", dilation_rate=4), Flatten(), Dense(1)), \
        [normal(60, 5)]
    x = Input((30, 8))
    attended = MultiHeadAttention(4, 8)(x, x, use_causal_mask=True)
    yield "causal_attention", clnet.Model(x, Dense(1)(Flatten()(attended)), seed=1), [normal(30, 8)]
    gpt = tiny_gpt.build_model(13, context=16, d_model=16, heads=2, blocks=2, seed=1)
    yield "tiny_gpt", gpt, [rng.integers(0, 13, (7, 16)).astype(np.float32)]


def export(directory: Path) -> int:
    """Each model, exported with target="mt5" at each of OPSETS, its inputs and clnet's predictions.
    The tuner off, as in the test suite (tests/conftest.py): the files do not depend on its choice,
    and its sweep from a cold cache took most of this step's 5 minutes."""
    os.environ.setdefault("CLNET_TUNE", "0")
    import clnet
    from clnet.onnx.exporter import input_names, output_names

    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    count = 0
    for name, model, xs in models():
        predictions = model.predict(xs if len(xs) > 1 else xs[0])
        predictions = predictions if isinstance(predictions, list) else [predictions]
        for opset in OPSETS:
            path = directory / f"{name}@{opset}.onnx"
            clnet.onnx.export(model, path, opset=opset, target="mt5")
            np.savez(path.with_suffix(".inputs.npz"), **dict(zip(input_names(model), xs)))
            np.savez(path.with_suffix(".outputs.npz"), **dict(zip(output_names(model), predictions)))
            count += 1
    print(f"exported {count} files with clnet {clnet.__version__} to {directory} in "
          f"{time.perf_counter() - started:.1f} s")
    return 0


def run(directory: Path) -> int:
    """Each file in onnxruntime against clnet's predictions; 1 if any fails, else 0."""
    import onnxruntime as ort

    started = time.perf_counter()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the machine is shared
    paths = sorted(directory.glob("*.onnx"))
    print(f"onnxruntime {ort.__version__} (Python {sys.version.split()[0]}, numpy {np.__version__}): "
          f"{len(paths)} files")
    print(f"{'model@opset':<40} {'max diff':>10} {'scale':>10}  result")
    failed = 0
    for path in paths:
        inputs, wanted = np.load(path.with_suffix(".inputs.npz")), np.load(path.with_suffix(".outputs.npz"))
        try:
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            # The scale is the whole batch's: one row's output near zero is a sum that cancelled.
            scale = max(float(np.abs(wanted[name]).max()) for name in wanted)
            diff, passed = 0.0, True
            for rows in (1, 7):
                got = session.run(list(wanted), {name: inputs[name][:rows] for name in inputs})
                for out, name in zip(got, wanted):
                    want = wanted[name][:rows]
                    error = np.abs(out.astype(np.float64) - want)
                    diff = max(diff, float(error.max()))
                    passed &= out.shape == want.shape and bool(np.all(error <= RTOL * (np.abs(want) + scale)))
            print(f"{path.stem:<40} {diff:10.2e} {scale:10.3g}  {'pass' if passed else 'FAIL'}")
        except Exception as error:  # a file the runtime refuses: its message is the finding
            passed = False
            print(f"{path.stem:<40} {'-':>10} {'-':>10}  FAIL: {type(error).__name__}: {error}")
        failed += not passed
    print(f"run: {time.perf_counter() - started:.1f} s")
    print(f"{len(paths) - failed} passed, {failed} failed")
    return int(failed > 0)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("export", "run"):
        sys.exit(f"usage: {sys.argv[0]} export|run DIR")
    sys.exit(export(Path(sys.argv[2])) if sys.argv[1] == "export" else run(Path(sys.argv[2])))
