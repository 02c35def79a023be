"""GRU: Keras's gated recurrent unit with reset_after=True (its default), gates z, r, h in that
order in its weights, and two bias rows: the input's and the recurrent kernel's."""
from __future__ import annotations

from ..cl.tensor import Tensor
from .recurrent import Recurrent, elementwise_activation


class GRU(Recurrent):
    """Keras's `GRU` with `reset_after=True` (its default), over `(batch, timesteps, features)`, `->
    (batch, units)` (the last step's h), or `(batch, timesteps, units)` with `return_sequences`;
    gates z, r, h in that order in its weights. Keras's arguments, defaults and weight layout, so
    Keras's `get_weights()` arrays load as they are:

    - `units`: a positive integer.
    - `activation="tanh"`, `recurrent_activation="sigmoid"`: any elementwise activations (fused into
      the step kernels; softmax is refused).
    - `use_bias=True`; `kernel_initializer="glorot_uniform"`, `recurrent_initializer="orthogonal"`,
      `bias_initializer="zeros"`.
    - `dropout=0.0`: in [0, 1); in `fit` each input feature is dropped with this probability, the
      same features at every step of a sequence, with `seed=None` its seed. `recurrent_dropout` must
      be 0 (a `ValueError` says so).
    - `return_sequences=False`, `return_state=False` (a call returns `[output, h]`),
      `go_backwards=False`: as SimpleRNN's.
    - `reset_after=True`: the reset gate applied after the recurrent product; False is refused with
      a `ValueError`.
    - `whole_sequence=None` (clnet's own): the form of the time loop, True the sequence form (a
      GPU's default), False the CPU form (a CPU's default); see recurrent.cl.

    Weights: kernel `(features, 3 · units)`, recurrent_kernel `(units, 3 · units)`, bias `(2, 3 ·
    units)`: the input's and the recurrent kernel's. A call may start from a given state, `layer(x,
    initial_state=[h])` (or `layer([x, h])`), a `(batch, units)` tensor of the graph that receives
    its gradient. A masked input is read as Keras reads it: a padded step carries the state over.
    The whole time loop is one launch forward and one backward. Keras's `stateful`, `unroll`,
    regularizers and constraints are not taken."""
    gates = 3
    source = "layers/gru.cl"
    step_names = ("FeedForwardGRU", "CalcHiddenGradientGRU")
    _recurrent_bias = True
    initial_names = (("initial_h",), ("initial_h",))

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 dropout=0.0, recurrent_dropout=0.0, seed=None, return_sequences=False, return_state=False,
                 go_backwards=False, reset_after=True, name=None, input_shape=None, whole_sequence=None):
        super().__init__(units, activation, use_bias, kernel_initializer, recurrent_initializer, bias_initializer,
                         dropout, recurrent_dropout, seed, return_sequences, return_state, go_backwards, name,
                         input_shape, whole_sequence)
        self.recurrent_activation = elementwise_activation("GRU", "recurrent_activation", recurrent_activation)
        if reset_after is not True:
            raise ValueError(f"GRU reset_after={reset_after!r} is not supported: clnet implements Keras's default, "
                             "reset_after=True (the reset gate applied after the recurrent product)")

    def _bias_shape(self):
        return (2, self.cols)

    def _allocate_cell(self, capacity):
        rt, dt = self.rt, self.dtype
        self.candidates = Tensor((capacity, self.steps, self.units), dt, rt)    # h_{t-1} U_h + b_h
        self.delta_rec = self._panels(capacity)                                # dL/d(h_{t-1} U + b_h)
        self.carry = Tensor((capacity, self.units), dt, rt)                     # dL/dh_t z_t

    @property
    def _delta_rec(self):
        return self.delta_rec

    @property
    def _carry_to_h(self):
        return self.carry

    def _forward_arguments(self):
        return {"pre": self.pre, "recurrent": self.recurrent.value, "bias": self._bias_value(), "sums": self.sums,
                "states": self.states, "candidates": self.candidates, "last": self._last,
                "use_bias": int(self.use_bias)}

    def _backward_arguments(self):
        return {"pre": self.pre, "states": self.states, "candidates": self.candidates,
                "transposed": self.transposed, "sums": self.sums, "delta": self.delta, "delta_rec": self.delta_rec,
                "step_delta": self.step_delta, "carry": self.carry, "with_initial": int(self.multi_input)}

    def _onnx_node(self):
        # ONNX's GRU has Keras's gate order; linear_before_reset=1 is reset_after=True.
        act, ract = self.activation, self.recurrent_activation
        return "GRU", [0, 1, 2], lambda bias: [bias[0], bias[1]], {"activations": [ract, act],
                                                                   "linear_before_reset": 1}

    def get_config(self):
        return {**super().get_config(), "recurrent_activation": self.recurrent_activation.get_config(),
                "reset_after": True}
