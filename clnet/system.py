"""What differs between the operating systems clnet installs on (Linux, Windows, macOS): where the
cache lives, how a file is replaced and made durable, whether a process still lives, and what gives
a machine an OpenCL device when it has none.

Everything asks `name()` and `machine()` at call time, so that tests can play each system.
"""
from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path

# os.replace and os.unlink on Windows fail while another process holds the file open without
# FILE_SHARE_DELETE (a reader of the checkpoint, an antivirus scan, Explorer's preview); such holds
# are usually short, so the replace is tried again over about two seconds before the error stands.
REPLACE_RETRY_SECONDS = (0.01, 0.03, 0.1, 0.3, 0.6, 1.0)


def name() -> str:
    """'Linux', 'Windows', 'Darwin' (macOS), ...: platform.system()."""
    return platform.system()


def machine() -> str:
    """The processor architecture as the system names it: 'x86_64', 'AMD64' (Windows), 'aarch64',
    'arm64' (macOS, Windows on ARM), ...: platform.machine()."""
    return platform.machine()


def describe() -> str:
    """The system and architecture in a user's words: 'Linux x86-64', 'Windows x86-64', 'macOS arm64'."""
    system = {"Darwin": "macOS"}.get(name(), name())
    arch = {"x86_64": "x86-64", "AMD64": "x86-64", "amd64": "x86-64", "ARM64": "arm64"}.get(machine(), machine())
    return f"{system} {arch}"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (Linux;
    taskset, a container's cpuset, a bound MPI rank), else the machine's."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def is_x86_64() -> bool:
    """Whether the processor is x86-64 (Linux says x86_64, Windows AMD64)."""
    return machine().lower() in ("x86_64", "amd64")


def user_cache_dir(app: str) -> Path:
    """The user's cache directory for `app` as the system names it (platformdirs): Linux
    $XDG_CACHE_HOME/app or ~/.cache/app, macOS ~/Library/Caches/app, Windows
    %LOCALAPPDATA%\\app\\Cache."""
    if name() == "Windows":
        from platformdirs.windows import Windows as Directories
    elif name() == "Darwin":
        from platformdirs.macos import MacOS as Directories
    else:
        from platformdirs.unix import Unix as Directories
    return Path(Directories(app, appauthor=False).user_cache_dir)


def replace(source: Path, target: Path) -> None:
    """Rename `source` over `target` in one step (os.replace: atomic on every system, so a reader
    sees the old file or the new one). On Windows a target that another process holds open refuses
    the rename for a while: it is tried again (REPLACE_RETRY_SECONDS) before the PermissionError,
    which names the target and says why, is raised."""
    for delay in (*REPLACE_RETRY_SECONDS, None):
        try:
            os.replace(source, target)
            return
        except PermissionError as error:
            if name() != "Windows":
                raise
            if delay is None:
                raise PermissionError(error.errno, f"{error.strerror}: another program may have it open "
                                      "(close it and try again; the file there is unchanged)", str(target)) from error
            time.sleep(delay)


@contextlib.contextmanager
def exclusive(path: Path):
    """Hold an exclusive lock on the file `path` (created if missing) while the block runs: another
    process asking for the same lock waits until it is released. fcntl.flock where the system has
    it (Linux, macOS); msvcrt.locking on Windows, on the file's first byte (which retries for about
    10 seconds before its OSError)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        try:
            import fcntl
        except ImportError:  # Windows
            import msvcrt
            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)
            try:
                yield
            finally:
                f.seek(0)
                msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def fsync_file(path: Path) -> None:
    """Flush a file's contents to the disk (opened for writing: Windows's _commit refuses a
    read-only handle)."""
    _fsync(path, os.O_RDWR | getattr(os, "O_BINARY", 0))


def fsync_directory(path: Path) -> None:
    """Make a rename in `path` durable: fsync the directory on POSIX systems. Windows cannot open a
    directory as a file, and NTFS journals the rename itself."""
    if name() != "Windows":
        _fsync(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this machine still runs. On Windows os.kill(pid, 0) would terminate
    the process (it calls TerminateProcess with any signal but the console ones), so the process
    is asked for its exit code instead."""
    if name() == "Windows":
        return _windows_process_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
STILL_ACTIVE = 259
ERROR_ACCESS_DENIED = 5


def _windows_process_alive(pid: int, kernel32=None, last_error=None) -> bool:
    """Windows's answer through kernel32 (`kernel32` and `last_error`, its GetLastError, are
    given by tests, which run elsewhere)."""
    import ctypes
    from ctypes import wintypes
    if kernel32 is None:
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        kernel32.OpenProcess.restype = wintypes.HANDLE
        kernel32.OpenProcess.argtypes = (wintypes.DWORD, wintypes.BOOL, wintypes.DWORD)
        kernel32.GetExitCodeProcess.argtypes = (wintypes.HANDLE, ctypes.POINTER(wintypes.DWORD))
        kernel32.CloseHandle.argtypes = (wintypes.HANDLE,)
        last_error = ctypes.get_last_error
    handle = kernel32.OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, False, pid)
    if not handle:
        return last_error() == ERROR_ACCESS_DENIED  # it exists, another user's
    try:
        code = wintypes.DWORD()
        return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def device_install_hint() -> str:
    """The one command that gives this system an OpenCL device clnet can use, and what it installs."""
    system = name()
    if system == "Linux" and is_x86_64():
        return ("pip install pocl-binary-distribution  (PoCL, the CPU device `pip install clnet` brings on "
                "x86-64 Linux), or install your GPU vendor's OpenCL driver")
    if system == "Linux":
        return ("sudo apt install pocl-opencl-icd  (the distribution's PoCL, an OpenCL device for this CPU: "
                "pip has none for it), or install your GPU vendor's OpenCL driver")
    if system == "Windows" and is_x86_64():
        return ("pip install \"clnet[intel]\"  (Intel's OpenCL runtime, for any x86-64 CPU), or install your "
                "GPU vendor's driver, which brings OpenCL")
    if system == "Windows":
        return "install your GPU vendor's driver, which brings OpenCL (pip has no CPU device for Windows on ARM)"
    if system == "Darwin":
        return ("pip install --force-reinstall pyopencl  (its macOS wheel uses Apple's OpenCL, which every "
                "Mac has: a pyopencl built from source may not)")
    return "install an OpenCL driver for this system (PoCL, https://portablecl.org, runs on most CPUs)"
