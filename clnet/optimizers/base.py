"""What every optimizer shares. A subclass names its kernel, its own arguments with Keras's
defaults, its moment buffers ("slots"), its build switches and its kernel's scalars; one launch
updates every parameter.

A step follows Keras 3's BaseOptimizer.apply(): the gradient (with l1/l2, which are terms of the
loss) is clipped (clipnorm per parameter, global_clipnorm over all, or clipvalue), the decoupled
weight decay w -= weight_decay * lr * w is applied, then the optimizer's own update; the learning
rate (a schedule's value at `iterations`, counted from 0) is the same for both; then `iterations`
goes up by one. All of it happens in the one update kernel; clipping by norm adds two launches
before it (CalcGradientNorm, CalcClipScale in base.cl), which leave the factors on the device.
Inside a LossScaleOptimizer the kernels are built with LOSS_SCALE and take its state on the device
(bind's `loss_scale`): they unscale the gradients first, and skip a step it found non-finite."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..cl.parameters import Parameter, ParameterRange
from ..cl.runtime import Runtime
from ..cl.tensor import Tensor
from ..layers.base import snake_case, unique_name
from . import schedules
from .schedules import LearningRateSchedule

# Elements per work-item of CalcGradientNorm: a block holds local_size times this many.
_NORM_ELEMENTS_PER_ITEM = 16


class Optimizer:
    """The base of clnet's optimizers, Keras 3's formulas, defaults and step order: the gradient
    (with the `l1` and `l2` terms of the loss) is clipped, the decoupled weight decay applied, then
    the optimizer's own update, all in one update launch per step for every parameter; clipping by
    norm adds two launches, which leave the norms on the device.

    Arguments every optimizer takes:

    - `learning_rate=None`: a non-negative float, or a schedule from `clnet.optimizers.schedules`
      (or its config dict), evaluated at `iterations` (0 for the first step), as Keras's; None is
      the optimizer's default (0.001; SGD's 0.01). A float rate can be set later
      (`optimizer.learning_rate = 1e-4`, what `ReduceLROnPlateau` does); a schedule's cannot.
    - `weight_decay=None`: decoupled, w -= weight_decay · lr · w before the step.
    - `clipnorm=None` (each parameter's gradient scaled to at most this norm),
      `global_clipnorm=None` (all gradients together) or `clipvalue=None` (each element clipped to
      ±clipvalue): at most one of them; 0 means no clipping, as in Keras.
    - `l1=0.0`, `l2=0.0`: add l1 · |w| + l2 · w² to the loss, so that their gradient is clipped too
      (clnet's; Keras puts regularizers on the layers, which clnet's layers do not take).
    - `name=None`: a non-empty string, the optimizer's name in its config (and so in a saved
      model's); None is Keras's automatic name, the Keras class's name in snake_case made unique
      as layers' are (`"adam"`, then `"adam_1"`; `"rm_sprop"` for RMSprop), until
      `clnet.utils.clear_session()`.
    - The optimizer's own arguments (momentum, rho, beta_1, ...), with Keras's defaults; an unknown
      one raises a `TypeError`.

    Each optimizer takes `learning_rate`, its own arguments, `weight_decay`, `clipnorm`,
    `clipvalue` and `global_clipnorm` in the order of Keras 3's signature, so they may be given
    by position as in Keras (`SGD(0.01, 0.9)`; AdamW's `weight_decay` comes second, as in Keras);
    `l1`, `l2` and `name` by keyword only (Keras's arguments between `global_clipnorm` and `name`
    are not taken).

    Every number must be finite and non-negative. Keras's `use_ema`, `loss_scale_factor` and
    `gradient_accumulation_steps` are not taken (for Keras's dynamic loss scaling, wrap the
    optimizer in a `LossScaleOptimizer`). `iterations` counts the steps taken;
    `get_config()`/`from_config()` round-trip the arguments and the name."""
    registry: dict[str, type["Optimizer"]] = {}  # by the names get() takes ("adam")
    classes: dict[str, type["Optimizer"]] = {}   # every optimizer by its class name (a config's class_name)
    names: tuple[str, ...] = ()
    source = ""
    kernel_name = ""
    defaults: dict[str, float | bool] = {}  # the optimizer's own arguments, Keras's defaults
    learning_rate_default = 0.001
    name_prefix: str | None = None  # the automatic name's stem where Keras's class name differs from clnet's

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in cls.names:
            Optimizer.registry[name] = cls
        Optimizer.classes[cls.__name__] = cls

    def __init__(self, learning_rate=None, *, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, l1=0.0, l2=0.0, name=None, **hyper):
        kind = type(self).__name__
        unknown = set(hyper) - set(self.defaults)
        if unknown:
            raise TypeError(f"{kind} got unknown argument(s) {sorted(unknown)}; it takes learning_rate, "
                            f"{''.join(k + ', ' for k in self.defaults)}weight_decay, clipnorm, clipvalue, "
                            "global_clipnorm, l1, l2, name")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"{kind} name must be a non-empty string, got {name!r}")
        self.name = unique_name(self.name_prefix or snake_case(kind)) if name is None else name
        self.hyper = {}
        for key, default in self.defaults.items():
            value = hyper.get(key, default)
            if isinstance(default, bool):
                if not isinstance(value, (bool, np.bool_)):
                    raise TypeError(f"{kind} {key} must be True or False, got {value!r}")
                self.hyper[key] = bool(value)
            else:
                self.hyper[key] = _number(kind, key, value)
        self.l1, self.l2 = _number(kind, "l1", l1), _number(kind, "l2", l2)
        self.weight_decay = None if weight_decay is None else _number(kind, "weight_decay", weight_decay)
        clips = {"clipnorm": clipnorm, "clipvalue": clipvalue, "global_clipnorm": global_clipnorm}
        given = {k: v for k, v in clips.items() if v is not None}
        if len(given) > 1:  # as Keras
            raise ValueError(f"{kind} takes only one of clipnorm, clipvalue and global_clipnorm, got "
                             f"{', '.join(f'{k}={v!r}' for k, v in given.items())}")
        # 0 means no clipping, as in Keras.
        self.clipnorm, self.clipvalue, self.global_clipnorm = (
            None if v is None else _number(kind, k, v) for k, v in clips.items())
        self._learning_rate = None
        self.learning_rate = self.learning_rate_default if learning_rate is None else learning_rate
        self.check()
        self.slots = self.slot_initials()   # moment buffer -> initial value, in kernel order
        self.iterations = 0                  # steps taken; a schedule is evaluated at this count
        self.ranges: list[ParameterRange] = []  # set by bind
        self.loss_scale: Tensor | None = None   # set by bind

    # -- what a subclass describes -------------------------------------------------------------
    def check(self) -> None:
        """Range checks beyond non-negative numbers, raising ValueError naming the argument."""

    def slot_initials(self) -> dict[str, float]:
        return {}

    def defines(self) -> dict[str, int]:
        """Build switches of the update kernel (which moment buffers and arguments it has)."""
        return {}

    # A moment buffer's argument in the update kernel, where the kernel names it otherwise.
    slot_arguments: dict[str, str] = {}

    def scalars(self, learning_rate: float) -> dict:
        """The update kernel's arguments after `total` and before l1, l2, clip value and decay, by
        the kernel's names: by default lr, then the hyper-parameters that are numbers (epsilon as
        eps)."""
        return {"lr": learning_rate, **{"eps" if k == "epsilon" else k: v for k, v in self.hyper.items()
                                        if not isinstance(v, bool)}}

    # -- the learning rate ---------------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The rate of the next step: a schedule's value at `iterations`, as Keras reads it."""
        if isinstance(self._learning_rate, LearningRateSchedule):
            return float(self._learning_rate(self.iterations))
        return self._learning_rate

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        if isinstance(value, dict):  # a schedule's config, as get_config writes it
            value = schedules.deserialize(value)
        if isinstance(value, LearningRateSchedule):
            self._learning_rate = value
            return
        if isinstance(self._learning_rate, LearningRateSchedule):
            raise TypeError(f"{type(self).__name__} was created with the learning-rate schedule "
                            f"{self._learning_rate!r}, so its learning rate cannot be set to {value!r}; "
                            "create the optimizer with a float learning_rate to set it")
        self._learning_rate = _number(type(self).__name__, "learning_rate", value)

    @property
    def schedule(self) -> LearningRateSchedule | None:
        return self._learning_rate if isinstance(self._learning_rate, LearningRateSchedule) else None

    # -- the device ----------------------------------------------------------------------------
    @property
    def _clip_norm(self) -> float:
        return self.clipnorm or self.global_clipnorm or 0.0

    def bind(self, ranges: list[ParameterRange], rt: Runtime, dtype, loss_scale: Tensor | None = None) -> None:
        """Allocate the moment buffers for the model's trainable parameters, `ranges` of their
        stores (one, the whole store, for a model that built its layers; see cl/parameters.py),
        and, when clipping by norm, the tables and scratch of the two norm passes. Each range's
        section of a moment starts on the sub-buffer alignment; one range's is the whole moment.
        `loss_scale`: the state of the LossScaleOptimizer this one is inside (its layout:
        loss_scale.cl), which its kernels then read, kept as the attribute `loss_scale`: the
        model's loss kernel multiplies the output gradient by its scale (None: no loss scaling)."""
        # Bound again (a layer frozen or unfrozen): the parameters it trained keep their moments.
        kept = {}
        if self.ranges and getattr(self, "rt", None) is rt and self.dtype == np.dtype(dtype):
            flats = {name: tensor.numpy() for name, tensor in self.moments.items()}
            kept = {id(p): {name: self.moment(p, flat).copy() for name, flat in flats.items()}
                    for r in self.ranges for p in r.parameters}
        self.ranges, self.rt, self.dtype, self.loss_scale = ranges, rt, np.dtype(dtype), loss_scale
        self._moment_starts = _sections([r.size for r in ranges], rt.alignment // self.dtype.itemsize)
        total = self._moment_starts[-1] if len(ranges) > 1 else ranges[0].size if ranges else 0
        self.moments = {name: Tensor((total,), dtype, rt) for name in self.slots}
        for name, initial in self.slots.items():
            self.moments[name].fill(initial)
        if kept:
            for name, tensor in self.moments.items():
                flat = tensor.numpy()
                for p in (p for r in ranges for p in r.parameters if id(p) in kept):
                    self.moment(p, flat)[:] = kept[id(p)][name]
                tensor.write(flat)
        # Each range's moments as the update kernel's arguments, by name.
        range_moments = [{self.slot_arguments.get(name, name): m if len(ranges) == 1 else
                          m.region(start, (r.size,)) for name, m in self.moments.items()}
                         for r, start in zip(ranges, self._moment_starts)]
        clip = self._clip_norm > 0
        program = rt.program(("optimizers/base.cl", self.source), dtype,
                             {**self.defines(), "CLIP_NORM": int(clip), "LOSS_SCALE": int(loss_scale is not None)})
        kernel = rt.kernel(program, self.kernel_name, dtype)
        scaling = {} if loss_scale is None else {"loss_scale": loss_scale}
        clip_arguments = [{} for _ in ranges]
        if clip:
            clip_arguments = self._bind_clip_norm(program, scaling)
        # Each range's update with its arguments named once: the buffers stay; a step gives the
        # scalars, which the user may change between steps (Keras's attributes), by position.
        scalar_names = (*self.scalars(self.learning_rate), "l1", "l2", "clip_value", "decay")
        self._updates = [kernel.bind(scalar_names, weights=r.values, grads=r.grads, **moments, total=r.size,
                                     **clipping, **scaling)
                         for r, moments, clipping in zip(ranges, range_moments, clip_arguments)]

    def keeps(self, parameter: Parameter) -> bool:
        """Whether it keeps moments for `parameter` (one it trains)."""
        return any(p is parameter for r in self.ranges for p in r.parameters)

    def moment(self, parameter: Parameter, flat: np.ndarray) -> np.ndarray:
        """`parameter`'s part of `flat`, a moment read to the host (a view, in device layout)."""
        for r, start in zip(self.ranges, self._moment_starts):
            if any(p is parameter for p in r.parameters):
                first = start + parameter.offset - r.start
                return flat[first:first + parameter.size]
        raise ValueError(f"the optimizer keeps no moments for a parameter of shape {parameter.shape}: it is not "
                         "among the trainable parameters of the model it was compiled with")

    def _bind_clip_norm(self, program, scaling: dict) -> list[dict]:
        """The norm passes' tables. Each range has its own blocks (offsets in the range) and its
        own sections of the partial sums and of the factors, starting aligned so that each launch
        gets views of them; the sections' padding is zero partial sums and unread factors.
        `scaling`: the loss scale argument, if any, of the norm pass. Returns each range's
        clipping arguments of the update kernel."""
        rt, dtype = self.rt, self.dtype
        step, block = rt.alignment // dtype.itemsize, rt.local_size * _NORM_ELEMENTS_PER_ITEM
        per_range = []
        for r in self.ranges:
            blocks, ends = [], []
            for p in r.parameters:
                local = p.offset - r.start
                blocks += [(start, min(start + block, local + p.size)) for start in range(local, local + p.size, block)]
                ends.append(len(blocks))
            per_range.append((blocks, ends))
        block_starts = _sections([len(blocks) for blocks, _ in per_range], step)
        slot_starts = _sections([len(r.parameters) for r in self.ranges], step)
        first_block = [0]
        for (blocks, ends), first, slots, next_first, next_slots in zip(
                per_range, block_starts, slot_starts, block_starts[1:], slot_starts[1:]):
            first_block += [first + end for end in ends[:-1]]
            first_block += [next_first] * (next_slots - slots - len(ends) + 1)  # the last takes the zero padding
        self._partial = Tensor((max(block_starts[-1], 1),), dtype, rt)  # (blocks,) sums of g^2
        self._partial.fill(0)
        self._clip_scale = Tensor((max(slot_starts[-1], 1),), dtype, rt)  # (parameter slots,)
        self._first_block = Tensor.from_numpy(np.array(first_block, np.int32), rt=rt)  # (slots + 1,)
        self._slots = slot_starts[-1]
        # Each range's norm pass and the scale pass with their buffers bound; a step gives the
        # numbers the user may change between steps (Keras's attributes), by position.
        norm_kernel = rt.kernel(program, "CalcGradientNorm", dtype)
        self._norm_launches = []
        for r, (blocks, _), first, slots in zip(self.ranges, per_range, block_starts, slot_starts):
            table = Tensor.from_numpy(np.array(blocks, np.int32).reshape(-1, 2), rt=rt)  # (blocks, [start, end))
            self._norm_launches.append((len(blocks), norm_kernel.bind(
                ("l1", "l2"), weights=r.values, grads=r.grads, blocks=table,
                partial=self._partial.region(first, (len(blocks),)), **scaling)))
        self._scale = rt.kernel(program, "CalcClipScale", dtype).bind(
            ("clip_norm", "global_norm"), partial=self._partial, first_block=self._first_block,
            parameters=self._slots, clip_scale=self._clip_scale)
        return [
            {"clip_scale": self._clip_scale.region(slots, (len(r.parameters),)),
             "starts": Tensor.from_numpy(np.array([p.offset - r.start for p in r.parameters], np.int32), rt=rt),
             "parameters": len(r.parameters)}  # (the update kernel's, with CLIP_NORM: see base.cl)
            for r, slots in zip(self.ranges, slot_starts)]

    def step(self) -> None:
        """One update launch per range (one for a model that built its layers), after the two
        norm passes' launches (one per range, one in all) when clipping by norm."""
        rt = self.rt
        rt.join_side()  # the gradients' last sums may run beside (Runtime.side_queue)
        learning_rate = self.learning_rate  # at `iterations` before the increment, as Keras
        if self._clip_norm > 0:
            size = rt.local_size
            for count, norm in self._norm_launches:
                norm((count * size,), (size,), self.l1, self.l2)
            self._scale((size,), (size,), self._clip_norm, int(self.global_clipnorm is not None))
        decay = (self.weight_decay or 0.0) * learning_rate
        scalars = (*self.scalars(learning_rate).values(), self.l1, self.l2, self.clipvalue or 0.0, decay)
        for r, update in zip(self.ranges, self._updates):
            update(*rt.four_per_item(r.size), *scalars)
        self.iterations += 1

    # -- state besides the moments -------------------------------------------------------------
    def scalar_state(self) -> dict:
        """The optimizer's state besides its moments and `iterations`, by name, read from the
        device: what a checkpoint keeps (as attributes of its optimizer group) and a distribution
        gives every replica. Empty for all but LossScaleOptimizer (its scale and counter)."""
        return {}

    def set_scalar_state(self, values: dict) -> None:
        """Set what scalar_state() gives; a ValueError or TypeError names a value that is not valid."""
        if values:
            raise ValueError(f"{type(self).__name__} keeps no state besides its moments and iterations, got "
                             f"{sorted(values)}")

    # -- config --------------------------------------------------------------------------------
    def get_config(self) -> dict:
        schedule = self.schedule
        return {"name": self.name,
                "learning_rate": self._learning_rate if schedule is None else schedules.serialize(schedule),
                **self.hyper, "weight_decay": self.weight_decay, "clipnorm": self.clipnorm,
                "global_clipnorm": self.global_clipnorm, "clipvalue": self.clipvalue, "l1": self.l1, "l2": self.l2}

    @classmethod
    def from_config(cls, config: dict) -> "Optimizer":
        """The optimizer get_config describes, its name included; a schedule's dict is rebuilt."""
        return cls(**config)

    def __repr__(self) -> str:
        config = self.get_config()
        config["learning_rate"] = self.schedule or config["learning_rate"]
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in config.items() if k != 'name')})"


def _number(kind: str, argument: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{kind} {argument} must be a non-negative number, got {value!r}")
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{kind} {argument} must be a non-negative number, got {value!r}")
    return float(value)


def _sections(sizes: list[int], step: int) -> list[int]:
    """Where sections of `sizes` start when each starts on a multiple of `step`, and their end."""
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + -(-size // step) * step)
    return starts


def get(identifier) -> Optimizer:
    """An optimizer from a name, an Optimizer (returned as it is) or a dict, as
    `compile(optimizer=...)` takes it. Names (any case): `"sgd"`, `"momentum"`, `"adagrad"`,
    `"rmsprop"`, `"adadelta"`, `"adam"`, `"adamw"`, each with its defaults. A dict is Keras's
    serialized form, `{"class_name": "Adam", "config": get_config()}` (a class name, any case,
    `"LossScaleOptimizer"` too, whose config holds its inner optimizer's dict), or a `get_config()`
    dict whose `"name"` is one of those names (the automatic names "sgd", "adam", ..., and what
    clnet wrote before optimizers kept a name of their own); anything else raises a `ValueError`."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, dict):
        if "class_name" in identifier:
            classes = {name.lower(): cls for name, cls in Optimizer.classes.items()}
            cls = classes.get(str(identifier["class_name"]).lower())
            if cls is None:
                raise ValueError(f"unknown optimizer class_name {identifier['class_name']!r}; expected one "
                                 f"of {sorted(Optimizer.classes)} (any case)")
            return cls.from_config(dict(identifier.get("config") or {}))
        cls = Optimizer.registry.get(str(identifier.get("name")).lower())
        if cls is None:  # a name of the user's says nothing of the class
            raise ValueError(f"optimizer config {identifier!r}: its name {identifier.get('name')!r} is not "
                             f"an optimizer's ({sorted(Optimizer.registry)}); give {{'class_name': ..., "
                             "'config': ...}, as Keras serializes one, or call the class's from_config")
        return cls.from_config(dict(identifier))
    if isinstance(identifier, str) and identifier.lower() in Optimizer.registry:
        return Optimizer.registry[identifier.lower()]()
    raise ValueError(f"unknown optimizer {identifier!r}; expected one of {sorted(Optimizer.registry)} "
                     "or an Optimizer")
