"""SimpleRNN: h_t = activation(x_t W + b + h_{t-1} U), Keras's fully connected recurrent layer."""
from __future__ import annotations

from .recurrent import Recurrent


class SimpleRNN(Recurrent):
    """Keras's `SimpleRNN`, the fully connected recurrent layer, `h_t = activation(x_t kernel +
    bias + h_{t-1} recurrent_kernel)`, over `(batch, timesteps, features)`, `-> (batch, units)` (the
    last step's h), or `(batch, timesteps, units)` with `return_sequences`. Keras's arguments,
    defaults and weight layout, so Keras's `get_weights()` arrays load as they are:

    - `units`: a positive integer.
    - `activation="tanh"`: any elementwise activation (fused into the step kernels; softmax is
      refused).
    - `use_bias=True`; `kernel_initializer="glorot_uniform"`, `recurrent_initializer="orthogonal"`,
      `bias_initializer="zeros"`.
    - `dropout=0.0`: in [0, 1); in `fit` each input feature is dropped with this probability, the
      same features at every step of a sequence (a Dropout of noise shape `(None, 1, features)`
      before the input product), with `seed=None` its seed. `recurrent_dropout` must be 0 (a
      `ValueError` says so).
    - `return_sequences=False`: every step's h instead of the last (in processing order with
      `go_backwards`, as Keras's).
    - `return_state=False`: a call returns `[output, h]`, the final state a graph tensor that later
      layers read and train through (the functional API only).
    - `go_backwards=False`: process the sequence from its last step.
    - `whole_sequence=None` (clnet's own): the form of the time loop, True the sequence form (a
      work-item per column of the recurrent kernel, a GPU's default), False the CPU form (a
      work-item per block of units in vector registers, a CPU's default); see recurrent.cl.

    Weights: kernel `(features, units)`, recurrent_kernel `(units, units)`, bias `(units,)`. A call
    may start from given states, `layer(x, initial_state=[h])` (or Keras's `layer([x, h])`),
    `(batch, units)` tensors of the graph that receive their gradients. A masked input
    (`Embedding(mask_zero=True)`, `Masking`) is read as Keras reads it: a padded step carries the
    state over. The whole time loop is one launch forward and one backward. Keras's `stateful`,
    `unroll`, regularizers and constraints are not taken."""
    gates = 1
    source = "layers/simple_rnn.cl"
    step_names = ("FeedForwardSimpleRNN", "CalcHiddenGradientSimpleRNN")

    def _forward_arguments(self):
        return {"pre": self.pre, "recurrent": self.recurrent.value, "sums": self.sums, "states": self.states,
                "last": self._last}

    def _backward_arguments(self):
        # (its backward step reads no previous state: no with_initial)
        return {"pre": self.pre, "states": self.states, "transposed": self.transposed, "sums": self.sums,
                "delta": self.delta, "step_delta": self.step_delta, "carry": self.carry_h}

    def _act(self):
        return {"a": self.activation.a, "b": self.activation.b}  # one activation

    def _onnx_node(self):
        return "RNN", [0], lambda bias: [bias, 0 * bias], {"activations": [self.activation]}
