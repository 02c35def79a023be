"""A convolution's forward by Winograd's F(4x4, 3x3) (winograd_forward.cl, on winograd.cl's
products): the tiled (GPU) form's alternative to its direct product, for 3 x 3 kernels at stride 1
without dilation, which the convolution tuner measures against the direct product's tiles and takes
where it is faster. Its tiles are the input gradient's Winograd form's (winograd.py)."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .convolution_geometry import GEOMETRY
from .winograd import GROUP, POINTS, TILE, check_applies, product_defines, product_launch
from .workspace import Scratch

SOURCES = ("products/convolution.cl", "products/winograd_transforms.cl", "products/winograd.cl",
           "products/winograd_forward.cl")


class WinogradForwardPlan:
    """y = f(z) and f'(z) (`outputs`, `slopes`: (capacity, out_h, out_w, filters)) of a convolution of
    `geometry` with `filters` filters from x, W (`weights`, (9 * channels, filters_p)) and b (`bias`,
    filters_p) in three launches, `fused` (the activation's elementwise part) applied as z is stored.
    V, U and M (36 x tiles x channels_p, 36 x filters_p x channels_p and 36 x tiles x filters_p
    elements, tiles = capacity x ceil(out_h / 4) x ceil(out_w / 4), channels_p the channels padded
    to 4) are views of the runtime's workspace (workspace.py), taken by the first forward."""

    def __init__(self, rt, dtype, tiles: dict, fused, geometry: tuple, filters: int, filters_p: int, capacity: int,
                 *, weights: Tensor, bias: Tensor, outputs: Tensor, slopes: Tensor):
        check_applies(geometry, "forward")
        channels, out_h, out_w = geometry[2:5]
        self.channels_p, self.filters_p, self.tiles = -(-channels // 4) * 4, filters_p, tiles
        self.tiles_h, self.tiles_w = -(-out_h // TILE), -(-out_w // TILE)
        self._most = capacity * self.tiles_h * self.tiles_w
        program = rt.program((fused.source, *SOURCES), dtype, {"ACT": fused.function,
                                                              **product_defines(rt, dtype, tiles)})
        i32 = np.int32
        kernel = lambda name: rt.kernel(program, name, dtype)
        shape = dict(tiles_h=i32(self.tiles_h), tiles_w=i32(self.tiles_w), filters_p=i32(filters_p))
        geometry_args = dict(zip(GEOMETRY, map(i32, geometry)))
        self._bind = lambda tiles_v, filters_u, products: (
            kernel("WinogradForwardTransforms").bind(
                ("inputs", "tiles"), weights=weights, tiles_v=tiles_v, filters_u=filters_u,
                channels_p=i32(self.channels_p), **shape, **geometry_args),
            kernel("WinogradProducts").bind(("tiles",), tiles_v=tiles_v, filters_u=filters_u, products=products,
                                            columns=i32(filters_p), depth=i32(self.channels_p)),
            kernel("WinogradForward").bind(("tiles",), products=products, bias=bias, outputs=outputs, slopes=slopes,
                                           filters=i32(filters), out_h=i32(out_h), out_w=i32(out_w), a=fused.a,
                                           b=fused.b, **shape))
        self._launches = None  # bound at the first launch, to the scratch's views
        self.scratch = Scratch(rt, dtype, ((POINTS, self._most, self.channels_p), (POINTS, filters_p, self.channels_p),
                                           (POINTS, self._most, filters_p)))  # V, U and M

    def forward(self, x: Tensor, rows: int) -> None:
        """outputs and slopes over `rows` samples of x."""
        if self._launches is None:
            self._launches = self._bind(*self.scratch.take())
        transforms, products, forward = self._launches
        tiles = rows * self.tiles_h * self.tiles_w
        up = lambda n, by: -(-n // by) * by
        count = np.int32(tiles)
        transforms((up(max(self.channels_p, self.filters_p), GROUP[0]), up(tiles + self.channels_p, GROUP[1])), GROUP,
                   x, count)
        products(*product_launch(self.tiles, tiles, self.filters_p), count,
                 flops=2.0 * POINTS * tiles * self.channels_p * self.filters_p)
        forward((up(self.filters_p, GROUP[0]), up(tiles, GROUP[1])), GROUP, count)
