"""MPIDataParallel: one replica per process of an MPI job, `mpirun -np N python train.py`.

Every rank runs the same script on the same arrays; each gathers only its shard of every batch
(the epoch's order comes from the seed, the same on every rank), and the flat gradient array is
summed once per step, in place, in pieces that start as the backward pass writes them
(base.PieceReads), each while the next comes down: through the host's shared memory among the
ranks of one host (shared_sum.py; each rank's device adds the pieces, or host threads do), by MPI's
all-reduce between hosts. Every collective
is waited for with a deadline (a non-blocking one polled; the gradient pieces' blocking sums
run on a thread of their own, whose results the main thread awaits): a rank that died or stopped
makes the others raise CollectiveTimeout instead of waiting forever, and an uncaught error on any rank aborts the whole
job (MPI_Abort, as `python -m mpi4py` does), so that no rank is left waiting at the next one."""
from __future__ import annotations

import queue
import sys
import threading
import time
import zlib
from concurrent.futures import Future, TimeoutError as FutureTimeout
from functools import partial

import numpy as np
from pyopencl import command_execution_status, wait_for_events

from .. import system
from ..callbacks import CSVLogger, ModelCheckpoint
from ..cl.tensor import Tensor
from ..data import ArrayFeed
from .base import (PIECE_ELEMENTS, Distribution, FlatState, PieceReads, ReplicaSum, ShardedFeed,
                   flat_layout, model_logs, plan_pieces, same_objects, state_digest, sum_groups)
from .shared_sum import SharedSlots, SharedSum

COMPLETE = command_execution_status.COMPLETE
# At most this many threads a rank sum in shared memory: on the two-H200 host more ran slower
# (benchmarks/RESULTS.md, MPI ranks in shared memory).
SUM_THREADS = 4
SUMS_ON = ("devices", "host")
COMPRESSIONS = (None, "bf16")


class CollectiveTimeout(RuntimeError):
    """A collective operation did not complete in time: another rank died or is stuck."""


class MPIDataParallel(Distribution):
    """Data parallelism over the ranks of `comm` (default MPI.COMM_WORLD), one replica each on the
    rank's device (CLNET_DEVICE, else the default: a host's GPUs in turn by local rank).
    `timeout`: seconds any collective may take.
    `bucket_mb`: how finely the flat gradients are cut for the all-reduce, in MB: each layer's
    gradients in pieces of at least this size (at most 8 a layer; a smaller layer's whole), each
    all-reduced as soon as the backward pass has written it while the next comes down (None: 1 Mi
    elements).
    `hierarchical`: the ranks of one host meet in shared memory (shared_sum.py); False: MPI's
    all-reduce of every piece.
    `sum_on`, where the ranks of one host (hierarchical) add their pieces: "devices" (default) —
    each piece comes down into the rank's slot of a shared window, and every rank's device adds
    all ranks' pieces, copied up from the others' slots (ReplicaSum, in rank order: the same bits
    on every rank), so that the host only copies, by DMA where the driver pins the window
    (NVIDIA's does); "host" — each rank sums its slice of every piece on host threads in the
    window (SharedSum). With several hosts the host's way is taken, and only each slice goes
    between hosts (by MPI's all-reduce, among the ranks of the same local index; where the hosts
    have different numbers of ranks, MPI's all-reduce of the whole). Every way sums the same terms
    (float64 training matches one device's to 1e-10).
    `compression`: None (default), or "bf16": each rank's trainable gradients are rounded to
    bfloat16 on its device (to nearest even) and come down from it, go between the ranks of a host
    and up to the devices in 16 bits, half the bytes; every rank's rounded gradients are summed in
    float32, so that the ranks stay the same bits. This changes the numbers: a gradient keeps 8
    significant bits (a relative error up to 2^-9 an element), so training follows a float32 one
    closely but not exactly. What goes through MPI's all-reduce (the hosts' sums between hosts, or
    every piece with hierarchical=False) goes in float32: MPI has no bfloat16 sum, and one written
    in Python (numpy) ran slower than the float32 all-reduce it halved (benchmarks/RESULTS.md, MPI
    gradients in bfloat16). For float32 models (float64 training is for exactness, which this
    gives up); the non-trainable values (BatchNormalization's moving statistics) travel whole.

    Rank 0 is the chief: it shows the progress bar and runs ModelCheckpoint and CSVLogger; every
    rank runs the other callbacks on the same logs (the loss over all ranks' rows, the validation
    data evaluated whole on each rank), so that EarlyStopping, ReduceLROnPlateau and
    LearningRateScheduler decide alike everywhere and the ranks stay in step."""

    def __init__(self, comm=None, timeout: float = 120.0, bucket_mb: float | None = None,
                 hierarchical: bool = True, sum_on: str = "devices", compression: str | None = None):
        super().__init__()
        if compression not in COMPRESSIONS:
            raise ValueError(f"MPIDataParallel compression must be None or 'bf16', got {compression!r}")
        self.compression = compression
        if not isinstance(hierarchical, bool):
            raise TypeError(f"MPIDataParallel hierarchical must be True or False, got {hierarchical!r}")
        if sum_on not in SUMS_ON:
            raise ValueError(f"MPIDataParallel sum_on must be one of {', '.join(map(repr, SUMS_ON))}, got {sum_on!r}")
        self.hierarchical, self.sum_on = hierarchical, sum_on
        if bucket_mb is not None and (isinstance(bucket_mb, bool) or not isinstance(bucket_mb, (int, float))
                                      or not bucket_mb > 0):
            raise ValueError(f"MPIDataParallel bucket_mb must be a positive number of megabytes (or None for "
                             f"{PIECE_ELEMENTS} elements a piece), got {bucket_mb!r}")
        self.bucket_mb = bucket_mb
        try:
            from mpi4py import MPI
        except ImportError:
            raise ImportError("MPIDataParallel needs mpi4py: pip install 'clnet[mpi]' (with an MPI library, e.g. "
                              "Debian's: apt-get install openmpi-bin libopenmpi-dev)") from None
        except (RuntimeError, OSError) as error:  # mpi4py's wheel found no MPI library to load
            raise ImportError(f"MPIDataParallel: mpi4py is installed but could not load an MPI library ({error}); "
                              "install one, e.g. Debian's: apt-get install openmpi-bin libopenmpi-dev") from None
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"MPIDataParallel timeout must be a positive number of seconds, got {timeout!r}")
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.replicas = self.comm.Get_rank(), self.comm.Get_size()
        self.chief = self.rank == 0
        self.timeout = float(timeout)
        if self.replicas > 1:
            _abort_on_uncaught_error(self.comm)
        # The gradient pieces' all-reduces, blocking ones on a thread of their own, one after
        # another while the main thread waits for the next piece: between two ranks of one host
        # Open MPI 5's non-blocking all-reduce moved a large model's gradients far more slowly
        # than its blocking one in 4 MB pieces (benchmarks/RESULTS.md, MPI). The main thread makes
        # no MPI call until they are done. A daemon thread (started at the first piece): one left
        # waiting on a dead rank must not keep the process from exiting.
        self._allreduces: queue.SimpleQueue | None = None
        # The hierarchical sum's window, kept from one fit to the next: a SharedSum where the host
        # sums, SharedSlots where the devices do (replica_sum).
        self.shared: SharedSlots | None = None
        self.replica_sum: ReplicaSum | None = None
        # The last step's copies up from the other ranks' slots, kept until done (pyopencl waits for
        # a copy from host memory when its event is deleted), and until the next step's first read
        # into this rank's slot, which the others' copies out of it must have finished first.
        self._uploads: list = []
        self._held: list = []  # the last step's copy of the shard weights, where they changed
        self._registered: list = []  # the other ranks' slots, registered in this rank's context
        self.node = None  # the ranks of this host (a communicator), made at the first fit
        # Kept from one fit to the next while the model's flat arrays are the same objects (fit in a
        # loop): the flat state and its layout's checksum, and the pieces' plan for a bucket size.
        self._layout: list | None = None
        self._planned: tuple | None = None  # (the pieces' least elements,) they were planned for
        self.reads: PieceReads | None = None
        # With compression where the host sums: the packed gradients on the device, and the pinned
        # host array (its buffer, its array) they come down to.
        self._packed: tuple | None = None

    # -- collectives with a deadline ----------------------------------------------------------
    def _wait(self, request, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not request.Test():
            if time.monotonic() > deadline:
                raise self._timeout(what)
            time.sleep(0.0001)

    def _run_allreduces(self) -> None:
        while True:
            piece, done = self._allreduces.get()
            try:
                self.comm.Allreduce(self.MPI.IN_PLACE, piece, op=self.MPI.SUM)
                done.set_result(piece)
            except BaseException as error:  # the main thread raises it
                done.set_exception(error)

    def _allreduce_on_thread(self, piece: np.ndarray) -> Future:
        if self._allreduces is None:
            self._allreduces = queue.SimpleQueue()
            threading.Thread(target=self._run_allreduces, name="clnet-allreduce", daemon=True).start()
        done: Future = Future()
        self._allreduces.put((piece, done))
        return done

    def _timeout(self, what: str) -> CollectiveTimeout:
        return CollectiveTimeout(
            f"rank {self.rank} of {self.replicas}: {what} did not complete within {self.timeout:g} s; "
            "another rank has died or stopped (see its output). MPIDataParallel(timeout=...) sets the limit")

    def allreduce(self, array: np.ndarray, what: str) -> np.ndarray:
        """Sum `array` over the ranks, in place."""
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, array, op=self.MPI.SUM), what)
        return array

    def broadcast(self, array: np.ndarray, what: str) -> np.ndarray:
        """Rank 0's `array` on every rank, in place."""
        self._wait(self.comm.Ibcast(array, root=0), what)
        return array

    # -- fit's hooks ------------------------------------------------------------------------
    def prepare(self, model, train, callbacks: list):
        feed, callbacks = super().prepare(model, train, callbacks)
        if not self.chief:
            callbacks = [c for c in callbacks if not isinstance(c, (ModelCheckpoint, CSVLogger))]
        return feed, callbacks

    def feed(self, model, train: ArrayFeed) -> ShardedFeed:
        layout = [flat_layout(model)]
        if not same_objects(layout, self._layout):  # another model, or a layer (un)frozen since the last fit
            self.state = FlatState(model)
            self._layout, self._index_crc, self._planned = layout, zlib.crc32(self.state.index.tobytes()), None
        # Ranks on devices that lay parameters out differently meet in Keras layout; the seed
        # orders every epoch's rows (and Dropout's masks), so it must be the same everywhere.
        if self.node is None:  # (every rank, whatever its hierarchical: Split_type is collective)
            self.node = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED, key=self.rank)
        # (seed, layout, flat size, ranks on the host, hierarchical, sum on the devices, samples, batch size,
        # steps, dtype, compression)
        mine = np.array([model.seed, self._index_crc, self.state.host.size,
                         self.node.Get_size(), self.hierarchical, self.sum_on == "devices", train.batches.samples,
                         train.batch_size, train.steps, np.dtype(model.dtype).itemsize,
                         COMPRESSIONS.index(self.compression)], np.int64)
        ranks = np.tile(mine, (self.replicas, 1))
        self._wait(self.comm.Iallgather(mine, ranks), "comparing the ranks' seeds, data and parameter layouts")
        if (ranks[:, 6:10] != mine[6:10]).any():  # every rank raises these alike, before a step
            given = ", ".join(f"rank {r}: {samples} samples in batches of {batch} ({steps} steps an epoch), "
                              f"float{8 * item}" for r, (samples, batch, steps, item) in enumerate(ranks[:, 6:10]))
            raise ValueError(f"MPIDataParallel: the ranks were given different training data or precision ({given}); "
                             "every rank must fit the same arrays (each trains on its own rows of every batch) "
                             "with the same batch_size, steps_per_epoch and floatx")
        if (ranks[:, 10] != mine[10]).any():
            given = ", ".join(f"rank {r}: {COMPRESSIONS[c]!r}" for r, c in enumerate(ranks[:, 10]))
            raise ValueError(f"MPIDataParallel: the ranks were given different compression ({given}); every rank "
                             "must round its gradients alike")
        if self.compression and model.dtype != np.float32:
            raise ValueError(f"MPIDataParallel compression={self.compression!r} rounds float32 gradients; this model "
                             f"is {np.dtype(model.dtype).name} (training in float64 is for exactness, which the "
                             "compression gives up): use floatx='float32', or compression=None")
        if (ranks[:, 0] != mine[0]).any():
            seeds = ", ".join(f"rank {r}: {seed}" for r, seed in enumerate(ranks[:, 0]))
            raise ValueError(f"MPIDataParallel: the ranks' models have different seeds ({seeds}); every rank "
                             "must shuffle alike: make the model with the same seed=... on every rank, or call "
                             "clnet.set_seed(n) before making it")
        self.same_layout = bool((ranks[:, 1:3] == mine[1:3]).all())
        if self.same_layout:
            itemsize = self.state.host.itemsize
            elements = None if self.bucket_mb is None else max(1, int(self.bucket_mb * 2**20) // itemsize)
            if self._planned != (elements,):
                self.pieces, ready_after, late = plan_pieces(model, self.state, elements)
                self.sums = sum_groups(self.pieces, late)
                self.reads = PieceReads(self.state, model, self.pieces, ready_after)
                self._planned = (elements,)
                if self._uploads:  # the last fit's last step's copies out of the others' slots
                    self.reads.hold(self._uploads, then=partial(self._slots_free, model.optimizer.iterations))
        # Where every rank asks for it, and every host has as many ranks (otherwise a piece's
        # slices would not line up between hosts)
        hierarchical = bool(self.same_layout and self.replicas > 1 and ranks[:, 4].all()
                            and (ranks[:, 3] == mine[3]).all())
        self._share_memory(hierarchical, bool(ranks[:, 5].all()), model)
        if self.compression and self.state.packing is None:  # (where the host sums: a packed array of its own)
            rt = self.state.rt
            self._packed = (Tensor((self.state.size,), np.uint16, rt), *rt.pinned(self.state.size, np.uint16))
            self.state.pack(self._packed[0], 0, self._packed[2])
        self.canonical = np.zeros(self.state.index.size, model.dtype)  # (Keras elements,)
        self._start_alike(model)
        self.sharded = ShardedFeed(self, train, [model], [train.batches], first=self.rank)
        return self.sharded

    def _share_memory(self, wanted: bool, on_devices: bool, model) -> None:
        """The hierarchical sum's window for this fit's flat arrays (the last fit's if as large
        and of the same kind), or none (and MPI's all-reduce of every piece) where not `wanted`;
        where the devices sum (`on_devices`, every rank on one host), this rank's flat arrays come
        down into its slot and the others' go up from theirs. Collective."""
        shared, size, node, dtype = self.shared, self.state.host.size, self.node, model.dtype
        hosts = self.replicas // node.Get_size()
        kind = None if not wanted else SharedSlots if on_devices and hosts == 1 else SharedSum
        if shared is not None and (type(shared) is not kind or (shared.size, shared.dtype) != (size, np.dtype(dtype))):
            self._close_shared()
            shared = None
        if kind is None:
            return
        if shared is None:
            self.node_ranks = np.zeros(node.Get_size(), np.int64)  # (local rank,) → rank
            self._wait(node.Iallgather(np.array([self.rank], np.int64), self.node_ranks), "listing this host's ranks")
            if kind is SharedSlots:
                self.shared = SharedSlots(self.MPI, node, size, dtype, 1, self.timeout)
            else:
                cross = self.comm.Split(node.Get_rank(), self.rank) if hosts > 1 else None
                # Threads for the copies and sums: the cores this rank may run on, shared by the host's
                # ranks (mpirun binds each rank to one core unless told --bind-to none).
                threads = max(1, min(SUM_THREADS, system.usable_cores() // node.Get_size()))
                self.shared = SharedSum(self.MPI, node, cross, size, dtype, threads, self.timeout)
        if kind is SharedSlots and (self.replica_sum is None or self.replica_sum.state is not self.state):
            shared = self.shared
            self.state.place(shared.slots[shared.local])
            # (the others' slots registered in this rank's context too: they are copied up from)
            self._registered = [self.state.rt.registered(slot) for k, slot in enumerate(shared.slots)
                                if k != shared.local]
            self.replica_sum = ReplicaSum(self.state, shared.locals, shared.local, bool(self.compression))
            if self.compression:  # (this rank's part of the packed gradients comes down into its slot)
                self.state.pack(self.replica_sum.packed, shared.local * self.state.size,
                                shared.slots[shared.local].view(np.uint16))

    def _close_shared(self) -> None:
        """Free the window (collective), once this rank's copies out of the others' slots are done;
        a flat state read into this rank's slot gets a pinned array of its own again."""
        if self._uploads:
            wait_for_events(self._uploads)
        self._uploads, self._registered = [], []
        if self.replica_sum is not None:
            if self.replica_sum.state is self.state:
                self.state.place(None)
                self.state.pack(None)
                if self.reads is not None:
                    self.reads.hold([])  # (no meeting before the next read: the window is gone)
            self.replica_sum = None
        self.shared.close()
        self.shared = None

    def _start_alike(self, model) -> None:
        """Rank 0's weights, optimizer state and step count on every rank where any rank's differ
        (a model seeded alike everywhere has them, and the ranks leave a fit alike; one initialised
        from entropy, or resumed or changed by one rank, not). The ranks compare digests of their
        state first, so that fit called in a loop does not broadcast the model at every call."""
        if self._alike(model):
            return
        state = self.state
        values = model.store.values.numpy()
        keras = self.broadcast(values[state.index].copy(), "broadcasting rank 0's weights")
        values[state.index] = keras
        model.store.values.write(values)
        for name, tensor in model.optimizer.moments.items():
            flat = tensor.numpy()
            flat[state.index[:state.trainable]] = self.broadcast(flat[state.index[:state.trainable]].copy(),
                                                                 f"broadcasting rank 0's optimizer {name}")
            tensor.write(flat)
        count = self.broadcast(np.array([model.optimizer.iterations], np.int64), "broadcasting the step count")
        model.optimizer.iterations = int(count[0])
        scalars = model.optimizer.scalar_state()  # (a LossScaleOptimizer's scale and counter)
        if scalars:
            values = self.broadcast(np.array(list(scalars.values()), np.float64), "broadcasting the optimizer's state")
            model.optimizer.set_scalar_state({key: type(mine)(value)
                                              for (key, mine), value in zip(scalars.items(), values)})

    def _alike(self, model) -> bool:
        """Whether every rank's weights and optimizer moments (their digest on the device,
        state_digest), step count and optimizer scalars are rank 0's."""
        scalars = np.array(list(model.optimizer.scalar_state().values()), np.float64).view(np.uint64)
        mine = np.array([*state_digest(model), model.optimizer.iterations, *scalars], np.uint64)
        ranks = np.tile(mine, (self.replicas, 1))
        self._wait(self.comm.Iallgather(mine, ranks), "comparing the ranks' weights")
        return bool((ranks == ranks[0]).all())

    def gradient_reads(self, model):
        return self.reads if self.same_layout else None

    def synchronize(self, model) -> None:
        """The gradients come down in pieces as the backward pass writes them (PieceReads); each
        is scaled by this rank's share and all-reduced while the next comes down, and goes back up
        once its all-reduce is done. Ranks laid out differently meet in Keras layout, whole."""
        state, sharded = self.state, self.sharded
        share = sharded.counts[self.rank] / sharded.rows
        what = f"the gradient all-reduce of step {model.optimizer.iterations}"
        if not self.same_layout:
            wait_for_events(state.read())
            self._unpack(0, state.size)
            started = time.perf_counter()
            np.multiply(state.host[state.index], share, out=self.canonical)
            state.host[state.index] = self.allreduce(self.canonical, what)
            self.reduce_seconds += time.perf_counter() - started
            state.write(state.host)
            return
        if self.replica_sum is not None:
            self._sum_on_devices(what, model.optimizer.iterations + 1)
            return
        finished, summed, started = self.reads.finish(), [], None
        weights = [sharded.counts[rank] / sharded.rows for rank in self.node_ranks] if self.shared else None
        for index, (start, end) in enumerate(self.pieces):
            self.reads.wait(index)  # while the earlier pieces' sums go on
            if started is None and finished.command_execution_status == COMPLETE:
                started = time.perf_counter()
            self._unpack(start, end)
            if self.shared is not None:  # (on the sum's own threads)
                summed.append(self.shared.sum(state.host, start, end, weights))
                continue
            piece = state.host[start:end]
            piece *= share
            summed.append([self._allreduce_on_thread(piece)])
        if self.shared is not None:
            summed.append(self.shared.end_step())
        deadline = time.monotonic() + self.timeout
        for index, futures in enumerate(summed):
            try:
                for done in futures:
                    done.result(timeout=max(deadline - time.monotonic(), 0))
            except (FutureTimeout, TimeoutError):
                raise self._timeout(what) from None
            if index < len(self.pieces):
                state.write(state.host, *self.pieces[index])
        if started is not None:
            self.reduce_seconds += time.perf_counter() - started
        # The writes are non-blocking from state.host, which the next step's reads overwrite only
        # after the queue (in order) has finished them.

    def _sum_on_devices(self, what: str, next_step: int) -> None:
        """Each piece, once in every rank's slot, goes up from the others' slots (while the next
        comes down), and the device adds them all to this rank's (ReplicaSum), the pieces done
        before the backward pass's last launch first (sum_groups)."""
        shared, replica_sum, sharded = self.shared, self.replica_sum, self.sharded
        finished = self.reads.finish()
        shares = np.array([sharded.counts[rank] / sharded.rows for rank in self.node_ranks])
        uploads, sent, held, started = [], [], [], None
        sums = iter(self.sums)
        sum_after, ranges = next(sums)
        for index, (start, end) in enumerate(self.pieces):
            self.reads.wait(index)  # in this rank's slot, while the earlier pieces go up and are summed
            if started is None and finished.command_execution_status == COMPLETE:
                started = time.perf_counter()
            self._meet(what)  # and in every rank's
            for k, slot in enumerate(shared.slots):
                if k != shared.local:
                    sent.append(replica_sum.upload(k, slot, start, end))
            replica_sum.upload_queue.flush()
            if index + 1 == sum_after:
                held += replica_sum.sum(ranges, shares, sent)
                uploads, sent = uploads + sent, []
                sum_after, ranges = next(sums, (None, None))
        self._uploads, self._held = uploads, held
        # This rank's next read into its slot waits until every rank's copies out of it are done.
        self.reads.hold(uploads, then=partial(self._slots_free, next_step))
        if started is not None:
            self.reduce_seconds += time.perf_counter() - started

    def _unpack(self, start: int, end: int) -> None:
        """Where the host sums bfloat16 gradients: those of [start, end) from the packed array they
        came down to, as float32, into the flat state's."""
        end = min(end, self.state.size)
        if self.state.packing is not None and start < end:
            np.left_shift(self.state.packing[3][start:end], 16, out=self.state.host[start:end].view(np.uint32),
                          dtype=np.uint32)

    def _slots_free(self, step: int) -> None:
        """Before step `step`'s first read into this rank's slot (its copies up of the last step
        are done): until every rank's are."""
        self._uploads = []
        self._meet(f"the gradient all-reduce of step {step}")

    def _meet(self, what: str) -> None:
        try:
            self.shared.meet()
        except TimeoutError:
            raise self._timeout(what) from None

    def logs(self, model, seen: int, running: bool = False) -> dict:
        loss, hits = model.epoch_totals(seen)
        if running:  # the progress bar shows rank 0's rows: ranks may be given different verbose
            return model_logs(model, loss, hits, seen)
        totals = self.allreduce(np.array([loss, hits, seen], np.float64), "the all-reduce of the epoch's loss")
        return model_logs(model, totals[0], totals[1], int(totals[2]))


def _abort_on_uncaught_error(comm) -> None:
    """Print an uncaught error, then end every rank (once per process)."""
    previous = sys.excepthook
    if getattr(previous, "clnet_aborts", False):
        return

    def hook(kind, error, traceback):
        previous(kind, error, traceback)
        sys.stderr.flush()
        comm.Abort(1)

    hook.clnet_aborts = True
    sys.excepthook = hook
