"""Keeping a virtual machine's idle CPUs awake while PoCL's CPU device runs clnet's work.

PoCL's worker threads sleep on a condition variable whenever its queue is empty and are woken for
each kernel. On a virtual machine a vCPU with nothing to run halts, and waking it again goes
through the hypervisor; on the 2-vCPU machines our benchmarks run on that took, in spells, long
enough that one worker ran most of a kernel's work-groups while the other was still waking
(benchmarks/RESULTS.md, PoCL's half-speed spells: LSTM(128)'s step 50-61 ms against 29-32 ms with
the cores kept awake). Intel's runtime (TBB) and PyTorch's OpenMP threads spin a while before
they sleep, and do not see it.

So while fit, evaluate or predict drive a PoCL CPU device on a virtual machine (Linux, the CPU's
`hypervisor` flag), clnet runs one spinning process per core the device uses, at SCHED_IDLE
priority: Linux runs such a process only on a core that nothing else wants, and a waking worker
takes the core from it at once, so the spinners cost the work nothing and only keep the vCPUs
from halting. Between those calls they are stopped (SIGSTOP), and they die with this process
(PR_SET_PDEATHSIG, and a check of their parent). `CLNET_KEEP_AWAKE=0` turns this off, `=1` turns
it on for any CPU device on any Linux machine.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys

from .. import system

# A spinner: killed with its parent (prctl PR_SET_PDEATHSIG = 1, SIGKILL), idle priority; it says
# so on stdout, and only then may it be stopped (stopped before the prctl, it would outlive a parent
# that then dies); then a loop that also ends once its parent is gone (one that died before the prctl).
SPINNER = """\
import ctypes, os, sys
ctypes.CDLL(None).prctl(1, 9)
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
parent = int(sys.argv[1])
sys.stdout.write("ready")
sys.stdout.flush()
while os.getppid() == parent:
    for _ in range(1 << 22):
        pass
"""


def on_virtual_machine(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU says it runs under a hypervisor (Linux's /proc/cpuinfo `hypervisor` flag)."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return "hypervisor" in line.split()
    except OSError:
        pass
    return False


def wanted(info) -> bool:
    """Whether clnet keeps the cores awake for device `info` (a DeviceInfo): CLNET_KEEP_AWAKE if set
    ("1" for any CPU device), else for PoCL's CPU device on a virtual machine; Linux only."""
    if system.name() != "Linux" or info.is_gpu:
        return False
    setting = os.environ.get("CLNET_KEEP_AWAKE")
    if setting is not None:
        return setting.strip() == "1"
    return "PoCL" in info.platform_version and on_virtual_machine()


class Spinners:
    """`count` spinning processes, running while the context is entered (re-entrant), stopped
    outside it."""

    def __init__(self, count: int):
        self.count = count
        self.processes: list[subprocess.Popen] = []
        self.depth = 0
        self.owner = os.getpid()

    def __enter__(self):
        if self.depth == 0:
            self._resume()
        self.depth += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        if self.depth == 0:
            self._signal(signal.SIGSTOP)

    def _resume(self):
        if self.owner != os.getpid():  # a forked child: its parent's spinners are not its own
            self.processes, self.owner = [], os.getpid()
        self.processes = [p for p in self.processes if p.poll() is None]
        started = [subprocess.Popen([sys.executable, "-S", "-E", "-c", SPINNER, str(os.getpid())],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                   for _ in range(self.count - len(self.processes))]
        for process in started:
            with process.stdout:
                ready = process.stdout.read(5) == b"ready"
            if ready:
                self.processes.append(process)
            else:  # (a system that refuses SCHED_IDLE or prctl: no spinners, and the work runs as before)
                process.kill()
                process.wait()
                self.count = len(self.processes)
        self._signal(signal.SIGCONT)

    def _signal(self, number: int):
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                if process.poll() is None:
                    os.kill(process.pid, number)

    def close(self):
        """Kill the spinners (a stopped process dies of SIGKILL too)."""
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        for process in self.processes:
            process.wait()
        self.processes = []


_spinners: Spinners | None = None


def keep_awake(info):
    """A context manager in which the cores device `info` runs on are kept awake where `wanted`
    says so (the process's one Spinners, made at the first call), else one that does nothing."""
    global _spinners
    if not wanted(info):
        return contextlib.nullcontext()
    if _spinners is None:
        _spinners = Spinners(max(1, min(system.usable_cores(), info.compute_units)))
        atexit.register(_spinners.close)
    return _spinners


def stop_all() -> None:
    """Kill the process's spinners, if any (the next keep_awake makes new ones; exit kills them too)."""
    if _spinners is not None:
        _spinners.close()
