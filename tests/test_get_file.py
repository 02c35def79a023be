"""Tests for clnet.utils.get_file against Keras 3.15.1's rules: cache place and names, hashes,
re-downloads, extraction and errors. Files come from a local HTTP server; KERAS_HOME is a
tmp_path, so the real ~/.keras is never touched."""
import hashlib
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

import clnet
from clnet.utils import files


@pytest.fixture
def home(tmp_path, monkeypatch):
    """$KERAS_HOME, not created yet: get_file creates it, as importing Keras does."""
    path = tmp_path / "keras_home"
    monkeypatch.setenv("KERAS_HOME", str(path))
    return path


def tree(directory: Path):
    """Every file under `directory`, as sorted relative POSIX paths."""
    return sorted(p.relative_to(directory).as_posix() for p in Path(directory).rglob("*") if p.is_file())


def zip_bytes(members) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buffer.getvalue()


def tar_gz_bytes(members) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


MEMBERS = {"corpus/a.txt": b"alpha", "corpus/sub/b.txt": b"beta"}


def test_exported_like_keras():
    assert clnet.utils.get_file is files.get_file
    assert "get_file" in clnet.utils.__all__


def test_download_then_cache(home, server, capsys):
    server.files["fra-eng.txt"] = b"hello"
    origin = server.url + "fra-eng.txt"

    path = clnet.utils.get_file(origin=origin)  # fname from the origin's path, as in Keras
    assert path == str(home / "datasets" / "fra-eng.txt")
    assert Path(path).read_bytes() == b"hello"
    assert f"Downloading data from {origin}" in capsys.readouterr().out
    assert tree(home) == ["datasets/fra-eng.txt"]  # no temporary file left beside it

    assert clnet.utils.get_file(origin=origin) == path
    assert len(server.requests) == 1  # the second call is served from the cache
    assert "Downloading" not in capsys.readouterr().out


def test_file_keras_downloaded_is_found(home, server):
    (home / "datasets").mkdir(parents=True)
    (home / "datasets" / "x.bin").write_bytes(b"from keras")
    path = files.get_file("x.bin", origin=server.url + "x.bin")
    assert Path(path).read_bytes() == b"from keras" and server.requests == []


def test_fname_names_the_cached_file(home, server):
    server.files["remote.bin"] = b"payload"
    path = files.get_file(Path("local.bin"), origin=server.url + "remote.bin")  # PathLike is fine
    assert path == str(home / "datasets" / "local.bin") and Path(path).read_bytes() == b"payload"


def test_query_string_is_not_part_of_the_name(home, server):
    server.files["q.bin"] = b"q"
    path = files.get_file(origin=server.url + "q.bin?raw=true")
    assert os.path.basename(path) == "q.bin"


def test_cache_subdir_absolute_and_cache_dir(home, server, tmp_path):
    server.files["f.bin"] = b"f"
    absolute = tmp_path / "elsewhere"
    assert files.get_file(origin=server.url + "f.bin", cache_subdir=str(absolute)) == str(absolute / "f.bin")

    mine = tmp_path / "mine"
    mine.mkdir()
    assert files.get_file(origin=server.url + "f.bin", cache_dir=str(mine), cache_subdir="sub") \
        == str(mine / "sub" / "f.bin")
    assert not home.joinpath("datasets", "f.bin").exists()


@pytest.mark.parametrize("name, data", [("corpus.zip", zip_bytes(MEMBERS)),
                                        ("corpus.tar.gz", tar_gz_bytes(MEMBERS))])
def test_extract_without_fname(home, server, name, data):
    server.files[name] = data
    # Keras: the folder takes the origin's file name, the archive gets "_archive".
    path = files.get_file(origin=server.url + name, extract=True)
    datasets = home / "datasets"
    assert path == str(datasets / name)
    assert tree(path) == sorted(MEMBERS)
    assert (Path(path) / "corpus" / "sub" / "b.txt").read_bytes() == b"beta"
    assert (datasets / f"{name}_archive").read_bytes() == data

    # Cached archive: extracted again, not downloaded again.
    assert files.get_file(origin=server.url + name, extract=True) == path
    assert len(server.requests) == 1


def test_extract_naming_with_fname(home, server):
    server.files["c.tar.gz"] = tar_gz_bytes(MEMBERS)
    datasets = home / "datasets"
    # A given name with an extension keeps it; the folder is the part before the first ".".
    path = files.get_file("corpus.tar.gz", origin=server.url + "c.tar.gz", extract=True)
    assert path == str(datasets / "corpus_extracted")
    assert (datasets / "corpus.tar.gz").is_file() and tree(path) == sorted(MEMBERS)
    # A given name without one names the folder; the archive gets "_archive".
    path = files.get_file("plain", origin=server.url + "c.tar.gz", untar=True)
    assert path == str(datasets / "plain")
    assert (datasets / "plain_archive").is_file() and tree(path) == sorted(MEMBERS)


def test_untar_is_tar_only(home, server):
    server.files["z.zip"] = zip_bytes(MEMBERS)
    with pytest.warns(UserWarning, match="Could not extract archive"):
        path = files.get_file(origin=server.url + "z.zip", untar=True)
    assert not os.path.exists(path)


def test_zip_member_escaping_is_skipped(home, server, tmp_path):
    server.files["evil.zip"] = zip_bytes({"ok.txt": b"ok", "../../escaped.txt": b"bad",
                                          "/abs.txt": b"abs"})
    with pytest.warns(UserWarning, match="Skipping invalid path during archive extraction") as record:
        path = files.get_file(origin=server.url + "evil.zip", extract=True)
    # Keras's filter skips an absolute name too (zipfile alone would extract it as abs.txt).
    assert [str(w.message) for w in record] == [
        "Skipping invalid path during archive extraction: '../../escaped.txt'.",
        "Skipping invalid path during archive extraction: '/abs.txt'.",
    ]
    assert tree(path) == ["ok.txt"]
    assert [p for p in tmp_path.rglob("escaped.txt")] == []


def test_tar_member_and_link_escaping_are_skipped(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as t:
        for name in ["ok.txt", "../up.txt"]:
            info = tarfile.TarInfo(name)
            info.size = 2
            t.addfile(info, io.BytesIO(b"xx"))
        link = tarfile.TarInfo("link")
        link.type, link.linkname = tarfile.SYMTYPE, "../../outside"
        t.addfile(link)
    archive = tmp_path / "a.tar"
    archive.write_bytes(buffer.getvalue())
    with pytest.warns(UserWarning, match="Skipping invalid path") as record:
        assert files.extract_archive(archive, tmp_path / "out")
    assert sorted(str(w.message).split("'")[1] for w in record) == ["../up.txt", "link"]
    assert tree(tmp_path / "out") == ["ok.txt"]


@pytest.mark.parametrize("algorithm", ["md5", "sha256"])
def test_good_hash_no_redownload(home, server, algorithm):
    server.files["h.bin"] = b"content"
    digest = hashlib.new(algorithm, b"content").hexdigest()
    for _ in range(2):
        path = files.get_file(origin=server.url + "h.bin", file_hash=digest)  # "auto": by length
    assert Path(path).read_bytes() == b"content" and len(server.requests) == 1
    # The deprecated md5_hash= argument still works.
    if algorithm == "md5":
        assert files.get_file(origin=server.url + "h.bin", md5_hash=digest) == path
        assert len(server.requests) == 1


@pytest.mark.parametrize("algorithm", ["md5", "sha256"])
def test_bad_cached_file_is_downloaded_again(home, server, capsys, algorithm):
    server.files["h.bin"] = b"content"
    digest = hashlib.new(algorithm, b"content").hexdigest()
    (home / "datasets").mkdir(parents=True)
    (home / "datasets" / "h.bin").write_bytes(b"truncat")
    path = files.get_file(origin=server.url + "h.bin", file_hash=digest, hash_algorithm=algorithm)
    assert Path(path).read_bytes() == b"content" and len(server.requests) == 1
    out = capsys.readouterr().out
    assert (f"A local file was found, but it seems to be incomplete or outdated because the "
            f"{algorithm} file hash does not match the original value of {digest} so we will "
            "re-download the data.") in out


@pytest.mark.parametrize("algorithm", ["md5", "sha256"])
def test_bad_download_is_an_error_and_leaves_nothing(home, server, algorithm):
    server.files["h.bin"] = b"corrupted"
    expected = hashlib.new(algorithm, b"content").hexdigest()
    message = ("Incomplete or corrupted file detected. The auto file hash does not match the "
               f"provided value of {expected}.")
    with pytest.raises(ValueError) as info:
        files.get_file(origin=server.url + "h.bin", file_hash=expected)
    assert str(info.value) == message
    assert tree(home) == []  # neither the file nor a temporary one


def test_force_download(home, server):
    server.files["f.bin"] = b"v1"
    path = files.get_file(origin=server.url + "f.bin")
    server.files["f.bin"] = b"v2"
    assert Path(files.get_file(origin=server.url + "f.bin")).read_bytes() == b"v1"
    assert Path(files.get_file(origin=server.url + "f.bin", force_download=True)).read_bytes() == b"v2"
    assert len(server.requests) == 2
    # A failed forced download leaves the cached copy as it was (clnet downloads aside).
    del server.files["f.bin"]
    with pytest.raises(Exception, match="URL fetch failure"):
        files.get_file(origin=server.url + "f.bin", force_download=True)
    assert Path(path).read_bytes() == b"v2" and tree(home) == ["datasets/f.bin"]


def test_http_error_has_keras_message_and_leaves_nothing(home, server):
    origin = server.url + "missing.bin"
    with pytest.raises(Exception) as info:
        files.get_file(origin=origin)
    assert str(info.value) == f"URL fetch failure on {origin}: 404 -- Not Found"
    assert tree(home) == []


def test_unwritable_home_falls_back_to_tmp(home, server, tmp_path, monkeypatch):
    assert files._fallback_home() == os.path.join("/tmp", ".keras")  # Keras's place
    fallback = tmp_path / "tmp_keras"  # so that the test does not write into the real /tmp/.keras
    monkeypatch.setattr(files, "_fallback_home", lambda: str(fallback))
    real_access = os.access
    monkeypatch.setattr(os, "access",
                        lambda p, mode, **kw: False if Path(p) == home else real_access(p, mode, **kw))
    server.files["f.bin"] = b"f"
    assert files.get_file(origin=server.url + "f.bin") == str(fallback / "datasets" / "f.bin")


def test_keras_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "kh"))
    assert files.keras_home() == str(tmp_path / "kh")
    monkeypatch.delenv("KERAS_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert files.keras_home() == str(tmp_path / ".keras")
    real_access = os.access
    monkeypatch.setattr(os, "access",
                        lambda p, mode, **kw: False if Path(p) == tmp_path else real_access(p, mode, **kw))
    assert files.keras_home() == os.path.join("/tmp", ".keras")


def test_errors(home, server):
    with pytest.raises(ValueError, match='Please specify the "origin" argument'):
        files.get_file("x.bin")
    with pytest.raises(ValueError, match="Paths are no longer accepted as the `fname` argument. "
                                         "To specify the file's parent directory, use the "
                                         "`cache_dir` argument. Received: fname=sub/x.bin"):
        files.get_file(os.path.join("sub", "x.bin"), origin=server.url + "x.bin")
    with pytest.raises(ValueError, match="Can't parse the file name from the origin provided"):
        files.get_file(origin=server.url)
    assert server.requests == []
