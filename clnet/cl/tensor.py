"""Device buffers with a shape and a dtype."""
from __future__ import annotations

import numpy as np
import pyopencl as cl

from .runtime import Runtime, runtime

STAGING_CHUNK = 64 << 20  # bytes of each of Tensor.staged's two pinned chunks


class Tensor:
    """A row-major array in device memory, the buffers layers and kernels work on. It owns its
    `cl.Buffer` (or a sub-buffer of a parent). `shape` is its full shape (a batch tensor's capacity
    rows first), `dtype` its numpy dtype (the model's float type, or `int32` for index tables), `rt`
    the Runtime whose context holds it (default: `clnet.runtime()`), and `buffer` an existing buffer
    to view instead of allocating one. `Tensor.from_numpy(array)`, `Tensor.zeros(shape, dtype)`,
    `write(array)`, `numpy()` and `fill(value)` move values in and out; the queue is in order, so a
    read waits for the launches before it."""

    def __init__(self, shape, dtype, rt: Runtime | None = None, buffer: cl.Buffer | None = None):
        self.rt = rt or runtime()
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        # A (features, capacity) tensor with the same values transposed, when the producer of
        # this batch tensor writes one (see Layer.writes_transposed).
        self.transposed: Tensor | None = None
        # OpenCL refuses zero-sized buffers; a 1-element buffer stands in for an empty tensor.
        self.buffer = buffer if buffer is not None else cl.Buffer(
            self.rt.context, cl.mem_flags.READ_WRITE, max(self.nbytes, self.dtype.itemsize))

    def transposed_arguments(self) -> tuple:
        """The kernels' arguments for writing the transposed copy: it and its row length, or
        (None, 0) where none is written."""
        return (None, 0) if self.transposed is None else (self.transposed, self.transposed.shape[1])

    def region(self, start: int, shape) -> "Tensor":
        """Elements [start, start + size of `shape`) of this tensor, flat, as a tensor of `shape`
        sharing its memory (a sub-buffer: `start` must lie on the device's alignment). An empty
        region holds one element, as an empty tensor does."""
        shape = tuple(int(s) for s in shape)
        size = max(int(np.prod(shape, dtype=np.int64)), 1) * self.dtype.itemsize
        item = self.dtype.itemsize
        return Tensor(shape, self.dtype, self.rt, self.buffer.get_sub_region(start * item, size))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @classmethod
    def from_numpy(cls, array, dtype=None, rt: Runtime | None = None) -> "Tensor":
        array = np.ascontiguousarray(array, dtype=dtype)
        tensor = cls(array.shape, array.dtype, rt)
        tensor.write(array)
        return tensor

    @classmethod
    def staged(cls, array: np.ndarray, dtype=None, rt: Runtime | None = None,
               chunk_bytes: int = STAGING_CHUNK) -> "Tensor":
        """from_numpy for a large array on a device across a bus: the host converts rows to `dtype`
        into one of two pinned chunks (Runtime.pinned) while the other's copy runs, so the copy
        goes at the link's speed and the conversion costs no pass of its own. A numpy array's
        memory is pageable, which a GPU's driver copies through staging of its own at a fraction
        of that speed."""
        rt = rt or runtime()
        dtype = np.dtype(dtype or array.dtype)
        tensor = cls(array.shape, dtype, rt)
        row = max(1, int(np.prod(array.shape[1:], dtype=np.int64)))
        rows = max(1, chunk_bytes // (row * dtype.itemsize))
        if len(array) <= rows:
            tensor.write(array)
            return tensor
        chunks = [rt.pinned(rows * row, dtype) for _ in range(2)]  # (buffer, host array) each
        copies: list = [None, None]
        rt.join_side()
        rt.main_event = None  # (see Runtime.main_event)
        for k, start in enumerate(range(0, len(array), rows)):
            part = array[start:start + rows]
            if copies[k % 2] is not None:
                copies[k % 2].wait()  # the chunk's previous copy has left it
            host = chunks[k % 2][1][:part.size].reshape(part.shape)
            np.copyto(host, part, casting="unsafe")
            copies[k % 2] = cl.enqueue_copy(rt.queue, tensor.buffer, host, dst_offset=start * row * dtype.itemsize,
                                            is_blocking=False)
        cl.wait_for_events([c for c in copies if c is not None])
        return tensor

    @classmethod
    def zeros(cls, shape, dtype, rt: Runtime | None = None) -> "Tensor":
        tensor = cls(shape, dtype, rt)
        tensor.fill(0)
        return tensor

    def write(self, array, blocking: bool = True) -> None:
        array = np.ascontiguousarray(array, dtype=self.dtype)
        if array.size != self.size:
            raise ValueError(f"cannot write {array.shape} into a device tensor of shape {self.shape}")
        if self.size:
            self.rt.join_side()
            self.rt.main_event = None  # (see Runtime.main_event)
            cl.enqueue_copy(self.rt.queue, self.buffer, array, is_blocking=blocking)

    def numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """The tensor's values on the host: a new array, or `out` (of its size and dtype, e.g. a
        pinned one, which the copy reaches by DMA) filled."""
        if out is None:
            out = np.empty(self.shape, self.dtype)
        elif out.size != self.size or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(f"numpy(out=...) needs a contiguous {self.dtype.name} array of {self.size} elements, "
                             f"got {out.dtype.name} {out.shape}")
        if self.size:
            self.rt.join_side()
            cl.enqueue_copy(self.rt.queue, out, self.buffer, is_blocking=True)
        return out

    def fill(self, value) -> None:
        if self.size:
            self.rt.join_side()
            self.rt.main_event = None
            cl.enqueue_fill_buffer(self.rt.queue, self.buffer, self.dtype.type(value), 0, self.nbytes)

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype.name}, device={self.rt.info.name!r})"
