"""Make the ONNX fixtures of tests/test_onnx.py, which must not import torch or keras (CI has neither):
MLPs exported by torch.onnx.export and by Keras 3, and their outputs on fixed inputs.

    python tests/make_torch_onnx_fixture.py    # needs torch, onnx, onnxscript (dynamo exporter), keras

The MLPs use every activation clnet has, a layer without bias and a Flatten. Each exporter writes
them its own way, and clnet.onnx.load must read all of them:
  torch_mlp.onnx         TorchScript exporter (dynamo=False): Flatten, Gemm(transB=1), MatMul, ...
  torch_mlp_dynamo.onnx  dynamo exporter: Reshape(-1, 20), Gemm(transB=1) with and without a bias
  keras_mlp.onnx         Keras 3 (torch backend) model.export(format="onnx"): no-op Casts, a Flatten
                         as Shape -> Gather -> Unsqueeze -> Concat -> Reshape, MatMul + Add
torch_mlp.npz and keras_mlp.npz hold the inputs x and the framework's outputs y.
"""
import os
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


def main():
    DATA.mkdir(exist_ok=True)
    torch_fixtures()
    keras_fixture()
    print("wrote", *sorted(p.name for p in DATA.glob("*_mlp*")))


if __name__ == "__main__":
    main()
