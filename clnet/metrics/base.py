"""What every metric family shares: Keras's names, the state a metric sums on the device, and
its update kernel's program.

A metric is computed where the outputs are: after each batch's loss kernel, one launch adds the
batch's statistics (a sum, or counts per column or per threshold) into the metric's state, a few
numbers on the device; a progress update reads them once and computes Keras's result from them.
Summing in a fixed order within one work-group, without atomics, makes every run give the same
numbers. The state starts again at each epoch's (and each evaluation's) first batch, as Keras
resets its metrics.

A Metric of the user's (Keras's subclass: add_variable in __init__, update_state(y_true, y_pred,
sample_weight=None), result(), optionally reset_state) runs in Python: after each batch the
batch's targets and predictions are read to the host, once, and given to update_state as numpy
arrays, where clnet.ops (eagerly) and numpy compute. That read is the only host round-trip of
the step, and only a model compiled with such a metric has it."""
from __future__ import annotations

import numpy as np

from .. import initializers
from ..cl.tensor import Tensor
from ..layers.base import TENSOR_OPERATORS, snake_case


class MetricVariable:
    """A variable of a user's Metric (Keras's add_variable): a numpy array on the host, updated
    by assign, assign_add and assign_sub, read as an array (numpy's and clnet.ops' functions and
    Python's operators take it as one)."""

    __array_priority__ = 100  # numpy defers to its operators, which give arrays

    def __init__(self, name: str, initial: np.ndarray):
        self.name, self.initial = name, initial
        self.value = initial.copy()

    @property
    def shape(self):
        return self.value.shape

    @property
    def dtype(self):
        return self.value.dtype

    def numpy(self) -> np.ndarray:
        return self.value.copy()

    def __array__(self, dtype=None, copy=None):
        return self.value if dtype is None else self.value.astype(dtype)

    def _checked(self, value, how: str) -> np.ndarray:
        array = np.asarray(value, np.float64)
        if array.shape != self.value.shape and array.size != 1:
            raise ValueError(f"variable {self.name!r}.{how}: a value of shape {array.shape} for a variable of "
                             f"shape {self.value.shape}")
        return array

    def assign(self, value) -> None:
        self.value[...] = self._checked(value, "assign")

    def assign_add(self, value) -> None:
        self.value[...] = self.value + self._checked(value, "assign_add")

    def assign_sub(self, value) -> None:
        self.value[...] = self.value - self._checked(value, "assign_sub")

    def __float__(self):
        return float(self.value)

    def __repr__(self):
        return f"<MetricVariable {self.name!r} shape={self.value.shape} value={self.value!r}>"


def _operator(name):
    def apply(self, *other):
        return getattr(self.value, name)(*(np.asarray(o) for o in other))
    return apply


for _name in TENSOR_OPERATORS:  # (a layer's Variable forwards the same)
    setattr(MetricVariable, _name, _operator(_name))


class Metric:
    """A metric of Keras's. clnet's own are computed on the device: they set `aliases` (names
    compile takes besides the class name and its snake_case), `source` (the family's .cl) and
    `reads_probabilities` (False where the result depends only on the order of each row's values,
    so an output whose softmax the loss kernel takes may hand it the softmax's input), and define
    `state_size`, `update` and `result`. A user's subclass defines Keras's `update_state` and
    `result` instead (see the module's docstring).

    As in Keras, a metric may set `_direction`, "up" or "down" (clnet's own all do: accuracies, AUC,
    precision, recall and F-scores up, errors down): the way the callbacks' `mode="auto"` takes as
    better when they monitor it; monitoring one without it in that mode raises a `ValueError`.

    `name=None`: the name in the logs (a non-empty string; by default the class's name in
    snake_case). `dtype=None`: Keras's argument, kept for its signature; a clnet metric computes in
    the model's float type, and a user's variables are float32 unless `add_variable` is given
    another dtype."""

    registry: dict[str, type["Metric"]] = {}
    aliases: tuple[str, ...] = ()
    source = ""
    reads_probabilities = True
    # The targets it compares with: "dense" (a column per output column), "ids" (a sparse
    # loss's class id per position) or "any".
    targets = "dense"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):
            for name in (cls.__name__, snake_case(cls.__name__), *cls.aliases):
                Metric.registry[name] = cls

    def __init__(self, name: str | None = None, dtype=None):
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"{type(self).__name__} name must be a non-empty string, got {name!r}")
        self.name = name or snake_case(type(self).__name__)
        self.dtype = dtype  # (Keras's argument; a clnet metric computes in the model's floatx)
        self.state = None
        self.weighted = False  # compile's weighted_metrics set it
        self.count = 0  # samples since the state started again
        self.tokens = 0  # positions of them (a sequence output's steps; batches' lengths may differ)
        self.counts_weights = False
        self.weight_stride = 1
        self._variables: list[MetricVariable] = []

    @property
    def on_host(self) -> bool:
        """A user's metric: update_state and result in Python (Keras's subclass)."""
        return type(self).update_state is not Metric.update_state

    # -- Keras's subclass API ------------------------------------------------------------------
    def add_variable(self, shape=(), initializer="zeros", dtype=None, aggregation="sum", name=None) -> MetricVariable:
        """A variable of the metric's state (Keras's), `initializer` a name of
        clnet.initializers, a number or a callable (shape, rng); reset_state sets it back."""
        if aggregation not in ("sum", "mean", "only_first_replica", "none"):
            raise ValueError(f"add_variable aggregation must be 'sum', 'mean', 'only_first_replica' or 'none', "
                             f"got {aggregation!r}")
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if isinstance(initializer, (int, float, np.number)) and not isinstance(initializer, bool):
            initial = np.full(shape, float(initializer))
        else:
            initial = np.asarray(initializers.get(initializer)(shape, np.random.default_rng(0)), np.float64)
        variable = MetricVariable(name or f"variable_{len(self._variables)}",
                                  initial.astype(np.dtype(dtype or "float32")))
        self._variables.append(variable)
        return variable

    def add_weight(self, name=None, shape=(), dtype=None, initializer="zeros", aggregation="sum") -> MetricVariable:
        return self.add_variable(shape, initializer, dtype, aggregation, name)

    @property
    def variables(self) -> list[MetricVariable]:
        return list(self._variables)

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        """A user's metric: add a batch (numpy arrays: y_true in the sample shape the targets were
        given in, as Keras passes them; y_pred the output;
        sample_weight (rows,), a masked output's (rows, positions...), or None) into its variables."""
        raise NotImplementedError

    # -- what the step calls -------------------------------------------------------------------
    def bind(self, rt, dtype, output_shape: tuple, sparse: bool, loss_name: str) -> None:
        """Ready for a model output of `output_shape` whose loss `loss_name` takes class ids per
        position (`sparse`) or a target column per output column: the state on rt's device, the
        update kernel. Raises where the targets are not the ones this metric compares with. Bound
        again (a model made again on another batch's lengths) it keeps its state, which the next
        epoch's or evaluation's first batch starts again."""
        self.rt, self.dtype_bound, self.output_shape = rt, np.dtype(dtype), tuple(output_shape)
        self.positions, self.cols = int(np.prod(output_shape[:-1])), int(output_shape[-1])
        self.target_shape = tuple(output_shape[:-1]) if sparse else self.output_shape
        if self.on_host:
            if type(self).result is Metric.result:
                raise TypeError(f"metric {self.name!r} ({type(self).__name__}) defines update_state but not "
                                "result(); a Metric subclass defines both, as Keras's")
            return
        if not self.source:
            raise TypeError(f"metric {self.name!r} ({type(self).__name__}) has neither a device kernel nor an "
                            "update_state: subclass clnet.metrics.Metric with update_state(y_true, y_pred, "
                            "sample_weight=None) and result(), as Keras's")
        if self.targets == "dense" and sparse:
            raise ValueError(f"metric {self.name!r} ({type(self).__name__}) compares the outputs with a target "
                             f"column per output column, but loss {loss_name!r} takes class ids; use "
                             "'categorical_crossentropy' with one-hot targets")
        if self.targets == "ids" and not sparse:
            raise ValueError(f"metric {self.name!r} ({type(self).__name__}) takes class ids as targets, as "
                             f"'sparse_categorical_crossentropy' does, but loss {loss_name!r} takes a column per "
                             "class; use its categorical form")
        self.target_width = 1 if sparse else self.cols
        self.check_shape(output_shape)
        state = self.state
        if state is None or state.rt is not rt or state.dtype != np.dtype(dtype) or state.shape != (self.state_size(),):
            self.state = Tensor((self.state_size(),), dtype, rt)
            self.state.fill(0)
        # Its arguments named once, here, where its state is made (see bind_update).
        self.kernel = self.bind_update(rt.kernel(rt.program(self.sources(), dtype), self.kernel_name, dtype))

    def check_shape(self, output_shape: tuple) -> None:
        """Raises where this metric cannot take an output of this shape."""

    def sources(self) -> tuple[str, ...]:
        return (self.source,)

    def update_batch(self, target: Tensor, output: Tensor, rows: int, first: int,
                     row_weights: Tensor | None = None, per_position: bool = False) -> None:
        """Adds the batch's statistics into the state (one launch), starting again where `first`
        is 0 (an epoch's or an evaluation's first batch); each sample counting its weight in
        `row_weights` where the metric is weighted (compile's weighted_metrics) and the batch
        has sample weights. `per_position`: `row_weights` holds a weight per position (a masked
        output's mask, or mask times sample weight), which every metric counts, as Keras's."""
        if first == 0:
            self.reset_state()
        weights = row_weights if (self.weighted or per_position) and row_weights is not None else None
        self.weight_stride = 1 if per_position else self.positions  # positions per weight
        self.counts_weights = self.counts_weights or weights is not None
        if self.on_host:
            shape = (rows, *self.output_shape[:-1]) if per_position else (rows,)
            self.update_state(target.numpy()[:rows].reshape(rows, *self.target_shape),
                              output.numpy()[:rows].reshape(rows, *self.output_shape),
                              sample_weight=None if weights is None
                              else weights.numpy().reshape(-1)[:int(np.prod(shape))].reshape(shape))
        else:
            self.update(target, output, rows * self.positions,
                        self.state if weights is None else weights, int(weights is not None))
        self.count = first + rows
        self.tokens += rows * self.positions

    def reset_state(self) -> None:
        """The state as at the start (Keras's: each variable back to its initial value)."""
        self.count = self.tokens = 0
        self.counts_weights = False  # (whether a batch gave weights: the mean is then over their sum)
        if self.state is not None:
            self.state.fill(0)
        for variable in self._variables:
            variable.assign(variable.initial)

    def bind_update(self, kernel):
        """The update kernel's launch (Kernel.bind): what stays bound, the state included, and the
        names of what `update` gives."""
        raise NotImplementedError

    def update(self, target: Tensor, output: Tensor, tokens: int, row_weights: Tensor, weighted: int) -> None:
        raise NotImplementedError

    def result(self):
        """Keras's result from the state (after `count` samples)."""
        raise NotImplementedError

    def value(self):
        """result() as the logs show it: a Python float, or an array (F1Score per class)."""
        result = np.asarray(self.result(), np.float64)
        return float(result) if result.ndim == 0 else result

    # -- config --------------------------------------------------------------------------------
    def get_config(self) -> dict:
        return {"name": self.name}

    def serialize(self) -> dict:
        """As Keras serializes a metric (a .keras archive's compile config is read by Keras too)."""
        return {"module": "keras.metrics", "class_name": type(self).__name__, "config": self.get_config(),
                "registered_name": None}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_config().items())})"


class MeanMetric(Metric):
    """A metric that is the mean of a value per position (Keras's MeanMetricWrapper over a
    function of the last axis): metrics/mean.cl's UpdateMean sums the family's metric_value over
    the batch's positions in one work-group; the state is that sum and the sum of the weights.
    `name` and `dtype` as Metric's."""

    kernel_name = "UpdateMean"
    kind = 0  # the family's metric_value case

    def state_size(self) -> int:
        return 2

    def sources(self):
        return ("losses/metrics.cl", self.source, "metrics/mean.cl")

    def parameter(self) -> float:
        return 0.0

    def bind_update(self, kernel):
        return kernel.bind(("target", "outputs", "tokens", "positions", "row_weights", "weighted"), cols=self.cols,
                           target_width=self.target_width, kind=self.kind, parameter=float(self.parameter()),
                           state=self.state)

    def update(self, target, output, tokens, row_weights, weighted):
        size = self.rt.local_size
        self.kernel((size,), (size,), target, output, tokens, self.weight_stride, row_weights, weighted)

    def result(self):
        total, weights = self.state.numpy().astype(np.float64)
        if not self.counts_weights:  # the count, exactly (a float32 sum of ones stops at 2^24)
            weights = self.tokens
        return float(total / weights) if weights else 0.0


def get(identifier):
    """A metric from compile's list: "accuracy"/"acc" (the loss kernel's own, see Step), a name
    Keras knows ("AUC", "mse", "precision", "SparseTopKCategoricalAccuracy", ...; the metric is
    named as given, as Keras names it), a Metric, or a serialized one ({"class_name", "config"})."""
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        if identifier in ("accuracy", "acc"):
            return "accuracy"
        cls = Metric.registry.get(identifier)
        if cls is not None:
            return cls(name=identifier)
    if isinstance(identifier, dict) and identifier.get("class_name") in Metric.registry:
        return Metric.registry[identifier["class_name"]](**identifier.get("config", {}))
    known = sorted({"accuracy", "acc", *Metric.registry})
    raise ValueError(f"unknown metric {identifier!r}; expected a clnet.metrics.Metric or one of {known}")
