"""MultiHeadAttention (Keras 3's arguments, call and weight layout): query, key and value
projections and the output projection are Dense products over the batch's (batch * time) rows;
between them, multi_head_attention.cl computes the masked softmax attention of every head of
the whole batch in one launch (two for its gradient)."""
from __future__ import annotations

import math

import numpy as np

from .. import initializers
from ..cl.tensor import Tensor
from .base import KerasTensor, Layer
from .dense import Dense
from .merge import merge_program

ROLES = ("query", "value", "key")


class MultiHeadAttention(Layer):
    """`mha(query, value, key=None, attention_mask=None, use_causal_mask=False)` on tensors of
    shape (None, Tq, query_dim), (None, Tk, value_dim) and (None, Tk, key_dim) gives
    (None, Tq, output_dim); `attention_mask` is another tensor of shape (None, Tq, Tk), 1 (or
    anything > 0.5) where a query position may attend to a key position, 0 where not.

    The graph engine gives a layer a list of distinct input tensors; which of them is the query,
    the value, the key and the mask, and whether the mask is causal, is fixed by the layer's
    first call (`wiring`, saved in its config). Self-attention, `mha(x, x)`, reads one tensor
    and sums the three projections' input gradients into one."""
    multi_input = True
    reads_transposed = True  # the projections' weight gradients (see _view)

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True, output_shape=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", seed=None, name=None, wiring=None):
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

    # -- the call --------------------------------------------------------------------------
    def __call__(self, query, value=None, key=None, attention_mask=None, use_causal_mask=False):
        if value is None and isinstance(query, (list, tuple)):  # the engine's form: this layer's inputs, wired
            if self.wiring is None:
                raise ValueError(f"{self.describe()} is called as mha(query, value, key=None, attention_mask=None, "
                                 "use_causal_mask=False); a list of inputs needs the wiring of an earlier call")
            return super().__call__(query)
        if value is None:
            raise TypeError(f"{self.describe()} needs a query and a value: mha(query, value), got only a query")
        named = {"query": query, "value": value, "key": value if key is None else key}
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
        if self.wiring is not None and wiring != self.wiring:
            raise ValueError(f"{self.describe()} was first called with inputs wired as {self.wiring}; a shared "
                             f"attention layer must be called the same way each time, got {wiring}")
        before, self.wiring = self.wiring, wiring
        try:
            return super().__call__(tensors)
        except Exception:
            self.wiring = before
            raise

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
        # Keras's kernels are (features, heads, dim) and (heads, value_dim, output): the Dense
        # products' (features, heads * dim) and (heads * value_dim, output), drawn with those fans.
        dense = lambda units, part: Dense(units, None, self.use_bias, self.kernel_initializer, self.bias_initializer,
                                          name=f"{self.name}/{part}")
        self.projections = {"query": dense(heads * self.key_dim, "query"), "key": dense(heads * self.key_dim, "key"),
                            "value": dense(heads * self.value_dim, "value")}
        for role in ("query", "key", "value"):
            features = self.input_shapes[self.wiring[role]][1]
            layer = self.projections[role]
            layer.build((features,), store, rng)
            dim = self.value_dim if role == "value" else self.key_dim
            layer.kernel.keras_index = layer.kernel.keras_index.reshape(features, heads, dim)
            if self.use_bias:
                layer.bias.keras_index = layer.bias.keras_index.reshape(heads, dim)
        self.output_dense = dense(out, "attention_output")
        self.output_dense.build((heads * self.value_dim,), store, rng)
        self.output_dense.kernel.keras_index = self.output_dense.kernel.keras_index.reshape(heads, self.value_dim, out)
        self.scale = 1.0 / math.sqrt(self.key_dim)
        # The dropout hash's 32-bit seed, as the Dropout layer draws it.
        self.kernel_seed = (self.seed if self.seed is not None else int(rng.integers(2**31))) % 2**31
        program = self.rt.program(("layers/dropout.cl", "layers/multi_head_attention.cl"), self.dtype,
                                  {"KEY_DIM": self.key_dim, "VALUE_DIM": self.value_dim})
        kernel = lambda name: self.rt.kernel(program, name, self.dtype)
        self._forward = kernel("FeedForwardAttention")
        self._hidden = kernel("CalcHiddenGradientAttention")
        self._hidden_key_value = kernel("CalcHiddenGradientAttentionKeyValue")
        self._sum = self.rt.kernel(merge_program(self.rt, self.dtype), "Sum", self.dtype)
        self._noise = Tensor.zeros((1,), np.int32, self.rt)  # dropout.cl's geometry: none (rank 0)
        self._no_mask = Tensor.zeros((1,), self.dtype, self.rt)
        self.built = True
        return self.output_shape

    @property
    def parameters(self):
        if not self.built:
            return []
        # Keras's order: query, key, value, output (each kernel, then bias).
        return [p for role in ("query", "key", "value") for p in self.projections[role].parameters] + \
            self.output_dense.parameters

    def allocate(self, capacity):
        super().allocate(capacity)
        rt, dt = self.rt, self.dtype
        heads = self.num_heads
        for layer in self.projections.values():
            layer.allocate(capacity * (self.tq if layer is self.projections["query"] else self.tk))
        self.output_dense.allocate(capacity * self.tq)
        self.probabilities = Tensor((capacity, heads, self.tq, self.tk), dt, rt)     # softmax of the scores
        self.score_grad = Tensor((capacity, heads, self.tq, self.tk), dt, rt)       # dL/d(scores)
        self.context = Tensor((capacity * self.tq, heads * self.value_dim), dt, rt)  # (batch * Tq, heads * value_dim)
        self.context.transposed = Tensor((heads * self.value_dim, capacity * self.tq), dt, rt)
        self.query_grad = Tensor((capacity * self.tq, heads * self.key_dim), dt, rt)   # dL/d(projected query)
        self.key_grad = Tensor((capacity * self.tk, heads * self.key_dim), dt, rt)     # dL/d(projected key)
        self.value_grad = Tensor((capacity * self.tk, heads * self.value_dim), dt, rt)  # dL/d(projected value)
        self.outputs = Tensor((capacity, *self.output_shape), dt, rt, self.output_dense.outputs.buffer)
        self.input_grads = [Tensor((capacity, *s), dt, rt) for s in self.input_shapes]  # sums over projections
        # The projections' dL/dx, (capacity * time, features), as the engine reads a gradient:
        # (capacity, time, features).
        self._projection_grads = {role: Tensor((capacity, *self.input_shapes[self.wiring[role]]), dt, rt,
                                               self.projections[role].input_grad.buffer) for role in self.projections}
        self._views = {}

    def _view(self, index: int, x: Tensor) -> Tensor:
        """Input `index` as the projections read it: x itself if its producer wrote x^T, else a
        tensor on x's buffer whose x^T this layer writes once per backward pass for all the
        projections reading it (instead of one transpose each)."""
        rows, features = self.capacity * self.input_shapes[index][0], self.input_shapes[index][1]
        given = getattr(x, "transposed", None)
        if given is not None and given.shape == (features, rows):  # not a batch's (time * features, capacity)
            return x
        view = self._views.get(index)
        if view is None or view.buffer is not x.buffer:
            view = Tensor((rows, features), self.dtype, self.rt, x.buffer)         # x as (batch * time, features)
            view.transposed = Tensor((features, rows), self.dtype, self.rt)        # its x^T
            view.own_transpose = True
            self._views[index] = view
        return view

    def _dropout_arguments(self):
        active = self.training and self.dropout > 0
        return int(active), self.kernel_seed, self.step, 1.0 - self.dropout

    def forward(self, xs, rows):
        self.xs = [self._view(i, x) for i, x in enumerate(xs)]
        projected = {role: self.projections[role].forward(self.xs[self.wiring[role]], rows *
                                                          (self.tq if role == "query" else self.tk))
                     for role in ("query", "key", "value")}
        self._mask = self._no_mask if self.wiring["mask"] is None else xs[self.wiring["mask"]]
        self._forward((self.tq, self.num_heads, rows), None, projected["query"], projected["key"], projected["value"],
                      self._mask, self.probabilities, self.context, self.context.transposed, self._noise,
                      self.tq, self.tk, self.num_heads, self.capacity * self.tq, self.scale,
                      int(self.wiring["mask"] is not None), int(self.wiring["causal"]),
                      *self._dropout_arguments())
        self.output_dense.forward(self.context, rows * self.tq)
        return self.outputs

    def backward(self, grad, rows, input_grads):
        context_grad = self.output_dense.backward(grad, rows * self.tq, True)
        masked = (self._mask, int(self.wiring["mask"] is not None), int(self.wiring["causal"]))
        sizes = (self.tq, self.tk, self.num_heads)
        q, k, v = (self.projections[r].outputs for r in ("query", "key", "value"))
        self._hidden((self.tq, self.num_heads, rows), None, context_grad, k, v, masked[0], self.probabilities,
                     self.score_grad, self.query_grad, self._noise, *sizes, self.scale, *masked[1:],
                     *self._dropout_arguments())
        self._hidden_key_value((self.tk, self.num_heads, rows), None, context_grad, q, self.probabilities,
                               self.score_grad, self.key_grad, self.value_grad, self._noise, *sizes, self.scale,
                               *masked[1:], *self._dropout_arguments())
        for index, x in enumerate(self.xs):  # the inputs' x^T for the projections' weight gradients
            if getattr(x, "own_transpose", False):
                features = self.input_shapes[index][1]
                self.projections["query"]._transpose((features, rows * self.input_shapes[index][0]), None, x,
                                                     x.transposed, features, x.transposed.shape[1])
        results = [None] * len(self.xs)
        for role, projected_grad in (("query", self.query_grad), ("key", self.key_grad), ("value", self.value_grad)):
            index = self.wiring[role]
            length = self.tq if role == "query" else self.tk
            self.projections[role].backward(projected_grad, rows * length, input_grads[index])
            if not input_grads[index]:
                continue
            grad_x = self._projection_grads[role]
            if results[index] is None:
                results[index] = grad_x
            else:  # a tensor read by several projections: dL/dx is the sum of theirs
                total = rows * int(np.prod(self.input_shapes[index]))
                self._sum((-(-total // 4),), None, results[index], grad_x, self.input_grads[index], total)
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
