"""timeseries_dataset_from_array: sliding windows over a time series, as a clnet PyDataset."""
from __future__ import annotations

import numpy as np

from ..data import PyDataset
from ._checks import integer


def timeseries_dataset_from_array(data, targets, sequence_length, sequence_stride=1, sampling_rate=1,
                                  batch_size=128, shuffle=False, seed=None, start_index=None, end_index=None):
    """Batches of windows over `data`, as keras.utils.timeseries_dataset_from_array (without TensorFlow).

    Window j starts at time step s_j = start_index + j * sequence_stride and holds the steps
    data[s_j], data[s_j + sampling_rate], ..., data[s_j + (sequence_length - 1) * sampling_rate];
    its target is targets[s_j]: targets[i] pairs with the window that starts at i. Windows run
    while they fit before end_index (and, with targets, while targets[s_j] exists); the steps
    after the last whole window are left out.

    Args:
        data: an array (or array-like) whose axis 0 is time; a numpy memmap is read a batch
            at a time, not whole.
        targets: an array with one target per time step of data, or None for windows alone.
        sequence_length: the steps in a window, an integer >= 1.
        sequence_stride: the steps between the starts of consecutive windows (default 1).
        sampling_rate: the steps between consecutive steps of one window (default 1).
        batch_size: the windows in a batch (default 128); the last batch holds what is left.
            None gives single windows, unbatched: item i is window i and its target (so each
            item is one sample, not a batch that fit could train on).
        shuffle: whether to give the windows in a random order instead of in time order: the
            order of Keras's seeded shuffle of the window starts. (Keras's tf.data pipeline then
            reshuffles within a buffer of 8 batches each epoch, which is not repeated here.)
        seed: the shuffle's seed, an integer from 0 to 2**32 - 1; None draws one from numpy's
            global generator (so clnet.utils.set_random_seed repeats it).
        start_index: the first time step windows may use (default 0).
        end_index: the time step before which windows must end (default len(data)). As in Keras
            it must be below len(data): leave it as None to use the whole series.

    Returns:
        A clnet.data.PyDataset (TimeseriesDataset): len() is the number of batches, and item i
        is (x, y), numpy arrays of shapes (batch, sequence_length, *data.shape[1:]) and
        (batch, *targets.shape[1:]), or x alone when targets is None. x and y keep the dtypes
        of data and targets. The order is fixed when the data set is made; fit(shuffle=True)
        also shuffles the order of its batches each epoch.

    Raises:
        TypeError: an integer argument is not an integer, or data or targets is a scalar.
        ValueError: an argument is outside the range Keras allows: start_index < 0 or
            >= len(data); end_index <= 0, <= start_index or >= len(data); sampling_rate or
            sequence_stride < 1 or >= len(data); sequence_length or batch_size < 1; seed < 0
            or >= 2**32; data is empty, or it or targets is not an array (a ragged list).
    """
    data, steps = _series("data", data)
    if steps == 0:
        raise ValueError(f"data has no time steps (shape {data.shape}): there is nothing to cut windows from")
    start_index = 0 if start_index is None else integer("start_index", start_index)
    if start_index < 0 or start_index >= steps:
        raise ValueError(f"start_index must be in [0, len(data)) = [0, {steps}), got {start_index}")
    if end_index is None:
        end_index = steps
    else:
        # Keras's rules, which refuse end_index=len(data) (None means the whole series).
        end_index = integer("end_index", end_index)
        if end_index <= start_index or end_index >= steps:
            raise ValueError(f"end_index must be above start_index ({start_index}) and below len(data) "
                             f"({steps}), got {end_index}")
    sampling_rate = _below("sampling_rate", sampling_rate, steps)
    sequence_stride = _below("sequence_stride", sequence_stride, steps)
    sequence_length = integer("sequence_length", sequence_length, minimum=1)
    if batch_size is not None:
        batch_size = integer("batch_size", batch_size, minimum=1)
    if seed is not None:
        seed = integer("seed", seed, minimum=0, maximum=2**32 - 1)

    # The windows that fit between start_index and end_index, counted from start_index.
    windows = end_index - start_index - (sequence_length - 1) * sampling_rate
    if targets is not None:
        targets, target_steps = _series("targets", targets)
        windows = min(windows, target_steps - start_index)  # each window needs its target
    starts = np.arange(0, max(windows, 0), sequence_stride)
    if shuffle:
        # Keras's shuffle of the window starts, draw for draw. Its tf.data pipeline then shuffles
        # again within a buffer of 8 batches, anew each epoch; that second pass is not repeated
        # here: the order stays fixed, and fit(shuffle=True) shuffles the batches instead.
        if seed is None:
            seed = int(np.random.randint(1_000_000))
        np.random.RandomState(seed).shuffle(starts)
    return TimeseriesDataset(data, targets, start_index + starts, sequence_length, sampling_rate, batch_size)


class TimeseriesDataset(PyDataset):
    """The windows of timeseries_dataset_from_array, cut from `data` a batch at a time.

    `starts` are the time steps at which the windows begin, in the order they are served. Made by
    `timeseries_dataset_from_array`, whose arguments these are: `data` (axis 0 is time; a memmap
    is read a batch at a time), `targets` (None, or the target of each window, read at its
    start), `sequence_length` (steps per window), `sampling_rate` (the period between a window's
    steps) and `batch_size` (windows per batch; None serves single windows). A `PyDataset`:
    `len()` batches, indexed or iterated, each `x` or `(x, y)`."""

    def __init__(self, data, targets, starts: np.ndarray, sequence_length: int, sampling_rate: int,
                 batch_size: int | None):
        super().__init__()
        self.data, self.targets, self.starts = data, targets, starts
        self.batch_size = batch_size
        self.offsets = np.arange(sequence_length) * sampling_rate  # a window's steps from its start

    def __len__(self) -> int:
        if self.batch_size is None:
            return len(self.starts)
        return -(-len(self.starts) // self.batch_size)

    def __getitem__(self, index):
        """Batch `index` (a window when unbatched): x, or (x, y) where there are targets.

        An index outside [-len, len) raises IndexError, as a sequence does: it ends a for loop."""
        index = integer("index", index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for a data set of {len(self)} "
                             f"{'windows' if self.batch_size is None else 'batches'}")
        index %= len(self)
        if self.batch_size is None:
            starts = self.starts[index]
        else:
            starts = self.starts[index * self.batch_size:(index + 1) * self.batch_size]
        # One fancy index builds all the batch's windows: row r reads steps starts[r] + offsets.
        x = np.asarray(self.data[np.add.outer(starts, self.offsets)])
        if self.targets is None:
            return x
        return x, np.asarray(self.targets[starts])

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _series(argument: str, values) -> tuple[np.ndarray, int]:
    """values as an array with a time axis (a memmap stays one) and its number of steps."""
    try:
        array = values if isinstance(values, np.ndarray) else np.asarray(values)
    except (ValueError, TypeError) as error:  # e.g. a ragged list
        raise ValueError(f"{argument} must be an array whose axis 0 is time, got {type(values).__name__} "
                         f"that is not one: {error}") from None
    if array.ndim == 0:
        raise TypeError(f"{argument} must be an array whose axis 0 is time, got {type(values).__name__} {values!r}")
    return array, len(array)


def _below(argument: str, value, steps: int) -> int:
    """A positive step size below the series' length, as Keras requires."""
    value = integer(argument, value)
    if value < 1 or value >= steps:
        raise ValueError(f"{argument} must be in [1, len(data)) = [1, {steps}), got {value}")
    return value
