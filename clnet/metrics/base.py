"""What every metric family shares: Keras's names, the state a metric sums on the device, and
its update kernel's program.

A metric is computed where the outputs are: after each batch's loss kernel, one launch adds the
batch's statistics (a sum, or counts per column or per threshold) into the metric's state, a few
numbers on the device; a progress update reads them once and computes Keras's result from them.
Summing in a fixed order within one work-group, without atomics, makes every run give the same
numbers. The state starts again at each epoch's (and each evaluation's) first batch, as Keras
resets its metrics."""
from __future__ import annotations

import numpy as np

from ..cl.tensor import Tensor
from ..layers.base import snake_case


class Metric:
    """A metric of Keras's, computed on the device. Subclasses set `aliases` (names compile takes
    besides the class name and its snake_case), `source` (the family's .cl) and
    `reads_probabilities` (False where the result depends only on the order of each row's values,
    so an output whose softmax the loss kernel takes may hand it the softmax's input), and define
    `state_size`, `update` and `result`."""

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

    # -- what the step calls -------------------------------------------------------------------
    def bind(self, rt, dtype, output_shape: tuple, sparse: bool, loss_name: str) -> None:
        """Ready for a model output of `output_shape` whose loss `loss_name` takes class ids per
        position (`sparse`) or a target column per output column: the state on rt's device, the
        update kernel. Raises where the targets are not the ones this metric compares with."""
        if not self.source:
            raise TypeError(f"metric {self.name!r} ({type(self).__name__}) has no device kernel: clnet computes "
                            "metrics on the device, and a Metric of your own (update_state and result in "
                            "Python, as Keras's) is not supported yet; use one of clnet.metrics' classes")
        if self.targets == "dense" and sparse:
            raise ValueError(f"metric {self.name!r} ({type(self).__name__}) compares the outputs with a target "
                             f"column per output column, but loss {loss_name!r} takes class ids; use "
                             "'categorical_crossentropy' with one-hot targets")
        if self.targets == "ids" and not sparse:
            raise ValueError(f"metric {self.name!r} ({type(self).__name__}) takes class ids as targets, as "
                             f"'sparse_categorical_crossentropy' does, but loss {loss_name!r} takes a column per "
                             "class; use its categorical form")
        self.rt, self.dtype_bound = rt, np.dtype(dtype)
        self.positions, self.cols = int(np.prod(output_shape[:-1])), int(output_shape[-1])
        self.target_width = 1 if sparse else self.cols
        self.check_shape(output_shape)
        self.state = Tensor((self.state_size(),), dtype, rt)
        self.state.fill(0)
        self.kernel = rt.kernel(rt.program(self.sources(), dtype), self.kernel_name, dtype)

    def check_shape(self, output_shape: tuple) -> None:
        """Raises where this metric cannot take an output of this shape."""

    def sources(self) -> tuple[str, ...]:
        return (self.source,)

    def update_batch(self, target: Tensor, output: Tensor, rows: int, first: int,
                     row_weights: Tensor | None = None) -> None:
        """Adds the batch's statistics into the state (one launch), starting again where `first`
        is 0 (an epoch's or an evaluation's first batch); each sample counting its weight in
        `row_weights` where the metric is weighted (compile's weighted_metrics) and the batch
        has sample weights."""
        if first == 0:
            self.state.fill(0)
        weights = row_weights if self.weighted and row_weights is not None else None
        self.update(target, output, rows * self.positions,
                    self.state if weights is None else weights, int(weights is not None))

    def reset_state(self) -> None:
        if self.state is not None:
            self.state.fill(0)

    def update(self, target: Tensor, output: Tensor, tokens: int, row_weights: Tensor, weighted: int) -> None:
        raise NotImplementedError

    def result(self, count: int):
        """Keras's result from the state, after `count` samples."""
        raise NotImplementedError

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
    the batch's positions in one work-group; the state is that sum and the sum of the weights."""

    kernel_name = "UpdateMean"
    kind = 0  # the family's metric_value case

    def state_size(self) -> int:
        return 2

    def sources(self):
        return ("losses/metrics.cl", self.source, "metrics/mean.cl")

    def parameter(self) -> float:
        return 0.0

    def update(self, target, output, tokens, row_weights, weighted):
        size = self.rt.local_size
        self.kernel((size,), (size,), target, output, tokens, self.positions, self.cols, self.target_width,
                    self.kind, float(self.parameter()), row_weights, weighted, self.state)

    def result(self, count):
        total, weights = self.state.numpy().astype(np.float64)
        if not self.weighted:  # the count, exactly (a float32 sum of ones stops at 2^24)
            weights = count * self.positions
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
