"""MNIST handwritten digits: 28x28 grayscale images of the digits 0-9.

`load_data()` returns the same arrays as `keras.datasets.mnist.load_data()`, read from the
same file (Keras's mnist.npz), which it also finds where Keras keeps its downloads.
"""
import hashlib
import http.client
import os
import urllib.request
import zipfile
from pathlib import Path

import numpy as np

from ..cache import write_atomically
from . import files
from .files import DatasetError

# Where keras.utils.get_file downloads the built-in datasets from (Keras 3.15.1).
KERAS_ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"

# File name -> (hash algorithm, hex digest), as in keras/src/datasets/mnist.py.
FILES = {"mnist.npz": ("sha256", "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1")}


def load_data(path="mnist.npz", *, directory=None, download=True, origin=None):
    """Return ((x_train, y_train), (x_test, y_test)): uint8 arrays of shapes (60000, 28, 28),
    (60000,), (10000, 28, 28) and (10000,).

    `path` is the file name, as in Keras. It is looked for in `directory`, $CLNET_DATA, clnet's
    cache and Keras's cache ($KERAS_HOME/datasets, else ~/.keras/datasets), in that order; if
    none holds it and `download` is true, it is downloaded from `origin` (default
    $CLNET_DATA_URL, else Keras's origin) into clnet's cache.
    """
    file = get_file(path, "mnist.npz", FILES["mnist.npz"],
                    directory=directory, download=download, origin=origin)
    try:
        with np.load(file, allow_pickle=False) as f:
            x_train, y_train = f["x_train"], f["y_train"]
            x_test, y_test = f["x_test"], f["y_test"]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise DatasetError(f"{file}: cannot read MNIST arrays: {e}") from e
    return (x_train, y_train), (x_test, y_test)


def get_file(fname, remote_name, checksum, *, directory=None, download=True, origin=None) -> Path:
    """The local copy of a dataset file that Keras downloads from KERAS_ORIGIN + `remote_name`
    and caches as `fname`; shared with the imdb module.

    A copy in `directory` or $CLNET_DATA whose checksum is wrong is an error, since the user
    named that place; a wrong copy in a cache is passed over, as Keras re-downloads it.
    """
    if os.sep in fname or (os.altsep and os.altsep in fname):
        raise ValueError(
            f"`path` is a file name, as in Keras; pass its folder as directory=. Received: {fname}"
        )
    algorithm, expected = checksum
    statuses = []
    for label, folder, explicit in _places(directory):
        candidate = folder / fname
        if not candidate.is_file():
            statuses.append(f"  {candidate} ({label}): missing")
            continue
        received = _digest(candidate, algorithm)
        if received == expected:
            return candidate
        mismatch = f"checksum mismatch: expected {algorithm} {expected}, received {received}"
        if explicit:
            raise DatasetError(f"{candidate}: {mismatch}")
        statuses.append(f"  {candidate} ({label}): {mismatch}")

    if download:
        base = origin or os.environ.get("CLNET_DATA_URL") or KERAS_ORIGIN
        url = base.rstrip("/") + "/" + remote_name
        dest = files.cache_dir() / "datasets" / fname
        try:
            if algorithm == "sha256":
                return files.download(url, dest, expected)
            return _download_small(url, dest, algorithm, expected)
        except DatasetError as e:
            statuses.append(f"Download failed: {e}")
    else:
        statuses.append("Download not attempted (download=False).")
    raise DatasetError("\n".join([
        f"{fname} not found. Looked in:", *statuses,
        "To fix, do one of:",
        f"  - put {remote_name} in a folder and set CLNET_DATA to it, or pass directory=",
        "  - allow the download (download=True) with network access, or set CLNET_DATA_URL to a mirror",
    ]))


def keras_cache_dirs():
    """Where keras.utils.get_file keeps datasets; /tmp/.keras is Keras's fallback when it
    cannot write to its home."""
    if "KERAS_HOME" in os.environ:
        home = Path(os.path.expanduser(os.environ["KERAS_HOME"]))
    else:
        home = Path.home() / ".keras"
    dirs = [home / "datasets"]
    if not os.access(home, os.W_OK):
        dirs.append(Path("/tmp/.keras/datasets"))
    return dirs


def _places(directory):
    """(label, folder, explicit) triples, in the order they are tried."""
    places = []
    if directory is not None:
        places.append(("directory=", Path(directory), True))
    if os.environ.get("CLNET_DATA"):
        places.append(("$CLNET_DATA", Path(os.environ["CLNET_DATA"]), True))
    places.append(("clnet cache", files.cache_dir() / "datasets", False))
    places += [("Keras cache", folder, False) for folder in keras_cache_dirs()]
    return places


def _digest(path, algorithm) -> str:
    if algorithm == "sha256":
        return files.sha256_of(path)
    with open(path, "rb") as f:
        return hashlib.new(algorithm, f.read()).hexdigest()


def _download_small(url, dest, algorithm, expected, timeout=30) -> Path:
    """files.download for a file Keras checks by another hash than SHA-256 (the IMDB word
    index, by MD5): small enough to check in memory before it is written."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read()
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise DatasetError(f"could not download {url}: {e}") from e
    received = hashlib.new(algorithm, data).hexdigest()
    if received != expected:
        raise DatasetError(
            f"checksum mismatch for {url}: expected {algorithm} {expected}, received {received}"
        )
    write_atomically(dest, data)
    return dest
