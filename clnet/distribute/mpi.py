"""MPIDataParallel: one replica per process of an MPI job, `mpirun -np N python train.py`.

Every rank runs the same script on the same arrays; each gathers only its shard of every batch
(the epoch's order comes from the seed, the same on every rank), and the flat gradient array is
summed once per step, in place, in pieces that start as the backward pass writes them
(base.PieceReads), each while the next comes down: through the host's shared memory among the
ranks of one host (shared_sum.py), by MPI's all-reduce between hosts. Every collective
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

import numpy as np
from pyopencl import command_execution_status, wait_for_events

from .. import system
from ..callbacks import CSVLogger, ModelCheckpoint
from ..data import ArrayFeed
from .base import PIECE_ELEMENTS, Distribution, FlatState, PieceReads, ShardedFeed, model_logs, plan_pieces
from .shared_sum import SharedSum

COMPLETE = command_execution_status.COMPLETE
# At most this many threads a rank sum in shared memory: on the two-H200 host more ran slower
# (benchmarks/RESULTS.md, MPI ranks in shared memory).
SUM_THREADS = 4


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
    `hierarchical`: the ranks of one host sum the pieces through shared memory (shared_sum.py),
    each rank a slice of every piece with several threads, and only that slice goes between hosts
    (by MPI's all-reduce, among the ranks of the same local index; where the hosts have different
    numbers of ranks, MPI's all-reduce of the whole). False: MPI's all-reduce of every piece.
    Both sum the same terms (float64 training matches one device's to 1e-10 either way).

    Rank 0 is the chief: it shows the progress bar and runs ModelCheckpoint and CSVLogger; every
    rank runs the other callbacks on the same logs (the loss over all ranks' rows, the validation
    data evaluated whole on each rank), so that EarlyStopping, ReduceLROnPlateau and
    LearningRateScheduler decide alike everywhere and the ranks stay in step."""

    def __init__(self, comm=None, timeout: float = 120.0, bucket_mb: float | None = None,
                 hierarchical: bool = True):
        super().__init__()
        if not isinstance(hierarchical, bool):
            raise TypeError(f"MPIDataParallel hierarchical must be True or False, got {hierarchical!r}")
        self.hierarchical = hierarchical
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
        self.shared: SharedSum | None = None  # the hierarchical sum's window, kept from one fit to the next
        self.node = None  # the ranks of this host (a communicator), made at the first fit

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
        self.state = FlatState(model)
        # Ranks on devices that lay parameters out differently meet in Keras layout; the seed
        # orders every epoch's rows (and Dropout's masks), so it must be the same everywhere.
        if self.node is None:  # (every rank, whatever its hierarchical: Split_type is collective)
            self.node = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED, key=self.rank)
        # (seed, layout, flat size, ranks on the host, hierarchical, samples, batch size, steps, dtype)
        mine = np.array([model.seed, zlib.crc32(self.state.index.tobytes()), self.state.host.size,
                         self.node.Get_size(), self.hierarchical, train.batches.samples, train.batch_size,
                         train.steps, np.dtype(model.dtype).itemsize], np.int64)
        ranks = np.tile(mine, (self.replicas, 1))
        self._wait(self.comm.Iallgather(mine, ranks), "comparing the ranks' seeds, data and parameter layouts")
        if (ranks[:, 5:] != mine[5:]).any():  # every rank raises this alike, before a step
            given = ", ".join(f"rank {r}: {samples} samples in batches of {batch} ({steps} steps an epoch), "
                              f"float{8 * item}" for r, (samples, batch, steps, item) in enumerate(ranks[:, 5:]))
            raise ValueError(f"MPIDataParallel: the ranks were given different training data or precision ({given}); "
                             "every rank must fit the same arrays (each trains on its own rows of every batch) "
                             "with the same batch_size, steps_per_epoch and floatx")
        if (ranks[:, 0] != mine[0]).any():
            seeds = ", ".join(f"rank {r}: {seed}" for r, seed in enumerate(ranks[:, 0]))
            raise ValueError(f"MPIDataParallel: the ranks' models have different seeds ({seeds}); every rank "
                             "must shuffle alike: make the model with the same seed=... on every rank, or call "
                             "clnet.set_seed(n) before making it")
        self.same_layout = bool((ranks[:, 1:3] == mine[1:3]).all())
        if self.same_layout:
            itemsize = self.state.host.itemsize
            elements = None if self.bucket_mb is None else max(1, int(self.bucket_mb * 2**20) // itemsize)
            self.pieces, ready_after, _ = plan_pieces(model, self.state, elements)
            self.reads = PieceReads(self.state, model, self.pieces, ready_after)
        # Where every rank asks for it, and every host has as many ranks (otherwise a piece's
        # slices would not line up between hosts)
        hierarchical = bool(self.same_layout and self.replicas > 1 and ranks[:, 4].all()
                            and (ranks[:, 3] == mine[3]).all())
        self._share_memory(hierarchical, model.dtype)
        self.canonical = np.zeros(self.state.index.size, model.dtype)  # (Keras elements,)
        self._start_alike(model)
        self.sharded = ShardedFeed(self, train, [model], [train.batches], first=self.rank)
        return self.sharded

    def _share_memory(self, wanted: bool, dtype) -> None:
        """The hierarchical sum's window for this fit's flat arrays (the last fit's if as large),
        or none (and MPI's all-reduce of every piece) where not `wanted`. Collective."""
        shared, size = self.shared, self.state.host.size
        if shared is not None and (not wanted or (shared.size, shared.dtype) != (size, np.dtype(dtype))):
            shared.close()
            self.shared = shared = None
        if not wanted or shared is not None:
            return
        node = self.node
        self.node_ranks = np.zeros(node.Get_size(), np.int64)  # (local rank,) → rank
        self._wait(node.Iallgather(np.array([self.rank], np.int64), self.node_ranks), "listing this host's ranks")
        hosts = self.replicas // node.Get_size()
        cross = self.comm.Split(node.Get_rank(), self.rank) if hosts > 1 else None
        # Threads for the copies and sums: the cores this rank may run on, shared by the host's
        # ranks (mpirun binds each rank to one core unless told --bind-to none).
        threads = max(1, min(SUM_THREADS, system.usable_cores() // node.Get_size()))
        self.shared = SharedSum(self.MPI, node, cross, size, dtype, threads, self.timeout)

    def _start_alike(self, model) -> None:
        """Rank 0's weights, optimizer state and step count on every rank (a model seeded alike
        everywhere already has them; one initialised from entropy, or resumed by one rank, not)."""
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
            started = time.perf_counter()
            np.multiply(state.host[state.index], share, out=self.canonical)
            state.host[state.index] = self.allreduce(self.canonical, what)
            self.reduce_seconds += time.perf_counter() - started
            state.write(state.host)
            return
        finished, summed, started = self.reads.finish(), [], None
        weights = [sharded.counts[rank] / sharded.rows for rank in self.node_ranks] if self.shared else None
        for index, (start, end) in enumerate(self.pieces):
            self.reads.wait(index)  # while the earlier pieces' sums go on
            if started is None and finished.command_execution_status == COMPLETE:
                started = time.perf_counter()
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
