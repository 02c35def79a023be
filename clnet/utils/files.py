"""keras.utils.get_file: download a file once into Keras's cache, optionally check and extract it.

The rules (cache place, names, hashes, extraction) are Keras 3.15.1's
(keras/src/utils/file_utils.py), so that a file Keras downloaded is found here and the other
way round. The download itself is clnet's checksummed one (clnet.datasets.files.download):
written aside and renamed when complete, so the cache never holds half a file.
"""
import inspect
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import warnings
import zipfile

from ..datasets import files as dataset_files


def keras_home():
    """Keras's home: $KERAS_HOME, else ~/.keras, else /tmp/.keras when ~ is not writable
    (keras/src/backend/config.py; Keras fixes it at import, this reads it at each call)."""
    if "KERAS_HOME" in os.environ:
        return os.environ["KERAS_HOME"]
    base = os.path.expanduser("~")
    if not os.access(base, os.W_OK):
        base = "/tmp"
    return os.path.join(base, ".keras")


def _fallback_home():
    """Where get_file goes when its cache_dir is not writable, as in Keras."""
    return os.path.join("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir(), ".keras")


def _algorithm(hash_algorithm, file_hash):
    """Keras's resolve_hasher: "sha256", or "auto" with a 64-digit hash, is SHA-256; anything
    else is MD5 (Keras's legacy default)."""
    if hash_algorithm == "sha256" or (
        hash_algorithm == "auto" and file_hash is not None and len(file_hash) == 64
    ):
        return "sha256"
    return "md5"


def _matches(path, file_hash, hash_algorithm):
    # str() on both sides and no lowercasing: Keras's validate_file compares exactly so.
    return str(dataset_files.digest_of(path, _algorithm(hash_algorithm, file_hash))) == str(file_hash)


def get_file(fname=None, origin=None, untar=False, md5_hash=None, file_hash=None,
             cache_subdir="datasets", hash_algorithm="auto", extract=False,
             archive_format="auto", cache_dir=None, force_download=False):
    """Download `origin` into `cache_dir`/`cache_subdir` unless it is already there; return its
    path, or with extract=True (untar=True: tar only) the folder it was extracted to.

    Arguments, defaults, file names and messages are keras.utils.get_file's; see its docs.
    """
    if origin is None:
        raise ValueError(
            'Please specify the "origin" argument (URL of the file to download).'
        )
    if cache_dir is None:
        cache_dir = keras_home()
        # Keras creates its home when imported; without that step a fresh ~/.keras would fail
        # the writability check below and the file would land in /tmp/.keras instead.
        try:
            os.makedirs(os.path.expanduser(cache_dir), exist_ok=True)
        except OSError:  # not ours to create: the fallback below applies
            pass
    if md5_hash is not None and file_hash is None:
        file_hash, hash_algorithm = md5_hash, "md5"
    datadir_base = os.path.expanduser(cache_dir)
    if not os.access(datadir_base, os.W_OK):
        datadir_base = _fallback_home()
    # An absolute cache_subdir replaces the base: that is os.path.join's rule, and Keras's.
    datadir = os.path.join(datadir_base, cache_subdir)
    os.makedirs(datadir, exist_ok=True)

    provided_fname = fname
    fname = os.fspath(fname) if isinstance(fname, os.PathLike) else fname
    if not fname:
        fname = os.path.basename(urllib.parse.urlsplit(origin).path)
        if not fname:
            raise ValueError(
                f"Can't parse the file name from the origin provided: '{origin}'."
                "Please specify the `fname` argument."
            )
    elif os.sep in fname:
        raise ValueError(
            "Paths are no longer accepted as the `fname` argument. To specify the file's parent "
            f"directory, use the `cache_dir` argument. Received: fname={fname}"
        )

    # Keras's naming: the archive and its folder must not share a name, so one of them gets a
    # suffix. A given "name.ext" keeps its file name and extracts to "name_extracted"; otherwise
    # the folder takes the name and the archive becomes "<name>_archive".
    if extract or untar:
        if provided_fname and "." in fname:
            download_target = os.path.join(datadir, fname)
            extraction_dir = os.path.join(datadir, f"{fname[:fname.find('.')]}_extracted")
        else:
            extraction_dir = os.path.join(datadir, fname)
            download_target = os.path.join(datadir, f"{fname}_archive")
    else:
        download_target = os.path.join(datadir, fname)

    download = force_download or not os.path.exists(download_target)
    if not download and file_hash is not None and not _matches(download_target, file_hash,
                                                                hash_algorithm):
        print(
            "A local file was found, but it seems to be incomplete or outdated because the "
            f"{hash_algorithm} file hash does not match the original value of {file_hash} so "
            "we will re-download the data."
        )
        download = True

    if download:
        print(f"Downloading data from {origin}")
        _download(origin, download_target, file_hash, hash_algorithm)

    if extract or untar:
        if untar:
            archive_format = "tar"
        # Keras extracts on every call, cached archive or not.
        if not extract_archive(download_target, extraction_dir, archive_format):
            warnings.warn("Could not extract archive.", stacklevel=2)
        return extraction_dir
    return download_target


def _download(origin, target, file_hash, hash_algorithm):
    """dataset_files.download with Keras's errors: a checked file that does not match is a ValueError,
    an HTTP or URL failure an Exception "URL fetch failure on ...", anything else as raised."""
    try:
        dataset_files.download(origin, target, file_hash, algorithm=_algorithm(hash_algorithm, file_hash),
                        progress=True)
    except dataset_files.ChecksumError:
        raise ValueError(
            "Incomplete or corrupted file detected. "
            f"The {hash_algorithm} file hash does not match the provided value of {file_hash}."
        ) from None
    except dataset_files.DatasetError as e:
        cause = e.__cause__
        # HTTPError first: it is also a URLError. Keras prints e.errno for a URLError, usually None.
        if isinstance(cause, urllib.error.HTTPError):
            raise dataset_files.DatasetError(
                f"URL fetch failure on {origin}: {cause.code} -- {cause.msg}") from cause
        if isinstance(cause, urllib.error.URLError):
            raise dataset_files.DatasetError(
                f"URL fetch failure on {origin}: {cause.errno} -- {cause.reason}") from cause
        raise cause from None


def extract_archive(file_path, path=".", archive_format="auto"):
    """Extract a tar (plain, gz, bz2, xz) or zip archive into `path`, skipping with a warning any
    member that would land outside it; True if `archive_format` matched the file (Keras's)."""
    if archive_format is None:
        return False
    if archive_format == "auto":
        archive_format = ["tar", "zip"]
    if isinstance(archive_format, str):
        archive_format = [archive_format]
    file_path = os.fspath(file_path)
    path = os.fspath(path)

    for archive_type in archive_format:
        if archive_type == "tar":
            open_fn, is_match_fn = tarfile.open, tarfile.is_tarfile
        elif archive_type == "zip":
            open_fn, is_match_fn = zipfile.ZipFile, zipfile.is_zipfile
        else:
            raise NotImplementedError(archive_type)
        if is_match_fn(file_path):
            with open_fn(file_path) as archive:
                try:
                    _extract_open_archive(archive, path)
                except (tarfile.TarError, RuntimeError, KeyboardInterrupt):
                    # Keras removes what a failed extraction left, so that no half folder remains.
                    if os.path.isfile(path):
                        os.remove(path)
                    elif os.path.exists(path):
                        shutil.rmtree(path)
                    raise
            return True
    return False


def _extract_open_archive(archive, path):
    if isinstance(archive, zipfile.ZipFile):
        archive.extractall(path, members=_safe_zip_members(archive.infolist(), path))
        return
    # tarfile's "data" filter also refuses devices, setuid bits and the like. Keras passes it
    # where it exists before 3.14 (backported to 3.10.12 and 3.11.4); from 3.14 it is the default.
    kwargs = {}
    if sys.version_info < (3, 14) and "filter" in inspect.signature(archive.extractall).parameters:
        kwargs["filter"] = "data"
    archive.extractall(path, members=_safe_tar_members(archive, path), **kwargs)


def _inside(base_dir, relative_path):
    """The real path of base_dir/relative_path if it stays inside base_dir (already real),
    else None: "../x", "/etc/x" and links that lead out are refused."""
    path = os.path.realpath(os.path.join(base_dir, relative_path))
    try:
        return path if os.path.commonpath([path, base_dir]) == base_dir else None
    except ValueError:  # different drives on Windows
        return None


def _link_inside(info, base_dir):
    if info.islnk():
        # A hard link's target is named from the archive's root: both names must stay inside.
        return (_inside(base_dir, info.name) is not None
                and _inside(base_dir, info.linkname) is not None)
    # A symlink's target is named from the folder it is extracted to.
    destination = _inside(base_dir, info.name)
    if destination is None:
        return False
    return _inside(base_dir, os.path.join(os.path.dirname(destination), info.linkname)) is not None


def _skip(name):
    # stacklevel=2 as in Keras: the warning points at extractall, which runs this generator.
    warnings.warn(f"Skipping invalid path during archive extraction: '{name}'.", stacklevel=2)


def _safe_zip_members(members, base_dir):
    base_dir = os.path.realpath(base_dir)
    for info in members:
        if _inside(base_dir, info.filename) is not None:
            yield info
        else:
            _skip(info.filename)


def _safe_tar_members(members, base_dir):
    base_dir = os.path.realpath(base_dir)
    for info in members:
        if info.issym() or info.islnk():
            safe = _link_inside(info, base_dir)
        else:
            safe = _inside(base_dir, info.name) is not None
        if safe:
            yield info
        else:
            _skip(info.name)
