"""What every optimizer shares. A subclass names its kernel, its moment buffers ("slots") and
its hyper-parameters in the order the kernel takes them; one launch updates every parameter."""
from __future__ import annotations

import numpy as np

from ..cl.parameters import ParameterStore
from ..cl.tensor import Tensor


class Optimizer:
    registry: dict[str, type["Optimizer"]] = {}
    names: tuple[str, ...] = ()
    source = ""
    kernel_name = ""
    slots: dict[str, float] = {}       # moment buffer -> initial value
    defaults: dict[str, float] = {}    # hyper-parameters after learning_rate, in kernel order
    learning_rate_default = 0.001

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in cls.names:
            Optimizer.registry[name] = cls

    def __init__(self, learning_rate=None, l1=0.0, l2=0.0, **hyper):
        unknown = set(hyper) - set(self.defaults)
        if unknown:
            raise TypeError(f"{type(self).__name__} got unknown argument(s) {sorted(unknown)}; it takes "
                            f"learning_rate, {', '.join(self.defaults)}{', ' if self.defaults else ''}l1, l2")
        self.learning_rate = self.learning_rate_default if learning_rate is None else learning_rate
        values = {"learning_rate": self.learning_rate, "l1": l1, "l2": l2, **self.defaults, **hyper}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not value >= 0:
                raise ValueError(f"{type(self).__name__} {key} must be a non-negative number, got {value!r}")
        self.learning_rate, self.l1, self.l2 = float(self.learning_rate), float(l1), float(l2)
        self.hyper = {k: float(values[k]) for k in self.defaults}
        self.iterations = 0
        self.store: ParameterStore | None = None

    def bind(self, store: ParameterStore) -> None:
        """Allocate the moment buffers for every parameter in the store."""
        self.store = store
        rt, dtype = store.rt, store.dtype
        self.moments = {name: Tensor((store.size,), dtype, rt) for name in self.slots}
        for name, initial in self.slots.items():
            self.moments[name].fill(initial)
        self._kernel = rt.kernel(rt.program(("optimizers/base.cl", self.source), dtype), self.kernel_name, dtype)

    def scalars(self) -> tuple:
        """The kernel's arguments after `total` and the learning rate, before l1 and l2."""
        return tuple(self.hyper.values())

    def step(self) -> None:
        self.iterations += 1
        store = self.store
        self._kernel((store.size // 4,), None, store.values, store.grads, *self.moments.values(),
                     store.size, self.learning_rate, *self.scalars(), self.l1, self.l2)

    def get_config(self) -> dict:
        return {"name": self.names[0], "learning_rate": self.learning_rate, **self.hyper,
                "l1": self.l1, "l2": self.l2}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v:g}' for k, v in self.get_config().items() if k != 'name')})"


def get(identifier) -> Optimizer:
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, dict):
        config = dict(identifier)
        return get(config.pop("name")).__class__(**config)
    if isinstance(identifier, str) and identifier.lower() in Optimizer.registry:
        return Optimizer.registry[identifier.lower()]()
    raise ValueError(f"unknown optimizer {identifier!r}; expected one of {sorted(Optimizer.registry)} "
                     "or an Optimizer")
