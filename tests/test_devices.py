"""Device choice: by index or name, the measured default among CPU runtimes, and the loader
entries clnet writes for Intel's pip-installed runtime."""
import io
import json
import os
import subprocess
import sys
from dataclasses import replace
from importlib import metadata
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

import clnet
from clnet.cl import device as cl_device
from clnet.cl import icd, probe
from clnet.cl.device import DeviceInfo
from clnet.products import tile_candidates
from clnet.layers.recurrent import step_width


def fake(index, name, platform="Portable Computing Language", version="OpenCL 3.0 PoCL 3.0", kind="CPU"):
    return DeviceInfo(index=index, name=name, vendor="v", platform=platform, platform_version=version,
                      driver="1", type=kind, compute_units=2, global_mem=1 << 30, local_mem=1 << 16,
                      max_work_group=4096, fp64=True, cl_device=None)


def test_choice_by_index_name_platform_and_environment(monkeypatch):
    found = clnet.devices()
    last = found[-1]
    assert cl_device.choose(str(last.index)) == last
    assert cl_device.reason == "asked for: " + str(last.index)
    assert cl_device.choose(last.platform.upper()) == next(d for d in found if d.platform == last.platform)
    monkeypatch.setenv("CLNET_DEVICE", str(last.index))
    assert cl_device.choose() == last
    assert cl_device.reason == f"CLNET_DEVICE: {last.index}"
    with pytest.raises(clnet.DeviceError, match=rf"device index 99 does not exist; there are {len(found)} devices"):
        cl_device.choose(99)
    with pytest.raises(clnet.DeviceError, match="no device name or platform contains 'no-such-gpu'"):
        cl_device.choose("no-such-gpu")


def test_a_platform_match_comes_before_a_device_name_match(monkeypatch):
    # On an Intel CPU PoCL names its device for the processor: `intel` must still mean Intel's runtime.
    pocl = fake(0, "cpu-skylake-avx512-Intel(R) Xeon(R) Processor", version="OpenCL 3.0 PoCL 5.0+debian")
    intel = fake(1, "Intel(R) Xeon(R) Processor", "Intel(R) OpenCL", "OpenCL 3.1 LINUX")
    gpu = fake(2, "NVIDIA H200", "NVIDIA CUDA", "OpenCL 3.0 CUDA 13.0.98", kind="GPU")
    monkeypatch.setattr(cl_device, "devices", lambda: [pocl, intel, gpu])
    assert cl_device.choose("intel") == intel
    assert cl_device.choose("Intel(R) OpenCL") == intel
    assert cl_device.choose("PoCL 5.0") == pocl
    assert cl_device.choose("nvidia") == gpu
    assert cl_device.choose("skylake") == pocl  # a name only PoCL's device has
    assert cl_device.choose("xeon") == pocl  # both names: the first
    assert cl_device.choose("h200") == gpu
    monkeypatch.setenv("CLNET_DEVICE", "INTEL")
    assert cl_device.choose() == intel and cl_device.reason == "CLNET_DEVICE: 'INTEL'"


def test_default_is_the_first_gpu_else_the_fastest_cpu_runtime(monkeypatch, tmp_path):
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path))
    pocl30, intel, pocl31 = (fake(0, "pthread-AMD EPYC"), fake(1, "AMD EPYC", "Intel(R) OpenCL", "OpenCL 3.1 LINUX"),
                             fake(2, "pthread-haswell-AMD EPYC", version="OpenCL 3.0 PoCL 3.1"))
    seconds = {pocl30.name: 9e-3, intel.name: 3e-3, pocl31.name: 4e-3}
    measured = []

    def measure(info):
        measured.append(info.name)
        return seconds[info.name]

    monkeypatch.setattr(probe, "step_seconds", measure)
    monkeypatch.setattr(cl_device, "devices", lambda: [pocl30, intel, pocl31])
    monkeypatch.delenv("CLNET_DEVICE", raising=False)
    assert cl_device.choose() == intel
    assert measured == [pocl30.name, intel.name, pocl31.name]
    assert "the fastest CPU runtime" in cl_device.reason and "1: 3.00 ms" in cl_device.reason
    # Kept in the cache: a second process measures nothing, and a faster runtime measured later
    # (here: its entry edited) wins.
    stored = json.loads((tmp_path / "devices.json").read_text())
    assert sorted(stored.values()) == [3e-3, 4e-3, 9e-3]
    assert cl_device.choose() == intel and len(measured) == 3
    stored[next(k for k in stored if k.startswith(pocl31.name))] = 1e-3
    (tmp_path / "devices.json").write_text(json.dumps(stored))
    assert cl_device.choose() == pocl31 and len(measured) == 3
    # A runtime whose probe fails is never the default; a GPU is, without measuring.
    monkeypatch.setattr(probe, "step_seconds", lambda info: 1 / 0)
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path / "other"))
    assert cl_device.choose() == pocl30  # all inf: the first
    assert "0: cannot run our kernels, 1: cannot run our kernels" in cl_device.reason
    gpu = fake(3, "NVIDIA H100", "NVIDIA CUDA", "OpenCL 3.0 CUDA", kind="GPU")
    monkeypatch.setattr(cl_device, "devices", lambda: [pocl30, intel, gpu])
    assert cl_device.choose() == gpu and cl_device.reason == "the first GPU"
    monkeypatch.setattr(cl_device, "devices", lambda: [pocl30])
    assert cl_device.choose() == pocl30 and cl_device.reason == "the only device"


def test_each_local_mpi_rank_takes_a_gpu_of_its_own(monkeypatch):
    """Without CLNET_DEVICE, a process that an MPI launcher (or Slurm) numbered on its host takes
    the GPUs in turn; with one GPU, or none, the default stays."""
    cpu = fake(0, "pthread-AMD EPYC")
    gpus = [fake(i, f"NVIDIA H200 #{i}", "NVIDIA CUDA", "OpenCL 3.0 CUDA", kind="GPU") for i in (1, 2, 3, 4)]
    monkeypatch.setattr(cl_device, "devices", lambda: [cpu, *gpus])
    monkeypatch.delenv("CLNET_DEVICE", raising=False)
    for variable in cl_device.LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert cl_device.choose() == gpus[0] and cl_device.reason == "the first GPU"
    for variable in cl_device.LOCAL_RANK_VARIABLES:
        for rank in (0, 1, 3, 5):
            monkeypatch.setenv(variable, str(rank))
            assert cl_device.choose() == gpus[rank % 4]
            assert cl_device.reason == f"GPU {rank % 4} of the 4 for local MPI rank {rank} ({variable})"
        monkeypatch.delenv(variable)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    monkeypatch.setenv("CLNET_DEVICE", "0")  # asked for: that one
    assert cl_device.choose() == cpu
    monkeypatch.delenv("CLNET_DEVICE")
    monkeypatch.setattr(cl_device, "devices", lambda: [cpu, gpus[0]])
    assert cl_device.choose() == gpus[0] and cl_device.reason == "the first GPU"


def test_probe_measures_a_real_training_step(rt):
    seconds = probe.step_seconds(rt.info)
    assert 0 < seconds < 1


def test_vendor_entries_keep_the_loaders_own_and_add_intels(tmp_path):
    system = tmp_path / "vendors"
    system.mkdir()
    (system / "pocl.icd").write_text("libpocl.so.2\n")
    (system / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    (system / "readme.txt").write_text("not an entry")
    entries = icd.vendor_entries(str(system))
    assert entries == {"pocl.icd": "libpocl.so.2", "nvidia.icd": "libnvidia-opencl.so.1"}
    assert icd.vendor_entries(str(system / "pocl.icd")) == {"pocl.icd": "libpocl.so.2"}  # a single file
    assert icd.vendor_entries(str(tmp_path / "missing")) == {}
    entries["clnet-intel-cpu.icd"] = "/prefix/lib/libintelocl.so"
    written = icd.write_vendor_dir(entries, tmp_path / "cache")
    assert {f.name: f.read_text() for f in written.iterdir()} == {
        "pocl.icd": "libpocl.so.2\n", "nvidia.icd": "libnvidia-opencl.so.1\n",
        "clnet-intel-cpu.icd": "/prefix/lib/libintelocl.so\n"}
    assert icd.write_vendor_dir(dict(entries), tmp_path / "cache") == written  # same entries, same place
    del entries["nvidia.icd"]
    assert icd.write_vendor_dir(entries, tmp_path / "cache") != written


def _intel_installed():
    try:
        metadata.distribution("intel-opencl-rt")
        return True
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.parametrize("intel", ["1", "0"])
def test_intel_runtime_is_listed_only_when_installed_and_not_switched_off(intel, tmp_path):
    # A fresh process: the loader reads its entries once, at the first platform query.
    # OCL_ICD_VENDORS as a clnet parent process leaves it, with Intel's entry: the child decides
    # afresh, and with CLNET_INTEL=0 does not list it.
    library = icd._package_file("intel-opencl-rt", "libintelocl.so") or "libintelocl.so"
    inherited = icd.write_vendor_dir({"clnet-intel-cpu.icd": str(library)}, tmp_path)
    env = {**os.environ, "CLNET_INTEL": intel, "CLNET_CACHE_DIR": str(tmp_path), "CLNET_DEVICE": "0",
           "OCL_ICD_VENDORS": str(inherited)}
    out = subprocess.run([sys.executable, "-m", "clnet", "devices"], capture_output=True, text=True, check=True,
                         env=env).stdout
    listed = "Intel(R) OpenCL" in out
    if not _intel_installed():
        assert not listed and "Intel's CPU runtime: not installed (pip install 'clnet[intel]'" in out
    elif intel == "0":
        assert not listed and "Intel's CPU runtime: installed, not registered (CLNET_INTEL=0)" in out
    else:
        assert listed and "Intel's CPU runtime: registered" in out
    assert "PoCL" in out, "pip's PoCL stays visible next to Intel's runtime"
    assert "chosen: CLNET_DEVICE: 0" in out


def test_a_compiler_that_does_not_know_the_cpu_is_a_device_error(rt, monkeypatch):
    """pip's PoCL 3.0 (LLVM 14) refuses every build on CPUs newer than its LLVM, AMD's Zen 5 for
    one: one DeviceError that says so and names the runtimes to install, not a BuildError per
    kernel variant ending in 'none of the dense kernel variants builds'."""
    from clnet.cl import runtime
    from clnet.products import usable_candidates

    class Refused:
        def __init__(self, context, text):
            pass

        def build(self, options):
            raise cl.RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\nerror: unknown target CPU "
                                  "'generic'\nDevice pthread-AMD EPYC failed to build the program")

    monkeypatch.setattr(runtime.Runtime, "_cached_binary", lambda self, text, flags: None)
    monkeypatch.setattr(runtime.cl, "Program", Refused)
    expected = (r"cannot compile OpenCL kernels for this CPU: its compiler does not know the processor "
                r".*pip install 'clnet\[intel\]'.*apt install pocl-opencl-icd")
    with pytest.raises(clnet.DeviceError, match=expected):
        usable_candidates(runtime.Runtime(rt.info), np.float32)
    with pytest.raises(clnet.DeviceError, match=expected):  # so the probe never chooses it
        probe.step_seconds(rt.info)


PIP_POCL_ALONE = """
import sys
import pyopencl as cl
import clnet
from clnet.cl import probe
(device,) = clnet.devices()
assert device.platform == "Portable Computing Language", device
source = {"scalar": "__kernel void k(__global float *a) { a[0] = 1; }",
          # a 512-bit vector builtin, as clnet's kernels use on AVX-512 CPUs (VW=16)
          "wide": "__kernel void k(__global float16 *a) { a[0] = select((float16)(0), (float16)(1), a[1] > 0); }"}
if len(sys.argv) > 1:  # only build (a process of its own: LLVM may abort it)
    program = cl.Program(cl.Context([device.cl_device]), source[sys.argv[1]]).build()
    program.binaries  # PoCL generates code here
    sys.exit(0)
try:
    cl.Program(cl.Context([device.cl_device]), source["scalar"]).build()
    knows = True
except cl.RuntimeError as error:
    assert "unknown target CPU" in str(error), error
    knows = False
try:
    seconds = probe.step_seconds(clnet.runtime().info)
    print("trained", int(device.builds_without_avx512), seconds)
except clnet.DeviceError as error:
    print("refused", "knows" if knows else "unknown", error)
"""


def test_pips_pocl_alone_trains_or_says_why_it_cannot(tmp_path):
    """With nothing but pip's PoCL: where its compiler builds a kernel at all, a training step runs,
    and clnet keeps to halves of 512-bit vectors exactly where a builtin on one aborts the build
    (Zen 4: LLVM 14 compiles for Zen 3, without AVX-512, beside its AVX-512 kernel library); where
    it knows no target for this CPU (Zen 5 and pip's PoCL 3.0), the DeviceError says so."""
    env = {**os.environ, "OCL_ICD_VENDORS": str(tmp_path), "CLNET_INTEL": "0", "CLNET_DEVICE": "",
           "CLNET_QUIET": "1", "POCL_CACHE_DIR": str(tmp_path / "pocl"), "CLNET_CACHE_DIR": str(tmp_path / "clnet")}
    run = lambda *args: subprocess.run([sys.executable, "-c", PIP_POCL_ALONE, *args], capture_output=True, text=True,
                                       env=env, timeout=600)
    out = run().stdout
    if out.startswith("trained"):
        halved = out.split()[1] == "1"
        assert (run("wide").returncode == 0) != halved, out
    else:
        assert out.startswith("refused unknown"), out
        assert "cannot compile OpenCL kernels for this CPU" in out and "clnet[intel]" in out


def test_pips_pocl_3_0_on_zen_4_compiles_for_256_bit_registers(monkeypatch):
    """The rule: pip's PoCL 3.0 (LLVM 14) on an AMD CPU of family 25 with AVX-512; not on Zen 3 (no
    AVX-512), not an Intel CPU, not PoCL 3.1 (LLVM 15), not a GPU. There the register the tuner
    assumes is its target's 32 bytes, a kernel holds vectors of one or two of them, as on an AVX2
    CPU, and programs are built with HALVED_BUILTINS (common.cl)."""
    zen4 = {"vendor_id": "AuthenticAMD", "cpu family": "25", "flags": {"avx2", "avx512f"}}
    monkeypatch.setattr(cl_device, "host_cpu", lambda: zen4)
    avx512 = SimpleNamespace(native_vector_width_float=16, native_vector_width_double=8)
    pocl30 = replace(fake(0, "pthread-AMD EPYC", version="OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, RELOC, LLVM 14.0.6"),
                     cl_device=avx512)
    assert pocl30.builds_without_avx512
    assert pocl30.widest_vector_bytes == 64 and pocl30.vector_bytes(4) == pocl30.vector_bytes(8) == 32
    as_runtime = SimpleNamespace(info=pocl30)
    for dtype in (np.float32, np.float64):
        assert {tiles["VW"] * np.dtype(dtype).itemsize for tiles in tile_candidates(as_runtime, dtype)} == {32, 64}
    assert step_width(as_runtime, np.float32) == step_width(as_runtime, np.float64) == 8
    pocl31 = replace(fake(1, "pthread-znver4-AMD EPYC", version="OpenCL 3.0 PoCL 3.1+debian  Linux, LLVM 15.0.6"),
                     cl_device=avx512)
    gpu = fake(2, "gfx1100", version="OpenCL 3.0 PoCL 3.0 LLVM 14.0.6", kind="GPU")
    assert not pocl31.builds_without_avx512 and not gpu.builds_without_avx512
    assert pocl31.widest_vector_bytes == 64 and pocl31.vector_bytes(4) == 64
    assert step_width(SimpleNamespace(info=pocl31), np.float32) == 16
    for other in ({**zen4, "flags": {"avx2"}}, {**zen4, "vendor_id": "GenuineIntel", "cpu family": "6"},
                  {**zen4, "cpu family": "26"}):
        monkeypatch.setattr(cl_device, "host_cpu", lambda: other)
        assert not pocl30.builds_without_avx512, other


def test_programs_say_whether_builtins_are_halved_and_whether_the_device_is_a_cpu(rt):
    """Every program is built with HALVED_BUILTINS, 1 exactly where the device needs it, and
    CPU_DEVICE (common.cl's prefetches), 1 exactly on a CPU."""
    flags = rt.program(("layers/merge.cl",), np.float32).get_build_info(rt.device, cl.program_build_info.OPTIONS)
    assert f"-DHALVED_BUILTINS={int(rt.info.builds_without_avx512)}" in flags.split()
    assert f"-DCPU_DEVICE={int(not rt.info.is_gpu)}" in flags.split()


def test_the_device_table_says_which_devices_have_native_half_arithmetic_and_what_a_16_bit_policy_computes_in(
        monkeypatch):
    """`clnet devices`' last three columns: float64 (cl_khr_fp64), native half arithmetic
    (cl_khr_fp16), as each device reports them, and what a 16-bit policy computes in there: float32
    on every CPU (Intel's runtime has cl_khr_fp16, and no clnet kernel uses it), the matrix
    products in 16 bits on NVIDIA's tensor cores; float32 everywhere with CLNET_TENSOR_CORES=0,
    which leaves the tensor cores out."""
    monkeypatch.delenv("CLNET_TENSOR_CORES", raising=False)
    out = io.StringIO()
    cl_device.print_table(out)
    header, *rows = out.getvalue().splitlines()
    assert header.split()[-3:] == ["fp64", "fp16", "16-bit"]
    assert any(line.startswith("16-bit = what a mixed_bfloat16 or mixed_float16 policy computes in") for line in rows)
    for info in cl_device.devices():
        row = next(line for line in rows if line.split()[0].rstrip("*") == str(info.index))
        assert row.split()[-2] == ("yes" if "cl_khr_fp16" in info.cl_device.extensions else "no")
        assert info.fp16 == ("cl_khr_fp16" in info.cl_device.extensions)
        assert row.split()[-1] == ("products" if info.tensor_cores else "float32")
        if not info.is_gpu:
            assert row.split()[-1] == "float32"
    monkeypatch.setenv("CLNET_TENSOR_CORES", "0")
    out = io.StringIO()
    cl_device.print_table(out)
    rows = out.getvalue().splitlines()[1:]
    for info in cl_device.devices():
        row = next(line for line in rows if line.split()[0].rstrip("*") == str(info.index))
        assert row.split()[-1] == "float32"


def test_pocl_threads_follow_the_cores_this_process_may_run_on(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    monkeypatch.delenv("POCL_MAX_PTHREAD_COUNT", raising=False)
    cl_device.limit_pocl_threads()
    assert os.environ["POCL_MAX_PTHREAD_COUNT"] == "2"
    monkeypatch.setenv("POCL_MAX_PTHREAD_COUNT", "7")  # the user's setting stays
    cl_device.limit_pocl_threads()
    assert os.environ["POCL_MAX_PTHREAD_COUNT"] == "7"
    monkeypatch.delenv("POCL_MAX_PTHREAD_COUNT")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # every core: PoCL's own count
    cl_device.limit_pocl_threads()
    assert "POCL_MAX_PTHREAD_COUNT" not in os.environ


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs a process that may run on two cores or more, to keep it to one (Linux)")
def test_pocl_on_one_core_of_several_runs_one_thread():
    """A process kept to one core (as taskset or a bound MPI rank would) gets a PoCL device of one
    compute unit, not one per core of the machine."""
    script = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
              "from clnet.cl.device import devices; "
              "print([d.compute_units for d in devices() if 'PoCL' in d.platform_version])")
    env = {k: v for k, v in os.environ.items() if k != "POCL_MAX_PTHREAD_COUNT"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    units = json.loads(run.stdout.strip().splitlines()[-1])
    assert units and all(n == 1 for n in units), units
