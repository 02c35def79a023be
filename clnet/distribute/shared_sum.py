"""The gradients' sum over MPI ranks, through shared memory among the ranks of one host.

Between ranks of one host, an MPI library's all-reduce moves a large model's gradients at 1-2 GB/s
(one thread a rank, a pipeline of small copies; benchmarks/RESULTS.md, MPI ranks on two H200s).
Here every rank of a host owns a slot of an MPI-3 shared window as large as the flat gradients
(SharedSlots), and the ranks meet through counters in it. Where the ranks' devices sum
(MPIDataParallel's default on one host), each rank's pieces come down into its slot and its device
adds the others', copied up from theirs: the host only meets. SharedSum sums on the host instead
(several hosts, or sum_on="host"): a piece, for L ranks on the host, is cut into L slices; each rank

    1. copies the slices the other ranks sum into its slot,           (barrier)
    2. sums its own slice of every rank's piece, weighted by each rank's share of the batch,
       into its slot (its own piece read from its pinned host array),
    3. where there are several hosts, all-reduces that slice with the ranks of the same local
       index on the other hosts (MPI's all-reduce, 1/L of the bytes each),  (barrier)
    4. copies every rank's summed slice into its host array,

with `threads` threads (numpy releases the GIL), so that the host's memory bandwidth, not one core,
bounds them. Each slice is cut into as many parts as threads, and thread t of every rank does the
three steps on parts t alone, meeting only thread t of the host's other ranks: the threads run
through a piece without waiting for each other (a fork and join of a pool at every step cost more
than the copies of a 4 MB piece). The meetings are counters in the window, polled with short
sleeps: an MPI barrier (over TCP where the ranks' transport is) spins a core that, on a small
machine, the ranks' own kernels need. Every rank reads the same summed memory: the ranks'
gradients stay bitwise alike. The sums run in rank order."""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future

import numpy as np

# A thread sums its part in blocks of BLOCK elements, so that the weighted term it adds stays in
# its core's cache.
BLOCK = 1 << 16
# Bytes of a slot's head given to each meeting count, so that no two share a cache line.
LINE = 128
# Each rank's part of the window is whole pages: its counts at the end of the first, its slot from
# the second on.
PAGE = 4096
# A meeting sleeps this long (seconds) between polls: a thread that polled without sleeping would
# hold the GIL, which the rank's other threads need between their numpy calls, for up to the
# interpreter's switch interval (5 ms).
POLL = 20e-6


class SharedSlots:
    """An MPI-3 shared window over the ranks of `node` (ranks of one host, e.g.
    comm.Split_type(MPI.COMM_TYPE_SHARED)): a slot of `size` elements of `dtype` for every local
    rank (`slots`, by local rank; each starts on a page), and `meetings` counters per rank for
    meet(). A meeting that waits longer than `timeout` seconds raises TimeoutError. Collective over
    `node`."""

    def __init__(self, MPI, node, size: int, dtype, meetings: int = 1, timeout: float = 120.0):
        self.MPI = MPI
        self.local, self.locals = node.Get_rank(), node.Get_size()
        self.size, self.dtype, self.timeout = size, np.dtype(dtype), timeout
        head = meetings * LINE
        # (whole pages each: the next rank's counts and slot stay aligned where the library lays
        # the slots end to end, and a driver that pins a slot pins whole pages of it)
        self.window = MPI.Win.Allocate_shared(PAGE + -(-size * self.dtype.itemsize // PAGE) * PAGE, 1, comm=node)
        self.slots, self.counts = [], []  # every local rank's slot (size,) and meeting counts (meetings,)
        for rank in range(self.locals):
            memory, _ = self.window.Shared_query(rank)
            self.counts.append(np.frombuffer(memory, np.int64, head // 8, PAGE - head)[::LINE // 8])
            self.slots.append(np.frombuffer(memory, self.dtype, size, PAGE))
        self.counts[self.local][:] = 0
        self.met = [0] * meetings
        self.window.Lock_all(MPI.MODE_NOCHECK)  # (Sync() then orders this rank's stores and loads)
        node.Barrier()  # every count is 0 before anyone's first meeting

    def close(self) -> None:
        """Free the window (collective over `node`)."""
        self.window.Unlock_all()
        self.window.Free()
        self.slots, self.counts = [], []

    def meet(self, t: int = 0) -> None:
        """Until every local rank has come to meeting t as often: their stores before are seen by
        this rank's loads after. (One thread a counter: SharedSum's thread t meets on counter t.)"""
        self.met[t] += 1
        met = self.met[t]
        self.window.Sync()
        self.counts[self.local][t] = met
        started = time.perf_counter()
        while any(counts[t] < met for counts in self.counts):
            if time.perf_counter() - started > self.timeout:
                raise TimeoutError(f"SharedSlots: this host's other ranks did not reach meeting {met} on counter {t} "
                                   f"within {self.timeout:g} s")
            time.sleep(POLL)
        self.window.Sync()


class SharedSum(SharedSlots):
    """Weighted sums of pieces of a flat array of `size` elements of `dtype` over the ranks of
    `node` (ranks of one host) and, where `cross` is given (the ranks of the other hosts with this
    rank's local index; every host with as many ranks), over the hosts, on the host's threads.
    `threads`: threads a rank sums with. A meeting that waits longer than `timeout` seconds raises
    TimeoutError."""

    def __init__(self, MPI, node, cross, size: int, dtype, threads: int = 1, timeout: float = 120.0):
        super().__init__(MPI, node, size, dtype, threads, timeout)
        self.threads = threads
        # Each thread's own communicator across hosts: collectives of one communicator may not run
        # on several threads at once.
        self.cross = [None if cross is None else cross.Dup() for _ in range(threads)]
        self.jobs = [queue.SimpleQueue() for _ in range(threads)]
        for t in range(threads):  # daemons: one left waiting on a dead rank must not keep the process
            threading.Thread(target=self._work, args=(t,), name=f"clnet-shared-sum-{t}", daemon=True).start()

    def close(self) -> None:
        """End the threads; free the window and communicators (collective over `node` and `cross`)."""
        for future in self._all(None):
            future.result()
        super().close()
        for cross in self.cross:
            if cross is not None:
                cross.Free()

    def sum(self, host: np.ndarray, start: int, end: int, weights: list[float]) -> list[Future]:
        """Start host[start:end] ← Σ_k weights[k] · (local rank k's host[start:end]), over every
        host (weights: this host's ranks', by local rank); it is done when the futures are (each
        thread's; one raises TimeoutError where a meeting timed out). Collective over `node` (and
        `cross`): every rank starts the same pieces in the same order; a piece's threads go on
        with the next piece without waiting for each other."""
        return self._all((self._sum, host, start, end, weights))

    def end_step(self) -> list[Future]:
        """After a step's last sum: no rank writes the next step's first piece into its slot while
        another still reads this step's last one from it."""
        return self._all((self.meet,))

    # -- the threads -----------------------------------------------------------------------------
    def _all(self, job) -> list[Future]:
        """`job` (work, *args) queued on every thread, work(t, *args) on thread t: their futures."""
        done = [Future() for _ in range(self.threads)]
        for jobs, future in zip(self.jobs, done):
            jobs.put((job, future))
        return done

    def _work(self, t: int) -> None:
        while True:
            job, done = self.jobs[t].get()
            if job is None:
                done.set_result(None)
                return
            try:
                done.set_result(job[0](t, *job[1:]))
            except BaseException as error:  # sum() raises it
                done.set_exception(error)

    def _sum(self, t: int, host: np.ndarray, start: int, end: int, weights: list[float]) -> None:
        """Thread t's part of every rank's slice of the piece [start, end)."""
        slices = np.linspace(start, end, self.locals + 1).astype(int)
        parts = [_part(a, b, t, self.threads) for a, b in zip(slices[:-1], slices[1:])]
        slot = self.slots[self.local]
        for k, (a, b) in enumerate(parts):
            if k != self.local:
                slot[a:b] = host[a:b]
        self.meet(t)
        a, b = parts[self.local]
        _weighted_sum(slot, [host if k == self.local else self.slots[k] for k in range(self.locals)], weights, a, b)
        if self.cross[t] is not None and a < b:
            self.cross[t].Allreduce(self.MPI.IN_PLACE, slot[a:b], op=self.MPI.SUM)
        self.meet(t)
        for k, (a, b) in enumerate(parts):
            host[a:b] = self.slots[k][a:b]


def _part(start: int, end: int, t: int, parts: int) -> tuple[int, int]:
    """Part t of [start, end) cut into `parts`."""
    length = end - start
    return start + length * t // parts, start + length * (t + 1) // parts


def _weighted_sum(out: np.ndarray, terms: list[np.ndarray], weights: list[float], a: int, b: int) -> None:
    """out[a:b] = Σ_k weights[k] · terms[k][a:b], summed in k's order, a block at a time."""
    scratch = np.empty(min(BLOCK, b - a), out.dtype)
    for first in range(a, b, BLOCK):
        last = min(first + BLOCK, b)
        block, term = out[first:last], scratch[:last - first]
        np.multiply(terms[0][first:last], weights[0], out=block)
        for source, weight in zip(terms[1:], weights[1:]):
            np.multiply(source[first:last], weight, out=term)
            block += term
