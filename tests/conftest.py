import os

import numpy as np
import pytest

os.environ.setdefault("CLNET_QUIET", "1")

import clnet  # noqa: E402


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
