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


def export(model, path, opset: int = 17, batch="dynamic") -> None:
    """Write `model` to `path` as an ONNX model (see model_proto for what the file holds)."""
    path = Path(os.fspath(path))
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise FileNotFoundError(f"cannot write the ONNX file {str(path)!r}: directory {str(directory)!r} does "
                                "not exist")
    proto = model_proto(model, opset, batch)
    path.write_bytes(proto.SerializeToString())


def model_proto(model, opset: int = 17, batch="dynamic"):
    """`model` as an onnx.ModelProto, checked by onnx.checker (full_check).

    One input named "input", shape (batch, *model.input_shape) (a model of several inputs has
    "input_0", "input_1", ... in the order of model.inputs), and one output named "output" of
    the output's shape with the batch axis first (several: "output_0", "output_1", ... in the
    order of model.outputs), all in the model's float type (float32 or float64).
    `batch="dynamic"` leaves the batch axis free (a symbolic dimension named "batch"); an integer
    fixes it. The IR version is the lowest that carries `opset`, so older runtimes read the file.
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

    graph = GraphBuilder(model.dtype, opset)
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
    results = output_names(model)
    nodes = _nodes(onnx, graph, [tensors[id(t)] for t in model.outputs], results, sources)

    elem_type = helper.np_dtype_to_tensor_dtype(model.dtype)
    dtype = model.dtype.name
    inputs = [helper.make_tensor_value_info(name, elem_type, [batch_dim, *t.sample_shape],
                                            f"{dtype} samples, one per row along axis 0, as model.predict takes them")
              for name, t in zip(sources, model.inputs)]
    outputs = [helper.make_tensor_value_info(name, elem_type, [batch_dim, *t.sample_shape],
                                             f"{dtype}, what model.predict returns for the same rows")
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
