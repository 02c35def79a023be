"""Dense (fully connected) layer: the book's perceptron layer, with the activation fused."""
from __future__ import annotations

import numpy as np

from .. import activations, initializers
from ..cl.parameters import ParameterStore
from ..cl.tensor import Tensor
from ..products import (HALF_TYPES, DensePlan, SixteenBitDensePlan, check_tensor_core_form, layout, stores_pre,
                        tile_candidates, tuner)
from .base import Layer, check_weights


class Dense(Layer):
    """Keras's `Dense`: y = activation(x · kernel + bias), the MQL5 book's perceptron layer with the
    activation fused into the product's launch. `(batch, features) -> (batch, units)`; on `(batch,
    ..., features)` it applies to the last axis, the same at every position, as Keras's does: one
    product over batch × positions rows. The input's mask goes on.

    - `units`: a positive integer.
    - `activation=None`: anything `clnet.activations.get` takes (None, a name such as `"relu"`, a
      config dict, an Activation); the elementwise ones run inside the product's kernel, softmax as
      its own kernels after it, which a cross-entropy loss may take over.
    - `use_bias=True`.
    - `kernel_initializer="glorot_uniform"`, `bias_initializer="zeros"`: a name
      `clnet.initializers.get` knows or a callable `(shape, rng) -> array`.
    - `tiles=None` (clnet's own): fixes the kernels' form, vector width and blocks, a dict as
      `clnet.products.tile_candidates` lists them (a tensor-core form, MMA or WGMMA, only where
      it can run, else a `ValueError`); by default the autotuner's choice for this device and size
      (`CLNET_TUNE=0`: each family's default without measuring).

    Weights, as `get_weights()` gives them (Keras's layout): kernel `(features, units)`, then bias
    `(units,)` with `use_bias`. On the device the kernel is laid out in column panels padded to the
    vector width (see products/cpu_blocks.cl); `get_weights`/`set_weights` convert. Keras's regularizers,
    constraints and `lora_rank` are not taken."""
    mask_handling = "propagate"  # (a step at a time: the input's mask goes on)

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", name=None, input_shape=None, tiles=None):
        super().__init__(name, input_shape)
        self.fixed_tiles = tiles
        if isinstance(units, bool) or not isinstance(units, (int, np.integer)) or units < 1:
            raise ValueError(f"Dense units must be a positive integer, got {units!r}")
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self._initializer_names = (kernel_initializer, bias_initializer)
        self.output_activation = self.activation
        self._gradient_parts, self._part_done = 1, None  # see hand_over_gradients

    @property
    def adds_to_output(self):
        """A linear layer adds a residual to y in its forward launch (see Layer.adds_to_output)."""
        return isinstance(self.activation, activations.Linear)

    @property
    def reads_transposed(self):
        """Whether the weight gradient reads x^T (the CPU form's, see _transposed_input); the GPU
        form's reads x."""
        return not self.tiled

    def compute_output_shape(self, input_shape):
        # As Keras: on (..., features) the kernel applies to the last axis, the same at every position.
        return (*input_shape[:-1], self.units)

    def build(self, input_shape, store: ParameterStore, rng):
        shape = super().build(input_shape, store, rng)
        self.n_in = self.input_shape[-1]
        # Positions per sample: on (time, features) inputs the product runs over batch * time rows.
        self.positions = int(np.prod(self.input_shape[:-1]))
        check_tensor_core_form(self.rt, self.dtype, self.fixed_tiles, f"Dense {self.name!r}")
        # A mixed-precision policy lets the products run in its 16 bits (where the tuner finds
        # them faster: see products/mma_half.cl, wgmma_half.cl); everything else stays in float.
        compute = self.dtype_policy.compute_dtype
        self.half = compute if compute in HALF_TYPES and self.dtype == np.float32 else None
        # The weights' layout is fixed here; the blocks or tiles, which may differ with the batch
        # size, when the batch buffers are made (allocate).
        self.layout = layout(self.fixed_tiles or tuner.matrix_tiles(self.rt, self.dtype, self.n_in, self.units,
                                                                    half=self.half))
        vw, self.tiled = self.layout
        self.units_p = -(-self.units // vw) * vw
        # Column panels of width `panel` (see products/cpu_blocks.cl); the GPU form's single panel is row-major.
        self.panel = self.units_p if self.tiled else vw
        self.panels = self.units_p // self.panel
        self._declare_weights(store, rng)
        return shape

    def _declare_weights(self, store, rng):
        kernel, kernel_index, bias = self._drawn_weights(self.units, rng)
        self.kernel = store.add(kernel, kernel_index)
        if self.use_bias:
            self.bias = store.add(bias, np.arange(self.units))

    def _drawn_weights(self, units: int, rng):
        """A (n_in, units) kernel from the initializer in the device layout, column panels of
        `panel` columns (units_p of them at most), with its keras_index; and the bias, (units_p,)."""
        units_p = -(-units // self.layout[0]) * self.layout[0]
        panel = min(self.panel, units_p)
        panels = units_p // panel
        kernel_index = (np.arange(self.n_in * units_p).reshape(panels, self.n_in, panel)
                        .transpose(1, 0, 2).reshape(self.n_in, units_p)[:, :units])
        kernel = np.zeros(self.n_in * units_p)
        kernel[kernel_index] = self.kernel_initializer((self.n_in, units), rng)
        bias = np.zeros(units_p)
        if self.use_bias:
            bias[:units] = self.bias_initializer((units,), rng)
        return kernel.reshape(panels, self.n_in, panel), kernel_index, bias

    @property
    def parameters(self):
        return [self.kernel, self.bias] if self.use_bias else [self.kernel]

    def _tuned_tiles(self, rows: int) -> dict:
        """The tiles for a batch of `rows` product rows: the tuner's choice at this size."""
        return tuner.matrix_tiles(self.rt, self.dtype, self.n_in, self.units, rows, self.half)

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        self.batch_capacity = capacity
        capacity = capacity * self.positions  # product rows: samples x positions
        self.tiles = self.fixed_tiles or self._tuned_tiles(capacity)
        assert layout(self.tiles) == self.layout, "every tuned size shares the weights' layout"
        # y = f(z), (batch capacity, *positions, units): the same rows, seen with the sample shape.
        self.outputs = Tensor((self.batch_capacity, *self.output_shape), dt, rt)
        # What the forward keeps beside y for the backward, (capacity, units): z = x W + b, for
        # softmax and the CPU form's derivative, or on the GPU its f'(z) (stores_slopes); where
        # the derivative follows from y (ReLU, linear, tanh), nothing, and the derivative reads y
        # in its place: one output fewer to write (see STORE_PRE in products/cpu_blocks.cl).
        self.kept = Tensor((capacity, self.units), dt, rt) if stores_pre(self.activation) else self.outputs
        # y^T, which the next layer's weight gradient reads along rows, where the model says a
        # layer reads it (writes_transposed): no layer reads a last layer's, whose forward is
        # then one output lighter (measurably faster at 1024^3 on Intel's runtime). Softmax is
        # applied after the product kernel, so a softmax layer's y^T would be stale: none.
        written = self.writes_transposed and self.activation.elementwise
        self.outputs_t = Tensor((self.units, capacity), dt, rt) if written else None
        self.outputs.transposed = self.outputs_t
        self.input_grad = Tensor((self.batch_capacity, *self.input_shape), dt, rt)  # dL/dx
        if not self.activation.elementwise:
            self.act_grad = Tensor((capacity, self.units), dt, rt)
            # softmax(z) into y, and dL/dz from y and dL/dy: the arguments named once
            self._softmax, self._softmax_derivative = self.activation.launches(
                rt, dt, self.units, self.outputs, self.act_grad, inputs=self.kept)
        operands = dict(weights=self.kernel, bias=self.bias if self.use_bias else None, outputs=self.outputs,
                        kept=self.kept, input_grad=self.input_grad)
        # The WGMMA form's 16-bit products on operands stored in 16 bits (products/sixteen_bit.py)
        # where this layer's sizes allow: their tiled kernels round float operands as they stage
        # them, at a fraction of the stored operands' rate (benchmarks/RESULTS.md).
        if self.half and SixteenBitDensePlan.takes(rt, self.tiles, self.n_in, self.units, self.panel):
            self.plan = SixteenBitDensePlan(rt, self.half, self.activation, self.n_in, self.units, self.panel,
                                            capacity, **operands)
        else:
            self.plan = DensePlan(rt, dt, self.tiles, self.activation, self.n_in, self.units, self.panel, capacity,
                                  **operands)

    def take_sixteen_bit_inputs(self, writer) -> None:
        plan = self.plan
        if isinstance(plan, SixteenBitDensePlan):
            writing = writer.writes_sixteen_bits(plan.inputs16, self.half)
            if writing is not None:
                plan.inputs_written_by(writing)

    def writes_sixteen_bits(self, target, half: str):
        plan = self.plan
        if isinstance(plan, SixteenBitDensePlan) and plan.write_outputs_in_sixteen_bits(target, half):
            return plan
        return None

    def gradient_parts(self, parts: int) -> list[tuple[int, int]]:
        """The GPU form computes a large kernel's gradient in `parts` launches of whole tiles of rows
        (see CalcDeltaWeights) where a distribution copies each off the device while the next
        computes: what is left to copy once the backward pass ends is then only the last part, not
        the whole kernel's gradient, so the copies of a wide first layer hide behind the compute
        (measured in benchmarks/RESULTS.md, data-parallel training). The parts' flat ranges in the
        store's gradients."""
        plan = getattr(self, "plan", None)
        blocks = plan.weight_row_blocks(parts) if plan is not None else []
        return [self._flat_rows(first, end) for first, end in blocks] if len(blocks) > 1 else []

    def hand_over_gradients(self, parts: int, done) -> None:
        if done is None:
            self._gradient_parts, self._part_done = 1, None
            return
        # The plan reports dL/dW's rows [first, end); the distribution wants their flat range.
        self._gradient_parts = parts
        self._part_done = lambda first, end, event: done(*self._flat_rows(first, end), event)

    def _flat_rows(self, first: int, end: int) -> tuple[int, int]:
        """Where dL/dW's rows [first, end) lie in the store's flat gradients."""
        return self.kernel.offset + first * self.units_p, self.kernel.offset + end * self.units_p

    def transpose(self, x: Tensor, target: Tensor, cols: int, rows: int) -> None:
        """target (cols, ld) = x^T for x's first `rows` rows of `cols` (the CPU form's kernel)."""
        self.plan.transpose(x, target, cols, rows)

    def _row_group(self) -> int:
        # Softmax reduces a row with a work-group (Runtime.row_group) on a GPU; on a CPU with one
        # work-item, as the runtime runs a work-group's items in loops split at each barrier (the
        # tiny GPT's (2048, 113) softmax ran far faster that way on PoCL 3.1).
        if not self.rt.info.is_gpu:
            return 1
        return self.rt.row_group(self.units)

    def forward(self, x, rows, add=None):
        """y = f(x W + b), or with `add` (a linear layer's, see Layer.adds_to_output) x W + b + add."""
        self.forward_logits(x, rows, add)
        if not self.activation.elementwise:
            rows *= self.positions
            group = self._row_group()
            self._softmax((rows * group,), (group,))
        return self.outputs

    def forward_logits(self, x, rows, add=None):
        """The product with the elementwise activation fused; returns z, softmax's input, for a
        loss that takes the softmax itself (see Step._forward_loss)."""
        if add is not None and not self.adds_to_output:
            raise ValueError(f"Dense {self.name!r} adds a residual only with a linear activation, not "
                             f"{type(self.activation).__name__}")
        self.x = x
        self.plan.forward(x, rows * self.positions, add)
        return self.kept

    def backward(self, grad, rows, input_grad, activation_done=False):
        """`activation_done`: `grad` is already dL/dz (a loss folded the activation in)."""
        rows *= self.positions
        apply_derivative = not activation_done
        if apply_derivative and not self.activation.elementwise:
            group = self._row_group()
            self._softmax_derivative((rows * group,), (group,), grad)
            grad, apply_derivative = self.act_grad, False
        self.plan.weight_gradient(self.x, grad, rows, apply_derivative, input_grad, self._gradient_parts,
                                  self._part_done)
        if not input_grad:
            return None
        return self.plan.input_gradient(grad, rows, apply_derivative)

    def to_onnx(self, graph, inputs):
        kernel, *bias = self.get_weights()                     # (n_in, units), (units,)
        kernel = graph.constant("kernel", kernel)
        if self.use_bias and self.positions == 1 and len(self.input_shape) == 1:
            z = graph.op("Gemm", inputs[0], kernel, graph.constant("bias", bias[0]))
        else:  # Gemm is 2-D only; MatMul broadcasts over the leading axes
            z = graph.op("MatMul", inputs[0], kernel)
            if self.use_bias:
                z = graph.op("Add", z, graph.constant("bias", bias[0]))
        return [self.activation.to_onnx(graph, z)]

    def get_weights(self):
        return [p.to_keras(p.value.numpy()) for p in self.parameters]

    def gradients(self):
        return [p.to_keras(p.grad.numpy()) for p in self.parameters]

    def set_weights(self, weights):
        self.require_built("set_weights")
        shapes = [(self.n_in, self.units)] + ([(self.units,)] if self.use_bias else [])
        for parameter, array in zip(self.parameters, check_weights(self, weights, shapes)):
            device = np.zeros(parameter.size, self.dtype)
            parameter.from_keras(array, device)
            parameter.value.write(device.reshape(parameter.shape))

    def get_config(self):
        kernel_init, bias_init = self._initializer_names
        name = lambda init: init if isinstance(init, str) else init.__name__
        return {**super().get_config(), "units": self.units, "activation": self.activation.get_config(),
                "use_bias": self.use_bias, "kernel_initializer": name(kernel_init),
                "bias_initializer": name(bias_init)}


class JoinedDense(Dense, registered=False):
    """`parts` linear Dense layers of `width` units each over one input, run as one of parts x width
    units: MultiHeadAttention's query, key and value projections of a self-attention, one product a
    pass instead of three and no sum of their three input gradients. Each part's kernel and bias
    stay weights of their own (in Keras's layout, as a Dense of `width` units lays them out), back to
    back in the store: the joined kernel is the parts' column panels side by side, which on a GPU
    are panels of `width` columns (see products/gpu_tiles.cl). Only where `joinable` says so."""

    def __init__(self, parts: int, width: int, use_bias, kernel_initializer, bias_initializer, name, tiles=None):
        super().__init__(parts * width, None, use_bias, kernel_initializer, bias_initializer, name, tiles=tiles)
        self.parts, self.width = parts, width

    @staticmethod
    def joinable(rt, dtype, n_in: int, width: int, parts: int, tiles=None) -> bool:
        """Whether parts of `width` units over n_in inputs join here (with these tiles, or the
        tuner's): each part whole panels of the layout (in the GPU form, whole 64-wide tiles, the
        smallest the tuner offers, or the fixed tiles'), and each part's kernel and bias whole
        alignment steps of the store, so that nothing pads them apart."""
        vw, tiled = layout(tiles or tuner.matrix_tiles(rt, dtype, n_in, parts * width))
        step = rt.alignment // np.dtype(dtype).itemsize
        panel = (tiles or {}).get("TILE", 64) if tiled else vw
        return width % panel == 0 and (n_in * width) % step == 0 and width % step == 0

    def _declare_weights(self, store, rng):
        if self.tiled:
            self.panel, self.panels = self.width, self.parts
        drawn = [self._drawn_weights(self.width, rng) for _ in range(self.parts)]  # Keras's order of draws
        self.part_kernels = [store.add(kernel, index) for kernel, index, _ in drawn]
        self.part_biases = [store.add(bias, np.arange(self.width)) for *_, bias in drawn] if self.use_bias else []
        self._store = store

    @property
    def parameters(self):
        if not self.use_bias:
            return list(self.part_kernels)
        return [p for pair in zip(self.part_kernels, self.part_biases) for p in pair]

    def _tuned_tiles(self, rows: int) -> dict:
        """The tuner's tiles, or where their TILE would straddle two parts, the first tiled
        candidate whose TILE does not (64 divides the width, see joinable)."""
        tiles = super()._tuned_tiles(rows)  # (fixed tiles are never replaced: joinable checked them)
        if not self.tiled or self.width % tiles["TILE"] == 0:
            return tiles
        return next(t for t in tile_candidates(self.rt, self.dtype) if "TILE" in t and self.width % t["TILE"] == 0)

    def allocate(self, capacity):
        self.kernel = self._store.joined(self.part_kernels)
        if self.use_bias:
            self.bias = self._store.joined(self.part_biases)
        super().allocate(capacity)
