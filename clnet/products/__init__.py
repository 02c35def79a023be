"""The matrix products' room: what a product is on each device (forms.py), which form and tiles
run fastest here (tuner.py), and the plans a layer launches them through (plan.py for a dense
layer's, convolution.py for a convolution's; sixteen_bit.py's and sixteen_bit_convolution.py's for
operands stored in 16 bits).
Layers ask for a plan; nothing here imports a layer."""
from .forms import (HALF_TYPES, PRODUCT_SOURCES, check_tensor_core_form, half_candidates, kernel_defines, layout,
                    on_tensor_cores, product_sources, program_defines, stores_pre, tensor_core_form, tile_candidates)
from .convolution import CHUNK, ConvPlan, weight_block_rows
from .convolution_geometry import delta_frame
from .plan import DensePlan, dense_program, split_k
from .sixteen_bit import SixteenBitDensePlan, SixteenBitPlan
from .sixteen_bit_convolution import SixteenBitConvPlan
from .winograd import applies as winograd_applies, is_winograd
from .tuner import (convolution_columns, convolution_in_sixteen_bits, convolution_tiles, matrix_tiles,
                    probe_step_seconds, usable_candidates)
from ..cl import probe as _probe

_probe.measure_with(probe_step_seconds, ("cl/common.cl", *PRODUCT_SOURCES, "activations/relu.cl"))

__all__ = ["CHUNK", "HALF_TYPES", "PRODUCT_SOURCES", "ConvPlan", "DensePlan", "SixteenBitConvPlan",
           "SixteenBitDensePlan", "SixteenBitPlan", "check_tensor_core_form", "convolution_columns",
           "convolution_in_sixteen_bits", "convolution_tiles", "delta_frame", "dense_program", "half_candidates",
           "is_winograd", "kernel_defines", "layout", "matrix_tiles", "on_tensor_cores", "product_sources",
           "program_defines", "split_k", "stores_pre", "tensor_core_form", "tile_candidates", "usable_candidates",
           "weight_block_rows", "winograd_applies"]
