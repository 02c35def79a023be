"""What every loss family shares: names, target checks, and its program."""
from __future__ import annotations

import numpy as np

from ..cl.runtime import Runtime


# CalcOutputGradient's fold_activation when the outputs it gets are the output layer's softmax
# input, whose softmax the kernel takes itself (losses/crossentropy.cl; Step._forward_loss).
SOFTMAX_HERE = 2


class Loss:
    """A loss computed by a CalcOutputGradient kernel in `source` with `mode`.

    `folds`: the output activation whose derivative this loss can fold into its own gradient.
    """

    registry: dict[str, type["Loss"]] = {}
    names: tuple[str, ...] = ()
    source = ""
    mode = 0
    folds: str | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in cls.names:
            Loss.registry[name] = cls

    @property
    def name(self) -> str:
        return self.names[0]

    def program(self, rt: Runtime, dtype, defines=None):
        """The loss's program; `defines`: the caller's build switches (LOSS_SCALE, see
        output_gradient.cl)."""
        # The family's position_loss between the helpers it uses and the kernel that calls it.
        return rt.program(("losses/metrics.cl", self.source, "losses/output_gradient.cl"), dtype, defines)

    def can_fold(self, activation) -> bool:
        # The folded gradient assumes the plain function: Sigmoid(a=1, b=0), not a scaled one.
        return (activation is not None and activation.name == self.folds
                and activation.params == type(activation)().params)

    def prepare_targets(self, y, output_shape: tuple, dtype, argument: str = "y") -> np.ndarray:
        """y as a (samples, outputs) array of `dtype`, or a ValueError/TypeError saying why not."""
        y = as_numeric(y, argument)
        outputs = int(np.prod(output_shape))
        if y.ndim == 1 and outputs == 1:
            y = y[:, None]
        if y.ndim < 2 or y.shape[1:] != tuple(output_shape):
            raise ValueError(f"{argument} has shape {y.shape}, but the model's output is (samples, "
                             f"{', '.join(map(str, output_shape))}) for loss {self.name!r}")
        return y.reshape(len(y), outputs).astype(dtype)

    def target_width(self, output_shape: tuple) -> int:
        """The columns prepare_targets gives a sample of a model whose output is `output_shape`."""
        return int(np.prod(output_shape))

    def get_config(self) -> str:
        return self.name


def as_numeric(array, argument: str) -> np.ndarray:
    """An ndarray of numbers, all finite, or a TypeError/ValueError naming the argument.
    A boolean array comes back as uint8 0/1, as Keras reads a boolean input or target."""
    try:
        array = np.asarray(array)
    except Exception as error:
        raise TypeError(f"{argument} must be an array of numbers, got {type(array).__name__}: {error}") from None
    if array.dtype == bool:
        return array.astype(np.uint8)  # a copy of the same size; no NaN to look for
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise TypeError(f"{argument} must hold integers or floats, got dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.floating):
        bad = ~np.isfinite(array)
        if bad.any():
            where = np.argwhere(bad)[0]
            raise ValueError(f"{argument} contains {int(bad.sum())} NaN or infinite value(s), the first at "
                             f"index {tuple(int(i) for i in where)}; expected finite numbers")
    return array


def get(identifier) -> Loss:
    """A loss from a name, a Loss, or a get_config() dict such as `{"name": ..., "from_logits": True}`,
    as `compile(loss=...)` takes it. Names (any case): `"mse"`, `"mean_squared_error"`, `"mae"`,
    `"mean_absolute_error"`, `"categorical_crossentropy"` (also `"crossentropy"`),
    `"sparse_categorical_crossentropy"`, `"binary_crossentropy"`; anything else raises a
    `ValueError`. A Python function is not a loss here."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, dict) and identifier.get("name") in Loss.registry:
        return Loss.registry[identifier["name"]](**{k: v for k, v in identifier.items() if k != "name"})
    if isinstance(identifier, str) and identifier.lower() in Loss.registry:
        return Loss.registry[identifier.lower()]()
    raise ValueError(f"unknown loss {identifier!r}; expected one of {sorted(Loss.registry)} or a Loss")
