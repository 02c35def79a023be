"""Callbacks with Keras's hooks, names and arguments."""
from __future__ import annotations

import csv
import inspect
import math
import numbers
import os
import sys
import warnings

import numpy as np

from .stacklevel import outside_clnet


class Callback:
    """Keras's `Callback`, the base class: override the hooks you need. `self.model` is set before
    training starts, and `self.params` holds fit's `epochs`, `steps`, `batch_size` and `verbose`.
    The hooks, as Keras 3 calls them: `on_train_begin`/`end`, `on_epoch_begin`/`end(epoch, logs)`,
    `on_train_batch_begin`/`end(batch, logs)` (also by their aliases `on_batch_begin`/`end`),
    evaluate's (and fit's validation's) `on_test_*` and predict's `on_predict_*`. An epoch's `logs`
    hold its loss and metrics (`val_` ones after validation); a callback may set
    `self.model.stop_training = True` to end `fit` after the epoch."""

    def __init__(self):
        self.model = None
        self.params: dict = {}

    def set_model(self, model) -> None:
        self.model = model

    def on_train_begin(self, logs=None): ...
    def on_train_end(self, logs=None): ...
    def on_epoch_begin(self, epoch, logs=None): ...
    def on_epoch_end(self, epoch, logs=None): ...
    def on_batch_begin(self, batch, logs=None): ...
    def on_batch_end(self, batch, logs=None): ...

    # Keras 3's names for the training batch hooks; on_batch_* are their aliases, as there.
    def on_train_batch_begin(self, batch, logs=None):
        self.on_batch_begin(batch, logs=logs)

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs=logs)

    # evaluate's (and fit's validation's), and predict's, as Keras 3 calls them: the batch-end
    # logs are the metrics so far (evaluate) and {"outputs": the batch's outputs} (predict);
    # on_test_end gets evaluate's logs, unprefixed in fit's validation too.
    def on_test_begin(self, logs=None): ...
    def on_test_end(self, logs=None): ...
    def on_test_batch_begin(self, batch, logs=None): ...
    def on_test_batch_end(self, batch, logs=None): ...
    def on_predict_begin(self, logs=None): ...
    def on_predict_end(self, logs=None): ...
    def on_predict_batch_begin(self, batch, logs=None): ...
    def on_predict_batch_end(self, batch, logs=None): ...


class History(Callback):
    """Records every epoch's logs: `history.history["loss"][epoch]`, and `history.epoch`, the
    epochs' indices. `fit` returns one (added last, so it sees what other callbacks add to the logs,
    such as `learning_rate`). Takes no arguments."""

    def __init__(self):
        super().__init__()
        self.epoch: list[int] = []
        self.history: dict[str, list[float]] = {}

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(value)


class CallbackList:
    """The callbacks of one `fit`, `evaluate` or `predict`, as Keras's `CallbackList`: `callbacks`
    (Callback instances; anything else raises a `TypeError`) each given the `model` and the `params`
    (`verbose`, `epochs`, `steps`). Calling a hook on the list (`on_epoch_end(epoch, logs)`, ...)
    calls it on every callback that overrides it, in order; made by the model, not by hand."""
    def __init__(self, callbacks, model, params):
        self.callbacks = list(callbacks)
        for callback in self.callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"callbacks must be Callback instances, got {type(callback).__name__}")
            callback.set_model(model)
            callback.params = params

    def __getattr__(self, hook):
        if not hook.startswith("on_"):
            raise AttributeError(hook)
        methods = self._overriding(hook)

        def call(*args):
            for method in methods:
                method(*args)
        setattr(self, hook, call)  # made once per hook: fit calls the batch hooks every step
        return call

    def watch(self, *hooks) -> bool:
        """Whether any callback does something in one of these hooks: fit builds the batch hooks'
        logs only if so (on a fast GPU a step of a small MLP is a short stretch of Python, which
        building the logs would lengthen)."""
        return any(self._overriding(hook) for hook in hooks)

    def _overriding(self, hook) -> list:
        """The callbacks' methods for `hook` that do something: overridden, or (a training batch
        hook) calling an overridden alias."""
        names = (hook, hook.replace("_train_batch_", "_batch_")) if "_train_batch_" in hook else (hook,)
        return [getattr(callback, hook) for callback in self.callbacks
                if any(getattr(getattr(callback, name), "__func__", None) is not getattr(Callback, name)
                       for name in names)]


def _monitored_direction(model, monitor: str) -> str | None:
    """Keras 3's mode "auto": "down" for a loss, else the `_direction` ("up" or "down") of the
    compiled metric whose log key `monitor` is (its val_ prefix stripped); None where no compiled
    metric has that key or the metric has no direction."""
    key = monitor.removeprefix("val_")
    if key == "loss":
        return "down"
    heads = (getattr(model, "_heads", None) or []) if getattr(model, "compiled", False) else []
    several = len(heads) > 1
    for head in heads:
        prefix = f"{head.name}_" if several else ""  # (Step.epoch_logs's keys)
        if several and key == f"{prefix}loss":
            return "down"
        for metric in getattr(head, "metrics", ()):
            if metric == "accuracy":  # (compile's "accuracy": the loss kernel's hit, a string)
                if key == f"{prefix}accuracy":
                    return "up"
            elif key == f"{prefix}{metric.name}":
                return getattr(metric, "_direction", None)
    return None


class _MonitorCallback(Callback):
    """What ModelCheckpoint, EarlyStopping and ReduceLROnPlateau share (Keras 3's MonitorCallback):
    `monitor`, `mode` ("min", "max" or "auto") and `min_delta`. `monitor_op` (numpy's greater or
    less) is set at the first epoch's end, as Keras sets it, once the model is compiled and built."""

    def __init__(self, monitor: str, mode: str, min_delta: float = 0.0):
        super().__init__()
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"{type(self).__name__} mode must be 'auto', 'min' or 'max', got {mode!r}")
        self.monitor = monitor
        self.mode = mode
        self.min_delta = abs(min_delta)
        self.monitor_op = None

    def _set_monitor_op(self) -> None:
        direction = ({"min": "down", "max": "up"}.get(self.mode)
                     or _monitored_direction(self.model, self.monitor))
        if direction is None:  # Keras's error, raised at the same point (the first epoch's end)
            raise ValueError(f"{type(self).__name__} callback received monitor={self.monitor!r}, but "
                             "cannot tell whether that metric should be maximized or minimized: it is "
                             "neither a loss nor a compiled metric with a direction. Pass `mode='max'` in "
                             "order to monitor based on the highest metric value, or pass `mode='min'` in "
                             "order to use the lowest value.")
        self.monitor_op = np.greater if direction == "up" else np.less

    def improved(self, current, best) -> bool:
        """Whether `current` beats `best` (None: nothing yet) by more than `min_delta`."""
        if self.monitor_op is None:
            self._set_monitor_op()
        if best is None:
            return True
        delta = self.min_delta if self.monitor_op is np.greater else -self.min_delta
        return bool(self.monitor_op(current - delta, best))


def _monitored(callback: Callback, logs, monitor: str):
    """logs[monitor], or None with a warning (not an error, as Keras) when it is missing."""
    value = (logs or {}).get(monitor)
    if value is None:
        warnings.warn(f"{type(callback).__name__}: the monitored metric {monitor!r} is not in the logs "
                      f"(available: {', '.join(logs or {}) or 'none'}); skipping it this epoch", RuntimeWarning,
                      stacklevel=outside_clnet())
    return value


class ModelCheckpoint(_MonitorCallback):
    """Saves the model (or its weights) after every epoch, or only when `monitor` improved.
    `filepath` may hold {epoch} (1-based, as Keras) and any log key:
    "ckpt-{epoch:02d}-{val_loss:.4f}.h5".

    - `monitor="val_loss"`: the log key compared with `save_best_only` (a missing one skips the
      epoch with a warning).
    - `save_best_only=False`: save only when `monitor` improved on the best so far.
    - `save_weights_only=False`: `model.save_weights(path)` instead of `model.save(path)` (whose
      suffix picks the format: `.h5` clnet's checkpoint, `.keras` Keras 3's archive).
    - `mode="auto"`: `"min"`, `"max"`, or `"auto"`, Keras 3's: minimise a loss (`"loss"`,
      `"val_loss"`, an output's `"<name>_loss"`), else go the way the compiled metric of that log
      key improves (up for accuracies, AUC, precision, recall and F-scores, down for errors); a
      key that is neither (a metric that was not compiled, or one without a direction) raises a
      `ValueError` at the first epoch's end, with `save_best_only`.
    - `verbose=0`: 1 prints a line at each epoch's decision.

    Keras's `save_freq` and `initial_value_threshold` are not taken: it checks once an epoch."""

    def __init__(self, filepath, monitor="val_loss", save_best_only=False, save_weights_only=False,
                 mode="auto", verbose=0):
        super().__init__(monitor, mode)
        self.filepath = os.fspath(filepath)
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.verbose = verbose
        self.best = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        try:
            path = self.filepath.format(epoch=epoch + 1, **logs)
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"ModelCheckpoint cannot fill in filepath {self.filepath!r} with epoch and the "
                             f"logs ({', '.join(logs)}): {type(error).__name__}: {error}") from None
        if self.save_best_only:
            current = _monitored(self, logs, self.monitor)
            if current is None:
                return
            best = "None" if self.best is None else f"{self.best:.5f}"  # (Keras's words before the first)
            if not self.improved(current, self.best):
                if self.verbose:
                    print(f"Epoch {epoch + 1}: {self.monitor} did not improve from {best}")
                return
            if self.verbose:
                print(f"Epoch {epoch + 1}: {self.monitor} improved from {best} to {current:.5f}, "
                      f"saving to {path}")
            self.best = current
        elif self.verbose:
            print(f"Epoch {epoch + 1}: saving to {path}")
        if self.save_weights_only:
            self.model.save_weights(path)
        else:
            self.model.save(path)


class EarlyStopping(_MonitorCallback):
    """Stops training when `monitor` has not improved by more than `min_delta` for `patience` epochs
    (or has not beaten `baseline`); optionally puts back the best epoch's weights.

    - `monitor="val_loss"`: the log key watched (a missing one skips the epoch with a warning).
    - `patience=0`: epochs without improvement before stopping.
    - `min_delta=0`: the least change that counts as an improvement (its absolute value).
    - `mode="auto"`: `"min"`, `"max"`, or `"auto"`, Keras 3's: minimise a loss (`"loss"`,
      `"val_loss"`, an output's `"<name>_loss"`), else go the way the compiled metric of that log
      key improves (up for accuracies, AUC, precision, recall and F-scores, down for errors); a
      key that is neither (a metric that was not compiled, or one without a direction) raises a
      `ValueError` at the first epoch's end.
    - `restore_best_weights=False`: on stopping, put back the weights of the best epoch.
    - `baseline=None`: a value to beat: an improving epoch resets the wait only if it also beats
      this.

    Keras's `verbose` and `start_from_epoch` are not taken."""

    def __init__(self, monitor="val_loss", patience=0, min_delta=0, mode="auto", restore_best_weights=False,
                 baseline=None):
        super().__init__(monitor, mode, min_delta)
        self.patience = patience
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = None
        self.best_epoch = 0
        self.best_weights = None

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op()  # (Keras's: even when the logs lack the monitored key)
        current = _monitored(self, logs, self.monitor)
        if current is None:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()  # something to restore even if nothing improves
        self.wait += 1
        if self.improved(current, self.best):
            self.best, self.best_epoch = current, epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self.improved(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights:
                self.model.set_weights(self.best_weights)


class ReduceLROnPlateau(_MonitorCallback):
    """Multiplies the learning rate by `factor` when `monitor` has not improved for `patience`
    epochs, then waits `cooldown` epochs before counting again; never goes below `min_lr`. Each
    epoch's logs get `learning_rate`, as Keras's.

    - `monitor="val_loss"`; `factor=0.1`, in [0, 1); `patience=10`; `cooldown=0`; `min_lr=0`.
    - `min_delta=1e-4`: the least change that counts as an improvement.
    - `mode="auto"`: `"min"`, `"max"`, or `"auto"`, Keras 3's: minimise a loss (`"loss"`,
      `"val_loss"`, an output's `"<name>_loss"`), else go the way the compiled metric of that log
      key improves (up for accuracies, AUC, precision, recall and F-scores, down for errors); a
      key that is neither (a metric that was not compiled, or one without a direction) raises a
      `ValueError` at the first epoch's end.

    The optimizer's learning rate must be a float: a learning-rate schedule's cannot be set (a
    `TypeError`). Keras's `verbose` is not taken."""

    def __init__(self, monitor="val_loss", factor=0.1, patience=10, min_delta=1e-4, cooldown=0, min_lr=0,
                 mode="auto"):
        super().__init__(monitor, mode, min_delta)
        if not 0 <= factor < 1:
            raise ValueError(f"ReduceLROnPlateau factor must be in [0, 1), got {factor!r}")
        self.factor = factor
        self.patience = patience
        self.cooldown = cooldown
        self.min_lr = min_lr

    def on_train_begin(self, logs=None):
        self.best = None
        self.wait = 0
        self.cooldown_counter = 0

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op()  # (Keras's: even when the logs lack the monitored key)
        optimizer = self.model.optimizer
        current = _monitored(self, logs, self.monitor)
        if current is not None:
            if self.cooldown_counter > 0:
                self.cooldown_counter -= 1
                self.wait = 0
            if self.improved(current, self.best):
                self.best, self.wait = current, 0
            elif self.cooldown_counter == 0:
                self.wait += 1
                if self.wait >= self.patience and optimizer.learning_rate > self.min_lr:
                    optimizer.learning_rate = max(optimizer.learning_rate * self.factor, self.min_lr)
                    self.cooldown_counter, self.wait = self.cooldown, 0
        if logs is not None:
            logs["learning_rate"] = optimizer.learning_rate  # History and CSVLogger record it, as in Keras


class LearningRateScheduler(Callback):
    """Sets the learning rate at the start of each epoch to schedule(epoch) or schedule(epoch, lr);
    `epoch` counts from 0 and from `initial_epoch` when resuming, so a schedule resumes exactly."""

    def __init__(self, schedule):
        super().__init__()
        if not callable(schedule):
            raise TypeError(f"LearningRateScheduler schedule must be callable, got {schedule!r}")
        self.schedule = schedule
        # Keras calls schedule(epoch, lr) and retries with schedule(epoch) on a TypeError, which also
        # hides a TypeError raised inside the schedule; the signature tells without guessing.
        try:
            positional = [p for p in inspect.signature(schedule).parameters.values()
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
            self._takes_lr = len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in positional)
        except (TypeError, ValueError):  # a builtin without a signature: give it the epoch only
            self._takes_lr = False

    def on_epoch_begin(self, epoch, logs=None):
        optimizer = self.model.optimizer
        lr = self.schedule(epoch, optimizer.learning_rate) if self._takes_lr else self.schedule(epoch)
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not math.isfinite(lr) or lr < 0:
            raise ValueError(f"LearningRateScheduler schedule returned {lr!r} for epoch {epoch}; "
                             "expected a finite non-negative number")
        optimizer.learning_rate = float(lr)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = self.model.optimizer.learning_rate


class CSVLogger(Callback):
    """Writes one row per epoch: epoch, then every log key (sorted) as of the first epoch; NA where
    a later epoch lacks one. `append=True` continues an existing file (for resumed runs).

    `filename`: the file's path (str or path-like). `separator=","`: the delimiter between fields.
    `append=False`: start the file afresh, or with True add to it (no second header where it has
    rows). Each row is flushed as it is written, so a crash loses at most the current epoch's."""

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        self.filename = os.fspath(filename)
        self.separator = separator
        self.append = append
        self.file = None

    def on_train_begin(self, logs=None):
        has_rows = self.append and os.path.exists(self.filename) and os.path.getsize(self.filename) > 0
        self.file = open(self.filename, "a" if self.append else "w", newline="", encoding="utf-8")
        self.writer = None  # made at the first epoch, when the keys are known
        self._header = not has_rows

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.writer is None:
            self.keys = sorted(logs)
            self.writer = csv.DictWriter(self.file, ["epoch", *self.keys], delimiter=self.separator)
            if self._header:
                self.writer.writeheader()
        self.writer.writerow({"epoch": epoch, **{key: logs.get(key, "NA") for key in self.keys}})
        self.file.flush()  # a crash loses at most the current epoch's row

    def on_train_end(self, logs=None):
        self.file.close()
        self.file = None


class TerminateOnNaN(Callback):
    """Stops training after an epoch whose loss is NaN or infinite. fit reads the loss once an
    epoch (a per-batch check would cost a device read every step), so the check is per epoch."""

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            print(f"Epoch {epoch + 1}: invalid loss {loss}, terminating training", file=sys.stderr)
            self.model.stop_training = True
