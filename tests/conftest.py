import os
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("CLNET_QUIET", "1")

import clnet  # noqa: E402


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
