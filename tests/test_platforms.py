"""What differs on Windows, macOS and ARM Linux, played here on Linux x86-64: the install line for a
device, the cache directory, Intel's runtime registered with Windows's loader, replacing a
checkpoint that another program holds open, telling whether a process lives without killing it;
and an OpenCL 1.2 device without float64 and with small work-groups, made of PoCL."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clnet
from clnet import system
from clnet.cl import device as cl_device
from clnet.cl import icd
from clnet.saving import CheckpointError

ROOT = Path(__file__).resolve().parent.parent


def play(monkeypatch, name, machine):
    """Be `name` on `machine` from here on; the cache stays where it is (on the Windows of a
    Linux test, platformdirs cannot ask the shell for the folder)."""
    from clnet.cache import cache_dir
    monkeypatch.setenv("CLNET_CACHE_DIR", str(cache_dir()))
    monkeypatch.setattr(system, "name", lambda: name)
    monkeypatch.setattr(system, "machine", lambda: machine)


@pytest.mark.parametrize("name, machine, said, command", [
    ("Linux", "x86_64", "Linux x86-64", "pip install pocl-binary-distribution"),
    ("Linux", "aarch64", "Linux aarch64", "sudo apt install pocl-opencl-icd"),
    ("Windows", "AMD64", "Windows x86-64", 'pip install "clnet[intel]"'),
    ("Windows", "ARM64", "Windows arm64", "install your GPU vendor's driver"),
    ("Darwin", "arm64", "macOS arm64", "pip install --force-reinstall pyopencl"),
    ("Darwin", "x86_64", "macOS x86-64", "pip install --force-reinstall pyopencl"),
])
def test_no_device_names_the_system_and_the_command_that_fixes_it(monkeypatch, name, machine, said, command):
    play(monkeypatch, name, machine)
    monkeypatch.setattr(cl_device, "devices", lambda: [])
    with pytest.raises(clnet.DeviceError) as caught:
        cl_device.choose()
    assert str(caught.value).startswith(f"no OpenCL device found on {said}: {command}")


# `clnet devices` in a process whose loader finds no platform at all.
NO_PLATFORM = """
import sys
import pyopencl as cl
def none():
    raise cl.Error("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")
cl.get_platforms = none
from clnet.__main__ import main
sys.exit(main(["devices"]))
"""


def test_clnet_devices_without_a_platform_says_what_to_install():
    run = subprocess.run([sys.executable, "-c", NO_PLATFORM], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert "no OpenCL device found on Linux x86-64: pip install pocl-binary-distribution" in run.stdout
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("name, expected", [
    ("Linux", "home/.cache/clnet"),
    ("Darwin", "home/Library/Caches/clnet"),
    ("Windows", r"C:\Users\trader\AppData\Local/clnet/Cache"),
])
def test_cache_dir_is_the_systems_user_cache(monkeypatch, tmp_path, name, expected):
    from clnet.cache import cache_dir
    import platformdirs.windows
    play(monkeypatch, name, "x86_64")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("CLNET_CACHE_DIR", raising=False)
    monkeypatch.setattr(platformdirs.windows, "get_win_folder",
                        lambda csidl: {"CSIDL_LOCAL_APPDATA": r"C:\Users\trader\AppData\Local"}[csidl])
    assert str(cache_dir()).replace(str(tmp_path) + "/", "") == expected
    if name == "Linux":
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache_dir() == tmp_path / "xdg" / "clnet"
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def wheel_files(root: Path, names) -> dict:
    """Intel's three Windows wheels put their DLLs in <prefix>/Library/bin."""
    folder = root / "Library" / "bin"
    folder.mkdir(parents=True)
    for file in names:
        (folder / file).write_bytes(b"MZ")
    return {file: folder / file for file in names}


def test_intels_runtime_is_registered_with_windows_loader_through_its_environment(monkeypatch, tmp_path):
    play(monkeypatch, "Windows", "AMD64")
    files = wheel_files(tmp_path, ["intelocl64.dll", "svml_dispmd.dll", "libmmd.dll"])
    tbb = wheel_files(tmp_path / "user-site", ["tbb12.dll"])  # another prefix: its folder joins PATH
    found = {**files, **tbb}
    monkeypatch.setattr(icd, "_package_file", lambda package, name: found.get(name))
    monkeypatch.setattr(icd.ctypes, "CDLL", lambda *args, **kwargs: pytest.fail("Linux's preloading ran on Windows"))
    monkeypatch.setenv("OCL_ICD_FILENAMES", r"C:\Windows\System32\nvopencl64.dll")
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", str(files["libmmd.dll"].parent)]))
    monkeypatch.delenv("CLNET_INTEL", raising=False)
    for _ in range(2):  # a second process inheriting the environment adds nothing twice
        monkeypatch.setattr(icd, "_done", False)
        monkeypatch.setattr(icd, "notes", [])
        notes = icd.register()
    assert os.environ["OCL_ICD_FILENAMES"] == rf"C:\Windows\System32\nvopencl64.dll;{files['intelocl64.dll']}"
    assert os.environ["PATH"].split(os.pathsep) == [str(tbb["tbb12.dll"].parent), "/usr/bin",
                                                    str(files["libmmd.dll"].parent)]
    assert notes == [f"Intel's CPU runtime: registered ({files['intelocl64.dll']}; OCL_ICD_FILENAMES names it)"]

    monkeypatch.setattr(icd, "_done", False)
    monkeypatch.setattr(icd, "notes", [])
    monkeypatch.setattr(icd, "_package_file", lambda package, name: files.get(name))  # tbb missing
    assert icd.register() == ["Intel's CPU runtime: installed but not usable: tbb12.dll from pip package 'tbb' not found"]


@pytest.mark.parametrize("name, machine, note", [
    ("Darwin", "arm64", "Intel's CPU runtime: has no wheel for macOS arm64"),
    ("Linux", "aarch64", "Intel's CPU runtime: has no wheel for Linux aarch64"),
    ("Windows", "AMD64", "Intel's CPU runtime: not installed (pip install 'clnet[intel]' adds it on x86-64 Linux and Windows)"),
])
def test_intels_runtime_where_it_has_no_wheel_or_is_not_installed(monkeypatch, name, machine, note):
    play(monkeypatch, name, machine)
    monkeypatch.setattr(icd, "_package_file", lambda package, file: None)
    monkeypatch.setattr(icd, "_done", False)
    monkeypatch.setattr(icd, "notes", [])
    before = dict(os.environ)
    assert icd.register() == [note]
    assert dict(os.environ) == before


def held_open(times: int):
    """os.replace as Windows answers while another program holds the target open `times` times."""
    real = os.replace
    calls = []

    def replace(source, target):
        calls.append(target)
        if len(calls) <= times:
            raise PermissionError(13, "Access is denied", str(target))
        real(source, target)
    return replace, calls


def test_a_replace_that_windows_refuses_for_a_moment_is_tried_again(monkeypatch, tmp_path):
    play(monkeypatch, "Windows", "AMD64")
    slept = []
    monkeypatch.setattr(system.time, "sleep", slept.append)
    replace, calls = held_open(2)
    monkeypatch.setattr(system.os, "replace", replace)
    (tmp_path / "new").write_text("new")
    (tmp_path / "target").write_text("old")
    system.replace(tmp_path / "new", tmp_path / "target")
    assert (tmp_path / "target").read_text() == "new" and len(calls) == 3
    assert slept == list(system.REPLACE_RETRY_SECONDS[:2])


def test_a_replace_refused_on_linux_is_not_retried(monkeypatch, tmp_path):
    replace, calls = held_open(1)
    monkeypatch.setattr(system.os, "replace", replace)
    monkeypatch.setattr(system.time, "sleep", lambda seconds: pytest.fail("slept on Linux"))
    with pytest.raises(PermissionError):
        system.replace(tmp_path / "new", tmp_path / "target")
    assert len(calls) == 1


def small_model():
    model = clnet.Sequential([clnet.layers.Input((4,)), clnet.layers.Dense(3, "softmax")], seed=3, floatx="float64")
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(np.eye(4)[[0, 1, 2, 3] * 4], np.arange(16) % 3, epochs=1, verbose=0)
    return model


def test_a_checkpoint_held_open_on_windows_stays_whole(monkeypatch, tmp_path):
    """The save fails with a CheckpointError that says why, after the retries; the previous checkpoint
    loads unchanged and no temporary file is left. Directories are not opened for fsync there."""
    play(monkeypatch, "Windows", "AMD64")
    monkeypatch.setattr(system.time, "sleep", lambda seconds: None)
    opened = []
    real_open = os.open
    monkeypatch.setattr(system.os, "open", lambda path, flags, *args: opened.append(os.path.isdir(path))
                        or real_open(path, flags, *args))
    model = small_model()
    path = tmp_path / "model.h5"
    model.save(path)
    assert opened and not any(opened)  # the temp file's fsync (and any cache writes); never a directory
    before = model.get_weights()
    model.fit(np.eye(4)[[0, 1, 2, 3] * 4], np.arange(16) % 3, epochs=1, verbose=0)
    replace, calls = held_open(len(system.REPLACE_RETRY_SECONDS) + 1)
    monkeypatch.setattr(system.os, "replace", replace)
    with pytest.raises(CheckpointError, match="another program may have it open"):
        model.save(path)
    assert len(calls) == len(system.REPLACE_RETRY_SECONDS) + 1
    assert os.listdir(tmp_path) == ["model.h5"]
    for saved, expected in zip(clnet.load_model(path).get_weights(), before):
        np.testing.assert_array_equal(saved, expected)


class Kernel32:
    """Windows's process calls for four processes: alive, exited, gone, another user's."""
    STATES = {100: 259, 101: 0}

    def __init__(self):
        self.closed = []
        self.error = 0

    def OpenProcess(self, access, inherit, pid):
        assert access == system.PROCESS_QUERY_LIMITED_INFORMATION
        if pid in self.STATES:
            return pid
        self.error = {102: 87, 103: 5}[pid]  # ERROR_INVALID_PARAMETER: no such process
        return 0

    def GetExitCodeProcess(self, handle, code):
        code._obj.value = self.STATES[handle]
        return 1

    def CloseHandle(self, handle):
        self.closed.append(handle)


def test_a_process_on_windows_is_asked_for_its_exit_code_not_sent_a_signal(monkeypatch, tmp_path):
    kernel32 = Kernel32()
    alive = {pid: system._windows_process_alive(pid, kernel32, lambda: kernel32.error) for pid in (100, 101, 102, 103)}
    assert alive == {100: True, 101: False, 102: False, 103: True} and kernel32.closed == [100, 101]

    # A save on Windows removes a dead writer's leftover temp file and keeps a live one's, and
    # never calls os.kill, which there would terminate the process.
    play(monkeypatch, "Windows", "AMD64")
    monkeypatch.setattr(system.os, "kill", lambda *args: pytest.fail("os.kill on Windows"))
    monkeypatch.setattr(system, "_windows_process_alive", lambda pid: pid == 100)
    import socket
    host = socket.gethostname()
    dead, live = (tmp_path / f".model.h5.{host}-{pid}-0123abcd.tmp" for pid in (101, 100))
    dead.write_bytes(b""), live.write_bytes(b"")
    small_model().save(tmp_path / "model.h5")
    assert not dead.exists() and live.exists()


def test_programs_are_opencl_c_1_2(rt):
    """Every program is built as OpenCL C 1.2, the language Apple's OpenCL knows: PoCL otherwise
    compiles 3.0 and would let through what a Mac refuses."""
    program = rt.program(("layers/merge.cl",), np.float32)
    assert "-cl-std=CL1.2" in program.get_build_info(rt.device, cl.program_build_info.OPTIONS).split()


def test_no_kernel_source_names_double():
    """float64 comes only through TYPE, so a float32 program builds on a device without
    cl_khr_fp64 (Apple's GPUs, many mobile ones); common.cl enables the extension for float64 alone."""
    import re
    offenders = []
    for path in sorted((ROOT / "clnet").rglob("*.cl")):
        code = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.S)
        for number, line in enumerate(code.splitlines(), 1):
            if re.search(r"\bdouble\d*\b|\bconvert_double", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


# Trains a CNN and a recurrent model with attention for two steps and prints their weights; with
# HIDE_FP64 set the device is reported without cl_khr_fp64, as Apple's and many mobile GPUs are.
SMALL_DEVICE = """
import dataclasses, json, os, sys
import numpy as np
import clnet
from clnet.cl import device as cl_device
if os.environ.get("HIDE_FP64"):
    found = cl_device.devices
    cl_device.devices = lambda: [dataclasses.replace(d, fp64=False) for d in found()]
floatx = sys.argv[1]
L = clnet.layers
rng = np.random.default_rng(0)
out = {"local_size": clnet.runtime().local_size}
try:
    cnn = clnet.Sequential([L.Input((9, 9, 2)), L.Conv2D(5, 3, activation="relu"), L.MaxPooling2D(2),
                            L.BatchNormalization(), L.Flatten(), L.Dense(3, "softmax")], seed=1, floatx=floatx)
    cnn.compile("sgd", "sparse_categorical_crossentropy")
    cnn.fit(rng.normal(size=(40, 9, 9, 2)), np.arange(40) % 3, batch_size=20, epochs=1, shuffle=False, verbose=0)
    ids = L.Input((7,), dtype="int32")
    x = L.Embedding(11, 6)(ids)
    x = L.LSTM(5, return_sequences=True)(x)
    x = L.LayerNormalization()(L.MultiHeadAttention(2, 3)(x, x) + x)
    x = L.GRU(4)(x)
    rnn = clnet.Model(ids, L.Dense(2, "softmax")(x), seed=2, floatx=floatx)
    rnn.compile("sgd", "sparse_categorical_crossentropy")
    rnn.fit(rng.integers(0, 11, size=(40, 7)), np.arange(40) % 2, batch_size=20, epochs=1, shuffle=False, verbose=0)
    out["weights"] = [w.tolist() for w in cnn.get_weights() + rnn.get_weights()]
except clnet.DeviceError as error:
    out["error"] = str(error)
print(json.dumps(out))
"""


def small_device(floatx, **env):
    run = subprocess.run([sys.executable, "-c", SMALL_DEVICE, floatx], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "CLNET_QUIET": "1", **env})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_device_with_small_work_groups_and_no_float64():
    """PoCL with its work-groups held to 64 items (POCL_MAX_WORK_GROUP_SIZE: Apple's GPUs allow 256,
    some mobile GPUs less) computes in float64 what it computes with 256, every layer family; and
    reported without cl_khr_fp64 it trains in float32 and refuses float64 with the clear error."""
    wide = small_device("float64")
    narrow = small_device("float64", POCL_MAX_WORK_GROUP_SIZE="64")
    assert (wide["local_size"], narrow["local_size"]) == (256, 64)
    for a, b in zip(wide["weights"], narrow["weights"], strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
    no_fp64 = {"POCL_MAX_WORK_GROUP_SIZE": "64", "HIDE_FP64": "1"}
    single = small_device("float32", **no_fp64)
    for a, b in zip(wide["weights"], single["weights"], strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    assert "has no cl_khr_fp64 support; use floatx='float32'" in small_device("float64", **no_fp64)["error"]


def test_text_files_are_read_and_written_as_utf_8():
    """Python's default text encoding is the locale's (cp1252 on most Windows machines), which
    cannot read the kernels' UTF-8 comments; every text file clnet opens names its encoding."""
    import ast
    offenders = []
    for path in sorted((ROOT / "clnet").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            keywords = {k.arg for k in node.keywords}
            if name == "open" and isinstance(node.func, ast.Name):
                mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
                binary = isinstance(mode, ast.Constant) and "b" in str(mode.value)
                if not binary and "encoding" not in keywords:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif name in ("read_text", "write_text") and "encoding" not in keywords:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
