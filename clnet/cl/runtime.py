"""The process-wide OpenCL state: the chosen device, its context and queues, the program cache,
the launch counter and the optional profiler."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import operator
import os
import re
import sys
import tempfile
import warnings
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyopencl as cl

from .._version import __version__
from ..cache import cache_dir, write_atomically
from ..system import user_cache_dir
from . import awake
from .device import DeviceError, DeviceInfo, choose

FLOATX = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}
_C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
# Integers (token and class ids) carried in the float type are exact below this; kernels read
# them as int, hence 2^31 - 1 for double.
EXACT_INTEGERS = {FLOATX["float32"]: 2**24, FLOATX["float64"]: 2**31 - 1}


ROW_GROUP = 64  # see Runtime.row_group
# wgmma.cl's HOPPER(): an sm_90a instruction inside a PTX comment (see Runtime._sm90a_program).
# A program whose kernels need them is built with -DSM90A=1.
HOPPER_OPEN, HOPPER_CLOSE = "/*SM90A: ", " :SM90A*/"
SM90A = "SM90A"


def pocl_cache_dir() -> str:
    """Where PoCL keeps the programs it builds: $POCL_CACHE_DIR, else the user's cache directory's
    pocl."""
    return os.environ.get("POCL_CACHE_DIR") or str(user_cache_dir("pocl"))


class BuildError(RuntimeError):
    """An OpenCL program did not compile; the message holds the compiler's log, and names the
    program's sources and build options. A layer of your own sees it from `rt.program(...)`."""


# What a CPU runtime's compiler says when its LLVM does not know the processor: pip's PoCL 3.0
# (LLVM 14, 2022) falls back to the target 'generic', which its own front end then refuses, on
# AMD's Zen 5 (family 1Ah) for one, so that no kernel at all builds.
UNKNOWN_CPU = "unknown target CPU"


# What to do where pip's PoCL cannot run our kernels on this CPU.
OTHER_CPU_RUNTIMES = ("Install a CPU runtime that knows it and clnet chooses it: pip install 'clnet[intel]' (Intel's "
                      "runtime, x86-64 Linux, under Intel's EULA) or the system's PoCL (Debian and Ubuntu: apt "
                      "install pocl-opencl-icd); 'python -m clnet devices' lists what clnet finds")


def unknown_cpu_message(info: DeviceInfo) -> str:
    return (f"{info.describe()} cannot compile OpenCL kernels for this CPU: its compiler does not know the "
            f"processor ({UNKNOWN_CPU!r} on every build; pip's PoCL 3.0 has LLVM 14, from 2022, which "
            f"predates e.g. AMD's Zen 5). {OTHER_CPU_RUNTIMES}")


def sm90a_ptx(ptx: bytes) -> bytes:
    """PTX with HOPPER()'s instructions uncovered and its target sm_90 made sm_90a."""
    ptx = ptx.replace(HOPPER_OPEN.encode(), b"").replace(HOPPER_CLOSE.encode(), b"")
    return re.sub(rb"^(\s*\.target\s+)sm_90\b", rb"\1sm_90a", ptx, count=1, flags=re.M)


class Runtime:
    """One device, its context and in-order queues, and everything built for it."""

    def __init__(self, info: DeviceInfo, context: cl.Context | None = None, programs: dict | None = None):
        """`context`: one shared with other devices of the platform (DataParallel's, whose
        replicas then reduce on the devices), and `programs`, the programs built in it, for all
        of its devices (NVIDIA's runtime refuses a program built for some of a context's devices:
        INVALID_KERNEL_DEFINITION, INVALID_BINARY); by default the device's own context."""
        self.info = info
        self.device = info.cl_device
        self.context = context or cl.Context([self.device])
        self.profiling = False
        self.queue = cl.CommandQueue(self.context, self.device)
        # Streamed batches are copied to the device on a second queue, so that a copy runs while
        # the previous batch computes on the first; events order the two (see data.py).
        self.transfer_queue = cl.CommandQueue(self.context, self.device)
        # Work that nothing on the main queue reads until the next join (join_side), launched with
        # `beside=True`: gradient sums, weight gradients that no input gradient waits for, the
        # attention's dL/dV and dL/dK. On a GPU, whose in-order queue leaves SMs idle between
        # dependent kernels and under small ones, they run on this second in-order queue, each
        # after everything enqueued on the main queue before it, beside the rest of the backward
        # pass, which fills those idle SMs and shortens the step (benchmarks/RESULTS.md, the tiny
        # GPT's gradient sums beside the backward pass). A CPU runtime's work-items already fill
        # its cores: one queue. Model._backward joins it before the shared gradients' sums and
        # before a distribution copies a layer's gradients; every host read or write of a tensor
        # joins it.
        self.side_queue = cl.CommandQueue(self.context, self.device) if info.is_gpu else None
        # The side queue's last kernel, until the main queue waits for it; the main queue's last
        # command if it was a kernel (else None: a side launch then waits for a marker). Waiting
        # for these events rather than for new markers: a marker is one more command per launch,
        # a noticeable cost to a short step such as the README MLP's (benchmarks/RESULTS.md, the
        # tiny GPT's gradient sums beside the backward pass).
        self.side_event: cl.Event | None = None
        self.main_event: cl.Event | None = None
        self.launches_beside = 0    # of `launches`, those on the side queue
        # A whole layer's launches beside another's (Runtime.branch): Bidirectional's backward
        # layer, independent of its forward one, runs here on a GPU while that one runs on the
        # main queue. Its recurrent sequence kernels take one work-group per batch row, which at
        # small batches leaves many of a large GPU's SMs free, so two fit side by side: a markedly
        # shorter training step for Bidirectional(LSTM(128)) over 64 steps (benchmarks/RESULTS.md,
        # the Bidirectional(LSTM) step).
        self.branch_queue = cl.CommandQueue(self.context, self.device) if info.is_gpu else None
        self.branch_event: cl.Event | None = None  # the branch queue's last kernel, until joined
        self._branch_start: cl.Event | None = None  # inside branch(): what its first launch waits for
        self._branching = False
        self._profiling_queue = None
        self._programs: dict[tuple, cl.Program] = {} if programs is None else programs
        self._shared_kernels: dict[tuple, Kernel] = {}
        self.launches = 0       # kernel launches since the runtime started (a test counts per step)
        self.events: list[tuple[str, cl.Event, float]] = []  # (kernel, event, flops) while profiling
        # Sub-buffers must start on this boundary.
        self.alignment = max(self.device.mem_base_addr_align // 8, 16)
        self.local_size = min(256, self.device.max_work_group_size)
        # OpenCL lets float division and sqrt be off by 2.5 and 3 ulp (NVIDIA's are); where the device
        # can round them correctly, ask for it, so float32 kernels compute what numpy and Keras do
        # (Dropout's x / keep, Adam's sqrt) on every device, bit for bit where the formula is the same.
        exact = cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
        # Every kernel is OpenCL C 1.2, the language every device compiles and the only one Apple's
        # OpenCL knows. Asked for by name because PoCL, left to choose, compiles OpenCL C 3.0, where
        # what 1.2 refuses (pointers without an address space, 2.0's built-ins) passes the tests here.
        # -cl-kernel-arg-info: each kernel's argument names and types as compiled, which Kernel
        # checks launches against (Kernel.signature).
        self._build_flags = ["-cl-std=CL1.2", "-cl-kernel-arg-info"] + (
            ["-cl-fp32-correctly-rounded-divide-sqrt"] if self.device.single_fp_config & exact else [])

    def join_side(self) -> None:
        """Make everything enqueued on the main queue from now on wait for the side queue's work."""
        if self.side_event is not None:
            cl.enqueue_barrier(self.queue, wait_for=[self.side_event])
            self.side_event = None

    @contextlib.contextmanager
    def branch(self):
        """Inside, every launch (side ones too) goes to the branch queue, in order, after all
        that the main queue holds at entry and beside what it is given next, until
        join_branch. Without a branch queue (a CPU's) or while profiling, nothing changes."""
        if self.branch_queue is None or self.profiling:
            yield
            return
        # A marker, not main_event: it also waits for what a barrier on the main queue waits for
        # (join_side's, join_branch's).
        self._branch_start, self._branching = cl.enqueue_marker(self.queue), True
        try:
            yield
        finally:
            self._branching = False

    def join_branch(self) -> None:
        """Make everything enqueued on the main queue from now on wait for the branch's work."""
        if self.branch_event is not None:
            cl.enqueue_barrier(self.queue, wait_for=[self.branch_event])
            self.branch_event = self.main_event = None  # a side launch now waits for a marker after it

    def busy(self):
        """A context manager around work that keeps the device busy until it ends (fit, evaluate,
        predict): on a PoCL CPU device on a virtual machine it keeps the cores awake meanwhile
        (awake.py)."""
        return awake.keep_awake(self.info)

    def finish(self) -> None:
        """Wait until the device has done everything enqueued on the main and side queues."""
        self.join_side()
        self.join_branch()
        self.queue.finish()

    def set_profiling(self, enabled: bool) -> None:
        self.join_side()
        if enabled and self._profiling_queue is None:
            self._profiling_queue = cl.CommandQueue(
                self.context, self.device, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.queue.finish()
        self.queue = self._profiling_queue if enabled else cl.CommandQueue(self.context, self.device)
        self.transfer_queue.finish()  # its copies time too (DataParallel's gradients going up)
        self.transfer_queue = cl.CommandQueue(self.context, self.device, properties=(
            cl.command_queue_properties.PROFILING_ENABLE if enabled else 0))
        self.profiling = enabled

    def pinned(self, size: int, dtype) -> tuple[cl.Buffer, np.ndarray]:
        """A host array of `size` elements that the device copies to and from by DMA, without the
        host waiting (pinned, where the driver pins ALLOC_HOST_PTR memory: a GPU's copies down and
        up run far faster from it than from a numpy array; benchmarks/RESULTS.md, DataParallel's
        reduction through pinned memory), and the buffer that owns it, which must live as long as
        the array."""
        dtype = np.dtype(dtype)
        buffer = cl.Buffer(self.context, cl.mem_flags.ALLOC_HOST_PTR | cl.mem_flags.READ_WRITE,
                           max(size, 1) * dtype.itemsize)
        array, _ = cl.enqueue_map_buffer(self.transfer_queue, buffer, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                         (size,), dtype)
        return buffer, array

    def registered(self, array: np.ndarray) -> cl.Buffer:
        """A buffer over `array`'s own memory (USE_HOST_PTR), kept as long as the array is copied to
        and from: NVIDIA's driver pins the memory while the buffer lives, so that copies from and to
        the array (memory this process did not allocate through OpenCL, e.g. an MPI shared window)
        run by DMA as from `pinned`'s (benchmarks/RESULTS.md, MPI ranks summing on their GPUs). The
        buffer itself is never used: the implementation may keep its contents elsewhere."""
        return cl.Buffer(self.context, cl.mem_flags.USE_HOST_PTR | cl.mem_flags.READ_WRITE, hostbuf=array)

    def check_dtype(self, dtype) -> np.dtype:
        dtype = np.dtype(dtype)
        if dtype not in _C_TYPES:
            raise TypeError(f"floatx must be float32 or float64, got {dtype}")
        if dtype == np.float64 and not self.info.fp64:
            raise DeviceError(f"float64 was asked for, but device {self.info.name!r} has no cl_khr_fp64 "
                              "support; use floatx='float32' or choose another device (CLNET_DEVICE)")
        return dtype

    def program(self, sources: tuple[str, ...], dtype, defines: dict | None = None) -> cl.Program:
        """Build (once per context, TYPE and options) the program made of these package .cl files.

        `sources` are resource paths relative to the package, e.g. "products/convolution.cl"; the shared
        helpers in cl/common.cl always come first.
        """
        dtype = self.check_dtype(dtype)
        c_type = _C_TYPES[dtype]
        options = {"TYPE": c_type, "TYPE4": f"{c_type}4", "LOCAL_SIZE": self.local_size,
                   "WARP_SHUFFLES": int(self.warp_shuffles(dtype)),
                   "HALVED_BUILTINS": int(self.info.builds_without_avx512), "CPU_DEVICE": int(not self.info.is_gpu),
                   **(defines or {})}
        if c_type == "double":
            options["CLNET_FP64"] = 1
        key = (sources, tuple(sorted(options.items())))
        program = self._programs.get(key)
        if program is None:
            text = "\n".join(read_source(name) for name in ("cl/common.cl", *sources))
            flags = [f"-D{k}={v}" for k, v in sorted(options.items())] + self._build_flags
            with warnings.catch_warnings():
                # Clang's notes (e.g. that float16 without AVX-512 changes the ABI of helper
                # functions) are not errors; a failed build raises with its log below.
                warnings.simplefilter("ignore", cl.CompilerWarning)
                program = ((None if self.info.caches_programs else self._cached_binary(text, flags))
                           or self._build(text, flags, sources))
            self._programs[key] = program
        return program

    def _build(self, text: str, flags: list[str], sources: tuple[str, ...]) -> cl.Program:
        try:
            program = cl.Program(self.context, text).build(options=flags)
        except cl.RuntimeError as error:
            if UNKNOWN_CPU in str(error):
                raise DeviceError(unknown_cpu_message(self.info)) from None
            raise BuildError(f"building {', '.join(sources)} with {' '.join(flags)} for "
                             f"{self.info.name!r} failed:\n{error}") from None
        if not program.get_info(cl.program_info.NUM_KERNELS):
            cached = (f"; PoCL's kernel cache ({pocl_cache_dir()}) can hold such a program from a build that "
                      "aborted its process (LLVM ERROR): delete that directory and try again"
                      if "PoCL" in self.info.platform_version else "")
            raise BuildError(f"building {', '.join(sources)} with {' '.join(flags)} for "
                             f"{self.info.name!r} reported success but produced no kernels{cached}")
        signatures = program.signatures = program_signatures(program)
        if None in signatures.values():  # pyopencl's own cache made it from a binary, which may carry none
            with tempfile.TemporaryDirectory() as empty:  # an empty cache: a build from the source
                fresh = cl.Program(self.context, text).build(options=flags, cache_dir=empty)
            signatures = program.signatures = program_signatures(fresh)
        if self.info.caches_programs and f"-D{SM90A}=1" not in flags:
            return program  # the runtime keeps it (DeviceInfo.caches_programs)
        try:  # the first device's (a shared context's devices are alike: DataParallel)
            binary = program.binaries[0]
        except cl.Error:  # a runtime that gives no binaries: nothing to uncover, nothing to cache
            binary = None
        if binary is not None and HOPPER_OPEN.encode() in binary:
            binary = sm90a_ptx(binary)
            program = self._sm90a_program(binary, flags, sources)
        elif f"-D{SM90A}=1" in flags:  # else its hidden instructions would silently not run
            raise BuildError(f"building {', '.join(sources)} with {' '.join(flags)} for {self.info.name!r}: the "
                             "compiled program is not PTX text with HOPPER()'s marks, so its sm_90a instructions "
                             "cannot be uncovered")
        if binary is not None:
            self._store_binary(text, flags, binary, signatures)
        program.signatures = signatures  # (the sm_90a program is another object)
        return program

    def _sm90a_program(self, ptx: bytes, flags: list[str], sources: tuple[str, ...]) -> cl.Program:
        """The program built from PTX that sm90a_ptx() made of its first build's: NVIDIA's OpenCL
        compiler writes `.target sm_90`, on which ptxas refuses Hopper's wgmma and its fences
        (sm_90a only), and takes no option for the target; its program binaries are PTX text,
        which clCreateProgramWithBinary takes back."""
        try:
            devices = self.context.devices
            return cl.Program(self.context, devices, [ptx] * len(devices)).build(options=flags)
        except cl.Error as error:
            raise BuildError(f"building {', '.join(sources)} with {' '.join(flags)} for {self.info.name!r} "
                             f"as sm_90a PTX (the wgmma form) failed:\n{error}") from None

    # Compiled programs are kept in $CLNET_CACHE_DIR/programs, keyed by everything that shapes
    # the binary, so a second process skips the compiler, on runtimes that keep no cache of their
    # own (DeviceInfo.caches_programs).
    def _binary_path(self, text: str, flags: list[str]) -> Path:
        info = self.info
        identity = "\0".join([text, *flags, info.name, info.platform_version, info.driver, __version__])
        return cache_dir() / "programs" / f"{hashlib.sha256(identity.encode()).hexdigest()}.bin"

    def _cached_binary(self, text: str, flags: list[str]) -> cl.Program | None:
        """The program from its cached binary, with its kernels' signatures from beside it: a
        program made from a binary may have no argument information (Intel's CPU runtime gives
        none), so the build from source wrote it down."""
        path = self._binary_path(text, flags)
        try:
            binary, devices = path.read_bytes(), self.context.devices
            signatures = {name: None if arguments is None else tuple(Argument(*argument) for argument in arguments)
                          for name, arguments
                          in json.loads(path.with_suffix(".args.json").read_text(encoding="utf-8")).items()}
            if None in signatures.values():  # (written from a program without them: build it again)
                return None
            program = cl.Program(self.context, devices, [binary] * len(devices)).build(options=flags)
        except (OSError, ValueError, TypeError, cl.Error):  # missing or unusable: build from source, replace it
            return None
        program.signatures = signatures
        return program

    def _store_binary(self, text: str, flags: list[str], binary: bytes, signatures: dict) -> None:
        path = self._binary_path(text, flags)
        try:  # (the signatures first: a binary without them is built again)
            write_atomically(path.with_suffix(".args.json"), json.dumps(signatures).encode())
            write_atomically(path, binary)
        except OSError:
            pass  # without a cache the next process compiles again; nothing is lost

    @property
    def builds(self) -> int:
        return len(self._programs)

    def warp_shuffles(self, dtype) -> bool:
        """Whether kernels in this float type may add across a warp's lanes by shuffles
        (common.cl's WARP_SHUFFLES): an NVIDIA GPU, in float."""
        return self.info.warp_shuffles and self.check_dtype(dtype) == np.float32

    def row_group(self, width: int) -> int:
        """The work-group of a row kernel (softmax, LayerNorm, the attention's rows) over rows of
        `width` elements: a power of two, for its reductions, of at most ROW_GROUP items. On a GPU
        the tiny GPT's rows of 256 ran much faster in groups of 64 than in groups of 256
        (AttentionSoftmax, the LayerNorm forward; benchmarks/RESULTS.md, the tiny GPT's
        non-product kernels): fewer barrier steps to a reduction and more rows in flight; 32 was no
        faster."""
        return min(ROW_GROUP, self.local_size, 1 << max(width - 1, 0).bit_length())

    def four_per_item(self, total: int) -> tuple[tuple[int], tuple[int] | None]:
        """(global, local) sizes for a kernel that takes `total` elements four to a work-item
        through ToVect4/D4ToArray, whose guards let work-items past the end do nothing. On a GPU
        in whole work-groups of local_size: NVIDIA's runtime, left to choose, divides the global
        size exactly, and ran a prime count (the tiny GPT's Adam update, 820 957 work-items) in
        work-groups of one item, far longer than in whole work-groups (benchmarks/RESULTS.md, the
        tiny GPT's non-product kernels). On a CPU in whole groups of CPU_GROUP items, the local
        size left open (Kernel.enqueue's cpu_work_group then gives CPU_GROUP): the largest
        power of two dividing an odd count is 1, and the README MLP's Adam update (58 787 items)
        ran as that many work-groups of one item, none on a vector's lanes (benchmarks/RESULTS.md,
        the update kernels in whole work-groups on CPUs)."""
        items = -(-total // 4)
        if not self.info.is_gpu:
            return (-(-items // CPU_GROUP) * CPU_GROUP,), None
        return (-(-items // self.local_size) * self.local_size,), (self.local_size,)

    def kernel(self, program: cl.Program, name: str, dtype) -> "Kernel":
        return Kernel(self, program, name, dtype)

    def shared_kernel(self, sources: tuple[str, ...], name: str, dtype) -> "Kernel":
        """One Kernel of the program of `sources` for every caller in this runtime, for objects
        made per call (evaluate's and predict's batch feeds): a new kernel object costs pyopencl
        two look-ups in its on-disk cache of argument packers, more than a small model's whole
        evaluation. Callers take turns: each call sets the arguments that differ from the last
        caller's."""
        key = (sources, name, np.dtype(dtype))
        kernel = self._shared_kernels.get(key)
        if kernel is None:
            kernel = self._shared_kernels[key] = Kernel(self, self.program(sources, dtype), name, dtype)
        return kernel


class Argument(NamedTuple):
    """A kernel argument as compiled: its name, address space ("global", "constant", "local" or
    "private": a value) and type as OpenCL C writes it after the preprocessor ("float*", "int")."""
    name: str
    space: str
    type: str

    def accepts(self, value) -> str | None:
        """Why `value` cannot be this argument, or None if it can: a buffer (a Tensor of this
        element type, a cl.Buffer, or None for a pointer the kernel does not read) for a global or
        constant pointer, cl.LocalMemory for a local one, an integer for an integer scalar, a
        number for a float one."""
        if self.space in ("global", "constant"):
            if value is None or isinstance(value, cl.MemoryObjectHolder):
                return None
            dtype = getattr(value, "dtype", None) if hasattr(value, "buffer") else None
            if dtype is None:
                return f"a buffer (Tensor or cl.Buffer), got {type(value).__name__}"
            element = _ELEMENT_TYPES.get(self.type.rstrip("*0123456789 ").split()[-1])
            if element is not None and np.dtype(dtype) != element:
                return f"a buffer of {element.name} ({self.type}), got a Tensor of {np.dtype(dtype).name}"
            return None
        if self.space == "local":
            return None if isinstance(value, cl.LocalMemory) else f"cl.LocalMemory, got {type(value).__name__}"
        element = _ELEMENT_TYPES.get(self.type)
        if element is None:
            return None
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            return f"a number ({self.type}), got {type(value).__name__}"
        if element.kind in "iu" and not isinstance(value, (int, np.integer)):
            return f"an integer ({self.type}), got {value!r}"
        return None


# OpenCL C's scalar types as numpy's: a buffer's element type, a scalar argument's kind.
_ELEMENT_TYPES = {"float": np.dtype(np.float32), "double": np.dtype(np.float64), "int": np.dtype(np.int32),
                  "uint": np.dtype(np.uint32), "long": np.dtype(np.int64), "ulong": np.dtype(np.uint64),
                  "char": np.dtype(np.int8), "uchar": np.dtype(np.uint8), "short": np.dtype(np.int16),
                  "ushort": np.dtype(np.uint16), "half": np.dtype(np.float16)}
_SPACES = {cl.kernel_arg_address_qualifier.GLOBAL: "global", cl.kernel_arg_address_qualifier.CONSTANT: "constant",
           cl.kernel_arg_address_qualifier.LOCAL: "local", cl.kernel_arg_address_qualifier.PRIVATE: "private"}


def _picker(positions: list[int]):
    """args -> the tuple of args at `positions` (operator.itemgetter's speed)."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    return (lambda args: (args[positions[0]],)) if positions else (lambda args: ())


def program_signatures(program: cl.Program) -> dict[str, tuple[Argument, ...] | None]:
    """Each kernel's signature (kernel_signature), by kernel name."""
    return {kernel.function_name: kernel_signature(kernel) for kernel in program.all_kernels()}


def kernel_signature(kernel: cl.Kernel) -> tuple[Argument, ...] | None:
    """The kernel's arguments as compiled, or None where the runtime does not give them."""
    info = cl.kernel_arg_info
    try:
        return tuple(Argument(_source_name(kernel.get_arg_info(i, info.NAME)),
                              _SPACES[kernel.get_arg_info(i, info.ADDRESS_QUALIFIER)],
                              kernel.get_arg_info(i, info.TYPE_NAME).strip())
                     for i in range(kernel.num_args))
    except (cl.Error, KeyError):
        return None


def _source_name(name: str) -> str:
    """An argument's name as the source writes it: PoCL's headers rename the builtins by macro
    (`#define step _cl_step`), and with them a parameter of the same name (step, length, min...)."""
    return name[4:] if name.startswith("_cl_") else name


class Kernel:
    """One kernel object with its arguments: a call sets only the arguments that changed since
    the last one, because a layer launches the same kernel on the same buffers step after step
    (and on a GPU the Python cost of a launch is the cost of a small training step).

    Arguments go by position or by name, as the kernel's source names them (`signature`, read
    from the compiled program); whenever they change, each is checked against its declaration
    before the launch, and a missing, extra or mistyped one raises a TypeError naming the kernel
    and the argument."""

    def __init__(self, rt: Runtime, program: cl.Program, name: str, dtype):
        self.rt = rt
        self.name = name
        self.kernel = cl.Kernel(program, name)
        self.scalar = np.dtype(dtype).type
        self.arity = self.kernel.num_args
        # As the program's build recorded it (Runtime.program), else as this kernel object gives it.
        signatures = getattr(program, "signatures", None) or {}
        self.signature = signatures.get(name) or kernel_signature(self.kernel)
        # (interned: a call's keywords are, so comparing them with these compares pointers)
        self.names = None if self.signature is None else tuple(sys.intern(a.name) for a in self.signature)
        # The buffers' (and local memories') positions: all arguments are checked when these
        # change; a scalar that set_args cannot pack as declared is named when it raises.
        spaces = [a.space for a in self.signature or ()]
        self._buffers = _picker([i for i, space in enumerate(spaces) if space != "private"])
        self.last: tuple = ()
        self.last_buffers: tuple | None = None
        self._orders: dict = {}  # (positional count, names as given) -> their reordering
        self.bound: Launch | None = None  # the bound launch whose arguments are set, if one's are
        # The local size this kernel is given where a launch leaves it open on a CPU
        # (cpu_work_group), or 0: the runtime's choice, a GPU's.
        self.group_limit = 0 if rt.info.is_gpu else min(CPU_GROUP, rt.device.max_work_group_size)

    @functools.cached_property
    def work_group_size(self) -> int:
        """The most work-items a work-group of this kernel may have on the device, as compiled
        (fewer than the device's limit where each work-item needs many registers)."""
        return self.kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.rt.device)

    def __call__(self, global_size, local_size, *args, flops: float = 0.0, beside: bool = False, **named) -> None:
        """The arguments `args` by position, then `named` by name. `beside`: on the runtime's side
        queue where it has one (see Runtime.side_queue), unless profiling, whose kernel times are
        those of one queue; it waits for the main queue's last kernel (Runtime.main_event), so
        what it reads must come from kernels, from Tensor writes (which make it wait for a marker
        instead) or from blocking copies. Returns the launch's event."""
        if named:
            # All of them by name in the kernel's order (the usual call) costs one comparison.
            args = tuple(named.values()) if not args and tuple(named) == self.names else self._by_name(args, named)
        try:
            changed = args != self.last  # tensors compare by identity, numbers by value
        except ValueError:  # a numpy array given: _set says where
            changed = True
        if changed:
            self._set(args)
            self.bound = None
        return self.enqueue(global_size, local_size, flops, beside)

    def enqueue(self, global_size, local_size, flops: float, beside: bool, queue=None, wait_for=None):
        """Launch with the arguments last set (see __call__ for `beside`); returns the event.
        `queue`: on that queue instead (a transfer queue's), once `wait_for` is done, ordered
        with the main queue's work by those events alone."""
        rt = self.rt
        if local_size is None and self.group_limit:
            local_size = cpu_work_group(global_size, self.group_limit)
        if queue is not None:
            event = cl.enqueue_nd_range_kernel(queue, self.kernel, global_size, local_size, wait_for=wait_for)
        elif rt._branching:
            start, rt._branch_start = rt._branch_start, None
            event = rt.branch_event = cl.enqueue_nd_range_kernel(rt.branch_queue, self.kernel, global_size,
                                                                 local_size, wait_for=[start] if start else None)
        elif beside and rt.side_queue is not None and not rt.profiling:
            after = rt.main_event or cl.enqueue_marker(rt.queue)
            event = rt.side_event = cl.enqueue_nd_range_kernel(rt.side_queue, self.kernel, global_size, local_size,
                                                               wait_for=[after])
            rt.launches_beside += 1
        else:
            event = rt.main_event = cl.enqueue_nd_range_kernel(rt.queue, self.kernel, global_size, local_size)
        rt.launches += 1
        if rt.profiling:
            rt.events.append((self.name, event, flops))
        return event

    def set(self, args: tuple) -> None:
        """Set `args`, in the kernel's order, where they differ from those set last (a bound
        launch's way in; __call__ compares inline, a frame fewer on every launch)."""
        try:
            changed = args != self.last
        except ValueError:  # a numpy array given: _set says where
            changed = True
        if changed:
            self._set(args)

    def _set(self, args: tuple) -> None:
        # pyopencl's set_arg is slow for a Python or numpy scalar (it probes the value's type
        # each time), and three kernels of every step take a new scalar (the loss's and the
        # gather's first row, Adam's step size); with the scalar dtypes declared once, set_args
        # packs them all in a fraction of one such set_arg's time. An argument's kind (int, float
        # or buffer) is fixed by its position: the first call declares them (an int where a float
        # is declared packs as one).
        if len(args) != self.arity:
            raise TypeError(f"{self.name} takes {self.arity} arguments, got {len(args)}")
        buffers = self._buffers(args)
        try:
            changed = buffers != self.last_buffers  # (Tensors and buffers compare by identity)
        except ValueError:  # a numpy array where a buffer belongs
            changed = True
        if changed:
            self.check(args)
            self.last_buffers = buffers
        if not self.last:
            self.kernel.set_scalar_arg_dtypes([np.int32 if isinstance(a, (int, np.integer))
                                               else self.scalar if isinstance(a, (float, np.floating))
                                               else None for a in args])
        try:
            self.kernel.set_args(*[getattr(arg, "buffer", arg) for arg in args])  # a Tensor passes its cl.Buffer
        except Exception:  # pyopencl's: struct.error, RuntimeError (bad_cast), cl.Error...
            self.check(args)  # names the argument, if the signature tells which
            raise
        self.last = args

    def check(self, args: tuple) -> None:
        """A TypeError naming the first argument that is not what the kernel declares."""
        for argument, value in zip(self.signature or (), args):
            if (why := argument.accepts(value)) is not None:
                raise TypeError(f"kernel {self.name}: argument {argument.name!r} must be {why}")

    def _by_name(self, args: tuple, named: dict) -> tuple:
        """The arguments in the kernel's order from `args` (the first ones) and `named`; the
        order of a call's names is worked out once (`_orders`)."""
        key = (len(args), tuple(named))
        reorder = self._orders.get(key)
        if reorder is None:
            reorder = self._orders[key] = self.order([*(self.names or ())[:len(args)], *named])
        return reorder((*args, *named.values()))

    def order(self, given: list[str]):
        """A function putting values given in the order of the names `given` into the kernel's
        order; a TypeError naming the kernel and an argument it does not have, one given twice or
        one missing."""
        if self.names is None:
            raise TypeError(f"kernel {self.name}: {self.rt.info.name!r} gives no argument names; pass them by "
                            "position")
        seen = set()
        for name in given:
            if name not in self.names:
                raise TypeError(f"kernel {self.name} has no argument {name!r}; its arguments: {', '.join(self.names)}")
            if name in seen:
                raise TypeError(f"kernel {self.name}: argument {name!r} given twice")
            seen.add(name)
        missing = [name for name in self.names if name not in seen]
        if missing:
            raise TypeError(f"kernel {self.name}: missing argument{'s' * (len(missing) > 1)} "
                            f"{', '.join(map(repr, missing))}")
        return _picker([given.index(name) for name in self.names])

    def bind(self, varying: tuple[str, ...] = (), /, **fixed) -> "Launch":
        """This kernel with every argument named once, where its user allocates: the `fixed`
        values, and `varying`, the names each launch gives by position, in that order (see
        Launch)."""
        return Launch(self, tuple(varying), fixed)


class Launch:
    """A kernel whose arguments were named once (Kernel.bind): the values that stay, and the
    names of those a launch gives, by position in the order bound. Names are checked when bound
    (an unknown, repeated or missing one raises naming the kernel and the argument), values
    before the first launch and whenever a buffer changes (Kernel._set). A launch compares only
    what it gives with what it gave last; where nothing changed and no other call set the
    kernel's arguments since, it costs less than one by position."""

    def __init__(self, kernel: Kernel, varying: tuple[str, ...], fixed: dict):
        self.kernel, self.varying = kernel, varying
        self._fixed = tuple(fixed.values())
        self._arrange = kernel.order([*fixed, *varying])
        self._last: tuple | None = None

    def __call__(self, global_size, local_size, *varying, flops: float = 0.0, beside: bool = False, queue=None,
                 wait_for=None):
        """Launch with the `varying` values (Kernel.__call__'s sizes, flops and beside; Kernel.enqueue's
        queue and wait_for)."""
        kernel = self.kernel
        try:
            changed = kernel.bound is not self or varying != self._last  # (as Kernel.__call__ compares)
        except ValueError:
            changed = True
        if changed:
            if len(varying) != len(self.varying):
                raise TypeError(f"kernel {kernel.name}: a launch gives {', '.join(self.varying) or 'nothing'} "
                                f"({len(self.varying)} values), got {len(varying)}")
            kernel.set(self._arrange(self._fixed + varying))
            kernel.bound, self._last = self, varying
        return kernel.enqueue(global_size, local_size, flops, beside, queue, wait_for)


CPU_GROUP = 64


def cpu_work_group(global_size, limit: int = CPU_GROUP) -> tuple[int, ...]:
    """The local size for a launch that leaves it to a CPU runtime: the largest power of two up to
    `limit` (CPU_GROUP, or the device's maximum work-group if smaller) dividing the first axis, 1
    along the others. The first axis is the one CPU runtimes run a work-group's items along as the
    lanes of one loop. PoCL's CPU driver compiles a kernel per local size (it specializes the
    work-group function; POCL_WORK_GROUP_SPECIALIZATION=0's generic functions ran slower), and
    its own choice follows the whole global size, so that every new shape of every kernel cost
    a compilation (the test suite's cold time); Intel's runtime chose groups that ran the tiny
    GPT's position table copy, (4096, 32) items, several times slower (benchmarks/RESULTS.md)."""
    first = global_size[0]
    return (max(1, min(1 << (limit.bit_length() - 1), first & -first)),) + (1,) * (len(global_size) - 1)


_SOURCE_CACHE: dict[str, str] = {}


def read_source(name: str) -> str:
    if name not in _SOURCE_CACHE:
        package, _, filename = ("clnet/" + name).rpartition("/")
        _SOURCE_CACHE[name] = resources.files(package.replace("/", ".")).joinpath(filename).read_text(encoding="utf-8")
    return _SOURCE_CACHE[name]


def add_source(name: str, text: str) -> None:
    """Generated OpenCL `text` as a source Runtime.program builds like a package file, under
    `name`, a path no package file has (clnet.ops's fused kernels: "ops/fused/<hash>.cl"): built
    once per context and options, and its binary kept on disk, as every program's. A name stands
    for one text: programs are kept by name, so another text under a name already given (or a
    package file's) is refused rather than silently ignored."""
    package_file = resources.files("clnet").joinpath(name).is_file()
    known = read_source(name) if package_file else _SOURCE_CACHE.get(name)
    if known is not None and known != text:
        raise ValueError(f"add_source: {name!r} already names {'a package file' if package_file else 'a source'} "
                         "with other text, and programs built from it are kept by that name; give this text a name "
                         "of its own")
    _SOURCE_CACHE[name] = text


_runtime: Runtime | None = None
_floatx = FLOATX["float32"]


def set_device(spec: str | int | None = None) -> DeviceInfo:
    """Choose the device by index, or by a substring of its platform's name or version, else of its
    name (None: CLNET_DEVICE, else the default).

    Layers built on the previous device keep it; build models after choosing.
    """
    global _runtime
    info = choose(spec)
    _runtime = Runtime(info)
    if not os.environ.get("CLNET_QUIET"):
        print(f"clnet: using device {info.index}: {info.describe()}", file=sys.stderr)
    return info


def runtime() -> Runtime:
    """The current device's Runtime, choosing the device first (as `set_device()` with no argument:
    `CLNET_DEVICE`, else the default) if none has been chosen: its context and queues, the programs
    built for it, its `info` (a `DeviceInfo`) and `launches`, the count of kernel launches so far.
    Models and layers take the current runtime when they are built."""
    if _runtime is None:
        set_device()
    return _runtime


@contextlib.contextmanager
def use_runtime(rt: Runtime):
    """Make `rt` the process's current runtime for the block, so that a model built inside (its
    layers take the current runtime) lives on rt's device (DataParallel's replicas)."""
    global _runtime
    previous, _runtime = _runtime, rt
    try:
        yield rt
    finally:
        _runtime = previous


def current_device_index() -> int | None:
    return None if _runtime is None else _runtime.info.index


def set_floatx(name: str) -> None:
    """Default floating type for models made afterwards: `'float32'` or `'float64'` (float64 needs a
    device with `cl_khr_fp64`), as `keras.backend.set_floatx`. A model's own `floatx=` argument
    takes precedence; models made already keep theirs."""
    global _floatx
    _floatx = floatx_dtype(name)


def floatx_dtype(name=None) -> np.dtype:
    if name is None:
        return _floatx
    key = np.dtype(name).name if not isinstance(name, str) else name
    if key not in FLOATX:
        raise TypeError(f"floatx must be 'float32' or 'float64', got {name!r}")
    return FLOATX[key]


def floatx() -> str:
    """The default floating type for new models, `'float32'` (the start) or `'float64'`, as
    `keras.backend.floatx`; `set_floatx` changes it."""
    return _floatx.name
