"""Fashion-MNIST (Zalando Research): 28x28 grayscale clothing images in 10 classes.

`load_data()` returns the same arrays as `keras.datasets.fashion_mnist.load_data()`.
"""
import os
from pathlib import Path

from . import files
from .files import DatasetError

FILES = {
    "train-images-idx3-ubyte.gz": "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
    "train-labels-idx1-ubyte.gz": "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
    "t10k-images-idx3-ubyte.gz": "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
    "t10k-labels-idx1-ubyte.gz": "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
}

class_names = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)

DEFAULT_ORIGIN = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"

# Installed by Debian's dataset-fashion-mnist package.
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")


def load_data(path=None, download=True, origin=None):
    """Return ((x_train, y_train), (x_test, y_test)) as uint8 arrays.

    Looks in `path`, $CLNET_DATA, the cache and DEBIAN_DIR, in that order; if none
    holds all four files and `download` is true, downloads the missing ones from
    `origin` (default $CLNET_DATA_URL, else the Zalando mirror) into the cache.
    """
    places = _search_dirs(path)
    for _, directory in places:
        if not _missing(directory):
            return _read(directory)

    download_error = None
    if download:
        origin = origin or os.environ.get("CLNET_DATA_URL") or DEFAULT_ORIGIN
        try:
            return _read(_fetch(origin))
        except DatasetError as e:
            download_error = e
    raise DatasetError(_not_found_message(places, download, download_error))


def _cache() -> Path:
    return files.cache_dir() / "datasets" / "fashion-mnist"


def _search_dirs(path):
    """(label, directory) pairs, in the order they are tried."""
    places = []
    if path is not None:
        places.append(("path=", Path(path)))
    if os.environ.get("CLNET_DATA"):
        places.append(("$CLNET_DATA", Path(os.environ["CLNET_DATA"])))
    places.append(("cache", _cache()))
    places.append(("Debian package dataset-fashion-mnist", DEBIAN_DIR))
    return places


def _locate(directory: Path, name: str):
    """The file for `name` in `directory`, compressed or gunzipped by the user; else None."""
    for candidate in (directory / name, directory / name.removesuffix(".gz")):
        if candidate.is_file():
            return candidate
    return None


def _missing(directory: Path):
    return [name for name in FILES if _locate(directory, name) is None]


def _fetch(origin: str) -> Path:
    """Download the files the cache lacks; return the cache directory."""
    cache = _cache()
    for name in _missing(cache):
        files.download(origin.rstrip("/") + "/" + name, cache / name, FILES[name])
    return cache


def _read(directory: Path):
    return (
        _read_pair(directory, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
        _read_pair(directory, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
    )


def _read_pair(directory: Path, images_name: str, labels_name: str):
    images_path = _locate(directory, images_name)
    labels_path = _locate(directory, labels_name)
    images, labels = files.read_idx(images_path), files.read_idx(labels_path)
    # Catches swapped or mismatched files, which would otherwise fail much later in training.
    if images.ndim != 3:
        raise DatasetError(f"{images_path}: expected 3-D images, found shape {images.shape}")
    if labels.ndim != 1:
        raise DatasetError(f"{labels_path}: expected 1-D labels, found shape {labels.shape}")
    if len(images) != len(labels):
        raise DatasetError(
            f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels"
        )
    return images, labels


def _not_found_message(places, download, download_error):
    lines = [f"Fashion-MNIST not found. Looked for {', '.join(FILES)} in:"]
    for label, directory in places:
        if directory.is_dir():
            status = "missing " + ", ".join(_missing(directory))
        else:
            status = "no such directory"
        lines.append(f"  {directory} ({label}): {status}")
    if download_error is not None:
        lines.append(f"Download failed: {download_error}")
    elif not download:
        lines.append("Download not attempted (download=False).")
    lines += [
        "To fix, do one of:",
        "  - apt-get install dataset-fashion-mnist",
        "  - put the four files in a directory and set CLNET_DATA to it, or pass load_data(path=...)",
        "  - allow the download: load_data(download=True) with network access,"
        " or set CLNET_DATA_URL to a mirror",
    ]
    return "\n".join(lines)
