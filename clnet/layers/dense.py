"""Dense (fully connected) layer: the book's perceptron layer, with the activation fused."""
from __future__ import annotations

import time

import numpy as np

from .. import activations, initializers
from ..cl.parameters import ParameterStore
from ..cl.runtime import BuildError
from ..cl.tensor import Tensor
from ..cl.tuning import tuned
from .base import Layer, check_weights


def tile_candidates(rt, dtype) -> list[dict]:
    """Vector widths and output blocks per work-item that the autotuner tries.

    CPUs (PoCL) want explicit vectors as wide as their SIMD registers, or half that, and several
    outputs per work-item; GPUs want many work-items with a small block each. Wider vectors than
    the compiler's target break it: PoCL 3.0 (no AVX-512 target) returns a program without
    kernels for float16 and double8, and after such a build can crash the process; PoCL 3.1
    crashes on double16. PoCL names its LLVM target in the device name.
    """
    tiled = []
    if rt.info.is_gpu:
        widths, blocks = (4,), (1, 2, 4)
        tiled = [{"VW": 4, "TILE": tile, "WPT": wpt, "TK": tk} for tile, wpt, tk in ((64, 4, 16), (128, 8, 8), (128, 8, 16))]
    else:
        register_bytes = 64 if "avx512" in rt.info.name.lower() else 32
        lanes = register_bytes // np.dtype(dtype).itemsize
        widths, blocks = (lanes // 2, lanes), (4, 8)
    return [{"VW": vw, "FF_RM": rm, "DW_RM": rm, "HG_RM": rm, "HG_RN": rn}
            for vw in widths for rm in blocks for rn in (1, 2)] + tiled


def usable_candidates(rt, dtype) -> list[dict]:
    """The candidates whose programs build on this device."""
    usable = []
    for tiles in tile_candidates(rt, dtype):
        try:
            rt.program(("activations/relu.cl", "layers/dense.cl"), dtype, {"ACT": "relu", **tiles})
        except BuildError:
            continue
        usable.append(tiles)
    if not usable:
        raise BuildError(f"none of the dense kernel variants builds on {rt.info.name!r}")
    return usable


def matrix_tiles(rt, dtype) -> dict:
    """The fastest usable candidate for each of the three products, measured once per device."""
    return tuned(rt, dtype, "dense", ("layers/dense.cl",), lambda: _tune(rt, dtype, usable_candidates(rt, dtype)),
                 tile_candidates(rt, dtype)[0])


def _tune(rt, dtype, candidates) -> dict:
    # A mid-sized layer: large enough to fill the device, small enough to take milliseconds.
    rows, n_in, units = (512, 1024, 1024) if rt.info.is_gpu else (256, 512, 512)
    rng = np.random.default_rng(0)
    x = Tensor.from_numpy(rng.random((rows, n_in)), dtype, rt)
    grad = Tensor.from_numpy(rng.random((rows, units)), dtype, rt)
    best: dict[tuple, dict] = {}
    for tiles in candidates:
        store = ParameterStore(rt, dtype)
        layer = Dense(units, "relu", tiles=tiles)
        layer.build((n_in,), store, rng)
        store.allocate()
        layer.allocate(rows)
        times = {
            "FF": _seconds(rt, lambda: layer.forward(x, rows)),
            "DW": _seconds(rt, lambda: layer.backward(grad, rows, False)),
            "HG": _seconds(rt, lambda: layer.backward(grad, rows, True)),
        }
        times["HG"] -= times["DW"]
        # Blocked candidates differing only in a kernel's block size share a program layout, so
        # each kernel takes its own fastest block; anything else is compared as a whole.
        family = {k: v for k, v in tiles.items() if k not in BLOCK_KEYS["FF"] + BLOCK_KEYS["DW"] + BLOCK_KEYS["HG"]}
        choice = best.setdefault(tuple(sorted(family.items())), {**family, "time": {}})
        for kernel, seconds in times.items():
            if seconds < choice["time"].get(kernel, float("inf")):
                choice["time"][kernel] = seconds
                choice.update({key: tiles[key] for key in BLOCK_KEYS[kernel] if key in tiles})
    fastest = min(best.values(), key=lambda c: sum(c["time"].values()))
    return {k: v for k, v in fastest.items() if k != "time"}


BLOCK_KEYS = {"FF": ("FF_RM",), "DW": ("DW_RM",), "HG": ("HG_RM", "HG_RN")}


def _seconds(rt, run, repeats=5) -> float:
    run()
    rt.queue.finish()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        rt.queue.finish()
        best = min(best, time.perf_counter() - started)
    return best


class Dense(Layer):
    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", name=None, input_shape=None, tiles=None):
        """`tiles` fixes the kernels' vector width and blocks (see tile_candidates); by default
        the autotuner's choice for the device is used."""
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

    def compute_output_shape(self, input_shape):
        if len(input_shape) != 1:
            raise ValueError(f"Dense {self.name!r} expects flat inputs of shape (features,), got "
                             f"{input_shape}; put a Flatten() before it")
        return (self.units,)

    def build(self, input_shape, store: ParameterStore, rng):
        shape = super().build(input_shape, store, rng)
        self.n_in = self.input_shape[0]
        self.tiles = self.fixed_tiles or matrix_tiles(self.rt, self.dtype)
        vw = self.tiles["VW"]
        self.units_p = -(-self.units // vw) * vw
        kernel = np.zeros((self.n_in, self.units_p))
        kernel[:, :self.units] = self.kernel_initializer((self.n_in, self.units), rng)
        self.kernel = store.add(kernel)                                  # (n_in, units_p)
        if self.use_bias:
            bias = np.zeros(self.units_p)
            bias[:self.units] = self.bias_initializer((self.units,), rng)
            self.bias = store.add(bias)                                  # (units_p,)
        act = self.activation
        fused = act if act.elementwise else activations.Linear()
        self._fused = fused
        self.program = self.rt.program((fused.source, "layers/dense.cl"), self.dtype,
                                       {"ACT": fused.function, **self.tiles})
        if not act.elementwise:
            self.act_program = act.program(self.rt, self.dtype)
        return shape

    @property
    def parameters(self):
        return [self.kernel, self.bias] if self.use_bias else [self.kernel]

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        self.pre = Tensor((capacity, self.units), dt, rt)          # z = x W + b
        self.outputs = Tensor((capacity, self.units), dt, rt)      # y = f(z)
        # y^T, which the next layer's weight gradient reads along rows (softmax is applied after
        # the product kernel, so a softmax layer's transposed output would be stale: none).
        self.outputs_t = Tensor((self.units, capacity), dt, rt)
        self.outputs.transposed = self.outputs_t if self.activation.elementwise else None
        self.delta = Tensor((capacity, self.units_p), dt, rt)      # dL/dz, zero-padded
        self.input_grad = Tensor((capacity, self.n_in), dt, rt)    # dL/dx
        if not self.use_bias:  # the kernels always read a bias and write its gradient
            self._zero_bias = Tensor.zeros((self.units_p,), dt, rt)
            self._bias_grad_sink = Tensor((self.units_p,), dt, rt)
        if not self.activation.elementwise:
            self.act_grad = Tensor((capacity, self.units), dt, rt)
            self._softmax = rt.kernel(self.act_program, "SoftMaxActivation", dt)
            self._softmax_derivative = rt.kernel(self.act_program, "SoftMaxDerivative", dt)
        kernel = lambda name: rt.kernel(self.program, name, dt)
        self._forward = kernel("PerceptronFeedForward")
        self._delta_bias = kernel("CalcDeltaBias")
        self._delta_weights = kernel("CalcDeltaWeights")
        self._hidden = kernel("CalcHiddenGradient")
        self._transpose = kernel("Transpose")
        self._input_t = None  # x^T, made here only when the layer below does not provide it

    def _geometry(self, block, width, columns, rows):
        """(global, local) sizes for a product writing a (rows, columns) result: a TILE-square
        work-group per block, or one work-item per `block` rows x `width` columns."""
        tiles = self.tiles
        if "TILE" in tiles:
            side = tiles["TILE"] // tiles["WPT"]
            blocks = lambda n: -(-n // tiles["TILE"]) * side
            return (blocks(columns), blocks(rows)), (side, side)
        return (-(-columns // width), -(-rows // tiles[block])), None

    def _transposed_input(self, rows: int) -> Tensor:
        """x^T (n_in, capacity): from the layer below if it wrote one, else transposed here."""
        given = getattr(self.x, "transposed", None)
        if given is not None:
            return given
        if self._input_t is None:
            self._input_t = Tensor((self.n_in, self.capacity), self.dtype, self.rt)
        self._transpose((self.n_in, rows), None, self.x, self._input_t, self.n_in, self.capacity)
        return self._input_t

    def _row_group(self) -> int:
        # Softmax reduces a row with a power-of-two work-group of at most LOCAL_SIZE items.
        return min(self.rt.local_size, 1 << max(self.units - 1, 0).bit_length())

    def forward(self, x, rows):
        self.x = x
        bias = self.bias.value if self.use_bias else self._zero_bias
        a, b = self._fused.a, self._fused.b
        self._forward(*self._geometry("FF_RM", self.tiles["VW"], self.units, rows),
                      x, self.kernel.value, bias, self.pre, self.outputs, self.outputs_t,
                      rows, self.n_in, self.units, self.units_p, self.capacity, a, b,
                      flops=2.0 * rows * self.n_in * self.units)
        if not self.activation.elementwise:
            group = self._row_group()
            self._softmax((rows * group,), (group,), self.pre, self.outputs, self.units)
        return self.outputs

    def backward(self, grad, rows, input_grad, activation_done=False):
        """`activation_done`: `grad` is already dL/dz (a loss folded the activation in)."""
        apply_derivative = not activation_done
        if apply_derivative and not self.activation.elementwise:
            group = self._row_group()
            self._softmax_derivative((rows * group,), (group,), self.outputs, grad, self.act_grad, self.units)
            grad, apply_derivative = self.act_grad, False
        bias_grad = self.bias.grad if self.use_bias else self._bias_grad_sink
        a, b = self._fused.a, self._fused.b
        self._delta_bias((self.units_p // 4,), None, grad, self.outputs, self.pre, self.delta, bias_grad,
                         rows, self.units, self.units_p, a, b, int(apply_derivative))
        flops = 2.0 * rows * self.n_in * self.units
        self._delta_weights(*self._geometry("DW_RM", self.tiles["VW"], self.units_p, self.n_in),
                            self._transposed_input(rows), self.delta, self.kernel.grad, rows, self.n_in,
                            self.units_p, self.capacity, flops=flops)
        if not input_grad:
            return None
        self._hidden(*self._geometry("HG_RM", self.tiles.get("HG_RN"), self.n_in, rows),
                     self.delta, self.kernel.value, self.input_grad, rows, self.n_in, self.units_p, flops=flops)
        return self.input_grad

    def get_weights(self):
        return self._keras_layout([p.value for p in self.parameters])

    def gradients(self):
        return self._keras_layout([p.grad for p in self.parameters])

    def _keras_layout(self, tensors):
        """(kernel, bias) tensors of the device layout as (n_in, units) and (units,) arrays."""
        return [t.numpy()[..., :self.units] for t in tensors]

    def set_weights(self, weights):
        shapes = [(self.n_in, self.units)] + ([(self.units,)] if self.use_bias else [])
        arrays = check_weights(self, weights, shapes)
        kernel = np.zeros((self.n_in, self.units_p), self.dtype)
        kernel[:, :self.units] = arrays[0]
        self.kernel.value.write(kernel)
        if self.use_bias:
            bias = np.zeros(self.units_p, self.dtype)
            bias[:self.units] = arrays[1]
            self.bias.value.write(bias)

    def get_config(self):
        kernel_init, bias_init = self._initializer_names
        name = lambda init: init if isinstance(init, str) else init.__name__
        return {**super().get_config(), "units": self.units, "activation": self.activation.get_config(),
                "use_bias": self.use_bias, "kernel_initializer": name(kernel_init),
                "bias_initializer": name(bias_init)}
