"""Keeping a virtual machine's cores awake while PoCL works (clnet/cl/awake.py): when it is wanted,
the spinners' priority and states, and that they never outlive their process."""
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

import clnet
from clnet.cl import awake
from clnet.layers import Dense, Input

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="SCHED_IDLE spinners are Linux's")


def state(pid: int) -> str:
    """A process's state letter (R running, S sleeping, T stopped), or "" once it is gone (a zombie
    counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            letter = stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return ""
    return "" if letter in "ZX" else letter


def wait_for(pid: int, states: str, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while (now := state(pid)) not in states and time.monotonic() < deadline:
        time.sleep(0.01)
    return now


def device(platform_version="OpenCL 3.0 PoCL 3.0-rc2  Linux", is_gpu=False, compute_units=2):
    return SimpleNamespace(platform_version=platform_version, is_gpu=is_gpu, compute_units=compute_units)


@pytest.mark.parametrize("flags, expected", [("fpu vme de pse hypervisor avx512f", True), ("fpu vme avx512f", False)])
def test_a_virtual_machine_is_told_by_the_cpus_hypervisor_flag(tmp_path, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert awake.on_virtual_machine(str(cpuinfo)) is expected
    assert awake.on_virtual_machine(str(tmp_path / "missing")) is False


def test_it_is_wanted_for_pocls_cpu_device_on_a_virtual_machine_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("CLNET_KEEP_AWAKE", raising=False)
    monkeypatch.setattr(awake.system, "name", lambda: "Linux")
    monkeypatch.setattr(awake, "on_virtual_machine", lambda: True)
    intel = device("OpenCL 3.1 LINUX")
    assert awake.wanted(device()) and not awake.wanted(intel)
    assert not awake.wanted(device("OpenCL 3.0 CUDA 13.0.98", is_gpu=True))
    monkeypatch.setattr(awake, "on_virtual_machine", lambda: False)
    assert not awake.wanted(device())
    monkeypatch.setenv("CLNET_KEEP_AWAKE", "1")  # any CPU device, any Linux machine
    assert awake.wanted(device()) and awake.wanted(intel)
    assert not awake.wanted(device(is_gpu=True))
    monkeypatch.setenv("CLNET_KEEP_AWAKE", "0")
    monkeypatch.setattr(awake, "on_virtual_machine", lambda: True)
    assert not awake.wanted(device())
    monkeypatch.setenv("CLNET_KEEP_AWAKE", "1")
    monkeypatch.setattr(awake.system, "name", lambda: "Windows")
    assert not awake.wanted(device())
    monkeypatch.setenv("CLNET_KEEP_AWAKE", "0")
    assert isinstance(awake.keep_awake(device()), type(awake.contextlib.nullcontext()))


@linux_only
def test_spinners_run_at_idle_priority_inside_and_are_stopped_outside():
    spinners = awake.Spinners(2)
    try:
        with spinners:
            pids = [p.pid for p in spinners.processes]
            assert len(pids) == 2
            for pid in pids:
                assert wait_for(pid, "R") == "R"
                deadline = time.monotonic() + 10  # (the spinner sets its own policy as it starts)
                while os.sched_getscheduler(pid) != os.SCHED_IDLE and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert os.sched_getscheduler(pid) == os.SCHED_IDLE
            with spinners:  # re-entered (fit's validation pass runs evaluate's loop): still running
                pass
            assert all(wait_for(pid, "R") == "R" for pid in pids)
        assert all(wait_for(pid, "T") == "T" for pid in pids)
        spinners.processes[0].kill()  # one that died is replaced at the next entry, the other resumed
        spinners.processes[0].wait()
        with spinners:
            assert [p.pid for p in spinners.processes][0] == pids[1] and len(spinners.processes) == 2
            assert all(wait_for(p.pid, "R") == "R" for p in spinners.processes)
        pids = [p.pid for p in spinners.processes]
    finally:
        spinners.close()
    assert all(state(pid) == "" for pid in pids) and spinners.processes == []


@linux_only
@pytest.mark.parametrize("stopped", [False, True])
def test_spinners_die_with_their_process_running_or_stopped(stopped):
    parent = subprocess.run([sys.executable, "-c", f"""
import os, sys
from clnet.cl import awake
spinners = awake.Spinners(2)
spinners.__enter__()
if {stopped}:
    spinners.__exit__(None, None, None)
print(" ".join(str(p.pid) for p in spinners.processes), flush=True)
os._exit(0)  # no atexit: the spinners must go by themselves
"""], capture_output=True, text=True, timeout=60, check=True)
    pids = [int(pid) for pid in parent.stdout.split()]
    assert len(pids) == 2
    assert all(wait_for(pid, "") == "" for pid in pids)


@linux_only
def test_fit_evaluate_and_predict_keep_the_cores_awake_and_stop_them_after(monkeypatch):
    monkeypatch.setenv("CLNET_KEEP_AWAKE", "1")
    rt = clnet.runtime()
    if rt.info.is_gpu:
        pytest.skip("the spinners are for CPU devices")
    seen = []

    class Watch(clnet.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append({wait_for(p.pid, "R") for p in awake.keep_awake(rt.info).processes})

        on_test_batch_end = on_predict_batch_end = on_train_batch_end

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 8)).astype("float32"), rng.normal(size=(64, 3)).astype("float32")
    model = clnet.Sequential([Input((8,)), Dense(3)], seed=0)
    model.compile("sgd", "mse")
    try:
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[Watch()], validation_data=(x, y))
        model.evaluate(x, y, batch_size=32, callbacks=[Watch()])
        model.predict(x, batch_size=32, callbacks=[Watch()])
        assert len(seen) == 8 and all(states == {"R"} for states in seen)
        spinners = awake.keep_awake(rt.info)
        assert len(spinners.processes) == min(clnet.system.usable_cores(), rt.info.compute_units)
        assert all(wait_for(p.pid, "T") == "T" for p in spinners.processes)
        model.train_on_batch(x, y)  # the one-batch forms too, and nothing left running after
        assert all(wait_for(p.pid, "T") == "T" for p in spinners.processes)
    finally:
        awake.stop_all()


@linux_only
def test_the_runtime_probe_times_with_the_cores_kept_awake(monkeypatch):
    """cl/probe.py chooses among CPU runtimes by timing them: PoCL is timed as fit runs it, with
    its cores kept awake, not at the half speed of vCPUs waking through the hypervisor."""
    monkeypatch.setenv("CLNET_KEEP_AWAKE", "1")
    rt = clnet.runtime()
    if rt.info.is_gpu:
        pytest.skip("the spinners are for CPU devices")
    from clnet.cl import probe
    try:
        spinners = awake.keep_awake(rt.info)
        running = []
        measure = probe._measure
        monkeypatch.setattr(probe, "_measure", lambda info: running.append(
            {wait_for(p.pid, "R") for p in spinners.processes}) or measure(info))
        assert 0 < probe.step_seconds(rt.info) < 1
        assert running == [{"R"}] and all(wait_for(p.pid, "T") == "T" for p in spinners.processes)
    finally:
        awake.stop_all()
