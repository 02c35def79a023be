"""The parameters of the layers a model builds, in one flat device buffer (and the trainable
ones' gradients in a second), so that an optimizer updates every trainable parameter with a single
kernel launch.

Non-trainable parameters (BatchNormalization's moving statistics) sit after the trainable ones:
the optimizer's range, its moments and the gradients cover only `values[:size]`.

A layer is built once and keeps its parameters in the store it was built in: a model made of
layers another model built reads and trains them there, as Keras's shared layers. Its trainable
parameters are then `ParameterRange`s, runs of one or several stores, one update launch each; a
model that built all of its layers has one range, its whole store."""
from __future__ import annotations

import weakref

import numpy as np

from .runtime import Runtime
from .tensor import Tensor


class Parameter:
    """A slice of the store: `value` and `grad` are sub-buffer tensors of the device shape.

    `keras_index` has the parameter's Keras shape and holds, for each Keras element, its position
    in the flattened device array: layers may pad or reorder on the device (Dense keeps column
    panels) while weights, gradients and optimizer moments go in and out in Keras layout."""

    def __init__(self, initial: np.ndarray, keras_index: np.ndarray | None, trainable: bool):
        self.offset: int | None = None  # set when the store is allocated
        self.store: ParameterStore | None = None  # the store whose buffers hold it
        self.trainable = trainable
        self.shape = initial.shape
        self.size = initial.size
        self.keras_index = np.arange(self.size).reshape(self.shape) if keras_index is None else keras_index
        self.initial: np.ndarray | None = initial
        self.value: Tensor | None = None
        self.grad: Tensor | None = None  # None for a non-trainable parameter

    def own(self, flat: np.ndarray) -> np.ndarray:
        """This parameter's slice of a flat store-sized array (a view)."""
        return flat[self.offset:self.offset + self.size]

    def to_keras(self, device: np.ndarray) -> np.ndarray:
        """A device-layout array of this parameter (any shape, `size` elements) in Keras layout."""
        return device.reshape(-1)[self.keras_index]

    def from_keras(self, array: np.ndarray, device: np.ndarray) -> None:
        """Write the Keras-layout `array` into `device`, a flat view of this parameter's elements."""
        device[self.keras_index] = array


class ParameterStore:
    def __init__(self, rt: Runtime, dtype):
        self.rt = rt
        self.dtype = np.dtype(dtype)
        self.parameters: list[Parameter] = []
        self.size = 0  # elements in the trainable range: values[:size], grads and optimizer moments
        self.values: Tensor | None = None
        self.grads: Tensor | None = None
        # A layer called more than once runs as one copy per call; the copies' parameters read the
        # owner's values and write their gradients to a second buffer, added into the owner's.
        self.shared: list[tuple[Parameter, Parameter, bool]] = []  # (copy, owner, replaces: see share)
        self.users: weakref.WeakSet = weakref.WeakSet()  # the models that read its parameters

    def _aligned(self, size: int) -> int:
        step = self.rt.alignment // self.dtype.itemsize  # sub-buffers must start aligned
        return -(-size // step) * step

    def add(self, initial: np.ndarray, keras_index: np.ndarray | None = None, trainable: bool = True) -> Parameter:
        if self.values is not None:
            raise RuntimeError("parameters cannot be added after the store was allocated")
        parameter = Parameter(np.asarray(initial, self.dtype), keras_index, trainable)
        parameter.store = self
        self.parameters.append(parameter)
        return parameter

    def share(self, owner: Parameter, replaces: bool = False) -> Parameter:
        """The same parameter for another call of its layer: owner's values, a gradient of its own,
        added to the owner's after the backward pass; `replaces`: put in place of the owner's, which
        this model does not compute (its layer runs only as copies here: a model made again on
        other lengths), so that no earlier step's gradient stays in it."""
        if self.values is not None:
            raise RuntimeError("parameters cannot be added after the store was allocated")
        copy = Parameter(np.broadcast_to(np.zeros((), self.dtype), owner.shape), owner.keras_index, owner.trainable)
        copy.initial, copy.store = None, owner.store
        self.shared.append((copy, owner, replaces))
        return copy

    def allocate(self) -> None:
        end = 0
        for trainable in (True, False):
            for p in self.parameters:
                if p.trainable == trainable:
                    p.offset = self._aligned(end)
                    end = p.offset + p.size
            if trainable:
                end = self.size = -(-end // 4) * 4  # whole TYPE4 vectors for the update kernels
        host = np.zeros(end, self.dtype)
        for p in self.parameters:
            host[p.offset:p.offset + p.size] = p.initial.ravel()
            p.initial = None
        self.values = Tensor.from_numpy(host, rt=self.rt)
        self.grads = Tensor.zeros((self.size,), self.dtype, self.rt)
        for p in self.parameters:
            p.value = self.values.region(p.offset, p.shape)
            if p.trainable:
                p.grad = self.grads.region(p.offset, p.shape)
        if self.shared:
            self._allocate_shared()

    def joined(self, parameters: list[Parameter]) -> Parameter:
        """One parameter over a run of trainable parameters declared back to back, each a whole
        number of alignment steps long (so that no padding lies between them): its value and
        gradient tensors span the run (JoinedDense's kernel, its parts' kernels side by side).
        A run of shared copies spans their owners' values and the copies' own gradients."""
        owners = {id(copy): owner for copy, owner, _ in self.shared}
        holders = [owners.get(id(p), p) for p in parameters]  # whose offset is the value's
        for run in (parameters, holders):
            for before, after in zip(run, run[1:]):
                if after.offset != before.offset + before.size:
                    raise RuntimeError(f"parameters of shapes {before.shape} and {after.shape} do not lie back to "
                                       "back in the store; a joined parameter needs a contiguous run")
        copies = {id(p) in owners for p in parameters}
        if copies != {False} and copies != {True}:
            raise RuntimeError("a joined parameter is a run of a layer's own parameters or of their shared copies")
        size = sum(p.size for p in parameters)
        span = Parameter(np.broadcast_to(np.zeros((), self.dtype), (size,)), None, True)
        span.initial, span.offset = None, parameters[0].offset
        span.value = self.values.region(holders[0].offset, (size,))
        grads = self.shared_grads if copies == {True} else self.grads
        span.grad = grads.region(parameters[0].offset, (size,))
        return span

    def _allocate_shared(self) -> None:
        end = 0
        rounds: list[list[tuple[Parameter, Parameter]]] = []
        # The copies that replace their owner's gradient come first, each in rounds of its own kind.
        for copy, owner, replaces in sorted(self.shared, key=lambda pair: not pair[2]):
            copy.value = owner.value
            if not owner.trainable:
                continue
            copy.offset = self._aligned(end)
            end = copy.offset + copy.size
            # A layer called n times has n - 1 copies: each round adds at most one copy per owner,
            # so no two work-items of a launch add into the same gradient; and its owners share a
            # store (one built by another model keeps its parameters in that model's store).
            taken = next((r for r in rounds if r[0][1].store is owner.store and r[0][2] == replaces
                          and all(o is not owner for _, o, _ in r)), None)
            if taken is None:
                rounds.append(taken := [])
            taken.append((copy, owner, replaces))
        self.shared_grads = Tensor((max(end, 1),), self.dtype, self.rt)
        program = self.rt.program(("cl/parameters.cl",), self.dtype)
        add_shared = self.rt.kernel(program, "AddSharedGradients", self.dtype)
        self._rounds = []  # (each round's launch, all its arguments bound, and its work-items)
        for pairs in rounds:
            for copy, _, _ in pairs:
                copy.grad = self.shared_grads.region(copy.offset, copy.shape)
            source = np.concatenate([np.arange(c.offset, c.offset + c.size) for c, _, _ in pairs]).astype(np.int32)
            target = np.concatenate([np.arange(o.offset, o.offset + o.size) for _, o, _ in pairs]).astype(np.int32)
            self._rounds.append((add_shared.bind((), grads=pairs[0][1].store.grads, shared_grads=self.shared_grads,
                                                 source=Tensor.from_numpy(source, rt=self.rt),
                                                 target=Tensor.from_numpy(target, rt=self.rt),
                                                 replaces=int(pairs[0][2])), len(source)))

    def add_shared_gradients(self) -> None:
        """Owner gradient += each copy's gradient (= where the copy replaces it): one launch per
        round (one for a layer called twice)."""
        for launch, count in getattr(self, "_rounds", ()):
            launch((count,), None)


class ParameterRange:
    """A run of a store's trainable parameters that one update launch covers: elements [start,
    start + size) of its values and gradients (sub-buffer views), size a whole number of TYPE4
    vectors. What lies between its parameters is padding, whose gradient is always 0."""

    def __init__(self, store: ParameterStore, parameters: list[Parameter]):
        self.store, self.parameters = store, parameters
        self.start = parameters[0].offset
        end = parameters[-1].offset + parameters[-1].size
        # A whole store's range ends where its trainable range does; a run inside one is rounded up
        # to whole vectors, within the padding up to the next (aligned) parameter.
        self.size = store.size - self.start if end == _trainable_end(store) else -(-(end - self.start) // 4) * 4
        self.whole = self.start == 0 and self.size == store.size
        if self.whole:
            self.values, self.grads = store.values, store.grads
        else:
            self.values = store.values.region(self.start, (self.size,))
            self.grads = store.grads.region(self.start, (self.size,))


def _trainable_end(store: ParameterStore) -> int:
    return max((p.offset + p.size for p in store.parameters if p.trainable), default=0)


def parameter_ranges(parameters: list[Parameter], frozen: set[int] = frozenset()) -> list[ParameterRange]:
    """The trainable `parameters` (of allocated stores) but those whose id is in `frozen` (of
    layers set trainable = False) as maximal runs of their stores: one range per store whose
    trainable parameters they all are, more where they skip some."""
    wanted = {id(p) for p in parameters if p.trainable and id(p) not in frozen}
    stores = list({id(p.store): p.store for p in parameters if id(p) in wanted}.values())
    ranges = []
    for store in stores:
        run: list[Parameter] = []
        for p in sorted((p for p in store.parameters if p.trainable), key=lambda p: p.offset):
            if id(p) in wanted:
                run.append(p)
            elif run:
                ranges.append(ParameterRange(store, run))
                run = []
        if run:
            ranges.append(ParameterRange(store, run))
    return ranges
