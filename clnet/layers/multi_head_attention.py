"""MultiHeadAttention (Keras 3's arguments, call and weight layout): query, key and value
projections and the output projection are Dense products over the batch's (batch * time) rows;
between them, multi_head_attention.cl computes the masked softmax attention of every head of
the whole batch: on a CPU in one launch (two for its gradient), a work-item per 8 or 16 query
rows on the lanes of a vector (multi_head_attention_lanes.cl); on a GPU as products of each (sample,
head)'s operands in the Dense layer's local-memory tiles, the softmax and the score gradient in
the launches of the scores' products where a block of queries' keys fits in registers (two
launches, four for the gradient; else three and five, row kernels between the products), or,
where dims or lengths are not multiples of 4, a work-item per query row. Under a 16-bit
mixed-precision policy on NVIDIA's tensor cores the products run in 16 bits, the scores' row block
too (dL/dP's row block in float).
A self-attention's three projections of its one input run as one layer (JoinedDense): one
product forward, one weight and one input gradient backward.
"""
from __future__ import annotations

import math

import numpy as np

from .. import activations, initializers
from ..cl.tensor import Tensor
from .base import KerasTensor, Layer, check_call_arguments, tensors_of
from ..products import HALF_TYPES, check_tensor_core_form, product_sources, program_defines, tensor_core_form
from .dense import Dense, JoinedDense
from .merge import merge_program

ROLES = ("query", "value", "key")
PROJECTED = ("query", "key", "value")  # Keras's order of the projections' weights (and JoinedDense's parts)
# What an AttentionProduct may leave out under the causal mask (multi_head_attention.cl).
ABOVE_DIAGONAL, KEYS_UP_TO_QUERIES, QUERIES_FROM_KEYS = 1, 2, 3
KV_KEYS = 4   # key rows per work-item of the CPU form's key and value gradient (a divisor of its lanes)
# The arguments of the row, row-block and rows-form kernels that change from launch to launch, last
# in the order they are bound: the mask (none, or the batch's), whether the probabilities go
# through the dropout (in fit) and the dropout's step.
VARYING = ("mask", "dropout", "step")


# The most values of a block of scores a work-item holds in registers in the row-block kernels.
ROW_BLOCK_VALUES = 64
# The products form's tiles on a GPU: 64-square blocks, 4 x 4 outputs a work-item (so that the
# row blocks hold the tiny GPT's 4 key tiles: 64 values), 32 deep a slice. On a GPU that GPT's
# row blocks and other products ran faster 32 deep than 16 deep (the Dense tuner's first tiled
# candidate, taken before). For the other products alone, 64/8/16 tiles ran slightly faster, and
# 128-square tiles (128/8/16, 128/8/32) far slower.
PRODUCT_TILES = {"VW": 4, "TILE": 64, "WPT": 4, "TK": 32}


# The tiles the products form runs in under a 16-bit policy where the MMA form can run: its 16-bit
# products (mma_half.cl) in 64-square blocks, so that a product 64 wide (a head's key dim) fills
# them, 16 deep a slice (on an H200 the larger GPT's step ran faster with 16 than with 32 or 64:
# benchmarks/RESULTS.md, attention's products in 16 bits).
SIXTEEN_BIT_PRODUCT_TILES = {"VW": 4, "TILE": 64, "WPT": 4, "TK": 16, "MMA": 1}


def sixteen_bit_product_tiles(rt, dtype, policy) -> dict | None:
    """SIXTEEN_BIT_PRODUCT_TILES in the policy's 16 bits where a layer's mixed-precision policy
    computes in 16 bits and the MMA form can run (the operands rounded as staged, sums in float, as
    PyTorch's autocast runs attention's products in bfloat16; the softmax and the score gradients
    stay in float, dL/dP's row block too); None elsewhere."""
    half = HALF_TYPES.get(policy.compute_dtype)
    if half is None or not tensor_core_form(rt, dtype):
        return None
    return {**SIXTEEN_BIT_PRODUCT_TILES, "HALF": half}


def row_tiles(tiles: dict, tk: int) -> int:
    """How many key tiles the row-block kernels hold (multi_head_attention.cl's ROW_TILES), or 0
    where the scores go through AttentionProduct and the row kernels: keys past ROW_BLOCK_VALUES
    registers a work-item (WPT x WPT values of a key tile, in the MMA form's accumulators too)."""
    count = -(-tk // tiles["TILE"])
    return count if count * tiles["WPT"] ** 2 <= ROW_BLOCK_VALUES else 0


def operand_names(letter: str) -> tuple[str, ...]:
    """The names of an operand's arguments (MultiHeadAttention._operand) in AttentionProduct and the
    row-block kernels: A, a_first, a_sample, a_head and a_ld for "a"."""
    return (letter.upper(), *(f"{letter}_{part}" for part in ("first", "sample", "head", "ld")))


def lane_width(vector_width: int) -> int:
    """Query rows per work-item of the CPU form (multi_head_attention_lanes.cl's LANES): 16 where
    the dense products' tuner chose vectors of 16 elements on this device (AVX-512 registers of
    float32), else 8."""
    return 16 if vector_width >= 16 else 8


def lanes_form(rt) -> bool:
    """Whether the rows form runs on lanes (a CPU: 8 or 16 query rows per work-item), else a work-item
    per query row (a GPU, where its products form does not apply)."""
    return not rt.info.is_gpu


class MultiHeadAttention(Layer):
    """Keras 3's `MultiHeadAttention`: `mha(query, value, key=None, attention_mask=None,
    use_causal_mask=False)` on tensors of shape `(None, Tq, query_dim)`, `(None, Tk, value_dim)` and
    `(None, Tk, key_dim)` (the key defaults to the value) gives `(None, Tq, output_dim)`;
    `attention_mask` is another tensor of shape `(None, Tq, Tk)`, 1 (or anything > 0.5) where a
    query position may attend to a key position, 0 where not, and `use_causal_mask=True` lets
    position t attend to positions up to t. Masks the inputs carry (`Embedding(mask_zero=True)`,
    `Masking`) become part of the attention mask, as Keras's, and the output carries the query's.

    - `num_heads`, `key_dim`: positive integers; `value_dim=None`: the value's per-head width (None:
      `key_dim`).
    - `dropout=0.0`: in [0, 1), on the attention probabilities in `fit`, hashed on the device as
      Dropout's, with `seed=None` its seed.
    - `use_bias=True`; `kernel_initializer="glorot_uniform"`, `bias_initializer="zeros"`: as
      Dense's.
    - `output_shape=None`: the output's last axis, one integer (None: the query's `query_dim`).
    - `wiring=None`: which of the call's input tensors is the query, the value, the key and the
      mask; set by the layer's first call and saved in its config, not given by hand.
    - `tiles=None` (clnet's own) chooses the form: None, the device's (a GPU the products form,
      where dims and lengths are multiples of 4); a tiled candidate of the Dense tuner's, the
      products form with those local-memory tiles (where aligned), as `Dense(tiles=...)` fixes
      Dense's; False, the rows form. The warpgroup tensor-core form (WGMMA) is refused.

    Weights, in Keras's order and layout: for the query, key and value each a kernel `(features,
    num_heads, dim)` and a bias `(num_heads, dim)`, then the output kernel `(num_heads, value_dim,
    output_dim)` and bias `(output_dim,)`. Only sequences `(None, time, features)` are taken
    (Keras's `attention_axes`, `return_attention_scores`, regularizers and constraints are not).

    The graph engine gives a layer a list of distinct input tensors; which of them is the query, the
    value, the key and the mask, and whether the mask is causal, is fixed by the layer's first call
    (`wiring`). Self-attention, `mha(x, x)`, reads one tensor, projects it as one product where the
    three projections' sizes allow, and sums the three projections' input gradients into one."""
    # Masks on the query, value and key (Embedding(mask_zero=True), Masking) become part of the
    # attention mask, in __call__ (as Keras's _compute_attention_mask); the output carries the
    # query's.
    mask_handling = "ignore"

    multi_input = True

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True, output_shape=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", seed=None, name=None, wiring=None,
                 tiles=None):
        super().__init__(name)
        self.num_heads = _positive("num_heads", num_heads)
        self.key_dim = _positive("key_dim", key_dim)
        self.value_dim = self.key_dim if value_dim is None else _positive("value_dim", value_dim)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float, np.floating)) or not 0 <= dropout < 1:
            raise ValueError(f"MultiHeadAttention dropout must be a number in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)
        if output_shape is not None:
            dims = output_shape if isinstance(output_shape, (tuple, list)) else (output_shape,)
            if len(dims) != 1:
                raise ValueError(f"MultiHeadAttention output_shape must be one integer (the output's last "
                                 f"axis), got {output_shape!r}")
            output_shape = _positive("output_shape", dims[0])
        self.output_dim = output_shape  # None: the query's last axis
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self._initializer_names = (kernel_initializer, bias_initializer)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"MultiHeadAttention seed must be a non-negative integer or None, got {seed!r}")
        self.seed = None if seed is None else int(seed)
        self.wiring = None if wiring is None else dict(wiring)
        if tiles is not None and tiles is not False and not (isinstance(tiles, dict) and "TILE" in tiles):
            raise ValueError(f"MultiHeadAttention tiles must be None, False or local-memory tiles (a dict with "
                             f"TILE), got {tiles!r}")
        if isinstance(tiles, dict) and tiles.get("WGMMA"):
            raise ValueError(f"MultiHeadAttention {self.name!r}: the warpgroup tensor-core form (WGMMA) is Dense's "
                             f"alone (it takes its B operand contiguous along the depth, which the attention's "
                             f"products are not all); the MMA form's tiles are taken; got {tiles!r}")
        self.fixed_tiles = tiles

    # -- the call --------------------------------------------------------------------------
    def __call__(self, query, value=None, key=None, attention_mask=None, use_causal_mask=False, training=None):
        check_call_arguments(self, (), training=training)
        if value is None and isinstance(query, (list, tuple)):  # the engine's form: this layer's inputs, wired
            if self.wiring is None:
                raise ValueError(f"{self.describe()} is called as mha(query, value, key=None, attention_mask=None, "
                                 "use_causal_mask=False); a list of inputs needs the wiring of an earlier call")
            tensors = list(query)
            if self.wiring.get("padding"):  # its attention mask made again from the inputs' masks
                named = [tensors_of(tensors[self.wiring[role]]) for role in ROLES]
                made = self._with_padding_masks(*named, None)
                if made is None:
                    raise ValueError(f"{self.describe()} was saved reading its inputs' padding masks, but its "
                                     "inputs carry none (make them with Embedding(mask_zero=True) or Masking)")
                tensors.append(_symbolic(self, "attention_mask", made))
                output = super().__call__(tensors)
                output.call.derived_inputs = frozenset({len(tensors) - 1})
                output._keras_mask = getattr(named[0], "_keras_mask", None)
                return output
            return super().__call__(tensors)
        if value is None:
            raise TypeError(f"{self.describe()} needs a query and a value: mha(query, value), got only a query")
        named = {"query": query, "value": value, "key": value if key is None else key}
        given = attention_mask
        attention_mask = self._with_padding_masks(*(tensors_of(named[role]) for role in ROLES), attention_mask)
        tensors, wiring = [], {}
        for role in ROLES:
            tensor = _symbolic(self, role, named[role])
            wiring[role] = next((i for i, t in enumerate(tensors) if t is tensor), len(tensors))
            if wiring[role] == len(tensors):
                tensors.append(tensor)
        wiring["mask"] = None
        if attention_mask is not None:
            wiring["mask"] = len(tensors)
            tensors.append(_symbolic(self, "attention_mask", attention_mask))
        wiring["causal"] = bool(use_causal_mask)
        if given is None and attention_mask is not None:  # made from the padding masks alone
            wiring["padding"] = True
        if self.wiring is not None and wiring != self.wiring:
            raise ValueError(f"{self.describe()} was first called with inputs wired as {self.wiring}; a shared "
                             f"attention layer must be called the same way each time, got {wiring}")
        before, self.wiring = self.wiring, wiring
        try:
            output = super().__call__(tensors)
        except Exception:
            self.wiring = before
            raise
        if wiring.get("padding"):
            output.call.derived_inputs = frozenset({wiring["mask"]})
        output._keras_mask = getattr(tensors_of(query), "_keras_mask", None)
        return output

    def _with_padding_masks(self, query, value, key, attention_mask):
        """Keras's attention mask: 1 where a query step that holds data may attend a key step that
        does (the masks that query, value and key carry), times `attention_mask` if given; the
        given one (or None) where none carries a mask."""
        masks = [getattr(t, "_keras_mask", None) for t in (query, value, key)]
        if all(m is None for m in masks) or not all(isinstance(t, KerasTensor) for t in (query, value, key)):
            return attention_mask
        from .. import ops  # (clnet.ops imports the layers)
        tq, tk = query.sample_shape[0], value.sample_shape[0]
        query_mask, *key_masks = masks
        made = ops.expand_dims(query_mask, -1) if query_mask is not None else ops.ones((tq, 1))  # (batch, Tq, 1)
        for mask in key_masks:
            if mask is not None:
                made = ops.multiply(made, ops.expand_dims(mask, 1))  # (batch, 1, Tk): (batch, Tq, Tk)
        if made.sample_shape != (tq, tk):
            made = ops.multiply(made, ops.ones((tq, tk)))
        return made if attention_mask is None else ops.multiply(made, attention_mask)

    def compute_output_shape(self, input_shapes, tensors=None):
        shapes = [tuple(s) for s in input_shapes]
        wired = {role: shapes[self.wiring[role]] for role in ROLES}
        used = [self.wiring[role] for role in ROLES] + ([self.wiring["mask"]] if self.wiring["mask"] is not None else [])
        if len(shapes) != 1 + max(used):
            raise ValueError(f"{self.describe()} is wired for {self.wiring}, got {len(shapes)} inputs")
        for role, shape in wired.items():
            if len(shape) != 2:
                raise ValueError(f"{self.describe()} expects a {role} of shape (None, time, features), got "
                                 f"{(None, *shape)}")
        if wired["key"][0] != wired["value"][0]:
            raise ValueError(f"{self.describe()} needs key and value of one length, got key {(None, *wired['key'])} "
                             f"and value {(None, *wired['value'])}")
        tq, tk = wired["query"][0], wired["value"][0]
        if self.wiring["mask"] is not None and shapes[self.wiring["mask"]] != (tq, tk):
            raise ValueError(f"{self.describe()} expects an attention_mask of shape {(None, tq, tk)} (batch, "
                             f"query length, key length), got {(None, *shapes[self.wiring['mask']])}")
        return (tq, self.output_dim or wired["query"][1])

    # -- lifecycle -------------------------------------------------------------------------
    def build(self, input_shapes, store, rng):
        self.input_shapes = [tuple(s) for s in input_shapes]
        self.input_shape = self.input_shapes[0]
        self.rt, self.dtype = store.rt, store.dtype
        self.output_shape = self.compute_output_shape(self.input_shapes)
        (self.tq, query_dim), (self.tk, _) = (self.input_shapes[self.wiring[r]] for r in ("query", "value"))
        heads, out = self.num_heads, self.output_shape[1]
        # The products form reads and writes each (sample, head)'s operands four elements at a
        # time from offsets that are multiples of its dims and lengths.
        aligned = all(n % 4 == 0 for n in (self.key_dim, self.value_dim, self.tq, self.tk))
        check_tensor_core_form(self.rt, self.dtype, self.fixed_tiles, f"MultiHeadAttention {self.name!r}")
        self.tiles, self.row_tiles = None, 0
        self.product_tiles = None  # the tiles the products form's kernels run in
        if aligned and self.fixed_tiles is not False and (self.fixed_tiles or self.rt.info.is_gpu):
            self.tiles = self.fixed_tiles or PRODUCT_TILES
        self.lanes = not self.tiles and lanes_form(self.rt)
        # Keras's kernels are (features, heads, dim) and (heads, value_dim, output): the Dense
        # products' (features, heads * dim) and (heads * value_dim, output), drawn with those fans.
        # Self-attention projects its one input once, as a JoinedDense of three parts (measurably
        # faster in the tiny GPT's step on a GPU; benchmarks/RESULTS.md, joined projections), whose
        # rows the attention reads in place: each part from its first column, the rows QK_ROW and
        # V_ROW apart (multi_head_attention.cl; AttentionProduct takes them as arguments).
        features = self.input_shapes[self.wiring["query"]][1]
        self.joined = (self.wiring["query"] == self.wiring["key"] == self.wiring["value"]
                       and self.key_dim == self.value_dim
                       and JoinedDense.joinable(self.rt, self.dtype, features, heads * self.key_dim, len(PROJECTED)))
        rows = {"QK_ROW": heads * self.key_dim, "V_ROW": heads * self.value_dim, "Q_FIRST": 0, "K_FIRST": 0,
                "V_FIRST": 0}
        if self.joined:
            width = heads * self.key_dim
            rows = {"QK_ROW": len(PROJECTED) * width, "V_ROW": len(PROJECTED) * width, "Q_FIRST": 0, "K_FIRST": width,
                    "V_FIRST": 2 * width}
        dims = {"KEY_DIM": self.key_dim, "VALUE_DIM": self.value_dim, **rows}
        dense = lambda units, part: Dense(units, None, self.use_bias, self.kernel_initializer, self.bias_initializer,
                                          name=f"{self.name}/{part}", dtype=self.dtype_policy)
        if self.joined:
            self.joined_projection = JoinedDense(len(PROJECTED), heads * self.key_dim, self.use_bias,
                                                 self.kernel_initializer, self.bias_initializer,
                                                 name=f"{self.name}/query_key_value", dtype=self.dtype_policy)
            self.joined_projection.build((features,), store, rng)
            kernels, biases = self.joined_projection.part_kernels, self.joined_projection.part_biases
            self.projections = {}
        else:
            self.projections = {role: dense(heads * self._dim(role), role) for role in PROJECTED}
            for role in PROJECTED:
                self.projections[role].build((self.input_shapes[self.wiring[role]][1],), store, rng)
            kernels = [self.projections[role].kernel for role in PROJECTED]
            biases = [self.projections[role].bias for role in PROJECTED] if self.use_bias else []
        for kernel, role in zip(kernels, PROJECTED):
            kernel.keras_index = kernel.keras_index.reshape(kernel.keras_index.shape[0], heads, self._dim(role))
        for bias, role in zip(biases, PROJECTED):
            bias.keras_index = bias.keras_index.reshape(heads, self._dim(role))
        self.output_dense = dense(out, "attention_output")
        self.output_dense.build((heads * self.value_dim,), store, rng)
        self.output_dense.kernel.keras_index = self.output_dense.kernel.keras_index.reshape(heads, self.value_dim, out)
        self.scale = 1.0 / math.sqrt(self.key_dim)
        # The dropout hash's 32-bit seed, as the Dropout layer draws it.
        self.kernel_seed = (self.seed if self.seed is not None else int(rng.integers(2**31))) % 2**31
        if self.tiles:
            linear = activations.get("linear")
            programs = lambda tiles, defines: self.rt.program(
                (linear.source, "activations/vector.cl", *product_sources(tiles), "layers/dropout.cl",
                 "layers/multi_head_attention.cl"), self.dtype, {**program_defines(linear, False, tiles), **dims, **defines})
            half = None if self.fixed_tiles else sixteen_bit_product_tiles(self.rt, self.dtype, self.dtype_policy)
            # Under a 16-bit policy the same launches, from a program of the MMA form's 16-bit tiles.
            self.product_tiles = half or self.tiles
            self.row_tiles = row_tiles(self.product_tiles, self.tk)
            row_blocks = {"ROW_TILES": self.row_tiles} if self.row_tiles else {}
            program = programs(self.product_tiles, row_blocks)
            names = ("AttentionProduct", *(("AttentionScoresSoftmax", "AttentionScoreGradient") if self.row_tiles
                                           else ("AttentionSoftmax", "CalcScoreGradientAttention")))
            self._kernels = {name: self.rt.kernel(program, name, self.dtype) for name in names}  # bound in allocate
            if half and self.row_tiles:
                # dL/dP's row block in the CUDA cores' tiles (the same blocks: PRODUCT_TILES): in the
                # MMA form's accumulators a warp reads the probabilities as 8 rows of 32 bytes where
                # the CUDA cores' tiles read 2 of 256, and on an H200 the larger GPT's launch took
                # longer than the tensor cores saved (benchmarks/RESULTS.md, attention's scores on
                # the tensor cores in their row block); the scores' row block gained.
                self._kernels["AttentionScoreGradient"] = self.rt.kernel(programs(self.tiles, row_blocks),
                                                                         "AttentionScoreGradient", self.dtype)
        else:
            sources = ("layers/dropout.cl", "layers/multi_head_attention.cl")
            if self.lanes:
                self.lane_width = lane_width(self.output_dense.layout[0])
                sources = sources + ("layers/multi_head_attention_lanes.cl",)
                dims = {**dims, "KV_KEYS": KV_KEYS, "LANES": self.lane_width}
            program = self.rt.program(sources, self.dtype, dims)
            form = "Lanes" if self.lanes else ""
            names = ("FeedForwardAttention", "CalcHiddenGradientAttention", "CalcHiddenGradientAttentionKeyValue")
            # (bound in allocate; by the name without the form's)
            self._kernels = {name: self.rt.kernel(program, name + form, self.dtype) for name in names}
            # Work-items along the query (key) positions: one per row, or per block of rows.
            self._query_items = -(-self.tq // self.lane_width) if self.lanes else self.tq
            self._key_items = -(-self.tk // KV_KEYS) if self.lanes else self.tk
        self._kernels["Sum"] = self.rt.kernel(merge_program(self.rt, self.dtype), "Sum", self.dtype)
        self._noise = Tensor.zeros((1,), np.int32, self.rt)  # dropout.cl's geometry: none (rank 0)
        self._no_mask = Tensor.zeros((1,), self.dtype, self.rt)
        self.built = True
        return self.output_shape

    @property
    def parameters(self):
        if not self.built:
            return []
        # Keras's order: query, key, value, output (each kernel, then bias).
        return [p for layer in self._projection_layers() for p in layer.parameters] + self.output_dense.parameters

    def _dim(self, role: str) -> int:
        """A projection's per-head width: key_dim for the query and the key, value_dim for the value."""
        return self.value_dim if role == "value" else self.key_dim

    def _length(self, role: str) -> int:
        """The length of the sequence a projection reads: Tq for the query, Tk for the key and value."""
        return self.tq if role == "query" else self.tk

    def _projection_layers(self) -> list[Dense]:
        return [self.joined_projection] if self.joined else [self.projections[role] for role in PROJECTED]

    @property
    def reads_transposed(self):
        """Whether a projection's weight gradient reads its input transposed (see _view)."""
        return any(layer.reads_transposed for layer in self._projection_layers())

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        heads = self.num_heads
        if self.joined:
            self.joined_projection.allocate(capacity * self.tq)
        for role, layer in self.projections.items():
            layer.allocate(capacity * self._length(role))
        self.output_dense.allocate(capacity * self.tq)
        # The softmax of the scores and dL/d(scores): (batch, heads, Tq, Tk), in the CPU form
        # lane-major, (batch, heads, Tk, Tq rounded up to the lane width).
        scores = (self.tq, self.tk) if not self.lanes else (self.tk, -(-self.tq // self.lane_width) * self.lane_width)
        self.probabilities = Tensor((capacity, heads, *scores), dt, rt)
        self.score_grad = Tensor((capacity, heads, *scores), dt, rt)
        self.context = Tensor((capacity * self.tq, heads * self.value_dim), dt, rt)  # (batch * Tq, heads * value_dim)
        if self.output_dense.reads_transposed:  # for its weight gradient
            self.context.transposed = Tensor((heads * self.value_dim, capacity * self.tq), dt, rt)
        # What the context sums: the probabilities through the dropout (the products form, in fit).
        self.dropped = Tensor((capacity, heads, self.tq, self.tk), dt, rt) if self.tiles and self.dropout else None
        # Each projection and its gradient, dL/d(projection): (tensor, first column, row length), a
        # tensor of its own or a part of the joined projection's rows.
        self._projected, self._projected_grad = {}, {}
        if self.joined:
            width = heads * self.key_dim
            outputs = self.joined_projection.outputs                                         # (batch * T, 3 * width)
            self.joined_grad = Tensor((capacity * self.tq, len(PROJECTED) * width), dt, rt)  # dL/d(outputs)
            for part, role in enumerate(PROJECTED):
                self._projected[role] = outputs, part * width, len(PROJECTED) * width
                self._projected_grad[role] = self.joined_grad, part * width, len(PROJECTED) * width
        else:
            for role in PROJECTED:
                row = heads * self._dim(role)
                self._projected[role] = self.projections[role].outputs, 0, row
                self._projected_grad[role] = Tensor((capacity * self._length(role), row), dt, rt), 0, row
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt, self.output_dense.outputs.buffer)
        self.input_grads = [Tensor((capacity, *s), dt, rt) for s in self.input_shapes]  # sums over projections
        # The projections' dL/dx, (capacity * time, features), as the engine reads a gradient:
        # (capacity, time, features).
        as_read = lambda role, layer: Tensor((capacity, *self.input_shapes[self.wiring[role]]), dt, rt,
                                             layer.input_grad.buffer)
        self._projection_grads = ({"query": as_read("query", self.joined_projection)} if self.joined else
                                  {role: as_read(role, layer) for role, layer in self.projections.items()})
        self._views = {}
        self._bind()

    def _varying(self) -> tuple:
        """The values of VARYING for a launch."""
        return self._mask, int(self._dropping), self.step

    def _bind(self) -> None:
        """Each kernel's arguments named once; a launch gives those that change, in the order bound."""
        kernel = self._kernels.__getitem__
        # What stays in every kernel but AttentionProduct: the dropout's geometry (noise: none),
        # the lengths and heads, whether a mask is given and whether causal, the dropout's seed and keep.
        fixed = {"noise": self._noise, "tq": self.tq, "tk": self.tk, "heads": self.num_heads,
                 "use_mask": int(self.wiring["mask"] is not None), "causal": int(self.wiring["causal"]),
                 "seed": self.kernel_seed, "keep": 1.0 - self.dropout}
        # A tensor read by several projections: dL/dx, the sum of theirs (which sums vary).
        self._sum = kernel("Sum").bind(("a", "b", "out", "total"))
        if self.tiles:
            # The products' operands and sizes all vary (see _products).
            self._product = kernel("AttentionProduct").bind(
                (*operand_names("a"), "a_along_k", *operand_names("b"), "b_along_k", *operand_names("c"), "Ct",
                 "t_sample", "t_head", "t_ld", "M", "N", "K", "scale", "causal"), heads=self.num_heads)
            dropped = self.probabilities if self.dropped is None else self.dropped  # written only when dropping
            operand = lambda letter, place: dict(zip(operand_names(letter), place))  # by name
            query, key, value = self._projection_operands(self._projected)
            if self.row_tiles:
                self._scores_softmax = kernel("AttentionScoresSoftmax").bind(
                    VARYING, **operand("a", query), **operand("b", key), probabilities=self.probabilities,
                    dropped=dropped, depth=self.key_dim, scale=self.scale, **fixed)
                # (A: dL/dcontext, the incoming gradient)
                self._score_grad_product = kernel("AttentionScoreGradient").bind(
                    (*operand_names("a"), *VARYING), **operand("b", value),
                    probabilities=self.probabilities, score_gr=self.score_grad, depth=self.value_dim, **fixed)
            else:
                self._softmax = kernel("AttentionSoftmax").bind(
                    VARYING, scores=self.score_grad, probabilities=self.probabilities, dropped=dropped, **fixed)
                self._score_grad = kernel("CalcScoreGradientAttention").bind(
                    VARYING, probabilities=self.probabilities, score_gr=self.score_grad, **fixed)
            return
        query, key, value = (self._projected[role][0] for role in PROJECTED)
        query_grad, key_grad, value_grad = (self._projected_grad[role][0] for role in PROJECTED)
        context_t, context_ld = self.context.transposed_arguments()  # ld 0: no context^T
        self._forward = kernel("FeedForwardAttention").bind(
            VARYING, query=query, key=key, value=value, probabilities=self.probabilities, context=self.context,
            context_t=context_t, ld=context_ld, scale=self.scale, **fixed)
        self._hidden = kernel("CalcHiddenGradientAttention").bind(
            ("context_gr", *VARYING), key=key, value=value, probabilities=self.probabilities,
            score_gr=self.score_grad, query_gr=query_grad, scale=self.scale, **fixed)
        self._hidden_key_value = kernel("CalcHiddenGradientAttentionKeyValue").bind(  # (it reads no mask)
            ("context_gr", "dropout", "step"), query=query, probabilities=self.probabilities, score_gr=self.score_grad,
            key_gr=key_grad, value_gr=value_grad, scale=self.scale, **fixed)

    def _view(self, index: int, x: Tensor) -> Tensor:
        """Input `index` as the projections read it: x itself if its producer wrote x^T, else a
        tensor on x's buffer whose x^T this layer writes once per backward pass for all the
        projections reading it (instead of one transpose each)."""
        rows, features = self.capacity * self.input_shapes[index][0], self.input_shapes[index][1]
        given = getattr(x, "transposed", None)
        if not self.reads_transposed or given is not None and given.shape == (features, rows):
            return x  # (a batch's x^T is (time * features, capacity): not that)
        view = self._views.get(index)
        if view is None or view.buffer is not x.buffer:
            view = Tensor((rows, features), self.dtype, self.rt, x.buffer)         # x as (batch * time, features)
            view.transposed = Tensor((features, rows), self.dtype, self.rt)        # its x^T
            view.own_transpose = True
            self._views[index] = view
        return view

    @property
    def _dropping(self) -> bool:
        """Whether the attention probabilities go through the dropout: as Keras's, only in training
        (fit) and with a rate; evaluate and predict use the probabilities as they are."""
        return self.training and self.dropout > 0

    @property
    def _summed(self) -> Tensor:
        """What the products form's context sums, forward (P V) and backward (P^T dL/dcontext):
        the dropped probabilities while dropping, else the probabilities themselves."""
        return self.dropped if self._dropping else self.probabilities

    def take_sixteen_bit_inputs(self, writer) -> None:
        """A self-attention's one projection (JoinedDense) may take its input in 16 bits from the
        layer below (see Layer.take_sixteen_bit_inputs)."""
        if self.joined:
            self.joined_projection.take_sixteen_bit_inputs(writer)

    @property
    def adds_to_output(self):
        """Its output Dense adds a residual in its launch (see Layer.adds_to_output)."""
        return self.output_dense.adds_to_output

    def forward(self, xs, rows, add=None):
        """The attention's output, plus `add` where the model folds a residual sum into it."""
        self.xs = [self._view(i, x) for i, x in enumerate(xs)]
        if self.joined:
            self.joined_projection.forward(self.xs[self.wiring["query"]], rows * self.tq)
        for role, layer in self.projections.items():
            layer.forward(self.xs[self.wiring[role]], rows * self._length(role))
        self._mask = self._no_mask if self.wiring["mask"] is None else xs[self.wiring["mask"]]
        if self.tiles:
            self._forward_products(rows)
            self.output_dense.forward(self.context, rows * self.tq, add)
            return self.outputs
        self._forward((self._query_items, self.num_heads, rows), None, *self._varying())
        self.output_dense.forward(self.context, rows * self.tq, add)
        return self.outputs

    # -- the products form ---------------------------------------------------------------------
    def _operand(self, place, dim: int, length: int):
        """Rows of heads x dim elements, `place` = (tensor, first column, row length), as
        AttentionProduct's operand: the buffer, the first column, its (sample, head) offsets and its
        row length."""
        tensor, first, ld = place
        return tensor, first, length * ld, dim, ld

    def _projection_operands(self, places: dict) -> tuple:
        """The query's, key's and value's places (projections or their gradients) as operands."""
        return tuple(self._operand(places[role], self._dim(role), self._length(role)) for role in PROJECTED)

    def _square(self, tensor: Tensor):
        """A (batch, heads, Tq, Tk) tensor as AttentionProduct's operand or result."""
        return tensor, 0, self.num_heads * self.tq * self.tk, self.tq * self.tk, self.tk

    def _products(self, rows, a, a_along_k, b, b_along_k, c, m, n, k, scale=1.0, transposed=(None, 0, 0, 0),
                  causal=0, beside=False):
        """c (m x n per sample and head) = scale a b, through AttentionProduct; a and b as
        (tensor, first column, sample offset, head offset, row length), b given as b^T (n x k).
        `causal`: what the product may leave out under the causal mask alone (multi_head_attention.cl);
        `beside`: on the runtime's side queue (Runtime.side_queue)."""
        causal = causal if self.wiring["causal"] and self.wiring["mask"] is None else 0
        tile, side = self.product_tiles["TILE"], self.product_tiles["TILE"] // self.product_tiles["WPT"]
        global_size = (-(-n // tile) * side, -(-m // tile) * side, rows * self.num_heads)
        self._product(global_size, (side, side, 1), *a, a_along_k, *b, b_along_k, *c, *transposed,
                      m, n, k, float(scale), causal, flops=2.0 * rows * self.num_heads * m * n * k, beside=beside)

    def _rows(self, launch, rows):
        """A row kernel over the (batch, heads, Tq) rows of Tk scores, a work-group each
        (Runtime.row_group), its tensors bound (see _bind)."""
        group = self.rt.row_group(self.tk)
        launch((rows * self.num_heads * self.tq * group,), (group,), *self._varying())

    def _row_blocks(self, launch, rows, depth, *a):
        """A row-block kernel (AttentionScoresSoftmax, AttentionScoreGradient): the product of its
        operands a and b (as _products takes them, both along k; a given here where it varies) for
        TILE query rows a work-group, then the rows' work, over the tensors bound (see _bind);
        `depth` (bound in the kernel) counts its flops."""
        tile, side = self.product_tiles["TILE"], self.product_tiles["TILE"] // self.product_tiles["WPT"]
        launch((side, -(-self.tq // tile) * side, rows * self.num_heads), (side, side, 1), *a, *self._varying(),
               flops=2.0 * rows * self.num_heads * self.tq * self.tk * depth)

    def _forward_products(self, rows):
        tq, tk, kd, vd = self.tq, self.tk, self.key_dim, self.value_dim
        query, key, value = self._projection_operands(self._projected)
        if self.row_tiles:
            self._row_blocks(self._scores_softmax, rows, kd)
        else:
            scores = self._square(self.score_grad)  # (batch, heads, Tq, Tk), until the backward pass
            self._products(rows, query, 1, key, 1, scores, tq, tk, kd, self.scale, causal=ABOVE_DIAGONAL)
            self._rows(self._softmax, rows)
        ld = self.capacity * tq
        context = self.context, 0, self.context.shape[1]
        transposed = (None, 0, 0, 0) if self.context.transposed is None else (self.context.transposed, tq, vd * ld, ld)
        self._products(rows, self._square(self._summed), 1, value, 0, self._operand(context, vd, tq),
                       tq, vd, tk, transposed=transposed, causal=KEYS_UP_TO_QUERIES)

    def _backward_products(self, context_grad, rows):
        tq, tk, kd, vd = self.tq, self.tk, self.key_dim, self.value_dim
        query, key, value = self._projection_operands(self._projected)
        query_grad, key_grad, value_grad = self._projection_operands(self._projected_grad)
        grad = self._operand((context_grad, 0, context_grad.shape[1]), vd, tq)
        # dL/dV = P^T dL/dcontext needs neither the scores' gradient nor dL/dQ and dL/dK, and dL/dK
        # not dL/dQ: beside them (Runtime.side_queue), until backward() joins the queues before the
        # projections. On a GPU the tiny GPT's step is measurably shorter with dL/dV beside
        # (benchmarks/RESULTS.md, gradient sums beside the backward pass).
        self._products(rows, self._square(self._summed), 0, grad, 0, value_grad, tk, vd, tq, causal=QUERIES_FROM_KEYS,
                       beside=True)
        scores = self._square(self.score_grad)
        # dL/d(dropped p) = dL/dcontext V^T, then dL/ds
        if self.row_tiles:
            self._row_blocks(self._score_grad_product, rows, vd, *grad)
        else:
            self._products(rows, grad, 1, value, 1, scores, tq, tk, vd, causal=ABOVE_DIAGONAL)
            self._rows(self._score_grad, rows)
        self._products(rows, scores, 0, query, 0, key_grad, tk, kd, tq, self.scale, causal=QUERIES_FROM_KEYS,
                       beside=True)
        self._products(rows, scores, 1, key, 0, query_grad, tq, kd, tk, self.scale, causal=KEYS_UP_TO_QUERIES)

    def backward(self, grad, rows, input_grads):
        context_grad = self.output_dense.backward(grad, rows * self.tq, True)
        if self.tiles:
            self._backward_products(context_grad, rows)
            self.rt.join_side()  # dL/dV, for the projections
        else:
            self._hidden((self._query_items, self.num_heads, rows), None, context_grad, *self._varying())
            self._hidden_key_value((self._key_items, self.num_heads, rows), None, context_grad, int(self._dropping),
                                   self.step)
        for index, x in enumerate(self.xs):  # the inputs' x^T for the projections' weight gradients
            if getattr(x, "own_transpose", False):
                features = self.input_shapes[index][1]
                reader = next(layer for layer in self._projection_layers() if layer.reads_transposed)
                reader.transpose(x, x.transposed, features, rows * self.input_shapes[index][0])
        results = [None] * len(self.xs)
        if self.joined:  # one input, one projection: its dL/dx is already the sum of the three parts'
            index = self.wiring["query"]
            self.joined_projection.backward(self.joined_grad, rows * self.tq, input_grads[index])
            results[index] = self._projection_grads["query"] if input_grads[index] else None
        for role, layer in self.projections.items():
            index = self.wiring[role]
            layer.backward(self._projected_grad[role][0], rows * self._length(role), input_grads[index])
            if not input_grads[index]:
                continue
            grad_x = self._projection_grads[role]
            if results[index] is None:
                results[index] = grad_x
            else:  # a tensor read by several projections: dL/dx is the sum of theirs
                total = rows * int(np.prod(self.input_shapes[index]))
                self._sum(*self.rt.four_per_item(total), results[index], grad_x, self.input_grads[index], total)
                results[index] = self.input_grads[index]
        if self.wiring["mask"] is not None and input_grads[self.wiring["mask"]]:
            results[self.wiring["mask"]] = self._mask_grad()  # the loss does not depend on the mask
        return results

    def _mask_grad(self) -> Tensor:
        grad = self.input_grads[self.wiring["mask"]]
        grad.fill(0)
        return grad

    # -- weights, export, config ---------------------------------------------------------------
    def to_onnx(self, graph, inputs):
        """MatMul (+ Add) projections, Reshape and Transpose to (batch, heads, time, dim), a
        MatMul of the scaled query and the key, the causal mask as an additive initializer (and
        an explicit mask as Where), Softmax, a MatMul with the value, back to (batch, Tq, heads *
        value_dim) and the output projection."""
        graph.require_opset(13, "Softmax normalising along the last axis alone")
        weights = iter(self.get_weights())
        heads = self.num_heads

        def project(x, dim):
            kernel = next(weights)
            y = graph.op("MatMul", x, graph.constant("kernel", kernel.reshape(kernel.shape[0], -1)))
            if self.use_bias:
                y = graph.op("Add", y, graph.constant("bias", next(weights).reshape(-1)))
            return graph.op("Reshape", y, graph.constant("shape", [0, 0, heads, dim]))  # (batch, T, heads, dim)

        query = project(inputs[self.wiring["query"]], self.key_dim)
        key = project(inputs[self.wiring["key"]], self.key_dim)
        value = project(inputs[self.wiring["value"]], self.value_dim)
        query = graph.op("Mul", graph.op("Transpose", query, perm=[0, 2, 1, 3]),
                         graph.constant("scale", np.array(self.scale)))                   # (batch, heads, Tq, key_dim)
        scores = graph.op("MatMul", query, graph.op("Transpose", key, perm=[0, 2, 3, 1]))  # (batch, heads, Tq, Tk)
        if self.wiring["causal"]:
            above = np.triu(np.ones((self.tq, self.tk)), 1) * -1e9
            scores = graph.op("Add", scores, graph.constant("causal_mask", above))
        if self.wiring["mask"] is not None:
            mask = graph.op("Reshape", inputs[self.wiring["mask"]],
                            graph.constant("mask_shape", [0, 1, self.tq, self.tk]))       # (batch, 1, Tq, Tk)
            kept = graph.op("Greater", mask, graph.constant("half", np.array(0.5)))
            scores = graph.op("Where", kept, scores, graph.constant("masked", np.array(-1e9)))
        probabilities = graph.op("Softmax", scores, axis=-1)
        context = graph.op("MatMul", probabilities, graph.op("Transpose", value, perm=[0, 2, 1, 3]))
        context = graph.op("Reshape", graph.op("Transpose", context, perm=[0, 2, 1, 3]),
                           graph.constant("context_shape", [0, 0, heads * self.value_dim]))  # (batch, Tq, heads * v)
        kernel = next(weights)
        y = graph.op("MatMul", context, graph.constant("kernel", kernel.reshape(-1, kernel.shape[-1])))
        if self.use_bias:
            y = graph.op("Add", y, graph.constant("bias", next(weights)))
        return [y]

    def get_config(self):
        name = lambda init: init if isinstance(init, str) else init.__name__
        kernel_init, bias_init = self._initializer_names
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "dropout": self.dropout, "use_bias": self.use_bias,
                "output_shape": self.output_dim, "kernel_initializer": name(kernel_init),
                "bias_initializer": name(bias_init), "seed": self.seed, "wiring": self.wiring}


def _positive(argument: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"MultiHeadAttention {argument} must be a positive integer, got {value!r}")
    return int(value)


def _symbolic(layer: Layer, role: str, tensor) -> KerasTensor:
    if isinstance(tensor, Layer) and isinstance(getattr(tensor, "output", None), KerasTensor):
        return tensor.output  # an Input
    if not isinstance(tensor, KerasTensor):
        raise TypeError(f"{layer.describe()} was called with {role} = {type(tensor).__name__}; expected the "
                        "output of Input(shape) or of another layer call")
    return tensor
