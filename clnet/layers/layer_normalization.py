"""LayerNormalization: normalises each sample over the features of one axis, in fit and predict alike."""
from __future__ import annotations

import numpy as np

from .. import initializers
from ..cl.tensor import Tensor
from ..products import HALF_TYPES
from ..products.sixteen_bit import ATOM_ROWS, is_operand
from .base import BufferedLayer
from .batch_normalization import check_axis, check_positive, split_axis


# The GPU form's weight gradient (see layer_normalization.cl): work-groups of LANES neighbouring
# features by SLICES groups, each summing a chunk of CHUNK groups, then the chunks' sum in
# work-groups of the same shape. Smaller chunks leave more partial sums to add, larger ones fewer
# work-groups to fill the device: the tiny GPT's (8192, 256) norms took least time, both launches
# together, with chunks of 64 groups, and far longer with a work-group per feature and no chunks
# (benchmarks/RESULTS.md, the norm's chunk sums in work-groups; the tiny GPT's non-product kernels).
LANES, SLICES, CHUNK = 32, 8, 64
# With WARP_SHUFFLES the forward and the input gradient take a group a warp (32 items), WARPS
# warps to a work-group.
WARPS = 8


def chunked_form(rt) -> bool:
    """Whether the norm runs its GPU form: a work-group per group for the forward and the input
    gradient, the weight gradient in chunks; else (a CPU) a work-item per group, and the weight
    gradient a work-item per eight features on a vector's lanes."""
    return rt.info.is_gpu


class LayerNormalization(BufferedLayer):
    """Keras 3's `LayerNormalization`: normalises each sample's features along `axis` to mean 0 and
    variance 1 (for every position of the other axes), then scales by gamma and shifts by beta, the
    same in `fit` and in inference. Any shape, `(batch, *shape) -> (batch, *shape)`; the input's
    mask goes on.

    - `axis=-1`: the axis normalised over, one integer counted as Keras counts (the batch is 0,
      which is refused; Keras's list of axes is not taken).
    - `epsilon=1e-3`: a positive number added to the variance.
    - `center=True`, `scale=True`: whether beta and gamma exist.
    - `beta_initializer="zeros"`, `gamma_initializer="ones"`: as `clnet.initializers.get` takes
      them.

    Weights, in Keras's order, each `(features,)`: gamma (with `scale`), then beta (with `center`).
    Keras 3's deprecated `rms_scaling` is not kept (Keras 3 points to RMSNormalization instead), nor
    are regularizers and constraints. Its input gradient adds the gradient of the input's other
    readers in the same launch (a transformer's residual stream)."""
    mask_handling = "propagate"  # (a step at a time: the input's mask goes on)

    adds_to_input_grad = True  # (see Layer)

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", name=None, input_shape=None):
        super().__init__(name, input_shape)
        self.axis = check_axis("LayerNormalization", axis)
        self.epsilon = check_positive("LayerNormalization", "epsilon", epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self._initializer_names = {"beta_initializer": beta_initializer, "gamma_initializer": gamma_initializer}
        self.initializers = {k: initializers.get(v) for k, v in self._initializer_names.items()}

    def build(self, input_shape, store, rng):
        shape = super().build(input_shape, store, rng)
        self.outer, self.features, self.inner = split_axis(self, self.axis, shape)
        f = (self.features,)
        # Keras's order: gamma, then beta.
        self.gamma = store.add(self.initializers["gamma_initializer"](f, rng)) if self.scale else None  # (features,)
        self.beta = store.add(self.initializers["beta_initializer"](f, rng)) if self.center else None   # (features,)
        self._ones = Tensor.from_numpy(np.ones(f), self.dtype, self.rt)  # gamma without scale
        self._zeros = Tensor.zeros(f, self.dtype, self.rt)               # beta without center
        self._sink = Tensor(f, self.dtype, self.rt)                      # their unused gradients
        self._sink16 = Tensor((1,), np.uint16, self.rt)                 # no 16-bit copy of y
        # On an NVIDIA GPU, in float, a warp per group (WARP_SHUFFLES in layer_normalization.cl).
        self.warp_groups = self.rt.warp_shuffles(self.dtype)
        # The weight gradient: on a GPU in chunks of the groups, then their sum; on a CPU a
        # work-item per eight features (on the lanes of a vector), each its own work-group, so
        # that the runtime spreads the few of them over the cores.
        self.chunked = chunked_form(self.rt)
        weight_gradient = (("CalcDeltaWeightsLayerNorm", "SumChunksLayerNorm") if self.chunked
                           else ("CalcDeltaWeightsLayerNormLanes",))
        # The forward and input gradient: on a GPU a work-group for a group (Runtime.row_group);
        # on a CPU one work-item per group (ROWS), in work-groups the runtime sizes: it runs a
        # work-group's items in loops split at each barrier, and the reductions' barriers cost
        # more than they share (a GPT block's (2048, 64) norm ran far faster without them,
        # forward and backward, on PoCL 3.1).
        program = self.rt.program(("products/sixteen_bit_layout.cl", "layers/layer_normalization.cl"), self.dtype,
                                  {"ROWS": int(not self.chunked)})
        self._kernels = {name: self.rt.kernel(program, name, self.dtype) for name in (  # bound in allocate
            "FeedForwardLayerNorm", "CalcHiddenGradientLayerNorm", *weight_gradient)}
        self._group = self.rt.row_group(self.features) if self.chunked else None
        return shape

    @property
    def parameters(self):
        return [p for p in (self.gamma, self.beta) if p is not None]

    def allocate(self, capacity):
        super().allocate(capacity)
        groups = capacity * self.outer * self.inner
        self.group_mean = Tensor((groups,), self.dtype, self.rt)     # (capacity * outer * inner,)
        self.group_inv_std = Tensor((groups,), self.dtype, self.rt)  # (capacity * outer * inner,)
        if self.chunked:  # the weight gradient's sums per chunk of groups: dy x^, then dy
            self._partials = Tensor((-(-groups // CHUNK), 2, self.features), self.dtype, self.rt)
        kernel = self._kernels.__getitem__
        sizes = {"features": self.features, "inner": self.inner}
        statistics = {"group_mean": self.group_mean, "group_inv_std": self.group_inv_std}
        # Each kernel's arguments named once; a launch gives those that change, in the order bound.
        forward = dict(outputs=self.outputs, gamma=self._gamma(), beta=self.beta.value if self.center else self._zeros,
                       epsilon=self.epsilon, **statistics, **sizes)
        self._bind_forward = lambda outputs16, half: kernel("FeedForwardLayerNorm").bind(
            ("inputs", "groups"), outputs16=outputs16, sixteen=half, columns16=self.outputs.shape[-1],
            atom_rows16=outputs16.shape[0] // ATOM_ROWS, **forward)
        self._forward = self._bind_forward(self._sink16, 0)
        self.outputs16 = None  # the tensor the forward writes y into in 16 bits too, if any
        self._hidden = kernel("CalcHiddenGradientLayerNorm").bind(
            ("inputs", "output_gr", "add_to", "groups", "adding"), input_gr=self.input_grad, gamma=self._gamma(),
            **statistics, **sizes)
        # gamma's and beta's gradients (their sink where a weight does not exist; see build)
        gamma_grad = self.gamma.grad if self.scale else self._sink
        beta_grad = self.beta.grad if self.center else self._sink
        given = ("inputs", "output_gr", "groups")  # x, dL/dy, how many groups (it reads their statistics too)
        if self.chunked:
            self._delta_weights = kernel("CalcDeltaWeightsLayerNorm").bind(
                given, partials=self._partials, chunk=CHUNK, **statistics, **sizes)
            self._sum_chunks = kernel("SumChunksLayerNorm").bind(
                ("chunks",), partials=self._partials, gamma_gr=gamma_grad, beta_gr=beta_grad, features=self.features)
        else:
            self._delta_weights = kernel("CalcDeltaWeightsLayerNormLanes").bind(
                given, gamma_gr=gamma_grad, beta_gr=beta_grad, **statistics, **sizes)

    def writes_sixteen_bits(self, target, half: str):
        """The forward writes y in `half` into `target` too (a 16-bit policy's Dense reading y
        alone: its products' 16-bit copy of x, y's (rows, last axis) as atoms), in the same launch."""
        columns = self.outputs.shape[-1]
        if (self.dtype != np.float32 or half not in HALF_TYPES
                or not is_operand(target, self.outputs.size // columns, columns)):
            return None
        self._forward, self.outputs16 = self._bind_forward(target, HALF_TYPES[half]), target
        return self

    def forward(self, x, rows):
        self.x = x
        groups = rows * self.outer * self.inner
        self._forward(*self._group_sizes(groups), x, groups)
        return self.outputs

    def _group_sizes(self, groups):
        """(global, local) sizes of the forward and input gradient: a warp per group, 8 to a
        work-group, or a work-group of self._group items per group; on a CPU an item per group."""
        if self.warp_groups:
            return (-(-groups // WARPS) * WARPS * 32,), (WARPS * 32,)
        if self._group is None:
            return (groups,), None
        return (groups * self._group,), (self._group,)

    def _gamma(self):
        return self.gamma.value if self.scale else self._ones

    def backward(self, grad, rows, input_grad, activation_done=False, add_to=None):
        groups = rows * self.outer * self.inner
        if self.parameters:  # (see build)
            # Nothing in the backward pass reads gamma's and beta's gradients: beside the input
            # gradient (Runtime.side_queue).
            if self.chunked:
                chunks = -(-groups // CHUNK)
                self._delta_weights((-(-self.features // LANES) * LANES, chunks * SLICES), (LANES, SLICES),
                                    self.x, grad, groups, beside=True)
                self._sum_chunks((-(-self.features // LANES) * LANES, SLICES), (LANES, SLICES), chunks, beside=True)
            else:
                self._delta_weights((-(-self.features // 8),), (1,), self.x, grad, groups, beside=True)
        if not input_grad:
            return None
        added = self.input_grad if add_to is None else add_to  # (read only when adding)
        self._hidden(*self._group_sizes(groups), self.x, grad, added, groups, int(add_to is not None))
        return self.input_grad

    def to_onnx(self, graph, inputs):
        """(x - mean) / sqrt(variance + epsilon) * gamma + beta along the layer's axis, from
        ReduceMeans (any opset; ONNX's LayerNormalization normalises all axes from one on)."""
        rank = len(self.input_shape) + 1
        axis = self.axis % rank
        shape = (self.features,) + (1,) * (rank - 1 - axis)  # broadcasts along the axis
        centred = graph.op("Sub", inputs[0], graph.reduce("ReduceMean", inputs[0], [axis], True))
        variance = graph.reduce("ReduceMean", graph.op("Mul", centred, centred), [axis], True)
        std = graph.op("Sqrt", graph.op("Add", variance, graph.constant("epsilon", np.array(self.epsilon))))
        y = graph.op("Div", centred, std)
        weights = iter(self.get_weights())  # gamma (with scale), then beta (with center)
        if self.scale:
            y = graph.op("Mul", y, graph.constant("gamma", next(weights).reshape(shape)))
        if self.center:
            y = graph.op("Add", y, graph.constant("beta", next(weights).reshape(shape)))
        return [y]

    def get_config(self):
        name = lambda init: init if isinstance(init, str) else init.__name__
        return {**super().get_config(), "axis": self.axis, "epsilon": self.epsilon, "center": self.center,
                "scale": self.scale, **{k: name(v) for k, v in self._initializer_names.items()}}
