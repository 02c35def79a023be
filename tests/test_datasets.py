"""Tests for clnet.datasets: local files, checksummed downloads from a local server, errors."""
import gzip
import hashlib
import socket
import struct
from pathlib import Path

import numpy as np
import pytest

from clnet.datasets import files, fashion_mnist
from clnet.datasets.files import DatasetError

NAMES = list(fashion_mnist.FILES)


def idx_bytes(array: np.ndarray) -> bytes:
    magic = {1: 0x0801, 3: 0x0803}[array.ndim]
    return struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.astype(np.uint8).tobytes()


def synthetic_set(seed=0):
    """{file name: array} for a small Fashion-MNIST-shaped set (5 train, 3 test images)."""
    rng = np.random.default_rng(seed)
    return {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte.gz": rng.integers(0, 10, 5, dtype=np.uint8),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte.gz": rng.integers(0, 10, 3, dtype=np.uint8),
    }


def write_set(directory: Path, arrays, compressed=True):
    """Write the set as the upstream .gz files, or as gunzipped files without the suffix."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        if compressed:
            (directory / name).write_bytes(gzip.compress(idx_bytes(array)))
        else:
            (directory / name.removesuffix(".gz")).write_bytes(idx_bytes(array))


def assert_same(loaded, arrays):
    (x_train, y_train), (x_test, y_test) = loaded
    for got, name in [(x_train, NAMES[0]), (y_train, NAMES[1]), (x_test, NAMES[2]), (y_test, NAMES[3])]:
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, arrays[name])


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """Cache in tmp_path; neither $CLNET_DATA, $CLNET_DATA_URL nor the Debian copy is seen."""
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CLNET_DATA", raising=False)
    monkeypatch.delenv("CLNET_DATA_URL", raising=False)
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "no-debian")
    return tmp_path / "cache" / "datasets" / "fashion-mnist"


def serve_set(server, monkeypatch, arrays):
    """Serve the set gzipped and make FILES expect its checksums."""
    for name, array in arrays.items():
        server.files[name] = gzip.compress(idx_bytes(array))
    checksums = {name: hashlib.sha256(body).hexdigest() for name, body in server.files.items()}
    monkeypatch.setattr(fashion_mnist, "FILES", checksums)
    return checksums


def files_in(directory: Path):
    return sorted(p.name for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def test_debian_package_files():
    debian = Path("/usr/share/datasets/fashion-mnist")
    if not debian.is_dir():
        pytest.fail(f"{debian} is missing: run `apt-get install dataset-fashion-mnist` (CI installs it)")
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data(path=debian, download=False)
    assert x_train.shape == (60000, 28, 28) and y_train.shape == (60000,)
    assert x_test.shape == (10000, 28, 28) and y_test.shape == (10000,)
    assert {a.dtype for a in (x_train, y_train, x_test, y_test)} == {np.dtype(np.uint8)}
    assert y_train.min() == 0 and y_train.max() == 9
    np.testing.assert_array_equal(np.bincount(y_train), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(y_test), [1000] * 10)
    assert int(x_train[0].sum(dtype=np.int64)) == 76247
    assert y_train[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    assert y_test[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]
    assert len(fashion_mnist.class_names) == 10 and fashion_mnist.class_names[9] == "Ankle boot"


@pytest.mark.parametrize("compressed", [True, False], ids=["gz", "plain"])
def test_path_argument(isolated, tmp_path, compressed):
    arrays = synthetic_set(1)
    write_set(tmp_path / "mine", arrays, compressed)
    assert_same(fashion_mnist.load_data(path=tmp_path / "mine", download=False), arrays)


@pytest.mark.parametrize("compressed", [True, False], ids=["gz", "plain"])
def test_clnet_data_env(isolated, tmp_path, monkeypatch, compressed):
    arrays = synthetic_set(2)
    write_set(tmp_path / "env", arrays, compressed)
    monkeypatch.setenv("CLNET_DATA", str(tmp_path / "env"))
    assert_same(fashion_mnist.load_data(download=False), arrays)


def test_path_argument_comes_before_clnet_data(isolated, tmp_path, monkeypatch):
    write_set(tmp_path / "env", synthetic_set(3))
    monkeypatch.setenv("CLNET_DATA", str(tmp_path / "env"))
    arrays = synthetic_set(4)
    write_set(tmp_path / "mine", arrays)
    assert_same(fashion_mnist.load_data(path=tmp_path / "mine", download=False), arrays)


def test_arrays_are_writable(isolated, tmp_path):
    write_set(tmp_path / "mine", synthetic_set(5))
    (x_train, _), _ = fashion_mnist.load_data(path=tmp_path / "mine", download=False)
    np.random.default_rng(0).shuffle(x_train)  # would raise on a read-only array


def test_download_then_cache(isolated, server, monkeypatch):
    arrays = synthetic_set(6)
    serve_set(server, monkeypatch, arrays)
    assert_same(fashion_mnist.load_data(origin=server.url), arrays)
    assert sorted(server.requests) == sorted(f"/mirror/{name}" for name in NAMES)
    assert files_in(isolated) == sorted(NAMES)

    assert_same(fashion_mnist.load_data(origin=server.url), arrays)
    assert len(server.requests) == 4, "the second call must read the cache, not the server"


def test_download_origin_from_env(isolated, server, monkeypatch):
    arrays = synthetic_set(7)
    serve_set(server, monkeypatch, arrays)
    monkeypatch.setenv("CLNET_DATA_URL", server.url.rstrip("/"))
    assert_same(fashion_mnist.load_data(), arrays)
    assert len(server.requests) == 4


def test_download_checksum_mismatch(isolated, server, monkeypatch):
    checksums = serve_set(server, monkeypatch, synthetic_set(8))
    bad = "t10k-images-idx3-ubyte.gz"
    wrong = "0" * 64
    monkeypatch.setitem(checksums, bad, wrong)
    with pytest.raises(DatasetError) as info:
        fashion_mnist.load_data(origin=server.url)
    message = str(info.value)
    assert wrong in message
    assert hashlib.sha256(server.files[bad]).hexdigest() in message
    assert f"{server.url}{bad}" in message
    # Only files that passed their checksum may remain: no bad file, no temporary file.
    assert set(files_in(isolated)) <= set(NAMES) - {bad}


def test_download_helper_leaves_nothing_on_mismatch(tmp_path, server):
    server.files["f.gz"] = b"payload"
    with pytest.raises(DatasetError, match="expected sha256 " + "1" * 64):
        files.download(server.url + "f.gz", tmp_path / "f.gz", "1" * 64)
    assert files_in(tmp_path) == []

    good = hashlib.sha256(b"payload").hexdigest()
    files.download(server.url + "f.gz", tmp_path / "f.gz", good)
    assert files_in(tmp_path) == ["f.gz"] and files.sha256_of(tmp_path / "f.gz") == good


def assert_helpful(message, places):
    for place in places:
        assert str(place) in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert "CLNET_DATA" in message and "path=" in message


def test_download_404(isolated, server, tmp_path):
    with pytest.raises(DatasetError) as info:
        fashion_mnist.load_data(path=tmp_path / "nowhere", origin=server.url)
    message = str(info.value)
    assert_helpful(message, [tmp_path / "nowhere", isolated, fashion_mnist.DEBIAN_DIR])
    assert "404" in message and server.url in message
    assert files_in(isolated) == []


def test_connection_refused(isolated, tmp_path):
    with socket.socket() as s:  # a port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    with pytest.raises(DatasetError) as info:
        fashion_mnist.load_data(origin=url)
    message = str(info.value)
    assert_helpful(message, [isolated, fashion_mnist.DEBIAN_DIR])
    assert f"could not download {url}" in message
    assert files_in(isolated) == []


def test_nothing_found_without_download(isolated, tmp_path):
    partial = tmp_path / "partial"
    write_set(partial, synthetic_set(9))
    (partial / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DatasetError) as info:
        fashion_mnist.load_data(path=partial, download=False)
    message = str(info.value)
    assert_helpful(message, [partial, isolated, fashion_mnist.DEBIAN_DIR])
    assert f"{partial} (path=): missing t10k-labels-idx1-ubyte.gz" in message
    assert "download=False" in message


def corrupt(kind: str, good: bytes) -> bytes:
    return {
        "truncated-data": gzip.compress(good[:-1]),
        "trailing-data": gzip.compress(good + b"\0"),
        "truncated-gzip": gzip.compress(good)[:-20],
        "bad-magic": gzip.compress(b"\0\0\x08\x02" + good[4:]),
        "empty": b"",
    }[kind]


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("truncated-data", "but the file holds"),
        ("trailing-data", "but the file holds"),
        ("truncated-gzip", "cannot read"),
        ("bad-magic", "bad IDX magic number 0x00000802"),
        ("empty", "bad IDX magic number"),
    ],
)
def test_corrupt_local_file(isolated, tmp_path, kind, expected):
    arrays = synthetic_set(10)
    write_set(tmp_path / "mine", arrays)
    victim = tmp_path / "mine" / "train-labels-idx1-ubyte.gz"
    victim.write_bytes(corrupt(kind, idx_bytes(arrays[victim.name])))
    with pytest.raises(DatasetError, match=expected) as info:
        fashion_mnist.load_data(path=tmp_path / "mine", download=False)
    assert str(victim) in str(info.value)


def test_read_idx_roundtrip_plain_and_gz(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "plain").write_bytes(idx_bytes(images))
    (tmp_path / "packed.gz").write_bytes(gzip.compress(idx_bytes(images)))
    for name in ("plain", "packed.gz"):
        got = files.read_idx(tmp_path / name)
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, images)


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert files.cache_dir() == tmp_path / "a"
    monkeypatch.delenv("CLNET_CACHE_DIR")
    assert files.cache_dir() == tmp_path / "xdg" / "clnet"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert files.cache_dir() == tmp_path / "home" / ".cache" / "clnet"
