"""File helpers shared by the datasets: cache location, checksummed downloads, IDX files."""
import contextlib
import gzip
import hashlib
import http.client
import os
import struct
import tempfile
import urllib.request
import zlib
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .. import system
from ..cache import cache_dir  # noqa: F401  (re-exported: the loader and its tests use files.cache_dir)

_CHUNK = 1 << 20

# IDX magic number -> number of dimensions; only the uint8 kinds that MNIST-style sets use.
_IDX_NDIM = {0x00000801: 1, 0x00000803: 3}


class DatasetError(Exception):
    """A dataset could not be found, downloaded or read."""


class ChecksumError(DatasetError):
    """A download arrived whole but its digest is not the expected one (nothing was kept)."""


def digest_of(path, algorithm="sha256") -> str:
    """Hex digest of a file's contents, read in chunks (hashlib's names: "sha256", "md5")."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_of(path) -> str:
    """Hex SHA-256 of a file's contents."""
    return digest_of(path, "sha256")


def download(url, dest, expected, timeout=30, *, algorithm="sha256", progress=False) -> Path:
    """Fetch `url` to `dest`; `dest` appears only once complete and, unless `expected` is None,
    once its `algorithm` digest equals `expected`. `progress` shows a tqdm bar on a terminal."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Same directory as dest, so that os.replace is an atomic rename, never a copy.
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        digest = hashlib.new(algorithm)
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    total = response.headers.get("Content-Length")
                    # disable=None: tqdm turns itself off when stderr is not a terminal.
                    with tqdm(total=int(total) if total else None, unit="B", unit_scale=True,
                              unit_divisor=1024, disable=None if progress else True) as bar:
                        for block in iter(lambda: response.read(_CHUNK), b""):
                            digest.update(block)
                            out.write(block)
                            bar.update(len(block))
            except (OSError, http.client.HTTPException, ValueError) as e:
                raise DatasetError(f"could not download {url}: {e}") from e
            out.flush()
            os.fsync(out.fileno())
        received = digest.hexdigest()
        if expected is not None and received != expected:
            raise ChecksumError(
                f"checksum mismatch for {url}: expected {algorithm} {expected}, received {received}"
            )
        system.replace(Path(tmp), dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return dest


def read_idx(path) -> np.ndarray:
    """Read a uint8 IDX file (labels 1-D or images 3-D), gzip-compressed or plain."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
        # Detect compression by content, not name: IDX files start with two zero bytes.
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise DatasetError(f"{path}: cannot read: {e}") from e

    magic = int.from_bytes(data[:4], "big") if len(data) >= 4 else None
    if magic not in _IDX_NDIM:
        found = "a file shorter than 4 bytes" if magic is None else f"0x{magic:08x}"
        raise DatasetError(
            f"{path}: bad IDX magic number {found}, expected 0x00000801 (uint8 labels) "
            "or 0x00000803 (uint8 images)"
        )
    ndim = _IDX_NDIM[magic]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetError(f"{path}: truncated IDX header: {len(data)} bytes, expected {header}")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    expected = int(np.prod(shape))
    if len(data) - header != expected:
        raise DatasetError(
            f"{path}: IDX header says shape {shape}, i.e. {expected} data bytes, "
            f"but the file holds {len(data) - header}"
        )
    # A copy, so that callers may shuffle or normalise in place (frombuffer is read-only).
    return np.frombuffer(data, np.uint8, offset=header).reshape(shape).copy()
