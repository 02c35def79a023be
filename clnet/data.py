"""Getting mini-batches onto the device without a host round-trip per step.

When the data set fits comfortably in device memory it is copied there once; each epoch uploads
only its order of samples, and each step gathers its rows with one kernel launch. Otherwise the
host gathers each batch and queues a non-blocking copy.
"""
from __future__ import annotations

from collections import deque

import numpy as np
import pyopencl as cl

from .cl.runtime import Runtime
from .cl.tensor import Tensor

DEVICE_SHARE = 0.25  # at most this share of the device's memory holds a resident data set


class Batches:
    """Batches of `x` (samples, features) and `y` (samples, outputs), in an order set per epoch."""

    def __init__(self, rt: Runtime, x: np.ndarray, y: np.ndarray, capacity: int):
        self.rt, self.dtype = rt, x.dtype
        self.samples = len(x)
        self.x_batch = Tensor((capacity, x.shape[1]), x.dtype, rt)
        self.y_batch = Tensor((capacity, y.shape[1]), y.dtype, rt)
        limit = min(DEVICE_SHARE * rt.device.global_mem_size, rt.device.max_mem_alloc_size)
        self.resident = max(x.nbytes, y.nbytes) <= limit and x.nbytes + y.nbytes <= 2 * limit
        if self.resident:
            self.x, self.y = Tensor.from_numpy(x, rt=rt), Tensor.from_numpy(y, rt=rt)
            self.index = Tensor((self.samples,), np.int32, rt)
            self.x_batch.transposed = Tensor((x.shape[1], capacity), x.dtype, rt)
            program = rt.program(("data.cl",), self.dtype)
            self._gather = rt.kernel(program, "GatherRows", self.dtype)
        else:
            self.x_host, self.y_host = x, y
            # Each copy's event keeps its gathered array alive; dropping the oldest waits for it,
            # which bounds how far the host runs ahead of the device.
            self._pending = deque(maxlen=4)
        self.order(np.arange(self.samples))

    def order(self, permutation: np.ndarray) -> None:
        self.permutation = np.asarray(permutation, np.int32)
        if self.resident:
            self.index.write(self.permutation)

    def batch(self, first: int, rows: int) -> tuple[Tensor, Tensor]:
        """The rows order[first:first+rows], as device tensors of `rows` valid rows."""
        if self.resident:
            cols = max(self.x.shape[1], self.y.shape[1])
            self._gather((-(-cols // 4), rows), None, self.x, self.y, self.index, first,
                         self.x.shape[1], self.y.shape[1], self.x_batch, self.x_batch.transposed,
                         self.x_batch.shape[0], self.y_batch)
        else:
            rows_index = self.permutation[first:first + rows]
            for host, tensor in ((self.x_host, self.x_batch), (self.y_host, self.y_batch)):
                self._pending.append(cl.enqueue_copy(
                    self.rt.queue, tensor.buffer, np.ascontiguousarray(host[rows_index]), is_blocking=False))
        return self.x_batch, self.y_batch
