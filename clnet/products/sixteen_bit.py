"""A dense layer's three products with operands stored in 16 bits (sixteen_bit.cl), on Hopper's
warpgroup tensor cores: what a mixed-precision step multiplies once its operands are kept in
bfloat16 or float16 on the device, as cuBLAS's 16-bit products take theirs. `round` makes a
16-bit copy of a float32 tensor (to nearest even). Layers do not use this plan yet: their 16-bit
products (the WGMMA and MMA forms' HALF) still read float operands and round them as staged."""
from __future__ import annotations

import numpy as np

from ..cl.device import DeviceError
from ..cl.runtime import SM90A
from ..cl.tensor import Tensor
from .forms import HALF_TYPES
from .plan import split_k

SOURCES = ("products/tensor_cores.cl", "products/sixteen_bit.cl")
BLOCK, THREADS, TK = 128, 256, 32  # (sixteen_bit.cl's)
# How a 16-bit operand is held in a Tensor, in either format: its bits, as uint16 (numpy has no
# bfloat16; a float16 array's .view(np.uint16) gives its bits).
STORAGE = np.dtype(np.uint16)


class SixteenBitPlan:
    """z = x W, dL/dW = x^T dL/dz and dL/dx = dL/dz W^T for x (rows, n_in), W (n_in, units) and
    dL/dz (rows, units) stored in `half` ("bfloat16" or "float16"; their bits in uint16 Tensors),
    summed and written in float32, on runtime `rt`'s device (an NVIDIA GPU of compute capability
    9.0). n_in and units must be multiples of 8, so that every row starts on 16 bytes."""

    def __init__(self, rt, half: str, n_in: int, units: int):
        if half not in HALF_TYPES:
            raise ValueError(f"SixteenBitPlan: half must be one of {sorted(HALF_TYPES)}, got {half!r}")
        for name, value in (("n_in", n_in), ("units", units)):
            if not isinstance(value, (int, np.integer)) or value <= 0 or value % 8:
                raise ValueError(f"SixteenBitPlan: {name} must be a positive multiple of 8 (rows of 16-bit operands "
                                 f"start on 16 bytes), got {value!r}")
        if not rt.info.warpgroup_products:
            raise DeviceError(f"SixteenBitPlan multiplies on Hopper's warpgroup tensor cores (an NVIDIA GPU of "
                              f"compute capability 9.0: H100, H200); the device is {rt.info.name!r}")
        self.rt, self.half, self.n_in, self.units = rt, half, int(n_in), int(units)

        # One program per pair of operand layouts (see sixteen_bit.cl); the rounding kernel from the first.
        programs = [rt.program(SOURCES, np.float32, {SM90A: 1, "HALF": HALF_TYPES[half], "A_ALONG_M": a_along_m,
                                                     "B_ALONG_N": b_along_n})
                    for a_along_m, b_along_n in ((0, 1), (1, 1), (0, 0))]
        self._forward, self._weight_gradient, self._input_gradient = (
            rt.kernel(program, "SixteenBitProduct", np.float32) for program in programs)
        self._round = rt.kernel(programs[0], "RoundToSixteenBits", np.float32)
        self._sum_slices = rt.kernel(programs[0], "SumSlices", np.float32)
        self._slices: Tensor | None = None  # split products' slices of C, grown as needed

    def forward(self, x: Tensor, weights: Tensor, outputs: Tensor, rows: int):
        """outputs[:rows] = x[:rows] W; returns the launch's event."""
        self._check(x, "x", (self.n_in,), rows, STORAGE)
        self._check(weights, "weights", (self.n_in, self.units), None, STORAGE)
        self._check(outputs, "outputs", (self.units,), rows, np.float32)
        return self._launch(self._forward, x, weights, outputs, rows, self.units, self.n_in,
                            self.n_in, self.units, self.units)

    def weight_gradient(self, x: Tensor, delta: Tensor, grad: Tensor, rows: int):
        """grad = x[:rows]^T delta[:rows] (n_in, units); returns the launch's event."""
        self._check(x, "x", (self.n_in,), rows, STORAGE)
        self._check(delta, "delta", (self.units,), rows, STORAGE)
        self._check(grad, "grad", (self.n_in, self.units), None, np.float32)
        return self._launch(self._weight_gradient, x, delta, grad, self.n_in, self.units, rows,
                            self.n_in, self.units, self.units)

    def input_gradient(self, delta: Tensor, weights: Tensor, input_grad: Tensor, rows: int):
        """input_grad[:rows] = delta[:rows] W^T; returns the launch's event."""
        self._check(delta, "delta", (self.units,), rows, STORAGE)
        self._check(weights, "weights", (self.n_in, self.units), None, STORAGE)
        self._check(input_grad, "input_grad", (self.n_in,), rows, np.float32)
        return self._launch(self._input_gradient, delta, weights, input_grad, rows, self.n_in, self.units,
                            self.units, self.units, self.n_in)

    def round(self, source: Tensor, target: Tensor):
        """target = source (float32) rounded to this plan's 16 bits, to nearest even; returns the event."""
        if source.dtype != np.float32:
            raise TypeError(f"SixteenBitPlan.round: source must be a float32 tensor, got {source.dtype}")
        if target.dtype != STORAGE or target.size != source.size:
            raise TypeError(f"SixteenBitPlan.round: target must be a {STORAGE} tensor of {source.size} elements "
                            f"(a {self.half} copy of source), got {target.dtype} with {target.size}")
        pairs = (source.size + 1) // 2
        return self._round((-(-pairs // THREADS) * THREADS,), (THREADS,), x=source, y=target,
                           count=np.int32(source.size))

    @staticmethod
    def _check(tensor: Tensor, name: str, shape: tuple, rows, dtype) -> None:
        """tensor is of dtype and `shape`, or, where `rows` is given, (capacity, *shape) with at
        least `rows` rows."""
        dtype = np.dtype(dtype)
        if rows is None:
            fits, want = tensor.shape == shape, f"of shape {shape}"
        else:
            fits = tensor.shape[1:] == shape and len(tensor.shape) == 2 and 0 < rows <= tensor.shape[0]
            want = f"of shape (capacity, {shape[0]}) with capacity >= rows ({rows})"
        if tensor.dtype != dtype or not fits:
            raise ValueError(f"SixteenBitPlan: {name} must be a {dtype} tensor {want}, got {tensor.dtype} "
                             f"of shape {tensor.shape}")

    def _launch(self, kernel, a, b, c, m, n, k, lda, ldb, ldc):
        """C (m x n) = A B with k depths; split along k where C's blocks would not fill the GPU twice
        over (the weight gradient's: its k is the batch's rows), into slices SumSlices adds."""
        blocks = -(-n // BLOCK), -(-m // BLOCK)
        splits, chunk = split_k(self.rt, {"TILE": BLOCK, "TK": TK}, m, n, k, waves=2)  # (two work-groups an SM)
        sizes = ((blocks[0] * THREADS, blocks[1], splits), (THREADS, 1, 1))
        product = dict(a=a, b=b, m=np.int32(m), n=np.int32(n), k=np.int32(k), lda=np.int32(lda), ldb=np.int32(ldb),
                       ldc=np.int32(ldc), chunk=np.int32(chunk), flops=2.0 * m * n * k)
        if splits == 1:
            return kernel(*sizes, c=c, **product)
        if self._slices is None or self._slices.size < splits * m * n:
            self._slices = Tensor((splits * m * n,), np.float32, self.rt)
        kernel(*sizes, c=self._slices, **{**product, "ldc": np.int32(n)})
        return self._sum_slices((-(-m * n // THREADS) * THREADS,), (THREADS,), slices=self._slices, c=c,
                                splits=np.int32(splits), size=np.int32(m * n))
