"""OpenCL runtimes that pip installs but the ICD loader cannot find by itself.

Intel's CPU runtime (`pip install 'clnet[intel]'`: intel-opencl-rt, intel-cmplr-lib-rt, tbb; Intel's
EULA, so only on request) is the fastest CPU runtime we measured for our kernels, on AMD CPUs
too (benchmarks/RESULTS.md). Its wheel is made for conda: the ICD file it installs (<prefix>/etc/OpenCL/vendors/
intel-cpu.icd) names a placeholder path, and nothing points the loader at that directory anyway.
So before pyopencl first asks for platforms, clnet writes a vendor directory of its own into the
cache dir — the corrected Intel entry next to copies of every entry the loader would have read
(the system's /etc/OpenCL/vendors, or the user's OCL_ICD_VENDORS) — points OCL_ICD_VENDORS at it,
and loads Intel's compiler and TBB libraries (RTLD_GLOBAL) wherever pip put them, so that
libintelocl.so finds them. pyopencl's own PoCL entry lives next to its bundled loader, which reads
it whatever OCL_ICD_VENDORS says. Which CPU runtime then runs is decided by a measured probe
(clnet/cl/probe.py), not here. CLNET_INTEL=0 leaves the loader alone.

On Windows (its other wheel) the loader is Khronos's, bundled with pyopencl, and it reads the
OCL_ICD_FILENAMES environment variable beside the registry: clnet adds intelocl64.dll's path
there, and the directories of the DLLs it loads to PATH (pip puts all three packages' into
<prefix>/Library/bin, where the loader's search starts anyway). macOS and ARM Linux have no Intel
wheel; the extra installs nothing there.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
from importlib import metadata
from pathlib import Path

from .. import system
from ..cache import cache_dir, write_atomically

# What the loader reads when OCL_ICD_VENDORS is not set (ocl-icd and Khronos's loader alike;
# ocl-icd also honours OPENCL_VENDOR_PATH).
DEFAULT_VENDORS = "/etc/OpenCL/vendors"
# Intel's runtime library in its wheel, by system (its wheels are for x86-64 Linux and Windows).
INTEL_LIBRARY = {"Linux": "libintelocl.so", "Windows": "intelocl64.dll"}
# Libraries it needs, by package, in load order: on Linux loaded here (libintelocl.so's RUNPATH is
# only its own directory); on Windows their directories go on PATH.
INTEL_DEPENDENCIES = {
    "Linux": {"intel-cmplr-lib-rt": ("libintlc.so.5", "libirng.so", "libimf.so", "libsvml.so"), "tbb": ("libtbb.so.12",)},
    "Windows": {"intel-cmplr-lib-rt": ("svml_dispmd.dll", "libmmd.dll"), "tbb": ("tbb12.dll",)},
}

notes: list[str] = []  # what register() did or why not, for `clnet devices`
_done = False


def _package_file(package: str, name: str) -> Path | None:
    """Where pip put the file `name` of an installed package, or None."""
    try:
        files = metadata.distribution(package).files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == name:
            path = Path(file.locate()).resolve()
            if path.exists():
                return path
    return None


def vendor_entries(vendors: str | None) -> dict[str, str]:
    """The .icd entries (file name -> library it names) that the loader reads from `vendors`,
    a directory or a single .icd file (as OCL_ICD_VENDORS may be)."""
    path = Path(vendors or os.environ.get("OPENCL_VENDOR_PATH") or DEFAULT_VENDORS)
    files = sorted(path.glob("*.icd")) if path.is_dir() else [path] if path.is_file() else []
    entries = {}
    for file in files:
        try:
            entries[file.name] = file.read_text(encoding="utf-8").strip()
        except OSError:
            continue
    return entries


def write_vendor_dir(entries: dict[str, str], root: Path) -> Path:
    """A directory holding these .icd entries, named by its contents so that processes sharing
    the cache never rewrite one another's."""
    digest = hashlib.sha256(repr(sorted(entries.items())).encode()).hexdigest()[:16]
    directory = root / "opencl-vendors" / digest
    for name, library in entries.items():
        file = directory / name
        if not file.exists() or file.read_text(encoding="utf-8").strip() != library:
            write_atomically(file, (library + "\n").encode())
    return directory


def register() -> list[str]:
    """Make pip-installed runtimes visible to the loader (once per process; it only helps before
    pyopencl's first platform query). Returns the notes."""
    global _done
    if _done:
        return notes
    _done = True
    given = os.environ.get("OCL_ICD_VENDORS")
    if given and Path(given).parent == cache_dir() / "opencl-vendors":
        del os.environ["OCL_ICD_VENDORS"]  # inherited from a clnet parent process: start afresh
    library = INTEL_LIBRARY.get(system.name()) if system.is_x86_64() else None
    intel = library and _package_file("intel-opencl-rt", library)
    if not intel:
        notes.append("Intel's CPU runtime: not installed (pip install 'clnet[intel]' adds it on x86-64 Linux and Windows)"
                     if library else f"Intel's CPU runtime: has no wheel for {system.describe()}")
        return notes
    if os.environ.get("CLNET_INTEL") == "0":
        notes.append("Intel's CPU runtime: installed, not registered (CLNET_INTEL=0)")
        return notes
    try:
        dependencies = []
        for package, names in INTEL_DEPENDENCIES[system.name()].items():
            for name in names:
                path = _package_file(package, name)
                if path is None:
                    raise OSError(f"{name} from pip package {package!r} not found")
                dependencies.append(path)
        where = _register_windows(intel, dependencies) if system.name() == "Windows" else _register_linux(intel, dependencies)
    except OSError as error:
        notes.append(f"Intel's CPU runtime: installed but not usable: {error}")
        return notes
    notes.append(f"Intel's CPU runtime: registered ({intel}; {where})")
    return notes


def _register_linux(intel: Path, dependencies: list[Path]) -> str:
    for path in dependencies:
        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    entries = vendor_entries(os.environ.get("OCL_ICD_VENDORS"))
    entries["clnet-intel-cpu.icd"] = str(intel)
    directory = write_vendor_dir(entries, cache_dir())
    os.environ["OCL_ICD_VENDORS"] = str(directory)
    return f"loader entries in {directory}"


def _register_windows(intel: Path, dependencies: list[Path]) -> str:
    """Khronos's loader reads OCL_ICD_FILENAMES (';'-separated) before the registry's vendors, so the
    GPU drivers registered there stay listed too."""
    folders = list(dict.fromkeys(str(path.parent) for path in (intel, *dependencies)))
    path_entries = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join([*[f for f in folders if f not in path_entries], *filter(None, path_entries)])
    files = [f for f in os.environ.get("OCL_ICD_FILENAMES", "").split(";") if f]
    if str(intel) not in files:
        os.environ["OCL_ICD_FILENAMES"] = ";".join([*files, str(intel)])
    return "OCL_ICD_FILENAMES names it"
