"""What SimpleRNN, LSTM and GRU share: arguments, weights in Keras's layout, the time loop and
backpropagation through time, config and ONNX export.

FeedForwardRecurrentInput computes x W + b for all batch rows and time steps in one product (its
spare work-items also copy U transposed, for the backward pass); then the steps add h_{t-1} U and
apply the gates, forward, and backward (from the last step) compute each step's deltas, taking
dL/dh_t through U from the step after it; then three products over all (row, step) pairs give the
kernel's, the recurrent kernel's and the input's gradients. The time loop is one launch each
way: step t needs all of h_{t-1}, and OpenCL has no barrier across work-groups, but only the same
batch row's h_{t-1}, so a work-group that owns a few batch rows, and all of their units, loops
over the steps alone, with barriers between them. It runs in one of two forms (see recurrent.cl):

- the CPU form: a work-group per RB batch rows, a work-item per (SV VW units, gate) summing its
  gate's product for the block in vector registers, then the gate math on vectors. A training
  step is 5 launches (6 with its input's gradient) whatever T is. (It used to launch each step
  once: on a CPU runtime the gaps between 130 launches cost a sizeable share of a step;
  benchmarks/RESULTS.md, the LSTM step on CPU with the time loop in one launch.)
- the sequence form (a GPU's): a work-group per batch row, its work-items sharing a step's
  products by blocks of 4 columns of U and parts of its rows (the parts meet in local memory),
  then the gate math by blocks of units. The weight gradients, too few blocks for a GPU, are
  summed in slices of batch rows, which one more launch adds up: 6 launches (7 with the input's
  gradient).

A call may start from initial states (inputs of the call after x): the first step reads them
where it would read zeros, and their gradient, dL/dh_0, is one more launch after the backward
steps (CalcInitialStateGradient; LSTM's dL/dc_0 is the cell carry its first step leaves).
With return_state the call's outputs after the output are the last step's h (and c).

A masked input (Embedding(mask_zero=True), Masking) is read as Keras's RNN reads it: a padded
step carries the state over and outputs the step before's output (zeros before the first step
that holds data). One launch more each forward pass (MaskSteps) puts the mask in processing
order for the time loop; the backward steps pass a padded step's gradient on whole, through
`carry` buffers as GRU's direct path does.
"""
from __future__ import annotations

import numpy as np

from .. import activations, initializers
from ..cl.tensor import Tensor
from .base import (KerasTensor, Layer, check_call_arguments, check_weights, input_mask, masked_call,
                   output_shapes)
from .dropout import Dropout


# The products over all steps compute blocks of VW columns (step_width) by RM rows per work-item.
RM = 4
# The input product, x W + b over all steps (FeedForwardRecurrentInput), by IN_ROWS rows where a VW
# vector is one register (RM where it is two, AVX2's double8): 8 accumulators, twice the
# independent chains of multiply-adds and each load of W serving twice the rows. With 4, LSTM(128)
# over 128 features took markedly longer for its input product on a Zen 5, on Intel's runtime and
# Debian's PoCL 3.1, and over 32 features on PoCL 3.1 (benchmarks/RESULTS.md, the recurrent input
# product's rows).
IN_ROWS = 8
# The CPU form's input gradient: processing rows per work-item (by RM input features), each load of
# W serving them all.
HG_ROWS = 3
# The CPU form's weight gradients sum 2 VW columns by DW_ROWS rows per work-item: RM, or where a VW
# vector is a 64-byte register (AVX-512, whose 32 registers hold 16 accumulators) 8, which reads
# delta half as often: on two cores of an Intel Xeon (family 6, model 207) LSTM(128)'s weight
# gradients took less time with 8 than with 4 (benchmarks/RESULTS.md). On AVX2's 16 registers
# 8 rows by two vectors would spill.
WIDE_DW_ROWS = 8
# The CPU form's work-item sums, at each step, SV vectors of VW units of one gate (forward) or of
# dL/dh (backward) for RB batch rows (see recurrent.cl): 12 accumulators, which with the SV loads
# of U and a broadcast of h fill AVX2's 16 registers. With 8 (one vector by 8 rows, as before)
# each multiply-add waited on the one before it. With pip's PoCL 3.0 the
# product H (64, 128) U (128, 512) alone ran fastest with two vectors by 6 rows (or three by 4),
# slower with one by 8, slowest with four by 3 (which spills); LSTM(128)'s steps at batch 64,
# launched one by one, ran faster forward and backward with two by 6 than before, and on Debian's
# PoCL 3.1 (16 floats) and Intel's runtime two by 6 did as well as one by 6 or better
# (benchmarks/RESULTS.md, the LSTM's time loop in one launch). The sequence form takes neither
# (SV and RB 1). Where a VW vector is a 64-byte register (AVX-512), 4 rows: a batch of 64 makes 16
# work-groups, which share 2, 4 or 8 cores evenly where 6 rows' 11 do not; LSTM, GRU and SimpleRNN
# of 128 units ran their time loops faster than with 6 on a Zen 4 on pip's PoCL 3.0 and on Intel's
# runtime, and level on two cores of a Xeon. And 4 vectors (16 accumulators of the 32 registers):
# each broadcast of h then feeds twice the multiply-adds, and a work-group has half the work-items
# to run between its barriers; a layer whose units fill fewer takes that many, so that none of
# its one block's vectors is past them. On a Zen 5, whose AVX-512 multiply-adds are full width, every recurrent layer
# measured from 16 to 256 units ran its steps faster than with two vectors, on Intel's runtime and
# on Debian's PoCL 3.1; on a Zen 4 and a Xeon four vectors by 4 rows had run LSTM(128) level with
# two (benchmarks/RESULTS.md, the time loop's rows on AVX-512, and its vectors on a Zen 5).
STEP_BLOCKS = {"SV": 2, "RB": 6}
WIDE_STEP_BLOCKS = {"SV": 4, "RB": 4}
# The sequence form (see recurrent.cl): batch rows per work-group, the most work-items a
# work-group has (which also sizes its local array of partial sums), and the vector width of its
# gate math and of the deltas' panels. Measured on a GPU for LSTM(128), 64 steps, batch 64, by the
# training step: one row per work-group beat two (each load of U serves both rows, but half as
# many SMs work); before rows of U were kept in registers (KEPT_BYTES), 256 work-items were slower
# than 512; with rows of U kept, width 2 beat 4 and 1 (4 had beaten 1, 2 and 8 before): narrower
# blocks share a step's gate math, whose exp and tanh each step waits on, among more
# work-items; wider ones let the weight gradients read longer runs of the panels
# (benchmarks/RESULTS.md, the sequence form's gate-math width).
SEQ_ROWS, SEQ_ITEMS, SEQ_VW = 1, 512, 2
# The sequence form's work-items keep this many rows of their part of U (TYPE4s of 4 columns)
# in registers for the whole loop, so that each step streams only the rest from L2: 768 bytes
# a work-item (192 registers of float). The work-group then has fewer work-items (the kernel's
# limit, work_group_size): on an H200, LSTM(128)'s step at batch 64 ran faster keeping 32 rows at
# 256 work-items than 8 at 512 or 16 or 24 at 256, and at gate-math width 2 faster keeping 768
# bytes than 256, 512, 640 or 1024 (benchmarks/RESULTS.md, the sequence form's products in TYPE4
# runs, and its gate-math width).
KEPT_BYTES = 768
# The sequence form's weight gradients sum at most this many slices of batch rows (see
# CalcDeltaWeightsRecurrentTiles), each a work-group's tile of the gradients: on an H200
# LSTM(128)'s step at batch 64 ran faster with 32 (two rows each) than with 16 or 64, whose
# slices SumRecurrentSplits reads twice the bytes of (benchmarks/RESULTS.md).
MAX_SPLITS = 32
# The sequence form's products' tiles: recurrent.cl's SEQ_TM rows by SEQ_TN columns, a work-group
# of (SEQ_TN / 4, 8) work-items.
SEQ_TM, SEQ_TN = 64, 128


def step_width(rt, dtype) -> int:
    """The CPU form's VW: a float8 is one AVX2 register, a double8 two; on AVX-512 a float16 is one.
    A whole register per vector: on AVX-512 each step's products then take half the instructions
    float8s would (measured on Intel's runtime and PoCL in benchmarks/RESULTS.md, 16-float
    recurrent steps on AVX-512)."""
    return 16 if np.dtype(dtype).itemsize == 4 and rt.info.vector_bytes(4) == 64 else 8


def step_blocks(vw: int, dtype, units: int) -> dict:
    """The CPU form's time-loop blocks (SV vectors by RB rows) for `units` units in vectors of `vw`
    elements of `dtype`: where a vector is a 64-byte register WIDE_STEP_BLOCKS, with no more
    vectors than the units fill, else STEP_BLOCKS."""
    if vw * np.dtype(dtype).itemsize != 64:
        return STEP_BLOCKS
    return {"SV": min(WIDE_STEP_BLOCKS["SV"], _blocks(units, vw)), "RB": WIDE_STEP_BLOCKS["RB"]}


def _blocks(n: int, size: int) -> int:
    return -(-n // size)


def _positive_int(layer: str, argument: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{layer} {argument} must be a positive integer, got {value!r}")
    return int(value)


def elementwise_activation(layer: str, argument: str, identifier):
    activation = activations.get(identifier)
    if not activation.elementwise:
        raise ValueError(f"{layer} {argument} must be an elementwise activation (it is fused into the step "
                         f"kernels), got {activation.name!r}")
    return activation


# ONNX's names for the activations its RNN, LSTM and GRU ops take (attribute `activations`), and
# their alpha/beta parameters.
def _onnx_activation(layer: "Recurrent", activation) -> tuple[str, list, list]:
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


def call_with_initial_state(layer: Layer, inputs, initial_state, check, mask=None) -> KerasTensor | list[KerasTensor]:
    """A call of a recurrent layer (or Bidirectional) on symbolic tensors: `layer(x)`,
    `layer(x, initial_state=states)` or `layer([x, *states])`. `check(states)` raises for states
    of the wrong count or shapes. A call with initial states has them as inputs after x, and
    makes the layer multi_input. x's mask (or `mask`) is the call's (see Layer.mask_handling)."""
    x, *states = layer._symbolic(inputs)
    mask = input_mask(layer, [x], mask)
    if mask is not None and (initial_state is not None or states) and layer.return_state \
            and not layer.return_sequences:
        raise ValueError(f"{layer.describe()} was called with a mask and initial states, returning its last output "
                         "and its states: where a row is padding throughout, Keras's output is zeros and its state "
                         "the initial one, which clnet's one buffer for both cannot hold yet; use "
                         "return_sequences=True, or no return_state")
    if initial_state is not None:
        if states:
            raise ValueError(f"{layer.describe()} was given initial states both in its inputs and as "
                             "initial_state; give them once")
        states = layer._symbolic(initial_state)
    if states:
        check(states)
    if layer.called_with_initial_state not in (None, bool(states)):
        raise ValueError(f"{layer.describe()} was called {'without' if states else 'with'} initial_state before; "
                         "a shared recurrent layer's calls all take one or none")
    if layer.built:
        layer.check_weights_fit([x.sample_shape, *(s.sample_shape for s in states)] if states else x.sample_shape)
    shapes = output_shapes(layer.compute_output_shapes, x.sample_shape)
    layer.called_with_initial_state = layer.multi_input = bool(states)
    call = masked_call(layer, [x, *states], shapes, mask)
    return call.output if len(call.outputs) == 1 else list(call.outputs)


# The backward step kernels' `grads`: which gradients reach the layer from above (see recurrent.cl).
GRAD_OUTPUT, GRAD_SEQUENCES, GRAD_STATE, GRAD_CELL = 1, 2, 4, 8


class Recurrent(Layer, registered=False):
    """A recurrent layer over inputs (steps, features). Subclasses set `gates` (blocks of `units`
    columns in the kernels and bias), `source` (their .cl with the two step kernels) and
    `initial_names` (the initial states each step kernel reads), and write
    `_forward_arguments`/`_backward_arguments` (the step kernels' buffers and the cell's own
    arguments, by the names its .cl gives them, bound in allocate) and `_onnx_node`."""
    gates = 1
    source = ""
    step_names = ("", "")     # (forward, backward) step kernels in `source`
    state_count = 1           # the final states that return_state gives: h (LSTM: h and c)

    def __init__(self, units, activation="tanh", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", dropout=0.0, recurrent_dropout=0.0,
                 seed=None, return_sequences=False, return_state=False, go_backwards=False, name=None,
                 input_shape=None, whole_sequence=None):
        super().__init__(name, input_shape)
        kind = type(self).__name__
        if whole_sequence is not None and not isinstance(whole_sequence, bool):
            raise ValueError(f"{kind} whole_sequence must be None, True or False, got {whole_sequence!r}")
        self.fixed_form = whole_sequence
        self.units = _positive_int(kind, "units", units)
        self.activation = elementwise_activation(kind, "activation", activation)
        self.recurrent_activation = self.activation  # LSTM and GRU set their own
        self.use_bias = bool(use_bias)
        self._initializer_names = (kernel_initializer, recurrent_initializer, bias_initializer)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float, np.floating)) or not 0 <= dropout < 1:
            raise ValueError(f"{kind} dropout must be a number in [0, 1), got {dropout!r}")
        if recurrent_dropout != 0:
            raise ValueError(f"{kind} recurrent_dropout={recurrent_dropout!r} is not supported: clnet drops the "
                             "inputs' features (dropout=), not the recurrent state's")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"{kind} seed must be a non-negative integer or None, got {seed!r}")
        self.dropout, self.seed = float(dropout), seed
        self.return_sequences = bool(return_sequences)
        self.return_state = bool(return_state)
        # Whether its calls give initial states, which are then inputs after x (multi_input).
        self.called_with_initial_state = None
        self.go_backwards = bool(go_backwards)

    mask_handling = "consume"

    def __call__(self, inputs, initial_state=None, training=None, mask=None):
        """`layer(x)`, or `layer(x, initial_state=[h])` (LSTM: `[h, c]`), the states (units,) each:
        as Keras, also `layer([x, h, c])`. The states are inputs of the call, which trains them.
        `mask` (batch, timesteps), if given, stands for the mask x carries."""
        check_call_arguments(self, (), training=training)
        return call_with_initial_state(self, inputs, initial_state, self._check_initial_state, mask)

    def compute_mask(self, inputs, mask):
        """As Keras's: the output carries the input's mask with return_sequences; the states none."""
        output = mask if self.return_sequences else None
        return [output] + [None] * self.state_count if self.return_state else output

    def _check_initial_state(self, states: list) -> None:
        names = "[h, c]" if self.state_count == 2 else "[h]"
        if len(states) != self.state_count:
            raise ValueError(f"{self.describe()} takes initial_state={names}, {self.state_count} tensor(s) of shape "
                             f"(None, {self.units}), got {len(states)}")
        for state in states:
            if state.sample_shape != (self.units,):
                raise ValueError(f"{self.describe()} takes initial states of shape (None, {self.units}), got "
                                 f"{state.describe()}")

    def compute_output_shape(self, input_shape):
        if len(input_shape) != 2:
            raise ValueError(f"{self.describe()} expects samples of shape (timesteps, features), got input_shape "
                             f"{tuple(input_shape)}")
        return (input_shape[0], self.units) if self.return_sequences else (self.units,)

    def compute_output_shapes(self, input_shape):
        """With return_state, the output and then the final states, (units,) each, as Keras."""
        return [self.compute_output_shape(input_shape)] + [(self.units,)] * (self.state_count * self.return_state)

    # -- weights -----------------------------------------------------------------------------
    def _bias_shape(self) -> tuple:
        return (self.gates * self.units,)

    def _initial_bias(self, rng) -> np.ndarray:
        return self.bias_initializer(self._bias_shape(), rng)

    def build(self, input_shape, store, rng):
        if self.multi_input:  # (x's shape, then the initial states')
            self.input_shapes = [tuple(s) for s in input_shape]
            input_shape = input_shape[0]
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
        # After the weights, so that its seed, drawn from rng without `seed`, leaves them as they were.
        self._input_dropout = None
        if self.dropout:
            self._input_dropout = Dropout(self.dropout, noise_shape=(None, 1, self.n_in), seed=self.seed,
                                          name=f"{self.name}/dropout")
            self._input_dropout.build(self.input_shape, store, rng)
        self.whole_sequence = self.rt.info.is_gpu if self.fixed_form is None else self.fixed_form
        if not self.whole_sequence:  # the CPU form's work-group holds a work-item per block of units and gate
            limit = self.rt.info.cl_device.max_work_group_size
            vw = step_width(self.rt, self.dtype)
            items = _blocks(self.units, step_blocks(vw, self.dtype, self.units)["SV"] * vw) * self.gates
            if items > limit and self.fixed_form is False:
                raise ValueError(f"{self.describe()} with whole_sequence=False needs work-groups of {items} "
                                 f"work-items on {self.rt.info.name!r}, which allows {limit}: use fewer units or "
                                 "whole_sequence=None")
            self.whole_sequence = items > limit
        self.vw = SEQ_VW if self.whole_sequence else step_width(self.rt, self.dtype)
        itemsize = np.dtype(self.dtype).itemsize
        wide = not self.whole_sequence and self.vw * itemsize == 64
        self.blocks = {"SV": 1, "RB": 1} if self.whole_sequence else step_blocks(self.vw, self.dtype, self.units)
        one_register = not self.whole_sequence and self.vw * itemsize <= self.rt.info.vector_bytes(itemsize)
        self.in_rows = IN_ROWS if one_register else RM  # (the CPU form's input product)
        self.dw_rows = WIDE_DW_ROWS if wide else RM  # (the CPU form's; the sequence form's are tiles)
        sources = tuple(dict.fromkeys((self.activation.source, self.recurrent_activation.source,
                                       "activations/vector.cl", "layers/recurrent.cl", self.source)))
        # (see GATES_KEPT in recurrent.cl)
        gates_kept = self.activation.derivative_from_output and self.recurrent_activation.derivative_from_output
        program = self.rt.program(sources, self.dtype, {"ACT": self.activation.function,
                                                        "RACT": self.recurrent_activation.function,
                                                        "VW": self.vw, "RM": RM, "IN_ROWS": self.in_rows,
                                                        "DW_ROWS": self.dw_rows,
                                                        "HG_ROWS": HG_ROWS,
                                                        "GATES": self.gates,
                                                        **self.blocks, "SEQ_ROWS": SEQ_ROWS, "SEQ_ITEMS": SEQ_ITEMS,
                                                        "SEQ_KEPT": KEPT_BYTES // (4 * np.dtype(self.dtype).itemsize),
                                                        "WHOLE_UNITS": int(self.units % self.vw == 0),
                                                        "ACT_VECTOR": int(self.activation.vector_form),
                                                        "RACT_VECTOR": int(self.recurrent_activation.vector_form),
                                                        "GATES_KEPT": int(gates_kept)})
        kernel = lambda name: self.rt.kernel(program, name, self.dtype)
        suffix = "Sequence" if self.whole_sequence else ""
        tiles = "Tiles" if self.whole_sequence else ""
        # The kernels, bound to the buffers by allocate (_bind). One kernel, two objects for the
        # weight gradients: each keeps its own arguments (see Kernel), set once.
        self._kernels = {"input_product": kernel("FeedForwardRecurrentInput" + tiles),
                         "delta_weights": kernel("CalcDeltaWeightsRecurrent" + tiles),
                         "delta_recurrent": kernel("CalcDeltaWeightsRecurrent" + tiles),
                         "hidden": kernel("CalcHiddenGradientRecurrentInput" + tiles),
                         "sum_splits": kernel("SumRecurrentSplits"),
                         "initial_gradient": kernel("CalcInitialStateGradient"),
                         "mask_steps": kernel("MaskSteps"),
                         "step_ff": kernel(self.step_names[0] + suffix),
                         "step_bp": kernel(self.step_names[1] + suffix)}
        return shape

    @property
    def parameters(self):
        return [self.kernel, self.recurrent, self.bias] if self.use_bias else [self.kernel, self.recurrent]

    def set_weights(self, weights):
        self.require_built("set_weights")
        shapes = [(self.n_in, self.cols), (self.units, self.cols)] + ([self._bias_shape()] if self.use_bias else [])
        for p, array in zip(self.parameters, check_weights(self, weights, shapes)):
            p.value.write(array)

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt, steps = self.rt, self.dtype, self.steps
        # x W + b for every step, completed in place by the step kernels into the gates' inputs z.
        self.pre = Tensor((capacity, steps, self.cols), dt, rt)
        self.states = Tensor((capacity, steps, self.units), dt, rt)  # h of each step, processing order
        # h of the last step: the output without return_sequences, the state with return_state.
        self.last = Tensor((capacity, self.units), dt, rt) if self._writes_last else None
        self.transposed = Tensor((self.cols, self.units), dt, rt)     # U^T, for the backward steps
        self.sums = Tensor((capacity, self.cols), dt, rt)             # a step's h_{s-1} U, or dL/dh_s
        self.delta = self._panels(capacity)                           # dL/dz
        self.step_delta = Tensor((2, capacity, self.cols), dt, rt)   # a step's recurrent dL/dz, by parity
        self.input_grad = Tensor((capacity, steps, self.n_in), dt, rt)
        self.initial_grad = Tensor((capacity, self.units), dt, rt) if self.multi_input else None  # dL/dh_0
        # A masked call's steps that hold data, in processing order, and each row's first (MaskSteps).
        self.held = Tensor((capacity, steps), dt, rt)
        self.first = Tensor((capacity,), np.int32, rt)
        self.carry_h = Tensor((capacity, self.units), dt, rt)  # dL/dh a padded step passes over
        if self._input_dropout is not None:
            self._input_dropout.allocate(capacity)
        if self.whole_sequence:  # the weight gradients' slices: dL/dW, its bias, dL/dU, the recurrent bias
            self.split_sums = Tensor((min(capacity, MAX_SPLITS), self.n_in + self.units + 2, self.cols), dt, rt)
        self._allocate_cell(capacity)
        self._bind()

    def _allocate_cell(self, capacity) -> None:
        """The cell's own buffers (LSTM's c, GRU's candidates), made before the kernels are bound."""

    def _bind(self) -> None:
        """Each kernel's arguments named once, bound to the buffers just allocated; a launch gives
        by position only those that change: the rows and what follows from them, the batch's x,
        the call's initial states and gradients, whether it is masked."""
        kernels, steps, cols, n_in, units = self._kernels, self.steps, self.cols, self.n_in, self.units
        reverse, stride = int(self.go_backwards), self.capacity * steps
        # The step kernels' MASK_ARGS (see recurrent.cl): held, first, and `masked`, given.
        mask_buffers = {"held": self.held, "first": self.first}
        self._mask_steps = kernels["mask_steps"].bind(("mask",), **mask_buffers, steps=steps, reverse=reverse)
        self._input_product = kernels["input_product"].bind(
            ("inputs", "total"), weights=self.kernel.value, bias=self._bias_value(), pre=self.pre,
            recurrent=self.recurrent.value, transposed=self.transposed, cols=cols, n_in=n_in, steps=steps,
            reverse=reverse, use_bias=int(self.use_bias), units=units)
        # Which of the last step's h (1) and c (2, LSTM's) go to buffers of their own (see lstm.cl),
        # and whether that h is the output (LAST_IS_OUTPUT, recurrent.cl).
        last = (int(self.last is not None) | 2 * int(self.return_state and self.state_count == 2)
                | 4 * int(not self.return_sequences))
        forward_states, backward_states = self.initial_names
        self._step_ff = kernels["step_ff"].bind(
            (*forward_states, "rows", "masked"), **self._forward_arguments(), steps=steps, units=units,
            **self._act(), with_initial=int(self.multi_input), write_last=last, **mask_buffers)
        # The gradients from above (see backward), then the initial states.
        gradients = ("output_gr", "state_gr", "cell_gr")[:1 + self.state_count]
        self._step_bp = kernels["step_bp"].bind(
            (*gradients, *backward_states, "rows", "grads", "masked"), **self._backward_arguments(), steps=steps,
            units=units, **self._act(), capacity=self.capacity, **mask_buffers)
        self._hidden = kernels["hidden"].bind(("total",), delta=self.delta, weights=self.kernel.value,
                                              input_gr=self.input_grad, cols=cols, n_in=n_in, steps=steps,
                                              reverse=reverse, stride=stride)
        self._initial_gradient = kernels["initial_gradient"].bind(
            ("carry", "add_carry"), step_delta=self.step_delta, transposed=self.transposed,
            initial_gr=self.initial_grad, units=units, cols=cols) if self.multi_input else None
        # The weight gradients (see _weight_gradients): where each writes.
        bias_grad = self.bias.grad if self.use_bias else self._no_bias
        recurrent_bias = int(self._recurrent_bias and self.use_bias)
        if self.whole_sequence:  # slices of split_sums, (n_in + units + 2, cols) a slice of batch rows
            size = (n_in + units + 2) * cols
            into_w = {"weights_gr": self.split_sums, "bias_gr": self.split_sums, "weights_offset": 0,
                      "bias_offset": n_in * cols, "split_stride": size}
            into_u = {"weights_gr": self.split_sums, "bias_gr": self.split_sums, "weights_offset": (n_in + 1) * cols,
                      "bias_offset": (n_in + 1 + units) * cols, "split_stride": size}
            self._sum_splits = kernels["sum_splits"].bind(
                ("count",), splits=self.split_sums, kernel_gr=self.kernel.grad, recurrent_gr=self.recurrent.grad,
                bias_gr=bias_grad, n_in=n_in, units=units, cols=cols, use_bias=int(self.use_bias),
                recurrent_bias=recurrent_bias)
        else:  # the gradients themselves
            into_w = {"weights_gr": self.kernel.grad, "bias_gr": bias_grad, "weights_offset": 0, "bias_offset": 0,
                      "split_stride": 0}
            into_u = {"weights_gr": self.recurrent.grad, "bias_gr": bias_grad, "weights_offset": 0,
                      "bias_offset": cols, "split_stride": 0}
        shared = {"steps": steps, "cols": cols, "stride": stride, "first": self.first}
        # dL/dW reads x (mode 0, or 1 reversed), never `initial` (mode 3's only): a stand-in.
        self._delta_weights = kernels["delta_weights"].bind(
            ("a", "rows", "split_rows", "masked"), initial=self.states, delta=self.delta, n=n_in, mode=reverse,
            with_bias=int(self.use_bias), **into_w, **shared)
        # dL/dU reads h_{s-1}: mode 3 takes the first step's from the initial state, 2 skips it (zeros).
        self._delta_recurrent = kernels["delta_recurrent"].bind(
            ("initial", "rows", "split_rows", "masked"), a=self.states, delta=self._delta_rec, n=units,
            mode=3 if self.multi_input else 2, with_bias=recurrent_bias, **into_u, **shared)

    def _panels(self, capacity) -> Tensor:
        """A (rows, steps, cols) matrix in column panels VW wide, (ceil(cols / VW), capacity * steps,
        VW) (see recurrent.cl); the padding lanes stay zero."""
        return Tensor.zeros((_blocks(self.cols, self.vw), capacity * self.steps, self.vw), self.dtype, self.rt)

    # -- the time loop -------------------------------------------------------------------------
    def _bias_value(self) -> Tensor:
        return self.bias.value if self.use_bias else self._no_bias

    def forward(self, x, rows, mask=None):
        x, *self.initial = x if self.multi_input else [x]  # the initial states, (rows, units) each
        self.masked = mask is not None
        if self.masked:  # (rows, steps), 1 where a step holds data
            self._mask_steps((rows,), None, mask)
        if self._input_dropout is not None:  # in fit only; the weight gradient reads the dropped x
            self._input_dropout.training, self._input_dropout.step = self.training, self.step
            x = self._input_dropout.forward(x, rows)
        self.x = x
        steps, cols = self.steps, self.cols
        # The blocks past the rows' copy U^T (see FeedForwardRecurrentInput).
        if self.whole_sequence:
            sizes = self._tiles_size(_blocks(rows * steps, SEQ_TM) * SEQ_TM + self.units, cols)
        else:
            blocks = _blocks(rows * steps, self.in_rows) + _blocks(self.units, self.in_rows)
            sizes = (_blocks(cols, self.vw), blocks), None
        self._input_product(*sizes, x, rows * steps, flops=2.0 * rows * steps * self.n_in * cols)
        flops = 2.0 * rows * self.units * cols
        self._step_ff(*self._loop_size(rows), *self._initial_states(self.initial_names[0]), rows, int(self.masked),
                      flops=steps * flops)
        output = self.states if self.return_sequences else self.last
        return [output, *self._final_states()] if self.return_state else output

    masked = False  # whether the last forward pass had a mask

    @property
    def _writes_last(self) -> bool:
        return not self.return_sequences or self.return_state

    def _final_states(self) -> list[Tensor]:
        """What return_state gives after the output: the last step's h, (rows, units)."""
        return [self.last]

    def backward(self, grad, rows, input_grad, activation_done=False, state_grads=None):
        """`grad`: dL/d(output), or None where only a final state is read further on; `state_grads`,
        with return_state: dL/d(each final state), None for one nothing reads. Called with initial
        states, `input_grad` says for each input (x, then the states) whether its gradient is
        wanted, and the list of them is returned (None where not wanted)."""
        wanted = list(input_grad) if self.multi_input else [input_grad]
        steps, cols, total = self.steps, self.cols, rows * self.steps
        state_grads = list(state_grads or [None] * self.state_count)
        grads = (grad is not None) * (GRAD_OUTPUT | GRAD_SEQUENCES * self.return_sequences)
        for flag, state_grad in zip((GRAD_STATE, GRAD_CELL), state_grads):
            grads |= flag * (state_grad is not None)
        # The kernels read only the gradients `grads` names; a buffer stands in for each other.
        given = [g if g is not None else self.states for g in (grad, *state_grads)]
        flops = 2.0 * rows * self.units * cols
        self._step_bp(*self._loop_size(rows, True), *given, *self._initial_states(self.initial_names[1]), rows, grads,
                      int(self.masked), flops=steps * flops)
        self._weight_gradients(rows)
        input_grad = None
        if wanted[0]:
            sizes = (self._tiles_size(total, self.n_in) if self.whole_sequence
                     else ((_blocks(self.n_in, RM), _blocks(total, HG_ROWS)), None))
            self._hidden(*sizes, total, flops=2.0 * total * self.n_in * cols)
            input_grad = self.input_grad
            if self._input_dropout is not None:  # through the mask of the forward pass
                input_grad = self._input_dropout.backward(input_grad, rows, True)
        if not self.multi_input:
            return input_grad
        return [input_grad, *self._initial_gradients(rows, wanted[1:])]

    def _initial_gradients(self, rows: int, wanted: list[bool]) -> list[Tensor | None]:
        """dL/dh_0 (a launch: see CalcInitialStateGradient), and LSTM's dL/dc_0, where wanted."""
        if not wanted[0]:
            return [None]
        carry = self._carry_to_h
        self._initial_gradient((self.units, rows), None, self.states if carry is None else carry,
                               int(carry is not None), flops=2.0 * rows * self.units * self.cols)
        return [self.initial_grad]

    # The part of dL/dh_{s-1} that skips U, which the backward steps leave in a buffer (GRU's
    # z_s dL/dh_s, or what a padded step passes over); None where there is none.
    @property
    def _carry_to_h(self):
        return self.carry_h if self.masked else None

    def _weight_gradients(self, rows: int) -> None:
        """dL/dW and dL/dU (with their biases): two products over every (row, step) pair, in
        the sequence form each split among batch rows into slices, then SumRecurrentSplits; beside
        the input gradient, which does not read them (Runtime.side_queue)."""
        cols, n_in, units, total = self.cols, self.n_in, self.units, rows * self.steps
        flops = 2.0 * total * cols
        # dL/dU's h_0: the initial state (mode 3), else a stand-in (mode 2 skips it).
        x, previous, masked = self.x, self._initial_h, int(self.masked)
        if not self.whole_sequence:
            blocks = _blocks(cols, 2 * self.vw)
            self._delta_weights(*self._weight_gradient_size(blocks, n_in), x, rows, rows, masked, flops=flops * n_in,
                                beside=True)
            self._delta_recurrent(*self._weight_gradient_size(blocks, units), previous, rows, rows, masked,
                                  flops=flops * units, beside=True)
            return
        chunk = -(-rows // min(rows, MAX_SPLITS))
        splits, height = _blocks(rows, chunk), n_in + units + 2
        # C's n rows, and the bias's where summed, by slices of batch rows.
        tiles = lambda n, with_bias: self._tiles_size(n + int(with_bias), cols, splits)
        self._delta_weights(*tiles(n_in, self.use_bias), x, rows, chunk, masked, flops=flops * n_in, beside=True)
        self._delta_recurrent(*tiles(units, self._recurrent_bias and self.use_bias), previous, rows, chunk, masked,
                              flops=flops * units, beside=True)
        self._sum_splits((cols, height), None, splits, beside=True)

    @staticmethod
    def _tiles_size(rows: int, columns: int, depth: int = 1) -> tuple:
        """The sequence form's products' (global, local) sizes: a work-group per tile of C's `rows`
        rows by `columns` columns (see SEQ_TILES_SUM in recurrent.cl), `depth` of them."""
        return (_blocks(columns, SEQ_TN) * SEQ_TN // 4, _blocks(rows, SEQ_TM) * 8, depth), (SEQ_TN // 4, 8, 1)

    def _weight_gradient_size(self, blocks: int, n: int) -> tuple:
        """The CPU form's (global, local) sizes of a weight gradient of `n` rows: a work-group per
        pair of column panels, holding every block of rows (and the bias's work-item), so that the
        pair's panels, read whole by each of them, stay in the core's cache from one to the next
        (PoCL runs a work-group on one core). Left to the runtime, a work-group held a block of
        rows of every pair, and each read all of delta: on two cores of an Intel Xeon (family 6,
        model 207) LSTM(128)'s weight gradients took 2.4 times as long (benchmarks/RESULTS.md)."""
        height = _blocks(n, self.dw_rows) + 1
        device = self.rt.info.cl_device
        fits = height <= min(device.max_work_group_size, device.max_work_item_sizes[1])
        return (blocks, height, 1), (1, height, 1) if fits else None

    # The deltas that go through the recurrent kernel (GRU's differ from the input ones).
    @property
    def _delta_rec(self) -> Tensor:
        return self.delta

    _recurrent_bias = False   # GRU: a second bias row added to h U

    def _loop_size(self, rows: int, backward: bool = False) -> tuple:
        """The time loop's (global, local) sizes. The CPU form: a work-group per RB batch rows,
        of a work-item per (SV VW units, gate) forward and per SV VW units backward. The sequence
        form: a work-group per SEQ_ROWS batch rows, as many work-items as U has columns (cols) up
        to SEQ_ITEMS, in whole warps (they share the products out by blocks of columns and parts
        of U's rows: recurrent.cl's SequenceSums)."""
        if self.whole_sequence:
            loop = self._kernels["step_bp" if backward else "step_ff"]
            items = min(SEQ_ITEMS, loop.work_group_size, -(-self.cols // 32) * 32)
            return (_blocks(rows, SEQ_ROWS) * items,), (items,)
        items = _blocks(self.units, self.blocks["SV"] * self.vw) * (1 if backward else self.gates)
        return (items, _blocks(rows, self.blocks["RB"])), (items, 1)

    @property
    def _last(self) -> Tensor:
        # The last step also writes h to `last` (the output without return_sequences, or the state
        # with return_state); without either, a stand-in the kernels never write.
        return self.last if self.last is not None else self.states

    def _act(self) -> dict:
        """The step kernels' activation parameters: the activation's a, b, the recurrent one's ra, rb."""
        act, ract = self.activation, self.recurrent_activation
        return {"a": act.a, "b": act.b, "ra": ract.a, "rb": ract.b}

    @property
    def _initial_h(self) -> Tensor:
        # The initial h, or a stand-in the kernels never read.
        return self.initial[0] if self.multi_input else self.states

    # The initial states each step kernel reads, (forward, backward), by their names in its .cl:
    # a call's own, given at each launch (_initial_states).
    initial_names = (("initial_h",), ())

    def _initial_states(self, names: tuple[str, ...]) -> tuple:
        """The initial states `names` (of initial_names), or stand-ins the kernels never read."""
        return tuple(self._initial_h if name == "initial_h" else self._initial_c for name in names)

    def _forward_arguments(self) -> dict:
        """The forward step kernel's buffers, and arguments of the cell's own, by name (see the
        cell's .cl: its FORWARD_ARGS), but the initial states (initial_names): bound in allocate."""
        raise NotImplementedError

    def _backward_arguments(self) -> dict:
        """The backward step kernel's buffers after the gradients from above, and arguments of the
        cell's own, by name (its BACKWARD_ARGS), but the initial states: bound in allocate."""
        raise NotImplementedError

    # -- export and config ------------------------------------------------------------------------
    def to_onnx(self, graph, inputs):
        """ONNX's RNN, LSTM or GRU op (one direction; its W, R are (1, gates * units, features) in
        ONNX's gate order, B the input and recurrent biases side by side), between Transposes:
        ONNX's sequences are time-major. go_backwards reverses the input first (as Keras, whose
        outputs are in processing order), and without return_sequences the last step is taken.
        return_state adds the op's final states, Y_h (and LSTM's Y_c), (1, batch, units) each;
        initial states are its initial_h (and initial_c), of the same shape."""
        steps, units = self.steps, self.units
        x, *initial = inputs
        initial = [graph.op("Reshape", state, graph.constant("initial_shape", [1, -1, units])) for state in initial]
        if self.go_backwards:
            x = graph.reverse(x, axis=1, length=steps)
        x = graph.op("Transpose", x, perm=[1, 0, 2])                        # (steps, batch, features)
        op, weights, attributes = self._onnx_direction()
        w, r, b = (graph.constant(name, array[None]) for name, array in zip(("W", "R", "B"), weights))
        optional = ["", *initial] if initial else []  # sequence_lens (none: every sample runs every step)
        y, *states = graph.op(op, x, w, r, b, *optional, hidden_size=units,
                              n_outputs=1 + (self.state_count if self.return_state else 0),
                              **attributes)                                 # (steps, 1, batch, units)
        states = [graph.op("Reshape", state, graph.constant("state_shape", [-1, units])) for state in states]
        if self.return_sequences:
            y = graph.op("Transpose", y, perm=[2, 0, 1, 3])                 # (batch, steps, 1, units)
            return [graph.op("Reshape", y, graph.constant("shape", [0, steps, units])), *states]
        if states:  # the output is the last step's h, Y_h
            return [states[0], *states]
        y = graph.op("Gather", y, graph.constant("last", np.int64(steps - 1)), axis=0)  # (1, batch, units)
        return [graph.op("Reshape", y, graph.constant("shape", [-1, units]))]

    def _onnx_direction(self) -> tuple[str, list[np.ndarray], dict]:
        """This layer as one direction of ONNX's op: its type; W (gates * units, features), R
        (gates * units, units) and B (2 * gates * units: the input and recurrent biases side by
        side), in ONNX's gate order; its attributes, the activations by ONNX's names with their
        alpha and beta (a bidirectional op lists the forward direction's, then the backward's)."""
        units = self.units
        op, order, biases, attributes = self._onnx_node()
        kernel, recurrent, *bias = self.get_weights()
        blocks = lambda w: np.concatenate([w[..., g * units:(g + 1) * units] for g in order], axis=-1)
        b = np.zeros(2 * self.cols) if not bias else np.concatenate([blocks(row) for row in biases(bias[0])])
        names, alphas, betas = [], [], []
        for activation in attributes.pop("activations"):
            name, alpha, beta = _onnx_activation(self, activation)
            names.append(name)
            alphas += alpha
            betas += beta
        attributes["activations"] = names
        attributes |= {"activation_alpha": alphas} if alphas else {}
        attributes |= {"activation_beta": betas} if betas else {}
        return op, [blocks(kernel).T, blocks(recurrent).T, b], attributes

    def _onnx_node(self) -> tuple[str, list[int], callable, dict]:
        """(op type, Keras gate blocks in ONNX's order, bias -> its input and recurrent rows, the
        op's attributes with `activations` as clnet activations)."""
        raise NotImplementedError

    def get_config(self):
        name = lambda init: init if isinstance(init, str) else init.__name__
        kernel, recurrent, bias = (name(i) for i in self._initializer_names)
        return {**super().get_config(), "units": self.units, "activation": self.activation.get_config(),
                "use_bias": self.use_bias, "kernel_initializer": kernel, "recurrent_initializer": recurrent,
                "bias_initializer": bias, "dropout": self.dropout, "recurrent_dropout": 0.0, "seed": self.seed,
                "return_sequences": self.return_sequences, "return_state": self.return_state,
                "go_backwards": self.go_backwards}
