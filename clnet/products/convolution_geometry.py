"""A convolution's geometry as its kernels take it (convolution.cl, convolution_tiles.cl and the
Winograd forms'), by name: what ConvPlan and the Winograd plans bind alike."""
from __future__ import annotations

# The kernels' GEOMETRY and FRAME arguments (convolution.cl, convolution_tiles.cl, the Winograd
# forms'), in the order of the geometry a plan takes and of delta_frame's result.
GEOMETRY = ("height", "width", "channels", "out_h", "out_w", "kh", "kw", "sh", "sw", "dh", "dw", "pad_top", "pad_left")
FRAME = ("frame_h", "frame_w", "frame_top", "frame_left")


def delta_frame(geometry) -> tuple[int, int, int, int]:
    """(frame_h, frame_w, frame_top, frame_left) of the tiled form's dL/dz (convolution_tiles.cl's
    FRAME): at stride 1, room for every tap of every input pixel, (k - 1) * dilation - padding
    zeros before the outputs where that is positive and whatever the input reaches past them after;
    at larger strides, none."""
    height, width, _, out_h, out_w, kh, kw, sh, sw, dh, dw, pad_top, pad_left = geometry
    if (sh, sw) != (1, 1):
        return out_h, out_w, 0, 0
    top, left = max(0, (kh - 1) * dh - pad_top), max(0, (kw - 1) * dw - pad_left)
    return max(height + pad_top, out_h) + top, max(width + pad_left, out_w) + left, top, left
