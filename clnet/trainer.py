"""The fit loop: fit, evaluate and predict (and their one-batch forms) feed batches of data to the
compiled step (step.py: train_step, test_step, predict_step), run the callbacks and show the
progress, as Keras's Trainer. Data comes in as arrays (a memmap too) or as a generator or PyDataset
of batches (clnet/data.py); the model prepares the inputs (model.py: prepare_inputs) and the step
the targets (prepare_targets); a model of lengths None is made on each data's (each batch's) lengths."""
from __future__ import annotations

import functools
import sys
import time
from collections.abc import Iterator
from contextlib import closing

import numpy as np
from tqdm.auto import tqdm

from . import data
from .callbacks import CallbackList, History
from .cl import runtime as cl_runtime
from .data import ArrayFeed, Batches, Stream, is_stream
from .step import DeviceBatch

UNKNOWN_STEPS_REFRESH = 50  # progress-bar reads per epoch of unknown length: one every this many steps


def _keeps_device_busy(method):
    """Runs the method inside its runtime's busy() (cores kept awake where that helps: cl/awake.py):
    the model's, or for a model that its data will build, the current one, which it will take."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with (getattr(self, "rt", None) or cl_runtime.runtime()).busy():
            return method(self, *args, **kwargs)
    return run


class Trainer:
    """fit, evaluate, predict of a Model (a mixin of it; the graph and the step are model.py's and
    step.py's)."""

    @_keeps_device_busy
    def fit(self, x, y=None, batch_size=32, epochs=1, verbose=1, callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None) -> History:
        """x, y: arrays (a memmap too); or x alone, a generator or PyDataset giving (x, y) batches
        (batch_size is then not used). An epoch is steps_per_epoch batches if given, else all of
        the data (a generator: until it is exhausted). `sample_weight` (one weight per sample) or
        `class_weight` ({class: weight}) weigh each sample's loss and metrics, as Keras's
        (Step.prepare_targets); validation_data may be (x, y, sample_weight). `verbose`: 0 silent,
        1 or "auto" (Keras's default) a progress bar, 2 one line per epoch."""
        verbose = check_verbose(verbose)
        self.require_compiled("fit")
        batch_size = check_int("batch_size", batch_size, minimum=1)
        epochs = check_int("epochs", epochs, minimum=0)
        initial_epoch = check_int("initial_epoch", initial_epoch, minimum=0)
        steps_per_epoch = check_steps("steps_per_epoch", steps_per_epoch)
        validation_steps = check_steps("validation_steps", validation_steps)
        if not isinstance(validation_split, (int, float)) or not 0 <= validation_split < 1:
            raise ValueError(f"validation_split must be a number in [0, 1), got {validation_split!r}")
        weights = {"sample_weight": sample_weight, "class_weight": class_weight}
        self._check_weights_usable(x, weights)
        if validation_split and validation_data is None:
            if is_stream(x):
                raise ValueError("validation_split needs arrays, but x is a generator or PyDataset: pass "
                                 "validation_data instead")
            fingerprint = self._fingerprint(x, y, weights, ("validation_split", validation_split))
            train = self._kept_feed("fit", fingerprint, batch_size, steps_per_epoch, shuffle)
            val = self._kept_feed("fit validation", fingerprint, batch_size, validation_steps, False)
            if train is None or val is None:
                x, y = self._prepare(x, y, **weights)  # (the weights' column split with the targets)
                split = len(x) - int(len(x) * validation_split)  # Keras: the last samples, before shuffling
                if split < 1 or split == len(x):
                    raise ValueError(f"validation_split={validation_split} leaves no training or no validation "
                                     f"samples out of {len(x)}")
                weighted = _weighted(weights)
                train = self._array_feed(x[:split], y[:split], batch_size, steps_per_epoch, shuffle,
                                         weighted=weighted, keep=("fit", fingerprint))
                val = self._array_feed(x[split:], y[split:], batch_size, validation_steps, False,
                                       reserved=train.batches.device_bytes, weighted=weighted,
                                       keep=("fit validation", fingerprint), busy=("fit",))
        else:
            train = self._feed(x, y, batch_size, steps_per_epoch, shuffle=shuffle, use="fit", **weights)
            val = None
        if validation_data is not None:
            val_weights = {}
            if is_stream(validation_data):
                val_x, val_y = validation_data, None
            elif isinstance(validation_data, (tuple, list)) and len(validation_data) in (2, 3):
                val_x, val_y, *rest = validation_data
                val_weights = {"sample_weight": rest[0]} if rest else {}
            else:
                raise ValueError("validation_data must be a tuple (x_val, y_val) or (x_val, y_val, "
                                 "val_sample_weight), a generator or a PyDataset")
            reserved = train.batches.device_bytes if isinstance(train, ArrayFeed) else 0
            val = self._feed(val_x, val_y, batch_size, validation_steps, name="validation_data", reserved=reserved,
                             use="fit validation", **val_weights)
        if self.distribution is not None:  # each replica's shard of every batch, and the callbacks this process runs
            train, callbacks = self.distribution.prepare(self, train, list(callbacks or []))
        chief = self.distribution is None or self.distribution.chief  # shows the progress
        steps = train.steps

        history = History()
        callbacks = CallbackList([*(callbacks or []), history], self,  # History last, as Keras: it sees what others add
                                 {"epochs": epochs, "steps": steps, "batch_size": batch_size, "verbose": verbose})
        self.stop_training = False
        watch_batches = callbacks.watch("on_train_batch_begin", "on_train_batch_end")
        callbacks.on_train_begin({})
        # The data's order continues from the epochs this model has trained (fit in a loop
        # shuffles afresh each call, as Keras's does, and as one fit of all the epochs would),
        # or from initial_epoch where that is later (a run resumed from a checkpoint).
        first_order = max(self.data_epoch, initial_epoch)
        for epoch in range(initial_epoch, epochs):
            if train.exhausted:  # a generator read to its end in an earlier epoch
                data.ran_out("x")
                break
            callbacks.on_epoch_begin(epoch, {})
            started = time.perf_counter()
            seen = 0
            with tqdm(total=steps, desc=f"Epoch {epoch + 1}/{epochs}", unit="batch", file=sys.stderr,
                      disable=verbose != 1 or not chief, leave=True, dynamic_ncols=True) as bar:
                refresh = max(1, steps // 10) if steps else UNKNOWN_STEPS_REFRESH
                self.data_epoch = first_order + epoch - initial_epoch
                with closing(train.epoch(self.data_epoch)) as batches:
                    for step, (rows, xb, yb) in enumerate(batches):
                        if watch_batches:
                            callbacks.on_train_batch_begin(step, {"batch": step, "size": rows})
                        self.train_step(DeviceBatch(xb, yb, rows, seen, train.weighted))
                        seen += rows
                        if watch_batches:
                            callbacks.on_train_batch_end(step, {"batch": step, "size": rows})
                        bar.update(1)
                        if verbose == 1 and ((step + 1) % refresh == 0 or step + 1 == steps):
                            bar.set_postfix(self.training_logs(seen, running=True), refresh=False)
                        if self.stop_training:  # set by a batch hook: the epoch ends here, as Keras's
                            break
                if not seen:
                    if epoch == initial_epoch:
                        raise ValueError("x (a generator) yielded no batches")
                    data.ran_out("x")
                    break
                logs = self.training_logs(seen)
                if val is not None:
                    logs.update(self._evaluate_feed(val, epoch, prefix="val_", callbacks=callbacks))
                bar.set_postfix(logs, refresh=False)
            self.epoch, self.data_epoch = epoch + 1, self.data_epoch + 1
            if verbose == 2 and chief:
                print(f"Epoch {epoch + 1}/{epochs} - {time.perf_counter() - started:.2f}s - " +
                      _shown(logs), file=sys.stderr)
            callbacks.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        callbacks.on_train_end({})
        self.history = history
        return history

    def _evaluate_feed(self, feed, epoch: int = 0, prefix: str = "", callbacks: CallbackList | None = None) -> dict:
        """evaluate's logs over the feed's batches, each key after `prefix`, with the callbacks'
        on_test_* hooks as Keras calls them (fit's validation passes fit's callbacks); a batch
        hook's logs are read from the device only where a callback overrides it, and a callback
        setting model.stop_evaluating ends the pass after that batch."""
        callbacks = callbacks or CallbackList([], self, {})
        watch_batches = callbacks.watch("on_test_batch_begin", "on_test_batch_end")
        self.stop_evaluating = False
        callbacks.on_test_begin()
        seen = 0
        with closing(feed.epoch(epoch)) as batches:
            for step, (rows, xb, yb) in enumerate(batches):
                if watch_batches:
                    callbacks.on_test_batch_begin(step)
                self.test_step(DeviceBatch(xb, yb, rows, seen, feed.weighted))
                seen += rows
                if watch_batches:
                    callbacks.on_test_batch_end(step, self.epoch_logs(seen))
                if self.stop_evaluating:
                    break
        if not seen:  # only a generator can give nothing
            raise ValueError(f"{feed.name} (a generator) yielded no batches in epoch {epoch + 1}; a generator "
                             "is read once: give a generator that does not end and steps, or a PyDataset")
        logs = self.epoch_logs(seen)
        callbacks.on_test_end(logs)
        return {prefix + key: value for key, value in logs.items()}

    @_keeps_device_busy
    def evaluate(self, x, y=None, batch_size=32, verbose=0, sample_weight=None, steps=None, callbacks=None,
                 return_dict: bool = False):
        """The mean loss (and accuracy, if compiled with it) over (x, y) or the batches of a
        generator / PyDataset (the first `steps` of them if given): loss or [loss, accuracy], or
        with `return_dict` a dict of them by name; each sample weighted by `sample_weight` if
        given, as Keras's. `callbacks`: Callbacks whose on_test_* hooks run."""
        self.require_compiled("evaluate")
        verbose = check_verbose(verbose)
        batch_size = check_int("batch_size", batch_size, minimum=1)
        self._check_weights_usable(x, {"sample_weight": sample_weight})
        feed = self._feed(x, y, batch_size, check_steps("steps", steps), use="evaluate", sample_weight=sample_weight)
        logs = self._evaluate_feed(feed, callbacks=CallbackList(callbacks or [], self, {
            "verbose": verbose, "epochs": 1, "steps": feed.steps}))
        if verbose:
            print(_shown(logs), file=sys.stderr)
        return _returned(logs, return_dict, self.ordered_logs(logs))

    @_keeps_device_busy
    def predict(self, x, batch_size=32, verbose=0, steps=None, callbacks=None) -> np.ndarray:
        """Outputs for the samples of x, or of the batches of a generator / PyDataset (each x,
        (x,) or (x, y)), in order. `callbacks`: Callbacks whose on_predict_* hooks run, as
        Keras's; one setting model.stop_predicting ends it after that batch, with the outputs
        so far."""
        batch_size = check_int("batch_size", batch_size, minimum=1)
        verbose = check_verbose(verbose)
        feed = self._feed(x, None, batch_size, check_steps("steps", steps), targets=False, use="predict")
        callbacks = CallbackList(callbacks or [], self, {"verbose": verbose, "epochs": 1, "steps": feed.steps})
        watch_begin, watch_end = callbacks.watch("on_predict_batch_begin"), callbacks.watch("on_predict_batch_end")
        shapes = self._output_shapes()
        results = None if feed.samples is None else [np.empty((feed.samples, *shape), self.dtype) for shape in shapes]
        parts, seen = [], 0
        self.stop_predicting = False
        callbacks.on_predict_begin()
        with closing(feed.epoch(0)) as batches:
            for step, (rows, xb, _) in enumerate(batches):
                if watch_begin:
                    callbacks.on_predict_batch_begin(step)
                shapes = self._output_shapes()  # (a stream's batch may have made the model on other lengths)
                part = ([np.empty((rows, *shape), self.dtype) for shape in shapes] if results is None
                        else [result[seen:seen + rows] for result in results])
                # Reads queue behind the kernels without waiting (finish() below waits for them
                # all), unless a callback reads this batch's outputs.
                for array, output in zip(part, self.predict_step(DeviceBatch(xb, None, rows))):
                    cl_runtime.cl.enqueue_copy(self.rt.queue, array.reshape(rows, -1), output.buffer,
                                               is_blocking=watch_end)
                parts.append(part)
                seen += rows
                if watch_end:
                    callbacks.on_predict_batch_end(step, {"outputs": self.outputs_as_given(part)})
                if self.stop_predicting:
                    break
        if not seen:
            raise ValueError("x (a generator) yielded no batches")
        self.rt.queue.finish()
        callbacks.on_predict_end()
        if results is not None and seen < feed.samples:  # stopped by a callback
            results = [result[:seen] for result in results]
        if results is None:
            made = sorted({tuple(array.shape[1:] for array in part) for part in parts})
            if len(made) > 1:
                raise ValueError(f"x's batches are of other lengths, and gave outputs of samples of shapes {made}, "
                                 "which one array cannot hold; predict each length apart (predict_on_batch)")
            results = [np.concatenate(p) for p in zip(*parts)]
        return self.outputs_as_given(results)

    @_keeps_device_busy
    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict: bool = False):
        """One training step on all of (x, y), as Keras's: the batch's loss (and accuracy, if
        compiled with it), from the forward pass before the update; a dict with `return_dict`.
        Callbacks do not run, as in Keras."""
        self.require_compiled("train_on_batch")
        if self.distribution is not None:
            raise ValueError(f"train_on_batch runs one device's step, but model {self.name!r} was compiled "
                             f"with the distribution {type(self.distribution).__name__}, whose replicas would "
                             "fall out of step; use fit")
        weights = {"sample_weight": sample_weight, "class_weight": class_weight}
        rows, xb, yb = self._one_batch(x, y, targets=True, **weights)
        self.train_step(DeviceBatch(xb, yb, rows, 0, _weighted(weights)))
        return _returned(logs := self.epoch_logs(rows), return_dict, self.ordered_logs(logs))

    @_keeps_device_busy
    def test_on_batch(self, x, y=None, sample_weight=None, return_dict: bool = False):
        """The loss (and accuracy) of all of (x, y) in inference mode, as Keras's."""
        self.require_compiled("test_on_batch")
        rows, xb, yb = self._one_batch(x, y, targets=True, sample_weight=sample_weight)
        self.test_step(DeviceBatch(xb, yb, rows, 0, sample_weight is not None))
        return _returned(logs := self.epoch_logs(rows), return_dict, self.ordered_logs(logs))

    @_keeps_device_busy
    def predict_on_batch(self, x) -> np.ndarray:
        """The outputs for all of x in one launch sequence, as Keras's."""
        rows, xb, _ = self._one_batch(x)
        arrays = [np.empty((rows, *shape), self.dtype) for shape in self._output_shapes()]
        for array, output in zip(arrays, self.predict_step(DeviceBatch(xb, None, rows))):
            cl_runtime.cl.enqueue_copy(self.rt.queue, array.reshape(rows, -1), output.buffer)
        return self.outputs_as_given(arrays)

    def _one_batch(self, x, y=None, targets: bool = False, **weights):
        """(rows, x batch, y batch or None): all of x (and, with `targets`, y and any sample or
        class weights), checked as fit checks them, on the device as one batch."""
        if not targets:
            x = self.prepare_inputs(x)
        elif y is None:
            raise ValueError("y (the targets) is required with an array x")
        else:
            self._check_weights_usable(x, weights)
            x, y = self._prepare(x, y, **weights)
        rows = len(x)
        self.reserve(rows)
        return (rows, *Batches(self.rt, x, y, self.capacity, self.dtype, transposed=self.batch_transposed).batch(0, rows))

    def compute_gradients(self, x, y):
        """(loss, gradients in get_weights() layout, dL/dx) for one batch holding all of x, in
        training mode at the current step (the same Dropout masks each call; a non-trainable
        weight's gradient is zeros)."""
        self.require_compiled("compute_gradients")
        rows, xb, yb = self._one_batch(x, y, targets=True)
        batch = DeviceBatch(xb, yb, rows)
        self.compute_loss(batch, training=True)
        input_grads = self.backward(batch, input_gradients=True)
        loss = self.epoch_logs(rows)["loss"]
        grads = [g for layer in self.layers for g in layer.gradients()]
        arrays = [g.numpy()[:rows].reshape(rows, *shape) for g, shape in zip(input_grads, self.built_shapes)]
        return loss, grads, arrays[0] if len(arrays) == 1 else arrays

    def _feed(self, x, y, batch_size: int, steps: int | None, name: str = "", targets: bool = True,
              shuffle: bool = False, reserved: int = 0, use: str = "", **weights):
        """The batches of arrays (x, y), or of a generator / PyDataset x, as fit, evaluate and
        predict iterate them; `name` prefixes the arguments in errors (validation_data), and
        `reserved` bytes of the device budget are taken already (by the training data).
        `weights`: sample_weight or class_weight of arrays (Step.prepare_targets). Arrays that
        `use` (fit, fit validation, evaluate, predict) had last time keep their device copy."""
        names = (f"{name} x".strip(), f"{name} y".strip())
        if is_stream(x):
            if y is not None:
                kind = "generator" if isinstance(x, Iterator) else "PyDataset"
                raise ValueError(f"{name or 'x'} is a {kind}, which gives the targets in its (x, y) batches: "
                                 f"{names[1]} must not be passed, got {type(y).__name__}")

            def prepare(xb, yb, step):
                where = f" in batch {step}"
                if not targets:
                    return self.prepare_inputs(xb, names[0] + where), None
                return self._prepare(xb, yb, (names[0] + where, names[1] + where))

            stream = Stream(cl_runtime.runtime() if not self.built else self.rt, x, name or "x", prepare,
                            self.reserve, self.dtype, targets, steps, self.seed if shuffle else None,
                            lambda: self.batch_transposed)
            if not self.built:
                stream.peek()
            return stream
        if targets and y is None:
            raise ValueError(f"{names[1]} (the targets) is required when {names[0]} is an array; "
                             "or pass x as a generator or PyDataset of (x, y) batches")
        fingerprint = self._fingerprint(x, y, weights) if use else None
        kept = self._kept_feed(use, fingerprint, batch_size, steps, shuffle)
        if kept is not None:
            return kept
        if not targets:
            return self._array_feed(self.prepare_inputs(x, names[0]), None, batch_size, steps, shuffle, reserved,
                                    keep=(use, fingerprint))
        prepared = self._prepare(x, y, names, **weights)
        return self._array_feed(*prepared, batch_size, steps, shuffle, reserved, weighted=_weighted(weights),
                                keep=(use, fingerprint), busy=("fit",) if use == "fit validation" else ())

    def _array_feed(self, x, y, batch_size, steps, shuffle, reserved=0, weighted: bool = False,
                    keep: tuple = ("", None), busy: tuple = ()) -> ArrayFeed:
        """Batches of prepared arrays: x (samples, features), y (samples, outputs, then a sample
        weight if `weighted`) or None. keep = (use, fingerprint): the arrays' device copy is kept
        for `use`'s next call with the same arrays (KeptData); `busy`: uses whose copies the
        caller holds, which must not be let go to make room."""
        use, fingerprint = keep
        capacity = self.reserve(min(batch_size, len(x)))
        budget = data.device_budget(self.rt) - reserved
        if use:
            nbytes = (x.size + (0 if y is None else y.size)) * self.dtype.itemsize
            self.kept_data.make_room(use, nbytes, budget, busy)
            budget -= self.kept_data.device_bytes(busy)  # (the busy ones' bytes are `reserved`)
        batches = Batches(self.rt, x, y, capacity, self.dtype, budget, self.batch_transposed)
        if use:
            # (under a distribution with the host arrays, which DataParallel's other replicas read)
            self.kept_data.keep(use, fingerprint, batches, (self.built_shapes, weighted),
                                release_host=self.distribution is None)
        return self._feed_of(batches, y is not None, batch_size, steps, shuffle, weighted)

    def _feed_of(self, batches: Batches, targets: bool, batch_size, steps, shuffle, weighted) -> ArrayFeed:
        if targets:
            self.reserve_statistics(batches.samples)
        shapes = self.built_shapes  # (the arrays' lengths: the model is made on them for each pass)
        feed = ArrayFeed(batches, batch_size, steps, self.seed if shuffle else None, self.reserve,
                         lambda: self.ensure_built(shapes, ["x"]))
        feed.weighted = weighted
        return feed

    def _fingerprint(self, x, y, weights: dict, options: tuple = ()) -> data.Fingerprint | None:
        """What finds the device copy of arrays given before."""
        return data.Fingerprint.of(x, y, *weights.values(), options=(self.dtype.str, *options,
                                                                       *(v is None for v in weights.values())))

    def _kept_feed(self, use: str, fingerprint, batch_size, steps, shuffle) -> ArrayFeed | None:
        """The feed of `use`'s kept copy of the arrays `fingerprint` identifies, if there is one the
        model (made again on its lengths) reads in its layout; else None."""
        found = self.kept_data.find(use, fingerprint)
        if found is None:
            return None
        batches, (shapes, weighted) = found
        self.ensure_built(shapes, ["x"])
        if batches.transposed != self.batch_transposed:
            return None
        return self._feed_of(batches, batches.y_cols > 0, batch_size, steps, shuffle, weighted)

    def forget_data(self) -> None:
        """Let go of the device copies of the arrays fit, evaluate and predict keep for their next
        call with the same arrays (see clnet.data.Fingerprint for what "the same" means); compile
        lets them go too."""
        self.kept_data.clear()

    def _check_weights_usable(self, x, weights: dict) -> None:
        """Sample and class weights come with arrays, to a model on one device."""
        if not _weighted(weights):
            return
        given = " and ".join(k for k, v in weights.items() if v is not None)
        if is_stream(x):
            raise ValueError(f"{given} goes with arrays x and y; a generator or PyDataset is not weighted yet")
        if self.distribution is not None:
            raise ValueError(f"{given} is not supported under {type(self.distribution).__name__} yet")

    def _prepare(self, x, y, names=("x", "y"), **weights):
        x, y = self.prepare_inputs(x, names[0]), self.prepare_targets(y, names[1], **weights)
        if len(x) != len(y):
            raise ValueError(f"{names[0]} has {len(x)} samples but {names[1]} has {len(y)}; they must match")
        return x, np.ascontiguousarray(y)

    def _output_shapes(self) -> list[tuple]:
        """Each output's sample shape, as the model is built."""
        return self.output_shape if isinstance(self.output_shape, list) else [self.output_shape]


def _returned(logs: dict, return_dict: bool, values: list):
    """What evaluate and the *_on_batch methods return, as Keras: the logs, or their `values` in
    order (the loss alone when it is the only one)."""
    if return_dict:
        return logs
    return values[0] if len(values) == 1 else values


def _weighted(weights: dict) -> bool:
    return any(v is not None for v in weights.values())


def check_verbose(value) -> int:
    """Keras's verbose: 0, 1, 2, or "auto", which is 1."""
    if value == "auto":
        return 1
    if value not in (0, 1, 2):  # (False and True are 0 and 1, as Keras takes them)
        raise ValueError(f"verbose must be 0, 1, 2 or 'auto', got {value!r}")
    return int(value)


def check_steps(argument: str, value) -> int | None:
    return None if value is None else check_int(argument, value, minimum=1)


def check_int(argument: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{argument} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{argument} must be >= {minimum}, got {value}")
    return int(value)


def _shown(logs: dict) -> str:
    """Logs as Keras prints them: 4 decimals, a per-class array (F1Score's) in brackets."""
    return " - ".join(f"{k}: {np.array2string(np.asarray(v), precision=4)}" if np.ndim(v) else f"{k}: {v:.4f}"
                      for k, v in logs.items())
