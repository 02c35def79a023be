"""clnet.utils against Keras 3's keras.utils, and boolean model inputs.

Keras is not a test dependency: the expected values below are literal arrays from Keras's
docstrings or small loop-written numpy references that spell out Keras's rules. The same cases
were run once through Keras 3.15.1 itself, outside this suite, and agreed. Nothing here builds
a model or compiles a kernel."""
import random

import numpy as np
import pytest

import clnet
from clnet import model as clnet_model
from clnet.data import PyDataset, checked, is_stream
from clnet.losses import base as losses_base
from clnet.losses.base import as_numeric
from clnet.utils import pad_sequences, set_random_seed, timeseries_dataset_from_array, to_categorical


def test_exported():
    assert "utils" in clnet.__all__ and clnet.utils.to_categorical is to_categorical
    assert set(clnet.utils.__all__) >= {"to_categorical", "pad_sequences", "set_random_seed",
                                        "timeseries_dataset_from_array", "PyDataset"}


# -- to_categorical -------------------------------------------------------------------------------
def one_hot_reference(labels, classes):
    """Keras's rule: drop a trailing axis of 1 when there are two or more axes, then one row of
    np.eye per label."""
    labels = np.asarray(labels).astype(np.int64)
    if labels.ndim > 1 and labels.shape[-1] == 1:
        labels = labels[..., 0]
    return np.eye(classes, dtype=np.float64)[labels]


@pytest.mark.parametrize("labels,classes,shape", [
    ([0, 1, 2, 3], 4, (4, 4)),
    ([[1], [0], [2]], None, (3, 3)),             # a column: squeezed
    (np.zeros((2, 1, 1), int), 2, (2, 1, 2)),    # only the last axis of 1 goes
    ([1], 3, (1, 3)),                            # one axis of 1 is kept
    ([[1]], 3, (1, 3)),
    (np.arange(8).reshape(2, 2, 2) % 3, 4, (2, 2, 2, 4)),
    ([[0, 2, 1], [1, 1, 0]], None, (2, 3, 3)),
    (np.array([0.0, 2.0]), 3, (2, 3)),           # whole floats
    ([True, False, True], None, (3, 2)),         # bools as 0/1
    (np.array([1, 4], np.uint8), None, (2, 5)),
    ([0, 1], np.int64(3), (2, 3)),
])
def test_to_categorical(labels, classes, shape):
    got = to_categorical(labels, classes)
    assert got.shape == shape and got.dtype == np.float64
    np.testing.assert_array_equal(got, one_hot_reference(labels, shape[-1]))


def test_to_categorical_keras_docstring_and_edge_shapes():
    np.testing.assert_array_equal(to_categorical([0, 1, 2, 3], num_classes=4), np.eye(4))
    np.testing.assert_array_equal(to_categorical(3, 5), [0, 0, 0, 1, 0])  # a scalar: shape (5,)
    assert to_categorical(np.array([], int), 3).shape == (0, 3)
    assert to_categorical(np.zeros((0, 1), int), 2).shape == (0, 2)


@pytest.mark.parametrize("labels,classes,error,message", [
    ([0, -1], 3, ValueError, r"x holds label -1 at index \(1,\): class ids must be >= 0"),
    ([[0, 1], [3, 0]], 3, ValueError,
     r"x holds label 3 at index \(1, 0\), but num_classes is 3: labels must be in 0\.\.2"),
    ([0, 1.5], None, ValueError, r"x holds 1\.5 at index \(1,\), which is not a whole number"),
    ([np.nan, 0], None, ValueError, r"x holds nan at index \(0,\), which is not a whole number"),
    ([0, np.inf], 2, ValueError, r"x holds inf at index \(1,\)"),
    ([], None, ValueError, r"x holds no labels \(shape \(0,\)\) and num_classes is None"),
    ([0, 1], 0, ValueError, r"num_classes must be >= 1, got 0"),
    ([0, 1], 3.0, TypeError, r"num_classes must be an integer, got 3\.0 \(of type float\)"),
    ([0, 1], True, TypeError, r"num_classes must be an integer, got True"),
    (["a", "b"], None, TypeError, r"x must hold integer class ids, got dtype <U1"),
    (np.array([1, None], dtype=object), None, TypeError, r"x must hold integer class ids, got dtype object"),
    ([[0, 1], [2]], None, ValueError, r"x must be an array of integer class ids, got list that is not one"),
])
def test_to_categorical_errors(labels, classes, error, message):
    with pytest.raises(error, match=message):
        to_categorical(labels, classes)


# -- pad_sequences --------------------------------------------------------------------------------
def pad_reference(sequences, maxlen, padding="pre", truncating="pre", value=0, dtype="int32", sample_shape=()):
    """Keras's rules written out step by step."""
    out = np.full((len(sequences), maxlen, *sample_shape), value, dtype)
    for i, sequence in enumerate(sequences):
        steps = list(sequence)
        if len(steps) > maxlen:
            steps = steps[len(steps) - maxlen:] if truncating == "pre" else steps[:maxlen]
        for j, step in enumerate(steps):
            out[i, j if padding == "post" else maxlen - len(steps) + j] = step
    return out


SEQUENCES = [[1], [2, 3], [4, 5, 6]]


def test_pad_sequences_keras_docstring():
    np.testing.assert_array_equal(pad_sequences(SEQUENCES), [[0, 0, 1], [0, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(pad_sequences(SEQUENCES, value=-1), [[-1, -1, 1], [-1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(pad_sequences(SEQUENCES, padding="post"), [[1, 0, 0], [2, 3, 0], [4, 5, 6]])
    np.testing.assert_array_equal(pad_sequences(SEQUENCES, maxlen=2), [[0, 1], [2, 3], [5, 6]])
    assert pad_sequences(SEQUENCES).dtype == np.int32


@pytest.mark.parametrize("padding", ["pre", "post"])
@pytest.mark.parametrize("truncating", ["pre", "post"])
@pytest.mark.parametrize("maxlen", [None, 0, 1, 2, 5])
@pytest.mark.parametrize("sequences", [SEQUENCES, [[], [1, 2], []], [[], []], ((7, 8), (9,)),
                                       [np.array([1, 2, 3]), np.array([4])], np.arange(6).reshape(2, 3)])
def test_pad_sequences_matches_reference(sequences, maxlen, padding, truncating):
    length = max((len(s) for s in sequences), default=0) if maxlen is None else maxlen
    got = pad_sequences(sequences, maxlen=maxlen, padding=padding, truncating=truncating, value=-7)
    np.testing.assert_array_equal(got, pad_reference(sequences, length, padding, truncating, -7))
    assert got.shape == (len(sequences), length) and got.dtype == np.int32


@pytest.mark.parametrize("padding", ["pre", "post"])
@pytest.mark.parametrize("truncating", ["pre", "post"])
def test_pad_sequences_of_vectors(padding, truncating):
    sequences = [np.ones((2, 3)), np.zeros((0, 3)), np.arange(12).reshape(4, 3)]
    got = pad_sequences(sequences, maxlen=3, padding=padding, truncating=truncating, dtype="float32", value=-1.0)
    assert got.shape == (3, 3, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got, pad_reference(sequences, 3, padding, truncating, -1.0, "float32", (3,)))
    # Lists of lists, and a first sequence that is empty (the samples' shape comes from the next).
    np.testing.assert_array_equal(pad_sequences([[[1, 2]], [[3, 4], [5, 6]]]), [[[0, 0], [1, 2]], [[3, 4], [5, 6]]])
    np.testing.assert_array_equal(pad_sequences([[], [[1, 2], [3, 4]], [[5, 6]]], padding="post"),
                                  [[[0, 0], [0, 0]], [[1, 2], [3, 4]], [[5, 6], [0, 0]]])


def test_pad_sequences_dtypes_and_strings():
    np.testing.assert_array_equal(pad_sequences([[0.5, 1.25], [2.5]], dtype="float32", value=-1.5),
                                  np.array([[0.5, 1.25], [-1.5, 2.5]], np.float32))
    np.testing.assert_array_equal(pad_sequences([[1.7, -2.3]]), [[1, -2]])  # cast as numpy casts, as Keras
    assert pad_sequences([[1, 2], [3]], dtype=np.float64).dtype == np.float64
    got = pad_sequences([["a", "bb"], ["c"]], dtype=object, value="x")
    assert got.dtype == object and got.tolist() == [["a", "bb"], ["x", "c"]]
    assert pad_sequences([["ab", "c"], ["d"]], dtype="<U3", value="pad").tolist() == [["ab", "c"], ["pad", "d"]]
    assert pad_sequences([["ab"], []], dtype="<U4", value=0).tolist() == [["ab"], ["0"]]
    assert pad_sequences([], maxlen=3).shape == (0, 3)


@pytest.mark.parametrize("call,error,message", [
    (lambda: pad_sequences([]), ValueError, r"sequences is empty and maxlen is None"),
    (lambda: pad_sequences([[1]], value="x"), ValueError, r"value 'x' is a str but dtype is int32: pass dtype=object"),
    (lambda: pad_sequences([[1]], dtype="float32", value="x"), ValueError, r"value 'x' is a str but dtype is float32"),
    (lambda: pad_sequences([[1]], padding="middle"), ValueError, r"padding must be one of 'pre', 'post', got 'middle'"),
    (lambda: pad_sequences([[], []], padding=None), ValueError, r"padding must be one of 'pre', 'post', got None"),
    (lambda: pad_sequences([[1, 2]], truncating="both"), ValueError,
     r"truncating must be one of 'pre', 'post', got 'both'"),
    (lambda: pad_sequences([[1], 2]), ValueError, r"sequences\[1\] is int 2, which has no length"),
    (lambda: pad_sequences([None]), ValueError, r"sequences\[0\] is NoneType None, which has no length"),
    (lambda: pad_sequences([{1: 2}]), ValueError, r"sequences\[0\] \(dict\) cannot be sliced"),
    (lambda: pad_sequences(["abc"], dtype=object), ValueError, r"sequences\[0\] is str 'abc', not a sequence of steps"),
    (lambda: pad_sequences(iter([[1], [2]])), ValueError, r"sequences must be a list of sequences .*got list_iterator"),
    (lambda: pad_sequences(5), ValueError, r"sequences must be a list of sequences .*got int"),
    (lambda: pad_sequences([[[1, 2]], [[3, 4, 5]]]), ValueError,
     r"sequences\[1\] has samples of shape \(3,\), but the first non-empty sequence's have shape \(2,\)"),
    (lambda: pad_sequences([[1], [[2, 3]]]), ValueError, r"sequences\[1\] has samples of shape \(2,\)"),
    (lambda: pad_sequences([[1, [2, 3]]]), ValueError, r"sequences\[0\] cannot be made an array"),
    (lambda: pad_sequences([["a"]]), ValueError, r"sequences\[0\] cannot be made an array of dtype int32"),
    (lambda: pad_sequences([[1]], maxlen=-1), ValueError, r"maxlen must be >= 0, got -1"),
    (lambda: pad_sequences([[1]], maxlen=2.0), TypeError, r"maxlen must be an integer, got 2\.0"),
    (lambda: pad_sequences([[1]], dtype="no such type"), TypeError,
     r"dtype must be a numpy dtype or its name, got 'no such type'"),
    (lambda: pad_sequences([[1]], value=None), ValueError, r"value None cannot fill an array of dtype int32"),
])
def test_pad_sequences_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


# -- set_random_seed ------------------------------------------------------------------------------
@pytest.fixture
def restore_seeds():
    state = random.getstate(), np.random.get_state(), clnet_model._global_seed
    yield
    random.setstate(state[0])
    np.random.set_state(state[1])
    clnet_model._global_seed = state[2]


def test_set_random_seed(restore_seeds):
    set_random_seed(42)
    got = random.random(), np.random.rand()
    random.seed(42)
    np.random.seed(42)
    assert got == (random.random(), np.random.rand())
    assert clnet_model._global_seed == 42  # clnet.set_seed: models made afterwards use it
    set_random_seed(np.int64(2**32 - 1))
    assert clnet_model._global_seed == 2**32 - 1


@pytest.mark.parametrize("seed,error,message", [
    (-1, ValueError, r"seed must be >= 0, got -1"),
    (2**32, ValueError, r"seed must be <= 4294967295, got 4294967296"),
    (1.0, TypeError, r"seed must be an integer, got 1\.0 \(of type float\)"),
    ("3", TypeError, r"seed must be an integer, got '3'"),
    (True, TypeError, r"seed must be an integer, got True"),
    (None, TypeError, r"seed must be an integer, got None"),
])
def test_set_random_seed_errors(restore_seeds, seed, error, message):
    set_random_seed(7)
    before = random.getstate(), np.random.get_state()[1].copy()
    with pytest.raises(error, match=message):
        set_random_seed(seed)
    # Nothing was seeded: every generator is as it was.
    assert random.getstate() == before[0] and np.array_equal(np.random.get_state()[1], before[1])
    assert clnet_model._global_seed == 7


def test_type_errors_are_value_errors_as_in_keras(restore_seeds):
    # Keras raises ValueError for a non-integer seed; code catching that still catches ours.
    with pytest.raises(ValueError):
        set_random_seed(1.5)


# -- timeseries_dataset_from_array ----------------------------------------------------------------
def windows_reference(data, targets, length, stride=1, rate=1, batch_size=128, start=0, end=None):
    """Keras's windows, one at a time: window j starts at start + j*stride, holds every rate-th
    step of the next length*rate, must end before `end`, and is paired with targets[its start]."""
    end = len(data) if end is None else end
    xs, ys = [], []
    first = start
    while first + (length - 1) * rate < end and (targets is None or first < len(targets)):
        xs.append(np.stack([data[first + k * rate] for k in range(length)]))
        if targets is not None:
            ys.append(targets[first])
        first += stride
    if batch_size is None:  # single windows
        return xs if targets is None else list(zip(xs, ys))
    groups = [slice(b, b + batch_size) for b in range(0, len(xs), batch_size)]
    if targets is None:
        return [np.stack(xs[g]) for g in groups]
    return [(np.stack(xs[g]), np.stack(ys[g])) for g in groups]


def assert_batches_equal(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g, e = (g, e) if isinstance(e, tuple) else ((g,), (e,))
        assert isinstance(g, tuple) and len(g) == len(e)
        for a, b in zip(g, e):
            assert isinstance(a, np.ndarray) and a.dtype == np.asarray(b).dtype
            np.testing.assert_array_equal(a, b)


def served(dataset):
    assert isinstance(dataset, PyDataset) and is_stream(dataset)
    return [dataset[i] for i in range(len(dataset))]


DATA = np.arange(99)
VECTORS = np.arange(300, dtype=np.float32).reshape(100, 3)
VECTOR_TARGETS = np.arange(200).reshape(100, 2) * 10


@pytest.mark.parametrize("data,targets,kwargs", [
    (DATA, None, dict(sequence_length=10, sequence_stride=3, sampling_rate=2, batch_size=8)),
    (DATA, DATA * 10, dict(sequence_length=10, sequence_stride=3, sampling_rate=2, batch_size=5)),
    (VECTORS, VECTOR_TARGETS, dict(sequence_length=5, batch_size=7)),
    (VECTORS, VECTOR_TARGETS, dict(sequence_length=4, sequence_stride=2, start_index=5, end_index=50, batch_size=6)),
    (DATA, DATA + 1000, dict(sequence_length=3, start_index=90, batch_size=4)),
    (DATA, DATA + 1000, dict(sequence_length=3, end_index=10, batch_size=4)),
    (DATA, np.arange(20), dict(sequence_length=5, batch_size=6)),           # fewer targets: fewer windows
    (np.arange(30), np.arange(100), dict(sequence_length=5, batch_size=8)),
    (DATA, -DATA, dict(sequence_length=6, sequence_stride=4, sampling_rate=3, batch_size=9)),
    (np.arange(10), None, dict(sequence_length=10, batch_size=3)),          # exactly one window
    (np.arange(10), np.arange(10), dict(sequence_length=20)),              # no window fits
    (np.arange(20, dtype=np.float16), np.arange(20, dtype=np.uint8), dict(sequence_length=4, batch_size=32)),
    (np.arange(8), np.arange(8) % 2 == 0, dict(sequence_length=3, batch_size=4)),
    (VECTORS[:12], VECTOR_TARGETS[:12], dict(sequence_length=3, sequence_stride=2, batch_size=None)),
    (DATA[:10], None, dict(sequence_length=4, batch_size=None)),
])
def test_timeseries_windows(data, targets, kwargs):
    expected = windows_reference(data, targets, kwargs["sequence_length"], kwargs.get("sequence_stride", 1),
                                 kwargs.get("sampling_rate", 1), kwargs.get("batch_size", 128),
                                 kwargs.get("start_index", 0), kwargs.get("end_index"))
    dataset = timeseries_dataset_from_array(data, targets, **kwargs)
    assert_batches_equal(served(dataset), expected)
    assert_batches_equal(list(dataset), expected)  # iterating


def test_timeseries_keras_docstring_examples():
    # Example 1: windows of 10 steps 2 apart, starting every 3 steps; the last starts at 78.
    batches = served(timeseries_dataset_from_array(DATA, None, 10, sequence_stride=3, sampling_rate=2, batch_size=8))
    np.testing.assert_array_equal(batches[0][:3], [np.arange(0, 19, 2), np.arange(3, 22, 2), np.arange(6, 25, 2)])
    np.testing.assert_array_equal(batches[-1][-1], np.arange(78, 97, 2))
    assert [len(b) for b in batches] == [8, 8, 8, 3]  # 27 windows: a short last batch
    # Example 2: the past 10 steps predict the next one.
    series = np.arange(50.0)
    x, y = timeseries_dataset_from_array(series[:-10], series[10:], sequence_length=10)[0]
    np.testing.assert_array_equal(x[0], series[:10])
    assert y[0] == series[10] and len(x) == len(y) == 31


def test_timeseries_list_data_and_memmap(tmp_path):
    x, y = timeseries_dataset_from_array([[1, 2], [3, 4], [5, 6], [7, 8]], [0, 1, 2, 3], 2, batch_size=2)[1]
    np.testing.assert_array_equal(x, [[[5, 6], [7, 8]]])
    np.testing.assert_array_equal(y, [2])
    stored = np.lib.format.open_memmap(tmp_path / "series.npy", "w+", np.float32, (40, 2))
    stored[:] = VECTORS[:40, :2]
    dataset = timeseries_dataset_from_array(stored, None, 5, sequence_stride=3, batch_size=4)
    assert dataset.data is stored  # not read into memory whole
    assert_batches_equal(served(dataset), windows_reference(VECTORS[:40, :2], None, 5, stride=3, batch_size=4))


def test_timeseries_shuffle():
    def windows(seed):
        dataset = timeseries_dataset_from_array(DATA, DATA * 10, 7, sequence_stride=2, sampling_rate=2,
                                                batch_size=5, shuffle=True, seed=seed)
        batches = served(dataset)
        assert [len(b[0]) for b in batches] == [5] * 8 + [4]  # 44 windows
        return np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])

    x, y = windows(7)
    np.testing.assert_array_equal(y, x[:, 0] * 10)  # each window keeps its own target
    # The same windows as without shuffling, in the order of Keras's seeded shuffle of their starts
    # (np.random.RandomState(seed).shuffle). Keras's tf.data pipeline then shuffles once more
    # within a buffer, which clnet does not: that order is not Keras's and is not tested.
    starts = np.arange(0, 99 - 12, 2)
    np.random.RandomState(7).shuffle(starts)
    np.testing.assert_array_equal(x[:, 0], starts)
    np.testing.assert_array_equal(x, starts[:, None] + np.arange(0, 14, 2))
    again = windows(7)  # reproducible
    assert np.array_equal(again[0], x) and np.array_equal(again[1], y)
    assert not np.array_equal(windows(8)[0], x)


def test_timeseries_shuffle_without_seed_follows_numpy(restore_seeds):
    def order():
        set_random_seed(5)
        return [w[0] for w in timeseries_dataset_from_array(np.arange(40), None, 3, batch_size=None, shuffle=True)]

    first = order()
    assert first == order() and sorted(first) == list(range(38)) and first != list(range(38))


def test_timeseries_indexing():
    dataset = timeseries_dataset_from_array(DATA, None, 10, batch_size=8)
    assert len(dataset) == 12
    np.testing.assert_array_equal(dataset[-1], dataset[11])
    np.testing.assert_array_equal(dataset[np.int64(2)], dataset[2])
    with pytest.raises(IndexError, match="index 12 is out of range for a data set of 12 batches"):
        dataset[12]
    with pytest.raises(TypeError, match=r"index must be an integer, got 1\.0"):
        dataset[1.0]
    assert len(timeseries_dataset_from_array(np.arange(10), np.arange(10), 20)) == 0


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(start_index=-1), ValueError, r"start_index must be in \[0, len\(data\)\) = \[0, 99\), got -1"),
    (dict(start_index=99), ValueError, r"start_index must be in \[0, len\(data\)\) = \[0, 99\), got 99"),
    (dict(start_index=1.5), TypeError, r"start_index must be an integer, got 1\.5"),
    (dict(end_index=99), ValueError, r"end_index must be above start_index \(0\) and below len\(data\) \(99\), got 99"),
    (dict(start_index=10, end_index=10), ValueError, r"end_index must be above start_index \(10\).*got 10"),
    (dict(end_index=0), ValueError, r"end_index must be above start_index \(0\).*got 0"),
    (dict(end_index=-5), ValueError, r"end_index must be above .*got -5"),
    (dict(end_index="9"), TypeError, r"end_index must be an integer, got '9'"),
    (dict(sampling_rate=0), ValueError, r"sampling_rate must be in \[1, len\(data\)\) = \[1, 99\), got 0"),
    (dict(sampling_rate=99), ValueError, r"sampling_rate must be in \[1, len\(data\)\) = \[1, 99\), got 99"),
    (dict(sampling_rate=2.0), TypeError, r"sampling_rate must be an integer, got 2\.0"),
    (dict(sequence_stride=0), ValueError, r"sequence_stride must be in \[1, len\(data\)\) = \[1, 99\), got 0"),
    (dict(sequence_stride=99), ValueError, r"sequence_stride must be in .*got 99"),
    (dict(sequence_length=0), ValueError, r"sequence_length must be >= 1, got 0"),
    (dict(sequence_length=None), TypeError, r"sequence_length must be an integer, got None"),
    (dict(batch_size=0), ValueError, r"batch_size must be >= 1, got 0"),
    (dict(batch_size=True), TypeError, r"batch_size must be an integer, got True"),
    (dict(shuffle=True, seed=-3), ValueError, r"seed must be >= 0, got -3"),
    (dict(shuffle=True, seed=0.5), TypeError, r"seed must be an integer, got 0\.5"),
    (dict(data=np.zeros((0, 2))), ValueError, r"data has no time steps \(shape \(0, 2\)\)"),
    (dict(data=np.float32(3)), TypeError, r"data must be an array whose axis 0 is time, got float32 .*3\.0"),
    (dict(data=[[1, 2], [3]]), ValueError, r"data must be an array whose axis 0 is time, got list that is not one"),
    (dict(targets=5), TypeError, r"targets must be an array whose axis 0 is time, got int 5"),
])
def test_timeseries_errors(kwargs, error, message):
    arguments = dict(data=DATA, targets=None, sequence_length=3) | kwargs
    with pytest.raises(error, match=message):
        timeseries_dataset_from_array(**arguments)


# -- boolean inputs and targets -------------------------------------------------------------------
def test_as_numeric_accepts_bools_as_0_1():
    got = as_numeric(np.array([[True, False], [False, True]]), "x")
    assert np.issubdtype(got.dtype, np.integer)
    np.testing.assert_array_equal(got, [[1, 0], [0, 1]])
    np.testing.assert_array_equal(as_numeric([True, False], "y"), [1, 0])
    np.testing.assert_array_equal(as_numeric(np.True_, "y"), 1)
    flags = np.zeros((70, 4), bool)
    flags[3, 1] = True
    assert checked(flags, "x") is flags  # a model's x: checked block by block, then cast to floatx


def test_bool_targets_reach_the_losses():
    binary = losses_base.get("binary_crossentropy").prepare_targets(np.array([True, False]), (1,), np.float32)
    np.testing.assert_array_equal(binary, [[1], [0]])
    sparse = losses_base.get("sparse_categorical_crossentropy").prepare_targets(np.array([True, False]), (2,),
                                                                                np.float32)
    np.testing.assert_array_equal(sparse, [[1], [0]])


@pytest.mark.parametrize("value,error,message", [
    (np.array(["a", "b"]), TypeError, r"x must hold integers or floats, got dtype <U1"),
    (np.zeros(2, dtype=object), TypeError, r"x must hold integers or floats, got dtype object"),
    (np.array([1.0, np.nan]), ValueError, r"x contains 1 NaN or infinite value\(s\), the first at index \(1,\)"),
])
def test_as_numeric_still_refuses(value, error, message):
    with pytest.raises(error, match=message):
        as_numeric(value, "x")
