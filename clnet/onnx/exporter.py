"""clnet.onnx.export: a built model as an ONNX file, each layer writing its own nodes (see builder.py)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .._version import __version__
from .builder import GraphBuilder
from .optional import require

INPUT, OUTPUT = "input", "output"   # the graph's tensor names, the same for every model
BATCH = "batch"                     # the name of the dynamic batch axis
MIN_OPSET = 7                       # numpy-style broadcasting in Add/Mul/Sub, which the activations use

# MetaTrader 5 runs ONNX files in the onnxruntime it embeds; MQL5's ONNX documentation points to
# onnxruntime 1.14's operator list. onnxruntime 1.14 implements ONNX 1.13: opset 18, IR version 8
# (the version matrix of onnxruntime's docs/Versioning.md).
MT5_RUNTIME = "onnxruntime 1.14"
MT5_NEWEST_OPSET = 18
# The ONNX ops clnet's layers write, each of which onnxruntime's CPU provider runs in float32 at
# every version up to opset 18 since 1.14 (docs/OperatorKernels.md in its repository lists the kernels
# of each release; the opset-18 Pad came late, for the 1.14 release: onnxruntime issue #14522).
# A layer that writes any other op is refused for MetaTrader until the op is checked and added here.
# .ci/onnx-oldest-runtime runs every exported example, at opsets 17 and 18, in the oldest onnxruntime
# PyPI has for CI's Python (1.14 itself has no wheel for Python 3.11).
MT5_OPS = frozenset({
    "Abs", "Add", "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Conv", "Div",
    "Elu", "Equal", "Erf", "Exp", "Expand", "Flatten", "GRU", "Gather", "Gemm", "Greater", "GreaterOrEqual",
    "Identity", "LSTM", "LeakyRelu", "Less", "LessOrEqual", "Log", "MatMul", "Max", "MaxPool", "Min", "Mul", "Neg",
    "Not", "PRelu", "Pad", "Pow", "RNN", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "Relu",
    "Reshape", "Resize", "Shape", "Sigmoid", "Slice", "Softmax", "Softplus", "Sqrt", "Squeeze", "Sub", "Sum",
    "Tanh", "Tile", "Transpose", "Unsqueeze", "Where"})
TARGETS = (None, "mt5")


def export(model, path, opset: int = 17, batch="dynamic", target: str | None = None, float16: bool = False) -> None:
    """Write `model` to `path` as an ONNX model (see model_proto for what the file holds).
    `target="mt5"` first checks that MetaTrader 5's onnxruntime 1.14 runs it (see model_proto),
    and writes nothing where it would not; `target=None`, the default, checks none of that."""
    path = Path(os.fspath(path))
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise FileNotFoundError(f"cannot write the ONNX file {str(path)!r}: directory {str(directory)!r} does "
                                "not exist")
    proto = model_proto(model, opset, batch, target, float16)
    path.write_bytes(proto.SerializeToString())


def model_proto(model, opset: int = 17, batch="dynamic", target: str | None = None, float16: bool = False):
    """`model` as an onnx.ModelProto, checked by onnx.checker (full_check).

    One input named "input", shape (batch, *model.input_shape) (a model of several inputs has
    "input_0", "input_1", ... in the order of model.inputs), and one output named "output" of
    the output's shape with the batch axis first (several: "output_0", "output_1", ... in the
    order of model.outputs), all in the model's float type (float32 or float64; a mixed-precision
    policy's model is float32: see clnet/dtype_policies.py). `float16=True` writes the graph in
    float16 instead, weights, inputs, outputs and every computation (the weights rounded to
    float16, and what onnxruntime computes in it is float16's: about 3 significant digits);
    onnxruntime's CPU provider runs it.
    `batch="dynamic"` leaves the batch axis free (a symbolic dimension named "batch"); an integer
    fixes it. The IR version is the lowest that carries `opset`, so older runtimes read the file.

    `target="mt5"`: the file is for MetaTrader 5, whose embedded runtime is onnxruntime 1.14.
    A ValueError, naming what is wrong and what is expected, refuses an opset above 18 (the
    newest onnxruntime 1.14 implements), a model that is not float32, an input or output with
    an axis of open length (None) other than the batch, and a layer that writes an ONNX op
    outside MT5_OPS (those onnxruntime 1.14 runs; below opset 20, which brings the Gelu op,
    clnet's layers write GELU from Erf or Tanh), and `float16=True`. `target=None`, the default,
    checks none of this.
    """
    onnx = require("clnet.onnx.export")
    from onnx import helper, numpy_helper

    if not hasattr(model, "layers") or not hasattr(model, "dtype"):
        raise TypeError(f"clnet.onnx.export expects a clnet model, got {type(model).__name__}")
    if not model.built:
        raise ValueError(f"cannot export model {model.name!r}: it is not built and has no weights yet; call "
                         "build(input_shape) or fit first")
    newest = onnx.defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, (int, np.integer)) or not MIN_OPSET <= opset <= newest:
        raise ValueError(f"opset must be an integer from {MIN_OPSET} to {newest} (the newest the installed "
                         f"onnx {onnx.__version__} knows), got {opset!r}")
    opset = int(opset)
    if batch == "dynamic":
        batch_dim = BATCH
    elif isinstance(batch, (int, np.integer)) and not isinstance(batch, bool) and batch >= 1:
        batch_dim = int(batch)
    else:
        raise ValueError(f"batch must be 'dynamic' or a positive integer, got {batch!r}")
    if target not in TARGETS:
        raise ValueError(f"target must be None or 'mt5' (MetaTrader 5), got {target!r}")
    if not isinstance(float16, (bool, np.bool_)):
        raise TypeError(f"float16 must be True or False, got {float16!r}")
    if float16 and target == "mt5":
        raise ValueError("target='mt5' writes float32, what MetaTrader 5's ONNX models take as float inputs "
                         "and outputs; export without float16=True")
    if target == "mt5":
        check_mt5_model(model, opset)

    made = {id(call.made_mask) for call in model.calls if call.made_mask is not None}
    masked = [call.layer.describe() for call in model.calls
              if call.mask is not None or any(id(t) in made for t in call.inputs)]
    if masked:
        raise ValueError(f"model {model.name!r} has layers that read a mask (of Embedding(mask_zero=True) or "
                         f"Masking): {', '.join(masked)}; clnet does not export masks to ONNX yet, and without them "
                         "the file would compute something else")
    dtype = np.dtype(np.float16 if float16 else model.dtype)
    graph = GraphBuilder(dtype, opset)
    sources = input_names(model)
    tensors = {id(t): name for t, name in zip(model.inputs, sources)}
    for call in model.calls:  # in the order they were made: a topological order
        graph.layer = call.layer
        names = call.layer.to_onnx(graph, [tensors[id(t)] for t in call.inputs])
        count = len(call.outputs)
        if not isinstance(names, list) or len(names) != count or not all(isinstance(n, str) for n in names):
            raise TypeError(f"layer {call.layer.name!r} ({type(call.layer).__name__}).to_onnx must return a list "
                            f"with the names of its {count} output tensor(s), got {names!r}")
        tensors.update({id(t): name for t, name in zip(call.outputs, names)})
    graph.layer = None
    if target == "mt5":
        check_mt5_ops(graph)
    results = output_names(model)
    nodes = _nodes(onnx, graph, [tensors[id(t)] for t in model.outputs], results, sources)

    elem_type = helper.np_dtype_to_tensor_dtype(dtype)
    inputs = [helper.make_tensor_value_info(name, elem_type, [batch_dim, *t.sample_shape],
                                            f"{dtype.name} samples, one per row along axis 0, as model.predict takes "
                                            "them")
              for name, t in zip(sources, model.inputs)]
    outputs = [helper.make_tensor_value_info(name, elem_type, [batch_dim, *t.sample_shape],
                                             f"{dtype.name}, what model.predict returns for the same rows")
               for name, t in zip(results, model.outputs)]
    initializers = [numpy_helper.from_array(array, name) for name, array in graph.initializers.items()]
    opsets = [helper.make_opsetid("", opset)]
    ir_version = helper.find_min_ir_version_for(opsets)
    if ir_version < 4:  # before IR 4 (opset 9) every initializer must also be a graph input
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in initializers]
    body = helper.make_graph(nodes, model.name, inputs, outputs, initializers)
    proto = helper.make_model(body, opset_imports=opsets, producer_name="clnet", producer_version=__version__,
                              doc_string=f"clnet model {model.name!r}: " +
                              " -> ".join(f"{l.name} ({type(l).__name__})" for l in model.layers))
    proto.ir_version = ir_version
    onnx.checker.check_model(proto, full_check=True)
    return proto


def check_mt5_model(model, opset: int) -> None:
    """Refuse, before any node is written, a model MetaTrader 5's onnxruntime 1.14 cannot run:
    too new an opset, a float type other than float32, an axis of unknown length but the batch."""
    if opset > MT5_NEWEST_OPSET:
        raise ValueError(f"target='mt5': opset={opset} is newer than {MT5_RUNTIME}, MetaTrader 5's runtime, "
                         f"implements; expected opset <= {MT5_NEWEST_OPSET} (the default, 17, is)")
    if model.dtype != np.float32:
        raise ValueError(f"target='mt5': model {model.name!r} computes in {model.dtype.name}, and MetaTrader 5 "
                         "takes float32 models; build it with floatx='float32', or load a saved one as float32 "
                         "with clnet.load_model(path, floatx='float32'), and export that")
    for kind, names, tensors in (("input", input_names(model), model.inputs),
                                 ("output", output_names(model), model.outputs)):
        for name, tensor in zip(names, tensors):
            if None in tensor.sample_shape:
                shape = ", ".join(map(str, ("batch", *tensor.sample_shape)))
                raise ValueError(f"target='mt5': {kind} {name!r} of model {model.name!r} has shape ({shape}), "
                                 "where None is a length left open; MetaTrader 5 expects only the batch axis "
                                 "open: build the model on a fixed length for every other axis, e.g. "
                                 "Input((60, features)) for windows of 60 steps")


def check_mt5_ops(graph: GraphBuilder) -> None:
    """Refuse a node whose op MetaTrader 5's onnxruntime 1.14 does not run (one outside MT5_OPS),
    naming the layer that wrote it."""
    from onnx import defs

    for op_type, _, _, _, layer in graph.nodes:
        if op_type in MT5_OPS:
            continue
        what = "the model" if layer is None else f"layer {layer.name!r} ({type(layer).__name__})"
        versions = [schema.since_version for schema in defs.get_all_schemas_with_history()
                    if schema.name == op_type and schema.domain == ""]
        since = f" (in ONNX from opset {min(versions)})" if versions else ""
        raise ValueError(f"target='mt5': {what} exports to the ONNX op {op_type}{since}, which is not among the ops "
                         f"that {MT5_RUNTIME}, MetaTrader 5's runtime, runs at opset <= {MT5_NEWEST_OPSET}; "
                         "expected only the ops of clnet.onnx.exporter.MT5_OPS")


def input_names(model) -> list[str]:
    """The graph's input names: "input" for a model of one input, else "input_0", "input_1", ...
    in the order of the model's inputs (as predict takes its list of arrays)."""
    count = len(model.inputs)
    return [INPUT] if count == 1 else [f"{INPUT}_{i}" for i in range(count)]


def output_names(model) -> list[str]:
    """The graph's output names: "output" for a model of one output, else "output_0", ... in
    the order of the model's outputs (as predict returns its list of arrays)."""
    count = len(model.outputs)
    return [OUTPUT] if count == 1 else [f"{OUTPUT}_{i}" for i in range(count)]


def _nodes(onnx, graph: GraphBuilder, lasts: list[str], results: list[str], sources: list[str]) -> list:
    """The builder's nodes as NodeProtos, with each output tensor renamed to its name in
    `results`; each op must exist in the chosen opset."""
    from onnx import helper, numpy_helper

    renamed = {}
    for last, result in zip(lasts, results):
        if last in sources or last in graph.initializers:  # nothing computed: the graph still needs a node
            graph.nodes.append(("Identity", (last,), (result,), {}, None))
        else:
            renamed[last] = result
    rename = lambda name: renamed.get(name, name)
    nodes = []
    for op_type, inputs, outputs, attributes, layer in graph.nodes:
        try:
            onnx.defs.get_schema(op_type, graph.opset)
        except onnx.defs.SchemaError:
            versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history()
                        if s.name == op_type and s.domain == ""]
            found = f"first appears in opset {min(versions)}" if versions else "is not a standard ONNX op"
            raise ValueError(f"layer {layer.name!r} ({type(layer).__name__}) exports to the ONNX op {op_type}, "
                             f"which {found}; got opset={graph.opset}") from None
        attributes = {key: numpy_helper.from_array(np.asarray(value)) if isinstance(value, np.ndarray) else value
                      for key, value in attributes.items()}
        outputs = [rename(o) for o in outputs]
        nodes.append(helper.make_node(op_type, [rename(i) for i in inputs], outputs, name=outputs[0], **attributes))
    return nodes
