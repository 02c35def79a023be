"""GraphBuilder: what a layer's `to_onnx` writes its part of an ONNX graph into.

How a layer exports itself (every class in `clnet.layers.Layer.registry` must; tests/test_onnx.py
walks the registry and fails for a class that does not):

    def to_onnx(self, graph, inputs):          # inputs: names of the tensors the layer reads
        kernel, bias = self.get_weights()      # Keras layout, read from the device
        z = graph.op("Gemm", inputs[0], graph.constant("kernel", kernel), graph.constant("bias", bias))
        return [self.activation.to_onnx(graph, z)]   # names of the tensors the layer writes

`graph.op(op_type, *inputs, **attributes)` adds one node of the standard ONNX domain and returns
its output's name (with `n_outputs=n`, the list of its first n outputs' names: an LSTM's Y, Y_h,
Y_c); `graph.constant(name, array)` adds an initializer (float arrays are stored in
the model's float type, or a `dtype=` the op fixes; integer ones as int64, e.g. a Reshape's
shape) and returns its name;
`graph.require_opset(version, why)` refuses an opset too old for what the layer emits;
`graph.reduce(op_type, x, axes, keepdims)` writes a ReduceMean/ReduceMax/... in the form the
opset takes (axes an attribute before opset 18, an input from it), and `graph.squeeze`,
`graph.unsqueeze` (axes an input from opset 13), `graph.slice` (starts, ends and axes inputs from
opset 10) theirs; `graph.cast(x, dtype)` writes a Cast to bool or a float type.
Attributes are Python values: int, float, str, lists of them, or a numpy array (a tensor).
Names get the layer's name as a prefix, so they stay readable and unique. Activations export
the same way, `activation.to_onnx(graph, x) -> name`, elementwise on one tensor.

Layer files never import onnx: the builder keeps nodes as plain tuples, and
`clnet.onnx.export` turns them into an `onnx.ModelProto`, checks every op exists in the
chosen opset (naming the layer otherwise) and runs `onnx.checker` on the result. The batch is
always axis 0 of every tensor and may be dynamic: a layer's nodes must not fix it (use
Flatten(axis=1), or a Reshape whose shape starts with 0).
"""
from __future__ import annotations

import math

import numpy as np

GELU_C, GELU_K = math.sqrt(2 / math.pi), 0.044715  # GELU's tanh approximation (elementwise.cl's GELU_C and GELU_K)

# TensorProto's element types, as Cast's `to` takes them (layer files never import onnx).
TENSOR_TYPES = {"float32": 1, "bool": 9, "float16": 10, "float64": 11}


class GraphBuilder:
    """What a layer's `to_onnx(graph, inputs)` writes its part of an ONNX graph into (the module's
    doc shows how): `dtype` is the graph's float type (the model's, float32 or float64, or float16
    where the export asks for it), in which float initializers are stored, and `opset` the ONNX
    opset version being written, which `require_opset(version, why)` checks. `clnet.onnx.export`
    (and `model.export`) makes one per export and turns its nodes and initializers into an
    `onnx.ModelProto`; a layer of your own only calls its methods: `op`, `constant`, `cast`, `reduce`, `squeeze`, `unsqueeze`, `slice`, `reverse`,
    `gelu`."""
    def __init__(self, dtype, opset: int):
        self.dtype = np.dtype(dtype)       # the graph's float type: float32, float64 or float16
        self.opset = opset
        self.nodes: list[tuple] = []       # (op_type, inputs, outputs, attributes, layer)
        self.initializers: dict[str, np.ndarray] = {}
        self.layer = None                  # the layer exporting now: names and errors refer to it
        self._taken: set[str] = set()

    def _name(self, base: str) -> str:
        prefix = f"{self.layer.name}/" if self.layer is not None else ""
        name, i = prefix + base, 1
        while name in self._taken:
            name, i = f"{prefix}{base}_{i}", i + 1
        self._taken.add(name)
        return name

    def constant(self, name: str, value, dtype=None) -> str:
        """An initializer holding `value`: floats in the model's float type (or in `dtype`, where
        the op fixes it: Resize's scales are float32), integers as int64."""
        array = np.asarray(value)
        if np.issubdtype(array.dtype, np.floating):
            target = np.dtype(dtype or self.dtype)
            if target == np.float16:  # a mask's -1e9 becomes float16's lowest, not -inf (a row all masked stays finite)
                limit = np.finfo(np.float16).max
                array = np.where(np.isfinite(array), np.clip(array, -limit, limit), array)
            array = array.astype(target)
        elif np.issubdtype(array.dtype, np.integer):
            array = array.astype(np.int64)
        else:
            raise TypeError(f"constant {name!r} must hold numbers, got dtype {array.dtype}")
        name = self._name(name)
        # (np.asarray, not np.ascontiguousarray, which makes a number of shape () one of shape (1,):
        # a Gather's scalar index would keep the axis it takes.)
        self.initializers[name] = np.asarray(array, order="C")
        return name

    def op(self, op_type: str, *inputs: str, n_outputs: int | None = None, **attributes) -> str | list[str]:
        """Add a node `op_type(inputs)` with `attributes`; returns the name of its output, or the
        names of its first `n_outputs` outputs when that is given."""
        outputs = [self._name(op_type if k == 0 else f"{op_type}_output{k}") for k in range(n_outputs or 1)]
        self.nodes.append((op_type, tuple(inputs), tuple(outputs), attributes, self.layer))
        return outputs if n_outputs is not None else outputs[0]

    def reduce(self, op_type: str, x: str, axes, keepdims: bool) -> str:
        """`op_type` (ReduceMean, ReduceMax, ...) of `x` over `axes`."""
        axes = [int(a) for a in axes]
        # Opset 13 moved ReduceSum's axes from an attribute to an input, opset 18 the other Reduce ops'.
        if self.opset >= (13 if op_type == "ReduceSum" else 18):
            return self.op(op_type, x, self.constant("axes", axes), keepdims=int(keepdims))
        return self.op(op_type, x, axes=axes, keepdims=int(keepdims))

    def squeeze(self, x: str, axes) -> str:
        """Squeeze of `x`'s `axes` (counting the batch axis)."""
        axes = [int(a) for a in axes]
        if self.opset >= 13:  # opset 13 moved Squeeze's and Unsqueeze's axes from an attribute to an input
            return self.op("Squeeze", x, self.constant("axes", axes))
        return self.op("Squeeze", x, axes=axes)

    def unsqueeze(self, x: str, axes) -> str:
        """Unsqueeze of `x`: axes of length 1 inserted at `axes` (of the output, counting the batch)."""
        axes = [int(a) for a in axes]
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.constant("axes", axes))
        return self.op("Unsqueeze", x, axes=axes)

    def slice(self, x: str, starts, ends, axes) -> str:
        """Slice of `x`: [starts[i], ends[i]) of each axis axes[i] (counting the batch), step 1."""
        starts, ends, axes = ([int(v) for v in values] for values in (starts, ends, axes))
        if self.opset >= 10:  # opset 10 moved Slice's starts, ends and axes from attributes to inputs
            return self.op("Slice", x, self.constant("starts", starts), self.constant("ends", ends),
                           self.constant("axes", axes))
        return self.op("Slice", x, starts=starts, ends=ends, axes=axes)

    def reverse(self, x: str, axis: int, length: int) -> str:
        """`x` reversed along `axis` (counting the batch), whose `length` is known: a Slice of step
        -1 from opset 10, which gave Slice its steps; before, a Gather of the indices backwards."""
        if self.opset >= 10:
            return self.op("Slice", x, self.constant("start", [-1]), self.constant("end", [np.iinfo(np.int64).min]),
                           self.constant("axis", [axis]), self.constant("step", [-1]))
        return self.op("Gather", x, self.constant("backwards", np.arange(length - 1, -1, -1, dtype=np.int64)),
                       axis=axis)

    def gelu(self, x: str, approximate: bool) -> str:
        """GELU of `x`: ONNX's Gelu op from opset 20; before it, the tanh approximation
        (approximate=True, Keras's ops.gelu default) from Tanh, or the exact form from Erf."""
        if self.opset >= 20:
            return self.op("Gelu", x, approximate="tanh") if approximate else self.op("Gelu", x)
        if approximate:
            cube = self.op("Pow", x, self.constant("three", 3.0))
            inner = self.op("Add", x, self.op("Mul", cube, self.constant("k", GELU_K)))
            t = self.op("Tanh", self.op("Mul", inner, self.constant("c", GELU_C)))
            return self.op("Mul", self.op("Mul", x, self.constant("half", 0.5)),
                           self.op("Add", self.constant("one", 1.0), t))
        self.require_opset(9, "GELU's exact form (Erf)")
        erf = self.op("Erf", self.op("Mul", x, self.constant("rsqrt2", 0.5 ** 0.5)))
        # The 0.5 last: were both forms to start with Mul(x, 0.5), onnxruntime (1.15 to 1.32) would
        # merge the two nodes into one and its Gelu fusion would then delete it under the other form.
        one_plus = self.op("Add", self.constant("one", 1.0), erf)
        return self.op("Mul", self.op("Mul", x, one_plus), self.constant("half", 0.5))

    def cast(self, x: str, dtype) -> str:
        """Cast of `x` to `dtype`: bool, or a float type (float16, float32, float64)."""
        return self.op("Cast", x, to=TENSOR_TYPES[np.dtype(dtype).name])

    def require_opset(self, version: int, why: str) -> None:
        if self.opset < version:
            layer = self.layer
            what = "the model" if layer is None else f"layer {layer.name!r} ({type(layer).__name__})"
            raise ValueError(f"{what} needs ONNX opset >= {version} for {why}; got opset={self.opset}")
