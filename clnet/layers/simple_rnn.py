"""SimpleRNN: h_t = activation(x_t W + b + h_{t-1} U), Keras's fully connected recurrent layer."""
from __future__ import annotations

from .recurrent import Recurrent


class SimpleRNN(Recurrent):
    gates = 1
    source = "layers/simple_rnn.cl"
    step_names = ("FeedForwardSimpleRNN", "CalcHiddenGradientSimpleRNN")

    def _forward_buffers(self):
        return self.pre, self.recurrent.value, self.sums, self.states, self._initial_h, self._last

    def _backward_buffers(self):
        return self.pre, self.states, self.transposed, self.sums, self.delta, self.step_delta, self.carry_h

    def _backward_flags(self):
        return ()  # its backward step reads no previous state

    def _act(self):
        return self.activation.a, self.activation.b  # one activation

    def _onnx_node(self):
        return "RNN", [0], lambda bias: [bias, 0 * bias], {"activations": [self.activation]}
