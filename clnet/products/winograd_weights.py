"""A convolution's weight gradient by Winograd's F(3x3, 4x4) (winograd_weights.cl): the tiled (GPU)
form's alternative to its direct product, for 3 x 3 kernels at stride 1 without dilation, which the
convolution tuner measures against the direct product's tiles and takes where it is faster. Its
tiles are a CUDA-core tiled form's (the 37 products' blocks) with "WINOGRAD": 1."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .convolution_geometry import FRAME, GEOMETRY
from .plan import MIN_SPLIT_ROWS
from .winograd import GROUP, POINTS, TILE, applies, check_applies
from .workspace import Scratch

# Pasted after the convolution's tiled program (gpu_tiles.cl, convolution.cl, convolution_tiles.cl).
SOURCES = ("products/winograd_transforms.cl", "products/winograd_weights.cl")
# The products fill the device about this many times over (split along the tiles): fewer splits
# leave SMs idle, more make WinogradWeightGradient sum more slices.
WAVES = 4


def candidates(rt, dtype, geometry: tuple, tiled: list[dict]) -> list[dict]:
    """The tuner's Winograd candidates for a convolution's weight gradient: on GPUs, where it
    applies, each of the `tiled` (CUDA-core) tiles 64 wide, with WINOGRAD."""
    if not rt.info.is_gpu or not applies(geometry):
        return []
    return [{**tiles, "WINOGRAD": 1} for tiles in tiled if tiles["TILE"] == 64]


class WinogradWeightPlan:
    """dL/dW and dL/db of a convolution of `geometry` into `weights_grad` ((9 * channels,
    filters_p), the tiled form's W) and `bias_grad` (filters_p), from x and dL/dy, with dL/dz =
    dL/dy f'(z) (`slopes`) written into `delta`'s frame (`frame`, delta_frame's) where the input
    gradient follows, in three launches of `program` (the convolution's tiled program for `tiles`
    with SOURCES after it). V, U and M's split-K slices (36 x tiles x channels, 36 x tiles x
    filters_p and splits x 37 x channels x filters_p elements, tiles = capacity x ceil(out_h / 4) x
    ceil(out_w / 4)) are views of the runtime's workspace (workspace.py), taken by the first weight
    gradient."""

    def __init__(self, rt, dtype, tiles: dict, program, geometry: tuple, frame: tuple, filters: int, filters_p: int,
                 capacity: int, *, slopes: Tensor, delta: Tensor, weights_grad: Tensor, bias_grad: Tensor):
        check_applies(geometry, "weight gradient")
        channels, out_h, out_w = geometry[2:5]
        self.channels, self.filters_p = channels, filters_p
        self.tiles_h, self.tiles_w = -(-out_h // TILE), -(-out_w // TILE)
        self._most = capacity * self.tiles_h * self.tiles_w
        self.tile, self.side = tiles["TILE"], tiles["TILE"] // tiles["WPT"]
        self.channels_g = -(-channels // GROUP[0]) * GROUP[0]
        # Split-K over the tiles, fixed at the capacity's (a shorter batch needs no more slices).
        blocks = (POINTS + 1) * -(-channels // self.tile) * -(-filters_p // self.tile)  # (the 37th: the bias)
        splits = max(1, min(WAVES * rt.info.cl_device.max_compute_units // blocks, self._most // MIN_SPLIT_ROWS))
        self.chunk = -(-(-(-self._most // splits)) // tiles["TK"]) * tiles["TK"]
        self.most_splits = -(-self._most // self.chunk)
        i32 = np.int32
        kernel = lambda name: rt.kernel(program, name, dtype)
        geometry_args = dict(zip(GEOMETRY, map(i32, geometry)))
        frame_args = dict(zip(FRAME, map(i32, frame)))
        self._bind = lambda tiles_v, deltas_u, products: (
            kernel("WinogradWeightTransforms").bind(
                ("inputs", "output_gr", "tiles", "apply_derivative", "write_delta"), slopes=slopes, delta=delta,
                tiles_v=tiles_v, deltas_u=deltas_u, tiles_h=i32(self.tiles_h), tiles_w=i32(self.tiles_w),
                channels_g=i32(self.channels_g), filters=i32(filters), filters_p=i32(filters_p), **geometry_args,
                **frame_args),
            kernel("WinogradWeightProducts").bind(
                ("tiles", "splits"), tiles_v=tiles_v, deltas_u=deltas_u, ones=self._ones, products=products,
                channels=i32(channels), filters_p=i32(filters_p), chunk=i32(self.chunk)),
            kernel("WinogradWeightGradient").bind(
                ("splits",), products=products, delta_weights=weights_grad, delta_bias=bias_grad,
                channels=i32(channels), filters_p=i32(filters_p)))
        self._launches = None  # bound at the first launch, to the scratch's views
        self.scratch = Scratch(rt, dtype, ((POINTS, self._most, channels), (POINTS, self._most, filters_p),
                                           (self.most_splits, POINTS + 1, channels, filters_p)))  # V, U, M's slices
        self._ones = Tensor.from_numpy(np.ones(4), dtype, rt)

    def weight_gradient(self, x: Tensor, grad: Tensor, rows: int, apply_derivative: bool, write_delta: bool) -> None:
        """weights_grad and bias_grad from x and dL/dy (`grad`; dL/dz where not `apply_derivative`)
        over `rows` samples, and delta's frame where `write_delta`."""
        if self._launches is None:
            self._launches = self._bind(*self.scratch.take())
        transforms, products, gradient = self._launches
        tiles = rows * self.tiles_h * self.tiles_w
        splits = -(-tiles // self.chunk)
        up = lambda n, by: -(-n // by) * by
        count, i32 = np.int32(tiles), np.int32
        transforms((self.channels_g + up(self.filters_p, GROUP[0]), up(tiles, GROUP[1])), GROUP, x, grad, count,
                   i32(apply_derivative), i32(write_delta))
        blocks = lambda n: -(-n // self.tile) * self.side
        products((blocks(self.filters_p), blocks(self.channels), (POINTS + 1) * splits), (self.side, self.side, 1),
                 count, i32(splits), flops=2.0 * POINTS * tiles * self.channels * self.filters_p)
        gradient((up(self.filters_p, GROUP[0]), up(self.channels + 1, GROUP[1])), GROUP, i32(splits))
