"""Tests for clnet.datasets.mnist and .imdb, the Keras-file datasets: where files are found,
checksummed downloads from a local server, and IMDB processing checked against Keras's rules."""
import fractions
import hashlib
import io
import json
import pickle
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest

import clnet
from clnet.datasets import imdb, mnist
from clnet.datasets.files import DatasetError

KERAS_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def ragged(lists):
    out = np.empty(len(lists), dtype=object)
    for i, x in enumerate(lists):  # item by item: equal-length lists would make a 2-D array
        out[i] = list(x)
    return out


def synthetic_mnist():
    rng = np.random.default_rng(0)
    return {
        "x_train": rng.integers(0, 256, (6, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, 6, dtype=np.uint8),
        "x_test": rng.integers(0, 256, (4, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, 4, dtype=np.uint8),
    }


def synthetic_imdb():
    """Reviews of 1 to 12 raw word ranks in [1, 40), as Keras's file holds them (before
    start_char and index_from); plain Python ints in ragged object arrays, int64 labels."""
    rng = np.random.default_rng(1)

    def reviews(n):
        return ragged([rng.integers(1, 40, rng.integers(1, 13)).tolist() for _ in range(n)])

    return {
        "x_train": reviews(20), "y_train": rng.integers(0, 2, 20),
        "x_test": reviews(15), "y_test": rng.integers(0, 2, 15),
    }


WORD_INDEX = {"the": 1, "and": 2, "a": 3, "film": 19}


@pytest.fixture
def data(monkeypatch, tmp_path):
    """Synthetic files, the modules' checksum tables made to expect them, and an environment
    in which clnet's cache, $CLNET_DATA and Keras's cache are all empty folders of tmp_path."""
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    monkeypatch.delenv("CLNET_DATA", raising=False)
    monkeypatch.delenv("CLNET_DATA_URL", raising=False)
    (tmp_path / "keras").mkdir()  # writable, so Keras's /tmp/.keras fallback is not consulted
    files = {
        "mnist.npz": npz_bytes(**synthetic_mnist()),
        "imdb.npz": npz_bytes(**synthetic_imdb()),
        "imdb_word_index.json": json.dumps(WORD_INDEX).encode(),
    }
    monkeypatch.setattr(mnist, "FILES", {
        "mnist.npz": ("sha256", hashlib.sha256(files["mnist.npz"]).hexdigest()),
    })
    monkeypatch.setattr(imdb, "FILES", {
        "imdb.npz": ("sha256", hashlib.sha256(files["imdb.npz"]).hexdigest()),
        "imdb_word_index.json": ("md5", hashlib.md5(files["imdb_word_index.json"]).hexdigest()),
    })
    return files


def cache_of(tmp_path) -> Path:
    return tmp_path / "cache" / "datasets"


def files_in(directory: Path):
    return sorted(p.name for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def write(folder: Path, files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in files.items():
        (folder / name).write_bytes(body)


def assert_mnist(loaded):
    expected = synthetic_mnist()
    (x_train, y_train), (x_test, y_test) = loaded
    for got, name in [(x_train, "x_train"), (y_train, "y_train"), (x_test, "x_test"), (y_test, "y_test")]:
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, expected[name])
    assert x_train.shape == (6, 28, 28) and y_train.shape == (6,)


def test_keras_constants():
    """The origin and hashes of keras/src/datasets/{mnist,imdb}.py in Keras 3.15.1."""
    assert mnist.KERAS_ORIGIN == KERAS_URL
    assert mnist.FILES == {
        "mnist.npz": ("sha256", "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"),
    }
    assert imdb.FILES == {
        "imdb.npz": ("sha256", "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f"),
        "imdb_word_index.json": ("md5", "bfafd718b763782e994055a2d397834f"),
    }
    assert clnet.datasets.mnist is mnist and clnet.datasets.imdb is imdb


def test_mnist_download_then_cache(data, server, tmp_path):
    server.files = data
    assert_mnist(mnist.load_data(origin=server.url))
    assert server.requests == ["/mirror/mnist.npz"]
    assert files_in(cache_of(tmp_path)) == ["mnist.npz"]
    assert files_in(tmp_path / "keras") == [], "Keras's cache is only read"

    assert_mnist(clnet.datasets.mnist.load_data(origin=server.url))
    assert len(server.requests) == 1, "the second call must read clnet's cache"


def test_origin_from_clnet_data_url(data, server, monkeypatch):
    server.files = data
    monkeypatch.setenv("CLNET_DATA_URL", server.url.rstrip("/"))
    imdb.load_data()
    assert imdb.get_word_index() == WORD_INDEX
    assert server.requests == ["/mirror/imdb.npz", "/mirror/imdb_word_index.json"]


@pytest.mark.parametrize("load, name", [
    (mnist.load_data, "mnist.npz"),
    (imdb.load_data, "imdb.npz"),
    (imdb.get_word_index, "imdb_word_index.json"),
])
def test_default_origin_is_keras(data, monkeypatch, load, name):
    asked = []

    def offline(url, timeout):
        asked.append(url)
        raise OSError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DatasetError, match="could not download"):
        load()
    assert asked == [KERAS_URL + name]


@pytest.mark.parametrize("keras_home", ["env", "default"])
def test_keras_cache_is_used_without_download(data, server, tmp_path, monkeypatch, keras_home):
    if keras_home == "env":
        folder = tmp_path / "keras" / "datasets"
    else:  # no $KERAS_HOME: ~/.keras
        monkeypatch.delenv("KERAS_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        (tmp_path / "home" / ".keras").mkdir(parents=True)
        folder = tmp_path / "home" / ".keras" / "datasets"
    write(folder, data)
    assert_mnist(mnist.load_data(origin=server.url))
    (x_train, _), _ = imdb.load_data(origin=server.url)
    assert len(x_train) == 20
    assert imdb.get_word_index(origin=server.url) == WORD_INDEX
    assert server.requests == []
    assert files_in(cache_of(tmp_path)) == [], "nothing is copied out of Keras's cache"


def test_lookup_order(data, server, tmp_path, monkeypatch):
    """directory=, then $CLNET_DATA, then clnet's cache, then Keras's: each hides the next."""
    places = [tmp_path / "mine", tmp_path / "env", cache_of(tmp_path), tmp_path / "keras" / "datasets"]
    monkeypatch.setenv("CLNET_DATA", str(places[1]))
    for i, folder in enumerate(places):
        # A distinct word index per place, each made the expected one while it is tested.
        write(folder, {"imdb_word_index.json": json.dumps({"place": i}).encode()})
    for i, folder in enumerate(places):
        body = (folder / "imdb_word_index.json").read_bytes()
        monkeypatch.setitem(imdb.FILES, "imdb_word_index.json", ("md5", hashlib.md5(body).hexdigest()))
        directory = places[0] if i == 0 else None
        assert imdb.get_word_index(directory=directory, origin=server.url) == {"place": i}
        if i == 1:
            monkeypatch.delenv("CLNET_DATA")
    assert server.requests == []


def test_corrupt_download(data, server, tmp_path):
    served = {"mnist.npz": b"not the file", "imdb_word_index.json": b"{}"}
    server.files = served
    for load, name, algorithm in [(mnist.load_data, "mnist.npz", "sha256"),
                                  (imdb.get_word_index, "imdb_word_index.json", "md5")]:
        expected = (mnist.FILES if name == "mnist.npz" else imdb.FILES)[name][1]
        with pytest.raises(DatasetError) as info:
            load(origin=server.url)
        message = str(info.value)
        assert f"checksum mismatch for {server.url}{name}" in message
        assert f"expected {algorithm} {expected}" in message
        assert f"received {hashlib.new(algorithm, served[name]).hexdigest()}" in message
    assert files_in(cache_of(tmp_path)) == [], "no bad file and no partial file is left"


def test_wrong_file_in_explicit_folder_is_an_error(data, server, tmp_path):
    write(tmp_path / "mine", {"mnist.npz": b"stale"})
    with pytest.raises(DatasetError, match="checksum mismatch") as info:
        mnist.load_data(directory=tmp_path / "mine", origin=server.url)
    assert str(tmp_path / "mine" / "mnist.npz") in str(info.value)
    assert server.requests == []


def test_wrong_file_in_cache_is_downloaded_again(data, server, tmp_path):
    server.files = data
    write(cache_of(tmp_path), {"mnist.npz": b"truncated"})
    write(tmp_path / "keras" / "datasets", {"mnist.npz": b"also stale"})
    assert_mnist(mnist.load_data(origin=server.url))
    assert server.requests == ["/mirror/mnist.npz"]
    assert (cache_of(tmp_path) / "mnist.npz").read_bytes() == data["mnist.npz"]
    assert (tmp_path / "keras" / "datasets" / "mnist.npz").read_bytes() == b"also stale"


def test_not_found_without_download(data, tmp_path):
    with pytest.raises(DatasetError) as info:
        mnist.load_data(download=False)
    message = str(info.value)
    for folder in [cache_of(tmp_path), tmp_path / "keras" / "datasets"]:
        assert f"{folder / 'mnist.npz'}" in message
    assert "download=False" in message and "CLNET_DATA" in message


def test_path_is_a_file_name_as_in_keras(data, server, tmp_path):
    server.files = data
    assert_mnist(mnist.load_data(path="digits.npz", origin=server.url))
    assert server.requests == ["/mirror/mnist.npz"]
    assert files_in(cache_of(tmp_path)) == ["digits.npz"]
    with pytest.raises(ValueError, match="directory="):
        mnist.load_data(path=str(tmp_path / "mnist.npz"))


def keras_rules(arrays, num_words=None, skip_top=0, maxlen=None, seed=113,
                start_char=1, oov_char=2, index_from=3):
    """Keras's documented IMDB processing, written independently with numpy."""
    rng = np.random.RandomState(seed)
    order_train = rng.permutation(len(arrays["x_train"]))  # same draws as arange + shuffle
    order_test = rng.permutation(len(arrays["x_test"]))
    parts = []
    for xs, ys, order in [(arrays["x_train"], arrays["y_train"], order_train),
                          (arrays["x_test"], arrays["y_test"], order_test)]:
        seqs = [np.asarray(xs[i], dtype=np.int64) + index_from for i in order]
        if start_char is not None:
            seqs = [np.concatenate([[start_char], s]) for s in seqs]
        labels = np.asarray(ys)[order]
        if maxlen:
            keep = np.array([len(s) < maxlen for s in seqs])
            seqs, labels = [s for s, k in zip(seqs, keep) if k], labels[keep]
        parts.append((seqs, labels))
    limit = num_words or max(int(s.max()) for seqs, _ in parts for s in seqs)
    result = []
    for seqs, labels in parts:
        inside = [(s >= skip_top) & (s < limit) for s in seqs]
        if oov_char is None:
            seqs = [s[m] for s, m in zip(seqs, inside)]
        else:
            seqs = [np.where(m, s, oov_char) for s, m in zip(seqs, inside)]
        result.append(([s.tolist() for s in seqs], labels))
    return result


@pytest.mark.parametrize("options", [
    {},
    {"num_words": 20},
    {"num_words": 25, "skip_top": 6},
    {"maxlen": 8},
    {"num_words": 15, "skip_top": 4, "maxlen": 10, "seed": 7},
    {"num_words": 20, "oov_char": None},
    {"start_char": None, "index_from": 0, "num_words": 30},
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
def test_imdb_processing_matches_keras_rules(data, server, options):
    server.files = data
    (x_train, y_train), (x_test, y_test) = imdb.load_data(origin=server.url, **options)
    expected = keras_rules(synthetic_imdb(), **options)
    for xs, ys, (want_x, want_y) in [(x_train, y_train, expected[0]), (x_test, y_test, expected[1])]:
        assert xs.dtype == object and xs.ndim == 1 and all(type(x) is list for x in xs)
        assert [x for x in xs] == want_x
        assert ys.dtype == np.int64
        np.testing.assert_array_equal(ys, want_y)
    if options.get("maxlen"):
        assert len(x_train) < 20 and max(map(len, x_train)) < options["maxlen"]
    else:
        assert len(x_train) == 20 and len(x_test) == 15


def test_imdb_one_review_by_hand(monkeypatch, data, server):
    """[0, 5, 9] with the defaults and num_words=10: start 1, each +3, 12 past the cut -> oov 2."""
    body = npz_bytes(x_train=ragged([[0, 5, 9]]), y_train=np.array([1]),
                     x_test=ragged([[4]]), y_test=np.array([0]))
    server.files = {"imdb.npz": body}
    monkeypatch.setitem(imdb.FILES, "imdb.npz", ("sha256", hashlib.sha256(body).hexdigest()))
    (x_train, y_train), (x_test, y_test) = imdb.load_data(num_words=10, origin=server.url)
    assert x_train.tolist() == [[1, 3, 8, 2]] and y_train.tolist() == [1]
    assert x_test.tolist() == [[1, 7]] and y_test.tolist() == [0]


def test_imdb_maxlen_keeping_nothing(data, server):
    server.files = data
    with pytest.raises(ValueError, match="no sequence was kept"):
        imdb.load_data(maxlen=1, origin=server.url)


def test_imdb_ignores_unknown_keywords_with_a_warning(data, server):
    server.files = data
    with pytest.warns(UserWarning, match="nb_words"):
        imdb.load_data(nb_words=5, origin=server.url)


def test_imdb_refuses_pickles_of_anything_but_arrays(monkeypatch, data, server, tmp_path):
    body = npz_bytes(x_train=ragged([[fractions.Fraction(1, 2)]]), y_train=np.array([0]),
                     x_test=ragged([[1]]), y_test=np.array([0]))
    write(tmp_path / "mine", {"imdb.npz": body})
    monkeypatch.setitem(imdb.FILES, "imdb.npz", ("sha256", hashlib.sha256(body).hexdigest()))
    with pytest.raises(DatasetError, match="refusing to load fractions.Fraction"):
        imdb.load_data(directory=tmp_path / "mine")


def test_imdb_reads_files_written_by_numpy_1(monkeypatch, data, tmp_path):
    """Keras's imdb.npz predates numpy 2, so its pickles name numpy.core.multiarray."""
    arrays = synthetic_imdb()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, array in arrays.items():
            npy = io.BytesIO()
            np.lib.format.write_array_header_1_0(npy, np.lib.format.header_data_from_array_1_0(array))
            if array.dtype.hasobject:
                # As numpy 1 wrote them: protocol 3, whose globals are newline-ended text, so
                # that renaming the module keeps the pickle valid.
                npy.write(pickle.dumps(array, protocol=3).replace(b"numpy._core.", b"numpy.core."))
            else:
                npy.write(array.tobytes())
            archive.writestr(f"{name}.npy", npy.getvalue())
    body = buffer.getvalue()
    assert b"numpy.core.multiarray" in body and b"numpy._core" not in body
    write(tmp_path / "mine", {"imdb.npz": body})
    monkeypatch.setitem(imdb.FILES, "imdb.npz", ("sha256", hashlib.sha256(body).hexdigest()))
    (x_train, _), _ = imdb.load_data(directory=tmp_path / "mine")
    assert x_train.tolist() == keras_rules(arrays)[0][0]
