import os

import numpy as np
import pytest

os.environ.setdefault("CLNET_QUIET", "1")

import clnet  # noqa: E402


def two_devices_env() -> dict:
    """An environment in which a child process sees at least two OpenCL devices.

    A machine with only what the README installs has one (pip's PoCL). PoCL makes one device per
    driver named in POCL_DEVICES, so it is asked for its multi-threaded driver and its single-threaded
    'basic' one: two devices with their own names, contexts, compiled programs and tuning."""
    env = {**os.environ, "CLNET_QUIET": "1"}
    if len(clnet.devices()) < 2:
        env["POCL_DEVICES"] = "pthread basic"
    return env


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
