"""What SimpleRNN, LSTM and GRU share: arguments, weights in Keras's layout, the time loop and
backpropagation through time, config and ONNX export.

A training step of a sequence layer of T steps is 2T + 3 launches (2T + 4 with its input's
gradient): FeedForwardRecurrentInput computes x W + b for all batch rows and time steps in one
product (its spare work-items also copy U transposed, for the backward steps); then one launch
per step adds h_{t-1} U and applies the gates (a work-item per (8 units, a few batch rows) sums
every gate's product for its block in vector registers, then runs the gate math on vectors);
backward, one launch per step (from the last) computes the step's deltas, taking dL/dh_t through
U from the step after it; then three products over all (row, step) pairs give the kernel's, the
recurrent kernel's and the input's gradients.

Why not one launch for the whole sequence: step t needs all of h_{t-1}, written by every
work-item of step t-1, and OpenCL has no barrier across work-groups. A single work-group could
loop over time with local barriers, but it runs on one compute unit: one core of the CPU, one SM
of a GPU. A launch per step leaves the whole device to each step, and the products that need no
loop, two thirds of the work, run as plain matrix products over batch x time rows.
"""
from __future__ import annotations

import numpy as np

from .. import activations, initializers
from ..cl.tensor import Tensor
from .base import Layer, check_weights


# The products over all steps compute blocks of VW columns (a float8: one AVX2 register; a double8:
# two) by RM rows per work-item. A step kernel's work-item sums VW units of one gate (forward) or
# of dL/dh (backward) for RB or BB batch rows (see recurrent.cl): 8 accumulators, which with the
# loads of U and h fill AVX2's 16 registers.
VW, RM, RB, BB = 8, 4, 8, 8


def _blocks(n: int, size: int) -> int:
    return -(-n // size)


def _positive_int(layer: str, argument: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{layer} {argument} must be a positive integer, got {value!r}")
    return int(value)


def _elementwise(layer: str, argument: str, identifier):
    activation = activations.get(identifier)
    if not activation.elementwise:
        raise ValueError(f"{layer} {argument} must be an elementwise activation (it is fused into the step "
                         f"kernels), got {activation.name!r}")
    return activation


# ONNX's names for the activations its RNN, LSTM and GRU ops take (attribute `activations`), and
# their alpha/beta parameters.
def _onnx_activation(layer: "_Recurrent", activation) -> tuple[str, list, list]:
    name, a, b = activation.name, activation.a, activation.b
    if name == "tanh":
        return "Tanh", [], []
    if name == "relu":
        return "Relu", [], []
    if name == "softplus":
        return "Softplus", [], []
    if name == "sigmoid" and (a, b) == (1.0, 0.0):
        return "Sigmoid", [], []
    if name == "linear":
        return "Affine", [a], [b]
    if name == "lrelu":
        return "LeakyRelu", [a], []
    raise ValueError(f"{layer.describe()} cannot be exported to ONNX with activation {activation!r}: ONNX's "
                     "recurrent ops take tanh, sigmoid (a=1, b=0), relu, softplus, linear or lrelu")


class _Recurrent(Layer):
    """A recurrent layer over inputs (steps, features). Subclasses set `gates` (blocks of `units`
    columns in the kernels and bias), `source` (their .cl with the two step kernels), and write
    `_step_forward`/`_step_backward` and `_onnx_node`."""
    gates = 1
    source = ""
    step_names = ("", "")     # (forward, backward) step kernels in `source`

    def __init__(self, units, activation="tanh", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", return_sequences=False,
                 return_state=False, go_backwards=False, name=None, input_shape=None):
        super().__init__(name, input_shape)
        kind = type(self).__name__
        self.units = _positive_int(kind, "units", units)
        self.activation = _elementwise(kind, "activation", activation)
        self.recurrent_activation = self.activation  # LSTM and GRU set their own
        self.use_bias = bool(use_bias)
        self._initializer_names = (kernel_initializer, recurrent_initializer, bias_initializer)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        if return_state:
            raise ValueError(f"{kind} return_state=True is not supported: clnet's layer calls have one output "
                             "tensor; use return_sequences=True and take the last step, or the default output "
                             "(the last step's h)")
        self.return_sequences = bool(return_sequences)
        self.go_backwards = bool(go_backwards)

    def compute_output_shape(self, input_shape):
        if len(input_shape) != 2:
            raise ValueError(f"{self.describe()} expects samples of shape (timesteps, features), got input_shape "
                             f"{tuple(input_shape)}")
        return (input_shape[0], self.units) if self.return_sequences else (self.units,)

    # -- weights -----------------------------------------------------------------------------
    def _bias_shape(self) -> tuple:
        return (self.gates * self.units,)

    def _initial_bias(self, rng) -> np.ndarray:
        return self.bias_initializer(self._bias_shape(), rng)

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.steps, self.n_in = self.input_shape
        self.cols = self.gates * self.units
        # Keras's layouts, row-major, as they are on the device: kernel (n_in, gates * units),
        # recurrent_kernel (units, gates * units), bias (gates * units) (GRU: (2, 3 units)).
        self.kernel = store.add(self.kernel_initializer((self.n_in, self.cols), rng))
        self.recurrent = store.add(self.recurrent_initializer((self.units, self.cols), rng))
        if self.use_bias:
            self.bias = store.add(self._initial_bias(rng))
        else:  # the input product always reads a bias and the weight gradient kernels write one
            self._no_bias = Tensor.zeros((self.cols,), self.dtype, self.rt)
        sources = tuple(dict.fromkeys((self.activation.source, self.recurrent_activation.source,
                                       "layers/recurrent.cl", self.source)))
        program = self.rt.program(sources, self.dtype, {"ACT": self.activation.function,
                                                        "RACT": self.recurrent_activation.function,
                                                        "VW": VW, "RM": RM, "GATES": self.gates,
                                                        "RB": RB, "BB": BB,
                                                        "WHOLE_UNITS": int(self.units % VW == 0),
                                                        "ACT_VECTOR": int(self.activation.vector_form),
                                                        "RACT_VECTOR": int(self.recurrent_activation.vector_form)})
        kernel = lambda name: self.rt.kernel(program, name, self.dtype)
        self._input_product = kernel("FeedForwardRecurrentInput")
        # One kernel, two objects: each keeps its own arguments (see Kernel), set once.
        self._delta_weights = kernel("CalcDeltaWeightsRecurrent")
        self._delta_recurrent = kernel("CalcDeltaWeightsRecurrent")
        self._hidden = kernel("CalcHiddenGradientRecurrentInput")
        self._step_ff, self._step_bp = (kernel(name) for name in self.step_names)
        return shape

    @property
    def parameters(self):
        return [self.kernel, self.recurrent, self.bias] if self.use_bias else [self.kernel, self.recurrent]

    def set_weights(self, weights):
        shapes = [(self.n_in, self.cols), (self.units, self.cols)] + ([self._bias_shape()] if self.use_bias else [])
        for p, array in zip(self.parameters, check_weights(self, weights, shapes)):
            p.value.write(array)

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt, steps = self.rt, self.dtype, self.steps
        # x W + b for every step, completed in place by the step kernels into the gates' inputs z.
        self.pre = Tensor((capacity, steps, self.cols), dt, rt)
        self.states = Tensor((capacity, steps, self.units), dt, rt)  # h of each step, processing order
        self.last = None if self.return_sequences else Tensor((capacity, self.units), dt, rt)  # h of the last step
        self.transposed = Tensor((self.cols, self.units), dt, rt)     # U^T, for the backward steps
        self.sums = Tensor((capacity, self.cols), dt, rt)             # a step's h_{s-1} U, or dL/dh_s
        self.delta = self._panels(capacity)                           # dL/dz
        self.step_delta = Tensor((2, capacity, self.cols), dt, rt)   # a step's recurrent dL/dz, by parity
        self.input_grad = Tensor((capacity, steps, self.n_in), dt, rt)

    def _panels(self, capacity) -> Tensor:
        """A (rows, steps, cols) matrix in column panels VW wide, (ceil(cols / VW), capacity * steps,
        VW) (see recurrent.cl); the padding lanes stay zero."""
        return Tensor.zeros((_blocks(self.cols, VW), capacity * self.steps, VW), self.dtype, self.rt)

    # -- the time loop -------------------------------------------------------------------------
    def _act(self) -> tuple:
        act, ract = self.activation, self.recurrent_activation
        return act.a, act.b, ract.a, ract.b

    def _bias_value(self) -> Tensor:
        return self.bias.value if self.use_bias else self._no_bias

    def forward(self, x, rows):
        self.x = x
        steps, cols = self.steps, self.cols
        # The blocks past the rows' copy U^T (see FeedForwardRecurrentInput).
        blocks = _blocks(rows * steps, RM) + _blocks(self.units, RM)
        self._input_product((_blocks(cols, VW), blocks), None, x, self.kernel.value, self._bias_value(), self.pre,
                            self.recurrent.value, self.transposed, rows * steps, cols, self.n_in, steps,
                            int(self.go_backwards), int(self.use_bias), self.units,
                            flops=2.0 * rows * steps * self.n_in * cols)
        flops = 2.0 * rows * self.units * cols
        for s in range(steps):
            self._step_forward(s, rows, flops)
        return self.states if self.return_sequences else self.last

    def backward(self, grad, rows, input_grad, activation_done=False):
        steps, cols, total = self.steps, self.cols, rows * self.steps
        flops = 2.0 * rows * self.units * cols
        for s in reversed(range(steps)):
            self._step_backward(grad, s, rows, flops)
        bias_grad = self.bias.grad if self.use_bias else self._no_bias
        self._delta_weights((_blocks(cols, 2 * VW), _blocks(self.n_in, RM) + 1), None, self.x, self.delta,
                            self.kernel.grad, bias_grad, rows, steps, cols, self.n_in, int(self.go_backwards),
                            int(self.use_bias), 0, self.capacity * steps, flops=2.0 * total * self.n_in * cols)
        self._delta_recurrent((_blocks(cols, 2 * VW), _blocks(self.units, RM) + 1), None, self.states, self._delta_rec,
                              self.recurrent.grad, bias_grad, rows, steps, cols, self.units, 2,
                              int(self._recurrent_bias and self.use_bias), cols, self.capacity * steps,
                              flops=2.0 * total * self.units * cols)
        if not input_grad:
            return None
        self._hidden((_blocks(self.n_in, RM), total), None, self.delta, self.kernel.value, self.input_grad, cols,
                     self.n_in, steps, int(self.go_backwards), self.capacity * steps,
                     flops=2.0 * total * self.n_in * cols)
        return self.input_grad

    # The deltas that go through the recurrent kernel (GRU's differ from the input ones).
    @property
    def _delta_rec(self) -> Tensor:
        return self.delta

    _recurrent_bias = False   # GRU: a second bias row added to h U

    def _step_size(self, rows: int, backward: bool = False) -> tuple:
        # a work-item per (VW units, a block of batch rows)
        """(global, local) sizes: forward, a work-group of `gates` work-items per (VW units, RB
        batch rows); backward, a work-item per (VW units, BB rows)."""
        if backward:
            return (_blocks(self.units, VW), _blocks(rows, BB)), None
        return (self.gates * _blocks(self.units, VW), _blocks(rows, RB)), (self.gates, 1)

    @property
    def _last(self) -> Tensor:
        # Without return_sequences the last step also writes h to `last`, the output; with them,
        # a stand-in the kernels never write.
        return self.last if self.last is not None else self.states

    def _writes_last(self, s: int) -> int:
        return int(s == self.steps - 1 and self.last is not None)

    def _step_forward(self, s: int, rows: int, flops: float) -> None:
        raise NotImplementedError

    def _step_backward(self, grad: Tensor, s: int, rows: int, flops: float) -> None:
        raise NotImplementedError

    # -- export and config ------------------------------------------------------------------------
    def to_onnx(self, graph, inputs):
        """ONNX's RNN, LSTM or GRU op (one direction; its W, R are (1, gates * units, features) in
        ONNX's gate order, B the input and recurrent biases side by side), between Transposes:
        ONNX's sequences are time-major. go_backwards reverses the input first (as Keras, whose
        outputs are in processing order), and without return_sequences the last step is taken."""
        steps, units = self.steps, self.units
        x = inputs[0]
        if self.go_backwards:
            x = graph.op("Slice", x, graph.constant("start", [-1]), graph.constant("end", [np.iinfo(np.int64).min]),
                         graph.constant("axis", [1]), graph.constant("step", [-1]))
        x = graph.op("Transpose", x, perm=[1, 0, 2])                        # (steps, batch, features)
        op, order, biases, attributes = self._onnx_node()
        kernel, recurrent, *bias = self.get_weights()
        blocks = lambda w: np.concatenate([w[..., g * units:(g + 1) * units] for g in order], axis=-1)
        w = graph.constant("W", blocks(kernel).T[None])                     # (1, gates * units, features)
        r = graph.constant("R", blocks(recurrent).T[None])                  # (1, gates * units, units)
        b = np.zeros(2 * self.cols) if not bias else np.concatenate([blocks(row) for row in biases(bias[0])])
        activation_names, alphas, betas = [], [], []
        for activation in attributes.pop("activations"):
            name, alpha, beta = _onnx_activation(self, activation)
            activation_names.append(name)
            alphas += alpha
            betas += beta
        extra = {"activation_alpha": alphas} if alphas else {}
        extra |= {"activation_beta": betas} if betas else {}
        y = graph.op(op, x, w, r, graph.constant("B", b[None]), hidden_size=units, activations=activation_names,
                     **attributes, **extra)                                 # (steps, 1, batch, units)
        if self.return_sequences:
            y = graph.op("Transpose", y, perm=[2, 0, 1, 3])                 # (batch, steps, 1, units)
            return [graph.op("Reshape", y, graph.constant("shape", [0, steps, units]))]
        y = graph.op("Gather", y, graph.constant("last", np.int64(steps - 1)), axis=0)  # (1, batch, units)
        return [graph.op("Reshape", y, graph.constant("shape", [-1, units]))]

    def _onnx_node(self) -> tuple[str, list[int], callable, dict]:
        """(op type, Keras gate blocks in ONNX's order, bias -> its input and recurrent rows, the
        op's attributes with `activations` as clnet activations)."""
        raise NotImplementedError

    def get_config(self):
        name = lambda init: init if isinstance(init, str) else init.__name__
        kernel, recurrent, bias = (name(i) for i in self._initializer_names)
        return {**super().get_config(), "units": self.units, "activation": self.activation.get_config(),
                "use_bias": self.use_bias, "kernel_initializer": kernel, "recurrent_initializer": recurrent,
                "bias_initializer": bias, "return_sequences": self.return_sequences, "go_backwards": self.go_backwards}
