"""DataParallel: one process, a replica of the model on each of several OpenCL devices.

Each device has its own Runtime (queues, compiled programs); devices alike (one platform, one name)
share one context and its programs. The reduction runs once per step. By default it goes through
host memory (reduction="host"): every replica's flat gradients are read into a pinned host array
in pieces, a large Dense layer's as each part of its weight gradient is computed (Dense.gradient_parts);
each piece, once there from every replica, is copied up to every other replica while the next
comes down, and each replica sums all of them on its own device in the same order (SumReplicas;
the pieces done before the backward pass's last launch while the last ones are copied), so that
the replicas stay identical to the bit. In one context the copies wait for each other on the
devices and the host runs on to the next step; across contexts (devices unlike, or a model made
outside scope()) the host waits for each piece. On two GPUs this made the wide MLP's step far
shorter than numpy's sum of unpinned arrays had (benchmarks/RESULTS.md, data-parallel training
on two GPUs). With reduction="devices" nothing passes the host: each other
replica's flat gradients are copied device to device into a buffer on the first device, summed
there with the shard weights (ReduceReplicas), and the sum copied back to every replica; NVIDIA's
runtime makes those copies slow (the wide MLP's step on two of its GPUs took far longer than on
one), PoCL's not. Then each replica runs its update. The replicas
run their shards concurrently: every launch is asynchronous."""
from __future__ import annotations

import time
import warnings
from collections import deque
from contextlib import closing, contextmanager

import numpy as np
import pyopencl as cl

from ..cl.device import DeviceError, DeviceInfo, choose, devices as all_devices
from ..cl.runtime import Runtime, use_runtime
from ..cl.tensor import Tensor
from ..data import ArrayFeed, Batches, device_budget
from ..stacklevel import outside_clnet
from ..step import DeviceBatch
from . import base
from .base import (Distribution, FlatState, PieceReads, ReplicaSum, ShardedFeed, StateStaging, model_logs,
                   plan_pieces, run_shard)

SPLITS = ("even", "measured")
REDUCTIONS = ("host", "devices")
# check_speed: after the first epoch's WARM_STEPS (which build, allocate and tune), CHECK_BLOCKS
# blocks of BLOCK_STEPS steps, each data-parallel block (fit's own steps) followed by the same
# batches on the first device alone. It warns only where every data-parallel block is slower than
# every one-device block: two equally fast runs give that by chance one time in twenty.
WARM_STEPS = 1
CHECK_BLOCKS = 3
BLOCK_STEPS = 2
CHECK_STEPS = WARM_STEPS + CHECK_BLOCKS * BLOCK_STEPS  # the steps an epoch needs for the check
clock = time.perf_counter  # the check's clock (a test replaces it to script the step times)


class SlowerThanOneDeviceWarning(UserWarning):
    """DataParallel's speed check (`check_speed`) found a training step over the replicas slower
    than the same step on the first device alone: the model or its batch is too small to gain from
    data parallelism. The message gives both step times and what to do."""


class DataParallel(Distribution):
    """Data parallelism over `devices` (indices or name substrings as CLNET_DEVICE takes them;
    None: every device), as keras.distribution.DataParallel: the model made in `scope()` lives on
    the first device, a replica of it on each other one.

    `split`: "even", "measured" (each device's share of a batch in proportion to its speed in the
    device probe of clnet/cl/probe.py, measured once and cached), or a list of positive weights.
    `reduction`: "host" (through pinned host memory, any devices; the sum on each device; the
    fast one on NVIDIA GPUs) or "devices" (device to device in one shared context: devices of one
    kind on one platform; see the module's docstring).
    `check_speed`: True (default) or False. On the first fit of a model (when the strategy makes
    its replicas), time a few steps of its first epoch, blocks of fit's own data-parallel steps
    each followed by the same whole batches on a copy of the model on the first device alone, and
    where every data-parallel block is slower than every one-device block, warn
    (`SlowerThanOneDeviceWarning`, with both step times): a model or batch too small to gain from
    data parallelism. The copy trains nothing of the model's, so what training computes is the
    same with or without the check; only the devices' queues are waited for, at the blocks' ends.
    `step_ms` then holds the median milliseconds a step (data-parallel, first device alone). Not
    checked: an epoch of fewer than `CHECK_STEPS` steps, a fit under `clnet.profile()` (its table
    would hold the copy's kernels), a first device without memory for the copy at the whole batch."""

    def __init__(self, devices=None, split="even", reduction="host", check_speed=True):
        super().__init__()
        if not isinstance(check_speed, bool):
            raise TypeError(f"DataParallel check_speed must be True or False, got {check_speed!r}")
        self.check_speed = check_speed
        self.step_ms: tuple[float, float] | None = None  # the speed check's result
        self._check_pending = False  # whether the next epoch runs the speed check
        if devices is None:
            infos = all_devices()
        elif isinstance(devices, (list, tuple)) and devices:
            infos = [d if isinstance(d, DeviceInfo) else choose(d) for d in devices]
        else:
            raise TypeError(f"DataParallel devices must be a non-empty list of device indices or names, or None "
                            f"for every device, got {devices!r}")
        indices = [info.index for info in infos]
        if len(set(indices)) != len(indices):
            raise ValueError(f"DataParallel devices {list(devices)} name device(s) "
                             f"{sorted({i for i in indices if indices.count(i) > 1})} more than once; each device "
                             "holds one replica")
        self.replicas = len(infos)
        if reduction not in REDUCTIONS:
            raise ValueError(f"DataParallel reduction must be one of {REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction
        cl_devices = [info.cl_device for info in infos]
        # Devices alike (one platform, one name) share one context and its programs: the host
        # reduction's copies then wait for each other on the devices, not on the host.
        alike = (len({d.platform.int_ptr for d in cl_devices}) == 1 and len({d.name for d in cl_devices}) == 1
                 and len({d.int_ptr for d in cl_devices}) == len(cl_devices) > 1)
        if reduction == "devices" and not alike:
            raise ValueError(f"DataParallel reduction='devices' needs two or more distinct devices of one kind on "
                             f"one platform (they share an OpenCL context), got "
                             f"{[f'{i.index}: {i.name} ({i.platform})' for i in infos]}; use reduction='host'")
        context, programs = (cl.Context(cl_devices), {}) if alike else (None, None)
        self.runtimes = [Runtime(info, context, programs) for info in infos]
        self.on_devices = False  # whether fit's reduction runs on the devices (feed decides)
        self._shares = self._check_split(split, infos)
        self.split_name = split if isinstance(split, str) else "weights"
        self._model = None  # the model the replicas were made for
        self._others: list = []  # replicas on runtimes[1:]
        # Kept from one fit to the next (fit in a loop), while they still hold: the reduction's
        # arrays for the replicas' parameter layouts (_layouts), and the replicas' copies of the
        # model's training data for its batches (the model's own kept copy, KeptData).
        self._layouts: list | None = None
        self._batches_for = None  # the model's Batches whose arrays the replicas' copies hold
        self._staging = StateStaging()  # the model's flat state on its way to the replicas
        self._replica_batches: list[Batches] = []

    @staticmethod
    def _check_split(split, infos: list[DeviceInfo]) -> list[float]:
        if isinstance(split, str):
            if split not in SPLITS:
                raise ValueError(f"DataParallel split must be one of {SPLITS} or a list of weights, got {split!r}")
            if split == "even":
                weights = [1.0] * len(infos)
            else:
                from ..cl.probe import fastest
                seconds = fastest(infos)[1]
                weights = [1.0 / seconds[info.index] for info in infos]
        else:
            weights = list(split) if isinstance(split, (list, tuple)) else None
            if (weights is None or len(weights) != len(infos)
                    or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in weights)):
                raise ValueError(f"DataParallel split must be 'even', 'measured' or a list of {len(infos)} positive "
                                 f"numbers (one per device), got {split!r}")
        total = float(sum(weights))
        return [w / total for w in weights]

    def shares(self) -> list[float]:
        return self._shares

    @property
    def devices(self) -> list[DeviceInfo]:
        return [rt.info for rt in self.runtimes]

    @contextmanager
    def scope(self):
        """Models made inside are built on the first device; compile() inside uses this strategy."""
        with use_runtime(self.runtimes[0]), super().scope():
            yield self

    # -- checks ----------------------------------------------------------------------------
    def attach(self, model) -> None:
        if model.dtype == np.float64:
            lacking = [info for info in self.devices if not info.fp64]
            if lacking:
                having = [info for info in self.devices if info.fp64]
                raise DeviceError(
                    f"DataParallel: the model computes in float64, but device(s) "
                    f"{', '.join(f'{i.index}: {i.name!r}' for i in lacking)} have no cl_khr_fp64 (float64) support"
                    + (f" while {', '.join(f'{i.index}: {i.name!r}' for i in having)} do" if having else "")
                    + "; every replica computes in the model's float type: use floatx='float32', or leave those "
                      "devices out")
        if model.built:
            self._check_device(model)

    def _check_device(self, model) -> None:
        first = self.runtimes[0].info
        if model.rt.info.index != first.index:
            raise ValueError(f"model {model.name!r} is built on device {model.rt.info.index}: {model.rt.info.name!r}, "
                             f"but DataParallel's first device, where the model itself trains, is {first.index}: "
                             f"{first.name!r}; make the model inside strategy.scope() (or list its device first)")

    # -- fit's hooks ------------------------------------------------------------------------
    def feed(self, model, train: ArrayFeed) -> ShardedFeed:
        self._check_device(model)
        if self._model is not model:
            self._others = [self._replica(model, rt) for rt in self.runtimes[1:]]
            self._model, self._batches_for = model, None
            self._check_pending = self.check_speed and self.replicas > 1  # (one replica: nothing to compare)
        replicas = [model, *self._others]
        layouts = [base.flat_layout(m) for m in replicas]
        if not base.same_objects(layouts, self._layouts):  # new replicas, or a layer (un)frozen since the last fit
            self._prepare_reduction(replicas)
            self._layouts = layouts
        self._copy_state(model)
        if self._batches_for is not train.batches:  # other arrays than the last fit's
            x, y = train.batches.arrays
            largest = max(self.split(train.batch_size))
            self._replica_batches = []  # (the last arrays' copies go first)
            self._replica_batches = [Batches(r.rt, x, y, r.reserve(largest), model.dtype, device_budget(r.rt),
                                             r.batch_transposed) for r in self._others]
            self._batches_for = train.batches
        batches = [train.batches, *self._replica_batches]
        self.sharded = CheckedFeed(self, train, [model, *self._others], batches, first=0)
        return self.sharded

    def gradient_reads(self, model):
        return self.reads[0] if self.reads else None

    def _prepare_reduction(self, replicas: list) -> None:
        """The reduction's flat arrays, pieces and sums for the replicas' parameter layouts."""
        model = replicas[0]
        self.states = [FlatState(m) for m in replicas]
        self.same_layout = self._same_layout(self.states)
        # A model made outside scope() has a context of its own, whatever its device.
        self.one_context = len({s.rt.context.int_ptr for s in self.states}) == 1
        self.on_devices = self.reduction == "devices" and self.same_layout
        size = self.states[0].host.size
        self.reads: list[PieceReads] = []  # the host reduction's pieces, where replicas are laid out alike
        if self.on_devices:  # each other replica's flat arrays, copied to the first device to be added
            first = self.runtimes[0]
            self.incoming = [Tensor((size,), model.dtype, first) for _ in self.states[1:]]
            kernel = first.kernel(first.program(("cl/parameters.cl",), model.dtype), "ReduceReplicas", model.dtype)
            # One launch per other replica's incoming arrays (see base.over_flat_arrays for the order given).
            self._reduces = [kernel.bind(("total", "total_first", "other_first", "w_total", "w_other", "n"),
                                         other=incoming) for incoming in self.incoming]
        elif self.same_layout:  # every replica sums all of them on its own device
            self.pieces, ready_after, late = plan_pieces(model, self.states[0])
            self.sums = base.sum_groups(self.pieces, late)
            self.reads = [PieceReads(s, m, self.pieces, ready_after, self.one_context)
                          for s, m in zip(self.states, replicas)]
            self.replica_sums = [ReplicaSum(s, self.replicas, k) for k, s in enumerate(self.states)]
            # The last two steps' copies to and from host memory (the pieces' reads, the copies up,
            # the shard weights), kept until done: pyopencl waits for such a copy when its event
            # (a NannyEvent) is deleted. Dropping each piece's reads once its copies up were queued,
            # the host waited every step for the devices to run up to the last piece and queued the
            # next step late: the wide MLP's step on two GPUs was measurably longer than with the
            # events kept (and than in a profiled run, whose table keeps every event).
            self._in_flight: deque[list[cl.Event]] = deque(maxlen=2)
        else:  # what each replica gets back from the host's sum (padding 0), pinned in its own context, its size
            self._reduced_buffers, self.reduced = zip(*(s.rt.pinned(s.host.size, model.dtype) for s in self.states))
            for reduced in self.reduced:
                reduced.fill(0)

    @staticmethod
    def _same_layout(states: list[FlatState]) -> bool:
        """Whether every replica's flat arrays hold the same elements at the same places (devices
        tuned alike), so that the reduction sums them whole."""
        first = states[0]
        return all(np.array_equal(first.index, s.index) and s.host.size == first.host.size for s in states)

    def _replica(self, model, rt: Runtime):
        """A copy of `model`'s graph, built and compiled on `rt`'s device."""
        from ..model import model_from_config
        with use_runtime(rt), base.scoped(None):  # (fit may run in this strategy's scope)
            replica = model_from_config(model.get_config(), floatx=model.dtype.name)
            if not replica.built:
                replica.build(model.input_shape)
            optimizer = type(model.optimizer).from_config(model.optimizer.get_config())
            replica.compile(optimizer, model.loss, model.metrics)
        return replica

    def _copy_state(self, model) -> None:
        """The replicas start each fit from the model's weights and optimizer state: the flat
        arrays copied whole through pinned memory where the replicas lay parameters out alike, else
        through Keras's layout (replicas whose devices lay out parameters differently)."""
        if self.same_layout:
            self._staging.read(model)
            for replica in self._others:
                self._staging.write(replica)
        else:
            primary = self.states[0]
            weights = model.get_weights()
            moments = {name: tensor.numpy()[primary.index[:primary.trainable]]
                       for name, tensor in model.optimizer.moments.items()}
            for replica, state in zip(self._others, self.states[1:]):
                replica.set_weights(weights)
                for name, tensor in replica.optimizer.moments.items():
                    flat = tensor.numpy()
                    flat[state.index[:state.trainable]] = moments[name]
                    tensor.write(flat)
        for replica in self._others:
            replica.optimizer.iterations = model.optimizer.iterations
            replica.optimizer.set_scalar_state(model.optimizer.scalar_state())  # (a LossScaleOptimizer's scale)

    @property
    def launches_per_step(self) -> list[int]:
        """Kernel launches the reduction adds to each replica's step: on the devices of one
        context, one per other replica and flat array (gradients; non-trainable values) on the
        first device; through the host, on every device one per flat array and range of each sum
        (base.sum_groups); none where the host sums (replicas laid out differently)."""
        state = self.states[0]
        if self.on_devices:
            return [(self.replicas - 1) * len(state.arrays())] + [0] * (self.replicas - 1)
        sums = sum(len(base.flat_segments(state, ranges)) for _, ranges in self.sums) if self.same_layout else 0
        return [sums] * self.replicas

    def synchronize(self, model) -> None:
        sharded = self.sharded
        model.rt.queue.flush()  # the model's step runs while the replicas' are enqueued
        for i, (replica, shard) in enumerate(zip(self._others, sharded.pending), start=1):
            run_shard(replica, self.seen[i], shard, self.reads[i] if self.reads else None)
            self.seen[i] += shard[0]
        weights = self.weights(sharded.rows, sharded.counts)
        if self.on_devices:
            self._reduce_on_devices(weights)
        else:
            self._reduce_on_host(weights)
        for replica in self._others:
            # A callback may have changed the model's learning rate; the replicas step with it.
            replica.optimizer.learning_rate = model.optimizer.schedule or model.optimizer.learning_rate
            replica.optimizer.iterations = model.optimizer.iterations
            replica.optimizer.step()
            replica.rt.queue.flush()  # NVIDIA's runtime starts nothing unflushed: the sum and the update now

    def _reduce_on_devices(self, weights) -> None:
        """Each other replica's flat arrays copied to the first device once its queue has done the
        shard, added there into the first replica's with the shard weights, the sum copied back to
        every other replica; the first device waits for those copies before its next write to the
        arrays. Nothing waits on the host."""
        first = self.states[0]
        rt = first.rt
        started = time.perf_counter()
        w_total = float(weights[0])
        for state, incoming, reduce, w in zip(self.states[1:], self.incoming, self._reduces, weights[1:]):
            state.send(rt.queue, incoming, [cl.enqueue_marker(state.rt.queue)])
            base.over_flat_arrays(first, reduce, w_total, float(w))
            w_total = 1.0
        summed = cl.enqueue_marker(rt.queue)
        received = [event for state in self.states[1:] for event in state.receive(first, [summed])]
        cl.enqueue_barrier(rt.queue, wait_for=received)
        self.reduce_seconds += time.perf_counter() - started

    def _reduce_on_host(self, weights) -> None:
        """Every replica's flat arrays come down to its pinned host array in pieces, each started
        as soon as the backward pass has written it (PieceReads); as soon as a piece is there
        from every replica it goes up to every other replica (on a queue of its own, while the
        devices compute and the next pieces come down), and each replica then sums them all on its
        device (SumReplicas, in replica order: the same bits everywhere). Where replicas lay out
        parameters differently, the host gathers, sums and scatters in Keras's layout instead."""
        if not self.same_layout:
            self._sum_on_host(weights)
            return
        first = self.states[0]
        finished = [reads.finish() for reads in self.reads]
        shares = np.asarray(weights, first.host.dtype)
        held: list[cl.Event] = []  # this step's copies to and from host memory (_in_flight)
        sent: list[list[cl.Event]] = [[] for _ in self.states]  # the copies up that the next sum waits for
        sums = iter(self.sums)
        sum_after, ranges = next(sums)
        started = None  # when every backward pass was done: what the host spent after is the reduction's
        for index, (start, end) in enumerate(self.pieces):
            if self.one_context:  # each copy up waits on the devices for the piece's reads
                after = [event for reads in self.reads for event in reads.take(index)]
                held += after
            else:  # one context each: waited for one by one
                for reads in self.reads:
                    reads.wait(index)
                after = None
            if started is None and all(e.command_execution_status == cl.command_execution_status.COMPLETE
                                       for e in finished):
                started = time.perf_counter()
            for k, replica_sum in enumerate(self.replica_sums):
                # Every replica's reads of the piece, its own too: its sum of the last step has read parts.
                for r in range(self.replicas):
                    if r != k:
                        copy = replica_sum.upload(r, self.states[r].host, start, end, after)
                        self.reads[r].readers.append(copy)  # replica r's next reads into its host wait for it
                        sent[k].append(copy)
                        held.append(copy)
                replica_sum.upload_queue.flush()
            if index + 1 == sum_after:
                for replica_sum, waits in zip(self.replica_sums, sent):
                    # Written only when they change (an epoch's last, smaller batch), the copy's event kept
                    # (_in_flight). Written every step, its event deleted at once, each held the host until
                    # the backward pass's end, so that it queued the other replica's next step late on
                    # two GPUs (the wide MLP's step took noticeably longer than its kernels).
                    held += replica_sum.sum(ranges, shares, waits)
                sent = [[] for _ in self.states]
                sum_after, ranges = next(sums, (None, None))
        self._in_flight.append(held)  # (deleting the step before last's, done unless the host is far ahead)
        if started is not None:
            self.reduce_seconds += time.perf_counter() - started

    def _sum_on_host(self, weights) -> None:
        """Keras layout in between: each replica's elements gathered, summed, scattered back."""
        for event in [e for s in self.states for e in s.read()]:
            event.wait()
        started = time.perf_counter()
        total = sum(w * s.host[s.index] for s, w in zip(self.states, weights))
        for state, reduced in zip(self.states, self.reduced):
            reduced[state.index] = total
            state.write(reduced)
        self.reduce_seconds += time.perf_counter() - started

    def logs(self, model, seen: int, running: bool = False) -> dict:
        loss = hits = 0.0
        for replica, count in zip([model, *self._others], [seen, *self.seen[1:]]):
            part = replica.epoch_totals(count)
            loss, hits = loss + part[0], hits + part[1]
        return model_logs(model, loss, hits, seen + sum(self.seen[1:]))

    @property
    def replica_models(self) -> list:
        """The models on the devices after the first (made by the first fit)."""
        return list(self._others)


class CheckedFeed(ShardedFeed):
    """DataParallel's ShardedFeed: the first epoch after the strategy made its replicas for a model
    runs the speed check (DataParallel's `check_speed`) on its first steps."""

    def _run(self, start: int, end: int):
        batches = super()._run(start, end)
        strategy = self.strategy
        pending, strategy._check_pending = strategy._check_pending, False  # this epoch or none
        if not pending or end - start < CHECK_STEPS or any(state.rt.profiling for state in strategy.states):
            return batches
        return _checked(batches, SpeedCheck(self, start))


def _checked(batches, check: "SpeedCheck"):
    """An epoch's `batches` with the check run after each of its first steps: when fit asks for a
    batch, it has enqueued the step before, and the batch is not gathered yet."""
    with closing(batches):
        for shard in batches:
            yield shard
            if check is not None and not check.after_step():
                check = None  # done: the copy on the first device goes


class SpeedCheck:
    """DataParallel's speed check on the first steps of an epoch of `feed` from its batch `start`:
    blocks of fit's own data-parallel steps, each followed by the same whole batches on a copy of
    the model on its device (the first), the devices' queues waited for at each block's end. The
    copy has its own weights, optimizer and batch buffers: the model, its replicas, the data's
    order and every random draw of training are untouched."""

    def __init__(self, feed: CheckedFeed, start: int):
        self.feed, self.strategy, self.start = feed, feed.strategy, start
        self.steps = 0  # the data-parallel steps fit has enqueued this epoch
        self.marks: list[float] = []  # the clock at each block's end: data-parallel, one device, alternately
        self.single = self.batches = None  # the copy and its batches, once made

    def after_step(self) -> bool:
        """After fit enqueued each step, before the next batch is gathered; False once the check is
        done (having warned where the data-parallel step is slower), or where it cannot run: the
        first device has no memory for the copy at the whole batch."""
        self.steps += 1
        try:
            if self.steps == WARM_STEPS:
                self._copy()
                self._one_device(self.start, WARM_STEPS)  # the copy's own first steps, on the same batches
                self.marks.append(self._finish())
                return True
            if (self.steps - WARM_STEPS) % BLOCK_STEPS:
                return True
            self.marks.append(self._finish())
            self._one_device(self.start + self.steps - BLOCK_STEPS, BLOCK_STEPS)
            self.marks.append(self._finish())
        except cl.MemoryError:
            return False
        if len(self.marks) < 1 + 2 * CHECK_BLOCKS:
            return True
        blocks = np.diff(self.marks) / BLOCK_STEPS  # seconds a step of each block
        data_parallel, one_device = blocks[0::2], blocks[1::2]
        strategy = self.strategy
        strategy.step_ms = (float(np.median(data_parallel)) * 1e3, float(np.median(one_device)) * 1e3)
        if data_parallel.min() > one_device.max():
            devices = ", ".join(f"{info.index}: {info.name!r}" for info in strategy.devices)
            first = strategy.devices[0]
            warnings.warn(f"DataParallel over {strategy.replicas} devices ({devices}) took {strategy.step_ms[0]:.3g} "
                          f"ms a training step, and device {first.index} ({first.name!r}) alone "
                          f"{strategy.step_ms[1]:.3g} ms, on the same batches of {self.feed.batch_size} rows: "
                          "splitting the batch costs more than it gains here (a step too short for the "
                          "reduction and the host's launches, devices of unequal speed, or replicas sharing "
                          "one device). Train on one device (compile without a distribution), or use a larger "
                          "batch or model, or split='measured' for unequal devices; "
                          "DataParallel(check_speed=False) leaves out this check.",
                          SlowerThanOneDeviceWarning, stacklevel=outside_clnet())
        return False

    def _copy(self) -> None:
        """The model made again on its own device (runtime), with its weights: a CPU's arithmetic
        on subnormal numbers is slower, so the copy computes on the same values."""
        model, feed = self.feed.replicas[0], self.feed
        single = self.strategy._replica(model, model.rt)
        single.set_weights(model.get_weights())
        self.batches = feed.train.batches.twin(single.reserve(min(feed.batch_size, feed.samples)))
        self.single = single

    def _one_device(self, first: int, count: int) -> None:
        """The copy's steps on the epoch's whole batches first, ..., first + count - 1."""
        feed = self.feed
        for index in range(first, first + count):
            rows = min(feed.batch_size, feed.samples - index * feed.batch_size)
            x, y = self.batches.batch(index * feed.batch_size, rows)
            self.single.train_step(DeviceBatch(x, y, rows))

    def _finish(self) -> float:
        """The clock once every replica's device has done all it was given (the copy's is the
        first's)."""
        for state in self.strategy.states:
            state.rt.finish()
        return clock()
