import os
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("CLNET_QUIET", "1")
# The products' tuner measures every candidate at several sizes the first time a device meets a
# dtype: minutes of compiling and timing on a 2-core CPU, which would land in whichever test comes
# first. The tests take the first candidate instead (results already cached are still used), set
# here so that the processes the tests start inherit it. Every candidate is checked for
# correctness by test_kernels' candidate tests, and the real sweep is a slow test of its own
# (test_profiling_and_tuning).
os.environ.setdefault("CLNET_TUNE", "0")

import clnet  # noqa: E402
from reference import pairwise_cover  # noqa: E402


def pytest_sessionstart(session):
    """Where the device the tests would run on cannot compile kernels for this CPU (pip's PoCL 3.0
    alone on AMD's Zen 5), one message that says so and what to install, not a failure per test."""
    try:
        clnet.runtime().program(("layers/merge.cl",), np.float32)
    except clnet.DeviceError as error:
        pytest.exit(f"the tests need an OpenCL device that compiles kernels: {error}", returncode=3)


# Prints the indices of the devices whose compiler builds a kernel (pip's PoCL 3.0 is listed on
# AMD's Zen 5 but builds nothing there).
USABLE_DEVICES = """
import pyopencl as cl
import clnet
for device in clnet.devices():
    try:
        cl.Program(cl.Context([device.cl_device]), "__kernel void k(__global float *a) { a[0] = 1; }").build()
        print(device.index)
    except cl.RuntimeError:
        pass
"""


def two_devices_env() -> tuple[dict, tuple[int, int]]:
    """An environment in which a child process sees at least two OpenCL devices that build our
    kernels, and the indices of two of them.

    A machine with only what the README installs has one (pip's PoCL). PoCL makes one device per
    driver named in POCL_DEVICES, so it is then asked for its multi-threaded driver and its
    single-threaded 'basic' one: two devices with their own names, contexts, compiled programs and
    tuning."""
    for extra in ({}, {"POCL_DEVICES": "pthread basic"}):
        env = {**os.environ, "CLNET_QUIET": "1", **extra}
        listed = subprocess.run([sys.executable, "-c", USABLE_DEVICES], env=env, capture_output=True, text=True,
                                check=True, timeout=300).stdout
        usable = [int(index) for index in listed.split()]
        if len(usable) >= 2:
            return env, (usable[0], usable[1])
    raise AssertionError(f"no two OpenCL devices that build kernels, even with POCL_DEVICES: {usable}")


@pytest.hookimpl(tryfirst=True)  # before -m deselects what is marked here
def pytest_collection_modifyitems(config, items):
    """The quick suite (the README's test command) runs each parametrized test on a pairwise cover
    of its cases (reference.pairwise_cover): every value of every parameter together with every
    value of every other at least once (every layer kind in both dtypes, every form with every
    direction, ...); the rest of its cross product is marked slow, and CI runs it (`pytest -m
    slow`). A parametrize mark's argnames count as one parameter, as do a parametrized fixture's."""
    groups: dict[tuple, list] = {}
    for item in items:
        if getattr(item, "callspec", None) is not None and not item.get_closest_marker("slow"):
            groups.setdefault((item.path, item.originalname), []).append(item)
    for group in groups.values():
        chosen = set(pairwise_cover([_parameters(item) for item in group]))
        for i, item in enumerate(group):
            if i not in chosen:
                item.add_marker("slow")


def _parameters(item) -> dict:
    """A case's value of each parameter: of each parametrize mark (its argnames together) and of
    each parametrized fixture."""
    params, values = item.callspec.params, {}
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0]
        names = tuple(n.strip() for n in names.split(",")) if isinstance(names, str) else tuple(names)
        values[names] = [params[n] for n in names]
    for name in set(params) - {n for names in values for n in names}:
        values[(name,)] = params[name]
    return values


@pytest.fixture(scope="session")
def rt():
    return clnet.runtime()


@pytest.fixture(scope="session")
def fp64(rt):
    """float64 kernels need cl_khr_fp64; every device CI runs on (PoCL) has it."""
    assert rt.info.fp64, f"device {rt.info.name} has no fp64; the float64 checks need one"
    return np.float64


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def fresh_names():
    """Each test's automatic layer names start at dense, dense_1, ..., as in a new Keras session."""
    clnet.utils.clear_session()


@pytest.fixture
def server(request):
    """A local HTTP server of in-memory files (tests/file_server.py)."""
    from file_server import FileServer
    s = FileServer()
    request.addfinalizer(s.close)
    return s
