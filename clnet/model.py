"""Sequential: a stack of layers, compiled with a loss and an optimizer, trained on the device."""
from __future__ import annotations

import sys
import time

import numpy as np
from tqdm.auto import tqdm

from . import losses, optimizers
from .callbacks import Callback, CallbackList, History
from .cl import runtime as cl_runtime
from .cl.parameters import ParameterStore
from .cl.tensor import Tensor
from .data import Batches
from .layers import Layer
from .losses.base import as_numeric

METRICS = {"accuracy": "accuracy", "acc": "accuracy"}
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
        if samples > self._stats_size:
            self._sample_loss = Tensor((samples,), self.dtype, self.rt)
            self._sample_hit = Tensor((samples,), self.dtype, self.rt)
            self._stats_size = samples

    def _needs_input_grad(self, want_input_grad: bool) -> list[bool]:
        needs, seen_parameters = [], want_input_grad
        for layer in self.layers:
            needs.append(seen_parameters)
            seen_parameters = seen_parameters or any(p.trainable for p in layer.parameters)
        return needs

    # -- one batch ---------------------------------------------------------------------------
    def _forward(self, x: Tensor, rows: int, training: bool = False) -> Tensor:
        # The mode every layer sees: fit trains (Dropout drops, BatchNormalization normalises with
        # and updates batch statistics); evaluate, predict and validation infer. `step`, the
        # optimizer's update count (restored from a checkpoint), seeds per-step randomness, so a
        # resumed run draws the masks an uninterrupted one does.
        step = self.optimizer.iterations if training else 0
        for layer in self.layers:
            layer.training, layer.step = training, step
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
    def fit(self, x, y, batch_size=32, epochs=1, verbose=1, callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, initial_epoch=0) -> History:
        self._require_compiled("fit")
        batch_size = _check_int("batch_size", batch_size, minimum=1)
        epochs = _check_int("epochs", epochs, minimum=0)
        initial_epoch = _check_int("initial_epoch", initial_epoch, minimum=0)
        if not isinstance(validation_split, (int, float)) or not 0 <= validation_split < 1:
            raise ValueError(f"validation_split must be a number in [0, 1), got {validation_split!r}")
        x, y = self._prepare(x, y)
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise ValueError("validation_data must be a tuple (x_val, y_val)")
            x_val, y_val = self._prepare(*validation_data, names=("validation_data x", "validation_data y"))
        elif validation_split:
            split = len(x) - int(len(x) * validation_split)  # Keras: the last samples, before shuffling
            if split < 1 or split == len(x):
                raise ValueError(f"validation_split={validation_split} leaves no training or no validation "
                                 f"samples out of {len(x)}")
            x, x_val, y, y_val = x[:split], x[split:], y[:split], y[split:]
        else:
            x_val = None
        rows_max = min(batch_size, len(x))
        self._ensure_capacity(rows_max)
        self._ensure_stats(len(x) if x_val is None else max(len(x), len(x_val)))
        train = Batches(self.rt, x, y, rows_max)
        val = None if x_val is None else Batches(self.rt, x_val, y_val, min(batch_size, len(x_val)))
        input_grads = self._needs_input_grad(False)
        steps = -(-len(x) // batch_size)

        history = History()
        callbacks = CallbackList([*(callbacks or []), history], self,  # History last, as Keras: it sees what others add
                                 {"epochs": epochs, "steps": steps, "batch_size": batch_size, "verbose": verbose})
        self.stop_training = False
        callbacks.on_train_begin({})
        for epoch in range(initial_epoch, epochs):
            callbacks.on_epoch_begin(epoch, {})
            if shuffle:
                # The order depends only on (seed, epoch), so a resumed run shuffles as an uninterrupted one.
                train.order(np.random.default_rng([self.seed, 1, epoch]).permutation(len(x)))
            started = time.perf_counter()
            bar = tqdm(total=steps, desc=f"Epoch {epoch + 1}/{epochs}", unit="batch", file=sys.stderr,
                       disable=verbose != 1, leave=True, dynamic_ncols=True)
            refresh = max(1, steps // 10)
            for step in range(steps):
                first = step * batch_size
                rows = min(batch_size, len(x) - first)
                callbacks.on_batch_begin(step, {"batch": step, "size": rows})
                xb, yb = train.batch(first, rows)
                self._loss(self._forward(xb, rows, training=True), yb, rows, first)
                self._backward(rows, input_grads)
                self.optimizer.step()
                callbacks.on_batch_end(step, {"batch": step, "size": rows})
                bar.update(1)
                if verbose == 1 and ((step + 1) % refresh == 0 or step + 1 == steps):
                    bar.set_postfix(self._logs(first + rows), refresh=False)
            logs = self._logs(len(x))
            if val is not None:
                logs.update(self._evaluate_batches(val, batch_size, prefix="val_"))
            bar.set_postfix(logs, refresh=False)
            bar.close()
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

    def _evaluate_batches(self, batches: Batches, batch_size: int, prefix: str = "") -> dict:
        rows_max = min(batch_size, batches.samples)
        for first in range(0, batches.samples, batch_size):
            rows = min(rows_max, batches.samples - first)
            xb, yb = batches.batch(first, rows)
            self._loss(self._forward(xb, rows), yb, rows, first)
        return self._logs(batches.samples, prefix)

    def evaluate(self, x, y, batch_size=32, verbose=0):
        """The mean loss (and accuracy, if compiled with it) over (x, y): loss or [loss, accuracy]."""
        self._require_compiled("evaluate")
        batch_size = _check_int("batch_size", batch_size, minimum=1)
        x, y = self._prepare(x, y)
        rows_max = min(batch_size, len(x))
        self._ensure_capacity(rows_max)
        self._ensure_stats(len(x))
        logs = self._evaluate_batches(Batches(self.rt, x, y, rows_max), batch_size)
        if verbose:
            print(" - ".join(f"{k}: {v:.4f}" for k, v in logs.items()), file=sys.stderr)
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=32, verbose=0) -> np.ndarray:
        batch_size = _check_int("batch_size", batch_size, minimum=1)
        x = self._prepare_x(x)
        rows_max = min(batch_size, len(x))
        self._ensure_capacity(rows_max)
        no_targets = np.zeros((len(x), 1), self.dtype)
        batches = Batches(self.rt, x, no_targets, rows_max)
        result = np.empty((len(x), *self.output_shape), self.dtype)
        flat = result.reshape(len(x), -1)
        for first in range(0, len(x), batch_size):
            rows = min(rows_max, len(x) - first)
            output = self._forward(batches.batch(first, rows)[0], rows)
            # Reads queue behind the kernels without waiting; the last one waits for them all.
            cl_runtime.cl.enqueue_copy(self.rt.queue, flat[first:first + rows], output.buffer,
                                       is_blocking=first + rows == len(x))
        return result

    def compute_gradients(self, x, y):
        """(loss, gradients in get_weights() layout, dL/dx) for one batch holding all of x, in
        training mode at the current step (the same Dropout masks each call; a non-trainable
        weight's gradient is zeros)."""
        self._require_compiled("compute_gradients")
        x, y = self._prepare(x, y)
        rows = len(x)
        self._ensure_capacity(rows)
        self._ensure_stats(rows)
        xb, yb = Batches(self.rt, x, y, rows).batch(0, rows)
        self._loss(self._forward(xb, rows, training=True), yb, rows, 0)
        input_grad = self._backward(rows, self._needs_input_grad(True))
        loss = self._totals_now(rows)[0] / rows
        grads = []
        for layer in self.layers:
            grads.extend(layer.gradients())
        return loss, grads, input_grad.numpy()[:rows].reshape(x.shape[0], *self.input_shape)

    # -- input checks --------------------------------------------------------------------------
    def _require_compiled(self, what: str) -> None:
        if not self.compiled:
            raise NotCompiledError(f"call compile(optimizer, loss) before {what}()")

    def _prepare_x(self, x, name: str = "x") -> np.ndarray:
        x = as_numeric(x, name)
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
        return np.ascontiguousarray(x.reshape(len(x), -1), dtype=self.dtype)

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
        total = self.count_params()
        trainable = sum(w.size for layer in self.layers
                        for p, w in zip(layer.parameters, layer.get_weights()) if p.trainable)
        print(f"Total params: {total:,}", file=file)
        print(f"Trainable params: {trainable:,}", file=file)
        print(f"Non-trainable params: {total - trainable:,}", file=file)


def _check_int(argument: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{argument} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{argument} must be >= {minimum}, got {value}")
    return int(value)
