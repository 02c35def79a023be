"""A convolution's three products on operands stored in 16 bits, on Hopper's warpgroup tensor
cores: what a Conv layer runs under a mixed-precision policy where the tuner measures it faster
than the tiled form (tuner.convolution_in_sixteen_bits). The float forms (convolution.py) never
write the patch matrix; this one writes it once a forward, in 16 bits (PatchesToSixteenBits,
sixteen_bit_convolution.cl), and runs the layer's step as a dense layer's over (samples x
positions) rows of kh * kw * channels (SixteenBitDensePlan). dL/dx at stride 1 is the forward's
product over 16-bit patches of dL/dz (DeltaPatchesToSixteenBits) and W's taps transposed
(TransposedWeightsToSixteenBits); at larger strides it comes from the patch matrix's float
gradient, each input element summing the windows that cover it (PatchGradientsToInputs)."""
from __future__ import annotations

import numpy as np

from .. import activations
from ..cl.tensor import Tensor
from .convolution_geometry import GEOMETRY
from .forms import HALF_TYPES, stores_pre, tensor_core_form
from .plan import Operand
from .sixteen_bit import ATOM_ROWS, FORWARD, THREADS, BoundProduct, SixteenBitDensePlan, operand, product_program

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
        f32, i32 = np.float32, np.int32
        atom_rows = lambda tensor: i32(tensor.shape[0] // ATOM_ROWS)
        y = Tensor((rows, filters), f32, rt, outputs.buffer)
        kept = Tensor((rows, filters), f32, rt) if stores_pre(activation) else y  # z or f'(z), as Dense keeps
        # dL/dx at stride 1 from 16-bit patches of dL/dz; else from dL/d(patches) in float, gathered.
        self.transposed = self.geometry[7:9] == (1, 1)
        self.patch_grad = None if self.transposed else Tensor((rows, self.patch_size), f32, rt)
        self.product = SixteenBitDensePlan(rt, half, activation, self.patch_size, filters, panel, rows,
                                           weights=weights, bias=bias, outputs=y, kept=kept,
                                           input_grad=self.patch_grad)
        program = rt.program(SOURCES, f32, {"HALF": HALF_TYPES[half]})
        sizes = dict(zip(GEOMETRY, self.geometry))
        patches = self.product.inputs16
        kernel = lambda name: rt.kernel(program, name, f32)
        self._patches = kernel("PatchesToSixteenBits").bind(("x", "rows"), patches=patches,
                                                            atom_rows=atom_rows(patches), **sizes)
        self.pixels = height * width  # per sample
        if not self.transposed:
            self._gather = kernel("PatchGradientsToInputs").bind(("samples",), patch_gr=self.patch_grad,
                                                                 input_gr=input_grad, **sizes)
            return
        pixels, self.taps = capacity * self.pixels, kh * kw * filters  # the rows and columns of dL/dz's patches
        self.delta_patches, weights_t = operand(rt, pixels, self.taps), operand(rt, self.taps, channels)
        delta = self.product.delta16
        self._delta_patches = kernel("DeltaPatchesToSixteenBits").bind(
            ("rows",), delta=delta, patches=self.delta_patches, filters=i32(filters), delta_atom_rows=atom_rows(delta),
            atom_rows=atom_rows(self.delta_patches), **sizes)
        self._transposed_weights = kernel("TransposedWeightsToSixteenBits").bind(
            (), weights=weights.value, transposed=weights_t, filters=i32(filters), panel=i32(panel),
            atom_rows=atom_rows(weights_t), **sizes)
        self._transposed_sizes = (-(-self.taps * channels // 8 // THREADS) * THREADS,), (THREADS,)
        input_grad_rows = Tensor((pixels, channels), f32, rt, input_grad.buffer)  # (samples x pixels, channels)
        self._input_product = BoundProduct(rt, product_program(rt, half, *FORWARD), "m", pixels, a=self.delta_patches,
                                           b=weights_t, c=input_grad_rows, n=channels, k=self.taps, panel=channels)

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
        """dL/dx from the 16-bit dL/dz weight_gradient made: at stride 1 the product of its patches
        and W's taps transposed; else the patches' gradient dL/dz W^T, then each input element's
        sum over the windows that cover it."""
        pixels = rows * self.pixels
        if self.transposed:
            chunks = pixels * self.taps // 8
            self._delta_patches((-(-chunks // THREADS) * THREADS,), (THREADS,), np.int32(pixels))
            self._transposed_weights(*self._transposed_sizes)
            self._input_product(pixels)
            return
        self.product.input_gradient(grad, rows * self.positions, apply_derivative)
        quads = pixels * self.geometry[2] // 4
        self._gather((-(-quads // GATHER_ITEMS) * GATHER_ITEMS,), (GATHER_ITEMS,), np.int32(rows))
