"""A dense layer's three products with operands stored in 16 bits (sixteen_bit.cl), on Hopper's
warpgroup tensor cores: what a mixed-precision step multiplies once its operands are kept in
bfloat16 or float16 on the device, as cuBLAS's 16-bit products take theirs. `round` makes a
16-bit copy of a float32 tensor (to nearest even). `SixteenBitDensePlan` runs a dense layer's
step on them: what Dense runs where its tiles are the WGMMA form's 16-bit products 32 deep (the
tuner takes those where the products are large; their tiled kernels, wgmma_half.cl, read float
operands and round them as staged, at a fraction of this plan's rate)."""
from __future__ import annotations

import numpy as np

from ..cl.device import DeviceError
from ..cl.runtime import SM90A
from ..cl.tensor import Tensor
from .forms import HALF_TYPES, fused_activation, stores_pre, tensor_core_form
from .plan import bias_operands, split_k

SOURCES = ("products/tensor_cores.cl", "products/sixteen_bit_layout.cl", "products/sixteen_bit.cl")
BLOCK, THREADS, TK = 128, 256, 32  # (sixteen_bit.cl's)
DELTA_COLUMNS, DELTA_LANES, DELTA_ROWS = 64, 8, 64  # (SixteenBitDelta's work-groups: columns x lanes, rows)
SUM_COLUMNS, SUM_LANES = 32, 32  # (SumRows's work-groups)
MOST_SLICES = 8 * SUM_LANES  # dL/dz's bias sums: at most 8 slices for each of SumRows' lanes to add
# The fewest inputs and units of a layer SixteenBitDensePlan takes: its four launches of its own
# (the copies in 16 bits, dL/dz, the bias gradient's sum) cost a GPU step that waits on its
# launches more than smaller products gain. On the H200 the tiny GPT (d 256) ran slower with it,
# the 8-block d-512 GPT far faster (benchmarks/RESULTS.md, operands stored in 16 bits in the layers).
LEAST_SIDE = 512
# How a 16-bit operand is held in a Tensor, in either format: its bits, as uint16 (numpy has no
# bfloat16; a float16 array's .view(np.uint16) gives its bits), in sixteen_bit_layout.cl's atoms of
# 8 rows by 32 columns, the matrix padded to whole blocks (BLOCK) of rows and columns.
STORAGE = np.dtype(np.uint16)
ATOM_ROWS, ATOM_COLUMNS = 8, 32


def padded(size: int) -> int:
    """size rounded up to whole blocks (BLOCK)."""
    return -(-size // BLOCK) * BLOCK


def operand(rt, rows: int, columns: int) -> Tensor:
    """A zeroed 16-bit copy of a (rows, columns) matrix, as atoms: a (padded(rows), padded(columns))
    tensor whose pads stay zero (no writer touches them)."""
    tensor = Tensor((padded(rows), padded(columns)), STORAGE, rt)
    tensor.fill(0)
    return tensor


def is_operand(tensor: Tensor, rows: int, columns: int) -> bool:
    """Whether `tensor` holds a (rows, columns) 16-bit matrix as atoms, as operand() makes one."""
    return tensor.dtype == STORAGE and tensor.shape == (padded(rows), padded(columns))


def to_atoms(bits: np.ndarray) -> np.ndarray:
    """A (rows, columns) matrix of 16-bit values (uint16) laid out as operand() holds it: numpy's
    model of sixteen_bit_layout.cl's atom_index."""
    rows, columns = bits.shape
    full = np.zeros((padded(rows), padded(columns)), STORAGE)
    full[:rows, :columns] = bits
    atoms = full.reshape(full.shape[0] // ATOM_ROWS, ATOM_ROWS, full.shape[1] // ATOM_COLUMNS, 4, 8)
    atoms = atoms.transpose(2, 0, 1, 3, 4)  # (atom column, atom row, row, chunk, element)
    row = np.arange(ATOM_ROWS)[:, None]
    swizzled = np.arange(4)[None, :] ^ (row // 2 % 4)  # (chunk q of row r at q ^ (r / 2 % 4); its own inverse)
    return np.ascontiguousarray(atoms[:, :, row, swizzled, :]).reshape(full.shape)


def from_atoms(atoms: np.ndarray, rows: int, columns: int) -> np.ndarray:
    """The (rows, columns) matrix that to_atoms laid out as `atoms` (a tensor's numpy())."""
    height, width = atoms.shape
    t = atoms.reshape(width // ATOM_COLUMNS, height // ATOM_ROWS, ATOM_ROWS, 4, 8)
    row = np.arange(ATOM_ROWS)[:, None]
    t = t[:, :, row, np.arange(4)[None, :] ^ (row // 2 % 4), :]
    return t.transpose(1, 2, 0, 3, 4).reshape(height, width)[:rows, :columns]


# How a dense layer's products find their operands (sixteen_bit.cl's A_ALONG_M, B_ALONG_N): the
# forward x W, the weight gradient x^T dL/dz, the input gradient dL/dz W^T.
FORWARD, WEIGHT_GRADIENT, INPUT_GRADIENT = (0, 1), (1, 1), (0, 0)


def product_program(rt, half: str, a_along_m: int, b_along_n: int, activation=None):
    """sixteen_bit.cl's program for these operand layouts; with `activation` (an elementwise one, or
    softmax's linear part) the dense layer's forward and dL/dz kernels too, storing z or f'(z) as
    DensePlan's GPU form does."""
    defines = {SM90A: 1, "HALF": HALF_TYPES[half], "A_ALONG_M": a_along_m, "B_ALONG_N": b_along_n}
    if activation is None:
        return rt.program(SOURCES, np.float32, defines)
    fused = fused_activation(activation)
    slopes = activation.elementwise and stores_pre(activation)  # f'(z) kept where it needs z
    return rt.program((fused.source, *SOURCES), np.float32,
                      {**defines, "ACT": fused.function, "STORE_PRE": int(stores_pre(activation) and not slopes),
                       "STORE_SLOPES": int(slopes)})


class SixteenBitPlan:
    """z = x W, dL/dW = x^T dL/dz and dL/dx = dL/dz W^T for x (rows, n_in), W (n_in, units) and
    dL/dz (rows, units) stored in `half` ("bfloat16" or "float16"; their bits in uint16 Tensors,
    as atoms: operand(), to_atoms), summed and written in float32 row-major, on runtime `rt`'s
    device (an NVIDIA GPU of compute capability 9.0). n_in and units must be multiples of 8."""

    def __init__(self, rt, half: str, n_in: int, units: int):
        if half not in HALF_TYPES:
            raise ValueError(f"SixteenBitPlan: half must be one of {sorted(HALF_TYPES)}, got {half!r}")
        for name, value in (("n_in", n_in), ("units", units)):
            if not isinstance(value, (int, np.integer)) or value <= 0 or value % 8:
                raise ValueError(f"SixteenBitPlan: {name} must be a positive multiple of 8 (rows of 16-bit operands "
                                 f"are rounded 8 elements at a time), got {value!r}")
        if not rt.info.warpgroup_products:
            raise DeviceError(f"SixteenBitPlan multiplies on Hopper's warpgroup tensor cores (an NVIDIA GPU of "
                              f"compute capability 9.0: H100, H200); the device is {rt.info.name!r}")
        self.rt, self.half, self.n_in, self.units = rt, half, int(n_in), int(units)

        # One program per pair of operand layouts (see sixteen_bit.cl); the rounding kernel from the first.
        programs = [product_program(rt, half, *layouts) for layouts in (FORWARD, WEIGHT_GRADIENT, INPUT_GRADIENT)]
        self._forward, self._weight_gradient, self._input_gradient = (
            rt.kernel(program, "SixteenBitProduct", np.float32) for program in programs)
        self._round = rt.kernel(programs[0], "RoundToSixteenBits", np.float32)
        self._sum_slices = rt.kernel(programs[0], "SumSlices", np.float32)
        self._slices: Tensor | None = None  # split products' slices of C, grown as needed

    def forward(self, x: Tensor, weights: Tensor, outputs: Tensor, rows: int):
        """outputs[:rows] = x[:rows] W; returns the launch's event."""
        self._check_operand(x, "x", self.n_in, rows)
        self._check_operand(weights, "weights", self.units, self.n_in, exactly=True)
        self._check(outputs, "outputs", self.units, rows)
        return self._launch(self._forward, x, weights, outputs, rows, self.units, self.n_in, self.units)

    def weight_gradient(self, x: Tensor, delta: Tensor, grad: Tensor, rows: int):
        """grad = x[:rows]^T delta[:rows] (n_in, units); returns the launch's event."""
        self._check_operand(x, "x", self.n_in, rows)
        self._check_operand(delta, "delta", self.units, rows)
        self._check(grad, "grad", self.units, self.n_in, exactly=True)
        return self._launch(self._weight_gradient, x, delta, grad, self.n_in, self.units, rows, self.units)

    def input_gradient(self, delta: Tensor, weights: Tensor, input_grad: Tensor, rows: int):
        """input_grad[:rows] = delta[:rows] W^T; returns the launch's event."""
        self._check_operand(delta, "delta", self.units, rows)
        self._check_operand(weights, "weights", self.units, self.n_in, exactly=True)
        self._check(input_grad, "input_grad", self.n_in, rows)
        return self._launch(self._input_gradient, delta, weights, input_grad, rows, self.n_in, self.units, self.n_in)

    def round(self, source: Tensor, target: Tensor):
        """target = source (float32, (rows, columns), columns a multiple of 8) rounded to this plan's
        16 bits, to nearest even, as atoms (target: operand(rt, rows, columns)); returns the event."""
        if source.dtype != np.float32 or len(source.shape) != 2 or source.shape[1] % 8:
            raise TypeError(f"SixteenBitPlan.round: source must be a float32 tensor of shape (rows, columns) with "
                            f"columns a multiple of 8, got {source.dtype} of shape {source.shape}")
        rows, columns = source.shape
        if not is_operand(target, rows, columns):
            raise TypeError(f"SixteenBitPlan.round: target must be a {STORAGE} tensor of shape "
                            f"{(padded(rows), padded(columns))} (a {self.half} copy of source as atoms: "
                            f"operand(rt, {rows}, {columns})), got {target.dtype} of shape {target.shape}")
        return self._round((-(-source.size // 8 // THREADS) * THREADS,), (THREADS,), x=source, y=target,
                           count=np.int32(source.size), columns=np.int32(columns), panel=np.int32(columns),
                           atom_rows=np.int32(target.shape[0] // ATOM_ROWS))

    @staticmethod
    def _check(tensor: Tensor, name: str, columns: int, rows: int, exactly: bool = False) -> None:
        """tensor is a float32 (capacity, columns) with at least `rows` rows (exactly `rows` where `exactly`)."""
        fits = (len(tensor.shape) == 2 and tensor.shape[1] == columns
                and (tensor.shape[0] == rows if exactly else 0 < rows <= tensor.shape[0]))
        if tensor.dtype != np.float32 or not fits:
            want = (f"of shape {(rows, columns)}" if exactly
                    else f"of shape (capacity, {columns}) with capacity >= rows ({rows})")
            raise ValueError(f"SixteenBitPlan: {name} must be a float32 tensor {want}, got {tensor.dtype} "
                             f"of shape {tensor.shape}")

    @staticmethod
    def _check_operand(tensor: Tensor, name: str, columns: int, rows: int, exactly: bool = False) -> None:
        """tensor holds a (capacity, columns) 16-bit matrix as atoms (operand()), with at least
        `rows` rows (exactly `rows` where `exactly`)."""
        shape = tensor.shape
        fits = (len(shape) == 2 and shape[1] == padded(columns) and shape[0] % BLOCK == 0
                and (shape[0] == padded(rows) if exactly else 0 < rows <= shape[0]))
        if tensor.dtype != STORAGE or not fits:
            want = (f"of shape {(padded(rows), padded(columns))} (operand(rt, {rows}, {columns}))" if exactly else
                    f"of shape (padded capacity, {padded(columns)}) with capacity >= rows ({rows}) (operand(rt, "
                    f"capacity, {columns}))")
            raise ValueError(f"SixteenBitPlan: {name} must be a {STORAGE} tensor of 16-bit atoms {want}, got "
                             f"{tensor.dtype} of shape {shape}")

    def _launch(self, kernel, a, b, c, m, n, k, panel):
        """C (m x n, in column panels of `panel`) = A B with k depths (see product_geometry)."""
        splits, chunk, sizes, summing = product_geometry(self.rt, m, n, k)
        product = dict(a=a, b=b, m=np.int32(m), n=np.int32(n), k=np.int32(k),
                       a_atom_rows=np.int32(a.shape[0] // ATOM_ROWS), b_atom_rows=np.int32(b.shape[0] // ATOM_ROWS),
                       panel=np.int32(panel), chunk=np.int32(chunk), flops=2.0 * m * n * k)
        if splits == 1:
            return kernel(*sizes, c=c, **product)
        if self._slices is None or self._slices.size < splits * m * n:
            self._slices = Tensor((splits * m * n,), np.float32, self.rt)
        kernel(*sizes, c=self._slices, **{**product, "panel": np.int32(n)})
        return self._sum_slices(*summing, slices=self._slices, c=c, splits=np.int32(splits), size=np.int32(m * n),
                                columns=np.int32(n), panel=np.int32(panel))


def product_geometry(rt, m: int, n: int, k: int) -> tuple:
    """(splits, chunk, launch sizes, summing sizes) of SixteenBitProduct's C (m x n) = A B over k
    depths: split along k where C's blocks would not fill the GPU twice over (two work-groups an
    SM; the weight gradient's, whose k is the batch's rows), into row-major slices of `chunk`
    depths that SumSlices adds, one work-item an element."""
    splits, chunk = split_k(rt, {"TILE": BLOCK, "TK": TK}, m, n, k, waves=2)
    return (splits, chunk, ((-(-n // BLOCK) * THREADS, -(-m // BLOCK), splits), (THREADS, 1, 1)),
            ((-(-m * n // THREADS) * THREADS,), (THREADS,)))


class SixteenBitDensePlan:
    """DensePlan's launches (forward, weight_gradient, input_gradient) for a dense layer whose
    products run in `half` with their operands stored in 16 bits (sixteen_bit.cl), on runtime `rt`'s
    Hopper GPU: x (up to `capacity` rows of `n_in`) and the float32 W of `weights` (n_in x `units`,
    column panels of `panel`, the GPU form's layout) are rounded into 16-bit copies (atoms) as
    the forward starts, then one launch multiplies them with `bias`, `activation` and a linear
    layer's residual applied as it stores `outputs` and `kept` (z or f'(z), as DensePlan keeps
    them) (SixteenBitForward); the backward forms dL/dz once, in 16 bits, with the bias gradient's
    sums in float (SixteenBitDelta), for both gradients' products (dL/dx into `input_grad`; None
    where its user forms dL/dx from delta16 itself, as a convolution at stride 1 does).
    Variables, outputs and gradients stay float32. Every launch's arguments are bound once: on a
    GPU a small layer's step costs what its Python costs. Only where `takes` says so."""

    def __init__(self, rt, half: str, activation, n_in: int, units: int, panel: int, capacity: int, *,
                 weights, bias, outputs: Tensor, kept: Tensor, input_grad: Tensor | None):
        self.n_in, self.units, self.capacity, self.kept, self.input_grad = n_in, units, capacity, kept, input_grad
        self.outputs = outputs  # y, float (capacity, units)
        program = product_program(rt, half, *FORWARD, activation)
        fused = fused_activation(activation)
        bias, bias_grad = bias_operands(bias, units, np.float32, rt)
        # The 16-bit copies, as atoms: x (capacity, n_in), W (n_in, units) and dL/dz (capacity, units).
        self.inputs16, weights16 = operand(rt, capacity, n_in), operand(rt, n_in, units)
        self.delta16 = operand(rt, capacity, units)
        batch_atom_rows = np.int32(padded(capacity) // ATOM_ROWS)
        weights_atom_rows = np.int32(padded(n_in) // ATOM_ROWS)
        bias_slices = Tensor((-(-capacity // DELTA_ROWS), units), np.float32, rt)  # (slices, units), a block or more
        kernel = lambda name, source=program: rt.kernel(source, name, np.float32)
        i32 = np.int32
        self._round_weights = kernel("RoundToSixteenBits").bind(
            (), x=weights.value, y=weights16, count=i32(n_in * units), columns=i32(units), panel=i32(panel),
            atom_rows=weights_atom_rows)
        self._round_weights_sizes = (-(-n_in * units // 8 // THREADS) * THREADS,), (THREADS,)
        self._round_inputs = kernel("RoundToSixteenBits").bind(("x", "count"), y=self.inputs16, columns=i32(n_in),
                                                               panel=i32(n_in), atom_rows=batch_atom_rows)
        self.half, self.elementwise = half, activation.elementwise
        forward = dict(inputs=self.inputs16, weights=weights16, bias=bias, kept=kept, outputs=outputs, n_in=i32(n_in),
                       units=i32(units), batch_atom_rows=batch_atom_rows, weights_atom_rows=weights_atom_rows,
                       a=fused.a, b=fused.b)
        self._bind_forward = lambda outputs16: kernel("SixteenBitForward").bind(
            ("residual", "rows", "adding"), **forward, outputs16=outputs16, sixteen=i32(outputs16 is not None))
        self._forward = self._bind_forward(None)
        self.outputs16 = None  # the tensor the forward writes y into in 16 bits too, if any
        self._writer = None  # the plan of the layer below that was asked to write inputs16
        self._delta = kernel("SixteenBitDelta").bind(
            ("output_gr", "rows", "blocks", "apply_derivative"), slopes=kept, delta=self.delta16,
            bias_slices=bias_slices, units=i32(units), batch_atom_rows=batch_atom_rows, a=fused.a, b=fused.b)
        self._sum_bias = kernel("SumRows").bind(("rows",), x=bias_slices, c=bias_grad, columns=i32(units))
        self._sum_bias_sizes = (-(-units // SUM_COLUMNS) * SUM_COLUMNS, SUM_LANES), (SUM_COLUMNS, SUM_LANES)
        # dL/dW (n_in, units) in W's panels, as the parameter's gradient holds it whatever its shape;
        # dL/dx (capacity, n_in) rows.
        weight_grad = Tensor((n_in, units), np.float32, rt, weights.grad.buffer)
        self._weight_gradient = BoundProduct(rt, product_program(rt, half, *WEIGHT_GRADIENT), "k", capacity,
                                             a=self.inputs16, b=self.delta16, c=weight_grad, m=n_in, n=units,
                                             panel=panel)
        self._input_gradient = None if input_grad is None else BoundProduct(
            rt, product_program(rt, half, *INPUT_GRADIENT), "m", capacity, a=self.delta16, b=weights16, c=input_grad,
            n=n_in, k=units, panel=n_in)
        self._sizes = {}  # rows -> each launch's sizes

    @staticmethod
    def takes(rt, tiles: dict, n_in: int, units: int, panel: int) -> bool:
        """Whether a layer with these tiles and sizes runs this plan: the tiles are the WGMMA form's
        16-bit products, 32 deep a slice (the tuner's choice, or fixed), n_in and units are at least
        LEAST_SIDE, and the 16-bit rows start on 16 bytes (n_in, units and W's panels multiples of 8)."""
        return (bool(tiles.get("WGMMA") and tiles.get("HALF") and tiles.get("TK") == TK) and rt.info.warpgroup_products
                and tensor_core_form(rt, np.float32) and min(n_in, units) >= LEAST_SIDE
                and not (n_in % 8 or units % 8 or panel % 8))

    def weight_row_blocks(self, parts: int, splits: int = 1) -> list[tuple[int, int]]:
        """dL/dW in one launch (no parts for a distribution to copy early)."""
        return [(0, self.n_in)]

    def _launch_sizes(self, rows: int) -> tuple:
        """(rounding x, forward, dL/dz) launch sizes, and dL/dz's row blocks a slice and slices, at
        `rows` rows: a block a slice up to MOST_SLICES, more on the many rows of a convolution's
        patches, whose bias sums would otherwise leave SumRows' lanes hundreds of slices each."""
        if rows not in self._sizes:
            eights, blocks = -(-rows * self.n_in // 8), -(-rows // DELTA_ROWS)
            columns = -(-self.units // DELTA_COLUMNS)
            per_slice = -(-blocks // MOST_SLICES)
            slices = -(-blocks // per_slice)
            self._sizes[rows] = (((-(-eights // THREADS) * THREADS,), (THREADS,)),
                                 ((-(-self.units // BLOCK) * THREADS, -(-rows // BLOCK)), (THREADS, 1)),
                                 ((columns * DELTA_COLUMNS // 2, slices * DELTA_LANES),
                                  (DELTA_COLUMNS // 2, DELTA_LANES)), np.int32(per_slice), np.int32(slices))
        return self._sizes[rows]

    def write_outputs_in_sixteen_bits(self, target: Tensor, half: str) -> bool:
        """Have the forward write y in `half` into `target` (another plan's inputs16: atoms of y's
        (capacity, units)) too, besides y in float, where it can: True if it will."""
        if half != self.half or not self.elementwise or not is_operand(target, self.capacity, self.units):
            return False
        self._forward, self.outputs16 = self._bind_forward(target), target
        return True

    def inputs_written_by(self, writer) -> None:
        """The layer below writes its output into inputs16 as well: `writer` (that layer's plan, or
        the layer, as Layer.writes_sixteen_bits returned it; its `outputs` the output in float,
        `outputs16` the 16-bit copy it writes) was given inputs16: a forward on that output rounds
        none itself."""
        self._writer = writer

    @property
    def input_writer(self):
        """What writes this plan's x in 16 bits (see inputs_written_by), or None where the forward
        rounds x itself: a writer another model has since given another reader's copy is no longer one."""
        writer = self._writer
        return writer if writer is not None and writer.outputs16 is self.inputs16 else None

    def forward(self, x: Tensor | None, rows: int, add: Tensor | None = None, inputs_rounded: bool = False) -> None:
        """outputs = f(x W + b) (+ add), over `rows` rows, from x and W rounded to 16 bits (x's
        copy written by the layer below, where inputs_written_by says so; already in inputs16
        where `inputs_rounded`, x then unused: a convolution's patches, SixteenBitConvPlan)."""
        round_inputs, forward, *_ = self._launch_sizes(rows)
        self._round_weights(*self._round_weights_sizes)
        writer = self.input_writer
        if not inputs_rounded and (writer is None or x is not writer.outputs):
            self._round_inputs(*round_inputs, x, np.int32(rows * self.n_in))
        self._forward(*forward, add, np.int32(rows), np.int32(add is not None),
                      flops=2.0 * rows * self.n_in * self.units)

    def weight_gradient(self, x: Tensor, grad: Tensor, rows: int, apply_derivative: bool, input_gradient: bool,
                        parts: int = 1, done=None) -> None:
        """dL/dz in 16 bits and dL/db from dL/dy (`grad`; dL/dz itself where not
        `apply_derivative`), then dL/dW from the x the forward rounded (x is that forward's)."""
        *_, delta, per_slice, slices = self._launch_sizes(rows)
        self._delta(*delta, grad, np.int32(rows), per_slice, np.int32(apply_derivative))
        self._sum_bias(*self._sum_bias_sizes, slices)
        self._weight_gradient(rows)

    def input_gradient(self, grad: Tensor, rows: int, apply_derivative: bool) -> Tensor:
        """input_grad = dL/dz W^T from the 16-bit dL/dz weight_gradient made."""
        if self._input_gradient is None:
            raise ValueError("SixteenBitDensePlan.input_gradient: the plan was made without input_grad")
        self._input_gradient(rows)
        return self.input_grad


class BoundProduct:
    """C = A B of 16-bit operands bound once (SixteenBitProduct's arguments), where the batch's
    rows are its `rows_are` ("m" or "k") and vary by launch: split along k, into row-major slices
    that SumSlices adds into C's panels, where C's blocks would not fill the GPU twice over (as
    SixteenBitPlan splits)."""

    def __init__(self, rt, program, rows_are: str, capacity: int, *, a, b, c, panel, **sizes):
        self.rt, self.rows_are, self.sizes = rt, rows_are, sizes
        kernel = lambda name: rt.kernel(program, name, np.float32)
        operands = {"a": a, "b": b, "a_atom_rows": np.int32(a.shape[0] // ATOM_ROWS),
                    "b_atom_rows": np.int32(b.shape[0] // ATOM_ROWS),
                    **{name: np.int32(v) for name, v in sizes.items()}}
        self._direct = kernel("SixteenBitProduct").bind((rows_are, "chunk"), c=c, panel=np.int32(panel), **operands)
        m, n, k = self._shape(capacity)
        most = product_geometry(rt, m, n, k)[0]
        if most > 1:
            slices = Tensor((most * m * n,), np.float32, rt)
            self._split = kernel("SixteenBitProduct").bind((rows_are, "chunk"), c=slices, panel=np.int32(n), **operands)
            self._sum = kernel("SumSlices").bind(("splits", "size"), slices=slices, c=c, columns=np.int32(n),
                                                 panel=np.int32(panel))
        self._geometry = {}  # rows -> (splits, chunk, launch sizes, summing sizes)

    def _shape(self, rows: int) -> tuple[int, int, int]:
        """(m, n, k) at `rows` rows."""
        sizes = {**self.sizes, self.rows_are: rows}
        return sizes["m"], sizes["n"], sizes["k"]

    def __call__(self, rows: int):
        """The product at `rows` rows; returns the last launch's event."""
        if rows not in self._geometry:
            m, n, k = self._shape(rows)
            splits, chunk, sizes, summing = product_geometry(self.rt, m, n, k)
            self._geometry[rows] = (splits, np.int32(chunk), sizes, summing, np.int32(m * n), 2.0 * m * n * k)
        splits, chunk, sizes, summing, size, flops = self._geometry[rows]
        if splits == 1:
            return self._direct(*sizes, np.int32(rows), chunk, flops=flops)
        self._split(*sizes, np.int32(rows), chunk, flops=flops)
        return self._sum(*summing, np.int32(splits), size)
