"""IMDB movie reviews, labelled by sentiment (1 positive, 0 negative), as lists of word indices.

`load_data()` and `get_word_index()` return the same values as `keras.datasets.imdb`'s, read
from the same files (Keras's imdb.npz and imdb_word_index.json), which they also find where
Keras keeps its downloads. See mnist.load_data for where files are looked for.
"""
import io
import json
import pickle
import warnings
import zipfile

import numpy as np

from .files import DatasetError
from .mnist import get_file

# File name -> (hash algorithm, hex digest), as in keras/src/datasets/imdb.py: Keras checks
# the word index by MD5, and no SHA-256 of it is published.
FILES = {
    "imdb.npz": ("sha256", "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f"),
    "imdb_word_index.json": ("md5", "bfafd718b763782e994055a2d397834f"),
}


def load_data(path="imdb.npz", num_words=None, skip_top=0, maxlen=None, seed=113,
              start_char=1, oov_char=2, index_from=3, *, directory=None, download=True,
              origin=None, **kwargs):
    """Return ((x_train, y_train), (x_test, y_test)), processed as Keras does.

    x_*: 1-D object arrays of lists of ints. Each review is shuffled with
    np.random.RandomState(seed) (train, then test, from one generator), gets `start_char`
    prepended and `index_from` added to its word indices; reviews of `maxlen` words or more
    are dropped; words outside [skip_top, num_words) become `oov_char` (or are dropped if it
    is None). y_*: the int labels, in the same order.
    """
    if kwargs:
        # Keras 3 accepts and ignores them too; a warning, so that a typo does not pass unseen.
        warnings.warn(f"imdb.load_data ignores {sorted(kwargs)}", stacklevel=2)
    file = get_file(path, "imdb.npz", FILES["imdb.npz"],
                    directory=directory, download=download, origin=origin)
    arrays = _load_npz(file)
    try:
        x_train, labels_train = arrays["x_train"], arrays["y_train"]
        x_test, labels_test = arrays["x_test"], arrays["y_test"]
    except KeyError as e:
        raise DatasetError(f"{file}: no array {e}") from e

    rng = np.random.RandomState(seed)
    indices = np.arange(len(x_train))
    rng.shuffle(indices)
    x_train, labels_train = x_train[indices], labels_train[indices]
    indices = np.arange(len(x_test))
    rng.shuffle(indices)
    x_test, labels_test = x_test[indices], labels_test[indices]

    if start_char is not None:
        x_train = [[start_char] + [w + index_from for w in x] for x in x_train]
        x_test = [[start_char] + [w + index_from for w in x] for x in x_test]
    else:
        x_train = [[w + index_from for w in x] for x in x_train]
        x_test = [[w + index_from for w in x] for x in x_test]

    if maxlen:
        x_train, labels_train = _shorter_than(maxlen, x_train, labels_train)
        x_test, labels_test = _shorter_than(maxlen, x_test, labels_test)
        if not x_train or not x_test:
            raise ValueError(
                f"After filtering for sequences shorter than maxlen={maxlen}, "
                "no sequence was kept. Increase maxlen."
            )

    xs = x_train + x_test
    labels = np.concatenate([labels_train, labels_test])
    if not num_words:
        # As Keras: the largest index itself is then out of range, and becomes oov_char.
        num_words = max(max(x) for x in xs)
    if oov_char is not None:
        xs = [[w if skip_top <= w < num_words else oov_char for w in x] for x in xs]
    else:
        xs = [[w for w in x if skip_top <= w < num_words] for x in xs]

    n = len(x_train)
    return (_object_array(xs[:n]), labels[:n]), (_object_array(xs[n:]), labels[n:])


def get_word_index(path="imdb_word_index.json", *, directory=None, download=True, origin=None):
    """Dict word -> index; the index in load_data's sequences is this plus `index_from`."""
    file = get_file(path, "imdb_word_index.json", FILES["imdb_word_index.json"],
                    directory=directory, download=download, origin=origin)
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise DatasetError(f"{file}: cannot read the word index: {e}") from e


def _shorter_than(maxlen, seqs, labels):
    kept = [i for i, x in enumerate(seqs) if len(x) < maxlen]
    return [seqs[i] for i in kept], [labels[i] for i in kept]


def _object_array(lists):
    # np.array(lists, dtype=object) would make a 2-D array when all reviews have one length.
    out = np.empty(len(lists), dtype=object)
    for i, x in enumerate(lists):
        out[i] = x
    return out


# The reviews are ragged, so the file stores them as pickled object arrays. Rebuilding those
# needs only these globals; refusing all others keeps a tampered file from running code, which
# np.load(allow_pickle=True) would allow. Both module names: numpy 1 wrote numpy.core.
_RECONSTRUCT = np.empty(0).__reduce__()[0]
_PICKLE_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return _PICKLE_GLOBALS[module, name]


def _load_npz(file):
    """{name: array} of an .npz file, unpickling nothing but numpy arrays."""
    arrays = {}
    try:
        with zipfile.ZipFile(file) as archive:
            for member in archive.namelist():
                if member.endswith(".npy"):
                    arrays[member.removesuffix(".npy")] = _read_npy(io.BytesIO(archive.read(member)))
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as e:
        raise DatasetError(f"{file}: cannot read IMDB arrays: {e}") from e
    return arrays


def _read_npy(f):
    fmt = np.lib.format
    major, _ = fmt.read_magic(f)
    # Format 3.0 differs from 2.0 only in the header's text encoding, ASCII here either way.
    _, _, dtype = (fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0)(f)
    if not dtype.hasobject:
        f.seek(0)
        return fmt.read_array(f, allow_pickle=False)
    array = _ArrayUnpickler(f).load()
    if not isinstance(array, np.ndarray):
        raise ValueError(f"expected a pickled array, found {type(array).__name__}")
    return array
