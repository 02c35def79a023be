"""What both data-parallel strategies share: the split of a batch into shards, the feed that gathers
each local replica's shard on its own device, the training step of the replicas other than the
model itself, and the flat host arrays the one gradient reduction per step works on.

A step, for a batch of `rows` rows split into shards rows_0 + rows_1 + ... = rows:
each replica runs forward, loss and backward on its shard with the loss's own 1/rows_i scaling, so
its gradient is the mean over its shard; the reduction sums rows_i/rows · g_i, the mean over the
whole batch (the loss is a mean over samples); every replica then applies that same gradient with
its own copy of the optimizer, whose state therefore stays identical. Non-trainable parameters
(BatchNormalization's moving statistics, moved in the forward pass by each replica from its shard's
statistics) travel in the same reduction and become the same rows_i/rows-weighted average."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pyopencl as cl

from ..cl.tensor import Tensor
from ..data import ArrayFeed, order, plan
from ..step import DeviceBatch

_current: "Distribution | None" = None


def current() -> "Distribution | None":
    """The strategy whose scope() is open, if any: compile() uses it when given no distribution."""
    return _current


@contextmanager
def scoped(strategy: "Distribution | None"):
    """Within, current() is `strategy`; None for a strategy's own models (its replicas), compiled
    as one device's even where fit runs in the strategy's scope."""
    global _current
    previous, _current = _current, strategy
    try:
        yield strategy
    finally:
        _current = previous


class Distribution:
    """A strategy: `replicas` in all (devices, or ranks), of which this process runs `local`. The
    base of `DataParallel` and `MPIDataParallel`: given to `compile(distribution=...)`, or opened
    with `with strategy.scope():` so that models compiled inside use it (as Keras's distribution
    scope). `chief` is whether this process writes checkpoints, shows the progress bar and runs the
    writing callbacks. Takes no arguments."""

    chief = True  # this process writes checkpoints, shows the progress bar and runs writing callbacks

    def __init__(self):
        self.seen: list[int] = []  # rows each local replica has trained on this epoch
        # Host seconds spent combining gradients once the backward passes are done (DataParallel's
        # pieces going down and up, or numpy's sum; the MPI all-reduce with any wait for a slower
        # rank); benchmarks/data_parallel.py reads it.
        self.reduce_seconds = 0.0

    def scope(self):
        """Models made and compiled inside use this strategy (as Keras's distribution scope)."""
        return scoped(self)

    # -- what a strategy supplies ----------------------------------------------------------------
    replicas = 1

    def attach(self, model) -> None:
        """Called by compile(): check that the model can be trained this way."""

    def shares(self) -> list[float]:
        """Each replica's share of a batch (summing to 1)."""
        return [1.0 / self.replicas] * self.replicas

    # -- the batch split -----------------------------------------------------------------------
    def split(self, rows: int) -> list[int]:
        """Rows of each replica for a batch of `rows`: rows · share rounded by the largest
        remainders (an even split gives the first replicas the odd rows), then at least one each."""
        exact = rows * np.asarray(self.shares(), float)
        counts = np.floor(exact).astype(int)
        counts[np.argsort(-(exact - counts), kind="stable")[:rows - counts.sum()]] += 1
        for empty in np.flatnonzero(counts == 0) if rows >= self.replicas else ():
            counts[np.argmax(counts)] -= 1  # the largest has two or more while a replica has none
            counts[empty] += 1
        return counts.tolist()

    def check_batches(self, feed: ArrayFeed) -> None:
        """Every batch of an epoch (the last one too) needs a row per replica."""
        name = type(self).__name__
        smallest = min(feed.batch_size, feed.batches.samples - (feed.total - 1) * feed.batch_size)
        if feed.batch_size < self.replicas:
            raise ValueError(f"batch_size={feed.batch_size} is smaller than the {self.replicas} replicas of {name}: "
                             f"each replica needs at least one row of every batch; use batch_size >= {self.replicas}")
        if smallest < self.replicas:
            raise ValueError(f"the last batch of {feed.batches.samples} samples in batches of {feed.batch_size} has "
                             f"{smallest} rows, fewer than the {self.replicas} replicas of {name}, and each replica "
                             f"needs at least one; drop the last {smallest} samples or choose another batch_size")

    # -- the hooks fit() calls -----------------------------------------------------------------
    def prepare(self, model, train, callbacks: list) -> tuple["ShardedFeed", list]:
        """The training feed split across the replicas, and the callbacks this process runs."""
        if not isinstance(train, ArrayFeed):
            raise TypeError(f"{type(self).__name__} trains on arrays (a memmap too), which each replica reads its "
                            f"rows of; got x as a {type(train).__name__.lower()} (a generator or PyDataset): "
                            "pass the arrays, or train without a distribution")
        self.check_batches(train)
        return self.feed(model, train), callbacks

    def feed(self, model, train: ArrayFeed) -> "ShardedFeed":
        raise NotImplementedError

    def gradient_reads(self, model):
        """What fit's backward pass tells as each layer's gradients are enqueued, so that the
        reduction starts on them (a PieceReads, see Model._backward), or None."""
        return None

    def synchronize(self, model) -> None:
        """Between the model's backward pass and its optimizer step: the other local replicas'
        steps, and the one reduction of gradients over every replica."""
        raise NotImplementedError

    def logs(self, model, seen: int, running: bool = False) -> dict:
        """The epoch's mean loss (and accuracy) over every replica's rows; `running`: so far in the
        epoch, for the chief's progress bar."""
        raise NotImplementedError

    # -- shared pieces -------------------------------------------------------------------------
    def weights(self, rows: int, counts: list[int]) -> np.ndarray:
        return np.asarray(counts, float) / rows


class ShardedFeed:
    """An ArrayFeed seen by several replicas: every local replica gathers, on its own device, its
    shard of each batch (rows [first, first + rows_i) of the epoch's order, which every replica
    computes alike from the seed). Yields the model's own shard as (rows, x, y), as ArrayFeed
    does, and keeps the other local replicas' shards in `pending` for synchronize(). Its batches
    are not weighted (fit refuses sample weights under a distribution)."""
    weighted = False

    def __init__(self, strategy: Distribution, train: ArrayFeed, replicas: list, batches: list, first: int):
        self.strategy, self.train = strategy, train
        self.replicas, self.batches = replicas, batches  # local models and their Batches, the model first
        self.first = first  # the global index of the first local replica
        self.batch_size, self.total, self.samples = train.batch_size, train.total, train.batches.samples
        self.exhausted = False
        self.pending: list[tuple] = []
        self.counts: list[int] = []  # every replica's rows in the current batch
        self.rows = 0

    @property
    def steps(self) -> int:
        return self.train.steps

    def epoch(self, epoch: int):
        pass_index, start, end = plan(epoch, self.total, self.train.steps_per_epoch)
        largest = max(self.strategy.split(self.batch_size))
        for model, batches in zip(self.replicas, self.batches):
            capacity = model.reserve(largest)
            if capacity != batches.capacity:
                batches.allocate(capacity)
            if self.train.seed is not None:
                batches.order(order(self.train.seed, pass_index, self.samples))
        self.strategy.seen = [0] * len(self.replicas)
        return self._run(start, end)

    def _run(self, start: int, end: int):
        for b in range(start, end):
            self.rows = min(self.batch_size, self.samples - b * self.batch_size)
            self.counts = self.strategy.split(self.rows)
            offsets = np.concatenate([[0], np.cumsum(self.counts)]) + b * self.batch_size
            shards = []
            for i, batches in enumerate(self.batches):
                rows = self.counts[self.first + i]
                shards.append((rows, *batches.batch(int(offsets[self.first + i]), rows)))
            self.pending = shards[1:]
            self.strategy.seen[0] += shards[0][0]
            yield shards[0]


def flat_layout(model) -> tuple:
    """What a model's flat arrays for a reduction stand for (FlatState): its store, the store's
    arrays and the optimizer's moments (held, so that none is freed while compared by identity
    from one fit to the next: a layer frozen or unfrozen makes them anew)."""
    store = model.store
    return (store, store.values, store.grads, *model.optimizer.moments.values())


def same_objects(layouts: list[tuple], last: list[tuple] | None) -> bool:
    """Whether `layouts` (flat_layout's, one per replica) hold the objects `last` held."""
    return last is not None and len(layouts) == len(last) and all(
        len(new) == len(old) and all(a is b for a, b in zip(new, old)) for new, old in zip(layouts, last))


class StateStaging:
    """A model's weights and optimizer moments (store.values, then each moment, flat, in the
    model's layout) read into one pinned host array, which replicas laid out alike are written
    from (DataParallel)."""

    def __init__(self):
        self._buffer, self.array, self.starts = None, None, [0]

    def read(self, model) -> np.ndarray:
        tensors = _state_tensors(model)
        self.starts = np.cumsum([0] + [t.size for t in tensors]).tolist()
        elements = self.starts[-1]
        if self.array is None or self.array.size != elements or self.array.dtype != model.dtype:
            self._buffer, self.array = model.rt.pinned(elements, model.dtype)
        for tensor, a, b in zip(tensors, self.starts, self.starts[1:]):
            tensor.numpy(out=self.array[a:b])
        return self.array

    def write(self, model) -> None:
        """The state read last into `model`, laid out alike."""
        for tensor, a, b in zip(_state_tensors(model), self.starts, self.starts[1:]):
            tensor.write(self.array[a:b])


def _state_tensors(model) -> list:
    return [model.store.values, *model.optimizer.moments.values()]


DIGEST_ITEMS = 256  # parameters.cl's work-group of DigestWords


def state_digest(model) -> tuple[int, int]:
    """The xor and the wrapping 64-bit sum of the 32-bit words of a model's weights and optimizer
    moments (store.values, then each moment, padding included), computed on its device
    (DigestWords): what MPI's ranks compare at each fit's start. Models laid out alike with the
    same state give the same pair; a rank given other weights differs in both but by a vanishing
    chance."""
    rt = model.rt
    launch = rt.shared_kernel(("cl/parameters.cl",), "DigestWords", model.dtype)
    xor, total = np.uint64(0), np.uint64(0)
    for tensor in _state_tensors(model):
        words = Tensor((tensor.nbytes // 4,), np.uint32, rt, tensor.buffer)
        groups = max(1, min(-(-words.size // DIGEST_ITEMS), 4 * rt.info.compute_units))
        partials = Tensor((groups, 2), np.uint64, rt)
        launch((groups * DIGEST_ITEMS,), (DIGEST_ITEMS,), words=words, count=np.int32(words.size), partials=partials)
        folded = partials.numpy()
        xor ^= np.bitwise_xor.reduce(folded[:, 0])
        total += np.add.reduce(folded[:, 1], dtype=np.uint64)
    return int(xor), int(total)


class FlatState:
    """One replica's reduction arrays on the host: the trainable gradients (the store's grads) and
    the non-trainable values after them (values[size:]), read and written with one wait."""

    def __init__(self, model):
        store = model.store
        self.model, self.rt, self.store = model, model.rt, store
        self.size = store.size
        self.extra = store.values.size - store.size
        # (trainable gradients + non-trainable values,), pinned: the copies run while the host waits
        # on the other replicas.
        self._pinned, self.host = self.rt.pinned(self.size + self.extra, store.dtype)
        # Where each element of the parameters in Keras layout sits in `host`, trainable ones first:
        # replicas on devices that lay parameters out differently (Dense's panels) meet there.
        trainable = [p for p in store.parameters if p.trainable]
        fixed = [p for p in store.parameters if not p.trainable]
        self.index = np.concatenate([p.offset + p.keras_index.ravel() for p in trainable + fixed]
                                    or [np.zeros(0, int)]).astype(np.int64)
        self.trainable = sum(p.keras_index.size for p in trainable)
        self.packing = None  # (PackBfloat16 launch, packed tensor, its first element, host array), see pack()

    def pack(self, packed: Tensor | None, first: int = 0, host: np.ndarray | None = None) -> None:
        """From now on the trainable gradients come down as bfloat16 (MPIDataParallel's
        compression): read() rounds gradients [start, end) into packed[first + start ...] on the
        device, then copies those into host[start:end] (uint16, registered or pinned); the
        non-trainable values still come to `self.host` whole. None: as floats again."""
        if packed is None:
            self.packing = None
            return
        launch = self.rt.kernel(self.rt.program(("cl/parameters.cl",), self.store.dtype), "PackBfloat16",
                                self.store.dtype).bind(("x_first", "packed_first", "n"), x=self.store.grads,
                                                       packed=packed)
        self.packing = (launch, packed, first, host)

    def place(self, host: np.ndarray | None) -> None:
        """Read into and write from `host` (size + extra elements, e.g. memory other processes
        share) instead of the pinned array: registered with the device (Runtime.registered), so
        that the copies run by DMA where the driver pins such memory. None: a pinned array of its
        own again."""
        if host is None:
            self._pinned, self.host = self.rt.pinned(self.size + self.extra, self.store.dtype)
        else:
            self._pinned, self.host = self.rt.registered(host), host

    def read(self, start: int = 0, end: int | None = None, queue=None, wait_for=None) -> list[cl.Event]:
        """Start copying this replica's gradients and non-trainable values, elements [start, end)
        of the flat arrays (all by default), into `host`, on `queue` (the device's own by default)
        once `wait_for` is done."""
        item, end = self.host.itemsize, self.host.size if end is None else end
        queue = queue or self.rt.queue
        copies = []
        for buffer, first, last in self._pieces(start, end):
            if self.packing is not None and buffer is self.store.grads.buffer:
                launch, packed, offset, host = self.packing
                # (on the main queue, in order after the backward launch that wrote the gradients:
                # a launch on `queue` would wait across queues, and the step for each piece in turn)
                rounded = launch(*whole_groups(self.rt, last - first), first, offset + first, last - first,
                                 queue=self.rt.queue, wait_for=wait_for)
                copies.append(cl.enqueue_copy(queue, host[first:last], packed.buffer, src_offset=(offset + first) * 2,
                                              is_blocking=False, wait_for=[rounded]))
            else:
                copies.append(cl.enqueue_copy(queue, self.host[first:last], buffer, src_offset=first * item,
                                              is_blocking=False, wait_for=wait_for))
        return self._profiled("ReduceRead", copies)

    def write(self, reduced: np.ndarray, start: int = 0, end: int | None = None) -> list[cl.Event]:
        """Start copying elements [start, end) of `reduced` (all by default; kept alive by the
        caller until the events complete) back to the device's flat arrays."""
        item, end = self.host.itemsize, self.host.size if end is None else end
        return self._profiled("ReduceWrite", [
            cl.enqueue_copy(self.rt.queue, buffer, reduced[first:last], dst_offset=first * item, is_blocking=False)
            for buffer, first, last in self._pieces(start, end)])

    def arrays(self) -> list[tuple]:
        """(device tensor, first, count) of each non-empty flat array: the gradients (grads[0:size])
        and the non-trainable values after them (values[size:size + extra])."""
        arrays = [(self.store.grads, 0, self.size), (self.store.values, self.size, self.extra)]
        return [array for array in arrays if array[2]]

    def _pieces(self, start: int, end: int) -> list[tuple[cl.Buffer, int, int]]:
        """(device buffer, first, last): where the flat elements [start, end) live."""
        pieces = [(tensor.buffer, max(start, first), min(end, first + count)) for tensor, first, count in self.arrays()]
        return [piece for piece in pieces if piece[1] < piece[2]]

    def send(self, queue, target, wait_for) -> list[cl.Event]:
        """On `queue` (another device's, in the same context), copy this replica's flat arrays into
        `target`, a buffer of size + extra elements, once `wait_for` is done."""
        return self._profiled("ReduceRead", [self._copy(queue, target, mine, first, count, wait_for)
                                             for mine, first, count in self.arrays()])

    def receive(self, source: "FlatState", wait_for) -> list[cl.Event]:
        """On this replica's queue, copy `source`'s flat arrays (the sum, on another device of the
        context) into this replica's, once `wait_for` is done."""
        return self._profiled("ReduceWrite", [self._copy(self.rt.queue, mine, theirs, first, count, wait_for)
                                              for (mine, first, count), (theirs, _, _)
                                              in zip(self.arrays(), source.arrays())])

    def _copy(self, queue, target, source, first: int, count: int, wait_for) -> cl.Event:
        """A device-to-device copy of elements [first, first + count) of `source` into `target`."""
        item = self.store.dtype.itemsize
        return cl.enqueue_copy(queue, target.buffer, source.buffer, byte_count=count * item,
                               src_offset=first * item, dst_offset=first * item, wait_for=wait_for)

    def _profiled(self, name: str, events: list[cl.Event]) -> list[cl.Event]:
        """Under clnet.profile() the copies appear in the table beside the kernels."""
        if self.rt.profiling:
            self.rt.events.extend((name, event, 0.0) for event in events)
        return events


# The host reductions move the flat arrays in pieces: each layer's gradients in pieces of at least
# PIECE_ELEMENTS, at most REDUCE_PIECES a layer, so that one piece goes on while the next comes down.
REDUCE_PIECES = 8
PIECE_ELEMENTS = 1 << 20
# What a step waits for after its backward pass is the last part of the layer it ends with (see
# Layer.gradient_parts): copied in TAIL_PIECES pieces, each going up while the next comes down. On
# two GPUs the wide MLP's last part was up sooner after the last kernel in 4 pieces than in one.
TAIL_PIECES = 4


def piece_count(start: int, end: int, elements: int | None = None) -> int:
    """Pieces of the flat elements [start, end), one layer's, of about `elements` (PIECE_ELEMENTS) each."""
    return max(1, min(REDUCE_PIECES, (end - start) // (elements or PIECE_ELEMENTS)))


def plan_pieces(model, state: FlatState,
                elements: int | None = None) -> tuple[list[tuple[int, int]], dict[int, list[int]], int]:
    """`state`'s flat arrays cut into pieces, in the order the backward pass finishes them: each
    layer's gradients (from its first parameter to the next layer's; in pieces of at least
    `elements`, PIECE_ELEMENTS by default, at most REDUCE_PIECES), the last layer's first; then
    the non-trainable values. Returns the pieces as (start, end); by the layer's position in
    model.runs, the indices of the pieces its backward pass completes; and the index of the first
    piece that only the backward pass's last launch (or its end) completes: the pieces before it are
    complete while that launch runs. Where a layer is called more than once (its gradients are
    summed after the whole backward pass), or a layer's parameters are not all before the next
    layer's, every piece waits for the backward pass's end."""
    spans = sorted((min(p.offset for p in trainable), max(p.offset + p.size for p in trainable), position)
                   for position, (runner, _) in enumerate(model.runs)
                   if (trainable := [p for p in runner.parameters if p.trainable]))
    starts = [0] + [start for start, _, _ in spans[1:]] + [state.size]
    if model.store.shared or not spans or any(end > starts[i + 1] for i, (_, end, _) in enumerate(spans)):
        spans, starts = [(0, state.size, None)], [0, state.size]
    layers = sorted([(starts[i], starts[i + 1], position) for i, (_, _, position) in enumerate(spans)],
                    key=lambda layer: -1 if layer[2] is None else -layer[2])
    pieces, ready_after, late = [], {}, 0
    for start, end, position in layers:
        count = piece_count(start, end, elements)
        # A layer that completes its gradients in parts (Layer.gradient_parts) is cut where they
        # end, so that each part is a piece, read as soon as its launch is done.
        parts = [] if position is None else model.runs[position][0].gradient_parts(count)
        cuts = {cut for part in parts for cut in part if start < cut < end}
        late = len(pieces)  # (the layer's pieces are complete at its end, unless it has parts)
        if cuts and position == layers[-1][2]:  # the backward pass's last launch: its part in TAIL_PIECES
            first, last = parts[-1]
            cuts |= set(np.linspace(first, last, TAIL_PIECES + 1).astype(int).tolist()[1:-1])
        bounds = (sorted({start, end} | cuts) if cuts else
                  np.linspace(start, end, count + 1).astype(int).tolist())
        if cuts:
            late += bounds.index(parts[-1][0])
        count = len(bounds) - 1
        if position is not None:
            ready_after[position] = list(range(len(pieces), len(pieces) + count))
        pieces += zip(bounds[:-1], bounds[1:])
    if state.extra:
        pieces.append((state.size, state.size + state.extra))
    return [p for p in pieces if p[0] < p[1]], ready_after, late


class PieceReads:
    """One replica's flat arrays coming down to its pinned `host` in the pieces of plan_pieces():
    a layer's pieces start on the transfer queue as soon as its backward kernels are enqueued
    (`done`, Model._backward's hook), or a part of a layer's as soon as its launch is done
    (`part_done`), while the device goes on with the layers below; the pieces
    no backward pass writes are read after it (`finish`)."""

    def __init__(self, state: FlatState, model, pieces: list[tuple[int, int]], ready_after: dict[int, list[int]],
                 one_context: bool = False):
        self.state, self.pieces = state, pieces
        self.layer_pieces = {id(model.runs[position][0]): indices for position, indices in ready_after.items()}
        self.piece_at = {start: index for index, (start, _) in enumerate(pieces)}
        # (layer, parts) for every layer whose pieces come from a backward pass, as plan_pieces asked
        self.layer_parts = [(model.runs[position][0], piece_count(pieces[indices[0]][0], pieces[indices[-1]][1]))
                      for position, indices in ready_after.items()]
        self.events: list[list[cl.Event] | None] = [None] * len(pieces)  # this step's reads
        # Copies out of `host` that the next step's reads must not overtake: other devices'. Those
        # of other contexts are waited for on the host, one by one, before the step's first read;
        # where every replica shares `one_context`, the reads wait for them on the device.
        self.readers: list[cl.Event] = []
        self.one_context = one_context
        self._then = None  # what the host does once `readers` are done, before the next read (hold)

    def hold(self, readers: list[cl.Event], then=None) -> None:
        """The next step's first read into `host` waits for `readers` (copies out of it), and the
        host then calls `then()` before it (MPI: until the other ranks' copies out of it are done;
        None: nothing, in place of what an earlier call asked for)."""
        self.readers += readers
        self._then = then

    def _free_host(self) -> list[cl.Event]:
        """What the next read into `host` must wait for, having waited for what the host must."""
        readers, self.readers = self.readers, []
        then, self._then = self._then, None
        if self.one_context and then is None:
            return readers
        for event in readers:
            event.wait()
        if then is not None:
            then()
        return []

    @contextmanager
    def handing_over(self):
        """Within (one backward pass of the distribution's), the layers hand over their gradients
        in the parts that plan_pieces cut (Layer.hand_over_gradients); outside, whole again, so
        that no other backward pass (compute_gradients) starts reads of this one's pieces."""
        for layer, parts in self.layer_parts:
            layer.hand_over_gradients(parts, self.part_done)
        try:
            yield
        finally:
            for layer, _ in self.layer_parts:
                layer.hand_over_gradients(1, None)

    def part_done(self, start: int, end: int, event: cl.Event) -> None:
        """A layer's launch `event` writes the gradients [start, end) (Layer.hand_over_gradients):
        where that is a piece, or pieces (the last part's, TAIL_PIECES), they start down once the
        launch is done, while the next computes."""
        index = self.piece_at.get(start)
        if index is None or self.events[index] is not None:
            return
        rt = self.state.rt
        after = [event, *self._free_host()]
        while index < len(self.pieces) and self.pieces[index][0] >= start and self.pieces[index][1] <= end:
            self.events[index] = self.state.read(*self.pieces[index], rt.transfer_queue, after)
            index += 1
        for queue in (rt.queue, rt.side_queue, rt.transfer_queue):  # NVIDIA's starts nothing unflushed
            if queue is not None:
                queue.flush()

    def done(self, runner) -> None:
        indices = [index for index in self.layer_pieces.get(id(runner), ()) if self.events[index] is None]
        if indices:
            rt = self.state.rt
            after = [cl.enqueue_marker(rt.queue), *self._free_host()]
            for index in indices:
                self.events[index] = self.state.read(*self.pieces[index], rt.transfer_queue, after)
            rt.queue.flush()
            rt.transfer_queue.flush()

    def finish(self) -> cl.Event:
        """Read what the backward pass did not; returns the event of the backward pass's end."""
        queue = self.state.rt.queue
        finished = cl.enqueue_marker(queue)
        readers = self._free_host()
        for index, piece in enumerate(self.pieces):
            if self.events[index] is None:
                self.events[index] = self.state.read(*piece, None, readers or None)
        queue.flush()
        return finished

    def wait(self, index: int) -> None:
        """Until piece `index` is in `host` (then it is free for the next step's read)."""
        cl.wait_for_events(self.take(index))

    def take(self, index: int) -> list[cl.Event]:
        """The reads of piece `index` into `host`, for what waits on them (then it is free for the
        next step's read). Keep them until they are done: pyopencl waits for a copy to host memory
        when its event is deleted."""
        events, self.events[index] = self.events[index], None
        return events


class ReplicaSum:
    """One replica's sum of every replica's flat arrays on its own device: the others' pieces,
    in host memory, are copied up (on a queue of its own, while the device computes and the next
    pieces come down) into `parts`, and SumReplicas adds them to this replica's in replica order,
    each weighted by its shard's share of the batch. Every replica sums the same terms in the same
    order without contraction, so that the replicas stay identical to the bit, and the host only
    copies: numpy's weighted sum of large replicas was slow even on many host threads.

    `bfloat16`: the trainable gradients came down as bfloat16 (FlatState.pack into `packed`, this
    replica's part of it) and go up so into the others' parts of `packed`, (replicas, size);
    SumBfloat16Replicas adds every replica's, this one's rounded part too. `parts` then holds the
    non-trainable values alone."""

    def __init__(self, state: FlatState, replicas: int, index: int, bfloat16: bool = False):
        rt, dtype = state.rt, state.host.dtype
        self.state, self.replicas, self.index, self.size = state, replicas, index, state.host.size
        # The flat elements `parts` holds from: the gradients' come in `packed` where bfloat16.
        self.floats_from = state.size if bfloat16 else 0
        self.part_size = self.size - self.floats_from
        # (replicas - 1, part_size), this one's left out
        self.parts = Tensor(((replicas - 1) * self.part_size,), dtype, rt)
        self.packed = Tensor((replicas * state.size,), np.uint16, rt) if bfloat16 else None  # (replicas, size)
        self.weights = Tensor((replicas,), dtype, rt)  # (replicas,)
        self.upload_queue = cl.CommandQueue(rt.context, rt.device,
                                            properties=cl.command_queue_properties.PROFILING_ENABLE)
        program = rt.program(("cl/parameters.cl",), dtype)
        self.launch = rt.kernel(program, "SumReplicas", dtype).bind(
            ("own", "own_first", "parts_first", "n"), parts=self.parts, part_size=self.part_size, weights=self.weights,
            replicas=replicas, **{"self": index})
        self.launch_bfloat16 = None if not bfloat16 else rt.kernel(program, "SumBfloat16Replicas", dtype).bind(
            ("own_first", "packed_first", "n"), own=state.store.grads, packed=self.packed, part_size=state.size,
            weights=self.weights, replicas=replicas)
        self.shares: np.ndarray | None = None  # the weights last written

    def upload(self, replica: int, host: np.ndarray, start: int, end: int, wait_for=None) -> cl.Event:
        """Start copying replica `replica`'s flat elements [start, end) from its host array `host`
        (FlatState.host's layout, with its gradients packed in the first half where bfloat16; kept
        alive by the caller until the copy is done) into `parts` (or `packed`)."""
        if start < self.floats_from:
            target, offset, piece = self.packed, replica * self.state.size + start, host.view(np.uint16)[start:end]
        else:
            target, piece = self.parts, host[start:end]
            offset = (replica - (replica > self.index)) * self.part_size + start - self.floats_from
        copy = cl.enqueue_copy(self.upload_queue, target.buffer, piece, is_blocking=False, wait_for=wait_for,
                               dst_offset=offset * piece.itemsize)
        return self.state._profiled("ReduceWrite", [copy])[0]

    def sum(self, ranges: list[tuple[int, int]], shares: np.ndarray, wait_for: list[cl.Event]) -> list[cl.Event]:
        """On the replica's queue, once `wait_for` (the copies up) are done: its flat elements in
        `ranges` become the weighted sum. Returns the copy of the shares, where they changed (an
        epoch's smaller last batch), to be kept until done."""
        queue, held = self.state.rt.queue, []
        if self.shares is None or not np.array_equal(shares, self.shares):
            self.shares = np.array(shares, self.state.host.dtype)
            held.append(cl.enqueue_copy(queue, self.weights.buffer, self.shares, is_blocking=False))
        cl.enqueue_barrier(queue, wait_for=wait_for)
        for target, first, count in flat_segments(self.state, ranges):
            if first < self.floats_from:
                self.launch_bfloat16(*whole_groups(self.state.rt, count), first, first, count)
            else:
                self.launch(*whole_groups(self.state.rt, count), target, first, first - self.floats_from, count)
        queue.flush()  # NVIDIA's runtime starts nothing unflushed: this sum while the next pieces come
        return held


def sum_groups(pieces: list[tuple[int, int]], late: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """The sums of a reduction through host memory on each device (ReplicaSum), in order, as
    (end, flat ranges): each follows the copies up of pieces[:end] and sums its pieces' ranges.
    The pieces done before the backward pass's last launch (pieces[:late], plan_pieces) are summed
    first, while the last ones come down and go up, where they hold PIECE_ELEMENTS or more (worth
    the launches); then the rest. On two GPUs the wide MLP's step waited after its last kernel
    for the last part's copies, then for one sum of everything: with the first sum run
    meanwhile (and the last part in TAIL_PIECES), what follows the last kernel, Adam's update
    included, took markedly less time (profiled steps; benchmarks/RESULTS.md, data-parallel
    training on two GPUs: weight gradients in parts)."""
    early = sum(end - start for start, end in pieces[:late]) >= PIECE_ELEMENTS
    groups = []
    for first, end in [(0, late), (late, len(pieces))] if early else [(0, len(pieces))]:
        ranges = []  # the pieces' ranges, sorted and joined where they meet
        for start, stop in sorted(pieces[first:end]):
            if ranges and ranges[-1][1] == start:
                ranges[-1] = (ranges[-1][0], stop)
            else:
                ranges.append((start, stop))
        groups.append((end, ranges))
    return groups


def flat_segments(state: FlatState, within=None) -> list[tuple[Tensor, int, int]]:
    """(flat array, first, count) of `state`'s flat arrays (gradients; non-trainable values),
    or of their elements in the flat ranges `within`."""
    segments = []
    for target, first, count in state.arrays():
        for start, end in within or [(first, first + count)]:
            start, end = max(start, first), min(end, first + count)
            if start < end:
                segments.append((target, start, end - start))
    return segments


def whole_groups(rt, count: int) -> tuple[tuple[int], tuple[int]]:
    """(global, local) sizes for a launch of one work-item an element over `count` elements, in
    whole work-groups (NVIDIA's runtime splits an odd global size into ones)."""
    return (-(-count // rt.local_size) * rt.local_size,), (rt.local_size,)


def over_flat_arrays(state: FlatState, launch, *arguments, within=None) -> None:
    """launch(target, first, first, *arguments, count), a bound kernel reading its source at
    `first` too, on each of `state`'s flat arrays (or on their elements in the flat ranges
    `within`), in whole work-groups."""
    for target, first, count in flat_segments(state, within):
        launch(*whole_groups(state.rt, count), target, first, first, *arguments, count)


def run_shard(model, seen: int, shard: tuple, reads=None) -> None:
    """A replica's part of the step before the reduction (Step.train_step's first half): its
    loss and backward on its shard, its per-sample loss at [seen, seen + rows) (`reads` as for
    Step.backward); handed to the device at once, so that the replicas run together."""
    rows, x, y = shard
    batch = DeviceBatch(x, y, rows, seen)
    model.compute_loss(batch, training=True, scale_loss=True)
    model.backward(batch, reads)
    model.rt.queue.flush()


def model_logs(model, loss: float, hits: float, count: int) -> dict:
    """fit's logs from the per-sample loss and hits summed over `count` samples."""
    logs = {"loss": loss / count}
    if "accuracy" in model.metrics:
        logs["accuracy"] = hits / count
    return logs
