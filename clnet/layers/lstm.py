"""LSTM: Keras's long short-term memory layer, gates i, f, c, o in that order in its weights."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .recurrent import Recurrent, elementwise_activation


class LSTM(Recurrent):
    """Keras's `LSTM`, long short-term memory over `(batch, timesteps, features)`, `-> (batch,
    units)` (the last step's h), or `(batch, timesteps, units)` with `return_sequences`; gates i, f,
    c, o in that order in its weights. Keras's arguments, defaults and weight layout, so Keras's
    `get_weights()` arrays load as they are:

    - `units`: a positive integer.
    - `activation="tanh"`, `recurrent_activation="sigmoid"`: any elementwise activations (fused into
      the step kernels; softmax is refused).
    - `use_bias=True`; `kernel_initializer="glorot_uniform"`, `recurrent_initializer="orthogonal"`,
      `bias_initializer="zeros"`; `unit_forget_bias=True`: the forget gate's bias starts at 1, as
      Keras's.
    - `dropout=0.0`: in [0, 1); in `fit` each input feature is dropped with this probability, the
      same features at every step of a sequence, with `seed=None` its seed. `recurrent_dropout` must
      be 0 (a `ValueError` says so).
    - `return_sequences=False`: every step's h instead of the last (in processing order with
      `go_backwards`, as Keras's).
    - `return_state=False`: a call returns `[output, h, c]`, the final states graph tensors that
      later layers read and train through (the functional API only).
    - `go_backwards=False`: process the sequence from its last step.
    - `whole_sequence=None` (clnet's own): the form of the time loop, True the sequence form (a
      GPU's default), False the CPU form (a CPU's default); see recurrent.cl.

    Weights: kernel `(features, 4 · units)`, recurrent_kernel `(units, 4 · units)`, bias `(4 ·
    units,)`. A call may start from given states, `layer(x, initial_state=[h, c])` (or Keras's
    `layer([x, h, c])`), `(batch, units)` tensors of the graph that receive their gradients. A
    masked input is read as Keras reads it: a padded step carries the states over. The whole time
    loop is one launch forward and one backward. Keras's `stateful`, `unroll`, regularizers and
    constraints are not taken."""
    gates = 4
    source = "layers/lstm.cl"
    step_names = ("FeedForwardLSTM", "CalcHiddenGradientLSTM")
    state_count = 2
    initial_names = (("initial_h", "initial_c"), ("initial_c",))

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=True, dropout=0.0, recurrent_dropout=0.0, seed=None, return_sequences=False,
                 return_state=False, go_backwards=False, name=None, input_shape=None, whole_sequence=None):
        super().__init__(units, activation, use_bias, kernel_initializer, recurrent_initializer, bias_initializer,
                         dropout, recurrent_dropout, seed, return_sequences, return_state, go_backwards, name,
                         input_shape, whole_sequence)
        self.recurrent_activation = elementwise_activation("LSTM", "recurrent_activation", recurrent_activation)
        self.unit_forget_bias = bool(unit_forget_bias)

    def _initial_bias(self, rng):
        if not self.unit_forget_bias:
            return super()._initial_bias(rng)
        # Keras: the forget gate's bias starts at 1, the others from bias_initializer.
        units = self.units
        return np.concatenate([self.bias_initializer((units,), rng), np.ones(units),
                               self.bias_initializer((2 * units,), rng)])

    def _allocate_cell(self, capacity):
        self.cells = Tensor((capacity, self.steps, self.units), self.dtype, self.rt)  # c of each step
        self.carry = Tensor((capacity, self.units), self.dtype, self.rt)              # dL/dc_t f_t
        # c of the last step, the second state return_state gives.
        self.last_cell = Tensor((capacity, self.units), self.dtype, self.rt) if self.return_state else None

    def _final_states(self):
        return [self.last, self.last_cell]

    @property
    def _initial_c(self) -> Tensor:
        return self.initial[1] if self.multi_input else self.cells  # a stand-in the kernels never read

    def _forward_arguments(self):
        # Without return_state, `cells` stands in for last_cell, which the kernels then never write.
        last_cell = self.last_cell if self.last_cell is not None else self.cells
        return {"pre": self.pre, "recurrent": self.recurrent.value, "sums": self.sums, "states": self.states,
                "cells": self.cells, "last": self._last, "last_cell": last_cell}

    def _backward_arguments(self):
        return {"pre": self.pre, "cells": self.cells, "transposed": self.transposed,
                "sums": self.sums, "delta": self.delta, "step_delta": self.step_delta, "carry": self.carry,
                "carry_h": self.carry_h, "with_initial": int(self.multi_input)}

    def _initial_gradients(self, rows, wanted):
        # dL/dc_0 is what the first step carries back: dL/dc_0 f_0 (see lstm.cl).
        return [*super()._initial_gradients(rows, wanted[:1]), self.carry if wanted[1] else None]

    def _onnx_node(self):
        # ONNX's LSTM gates are i, o, f, c; its activations (f, g, h) are ours (recurrent, act, act).
        act, ract = self.activation, self.recurrent_activation
        return "LSTM", [0, 3, 1, 2], lambda bias: [bias, 0 * bias], {"activations": [ract, act, act]}

    def get_config(self):
        return {**super().get_config(), "recurrent_activation": self.recurrent_activation.get_config(),
                "unit_forget_bias": self.unit_forget_bias}
