"""ONNX out and in: `export(model, path)` writes a built model as an ONNX file, `load(path)`
reads one back (or one made by PyTorch, Keras, ...) as a trainable clnet model.

The file has one input named "input", shape (batch, *model.input_shape), and one output named
"output", shape (batch, *model.output_shape), in the model's float type; the batch axis is
dynamic unless `batch=` fixes it. Preprocessing (such as the example's /255) is not part of
the model, so whoever runs the file does it (docs/metatrader.md shows it from MQL5).

onnx (and onnxruntime, to run the files) are the optional extra `pip install 'clnet[onnx]'`:
clnet imports without them and these functions say so when called. Each layer exports itself
through its `to_onnx(graph, inputs)` method; the mechanism is described in builder.py.
"""
from .builder import GraphBuilder
from .exporter import INPUT, OUTPUT, export, model_proto
from .importer import SUPPORTED_OPS, load

__all__ = ["export", "load", "model_proto", "GraphBuilder", "SUPPORTED_OPS", "INPUT", "OUTPUT"]
