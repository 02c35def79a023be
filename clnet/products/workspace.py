"""Device memory the Winograd plans share on one runtime, as cuDNN's workspace is shared.

A Winograd product's transformed operands and products (V, U and M, 36 times the tiles of its
layer) live only through that product's own three launches, and a runtime's in-order queue runs
one product's launches before the next product's (none of them goes to the side queue, and only
Bidirectional's recurrent layers run on a branch). So each of the three arrays has one slot per
runtime, shared by every convolution and product, sized to the largest that any plan reserved:
a network of many 3 x 3 convolutions holds about what its largest product needs, not the sum of
all of them (at batch 128, 32 x 32 x 64 to 64 filters: 226 MB in all, against 453 MB a layer)."""
from __future__ import annotations

import weakref

import numpy as np

from ..cl.tensor import Tensor

SLOTS = ("V", "U", "M")  # the transformed operands and the products, in the plans' order


class Workspace:
    """The slots of one runtime `rt`: plans `reserve` each slot's bytes when they are made and take
    views of the slots (`view`) at their first launch, when every plan of a model has reserved. A
    slot grows where a later plan wants more; the plans already holding the smaller one keep it."""

    def __init__(self, rt):
        self.rt = rt
        self._wanted = dict.fromkeys(SLOTS, 0)
        self._slots: dict[str, Tensor] = {}

    def reserve(self, slot: str, shape: tuple, dtype) -> None:
        """Room in `slot` for an array of `shape` and `dtype`."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self._wanted[slot] = max(self._wanted[slot], nbytes)

    def view(self, slot: str, shape: tuple, dtype) -> Tensor:
        """An array of `shape` and `dtype` on `slot`'s memory, which then holds at least all that
        was reserved in it."""
        self.reserve(slot, shape, dtype)
        held = self._slots.get(slot)
        if held is None or held.nbytes < self._wanted[slot]:
            held = self._slots[slot] = Tensor((self._wanted[slot],), np.uint8, self.rt)
        return Tensor(shape, dtype, self.rt, held.buffer)

    @property
    def nbytes(self) -> int:
        """The device memory the slots hold now."""
        return sum(tensor.nbytes for tensor in self._slots.values())


_WORKSPACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def workspace(rt) -> Workspace:
    """The runtime's workspace (made at the first call)."""
    found = _WORKSPACES.get(rt)
    if found is None:
        found = _WORKSPACES[rt] = Workspace(rt)
    return found


class Scratch:
    """A plan's V, U and M on its runtime's workspace, of `shapes` (one a slot, SLOTS' order) and
    `dtype`: reserved when made, viewed by the first launch (`take`), when every plan of a model
    has reserved."""

    def __init__(self, rt, dtype, shapes: tuple):
        self._workspace, self.dtype, self.shapes = workspace(rt), dtype, shapes
        for slot, shape in zip(SLOTS, shapes):
            self._workspace.reserve(slot, shape, dtype)
        self.arrays: tuple[Tensor, ...] = ()  # the views, from the first take on

    def take(self) -> tuple[Tensor, ...]:
        """The views (made at the first call)."""
        if not self.arrays:
            self.arrays = tuple(self._workspace.view(slot, shape, self.dtype)
                                for slot, shape in zip(SLOTS, self.shapes))
        return self.arrays

    @property
    def nbytes(self) -> int:
        """The bytes the views take in the workspace: 0 before the first take."""
        return sum(array.nbytes for array in self.arrays)
