"""Getting mini-batches onto the device without a host round-trip per step.

A data set that fits the device-memory budget is copied there once; each epoch uploads only its
order of samples, and each step gathers its rows with one kernel launch (GatherRows). A larger
one streams: the host gathers (or a generator / PyDataset yields) each batch into one of two
staging slots, a second command queue copies it to the device while the previous batch computes,
and the same GatherRows launch, reading the slot in order, fills the batch buffers. Events order
the two queues; nothing waits for the device except the host before it refills a slot whose
previous copy is still running. The host gathers between launches: a second thread doing it
measured slower on a CPU of few cores, where it competes with the CPU device's threads.
Resident or streamed, the layers get the same buffers holding the same values, so results do not
depend on which path ran.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import os
import re
import warnings
import weakref
from collections.abc import Iterator

import numpy as np
import pyopencl as cl

from .cl.runtime import Runtime
from .cl.tensor import Tensor
from .losses.base import as_numeric
from .stacklevel import outside_clnet

DEVICE_SHARE = 0.25  # default budget: this share of the device's memory may hold resident data sets
CHECK_BYTES = 64 << 20  # x is checked for NaN/inf this many bytes at a time (a memmap stays on disk)
SLOTS = 2  # staging slots: the host fills one while the device reads the other
SAMPLED_ROWS = 64  # rows of each array a Fingerprint hashes


def parse_size(text: str) -> int:
    """Bytes in '268435456', '256M', '1.5G', '64KiB' (K, M, G, T are powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"CLNET_DEVICE_MEMORY must be a size in bytes such as 268435456, 256M or 2G; got {text!r}")
    number, unit = match.groups()
    return int(float(number) * 1024 ** ("KMGT".find(unit.upper()) + 1 if unit else 0))


def device_budget(rt: Runtime) -> int:
    """Bytes the data sets of one fit/evaluate/predict may keep on the device:
    $CLNET_DEVICE_MEMORY if set (and not empty), else DEVICE_SHARE of the device's global memory."""
    text = os.environ.get("CLNET_DEVICE_MEMORY")
    if text:
        return parse_size(text)
    return int(DEVICE_SHARE * rt.device.global_mem_size)


def checked(x, name: str) -> np.ndarray:
    """x as an array of finite numbers (as_numeric), checked a block of rows at a time so that
    neither a memmap nor its NaN mask is read into memory whole. The message names the rows of
    the block (x[65536:131072]) when x spans more than one."""
    if not isinstance(x, np.ndarray):
        return as_numeric(x, name)
    as_numeric(x[:0], name)  # the dtype
    rows = max(1, CHECK_BYTES // max(1, x[:1].nbytes))
    for start in range(0, len(x), rows):
        part = name if rows >= len(x) else f"{name}[{start}:{min(start + rows, len(x))}]"
        as_numeric(x[start:start + rows], part)
    return x


def plan(epoch: int, batches: int, steps_per_epoch: int | None) -> tuple[int, int, int]:
    """(pass, first batch, end batch) of an epoch, as Keras's EpochIterator runs them: with
    steps_per_epoch below the batches in the data, consecutive epochs continue through one pass
    of the data (one order), the last of them stopping at its end; then a new pass begins."""
    per_pass = -(-batches // steps_per_epoch) if steps_per_epoch else 1
    chunk = epoch % per_pass
    start = chunk * steps_per_epoch if steps_per_epoch else 0
    end = min(start + steps_per_epoch, batches) if steps_per_epoch else batches
    return epoch // per_pass, start, end


def order(seed: int | None, pass_index: int, n: int) -> np.ndarray:
    """The pass's order of n samples (arrays) or batches (a PyDataset): shuffled by (seed, pass)
    alone, so a resumed run shuffles as an uninterrupted one; in sequence without a seed."""
    if seed is None:
        return np.arange(n)
    return np.random.default_rng([seed, 1, pass_index]).permutation(n)


class Fingerprint:
    """What identifies the arrays of one fit/evaluate/predict call cheaply: the same array
    objects (held weakly), of the same shapes, dtypes and memory, whose SAMPLED_ROWS rows spread
    from first to last hash the same, and the same `options` (the model's float type, a
    validation split...). It does not read whole arrays, so a change to rows it does not sample,
    made in place, goes unseen: give fit a new array (or call Model.forget_data) after one."""

    def __init__(self, leaves: list, options: tuple):
        self.refs = [weakref.ref(a) for a in leaves]
        self.meta = [(a.shape, a.dtype.str, a.strides, a.__array_interface__["data"][0]) for a in leaves]
        self.options = options
        self.digest = hashlib.blake2b(repr((self.meta, options)).encode())
        for a in leaves:
            if len(a):
                rows = np.unique(np.linspace(0, len(a) - 1, SAMPLED_ROWS).astype(np.int64))
                self.digest.update(np.ascontiguousarray(a[rows]).tobytes())
        self.digest = self.digest.digest()

    @classmethod
    def of(cls, *parts, options: tuple = ()) -> "Fingerprint | None":
        """The fingerprint of nested lists, tuples and dicts of numpy arrays (None parts skipped,
        a dict's other values part of `options`), or None where a part is something else (a
        DataFrame, a list of numbers): such data is prepared anew by every call."""
        leaves, extra = [], []
        stack = list(parts)
        while stack:
            part = stack.pop()
            if part is None:
                continue
            if isinstance(part, np.ndarray):
                if part.ndim == 0:
                    return None
                leaves.append(part)
            elif isinstance(part, (list, tuple)) and all(isinstance(p, np.ndarray) for p in part):
                stack.extend(part)
            elif isinstance(part, dict) and all(isinstance(p, np.ndarray) for p in part.values()):
                extra.append(tuple(part))
                stack.extend(part.values())
            elif isinstance(part, dict) and all(np.isscalar(k) and np.isscalar(v) for k, v in part.items()):
                extra.append(tuple(sorted(part.items(), key=repr)))  # class_weight
            else:
                return None
        return cls(leaves, (*options, *extra)) if leaves else None

    def __eq__(self, other) -> bool:
        return (isinstance(other, Fingerprint) and self.digest == other.digest and self.meta == other.meta
                and len(self.refs) == len(other.refs)
                and all(a() is not None and a() is b() for a, b in zip(self.refs, other.refs)))

    __hash__ = None


class KeptData:
    """The device copies of the arrays a model was last given, one per use (fit's training data,
    its validation data, evaluate's, predict's), kept for the next call that passes the same
    arrays (Fingerprint): a walk-forward loop or fit called epoch by epoch copies its data to the
    device once. Only resident data is kept, and the copies kept together stay within
    device_budget: a new copy that would not fit beside them lets the others go first."""

    def __init__(self):
        self.entries: dict[str, tuple[Fingerprint, "Batches", object]] = {}

    def find(self, use: str, fingerprint: Fingerprint | None):
        """(batches, what the caller kept with them) for `use` if its arrays are `fingerprint`'s."""
        entry = self.entries.get(use)
        if fingerprint is None or entry is None or entry[0] != fingerprint:
            return None
        return entry[1], entry[2]

    def keep(self, use: str, fingerprint: Fingerprint | None, batches: "Batches", extra=None,
             release_host: bool = True) -> None:
        """Keep `batches` for `use`'s next call with the arrays of `fingerprint`, where resident;
        `release_host`: let their host arrays go (see Batches.release_host)."""
        if fingerprint is not None and batches.resident:
            if release_host:
                batches.release_host()
            self.entries[use] = (fingerprint, batches, extra)

    def make_room(self, use: str, nbytes: int, budget: int, busy=()) -> None:
        """Let `use`'s copy go, and the others (but those `busy` now) while nbytes more would not
        fit in `budget` beside them."""
        self.entries.pop(use, None)
        for other in [u for u in self.entries if u not in busy]:
            if self.device_bytes(busy) + nbytes <= budget:
                break
            del self.entries[other]

    def device_bytes(self, leaving=()) -> int:
        """The bytes of the kept copies, but those of the uses `leaving`."""
        return sum(entry[1].device_bytes for use, entry in self.entries.items() if use not in leaving)

    def clear(self) -> None:
        self.entries.clear()


def gather_rows_per_item(rt: Runtime, transposed: bool) -> int:
    """The rows each GatherRows work-item copies (see data.cl): four where it writes x^T
    (`transposed`) or runs on a CPU, else one."""
    return 4 if transposed or not rt.info.is_gpu else 1


def gather_size(x_cols: int, y_cols: int, rows: int, per_item: int) -> tuple[int, int]:
    """GatherRows' global size: a work-item for each four columns of `per_item` rows."""
    return -(-max(x_cols, y_cols) // 4), -(-rows // per_item)


def batch_buffers(rt: Runtime, dtype, capacity: int, x_cols: int, y_cols: int, transposed: bool):
    """x_batch (capacity, x_cols), with x_batch.transposed (x_cols, capacity) where the model's
    first layer reads x^T (`transposed`), and y_batch (capacity, y_cols)."""
    x_batch = Tensor((capacity, x_cols), dtype, rt)
    if transposed:
        x_batch.transposed = Tensor((x_cols, capacity), dtype, rt)
    return x_batch, Tensor((capacity, y_cols), dtype, rt)


class _Slot:
    """One staging slot: a host array (pinned where the driver pins ALLOC_HOST_PTR memory, so the
    copy is a DMA the host does not wait for) and its device twin, x rows then y rows."""

    def __init__(self, staging: "Staging", rt: Runtime):
        capacity, x_cols, y_cols, dtype = staging.capacity, staging.x_cols, staging.y_cols, staging.dtype
        step = rt.alignment // dtype.itemsize  # the y part is a sub-buffer: it must start aligned
        y_offset = -(-capacity * x_cols // step) * step
        size = y_offset + max(capacity * y_cols, 1)
        self.pinned, self.host = rt.pinned(size, dtype)
        self.x = self.host[:capacity * x_cols].reshape(capacity, x_cols)                     # (capacity, x_cols)
        self.y = self.host[y_offset:y_offset + capacity * y_cols].reshape(capacity, y_cols)  # (capacity, y_cols)
        self.y_offset = y_offset
        self.device = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, size * dtype.itemsize)
        x_part = self.device.get_sub_region(0, max(capacity * x_cols, 1) * dtype.itemsize)
        y_part = self.device.get_sub_region(y_offset * dtype.itemsize, max(capacity * y_cols, 1) * dtype.itemsize)
        # One kernel object per slot keeps its arguments, all named here, set from step to step.
        x_batch_t, ld = staging.x_batch.transposed_arguments()
        self.gather = rt.kernel(staging.program, "GatherRows", dtype).bind(
            ("rows",), x=x_part, y=y_part, index=staging.identity, first=0, x_cols=x_cols, y_cols=y_cols,
            x_batch=staging.x_batch, x_batch_t=x_batch_t, ld=ld, per_item=staging.per_item, y_batch=staging.y_batch)
        self.copied: cl.Event | None = None  # the last copy out of `host`
        self.read: list[cl.Event] = []      # the last GatherRows out of `device`


class Staging:
    """Double-buffered upload of host batches into x_batch (and its transpose, see batch_buffers)
    and y_batch."""

    def __init__(self, rt: Runtime, x_cols: int, y_cols: int, capacity: int, dtype, transposed: bool = True):
        self.rt, self.dtype = rt, np.dtype(dtype)
        self.x_cols, self.y_cols, self.capacity = x_cols, y_cols, capacity
        self.x_batch, self.y_batch = batch_buffers(rt, self.dtype, capacity, x_cols, y_cols, transposed)
        self.identity = Tensor.from_numpy(np.arange(capacity, dtype=np.int32), rt=rt)  # row r of the slot
        self.per_item = gather_rows_per_item(rt, transposed)
        self.program = rt.program(("data.cl",), self.dtype)
        self.slots = [_Slot(self, rt) for _ in range(SLOTS)]
        self.turn = 0

    def acquire(self) -> _Slot:
        """The next slot, once its previous copy has left the host array."""
        slot = self.slots[self.turn]
        self.turn = (self.turn + 1) % SLOTS
        if slot.copied is not None:
            slot.copied.wait()
        return slot

    def send(self, slot: _Slot, rows: int) -> tuple[Tensor, Tensor]:
        """Copy the slot's first `rows` rows on the transfer queue (after the device finished reading
        the slot's last batch) and gather them into the batch buffers once the copy is done."""
        rt = self.rt
        if not self.y_cols:
            pieces = [(slot.host[:rows * self.x_cols], 0)]
        elif rows == self.capacity:  # the whole slot in one copy
            pieces = [(slot.host, 0)]
        else:  # a short last batch: its x rows and its y rows
            pieces = [(slot.x[:rows].reshape(-1), 0), (slot.y[:rows].reshape(-1), slot.y_offset * self.dtype.itemsize)]
        for host, offset in pieces:  # the queue is in order: the last copy's event covers both
            slot.copied = cl.enqueue_copy(rt.transfer_queue, slot.device, host, dst_offset=offset,
                                          is_blocking=False, wait_for=slot.read)
        cl.enqueue_barrier(rt.queue, wait_for=[slot.copied])
        slot.gather(gather_size(self.x_cols, self.y_cols, rows, self.per_item), None, rows)
        slot.read = [cl.enqueue_marker(rt.queue)]
        return self.x_batch, self.y_batch


class Batches:
    """Batches of `x` (samples, features) and `y` (samples, outputs, or None), in an order set per
    epoch: resident on the device when they fit `budget` bytes (default: device_budget), else
    gathered on the host and streamed through a Staging. `x` and `y` are converted to `dtype`
    (default x's) as they go to the device; x is also written transposed where `transposed` (the
    model's first layer reads x^T)."""

    def __init__(self, rt: Runtime, x: np.ndarray, y: np.ndarray | None, capacity: int, dtype=None,
                 budget: int | None = None, transposed: bool = True):
        self.rt, self.dtype = rt, np.dtype(dtype or x.dtype)
        self.transposed = transposed
        self.samples = len(x)
        self.arrays = (x, y)  # the host arrays, which a distributed fit's other replicas read too
        y_cols = 0 if y is None else y.shape[1]
        sizes = [len(x) * x.shape[1] * self.dtype.itemsize, len(x) * y_cols * self.dtype.itemsize]
        budget = device_budget(rt) if budget is None else budget
        self.resident = sum(sizes) <= budget and max(sizes) <= rt.device.max_mem_alloc_size
        self.device_bytes = sum(sizes) if self.resident else 0
        self.x_cols, self.y_cols = x.shape[1], y_cols
        if self.resident:
            # A CPU device reads the host's memory itself: staging would be a copy more.
            upload = Tensor.from_numpy if rt.info.type == "CPU" else Tensor.staged
            self.x = upload(x, self.dtype, rt)
            self.y = upload(np.zeros((len(x), 0)) if y is None else y, self.dtype, rt)
            self.index = Tensor((self.samples,), np.int32, rt)
        else:
            self.x_host, self.y_host = x, y
        self.allocate(capacity)
        self.order(np.arange(self.samples))

    def release_host(self) -> None:
        """Let the host arrays go where the data is resident (a copy kept between calls needs
        them no more, but under a distribution, whose other replicas read them)."""
        if self.resident:
            self.arrays = None

    def allocate(self, capacity: int) -> None:
        """Batch buffers of `capacity` rows: the model's, whose first layer reads x^T with it."""
        self.capacity = capacity
        if self.resident:
            self.x_batch, self.y_batch = batch_buffers(self.rt, self.dtype, capacity, self.x_cols, self.y_cols,
                                                       self.transposed)
            x_batch_t, ld = self.x_batch.transposed_arguments()
            self._per_item = gather_rows_per_item(self.rt, self.transposed)
            self._gather = self.rt.shared_kernel(("data.cl",), "GatherRows", self.dtype).bind(
                ("first", "rows"), x=self.x, y=self.y, index=self.index, x_cols=self.x.shape[1], y_cols=self.y.shape[1],
                x_batch=self.x_batch, x_batch_t=x_batch_t, ld=ld, per_item=self._per_item, y_batch=self.y_batch)
        else:
            self.staging = Staging(self.rt, self.x_cols, self.y_cols, capacity, self.dtype, self.transposed)

    def twin(self, capacity: int) -> "Batches":
        """The same data in the same order, into batch buffers of its own of `capacity` rows:
        another model's batches on the same device (DataParallel's speed check), without a second
        copy of the data there, and without touching these batches' buffers."""
        twin = copy.copy(self)
        twin.allocate(capacity)
        return twin

    def order(self, permutation: np.ndarray) -> None:
        self.permutation = np.asarray(permutation, np.int32)
        if self.resident:
            self.index.write(self.permutation)

    def batch(self, first: int, rows: int) -> tuple[Tensor, Tensor]:
        """The rows order[first:first+rows], as device tensors of `rows` valid rows."""
        if self.resident:
            self._gather(gather_size(self.x.shape[1], self.y.shape[1], rows, self._per_item), None, first, rows)
            return self.x_batch, self.y_batch
        slot = self.staging.acquire()
        self._fill(slot, first, rows)
        return self.staging.send(slot, rows)

    def _fill(self, slot: _Slot, first: int, rows: int) -> None:
        """Gather the rows order[first:first+rows] into the slot's host arrays, as `dtype`."""
        index = self.permutation[first:first + rows]
        for host, into in ((self.x_host, slot.x), (self.y_host, slot.y)):
            if host is None:
                continue
            if host.dtype == self.dtype:  # straight into the slot, without a temporary
                np.take(host, index, axis=0, out=into[:rows], mode="clip")
            else:  # (np.take casts the slot's old bytes too, and warns of any signalling NaN there)
                into[:rows] = host[index]

    def run(self, batch_size: int, start: int, end: int) -> Iterator[tuple[int, Tensor, Tensor]]:
        """(rows, x_batch, y_batch) for batches start..end-1 of the order."""
        for b in range(start, end):
            rows = min(batch_size, self.samples - b * batch_size)
            yield (rows, *self.batch(b * batch_size, rows))


class ArrayFeed:
    """An array data set as fit/evaluate/predict iterate it: batches of `batch_size` in a
    shuffled (seed) or sequential order, `steps` of them an epoch. `reserve` as for Stream.
    `weighted`: its targets end with a column of sample weights (set by the model that made it)."""
    weighted = False

    def __init__(self, batches: Batches, batch_size: int, steps: int | None, seed: int | None, reserve,
                 ready=lambda: None):
        self.batches, self.batch_size, self.seed, self.reserve = batches, batch_size, seed, reserve
        self.ready = ready  # () -> the model made on this data's lengths (another data set's may differ)
        self.total = -(-batches.samples // batch_size)
        self.steps_per_epoch = steps
        self.exhausted = False

    @property
    def steps(self) -> int:
        _, start, end = plan(0, self.total, self.steps_per_epoch)
        return end - start

    @property
    def samples(self) -> int:
        return min(self.batches.samples, self.steps * self.batch_size)

    def epoch(self, epoch: int) -> Iterator[tuple[int, Tensor, Tensor]]:
        pass_index, start, end = plan(epoch, self.total, self.steps_per_epoch)
        self.ready()
        capacity = self.reserve(min(self.batch_size, self.batches.samples))
        if capacity != self.batches.capacity:  # another data set's batches grew the model's
            self.batches.allocate(capacity)
        # (in sequence too without a seed: kept batches may hold an earlier call's shuffled order)
        self.batches.order(order(self.seed, pass_index, self.batches.samples))
        return self.batches.run(self.batch_size, start, end)


def is_stream(x) -> bool:
    """A generator (any iterator) or a PyDataset-like object (__len__ and __getitem__, not an
    array, nor a dict of arrays by input name)."""
    if isinstance(x, (np.ndarray, list, tuple, dict, str, bytes)) or hasattr(x, "__array__"):
        return False
    return isinstance(x, (Iterator, PyDataset)) or (hasattr(x, "__len__") and hasattr(x, "__getitem__"))


class Stream:
    """Batches yielded by a generator or served by a PyDataset, checked one at a time (`prepare`
    raises for a bad one before anything is launched for it) and streamed through a Staging.

    `prepare(x, y, step)` returns the batch's x as (rows, features) and y as (rows, outputs) or
    None; `reserve(rows)` makes the model ready for batches of `rows` and returns its capacity.
    Its batches are not weighted (`weighted`).
    """
    weighted = False

    def __init__(self, rt: Runtime, source, name: str, prepare, reserve, dtype, targets: bool,
                 steps: int | None, seed: int | None, transposed=lambda: True):
        self.rt, self.source, self.name, self.dtype = rt, source, name, np.dtype(dtype)
        self.transposed = transposed  # () -> whether the model's first layer reads x^T, once it is built
        self.prepare, self.reserve, self.targets = prepare, reserve, targets
        self.generator = isinstance(source, Iterator) and not isinstance(source, PyDataset)
        self.kind = "generator" if self.generator else "PyDataset"
        self.steps_per_epoch, self.seed = steps, seed
        self.stagings: dict[tuple, Staging] = {}  # by (capacity, x columns, y columns): batches' lengths may differ
        self.exhausted = False  # a generator ran out
        self.pending = None     # a generator's first batch, read ahead by peek()
        if not self.generator:
            try:
                self.total = int(len(source))
            except Exception as error:
                raise TypeError(f"{name} (a PyDataset) must have a length, the number of batches: "
                                f"len() raised {type(error).__name__}: {error}") from None
            if self.total < 1:
                raise ValueError(f"{name} (a PyDataset) has no batches: len() is {self.total}")

    @property
    def steps(self) -> int | None:
        if self.generator:
            return self.steps_per_epoch
        _, start, end = plan(0, self.total, self.steps_per_epoch)
        return end - start

    samples = None  # not known before the batches are read

    def peek(self) -> None:
        """Read and check the first batch ahead, which builds an unbuilt model from its shape
        before training starts (as Keras does); a generator's is kept for the first epoch."""
        batch = self._read(lambda: next(self.source) if self.generator else self.source[0], 0, 0)
        if batch is StopIteration:
            raise ValueError(f"{self.name} (a generator) yielded no batches")
        self._prepare(batch, 0)
        if self.generator:
            self.pending = batch

    def epoch(self, epoch: int) -> Iterator[tuple[int, Tensor, Tensor]]:
        if self.generator:
            for step in range(self.steps_per_epoch) if self.steps_per_epoch else itertools.count():
                batch, self.pending = self.pending, None
                if batch is None:
                    batch = self._read(lambda: next(self.source), step, epoch)
                if batch is StopIteration:
                    self.exhausted = True
                    return
                yield self._send(batch, step)
            return
        pass_index, start, end = plan(epoch, self.total, self.steps_per_epoch)
        indices = order(self.seed, pass_index, self.total)[start:end]
        self._call("on_epoch_begin")
        for step, index in enumerate(indices):
            yield self._send(self._read(lambda: self.source[int(index)], step, epoch), step)
        self._call("on_epoch_end")

    def _call(self, hook: str) -> None:
        method = getattr(self.source, hook, None)
        if callable(method):
            method()

    def _read(self, fetch, step: int, epoch: int):
        try:
            return fetch()
        except StopIteration:
            return StopIteration
        except Exception as error:
            raise RuntimeError(f"{self.name} (a {self.kind}) raised {type(error).__name__} at batch {step} "
                               f"of epoch {epoch + 1}: {error}. Nothing was launched for that batch: the "
                               f"weights are those after the last completed step") from error

    def _prepare(self, batch, step: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The batch's (x, y) checked by the model's prepare, or an error naming the batch."""
        if isinstance(batch, list):
            batch = tuple(batch)
        if not self.targets and not isinstance(batch, tuple):
            batch = (batch,)
        if not isinstance(batch, tuple) or len(batch) not in ((1, 2) if not self.targets else (2,)):
            expected = "(x, y)" if self.targets else "x, (x,) or (x, y)"
            got = f"a tuple of {len(batch)}" if isinstance(batch, tuple) else type(batch).__name__
            raise ValueError(f"{self.name} (a {self.kind}) must give batches as {expected}; batch {step} is {got}")
        return self.prepare(batch[0], batch[1] if self.targets else None, step)

    def _send(self, batch, step: int) -> tuple[int, Tensor, Tensor]:
        x, y = self._prepare(batch, step)
        rows = len(x)
        capacity = self.reserve(rows)
        key = (capacity, x.shape[1], 0 if y is None else y.shape[1])
        staging = self.stagings.get(key)
        if staging is None:
            staging = self.stagings[key] = Staging(self.rt, *key[1:], capacity, self.dtype, self.transposed())
        slot = staging.acquire()
        slot.x[:rows] = x
        if y is not None:
            slot.y[:rows] = y
        return (rows, *staging.send(slot, rows))


class PyDataset:
    """A data set served in batches, as `keras.utils.PyDataset`: implement `__len__` (the number of
    batches) and `__getitem__(index)` returning a batch `(x, y)` (for predict, `x` alone or `(x,)`),
    and optionally `on_epoch_begin` / `on_epoch_end`. fit shuffles the batch order each epoch when
    `shuffle=True`. Any object with `__len__` and `__getitem__` is accepted as well.

    `workers`, `use_multiprocessing` and `max_queue_size` are accepted so that Keras subclasses run
    unchanged; clnet reads batches in the calling thread (Keras's workers=1) and ignores them."""

    def __init__(self, workers: int = 1, use_multiprocessing: bool = False, max_queue_size: int = 10):
        self.workers, self.use_multiprocessing, self.max_queue_size = workers, use_multiprocessing, max_queue_size

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__: the number of batches")

    def __getitem__(self, index: int):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__(index): batch `index`")

    def on_epoch_begin(self) -> None:
        pass

    def on_epoch_end(self) -> None:
        pass


def ran_out(name: str) -> None:
    warnings.warn(f"{name} ran out of data; interrupting training. Make sure that your generator can "
                  "generate at least steps_per_epoch * epochs batches", stacklevel=outside_clnet())
