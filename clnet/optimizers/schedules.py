"""Learning-rate schedules with Keras 3's names, arguments and formulas
(keras.optimizers.schedules). An optimizer given one evaluates it on the host at its iteration
count before each step, as Keras does, and passes the value to the update kernel as a scalar."""
from __future__ import annotations

import math
import numbers


class LearningRateSchedule:
    """The learning rate as a function of the optimizer's step (0 for the first update)."""

    registry: dict[str, type["LearningRateSchedule"]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        LearningRateSchedule.registry[cls.__name__] = cls

    def __call__(self, step: int) -> float:
        raise NotImplementedError

    def get_config(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_config(cls, config: dict) -> "LearningRateSchedule":
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_config().items())})"

    # -- argument checks, each naming the schedule, the argument and the value ------------------
    def _number(self, argument: str, value, minimum: float | None = None, above: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise TypeError(f"{type(self).__name__} {argument} must be a finite number, got {value!r}")
        if minimum is not None and value < minimum:
            raise ValueError(f"{type(self).__name__} {argument} must be >= {minimum}, got {value!r}")
        if above is not None and not value > above:
            raise ValueError(f"{type(self).__name__} {argument} must be > {above}, got {value!r}")
        return value

    def _flag(self, argument: str, value) -> bool:
        if not isinstance(value, bool):
            raise TypeError(f"{type(self).__name__} {argument} must be True or False, got {value!r}")
        return value

    def _refuse(self, unknown: dict) -> None:
        if unknown:
            raise TypeError(f"{type(self).__name__} got unknown argument(s) "
                            f"{', '.join(f'{k}={v!r}' for k, v in sorted(unknown.items()))}")


class ExponentialDecay(LearningRateSchedule):
    """initial_learning_rate * decay_rate ** (step / decay_steps), the exponent floored if staircase."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False,
                 name="ExponentialDecay", **unknown):
        self._refuse(unknown)
        self.initial_learning_rate = self._number("initial_learning_rate", initial_learning_rate)
        self.decay_steps = self._number("decay_steps", decay_steps, above=0)
        self.decay_rate = self._number("decay_rate", decay_rate)
        self.staircase = self._flag("staircase", staircase)
        self.name = name

    def __call__(self, step: int) -> float:
        p = step / self.decay_steps
        if self.staircase:
            p = math.floor(p)
        return self.initial_learning_rate * self.decay_rate ** p

    def get_config(self) -> dict:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class CosineDecay(LearningRateSchedule):
    """Optionally a linear warmup from initial_learning_rate to warmup_target over warmup_steps, then
    a half cosine from the warmup target (else initial_learning_rate) down to alpha times it over
    decay_steps, constant afterwards."""

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay",
                 warmup_target=None, warmup_steps=0, **unknown):
        self._refuse(unknown)
        self.initial_learning_rate = self._number("initial_learning_rate", initial_learning_rate)
        self.decay_steps = self._number("decay_steps", decay_steps, above=0)
        self.alpha = self._number("alpha", alpha)
        self.name = name
        self.warmup_target = None if warmup_target is None else self._number("warmup_target", warmup_target)
        self.warmup_steps = self._number("warmup_steps", warmup_steps, minimum=0)

    def _decay(self, step: float, start: float) -> float:
        cosine = 0.5 * (1.0 + math.cos(math.pi * (step / self.decay_steps)))
        return start * ((1 - self.alpha) * cosine + self.alpha)

    def __call__(self, step: int) -> float:
        if self.warmup_target is None:
            return self._decay(min(step, self.decay_steps), self.initial_learning_rate)
        step = min(step, self.decay_steps + self.warmup_steps)
        if step < self.warmup_steps:
            fraction = step / self.warmup_steps
            return (self.warmup_target - self.initial_learning_rate) * fraction + self.initial_learning_rate
        return self._decay(step - self.warmup_steps, self.warmup_target)

    def get_config(self) -> dict:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "alpha": self.alpha, "name": self.name, "warmup_target": self.warmup_target,
                "warmup_steps": self.warmup_steps}


class PiecewiseConstantDecay(LearningRateSchedule):
    """values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <= boundaries[i],
    values[-1] after the last boundary."""

    def __init__(self, boundaries, values, name="PiecewiseConstant", **unknown):
        self._refuse(unknown)
        if not isinstance(boundaries, (list, tuple)) or not isinstance(values, (list, tuple)):
            raise TypeError(f"PiecewiseConstantDecay boundaries and values must be lists, got "
                            f"boundaries={boundaries!r}, values={values!r}")
        if len(boundaries) != len(values) - 1:
            raise ValueError(f"PiecewiseConstantDecay needs one more value than boundaries, got "
                             f"boundaries={list(boundaries)} ({len(boundaries)}) and values={list(values)} "
                             f"({len(values)})")
        self.boundaries = [self._number(f"boundaries[{i}]", b) for i, b in enumerate(boundaries)]
        if any(b >= c for b, c in zip(self.boundaries, self.boundaries[1:])):
            raise ValueError(f"PiecewiseConstantDecay boundaries must increase strictly, got {self.boundaries}")
        self.values = [self._number(f"values[{i}]", v) for i, v in enumerate(values)]
        self.name = name

    def __call__(self, step: int) -> float:
        for boundary, value in zip(self.boundaries, self.values):
            if step <= boundary:
                return value
        return self.values[-1]

    def get_config(self) -> dict:
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


def serialize(schedule: LearningRateSchedule) -> dict:
    """Keras's form: {"class_name": ..., "config": ...} (JSON, as a checkpoint stores it)."""
    return {"class_name": type(schedule).__name__, "config": schedule.get_config()}


def deserialize(config: dict) -> LearningRateSchedule:
    if not isinstance(config, dict) or not isinstance(config.get("config"), dict):
        raise TypeError(f"a learning-rate schedule config must be {{'class_name': ..., 'config': {{...}}}}, "
                        f"got {config!r}")
    name = config.get("class_name")
    if name not in LearningRateSchedule.registry:
        raise ValueError(f"unknown learning-rate schedule {name!r}; expected one of "
                         f"{sorted(LearningRateSchedule.registry)}")
    return LearningRateSchedule.registry[name].from_config(config["config"])


__all__ = ["LearningRateSchedule", "ExponentialDecay", "CosineDecay", "PiecewiseConstantDecay",
           "serialize", "deserialize"]
