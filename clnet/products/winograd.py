"""A convolution's input gradient by Winograd's F(4x4, 3x3) (winograd.cl): the tiled (GPU) form's
alternative to its direct product, for 3 x 3 kernels at stride 1 without dilation, which the
convolution tuner measures against the direct product's tiles and takes where it is faster. Its
tiles: {"WINOGRAD": 1, "BM": tiles of dL/dx a work-group's block of the 36 products, "TK": filters
a staged slice, "STAGES": slices staged}."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from .workspace import Scratch

SOURCES = ("products/winograd_transforms.cl", "products/winograd.cl")
POINTS = 36  # a 6 x 6 patch's transformed points, each one matrix product
TILE = 4     # the 4 x 4 tiles: of dL/dx or z (F(4x4, 3x3)), of dL/dz (the weight gradient's F(3x3, 4x4))
BN = 64      # the products' block of channels (winograd.cl's)
GROUP = (32, 4)  # the transforms' and output kernels' work-groups: 32 channels or filters by 4 tiles


def applies(geometry: tuple) -> bool:
    """Whether a convolution of `geometry` (ConvPlan's thirteen sizes) has a 3 x 3 kernel, stride 1
    and no dilation: what F(4x4, 3x3) computes."""
    kh, kw, sh, sw, dh, dw = geometry[5:11]
    return (kh, kw, sh, sw, dh, dw) == (3, 3, 1, 1, 1, 1)


def check_applies(geometry: tuple, product: str) -> None:
    """A ValueError naming `product` (a Winograd plan's) where the convolution of `geometry` is not
    what F(4x4, 3x3) and F(3x3, 4x4) compute (applies)."""
    if not applies(geometry):
        kh, kw, sh, sw, dh, dw = geometry[5:11]
        raise ValueError(f"the Winograd {product} takes a 3 x 3 kernel at stride 1 without dilation, got "
                         f"kernel {kh} x {kw}, strides ({sh}, {sw}), dilation ({dh}, {dw})")


def is_winograd(tiles: dict) -> bool:
    """Whether these are the Winograd form's tiles (a convolution's input gradient), not a product's."""
    return bool(tiles.get("WINOGRAD"))


def local_bytes(tiles: dict, dtype) -> int:
    """The local memory a work-group of WinogradProducts holds: STAGES slices of both operands,
    rows padded by 4."""
    return tiles["STAGES"] * (tiles["BM"] + BN) * (tiles["TK"] + 4) * np.dtype(dtype).itemsize


def candidates(rt, dtype, geometry: tuple) -> list[dict]:
    """The tuner's Winograd candidates for a convolution's input gradient: on GPUs, where it
    applies, blocks of 64 and 128 tiles with as many stages of 16 filters as local memory holds
    (at most 4; at least 2)."""
    if not rt.info.is_gpu or not applies(geometry):
        return []
    room = rt.info.cl_device.local_mem_size
    found = []
    for block in (64, 128):
        tiles = {"WINOGRAD": 1, "BM": block, "TK": 16, "STAGES": 2}
        while tiles["STAGES"] < 4 and local_bytes({**tiles, "STAGES": tiles["STAGES"] + 1}, dtype) <= room:
            tiles["STAGES"] += 1
        if local_bytes(tiles, dtype) <= room:
            found.append(tiles)
    return found


def product_defines(rt, dtype, tiles: dict) -> dict:
    """WinogradProducts' defines for these tiles: cp.async stages where NVIDIA has them (compute
    capability 8.0 or later) in float32."""
    async_copies = rt.info.async_copies and np.dtype(dtype) == np.float32
    return {"BM": tiles["BM"], "TK": tiles["TK"], "STAGES": tiles["STAGES"], "YOUNGER_SLICES": tiles["STAGES"] - 2,
            "ASYNC_COPIES": int(async_copies)}


def product_launch(tiles: dict, count: int, columns: int) -> tuple[tuple, tuple]:
    """(global, local) sizes of WinogradProducts over `count` tiles and `columns` columns: a
    work-group of BM / 8 x 8 work-items per block of BM tiles by BN columns, one layer a point."""
    items = tiles["BM"] // 8 * (BN // 8)
    return (-(-count // tiles["BM"]) * items, -(-columns // BN), POINTS), (items, 1, 1)


class WinogradPlan:
    """dL/dx (`input_grad`, (capacity, height, width, channels)) of a convolution of `geometry`
    from its dL/dz in the tiled form's frame (`delta`, (capacity, frame_h, frame_w, filters_p), the
    `frame` delta_frame gives) and its W (`weights`, (9 * channels, filters_p)), in three launches.
    V, U and M, the transformed tiles and kernel and their products (36 x tiles x filters_p, 36 x
    channels x filters_p and 36 x tiles x channels elements, tiles = capacity x ceil(height / 4) x
    ceil(width / 4)), are views of the runtime's workspace (workspace.py), taken by the first input
    gradient (a model's first layer computes none: the tuner, which measures each convolution
    alone, may give it this form all the same)."""

    def __init__(self, rt, dtype, tiles: dict, geometry: tuple, frame: tuple, filters_p: int, capacity: int, *,
                 delta: Tensor, weights: Tensor, input_grad: Tensor):
        check_applies(geometry, "input gradient")
        height, width, channels = geometry[:3]
        pad_top, pad_left = geometry[11:13]
        frame_h, frame_w, frame_top, frame_left = frame
        self.channels, self.filters_p = channels, filters_p
        self.tiles_h, self.tiles_w = -(-height // TILE), -(-width // TILE)
        self._most = capacity * self.tiles_h * self.tiles_w
        program = rt.program(SOURCES, dtype, product_defines(rt, dtype, tiles))
        self.tiles = tiles
        i32 = np.int32
        shape = dict(tiles_h=i32(self.tiles_h), tiles_w=i32(self.tiles_w), channels=i32(channels))
        kernel = lambda name: rt.kernel(program, name, dtype)
        # The frame's row and column under dL/dx's (0, 0) tap (2, 2): see winograd.cl.
        self._bind = lambda tiles_v, filters_u, products: (
            kernel("WinogradTransforms").bind(
                ("tiles",), delta=delta, weights=weights, tiles_v=tiles_v, filters_u=filters_u,
                filters_p=i32(filters_p), frame_h=i32(frame_h), frame_w=i32(frame_w),
                o_y=i32(frame_top + pad_top - 2), o_x=i32(frame_left + pad_left - 2), **shape),
            kernel("WinogradProducts").bind(("tiles",), tiles_v=tiles_v, filters_u=filters_u, products=products,
                                            columns=i32(channels), depth=i32(filters_p)),
            kernel("WinogradGradient").bind(("tiles",), products=products, input_gr=input_grad, height=i32(height),
                                            width=i32(width), **shape))
        self._launches = None  # bound at the first launch, to the scratch's views
        self.scratch = Scratch(rt, dtype, ((POINTS, self._most, filters_p), (POINTS, channels, filters_p),
                                           (POINTS, self._most, channels)))  # V, U and M

    def input_gradient(self, rows: int) -> None:
        """input_grad over `rows` samples, from the delta the weight gradient framed."""
        if self._launches is None:
            self._launches = self._bind(*self.scratch.take())
        transforms, products, gradient = self._launches
        tiles = rows * self.tiles_h * self.tiles_w
        up = lambda n, by: -(-n // by) * by
        count = np.int32(tiles)
        transforms((up(self.filters_p, GROUP[0]), up(tiles + self.channels, GROUP[1])), GROUP, count)
        products(*product_launch(self.tiles, tiles, self.channels), count,
                 flops=2.0 * POINTS * tiles * self.channels * self.filters_p)
        gradient((up(self.channels, GROUP[0]), up(tiles, GROUP[1])), GROUP, count)
