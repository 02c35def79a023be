"""The layer lifecycle: __init__ validates and stores config, build() declares parameters,
allocate() makes the per-batch device buffers, forward()/backward() launch kernels."""
from __future__ import annotations

import copy
import re

import numpy as np

from ..cl.parameters import ParameterStore
from ..cl.tensor import Tensor


class KerasTensor:
    """A symbolic batch of samples: the output of a layer call, what `Model(inputs, outputs)` is
    made of. `shape` has the batch axis (None) first, as in Keras."""

    def __init__(self, sample_shape: tuple, call: "Call", index: int = 0):
        self.sample_shape = tuple(sample_shape)
        self.call = call
        self.index = index  # which of the call's outputs (a recurrent layer's states follow its output)

    @property
    def shape(self) -> tuple:
        return (None, *self.sample_shape)

    def describe(self) -> str:
        return f"{self.shape} from {self._producer()}"

    def _producer(self) -> str:
        return self.call.layer.describe() + (f" (output {self.index})" if self.index else "")

    def __repr__(self) -> str:
        return f"<KerasTensor shape={self.shape}, produced by {self._producer()}>"


class Call:
    """One application of a layer to symbolic inputs. Calls are numbered as they are made, and a
    call's inputs always exist before it, so that numbering is a topological order of any graph.
    A call has an output per shape in `output_shapes`: most layers one, `output`; a recurrent
    layer with return_state also its final states."""
    made = 0

    def __init__(self, layer: "Layer", inputs: list[KerasTensor], output_shapes: list[tuple]):
        self.layer, self.inputs = layer, list(inputs)
        Call.made += 1
        self.number = Call.made
        self.outputs = [KerasTensor(shape, self, k) for k, shape in enumerate(output_shapes)]
        self.output = self.outputs[0]
        layer.__dict__.setdefault("inbound_calls", []).append(self)


class Layer:
    registry: dict[str, type["Layer"]] = {}
    # Merge layers take a list of inputs: forward(xs, rows), backward(grad, rows, input_grads) -> list.
    multi_input = False

    def __init_subclass__(cls, registered=True, **kwargs):
        super().__init_subclass__(**kwargs)
        # A shared base such as _Merge, or a part another layer builds for itself (JoinedDense,
        # registered=False), is no layer of a config of its own.
        if registered and not cls.__name__.startswith("_"):
            Layer.registry[cls.__name__] = cls

    def __init__(self, name: str | None = None, input_shape=None):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string, got {name!r}")
        # Keras's automatic names, given at construction: dense, dense_1, ... (clear_session()
        # starts them again).
        self.name = unique_name(self.name_prefix or snake_case(type(self).__name__)) if name is None else name
        self.inbound_calls: list[Call] = []  # its calls, in the order made
        self.input_shape = None if input_shape is None else _shape("input_shape", input_shape)
        self.output_shape = None
        self.built = False
        self.capacity = 0  # rows the per-batch buffers hold

    name_prefix: str | None = None  # the automatic names' stem, if not the class's name in snake case

    def describe(self) -> str:
        return f"{type(self).__name__} {self.name!r}" if self.name else type(self).__name__

    @property
    def output(self):
        """The output of the layer's first call (a list for a layer of several), as Keras's."""
        return self._first_call("output", lambda call: call.output if len(call.outputs) == 1 else list(call.outputs))

    @property
    def input(self):
        """The input of the layer's first call (a list for a layer of several), as Keras's."""
        return self._first_call("input", lambda call: call.inputs[0] if len(call.inputs) == 1 else list(call.inputs))

    def _first_call(self, what: str, pick):
        calls = self.__dict__.get("inbound_calls")
        if not calls:
            raise AttributeError(f"{self.describe()} has never been called and thus has no defined {what}")
        return pick(calls[0])

    # -- the functional API -------------------------------------------------------------------
    def __call__(self, inputs) -> KerasTensor | list[KerasTensor]:
        """Apply the layer to symbolic tensors (Input layers or other calls' outputs). Calling one
        layer twice shares its weights; shapes are checked here, when the graph is made. A layer
        of several outputs returns their list, as Keras (`y, h, c = LSTM(8, return_state=True)(x)`)."""
        tensors = self._symbolic(inputs)
        if self.built:
            shapes = [t.sample_shape for t in tensors]
            self.check_weights_fit(shapes if self.multi_input else shapes[0])
        if self.multi_input:
            shapes = [self.compute_output_shape([t.sample_shape for t in tensors], tensors)]
        elif len(tensors) != 1:
            raise ValueError(f"{self.describe()} takes one input, got {len(tensors)}")
        else:
            shapes = self.compute_output_shapes(tensors[0].sample_shape)
        call = Call(self, tensors, shapes)
        return call.output if len(call.outputs) == 1 else list(call.outputs)

    def check_weights_fit(self, input_shape) -> None:
        """A built layer called on inputs of another shape than it was built for runs with the
        weights it has (a recurrent layer over fewer steps): a trial build for that shape, on a
        store never allocated, must declare weights of the same shapes, or the call raises here."""
        built = self.input_shapes if self.multi_input else self.input_shape
        if input_shape == built:
            return
        trial = copy.copy(self)
        trial.allocated_rows = 0
        scratch = ParameterStore(self.rt, self.dtype)
        trial.build(input_shape, scratch, np.random.default_rng(0))
        if sorted(p.shape for p in scratch.parameters) != sorted(p.shape for p in self.parameters):
            raise ValueError(f"{self.describe()} was built for inputs of shape {built} and cannot be called on "
                             f"inputs of shape {input_shape}: its weights have other shapes (a layer keeps the "
                             "weights it was built with)")

    def _symbolic(self, inputs) -> list[KerasTensor]:
        """The tensors a call reads: `inputs` (one or a list), an Input standing for its output."""
        tensors = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        tensors = [t.output if isinstance(t, Layer) and isinstance(getattr(t, "output", None), KerasTensor)
                   else t for t in tensors]
        for t in tensors:
            if not isinstance(t, KerasTensor):
                raise TypeError(f"{self.describe()} was called on {type(t).__name__}; expected the output of "
                                "Input(shape) or of another layer call")
        return tensors

    # -- lifecycle -------------------------------------------------------------------------
    def build(self, input_shape: tuple, store: ParameterStore, rng: np.random.Generator) -> tuple:
        """Check the input shape (without the batch axis), declare parameters, return the output shape."""
        self.input_shape = tuple(input_shape)
        self.rt, self.dtype = store.rt, store.dtype
        self.output_shape = self.compute_output_shape(self.input_shape)
        self.built = True
        return self.output_shape

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape

    def compute_output_shapes(self, input_shape: tuple) -> list[tuple]:
        """Every output's shape. A layer of several outputs returns them all from forward, as a
        list in this order, and takes their gradients in backward: the first as `grad`, the
        others as `state_grads` (None where nothing reads one)."""
        return [self.compute_output_shape(input_shape)]

    def check_input(self, x: np.ndarray, argument: str) -> None:
        """Check the values of `x`, a model input this layer reads directly, before anything is
        launched for it (Embedding: ids in range); raise a ValueError naming `argument`. Most
        layers take any finite number, which the model has checked already."""

    def allocate(self, capacity: int) -> None:
        """Make the device buffers for batches of up to `capacity` rows."""
        self.capacity = capacity

    # The batch rows allocate() was last given by a model: a layer that several models read holds
    # the most any of them asked for, never fewer (see ensure_rows).
    allocated_rows = 0

    def ensure_rows(self, rows: int) -> None:
        """Buffers for batches of at least `rows` rows: allocate(rows) unless they are there."""
        if rows > self.allocated_rows:
            self.allocate(rows)
            self.allocated_rows = rows

    def forward(self, x: Tensor, rows: int) -> Tensor:
        raise NotImplementedError

    def backward(self, grad: Tensor, rows: int, input_grad: bool) -> Tensor | None:
        """Given dL/d(output), compute parameter gradients and, if asked, return dL/d(input)."""
        raise NotImplementedError

    # -- weights and config ----------------------------------------------------------------
    @property
    def parameters(self) -> list:
        return []

    def get_weights(self) -> list[np.ndarray]:
        return [p.to_keras(p.value.numpy()) for p in self.parameters]

    def gradients(self) -> list[np.ndarray]:
        """The last backward pass's parameter gradients, in get_weights() layout (zeros for a
        non-trainable weight, which the loss does not depend on in training)."""
        return [p.to_keras(p.grad.numpy()) if p.trainable else np.zeros(p.keras_index.shape, self.dtype)
                for p in self.parameters]

    def set_weights(self, weights) -> None:
        weights = list(weights)
        if not self.parameters and weights:
            raise ValueError(f"layer {self.name!r} has no weights, got {len(weights)} arrays")
        for p, array in zip(self.parameters, check_weights(self, weights, [p.keras_index.shape for p in self.parameters])):
            device = np.zeros(p.size, self.dtype)  # padding stays 0
            p.from_keras(array, device)
            p.value.write(device.reshape(p.shape))

    def count_params(self) -> int:
        return sum(w.size for w in self.get_weights()) if self.built else 0

    def get_config(self) -> dict:
        config = {"name": self.name}
        if self.input_shape is not None and not self.built:
            config["input_shape"] = list(self.input_shape)
        return config

    @classmethod
    def from_config(cls, config: dict) -> "Layer":
        return cls(**config)

    def to_onnx(self, graph, inputs: list[str]) -> list[str]:
        """Add this layer's ONNX nodes to `graph` (a clnet.onnx.GraphBuilder), reading the tensors
        named `inputs`; return the names of the tensors it writes. Every layer class defines it:
        how is in clnet/onnx/builder.py."""
        raise NotImplementedError(f"layer class {type(self).__name__} has no ONNX export: give it a to_onnx "
                                  "method (see clnet/onnx/builder.py)")

    # The activation whose derivative a loss may fold into its own gradient (softmax + cross-entropy).
    # A layer ending in softmax may also define forward_logits(x, rows): its forward pass without
    # the softmax, returning the softmax's input, which a cross-entropy loss then takes itself.
    output_activation = None
    # y^T (features, rows), Tensor.transposed: a layer whose weight gradient reads its input along
    # rows says so (`reads_transposed`: Dense), and the model's build tells the layer below to
    # write it in its forward pass (`writes_transposed`: Dense, pooling), so that no layer writes a
    # y^T nobody reads and every step launches the same kernels.
    reads_transposed = False
    writes_transposed = False
    # A tensor read by several layers gets the sum of their gradients. A single-input layer that
    # `adds_to_input_grad` takes backward(..., add_to=t), the gradient the later readers gave, and
    # returns dL/dx + t from the same launch: no separate sum (LayerNormalization, whose input in
    # a transformer is the residual stream, read by the norm and by the residual Add).
    adds_to_input_grad = False
    # The forward counterpart: a layer that `adds_to_output` takes forward(..., add=t) and returns
    # y + t from the same launch (a linear Dense, MultiHeadAttention through its output Dense). Where
    # a layer that `sums_inputs` (Add) of two tensors is the only reader of one of them, made by
    # such a layer, and the other is ready before that layer runs, the model has the layer add it
    # and the Add launches nothing: a transformer's residual connections.
    adds_to_output = False
    sums_inputs = False
    # Set by the model before each forward pass: training (fit) or inference (evaluate, predict),
    # and the optimizer's step count, which seeds per-step randomness (Dropout).
    training = False
    step = 0

    # A distribution that copies gradients off the device while the backward pass goes on
    # (clnet/distribute/base.py, PieceReads) asks a layer whose gradients are large for them in
    # parts: gradient_parts(parts) gives the flat ranges [start, end) of the store's gradients that
    # the layer's backward pass completes one after another (none: all at its end, the default),
    # and hand_over_gradients(parts, done) has the backward pass call done(start, end, event) as
    # each is enqueued, `event` the launch that writes it (parts 1, done None: as without).
    def gradient_parts(self, parts: int) -> list[tuple[int, int]]:
        return []

    def hand_over_gradients(self, parts: int, done) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


_name_counts: dict[str, int] = {}


def unique_name(stem: str) -> str:
    """`stem`, then stem_1, stem_2, ... on later calls: Keras's automatic names."""
    count = _name_counts.get(stem, 0)
    _name_counts[stem] = count + 1
    return stem if count == 0 else f"{stem}_{count}"


def clear_names() -> None:
    """Start the automatic names again (clnet.utils.clear_session)."""
    _name_counts.clear()


def snake_case(name: str) -> str:
    """A class name as Keras writes it in layer names: BatchNormalization -> batch_normalization,
    LSTM -> lstm, Conv2D -> conv2d."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def _shape(argument: str, value) -> tuple:
    try:
        shape = tuple(int(s) for s in (value if isinstance(value, (tuple, list)) else (value,)))
    except (TypeError, ValueError):
        raise TypeError(f"{argument} must be a tuple of positive integers, got {value!r}") from None
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"{argument} must be a tuple of positive integers, got {value!r}")
    return shape


def check_weights(layer: Layer, weights, expected: list[tuple]) -> list[np.ndarray]:
    """Weights given to set_weights, checked against the Keras-layout shapes the layer expects."""
    weights = list(weights)
    if len(weights) != len(expected):
        raise ValueError(f"layer {layer.name!r} expects {len(expected)} weight arrays with shapes "
                         f"{expected}, got {len(weights)}")
    arrays = []
    for i, (w, shape) in enumerate(zip(weights, expected)):
        w = np.asarray(w)
        if w.shape != shape:
            raise ValueError(f"layer {layer.name!r} weight {i} must have shape {shape}, got {w.shape}")
        if not np.issubdtype(w.dtype, np.number) or not np.all(np.isfinite(w)):
            raise ValueError(f"layer {layer.name!r} weight {i} must be finite numbers")
        arrays.append(w)
    return arrays
