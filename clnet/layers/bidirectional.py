"""Bidirectional: Keras's wrapper running a recurrent layer forward and a copy of it backward in
time over the same input, their outputs merged.

The two layers are whole SimpleRNN/LSTM/GRU layers of their own (their kernels, their weights:
the forward layer's, then the backward's, as Keras lists them). The backward layer reads the
sequence reversed (go_backwards) and writes its outputs in that order; one launch flips them into
time order as it merges (FeedForwardBidirectional), and one takes the merged gradient back apart
(CalcHiddenGradientBidirectional). The input's gradient is the sum of both layers': a Sum more.
On a GPU the backward layer runs on the runtime's branch queue, beside the forward one.
A masked input goes to both layers, and where they return sequences the merge zeros the padded
steps, as Keras's Bidirectional (zero_output_for_mask).
"""
from __future__ import annotations

import copy

import numpy as np

from ..cl.tensor import Tensor
from .base import Layer, check_call_arguments, tensors_of
from .merge import merge_program
from .recurrent import Recurrent, call_with_initial_state

MERGE_MODES = {"concat": 0, "sum": 1, "ave": 2, "mul": 3, None: 4}  # bidirectional.cl's MERGE_*


class Bidirectional(Layer):
    """Keras's `Bidirectional(layer, merge_mode="concat", backward_layer=None)`: a copy of a
    recurrent layer reads `(batch, timesteps, features)` forward in time and another reads it
    backward, and their outputs are merged, the backward one flipped back into time order: `->
    (batch, 2 · units)` with `"concat"` (or `(batch, timesteps, 2 · units)` with
    `return_sequences`).

    - `layer`: a SimpleRNN, LSTM or GRU, whose config makes the forward layer and, with
      `go_backwards` flipped, the backward one. As in Keras, the layers are made anew from their
      configs: `layer`'s weights are not reused.
    - `merge_mode="concat"`: `"concat"` (the forward layer's features first), `"sum"`, `"ave"`,
      `"mul"`, or None for both outputs (a list).
    - `backward_layer=None`: a SimpleRNN, LSTM or GRU of your own for the backward direction, with
      the other `go_backwards` and the same `return_sequences`, `return_state` and `units` (clnet
      requires the same units, where Keras's `"concat"` and None would take two).

    Each direction is a layer of its own weights (`get_weights()`: the forward layer's, then the
    backward's, named as Keras names them: `forward_lstm`, `backward_lstm`). With `return_state` a
    call returns `[output, forward states, backward states]`, and `initial_state` takes the forward
    layer's states, then the backward's (`[h_f, c_f, h_b, c_b]` for an LSTM), or `layer([x,
    *states])`. A masked input goes to both layers, and where they return sequences the merge zeros
    the padded steps, as Keras's; a masked input with `merge_mode=None` and `return_sequences`
    raises. On a GPU the backward layer runs on a second queue, beside the forward one."""
    def __init__(self, layer, merge_mode="concat", backward_layer=None, name=None, input_shape=None):
        super().__init__(name, input_shape)
        for argument, value in (("layer", layer), ("backward_layer", backward_layer)):
            if not isinstance(value, Recurrent) and (value is not None or argument == "layer"):
                raise ValueError(f"Bidirectional {argument} must be a SimpleRNN, LSTM or GRU instance, got {value!r}")
        if merge_mode not in MERGE_MODES:
            raise ValueError(f"Bidirectional merge_mode must be one of 'sum', 'mul', 'ave', 'concat' or None, "
                             f"got {merge_mode!r}")
        self.merge_mode = merge_mode
        self.forward_layer = _renamed(layer, "forward_")
        if backward_layer is None:
            self.backward_layer = _renamed(layer, "backward_", go_backwards=not layer.go_backwards)
        else:
            self.backward_layer = _renamed(backward_layer, "")
        forward, backward = self.forward_layer, self.backward_layer
        if forward.go_backwards == backward.go_backwards:
            raise ValueError(f"Bidirectional's forward and backward layers must have different go_backwards, got "
                             f"{forward.go_backwards} for both")
        for attribute in ("return_sequences", "return_state"):
            if getattr(forward, attribute) != getattr(backward, attribute):
                raise ValueError(f"Bidirectional's forward and backward layers must have the same {attribute}, got "
                                 f"{getattr(forward, attribute)} and {getattr(backward, attribute)}")
        if forward.units != backward.units:  # (Keras's concat and None would take two)
            raise ValueError(f"Bidirectional's forward and backward layers must have the same units, got "
                             f"{forward.units} and {backward.units}")
        self.return_sequences, self.return_state = forward.return_sequences, forward.return_state
        self.called_with_initial_state = None

    @property
    def _layers(self) -> tuple[Recurrent, Recurrent]:
        return self.forward_layer, self.backward_layer

    def _state_slices(self) -> tuple[slice, slice]:
        """Where each layer's states lie among the initial states, or among the final ones."""
        count = self.forward_layer.state_count
        return slice(0, count), slice(count, count + self.backward_layer.state_count)

    # -- the functional API -------------------------------------------------------------------
    mask_handling = "consume"

    def __call__(self, inputs, initial_state=None, training=None, mask=None):
        """`layer(x)`, or with initial states, as Keras: the forward layer's, then the backward
        layer's (`initial_state=[h_f, h_b]`; LSTM: `[h_f, c_f, h_b, c_b]`), or `layer([x, *states])`.
        `mask` (batch, timesteps), if given, stands for the mask x carries."""
        check_call_arguments(self, (), training=training)
        x = tensors_of(inputs[0] if isinstance(inputs, (list, tuple)) else inputs)
        if self.merge_mode is None and self.return_sequences and (mask is not None
                                                                  or getattr(x, "_keras_mask", None) is not None):
            raise ValueError(f"{self.describe()} was given a masked input; with merge_mode=None and return_sequences "
                             "clnet cannot zero the forward output's padded steps yet: use a merge_mode")
        return call_with_initial_state(self, inputs, initial_state, self._check_initial_state, mask)

    def compute_mask(self, inputs, mask):
        """As Keras's: the output carries the input's mask where the layers return sequences."""
        output = mask if self.return_sequences else None
        states = [None] * (self.forward_layer.state_count + self.backward_layer.state_count) * self.return_state
        return [output, *states] if states else output

    def _check_initial_state(self, states: list) -> None:
        forward, backward = self._layers
        expected = [forward.units] * forward.state_count + [backward.units] * backward.state_count
        if [s.sample_shape for s in states] != [(units,) for units in expected]:
            raise ValueError(f"{self.describe()} takes initial_state: the forward layer's states, then the backward "
                             f"layer's, {len(expected)} tensors of shapes {[(None, u) for u in expected]}; got "
                             f"{[s.describe() for s in states]}")

    def compute_output_shape(self, input_shape):
        return self.compute_output_shapes(input_shape)[0]

    def compute_output_shapes(self, input_shape):
        """The merged output (two with merge_mode None), then with return_state the forward
        layer's final states and the backward layer's, as Keras."""
        (y, *states_f), (y_rev, *states_b) = (layer.compute_output_shapes(input_shape) for layer in self._layers)
        if self.merge_mode == "concat":
            outputs = [(*y[:-1], y[-1] + y_rev[-1])]
        else:
            outputs = [y] if self.merge_mode is not None else [y, y_rev]
        return outputs + states_f + states_b

    # -- lifecycle ------------------------------------------------------------------------------
    def build(self, input_shape, store, rng):
        if self.built:  # a copy for another call of this layer (see Model.build): layers of its own
            self.forward_layer, self.backward_layer = (copy.copy(layer) for layer in self._layers)
        if self.multi_input:  # (x's shape, then the initial states')
            self.input_shapes = [tuple(s) for s in input_shape]
            input_shape = self.input_shapes[0]
        self.input_shape = tuple(input_shape)
        self.rt, self.dtype = store.rt, store.dtype
        for layer, states in zip(self._layers, self._state_slices()):
            layer.called_with_initial_state = layer.multi_input = self.multi_input
            layer.build([self.input_shape, *self.input_shapes[1:][states]] if self.multi_input else self.input_shape,
                        store, rng)
        shapes = self.compute_output_shapes(self.input_shape)
        self.output_shape = shapes[0]
        forward = self.forward_layer
        self.steps = forward.steps if self.return_sequences else 1
        self.mode = MERGE_MODES[self.merge_mode]
        program = self.rt.program(("layers/bidirectional.cl",), self.dtype)
        # (bound to the buffers by allocate)
        self._kernels = {"merge": self.rt.kernel(program, "FeedForwardBidirectional", self.dtype),
                         "split": self.rt.kernel(program, "CalcHiddenGradientBidirectional", self.dtype),
                         "sum": self.rt.kernel(merge_program(self.rt, self.dtype), "Sum", self.dtype)}
        self.built = True
        return self.output_shape

    def allocate(self, capacity):
        super().allocate(capacity)
        for layer in self._layers:
            layer.allocate(capacity)
        units = self.forward_layer.units
        rows = (capacity, self.steps) if self.return_sequences else (capacity,)
        # The merged output (merge_mode None: the backward output in time order).
        self.outputs = Tensor((*rows, self.output_shape[-1] if self.merge_mode else units), self.dtype, self.rt)
        # dL/d(each layer's output), the backward one in its processing order.
        self.output_grads = [Tensor((*rows, layer.units), self.dtype, self.rt) for layer in self._layers]
        self.input_grad = Tensor((capacity, *self.input_shape), self.dtype, self.rt)  # both layers' summed
        # Each kernel's arguments named once; a launch gives the layers' outputs and gradients,
        # the positions, and the mask (see forward).
        kernels, fixed = self._kernels, {"units": units, "steps": self.steps, "mode": self.mode}
        self._merge = kernels["merge"].bind(("forward", "backward", "positions", "mask", "masked"), out=self.outputs,
                                            **fixed)
        # (MERGE_NONE writes only grad_backward: the forward layer's gradient is the one given.)
        self._split = kernels["split"].bind(("grad", "forward", "backward", "positions", "mask", "masked"),
                                            grad_forward=self.output_grads[0], grad_backward=self.output_grads[1],
                                            **fixed)
        self._sum = kernels["sum"].bind(("a", "b", "total"), out=self.input_grad)

    def _on_both(self, run, given) -> list:
        """[run(forward layer, given[0]), run(backward layer, given[1])]: the backward layer's
        launches first, on the runtime's branch queue (a GPU's), then the forward layer's on the
        main queue, so that both layers run at once; the main queue then waits for the branch."""
        with self.rt.branch():
            backward = run(self.backward_layer, given[1])
        forward = run(self.forward_layer, given[0])
        self.rt.join_branch()
        return [forward, backward]

    def _size(self, rows: int) -> tuple:
        positions = rows * self.steps
        return (*self.rt.four_per_item(positions * 4 * -(-self.forward_layer.units // 4)), positions)

    def forward(self, x, rows, mask=None):
        x, *states = x if self.multi_input else [x]

        def run(layer, given):
            layer.training, layer.step = self.training, self.step
            result = layer.forward([x, *states[given]] if self.multi_input else x, rows, mask=mask)
            return result if self.return_state else [result]

        (self.y, *final_f), (self.y_rev, *final_b) = self._on_both(run, self._state_slices())
        global_size, local_size, positions = self._size(rows)
        # Keras's zero_output_for_mask where the layers return sequences: zeros at the padded steps.
        self._zeroed = (mask, 1) if mask is not None and self.return_sequences else (self.outputs, 0)
        if self.merge_mode is None and not self.return_sequences:
            outputs = [self.y, self.y_rev]  # the last steps: nothing to flip
        else:
            self._merge(global_size, local_size, self.y, self.y_rev, positions, *self._zeroed)
            outputs = [self.outputs] if self.merge_mode is not None else [self.y, self.outputs]
        outputs += final_f + final_b
        return outputs[0] if len(outputs) == 1 else outputs

    def backward(self, grad, rows, input_grad, activation_done=False, state_grads=None):
        """`grad`: dL/d(output) (None where only states are read); `state_grads`: the later
        outputs' (merge_mode None: the backward output's first, then the states'), None for those
        nothing reads. As a recurrent layer's: with initial states, `input_grad` is a list."""
        wanted = list(input_grad) if self.multi_input else [input_grad]
        later = list(state_grads or [])
        grad_rev = later.pop(0) if self.merge_mode is None else None  # dL/d(the flipped backward output)
        later += [None] * (self.forward_layer.state_count + self.backward_layer.state_count - len(later))
        global_size, local_size, positions = self._size(rows)
        grad_f, grad_b = self.output_grads
        if self.merge_mode is None:
            grad_f = grad
            if grad_rev is not None and self.return_sequences:
                self._split(global_size, local_size, grad_rev, self.y, self.y_rev, positions, *self._zeroed)
            else:
                grad_b = grad_rev
        elif grad is not None:
            self._split(global_size, local_size, grad, self.y, self.y_rev, positions, *self._zeroed)
        else:
            grad_f = grad_b = None
        # A layer given no gradient still runs its backward pass: its weights' gradients are zeros.
        def run(layer, given):
            g, states = given
            asked = [wanted[0], *wanted[1:][states]] if self.multi_input else wanted[0]
            result = layer.backward(g, rows, asked, state_grads=later[states])
            return result if self.multi_input else [result]

        (dx_f, *initial_f), (dx_b, *initial_b) = self._on_both(run, list(zip((grad_f, grad_b), self._state_slices())))
        dx = None
        if wanted[0]:
            total = rows * int(np.prod(self.input_shape))
            self._sum(*self.rt.four_per_item(total), dx_f, dx_b, total)
            dx = self.input_grad
        return [dx, *initial_f, *initial_b] if self.multi_input else dx

    # -- weights and config ----------------------------------------------------------------------
    @property
    def parameters(self):
        return self.forward_layer.parameters + self.backward_layer.parameters

    def set_weights(self, weights):
        self.require_built("set_weights")
        weights = list(weights)
        half = len(self.forward_layer.parameters)
        expected = half + len(self.backward_layer.parameters)
        if len(weights) != expected:
            raise ValueError(f"layer {self.name!r} expects {expected} weight arrays (the forward layer's {half}, then "
                             f"the backward layer's), got {len(weights)}")
        self.forward_layer.set_weights(weights[:half])
        self.backward_layer.set_weights(weights[half:])

    def to_onnx(self, graph, inputs):
        """ONNX's RNN, LSTM or GRU op with direction="bidirectional": W, R, B of the forward layer
        and the backward one stacked, (2, ...), the activations the forward's then the backward's.
        Its Y, (steps, 2, batch, units), holds the backward direction in time order, as Keras's
        merge reads it; Y_h the final states (2, batch, units), the output without
        return_sequences. The merge is a Reshape of both directions side by side (concat), a
        ReduceSum/ReduceMean/ReduceProd over the direction axis, or a Gather of each (None), then
        the Transpose and Reshape that bring the batch axis first."""
        forward, backward = self._layers
        if forward.go_backwards or type(forward) is not type(backward):
            raise ValueError(f"{self.describe()} cannot be exported to ONNX: its forward layer must read the "
                             "sequence forward and be of the backward layer's class (ONNX's bidirectional "
                             f"op), got {forward.describe()} (go_backwards={forward.go_backwards}) and "
                             f"{backward.describe()}")
        steps, units, count = forward.steps, forward.units, forward.state_count
        x, *initial = inputs
        x = graph.op("Transpose", x, perm=[1, 0, 2])                        # (steps, batch, features)
        (op, weights_f, attributes), (_, weights_b, attributes_b) = (layer._onnx_direction() for layer in self._layers)
        weights = [graph.constant(name, np.stack([f, b]))                    # (2, gates * units, ...)
                   for name, f, b in zip(("W", "R", "B"), weights_f, weights_b)]
        for key in ("activations", "activation_alpha", "activation_beta"):
            joined = attributes.get(key, []) + attributes_b.get(key, [])
            attributes |= {key: joined} if joined else {}
        if initial:  # the forward layer's states, then the backward's: each kind as (2, batch, units)
            shaped = [graph.op("Reshape", s, graph.constant("initial_shape", [1, -1, units])) for s in initial]
            initial = ["", *(graph.op("Concat", shaped[k], shaped[count + k], axis=0) for k in range(count))]
        # Y_h: the output without return_sequences; Y_h (and Y_c): the states with return_state.
        wanted = 1 + (count if self.return_state else int(not self.return_sequences))
        y, *states = graph.op(op, x, *weights, *initial, hidden_size=units, direction="bidirectional",
                              n_outputs=wanted, **attributes)              # (steps, 2, batch, units)
        # The direction axis: 1 of Y, 0 of Y_h. Merged along it (or one direction taken) while
        # time-major, then brought batch-first as a unidirectional layer's output is.
        source, axis = (y, 1) if self.return_sequences else (states[0], 0)
        if self.return_sequences:
            batch_first = lambda t, width: graph.op("Reshape", graph.op("Transpose", t, perm=[2, 0, 1, 3]),
                                                    graph.constant("shape", [0, steps, width]))
        else:
            batch_first = lambda t, width: graph.op("Reshape", graph.op("Transpose", t, perm=[1, 0, 2]),
                                                    graph.constant("shape", [-1, width]))
        one = lambda t, d, axis: graph.op("Gather", t, graph.constant("direction", [d]), axis=axis)  # kept as 1
        if self.merge_mode == "concat":
            outputs = [batch_first(source, 2 * units)]
        elif self.merge_mode is None:
            outputs = [batch_first(one(source, d, axis), units) for d in (0, 1)]
        else:
            reduce = {"sum": "ReduceSum", "ave": "ReduceMean", "mul": "ReduceProd"}[self.merge_mode]
            outputs = [batch_first(graph.reduce(reduce, source, [axis], keepdims=True), units)]
        if self.return_state:  # h (and c) of each direction, (batch, units)
            outputs += [graph.op("Reshape", one(state, d, 0), graph.constant("state_shape", [-1, units]))
                        for d in (0, 1) for state in states]
        return outputs

    def get_config(self):
        entry = lambda layer: {"class_name": type(layer).__name__, "config": layer.get_config()}
        return {**super().get_config(), "layer": entry(self.forward_layer), "merge_mode": self.merge_mode,
                "backward_layer": entry(self.backward_layer)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("layer", "backward_layer"):
            entry = config.get(key)
            if isinstance(entry, dict):
                if entry.get("class_name") not in Layer.registry:
                    raise ValueError(f"Bidirectional {key}: unknown layer class {entry.get('class_name')!r}")
                config[key] = Layer.registry[entry["class_name"]].from_config(entry["config"])
        return cls(**config)


def _renamed(layer: Recurrent, prefix: str, **changes) -> Recurrent:
    """A new layer from `layer`'s config, named as Keras names Bidirectional's (forward_lstm,
    backward_lstm), with `changes`."""
    config = {**layer.get_config(), **changes}
    base = layer.name or type(layer).__name__.lower()
    config["name"] = prefix + base.removeprefix(prefix) if prefix else layer.name or "backward_" + base
    made = type(layer).from_config(config)
    made.fixed_form = layer.fixed_form  # whole_sequence, which is no part of the config
    return made
