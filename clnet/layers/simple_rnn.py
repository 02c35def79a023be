"""SimpleRNN: h_t = activation(x_t W + b + h_{t-1} U), Keras's fully connected recurrent layer."""
from __future__ import annotations

from .recurrent import _Recurrent


class SimpleRNN(_Recurrent):
    gates = 1
    source = "layers/simple_rnn.cl"
    step_names = ("FeedForwardSimpleRNN", "CalcHiddenGradientSimpleRNN")

    def _step_forward(self, s, rows, flops):
        a, b, _, _ = self._act()
        self._step_ff(*self._step_size(rows), self.pre, self.recurrent.value, self.sums, self.states, self._last,
                      rows, s, self.steps, self.units, self._writes_last(s), a, b, flops=flops)

    def _step_backward(self, grad, s, rows, flops):
        a, b, _, _ = self._act()
        self._step_bp(*self._step_size(rows, True), grad, self.pre, self.states, self.transposed, self.sums,
                      self.delta, self.step_delta, rows, s, self.steps, self.units, int(self.return_sequences),
                      self.capacity, a, b, flops=flops)

    def _onnx_node(self):
        return "RNN", [0], lambda bias: [bias, 0 * bias], {"activations": [self.activation]}
