"""Make the ONNX fixtures of tests/test_onnx.py, which must not import torch or keras (CI has neither):
MLPs exported by torch.onnx.export and by Keras 3, a small CNN, a LayerNorm MLP and token models with
an LSTM and a GRU exported by torch.onnx.export, and their outputs on fixed inputs.

    python tests/make_torch_onnx_fixture.py [mlp] [cnn] [layer_norm] [sequence] [bidirectional]
                                               # all without arguments;
                                               # needs torch, onnx, onnxscript (dynamo exporter), keras

The MLPs use every activation clnet has, a layer without bias and a Flatten. Each exporter writes
them its own way, and clnet.onnx.load must read all of them:
  torch_mlp.onnx         TorchScript exporter (dynamo=False): Flatten, Gemm(transB=1), MatMul, ...
  torch_mlp_dynamo.onnx  dynamo exporter: Reshape(-1, 20), Gemm(transB=1) with and without a bias
  keras_mlp.onnx         Keras 3 (torch backend) model.export(format="onnx"): no-op Casts, a Flatten
                         as Shape -> Gather -> Unsqueeze -> Concat -> Reshape, MatMul + Add
  torch_cnn.onnx         TorchScript exporter, NCHW: Conv (padding=1), ReLU, BatchNorm2d (after the
                         ReLU, so that the exporter cannot fold it into the Conv) and a residual Add,
                         MaxPool, a stride-2 Conv whose symmetric padding is not Keras's 'same'
                         split, Flatten of the (channels, height, width) maps, Linear, Softmax
  torch_cnn_dynamo.onnx  the same CNN by the dynamo exporter (the Flatten as a Reshape)
  keras_cnn.onnx         Keras 3 (torch backend), channels_last: Transposes around each Conv and
                         MaxPool, each Conv's bias as an Add after it, BatchNormalization folded to
                         Sub, Mul, Add, GlobalAveragePooling2D as ReduceMean
  torch_ln_opset14.onnx  Linear, LayerNorm, GELU, Linear at opset 14, where LayerNorm is written as
                         ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add, and GELU as Erf
  torch_ln_opset17.onnx  the same at opset 17: the LayerNormalization op
  torch_lstm.onnx        TorchScript exporter, int64 token ids in: nn.Embedding as Gather, nn.LSTM
                         (batch_first=True) as Transpose, LSTM (zero h0 and c0 from ConstantOfShape),
                         Squeeze, Transpose, then a Linear on every step's output
  torch_gru.onnx         the same with nn.GRU (linear_before_reset=1) and a Linear on h_n[-1] (Y_h)
  torch_lstm_dynamo.onnx, torch_gru_dynamo.onnx  the same by the dynamo exporter: zero states as Expand
                         and Slice of a constant, Y brought back through a Reshape whose shape is
                         computed from the Shape of a time-major tensor
  torch_lstm_bidirectional.onnx  TorchScript exporter, the LSTM token model with nn.LSTM(bidirectional=True):
                         one LSTM op with direction="bidirectional", its Y (steps, 2, batch, 5) brought
                         back as Transpose(0, 2, 1, 3), Reshape(0, 0, -1), Transpose to (batch, steps, 10)
torch_mlp.npz, keras_mlp.npz, torch_cnn.npz, keras_cnn.npz, torch_ln.npz, torch_lstm.npz, torch_gru.npz and
torch_lstm_bidirectional.npz hold the inputs x and the framework's outputs y.
"""
import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # noqa: E402
import torch  # noqa: E402

DATA = Path(__file__).parent / "data"


def torch_fixtures():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 12), torch.nn.SiLU(),
        torch.nn.Linear(12, 10, bias=False), torch.nn.LeakyReLU(0.1), torch.nn.Linear(10, 8), torch.nn.Tanh(),
        torch.nn.Linear(8, 6), torch.nn.Sigmoid(), torch.nn.Linear(6, 3), torch.nn.Softmax(dim=-1)).eval()
    x = torch.randn(7, 4, 5)
    with torch.no_grad():
        y = model(x)
    common = dict(input_names=["input"], output_names=["output"], opset_version=17)
    torch.onnx.export(model, (x,), DATA / "torch_mlp.onnx", dynamo=False,
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, **common)
    torch.onnx.export(model, (x,), DATA / "torch_mlp_dynamo.onnx", dynamo=True, external_data=False,
                      dynamic_shapes=({0: torch.export.Dim("batch")},), **common)
    np.savez(DATA / "torch_mlp.npz", x=x.numpy(), y=y.numpy(), torch_version=np.array(torch.__version__))


def keras_fixture():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((4, 5)), keras.layers.Flatten(), keras.layers.Dense(16, "relu"), keras.layers.Dense(12, "silu"),
        keras.layers.Dense(10, "leaky_relu", use_bias=False), keras.layers.Dense(8, "tanh"),
        keras.layers.Dense(6, "sigmoid"), keras.layers.Dense(3, "softmax")])
    x = np.random.default_rng(0).normal(size=(7, 4, 5)).astype(np.float32)
    y = model.predict(x, verbose=0)
    model.export(DATA / "keras_mlp.onnx", format="onnx", verbose=False)
    np.savez(DATA / "keras_mlp.npz", x=x, y=y, keras_version=np.array(keras.__version__))


class Residual(torch.nn.Module):
    def __init__(self, *body):
        super().__init__()
        self.body = torch.nn.Sequential(*body)

    def forward(self, x):
        return x + self.body(x)


def randomise_batch_norm(model):
    """Moving statistics, scale and shift away from 0 and 1, so that BatchNorm is no identity."""
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, torch.nn.BatchNorm2d):
                layer.running_mean.uniform_(-0.5, 0.5)
                layer.running_var.uniform_(0.5, 2.0)
                layer.weight.uniform_(0.5, 1.5)
                layer.bias.uniform_(-0.5, 0.5)


def torch_cnn_fixture():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.BatchNorm2d(6),
        Residual(torch.nn.Conv2d(6, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.BatchNorm2d(6)),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(6, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 3 * 3, 10), torch.nn.Softmax(dim=-1))
    randomise_batch_norm(model)
    model.eval()
    x = torch.randn(7, 1, 12, 12)
    with torch.no_grad():
        y = model(x)
    common = dict(input_names=["input"], output_names=["output"], opset_version=17)
    torch.onnx.export(model, (x,), DATA / "torch_cnn.onnx", dynamo=False,
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, **common)
    torch.onnx.export(model, (x,), DATA / "torch_cnn_dynamo.onnx", dynamo=True, external_data=False,
                      dynamic_shapes=({0: torch.export.Dim("batch")},), **common)
    np.savez(DATA / "torch_cnn.npz", x=x.numpy(), y=y.numpy(), torch_version=np.array(torch.__version__))


def keras_cnn_fixture():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((10, 10, 2)), keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        keras.layers.BatchNormalization(moving_mean_initializer="random_normal",
                                        moving_variance_initializer=keras.initializers.RandomUniform(0.5, 2.0),
                                        beta_initializer="random_normal"),
        keras.layers.MaxPooling2D(), keras.layers.Conv2D(6, 3, strides=2, padding="same"),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3, "softmax")])
    for layer in model.layers:  # biases away from their initial zeros
        if isinstance(layer, keras.layers.Conv2D):
            layer.bias.assign(np.random.default_rng(1).normal(size=layer.bias.shape))
    x = np.random.default_rng(0).normal(size=(7, 10, 10, 2)).astype(np.float32)
    y = model.predict(x, verbose=0)
    model.export(DATA / "keras_cnn.onnx", format="onnx", verbose=False)
    np.savez(DATA / "keras_cnn.npz", x=x, y=y, keras_version=np.array(keras.__version__))


def torch_layer_norm_fixture():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.GELU(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.uniform_(-0.5, 0.5)
    model.eval()
    x = torch.randn(7, 6)
    with torch.no_grad():
        y = model(x)
    for opset in (14, 17):
        torch.onnx.export(model, (x,), DATA / f"torch_ln_opset{opset}.onnx", dynamo=False, input_names=["input"],
                          output_names=["output"], opset_version=opset,
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    np.savez(DATA / "torch_ln.npz", x=x.numpy(), y=y.numpy(), torch_version=np.array(torch.__version__))


class TokenModel(torch.nn.Module):
    """nn.Embedding, a batch_first nn.LSTM or nn.GRU, and a Linear on every step's output or on
    the last h."""

    def __init__(self, recurrent, every_step: bool, bidirectional=False):
        super().__init__()
        self.embedding = torch.nn.Embedding(11, 4)
        self.recurrent = recurrent(4, 5, batch_first=True, bidirectional=bidirectional)
        self.every_step = every_step
        self.head = torch.nn.Linear(10 if bidirectional else 5, 3)

    def forward(self, ids):
        out, state = self.recurrent(self.embedding(ids))
        h = state[0] if isinstance(state, tuple) else state  # (num_layers, batch, hidden)
        return self.head(out if self.every_step else h[-1])


# The token models: (name, recurrent, a Linear on every step's output, bidirectional).
SEQUENCE_MODELS = (("lstm", torch.nn.LSTM, True, False), ("gru", torch.nn.GRU, False, False),
                   ("lstm_bidirectional", torch.nn.LSTM, True, True))


def torch_sequence_fixtures(bidirectional_only: bool):
    """The token models (each from seed 0, on the same ids): the unidirectional ones, or only the
    bidirectional one."""
    x = torch.randint(0, 11, (7, 6), generator=torch.Generator().manual_seed(0))
    common = dict(input_names=["input"], output_names=["output"], opset_version=17, dynamo=False,
                  dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    for name, recurrent, every_step, bidirectional in SEQUENCE_MODELS:
        if bidirectional != bidirectional_only:
            continue
        torch.manual_seed(0)
        model = TokenModel(recurrent, every_step, bidirectional).eval()
        with torch.no_grad():
            y = model(x)
        torch.onnx.export(model, (x,), DATA / f"torch_{name}.onnx", **common)
        if not bidirectional:
            torch.onnx.export(model, (x,), DATA / f"torch_{name}_dynamo.onnx", dynamo=True, external_data=False,
                              input_names=["input"], output_names=["output"], opset_version=17,
                              dynamic_shapes=({0: torch.export.Dim("batch")},))
        np.savez(DATA / f"torch_{name}.npz", x=x.numpy(), y=y.numpy(), torch_version=np.array(torch.__version__))


def main():
    DATA.mkdir(exist_ok=True)
    chosen = sys.argv[1:] or ["mlp", "cnn", "layer_norm", "sequence", "bidirectional"]
    if "mlp" in chosen:
        torch_fixtures()
        keras_fixture()
    if "cnn" in chosen:
        torch_cnn_fixture()
        keras_cnn_fixture()
    if "layer_norm" in chosen:
        torch_layer_norm_fixture()
    if "sequence" in chosen:
        torch_sequence_fixtures(bidirectional_only=False)
    if "bidirectional" in chosen:
        torch_sequence_fixtures(bidirectional_only=True)
    print("wrote", *sorted(p.name for p in DATA.glob("*_*.onnx")))


if __name__ == "__main__":
    main()
