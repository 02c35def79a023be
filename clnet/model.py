"""Sequential: a stack of layers, compiled with a loss and an optimizer, trained on the device."""
from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import closing

import numpy as np
from tqdm.auto import tqdm

from . import losses, optimizers
from .callbacks import Callback, CallbackList, History
from .cl import runtime as cl_runtime
from .cl.parameters import ParameterStore
from .cl.tensor import Tensor
from . import data
from .data import ArrayFeed, Batches, Stream, checked, is_stream
from .layers import Layer

METRICS = {"accuracy": "accuracy", "acc": "accuracy"}
UNKNOWN_STEPS_REFRESH = 50  # progress-bar reads per epoch of unknown length: one every this many steps
_global_seed: int | None = None


def set_seed(seed: int) -> None:
    """Seed for models created afterwards: weight initialisation and shuffling repeat exactly."""
    global _global_seed
    _global_seed = _check_int("seed", seed, minimum=0)


class NotCompiledError(ValueError, RuntimeError):
    pass


class Sequential:
    def __init__(self, layers=None, name: str | None = None, floatx: str | None = None, seed: int | None = None):
        self.name = name or "sequential"
        self.dtype = cl_runtime.floatx_dtype(floatx)
        if seed is None:
            seed = _global_seed if _global_seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.seed = _check_int("seed", seed, minimum=0)
        self.layers: list[Layer] = []
        self.built = False
        self.compiled = False
        self.stop_training = False
        self.epoch = 0  # epochs completed, for checkpoints
        for layer in layers or []:
            self.add(layer)

    # -- construction ------------------------------------------------------------------------
    def add(self, layer: Layer) -> None:
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add expects a Layer, got {type(layer).__name__}")
        if self.built:
            raise RuntimeError("cannot add layers to a model that is already built")
        if layer.name is None:
            base = type(layer).__name__.lower()
            taken = {l.name for l in self.layers}
            layer.name = base if base not in taken else next(
                f"{base}_{i}" for i in range(1, len(taken) + 2) if f"{base}_{i}" not in taken)
        self.layers.append(layer)

    @property
    def input_shape(self):
        first = self.layers[0] if self.layers else None
        return None if first is None else first.input_shape

    def build(self, input_shape) -> None:
        """Build every layer for samples of `input_shape` (without the batch axis) on the current device."""
        if not self.layers:
            raise ValueError("the model has no layers; add some before building it")
        self.rt = cl_runtime.runtime()
        self.rt.check_dtype(self.dtype)
        self.store = ParameterStore(self.rt, self.dtype)
        shape = tuple(input_shape)
        for index, layer in enumerate(self.layers):
            shape = layer.build(shape, self.store, np.random.default_rng([self.seed, index]))
        self.store.allocate()
        self.output_shape = shape
        self.capacity = 0
        self.built = True
        self._check_ready()

    def _check_ready(self):
        if self.built and self.compiled:
            self.optimizer.bind(self.store)
            self._fold = self.loss.can_fold(self.layers[-1].output_activation)
            self._loss_kernel = self.rt.kernel(self.loss.program(self.rt, self.dtype), "CalcOutputGradient", self.dtype)
            self._reduce = self.rt.kernel(self.loss.program(self.rt, self.dtype), "ReduceMetrics", self.dtype)
            self._totals = Tensor((2,), self.dtype, self.rt)
            self._stats_size = 0
            self._output_grad = None

    def compile(self, optimizer="adam", loss="categorical_crossentropy", metrics=None) -> None:
        self.optimizer = optimizers.get(optimizer)
        self.loss = losses.get(loss)
        metrics = list(metrics or [])
        for metric in metrics:
            if metric not in METRICS:
                raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS)}")
        self.metrics = sorted({METRICS[m] for m in metrics})
        self.compiled = True
        self._check_ready()

    # -- device buffers ----------------------------------------------------------------------
    def _ensure_capacity(self, rows: int) -> None:
        if rows > self.capacity:
            for layer in self.layers:
                layer.allocate(rows)
            self.capacity = rows
        if self.compiled and (self._output_grad is None or self._output_grad.shape[0] < self.capacity):
            self._output_grad = Tensor((self.capacity, *self.output_shape), self.dtype, self.rt)

    def _ensure_stats(self, samples: int) -> None:
        """Per-sample loss and accuracy for `samples`. A stream's epoch grows them as it goes, at
        least doubling, with a device-side copy of what the epoch has written so far."""
        if samples > self._stats_size:
            size = max(samples, 2 * self._stats_size)
            grown = Tensor((size,), self.dtype, self.rt), Tensor((size,), self.dtype, self.rt)
            if self._stats_size:
                for old, new in zip((self._sample_loss, self._sample_hit), grown):
                    cl_runtime.cl.enqueue_copy(self.rt.queue, new.buffer, old.buffer, byte_count=old.nbytes)
            self._sample_loss, self._sample_hit = grown
            self._stats_size = size

    def _needs_input_grad(self, want_input_grad: bool) -> list[bool]:
        needs, seen_parameters = [], want_input_grad
        for layer in self.layers:
            needs.append(seen_parameters)
            seen_parameters = seen_parameters or bool(layer.parameters)
        return needs

    # -- one batch ---------------------------------------------------------------------------
    def _forward(self, x: Tensor, rows: int) -> Tensor:
        for layer in self.layers:
            x = layer.forward(x, rows)
        return x

    def _loss(self, output: Tensor, target: Tensor, rows: int, first: int) -> None:
        """Output gradient and per-sample loss/accuracy at [first, first + rows)."""
        cols = int(np.prod(self.output_shape))
        self._loss_kernel((rows,), None, target, output, self._output_grad, self._sample_loss, self._sample_hit,
                          first, cols, self.loss.mode, int(self._fold), 1.0 / rows)

    def _backward(self, rows: int, input_grads: list[bool]) -> Tensor | None:
        grad = self._output_grad
        for i in range(len(self.layers) - 1, -1, -1):
            folded = self._fold and i == len(self.layers) - 1
            grad = self.layers[i].backward(grad, rows, input_grads[i], activation_done=folded)
        return grad

    def _totals_now(self, count: int) -> tuple[float, float]:
        """Sum of per-sample loss and accuracy over [0, count): the only read of a training loop."""
        self._reduce((self.rt.local_size,), (self.rt.local_size,), self._sample_loss, self._sample_hit,
                     count, self._totals)
        loss, hits = self._totals.numpy()
        return float(loss), float(hits)

    def _logs(self, count: int, prefix: str = "") -> dict:
        loss, hits = self._totals_now(count)
        logs = {prefix + "loss": loss / count}
        if "accuracy" in self.metrics:
            logs[prefix + "accuracy"] = hits / count
        return logs

    # -- public training API -----------------------------------------------------------------
    def fit(self, x, y=None, batch_size=32, epochs=1, verbose=1, callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, initial_epoch=0, steps_per_epoch=None,
            validation_steps=None) -> History:
        """x, y: arrays (a memmap too); or x alone, a generator or PyDataset giving (x, y) batches
        (batch_size is then not used). An epoch is steps_per_epoch batches if given, else all of
        the data (a generator: until it is exhausted)."""
        self._require_compiled("fit")
        batch_size = _check_int("batch_size", batch_size, minimum=1)
        epochs = _check_int("epochs", epochs, minimum=0)
        initial_epoch = _check_int("initial_epoch", initial_epoch, minimum=0)
        steps_per_epoch = _check_steps("steps_per_epoch", steps_per_epoch)
        validation_steps = _check_steps("validation_steps", validation_steps)
        if not isinstance(validation_split, (int, float)) or not 0 <= validation_split < 1:
            raise ValueError(f"validation_split must be a number in [0, 1), got {validation_split!r}")
        if validation_split and validation_data is None:
            if is_stream(x):
                raise ValueError("validation_split needs arrays, but x is a generator or PyDataset: pass "
                                 "validation_data instead")
            x, y = self._prepare(x, y)
            split = len(x) - int(len(x) * validation_split)  # Keras: the last samples, before shuffling
            if split < 1 or split == len(x):
                raise ValueError(f"validation_split={validation_split} leaves no training or no validation "
                                 f"samples out of {len(x)}")
            train = self._array_feed(x[:split], y[:split], batch_size, steps_per_epoch, shuffle)
            val = self._array_feed(x[split:], y[split:], batch_size, validation_steps, False,
                                   reserved=train.batches.device_bytes)
        else:
            train = self._feed(x, y, batch_size, steps_per_epoch, shuffle=shuffle)
            val = None
        if validation_data is not None:
            if is_stream(validation_data):
                val_x, val_y = validation_data, None
            elif isinstance(validation_data, (tuple, list)) and len(validation_data) == 2:
                val_x, val_y = validation_data
            else:
                raise ValueError("validation_data must be a tuple (x_val, y_val), a generator or a PyDataset")
            reserved = train.batches.device_bytes if isinstance(train, ArrayFeed) else 0
            val = self._feed(val_x, val_y, batch_size, validation_steps, name="validation_data", reserved=reserved)
        input_grads = self._needs_input_grad(False)
        steps = train.steps

        history = History()
        callbacks = CallbackList([*(callbacks or []), history], self,  # History last, as Keras: it sees what others add
                                 {"epochs": epochs, "steps": steps, "batch_size": batch_size, "verbose": verbose})
        self.stop_training = False
        callbacks.on_train_begin({})
        for epoch in range(initial_epoch, epochs):
            if train.exhausted:  # a generator read to its end in an earlier epoch
                data.ran_out("x")
                break
            callbacks.on_epoch_begin(epoch, {})
            started = time.perf_counter()
            seen = 0
            with tqdm(total=steps, desc=f"Epoch {epoch + 1}/{epochs}", unit="batch", file=sys.stderr,
                      disable=verbose != 1, leave=True, dynamic_ncols=True) as bar:
                refresh = max(1, steps // 10) if steps else UNKNOWN_STEPS_REFRESH
                with closing(train.epoch(epoch)) as batches:
                    for step, (rows, xb, yb) in enumerate(batches):
                        callbacks.on_batch_begin(step, {"batch": step, "size": rows})
                        self._ensure_stats(seen + rows)
                        self._loss(self._forward(xb, rows), yb, rows, seen)
                        self._backward(rows, input_grads)
                        self.optimizer.step()
                        seen += rows
                        callbacks.on_batch_end(step, {"batch": step, "size": rows})
                        bar.update(1)
                        if verbose == 1 and ((step + 1) % refresh == 0 or step + 1 == steps):
                            bar.set_postfix(self._logs(seen), refresh=False)
                if not seen:
                    if epoch == initial_epoch:
                        raise ValueError("x (a generator) yielded no batches")
                    data.ran_out("x")
                    break
                logs = self._logs(seen)
                if val is not None:
                    logs.update(self._evaluate_feed(val, epoch, prefix="val_"))
                bar.set_postfix(logs, refresh=False)
            self.epoch = epoch + 1
            if verbose == 2:
                print(f"Epoch {epoch + 1}/{epochs} - {time.perf_counter() - started:.2f}s - " +
                      " - ".join(f"{k}: {v:.4f}" for k, v in logs.items()), file=sys.stderr)
            callbacks.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        callbacks.on_train_end({})
        self.history = history
        return history

    def _evaluate_feed(self, feed, epoch: int = 0, prefix: str = "") -> dict:
        seen = 0
        with closing(feed.epoch(epoch)) as batches:
            for rows, xb, yb in batches:
                self._ensure_stats(seen + rows)
                self._loss(self._forward(xb, rows), yb, rows, seen)
                seen += rows
        if not seen:  # only a generator can give nothing
            raise ValueError(f"{feed.name} (a generator) yielded no batches in epoch {epoch + 1}; a generator "
                             "is read once: give a generator that does not end and steps, or a PyDataset")
        return self._logs(seen, prefix)

    def evaluate(self, x, y=None, batch_size=32, verbose=0, steps=None):
        """The mean loss (and accuracy, if compiled with it) over (x, y) or the batches of a
        generator / PyDataset (the first `steps` of them if given): loss or [loss, accuracy]."""
        self._require_compiled("evaluate")
        batch_size = _check_int("batch_size", batch_size, minimum=1)
        logs = self._evaluate_feed(self._feed(x, y, batch_size, _check_steps("steps", steps)))
        if verbose:
            print(" - ".join(f"{k}: {v:.4f}" for k, v in logs.items()), file=sys.stderr)
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=32, verbose=0, steps=None) -> np.ndarray:
        """Outputs for the samples of x, or of the batches of a generator / PyDataset (each x,
        (x,) or (x, y)), in order."""
        batch_size = _check_int("batch_size", batch_size, minimum=1)
        feed = self._feed(x, None, batch_size, _check_steps("steps", steps), targets=False)
        result = None if feed.samples is None else np.empty((feed.samples, *self.output_shape), self.dtype)
        parts, seen = [], 0
        with closing(feed.epoch(0)) as batches:
            for rows, xb, _ in batches:
                output = self._forward(xb, rows)
                part = np.empty((rows, *self.output_shape), self.dtype) if result is None else result[seen:seen + rows]
                # Reads queue behind the kernels without waiting; finish() below waits for them all.
                cl_runtime.cl.enqueue_copy(self.rt.queue, part.reshape(rows, -1), output.buffer, is_blocking=False)
                parts.append(part)
                seen += rows
        if not seen:
            raise ValueError("x (a generator) yielded no batches")
        self.rt.queue.finish()
        return result if result is not None else np.concatenate(parts)

    def compute_gradients(self, x, y):
        """(loss, gradients in get_weights() layout, dL/dx) for one batch holding all of x."""
        self._require_compiled("compute_gradients")
        x, y = self._prepare(x, y)
        rows = len(x)
        self._ensure_capacity(rows)
        self._ensure_stats(rows)
        xb, yb = Batches(self.rt, x, y, self.capacity, self.dtype).batch(0, rows)
        self._loss(self._forward(xb, rows), yb, rows, 0)
        input_grad = self._backward(rows, self._needs_input_grad(True))
        loss = self._totals_now(rows)[0] / rows
        grads = []
        for layer in self.layers:
            grads.extend(layer.gradients())
        return loss, grads, input_grad.numpy()[:rows].reshape(x.shape[0], *self.input_shape)

    # -- input checks and feeds ------------------------------------------------------------------
    def _feed(self, x, y, batch_size: int, steps: int | None, name: str = "", targets: bool = True,
              shuffle: bool = False, reserved: int = 0):
        """The batches of arrays (x, y), or of a generator / PyDataset x, as fit, evaluate and
        predict iterate them; `name` prefixes the arguments in errors (validation_data), and
        `reserved` bytes of the device budget are taken already (by the training data)."""
        names = (f"{name} x".strip(), f"{name} y".strip())
        if is_stream(x):
            if y is not None:
                kind = "generator" if isinstance(x, Iterator) else "PyDataset"
                raise ValueError(f"{name or 'x'} is a {kind}, which gives the targets in its (x, y) batches: "
                                 f"{names[1]} must not be passed, got {type(y).__name__}")

            def prepare(xb, yb, step):
                where = f" in batch {step}"
                if not targets:
                    return self._prepare_x(xb, names[0] + where), None
                return self._prepare(xb, yb, (names[0] + where, names[1] + where))

            stream = Stream(cl_runtime.runtime() if not self.built else self.rt, x, name or "x", prepare,
                            self._reserve, self.dtype, targets, steps, self.seed if shuffle else None)
            if not self.built:
                stream.peek()
            return stream
        if not targets:
            return self._array_feed(self._prepare_x(x, names[0]), None, batch_size, steps, shuffle, reserved)
        if y is None:
            raise ValueError(f"{names[1]} (the targets) is required when {names[0]} is an array; "
                             "or pass x as a generator or PyDataset of (x, y) batches")
        return self._array_feed(*self._prepare(x, y, names), batch_size, steps, shuffle, reserved)

    def _array_feed(self, x, y, batch_size, steps, shuffle, reserved=0) -> ArrayFeed:
        """Batches of prepared arrays: x (samples, features), y (samples, outputs) or None."""
        capacity = self._reserve(min(batch_size, len(x)))
        budget = data.device_budget(self.rt) - reserved
        if y is not None:
            self._ensure_stats(len(x))
        return ArrayFeed(Batches(self.rt, x, y, capacity, self.dtype, budget), batch_size, steps,
                         self.seed if shuffle else None, self._reserve)

    def _reserve(self, rows: int) -> int:
        """Buffers for batches of `rows`; the capacity every batch tensor must have (the first
        layer reads x^T with that leading dimension)."""
        self._ensure_capacity(rows)
        return self.capacity

    def _require_compiled(self, what: str) -> None:
        if not self.compiled:
            raise NotCompiledError(f"call compile(optimizer, loss) before {what}()")

    def _prepare_x(self, x, name: str = "x") -> np.ndarray:
        """x checked and viewed as (samples, features), still in its own dtype: a memmap is not read."""
        x = checked(x, name)
        if x.ndim < 2 or len(x) == 0:
            raise ValueError(f"{name} must have a batch axis and at least one sample, got shape {x.shape}")
        expected = self.input_shape
        if not self.built:
            if expected is not None and tuple(x.shape[1:]) != tuple(expected):
                raise ValueError(f"{name} has shape {x.shape}, but the model's first layer expects samples of "
                                 f"shape {tuple(expected)}")
            self.build(x.shape[1:])
        elif tuple(x.shape[1:]) != tuple(self.layers[0].input_shape):
            raise ValueError(f"{name} has shape {x.shape}, but the model expects (samples, "
                             f"{', '.join(map(str, self.layers[0].input_shape))})")
        return x.reshape(len(x), -1)

    def _prepare(self, x, y, names=("x", "y")):
        x = self._prepare_x(x, names[0])
        y = self.loss.prepare_targets(y, self.output_shape, self.dtype, names[1])
        if len(x) != len(y):
            raise ValueError(f"{names[0]} has {len(x)} samples but {names[1]} has {len(y)}; they must match")
        return x, np.ascontiguousarray(y)

    # -- weights, config, summary --------------------------------------------------------------
    def get_weights(self) -> list[np.ndarray]:
        return [w for layer in self.layers for w in layer.get_weights()]

    def set_weights(self, weights) -> None:
        weights = list(weights)
        expected = sum(len(layer.get_weights()) for layer in self.layers)
        if len(weights) != expected:
            raise ValueError(f"set_weights expects {expected} arrays, got {len(weights)}")
        for layer in self.layers:
            count = len(layer.get_weights())
            layer.set_weights(weights[:count])
            weights = weights[count:]

    def save(self, path) -> None:
        """Everything needed to resume training, in one HDF5 file (see docs/checkpoint-format.md)."""
        from .saving import save_model
        save_model(self, path)

    def save_weights(self, path) -> None:
        from .saving import save_weights
        save_weights(self, path)

    def load_weights(self, path) -> None:
        from .saving import load_weights
        load_weights(self, path)

    def count_params(self) -> int:
        return sum(layer.count_params() for layer in self.layers)

    def get_config(self) -> dict:
        return {"name": self.name, "floatx": self.dtype.name, "seed": self.seed,
                "input_shape": None if not self.built else list(self.layers[0].input_shape),
                "layers": [{"class_name": type(l).__name__, "config": l.get_config()} for l in self.layers]}

    @classmethod
    def from_config(cls, config: dict, floatx: str | None = None) -> "Sequential":
        layers = []
        for entry in config["layers"]:
            if entry["class_name"] not in Layer.registry:
                raise ValueError(f"unknown layer class {entry['class_name']!r}")
            layers.append(Layer.registry[entry["class_name"]].from_config(entry["config"]))
        model = cls(layers, name=config["name"], floatx=floatx or config["floatx"], seed=config["seed"])
        if config.get("input_shape") is not None:
            model.build(config["input_shape"])
        return model

    def summary(self, file=None) -> None:
        file = file or sys.stdout
        if not self.built:
            print(f'Model "{self.name}" is not built yet: call build(input_shape) or fit first', file=file)
            return
        device = self.rt.info
        print(f'Model "{self.name}"  ({self.dtype.name} on {device.name})', file=file)
        print(f"{'Layer (type)':<32}{'Output shape':<20}{'Params':>10}", file=file)
        print("=" * 62, file=file)
        for layer in self.layers:
            print(f"{layer.name + ' (' + type(layer).__name__ + ')':<32}{str((None, *layer.output_shape)):<20}"
                  f"{layer.count_params():>10,}", file=file)
        print("=" * 62, file=file)
        print(f"Total params: {self.count_params():,}", file=file)


def _check_steps(argument: str, value) -> int | None:
    return None if value is None else _check_int(argument, value, minimum=1)


def _check_int(argument: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{argument} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{argument} must be >= {minimum}, got {value}")
    return int(value)
