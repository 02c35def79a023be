"""Device discovery and choice.

The default device is the first GPU, else the CPU runtime that runs our kernels fastest in a
short measured probe (clnet/cl/probe.py, cached): pip's PoCL 3.0, Debian's PoCL and Intel's
runtime (clnet[intel], registered by clnet/cl/icd.py) can all be installed at once, they differ
by up to three times in speed, and neither "platform 0" nor a version string says which is fast.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pyopencl as cl

from .. import system
from . import icd


class DeviceError(RuntimeError):
    """No usable OpenCL device, or the one asked for does not exist or lacks a feature (float64
    without `cl_khr_fp64`, a CPU that the runtime's compiler does not know). The message says what
    was found and what to install or set."""


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    vendor: str
    platform: str
    platform_version: str
    driver: str
    type: str
    compute_units: int
    global_mem: int
    local_mem: int
    max_work_group: int
    fp64: bool
    cl_device: cl.Device
    # Native half arithmetic in OpenCL C (cl_khr_fp16): where a 16-bit policy could compute in
    # half rather than in float. NVIDIA's OpenCL and pip's PoCL 3.0 have none.
    fp16: bool = False

    @property
    def is_gpu(self) -> bool:
        return self.type == "GPU"

    @property
    def runtime(self) -> str:
        """The OpenCL implementation, short: PoCL says its name in its version string."""
        version = self.platform_version.strip()
        return version if "PoCL" in version else f"{self.platform.strip()} {version}"

    def describe(self) -> str:
        return f"{self.name} [{self.runtime}, driver {self.driver}]"

    def vector_bytes(self, itemsize: int) -> int:
        """A CPU's SIMD register in bytes: 64 with AVX-512, else 32. PoCL 3.1 names its LLVM target
        in the device name (PoCL 3.0 and Intel's runtime do not); each reports a native vector
        width, 16 floats on AVX-512. 32 where the compiler's target has no AVX-512 though the CPU
        has it (builds_without_avx512)."""
        if self.builds_without_avx512:
            return 32
        device = self.cl_device
        native = device.native_vector_width_double if itemsize == 8 else device.native_vector_width_float
        return 64 if "avx512" in self.name.lower() or native * itemsize >= 64 else 32

    # The widest vector (VW) a kernel may hold, in bytes: two AVX2 registers, one AVX-512 register
    # (PoCL 3.1 crashes on double16).
    widest_vector_bytes = 64

    @property
    def tensor_cores(self) -> bool:
        """Whether this is an NVIDIA GPU whose tensor cores take TF32 (compute capability 8.0 or
        later), which the products' MMA form needs."""
        return self._compute_capability >= (8, 0)

    @property
    def async_copies(self) -> bool:
        """Whether this is an NVIDIA GPU of compute capability 8.0 or later, where PTX's cp.async
        copies global to local memory without a work-item's registers, several copies in flight."""
        return self._compute_capability >= (8, 0)

    @property
    def warpgroup_products(self) -> bool:
        """Whether this is an NVIDIA GPU of compute capability 9.0 (Hopper: H100, H200), whose
        wgmma instructions the products' WGMMA form uses (sm_90a only: later GPUs lack them)."""
        return self._compute_capability == (9, 0)

    @property
    def warp_shuffles(self) -> bool:
        """Whether this is an NVIDIA GPU, whose warps' 32 lanes exchange registers through PTX's
        shfl.sync (compute capability 3.0 on): common.cl's shuffle_xor (Runtime.warp_shuffles)."""
        return self._compute_capability >= (3, 0)

    @property
    def caches_programs(self) -> bool:
        """Whether the runtime keeps the programs it builds in a cache of its own, keyed by their
        source and options, so that a second process's build is a cache read and clnet keeps no
        copy (Runtime.program). PoCL does, unless POCL_KERNEL_CACHE=0; and there, asking for a
        program's binary would compile the generic form of every kernel in it, launched or not,
        which costs more than the build itself (benchmarks/RESULTS.md, the test suite's time)."""
        return "PoCL" in self.platform_version and os.environ.get("POCL_KERNEL_CACHE") != "0"

    @property
    def builds_without_avx512(self) -> bool:
        """Whether this is pip's PoCL 3.0 on an AMD CPU of family 19h with AVX-512 (Zen 4): its LLVM
        14 compiles for "znver3", which has no AVX-512, yet PoCL links the kernel library it built
        for AVX-512, and LLVM aborts the process on the first 512-bit vector builtin (vload8 and
        exp on a double8, select, fmax, ...; arithmetic, comparisons and ?: on such vectors compile
        to two 256-bit halves): "LLVM ERROR: Do not know how to scalarize this operator's operand"
        (seen on a 2-core EPYC, family 25 model 17). Nothing in its build options or environment
        changes the target. There a kernel calls each builtin on a 64-byte vector's two halves
        (HALVED_BUILTINS, HALVED_VEC and AVEC in common.cl; Runtime.program), and vector_bytes is
        the target's 32."""
        if self.type != "CPU" or "PoCL" not in self.platform_version or "LLVM 14." not in self.platform_version:
            return False
        cpu = host_cpu()
        return cpu.get("vendor_id") == "AuthenticAMD" and cpu.get("cpu family") == "25" and "avx512f" in cpu["flags"]

    @property
    def _compute_capability(self) -> tuple[int, int]:
        """An NVIDIA GPU's compute capability; (0, 0) for any other device."""
        if self.cl_device.vendor_id != 0x10DE:
            return (0, 0)
        try:
            return (self.cl_device.compute_capability_major_nv, self.cl_device.compute_capability_minor_nv)
        except cl.Error:  # an NVIDIA runtime without cl_nv_device_attribute_query
            return (0, 0)


def host_cpu() -> dict:
    """The first processor's /proc/cpuinfo fields (vendor_id, cpu family, ...), its flags as a
    set; empty where there is no /proc/cpuinfo."""
    fields: dict = {"flags": set()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return fields
    fields["flags"] = set(str(fields.get("flags", "")).split())
    return fields


def _type_name(device_type: int) -> str:
    for name in ("GPU", "CPU", "ACCELERATOR"):
        if device_type & getattr(cl.device_type, name):
            return name
    return "OTHER"


def limit_pocl_threads() -> None:
    """PoCL's CPU device starts a thread per core of the machine, also where this process may run
    on fewer (taskset, a container's cpuset, an MPI rank bound to its cores), and the threads then
    take turns on those cores (benchmarks/RESULTS.md, the Xeon's two cores). Unless the user set
    POCL_MAX_PTHREAD_COUNT, it becomes the number of cores this process may run on, before PoCL
    first starts."""
    if "POCL_MAX_PTHREAD_COUNT" in os.environ:
        return
    usable = system.usable_cores()
    if usable < (os.cpu_count() or usable):
        os.environ["POCL_MAX_PTHREAD_COUNT"] = str(usable)


def devices() -> list[DeviceInfo]:
    """Every OpenCL device of every platform, numbered as `CLNET_DEVICE` and `clnet.set_device`
    count them: a list of `DeviceInfo` (index, name, vendor, platform, driver, type, compute units,
    memory, whether it has float64, ...). Empty where no OpenCL runtime is installed; `clnet
    devices` on the command line prints the list and says which device clnet would use and why."""
    icd.register()  # before pyopencl's first platform query, which fixes the list for the process
    limit_pocl_threads()
    found = []
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # no ICD loader entry at all
        platforms = []
    for platform in platforms:
        try:
            platform_devices = platform.get_devices()
        except cl.Error:
            continue
        for d in platform_devices:
            found.append(DeviceInfo(
                index=len(found), name=d.name.strip(), vendor=d.vendor.strip(),
                platform=platform.name.strip(), platform_version=platform.version,
                driver=d.driver_version, type=_type_name(d.type),
                compute_units=d.max_compute_units, global_mem=d.global_mem_size,
                local_mem=d.local_mem_size, max_work_group=d.max_work_group_size,
                fp64=bool(d.double_fp_config) or "cl_khr_fp64" in d.extensions, cl_device=d,
                fp16="cl_khr_fp16" in d.extensions))
    return found


# Why the last choice was made, for `clnet devices`.
reason = ""


def choose(spec: str | int | None = None) -> DeviceInfo:
    """Pick a device by index or case-insensitive substring of its platform's name or version, else
    of its name (the first such device); None means CLNET_DEVICE, else the default."""
    global reason
    available = devices()
    if not available:
        raise DeviceError(no_device_message())
    origin = "asked for"
    if spec is None:
        spec = os.environ.get("CLNET_DEVICE") or None
        origin = "CLNET_DEVICE"
    if spec is None:
        chosen, reason = _default(available)
        return chosen
    text = str(spec).strip()
    if text.isdigit():
        index = int(text)
        if index >= len(available):
            raise DeviceError(f"device index {index} does not exist; there are {len(available)} "
                              f"devices (0..{len(available) - 1}): {_listing(available)}")
        reason = f"{origin}: {text}"
        return available[index]
    # A platform's name or version before a device's name: on an Intel CPU, PoCL names its device
    # for the processor ("cpu-skylake-avx512-Intel(R) Xeon(R) ..."), and `intel` means Intel's runtime.
    needle = text.lower()
    matches = ([d for d in available if needle in d.platform.lower() or needle in d.platform_version.lower()]
               or [d for d in available if needle in d.name.lower()])
    if not matches:
        raise DeviceError(f"no device name or platform contains {text!r}; devices: {_listing(available)}")
    reason = f"{origin}: {text!r}"
    return matches[0]


def no_device_message() -> str:
    """What a machine without an OpenCL device is told: its system and the command that fixes it there."""
    return f"no OpenCL device found on {system.describe()}: {system.device_install_hint()}"


# The rank of a process among those an MPI launcher started on its host: Open MPI's, MPICH's
# (Hydra) and Slurm's names for it.
LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


def local_rank() -> tuple[int, str] | None:
    """(this process's rank on its host, the variable that gave it), or None outside such a launch."""
    for name in LOCAL_RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value), name
    return None


def _default(available: list[DeviceInfo]) -> tuple[DeviceInfo, str]:
    gpus = [d for d in available if d.is_gpu]
    rank = local_rank()
    if len(gpus) > 1 and rank is not None:  # one GPU per rank (MPIDataParallel), in turn
        number, variable = rank
        return gpus[number % len(gpus)], (f"GPU {number % len(gpus)} of the {len(gpus)} for local MPI rank "
                                          f"{number} ({variable})")
    if gpus:
        return gpus[0], "the first GPU"
    if len(available) == 1:
        return available[0], "the only device"
    from .probe import SIZE, fastest
    chosen, seconds = fastest(available)
    times = ", ".join(f"{d.index}: {seconds[d.index] * 1e3:.2f} ms" if seconds[d.index] < float("inf")
                      else f"{d.index}: cannot run our kernels" for d in available)
    return chosen, (f"the fastest CPU runtime: one {'x'.join(map(str, SIZE))} dense training step takes "
                    f"{times} (measured once, kept in devices.json of the cache dir)")


def _listing(available: list[DeviceInfo]) -> str:
    return "; ".join(f"{d.index}: {d.describe()}" for d in available)


def tensor_cores_used(info: DeviceInfo) -> bool:
    """Whether clnet's products may run on this device's tensor cores (NVIDIA's, compute
    capability 8.0 on: DeviceInfo.tensor_cores), unless CLNET_TENSOR_CORES=0 leaves them out."""
    return info.tensor_cores and os.environ.get("CLNET_TENSOR_CORES") != "0"


def sixteen_bit_policy(info: DeviceInfo) -> str:
    """What a 16-bit dtype policy computes in on this device, as `clnet devices` says it: "products"
    where its matrix products (the Dense layers', attention's) may run in 16 bits on the tensor
    cores (tensor_cores_used; everything else in float32), else "float32" (every CPU runtime,
    native half arithmetic or not)."""
    return "products" if tensor_cores_used(info) else "float32"


def print_table(file=sys.stdout) -> None:
    from .runtime import current_device_index
    chosen = current_device_index()
    header = (f"{'#':>2}  {'type':<5} {'name':<34} {'platform':<40} {'CUs':>4} {'global':>9} {'local':>7} "
              f"{'fp64':>4} {'fp16':>4} {'16-bit':>7}")
    print(header, file=file)
    available = devices()
    if not available:
        print(no_device_message(), file=file)
    for d in available:
        mark = "*" if d.index == chosen else " "
        print(f"{d.index:>2}{mark} {d.type:<5} {d.name[:34]:<34} {d.runtime[:40]:<40} "
              f"{d.compute_units:>4} {d.global_mem / 2**30:>7.1f}Gi {d.local_mem // 1024:>5}Ki "
              f"{'yes' if d.fp64 else 'no':>4} {'yes' if d.fp16 else 'no':>4} {sixteen_bit_policy(d):>7}", file=file)
    if available:
        print("* = the device clnet uses now (set CLNET_DEVICE=<index|name> to choose)", file=file)
        print("16-bit = what a mixed_bfloat16 or mixed_float16 policy computes in there: 'products' = the matrix "
              "products (the Dense layers', attention's) in 16 bits on the tensor cores, the rest in float32; "
              "'float32' = all of it (fp16 = the runtime's cl_khr_fp16, which no clnet kernel uses yet)", file=file)
    if chosen is not None:
        print(f"chosen: {reason}", file=file)
    for note in icd.notes:
        print(note, file=file)
