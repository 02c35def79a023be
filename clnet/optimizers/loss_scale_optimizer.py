"""Keras 3's LossScaleOptimizer: dynamic loss scaling around another optimizer, kept on the
device (its kernels in loss_scale.cl), so that a training step reads nothing back."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..cl.parameters import Parameter, ParameterRange
from ..cl.runtime import Runtime
from ..cl.tensor import Tensor
from ..layers.base import unique_name
from .base import Optimizer, get

# The base optimizer's arguments, which belong on the inner optimizer, with the values Keras still
# accepts here because its older configs carried them (clnet's l1 and l2 likewise); learning_rate
# is refused whatever its value, as in Keras.
_INNER_ARGUMENTS = {"weight_decay": None, "clipnorm": None, "global_clipnorm": None, "clipvalue": None,
                    "l1": 0.0, "l2": 0.0, "use_ema": False, "ema_momentum": 0.99, "ema_overwrite_frequency": None,
                    "loss_scale_factor": None, "gradient_accumulation_steps": None}
_INT32_MAX = 2**31 - 1  # (the counter is an int on the device)


class LossScaleOptimizer(Optimizer):
    """Keras's `LossScaleOptimizer`: wraps `inner_optimizer` (an optimizer of clnet's, not a
    LossScaleOptimizer) with dynamic loss scaling, which keeps small gradients from underflowing
    in 16-bit arithmetic. A training step multiplies the loss by the dynamic scale (so every
    gradient is scaled by it; the loss in the logs is not), then, as Keras's apply(): if every
    gradient is finite, they are divided by the scale and the inner optimizer steps (its
    regularization and clipping see the unscaled gradients), and the scale doubles after
    `dynamic_growth_steps` such steps in a row; if any is infinite or NaN, the step is skipped
    (weights and moments untouched), the scale halves and the count starts again.

    - `inner_optimizer`: the optimizer that updates the weights, with all of its arguments
      (learning rate, clipping, weight decay, ...).
    - `initial_scale=2.0**15`: the first scale, a finite number > 0 (Keras's advice: a large one,
      as a scale too high comes down faster than one too low goes up).
    - `dynamic_growth_steps=2000`: finite steps before the scale doubles, an integer >= 1.
    - `name=None`: a non-empty string; None is Keras's automatic name, `"loss_scale_optimizer"`
      made unique.

    The base optimizer's arguments (learning_rate, clipnorm, weight_decay, ...) are refused with
    a ValueError, as in Keras: set them on `inner_optimizer`. `learning_rate` (read and set),
    `schedule`, `iterations` (read and set) and the moments are the inner optimizer's.

    All of it stays on the device: the scale, Keras's step counter and a flag live in device
    buffers, which the loss kernel and the inner optimizer's update kernels read. A step adds one
    CheckFinite launch per parameter range (one for a model that built its layers) and one
    UpdateLossScale launch to the inner optimizer's: two for most models. `dynamic_scale` and
    `step_counter` read the device when asked, not during training.

    Unlike Keras, a skipped step counts in `iterations`: whether a step is skipped is known only on
    the device, and the count is the host's (a learning-rate schedule and Adam's bias correction
    are computed from it there), so after a skipped step both are one step ahead of Keras's, whose
    inner optimizer counts only the steps it took. Keras's `dynamic=False` is not taken either:
    the scaling is dynamic."""
    names = ()  # Keras has no string for it: compile takes an instance, or its config dict

    def __init__(self, inner_optimizer, initial_scale=2.0**15, dynamic_growth_steps=2000, name=None, **kwargs):
        if not kwargs.pop("dynamic", True):
            raise ValueError("LossScaleOptimizer got dynamic=False; its loss scaling is dynamic (Keras's fixed "
                             "scale, an optimizer's loss_scale_factor, is not taken by clnet)")
        for argument in ("learning_rate", *_INNER_ARGUMENTS):
            if argument in kwargs:
                value = kwargs.pop(argument)
                if argument == "learning_rate" or value != _INNER_ARGUMENTS[argument]:
                    raise ValueError(f"LossScaleOptimizer does not support `{argument}` (got {value!r}). Instead, "
                                     f"set `{argument}` on the `inner_optimizer`.")
        if kwargs:
            raise TypeError(f"LossScaleOptimizer got unknown argument(s) {sorted(kwargs)}; it takes "
                            "inner_optimizer, initial_scale, dynamic_growth_steps, name")
        if not isinstance(inner_optimizer, Optimizer) or isinstance(inner_optimizer, LossScaleOptimizer):
            raise TypeError("LossScaleOptimizer inner_optimizer must be an instance of clnet.optimizers.Optimizer "
                            f"(Adam(), SGD(), ...) other than a LossScaleOptimizer, got {inner_optimizer!r}")
        if isinstance(initial_scale, bool) or not isinstance(initial_scale, numbers.Real):
            raise TypeError(f"LossScaleOptimizer initial_scale must be a number > 0, got {initial_scale!r}")
        if not (math.isfinite(initial_scale) and initial_scale > 0):
            raise ValueError(f"LossScaleOptimizer initial_scale must be a finite number > 0, got {initial_scale!r}")
        if isinstance(dynamic_growth_steps, bool) or not isinstance(dynamic_growth_steps, numbers.Integral):
            raise TypeError("LossScaleOptimizer dynamic_growth_steps must be an integer >= 1, got "
                            f"{dynamic_growth_steps!r}")
        if not 1 <= dynamic_growth_steps <= _INT32_MAX:
            raise ValueError(f"LossScaleOptimizer dynamic_growth_steps must be an integer in [1, {_INT32_MAX}], "
                             f"got {dynamic_growth_steps!r}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"LossScaleOptimizer name must be a non-empty string, got {name!r}")
        # (Optimizer.__init__ is not called: its arguments and state are the inner optimizer's.)
        self.name = unique_name("loss_scale_optimizer") if name is None else name
        self.inner_optimizer = inner_optimizer
        self.initial_scale = float(initial_scale)
        self.dynamic_growth_steps = int(dynamic_growth_steps)
        self.rt: Runtime | None = None
        self.dtype: np.dtype | None = None
        self.loss_scale: Tensor | None = None      # (2,): [scale, non-finite flag], set by bind
        self._step_counter: Tensor | None = None   # (1,) int32, set by bind
        self._unbound_state = (self.initial_scale, 0)  # (scale, counter) that bind writes first

    # -- what the inner optimizer keeps --------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The inner optimizer's learning rate (a schedule's value at `iterations`); setting it
        sets the inner optimizer's."""
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        self.inner_optimizer.learning_rate = value

    @property
    def schedule(self):
        """The inner optimizer's learning-rate schedule, or None."""
        return self.inner_optimizer.schedule

    @property
    def iterations(self) -> int:
        """The inner optimizer's step count, skipped steps included (see the class's docstring)."""
        return self.inner_optimizer.iterations

    @iterations.setter
    def iterations(self, value: int) -> None:
        self.inner_optimizer.iterations = value

    @property
    def slots(self) -> dict:
        """The inner optimizer's moment buffers and their initial values."""
        return self.inner_optimizer.slots

    @property
    def moments(self) -> dict:
        """The inner optimizer's moment tensors, by slot (a checkpoint's optimizer state)."""
        return self.inner_optimizer.moments

    @property
    def ranges(self) -> list[ParameterRange]:
        """The parameter ranges the inner optimizer updates."""
        return self.inner_optimizer.ranges

    def keeps(self, parameter: Parameter) -> bool:
        """Whether the inner optimizer keeps moments for `parameter`."""
        return self.inner_optimizer.keeps(parameter)

    def moment(self, parameter: Parameter, flat: np.ndarray) -> np.ndarray:
        """`parameter`'s part of `flat`, one of the inner optimizer's moments read to the host."""
        return self.inner_optimizer.moment(parameter, flat)

    # -- the device ----------------------------------------------------------------------------
    def bind(self, ranges: list[ParameterRange], rt: Runtime, dtype) -> None:
        """The state buffers (once per device and float type: the model's loss kernel is bound
        to them, and a model bound again on other ranges keeps its scale), a CheckFinite launch
        per range, and the inner optimizer bound with them."""
        dtype = np.dtype(dtype)
        if self.rt is not rt or self.dtype != dtype:
            scale, counter = self._state()
            self.rt, self.dtype = rt, dtype
            self.loss_scale = Tensor.from_numpy(np.array([scale, 0], dtype), rt=rt)
            self._step_counter = Tensor.from_numpy(np.array([counter], np.int32), rt=rt)
            program = rt.program(("optimizers/loss_scale.cl",), dtype)
            self._check = rt.kernel(program, "CheckFinite", dtype)
            self._update_scale = rt.kernel(program, "UpdateLossScale", dtype).bind(
                ("growth_steps",), loss_scale=self.loss_scale, step_counter=self._step_counter)
        self._checks = [self._check.bind(grads=r.grads, total=r.size, loss_scale=self.loss_scale) for r in ranges]
        self.inner_optimizer.bind(ranges, rt, dtype, loss_scale=self.loss_scale)

    def step(self) -> None:
        """CheckFinite over each range's gradients, the inner optimizer's step (its kernels
        unscale the gradients, or return at once where one was not finite), then UpdateLossScale:
        Keras's rule for the scale and the counter. Nothing is read back."""
        rt = self.rt
        rt.join_side()  # the gradients' last sums may run beside (Runtime.side_queue)
        for r, check in zip(self.ranges, self._checks):
            check(*rt.four_per_item(r.size))
        self.inner_optimizer.step()
        self._update_scale((1,), (1,), self.dynamic_growth_steps)

    @property
    def dynamic_scale(self) -> float:
        """The loss scale the next step multiplies the loss by, read from the device."""
        return self._state()[0]

    @property
    def step_counter(self) -> int:
        """Keras's step counter: finite steps since the scale last changed, read from the device."""
        return self._state()[1]

    def _state(self) -> tuple[float, int]:
        if self.loss_scale is None:
            return self._unbound_state
        return float(self.loss_scale.numpy()[0]), int(self._step_counter.numpy()[0])

    def scalar_state(self) -> dict:
        """`dynamic_scale` and `step_counter`, read from the device."""
        scale, counter = self._state()
        return {"dynamic_scale": scale, "step_counter": counter}

    def set_scalar_state(self, values: dict) -> None:
        """Set `dynamic_scale` (a finite number > 0) and `step_counter` (an integer in [0,
        dynamic_growth_steps - 1]), as scalar_state() gives them (a checkpoint's, another
        replica's)."""
        if set(values) != {"dynamic_scale", "step_counter"}:
            raise ValueError(f"LossScaleOptimizer state must give dynamic_scale and step_counter, got {sorted(values)}")
        scale, counter = values["dynamic_scale"], values["step_counter"]
        if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real) or not (
                math.isfinite(scale) and scale > 0):
            raise ValueError(f"LossScaleOptimizer dynamic_scale must be a finite number > 0, got {scale!r}")
        if isinstance(counter, (bool, np.bool_)) or not isinstance(counter, numbers.Integral) or not (
                0 <= counter < self.dynamic_growth_steps):
            raise ValueError(f"LossScaleOptimizer step_counter must be an integer in [0, "
                             f"{self.dynamic_growth_steps - 1}] (dynamic_growth_steps - 1), got {counter!r}")
        if self.loss_scale is None:
            self._unbound_state = (float(scale), int(counter))
            return
        self.loss_scale.write(np.array([scale, 0], self.dtype))
        self._step_counter.write(np.array([counter], np.int32))

    # -- config --------------------------------------------------------------------------------
    def get_config(self) -> dict:
        inner = self.inner_optimizer
        return {"name": self.name,
                "inner_optimizer": {"class_name": type(inner).__name__, "config": inner.get_config()},
                "initial_scale": self.initial_scale, "dynamic_growth_steps": self.dynamic_growth_steps}

    @classmethod
    def from_config(cls, config: dict) -> "LossScaleOptimizer":
        """The optimizer get_config describes, its inner optimizer rebuilt from its
        {"class_name", "config"} dict (an Optimizer is taken as it is)."""
        config = dict(config)
        if "inner_optimizer" not in config:
            raise ValueError(f"LossScaleOptimizer config has no 'inner_optimizer': {config!r}")
        inner = config.pop("inner_optimizer")
        return cls(get(inner) if isinstance(inner, dict) else inner, **config)

    def __repr__(self) -> str:
        return (f"LossScaleOptimizer({self.inner_optimizer!r}, initial_scale={self.initial_scale!r}, "
                f"dynamic_growth_steps={self.dynamic_growth_steps!r})")
