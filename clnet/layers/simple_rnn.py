"""SimpleRNN: h_t = activation(x_t W + b + h_{t-1} U), Keras's fully connected recurrent layer."""
from __future__ import annotations

from .recurrent import _Recurrent


class SimpleRNN(_Recurrent):
    gates = 1
    source = "layers/simple_rnn.cl"
    step_names = ("FeedForwardSimpleRNN", "CalcHiddenGradientSimpleRNN")

    def _step_forward(self, s, rows, flops):
        a, b, _, _ = self._act()
        last = self.last if self.last is not None else self.states  # written only at the last step
        self._step_ff((self.units, rows), None, self.pre, self.recurrent.value, self.states, last, s, self.steps,
                      self.units, int(s == self.steps - 1 and self.last is not None), a, b, flops=flops)

    def _step_backward(self, grad, s, rows, flops):
        a, b, _, _ = self._act()
        self._step_bp((self.units, rows), None, grad, self.pre, self.states, self.recurrent.value, self.delta, s,
                      self.steps, self.units, int(self.return_sequences), a, b, flops=flops)

    def _onnx_node(self):
        return "RNN", [0], lambda bias: [bias, 0 * bias], {"activations": [self.activation]}
