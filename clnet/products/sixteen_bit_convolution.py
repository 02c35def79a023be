"""A convolution's three products on operands stored in 16 bits, on Hopper's warpgroup tensor
cores: what a Conv layer runs under a mixed-precision policy where the tuner measures it faster
than the tiled form (tuner.convolution_in_sixteen_bits). The float forms (convolution.py) never
write the patch matrix; this one writes it once a forward, in 16 bits (PatchesToSixteenBits,
sixteen_bit_convolution.cl), and runs the layer's step as a dense layer's over (samples x
positions) rows of kh * kw * channels (SixteenBitDensePlan); dL/dx comes from the patch matrix's
float gradient, each input element summing the windows that cover it (PatchGradientsToInputs)."""
from __future__ import annotations

import numpy as np

from .. import activations
from ..cl.tensor import Tensor
from .convolution_geometry import GEOMETRY
from .forms import HALF_TYPES, stores_pre, tensor_core_form
from .plan import Operand
from .sixteen_bit import ATOM_ROWS, THREADS, SixteenBitDensePlan

SOURCES = ("products/tensor_cores.cl", "products/sixteen_bit_layout.cl", "products/convolution.cl",
           "products/sixteen_bit_convolution.cl")
GATHER_ITEMS = 256  # (PatchGradientsToInputs' work-groups)


class SixteenBitConvPlan:
    """ConvPlan's launches (forward, weight_gradient, input_gradient) for a convolution of
    `geometry` (GEOMETRY's thirteen sizes) with `filters` filters whose products run in `half`
    ("bfloat16", "float16") on operands stored in 16 bits, on runtime `rt`'s Hopper GPU, over up
    to `capacity` samples: `weights` (parameter, W (kh * kw * channels, filters) row-major in one
    panel of `panel` columns, Dense's GPU layout) and `bias` (or None), `outputs` y (capacity,
    out_h, out_w, filters; z where `activation` is softmax, which the layer applies after) and
    `input_grad` dL/dx (capacity, height, width, channels), bound once. Variables, outputs and
    gradients stay float32. Only where `takes` says so."""

    def __init__(self, rt, half: str, activation, geometry: tuple, filters: int, panel: int, capacity: int, *,
                 weights, bias, outputs: Tensor, input_grad: Tensor):
        self.geometry, self.filters = tuple(geometry), filters
        height, width, channels, out_h, out_w, kh, kw = self.geometry[:7]
        self.positions, self.patch_size = out_h * out_w, kh * kw * channels
        rows = capacity * self.positions  # the patch matrix's
        f32 = np.float32
        y = Tensor((rows, filters), f32, rt, outputs.buffer)
        kept = Tensor((rows, filters), f32, rt) if stores_pre(activation) else y  # z or f'(z), as Dense keeps
        self.patch_grad = Tensor((rows, self.patch_size), f32, rt)  # dL/d(patches), float
        self.product = SixteenBitDensePlan(rt, half, activation, self.patch_size, filters, panel, rows,
                                           weights=weights, bias=bias, outputs=y, kept=kept,
                                           input_grad=self.patch_grad)
        program = rt.program(SOURCES, f32, {"HALF": HALF_TYPES[half]})
        sizes = dict(zip(GEOMETRY, self.geometry))
        patches = self.product.inputs16
        self._patches = rt.kernel(program, "PatchesToSixteenBits", f32).bind(
            ("x", "rows"), patches=patches, atom_rows=np.int32(patches.shape[0] // ATOM_ROWS), **sizes)
        self._gather = rt.kernel(program, "PatchGradientsToInputs", f32).bind(
            ("samples",), patch_gr=self.patch_grad, input_gr=input_grad, **sizes)
        self.input_elements = height * width * channels  # per sample

    @staticmethod
    def takes(rt, geometry: tuple, filters: int, panel: int) -> bool:
        """Whether this plan can run the convolution on `rt`: Hopper's warpgroup tensor cores
        (not left out: tensor_core_form), channels, filters and W's panel multiples of 8 (the
        patches are written eight channels of a tap at a time, W and dL/dz rounded eight at a time)."""
        channels = geometry[2]
        return (bool(rt.info.warpgroup_products) and tensor_core_form(rt, np.float32)
                and not (channels % 8 or filters % 8 or panel % 8))

    @classmethod
    def standalone(cls, rt, half: str, geometry: tuple, filters: int, capacity: int, rng) -> "SixteenBitConvPlan":
        """A plan over operands of its own (random weights, ReLU), for timing it without a layer."""
        height, width, channels, out_h, out_w, kh, kw = geometry[:7]
        parameter = lambda shape: Operand.random(shape, np.float32, rt, rng)
        return cls(rt, half, activations.get("relu"), geometry, filters, filters, capacity,
                   weights=parameter((1, kh * kw * channels, filters)), bias=parameter((filters,)),
                   outputs=Tensor((capacity, out_h, out_w, filters), np.float32, rt),
                   input_grad=Tensor((capacity, height, width, channels), np.float32, rt))

    def forward(self, x: Tensor, rows: int) -> None:
        """y = f(patches(x) W + b) over `rows` samples."""
        positions = rows * self.positions
        eights = positions * self.patch_size // 8
        self._patches((-(-eights // THREADS) * THREADS,), (THREADS,), x, np.int32(positions))
        self.product.forward(None, positions, inputs_rounded=True)

    def weight_gradient(self, x: Tensor, grad: Tensor, rows: int, apply_derivative: bool,
                        input_gradient: bool) -> None:
        """dL/dz in 16 bits and dL/db from dL/dy (`grad`; dL/dz itself where not
        `apply_derivative`), then dL/dW from the patches the forward wrote (x is that forward's)."""
        self.product.weight_gradient(x, grad, rows * self.positions, apply_derivative, input_gradient)

    def input_gradient(self, grad: Tensor, rows: int, apply_derivative: bool) -> None:
        """dL/dx from the 16-bit dL/dz weight_gradient made: the patches' gradient dL/dz W^T, then
        each input element's sum over the windows that cover it."""
        self.product.input_gradient(grad, rows * self.positions, apply_derivative)
        quads = rows * self.input_elements // 4
        self._gather((-(-quads // GATHER_ITEMS) * GATHER_ITEMS,), (GATHER_ITEMS,), np.int32(rows))
