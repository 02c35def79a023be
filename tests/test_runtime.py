"""Program builds and their cache, device tensors, the command line (device choice: test_devices.py)."""
import pathlib
import re
import subprocess
import sys

import numpy as np
import pyopencl as cl
import pytest

import clnet
from clnet.cl import runtime as runtime_module
from clnet.cl.device import DeviceInfo
from clnet.cl.runtime import BuildError, Runtime, sm90a_ptx
from clnet.layers import (LSTM, BatchNormalization, Conv2D, Dense, Flatten, Input, LayerNormalization,
                          MaxPooling1D, MultiHeadAttention, Reshape)
from clnet.layers.multi_head_attention import PRODUCT_TILES


def test_devices_are_listed_with_their_capabilities():
    found = clnet.devices()
    assert found, "PoCL (pocl-binary-distribution) must provide at least one device"
    for index, d in enumerate(found):
        assert d.index == index
        assert d.name and d.platform and d.compute_units >= 1 and d.global_mem > 0 and d.local_mem > 0
        assert d.type in {"CPU", "GPU", "ACCELERATOR", "OTHER"}
        assert isinstance(d.fp64, bool)


def test_one_build_per_options(rt):
    sources = ("activations/relu.cl", "activations/elementwise.cl")
    defines = {"ACT": "relu", "ACT_KERNEL": "ReLU", "OPTION_SEEN_ONLY_HERE": 1}
    builds = rt.builds
    first = rt.program(sources, np.float32, defines)
    assert rt.builds == builds + 1
    assert rt.program(sources, np.float32, dict(defines)) is first
    assert rt.builds == builds + 1
    assert rt.program(sources, np.float64, defines) is not first
    assert rt.builds == builds + 2


def test_a_runtime_that_caches_programs_is_left_to_it(rt, tmp_path, monkeypatch):
    """PoCL keeps its builds (unless POCL_KERNEL_CACHE=0): clnet stores no copy, and never asks
    for the binary, which would compile every kernel of the program (here on any device, made to
    look so)."""
    pocl = "PoCL" in rt.info.platform_version
    assert rt.info.caches_programs == pocl
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    assert not rt.info.caches_programs
    monkeypatch.setattr(DeviceInfo, "caches_programs", property(lambda info: True))
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(Runtime, "_store_binary", lambda *a: pytest.fail("stored a binary the runtime keeps"))
    monkeypatch.setattr(Runtime, "_cached_binary", lambda *a: pytest.fail("looked for a binary the runtime keeps"))
    defines = {"ACT": "swish", "ACT_KERNEL": "Swish", "RUNTIME_CACHE_TEST": 1}
    program = Runtime(rt.info).program(("activations/swish.cl", "activations/elementwise.cl"), np.float32, defines)
    assert program.get_info(cl.program_info.NUM_KERNELS) > 0 and not (tmp_path / "programs").exists()


def test_compiled_programs_are_cached_on_disk(rt, tmp_path, monkeypatch):
    """On a runtime that keeps no cache of its own (this one is made to look so)."""
    monkeypatch.setattr(DeviceInfo, "caches_programs", property(lambda info: False))
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path))
    sources = ("activations/swish.cl", "activations/elementwise.cl")
    defines = {"ACT": "swish", "ACT_KERNEL": "Swish", "DISK_CACHE_TEST": 1}
    compiled = []
    store = Runtime._store_binary  # called only after a compilation from source
    monkeypatch.setattr(Runtime, "_store_binary", lambda self, *a: (compiled.append(1), store(self, *a)))
    first = Runtime(rt.info)
    names = first.kernel(first.program(sources, np.float32, defines), "SwishActivation", np.float32).names
    binary, = (tmp_path / "programs").glob("*.bin")
    signatures = binary.with_suffix(".args.json")
    assert compiled == [1] and binary.stat().st_size > 0 and signatures.exists()
    again = Runtime(rt.info)  # as a new process would: load the binary, do not compile
    program = again.program(sources, np.float32, defines)
    assert compiled == [1]
    kernel = again.kernel(program, "SwishActivation", np.float32)
    assert kernel.names == names  # (from beside the binary: Intel's runtime gives none for a binary)
    x = clnet.Tensor.from_numpy(np.array([-1.0, 0.0, 2.0], np.float32), rt=again)
    y = clnet.Tensor((3,), np.float32, again)
    kernel((1,), None, **dict(zip(names, (x, y, 3, 0.0, 1.0))))
    np.testing.assert_allclose(y.numpy(), [-1 / (1 + np.e), 0, 2 / (1 + np.exp(-2))], rtol=1e-6)
    binary.write_bytes(b"not a program")  # a corrupt cache entry is rebuilt, not fatal
    Runtime(rt.info).program(sources, np.float32, defines)
    assert compiled == [1, 1] and binary.read_bytes() != b"not a program"
    signatures.unlink()  # a binary without its signatures is built again
    Runtime(rt.info).program(sources, np.float32, defines)
    assert compiled == [1, 1, 1] and signatures.exists()


def test_build_error_carries_the_log(rt, tmp_path, monkeypatch):
    from clnet.cl import runtime as runtime_module
    monkeypatch.setitem(runtime_module._SOURCE_CACHE, "broken.cl", "__kernel void Broken() { undeclared_name = 1; }")
    with pytest.raises(clnet.BuildError, match=r"(?s)building broken.cl with .*-DTYPE=float.*undeclared_name"):
        rt.program(("broken.cl",), np.float32)


def test_a_program_without_kernels_is_a_build_error_naming_pocl_s_cache(rt, monkeypatch, tmp_path):
    """A build that succeeds with no kernels, as PoCL's does from a cache entry that a build which
    aborted its process left: a BuildError, which on PoCL names the cache directory to delete."""
    from clnet.cl import runtime as runtime_module
    monkeypatch.setitem(runtime_module._SOURCE_CACHE, "helpers.cl", "float twice(float x) { return 2 * x; }")
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "pocl"))
    with pytest.raises(BuildError, match="building helpers.cl with .* reported success but produced no kernels") as error:
        Runtime(rt.info).program(("helpers.cl",), np.float32)
    assert (f"PoCL's kernel cache ({tmp_path / 'pocl'})" in str(error.value)) == ("PoCL" in rt.info.platform_version)


def test_sm90a_instructions_are_uncovered_in_the_ptx():
    """gpu_tiles.cl's HOPPER() hides an sm_90a instruction in a PTX comment (NVIDIA's OpenCL compiler
    targets sm_90, where ptxas refuses it); the runtime rebuilds the PTX with it uncovered and
    the target made sm_90a, and leaves everything else alone."""
    ptx = (b"//\n.version 9.0\n.target sm_90, texmode_independent\n.address_size 64\n"
           b"\t{ .reg .pred p; setp.ne.b32 p, %r1, 0; /*SM90A: wgmma.fence.sync.aligned; :SM90A*/ }\n"
           b"\t/*SM90A: wgmma.commit_group.sync.aligned; :SM90A*/\n// sm_90 in a comment\n")
    assert sm90a_ptx(ptx) == (b"//\n.version 9.0\n.target sm_90a, texmode_independent\n.address_size 64\n"
                              b"\t{ .reg .pred p; setp.ne.b32 p, %r1, 0; wgmma.fence.sync.aligned; }\n"
                              b"\twgmma.commit_group.sync.aligned;\n// sm_90 in a comment\n")


def test_a_program_needing_sm90a_that_cannot_get_it_is_refused(rt):
    """A program built with SM90A=1 (the WGMMA form) whose binary holds no HOPPER() marks (any
    device but NVIDIA's, whose binaries are PTX) is a BuildError, not kernels that silently skip
    their hidden instructions."""
    if rt.info.warpgroup_products:
        pytest.skip("an NVIDIA Hopper GPU uncovers the marks")
    with pytest.raises(BuildError, match="HOPPER"):
        rt.program(("layers/merge.cl",), np.float32, {"SM90A": 1})


def test_float64_on_a_device_without_fp64(rt, monkeypatch):
    no_fp64 = Runtime(rt.info)
    monkeypatch.setattr(no_fp64, "info", type(rt.info)(**{**rt.info.__dict__, "fp64": False}))
    with pytest.raises(clnet.DeviceError,
                       match=rf"float64 was asked for, but device '{re.escape(rt.info.name)}' has no cl_khr_fp64"):
        no_fp64.check_dtype(np.float64)


def test_tensor_round_trip(rt):
    a = np.arange(7, dtype=np.float32).reshape(7, 1)
    t = clnet.Tensor.from_numpy(a)
    np.testing.assert_array_equal(t.numpy(), a)
    t.fill(2.5)
    np.testing.assert_array_equal(t.numpy(), np.full((7, 1), 2.5, np.float32))
    with pytest.raises(ValueError, match=r"cannot write \(3,\) into a device tensor of shape \(7, 1\)"):
        t.write(np.zeros(3))
    assert clnet.Tensor((0, 4), np.float32).numpy().shape == (0, 4)


def test_command_line_lists_devices():
    out = subprocess.run([sys.executable, "-m", "clnet", "devices"], capture_output=True, text=True, check=True)
    for d in clnet.devices():
        assert d.name[:34] in out.stdout
    assert "*" in out.stdout


def test_no_kernel_source_redefines_a_common_helper():
    """common.cl comes first in every program and OpenCL C has no overloading, so a helper of the
    same name in a layer's .cl breaks that program's build; under `#if WARP_SHUFFLES` it breaks only
    on NVIDIA GPUs, where CPU runs never see it (BatchNormalization's lanes_reduce did)."""
    definition = re.compile(r"^(?:inline\s+)?\w+\s+(\w+)\s*\(", re.M)
    package = pathlib.Path(clnet.__file__).parent
    common = set(definition.findall((package / "cl" / "common.cl").read_text()))
    assert {"group_reduce", "lanes_reduce", "shuffle_xor", "ToVect4"} <= common
    for source in sorted(package.rglob("*.cl")):
        if source.name != "common.cl":
            clashes = common & set(definition.findall(source.read_text()))
            assert not clashes, f"{source.relative_to(package)} redefines common.cl's {sorted(clashes)}"


def test_the_warp_shuffle_branches_compile_on_any_device(rt, monkeypatch):
    """What only NVIDIA GPUs build (WARP_SHUFFLES: common.cl's shuffles in every program,
    LayerNormalization's warps, the attention's row blocks in the GPU's tiles) is built here too,
    its PTX shuffle stood in for by a copy: builds only, no numbers (a CPU has no warps)."""
    shuffle = re.search(r"asm volatile\(\"shfl[^;]*;[^;]*;", runtime_module.read_source("cl/common.cl"))
    assert shuffle, "common.cl's shuffle_xor is no longer one asm statement"
    plain = runtime_module.read_source
    monkeypatch.setattr(runtime_module, "read_source", lambda name: plain(name).replace(shuffle[0], "other = v;"))
    monkeypatch.setattr(Runtime, "warp_shuffles", lambda self, dtype: self.check_dtype(dtype) == np.float32)
    monkeypatch.setattr(rt, "_programs", {})  # builds of their own (an NVIDIA GPU's real ones have these keys)
    x = Input((36, 8))
    h = LayerNormalization()(x)
    h = MultiHeadAttention(2, 8, tiles=PRODUCT_TILES)(h, h, use_causal_mask=True)
    model = clnet.Model(x, Dense(3, "softmax")(Flatten()(BatchNormalization()(h))), floatx="float32", seed=0)
    assert model.get_layer(index=1).warp_groups
    model.compile("adam", "sparse_categorical_crossentropy")
    assert rt.builds >= 6  # common.cl in each


def test_halved_builtins_give_the_default_builds_numbers(rt, monkeypatch):
    """What pip's PoCL 3.0 on AMD's Zen 4 builds (DeviceInfo.builds_without_avx512: common.cl's
    builtins on the halves of a double8, pooling's channels one at a time) gives the default build's loss and gradients in float64: LayerNormalization's weight
    gradient on lanes, the attention on lanes, pooling over 8 channels, the loss's row sums of 11
    logits (an 8-lane chunk and 3 more)."""
    if rt.info.is_gpu:
        pytest.skip("the attention on lanes and halved builtins are a CPU's builds")

    def loss_and_gradients():
        rng = np.random.default_rng(3)
        x = Input((9, 8))
        h = MultiHeadAttention(2, 4)(LayerNormalization()(x), x, use_causal_mask=True)
        model = clnet.Model(x, Dense(11)(Flatten()(MaxPooling1D(2)(h))), floatx="float64", seed=0)
        model.compile("sgd", clnet.losses.SparseCategoricalCrossentropy(from_logits=True))
        assert model.get_layer(index=2).lanes
        loss, gradients = model.compute_gradients(rng.normal(size=(5, 9, 8)), rng.integers(0, 11, 5))[:2]
        return loss, gradients

    default = loss_and_gradients()
    monkeypatch.setattr(DeviceInfo, "builds_without_avx512", property(lambda self: True))
    monkeypatch.setattr(rt, "_programs", {})  # builds of their own, as that device's
    monkeypatch.setenv("CLNET_TUNE", "0")
    halved = loss_and_gradients()
    assert all(("HALVED_BUILTINS", 1) in options for _, options in rt._programs)
    assert halved[0] == pytest.approx(default[0], rel=1e-13)
    for a, b in zip(halved[1], default[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_halved_vectors_give_the_default_builds_numbers(rt, monkeypatch, dtype):
    """Where builtins are halved, 64-byte vectors (VW 16 floats, 8 doubles) apply the activations'
    vector forms on their halves (common.cl's AVEC, activations/vector.cl's DEFINE_HALVES): every
    activation with a vector form in Dense's epilogue and bias gradient, the LSTM's gates, the
    convolution's, each the default build's numbers. On pip's PoCL 3.0 on a Zen 4 a builtin on a
    whole 64-byte vector would abort the process here."""
    if rt.info.is_gpu:
        pytest.skip("halved builtins and 64-byte vectors are a CPU's builds")

    def loss_and_gradients():
        rng = np.random.default_rng(5)
        x = Input((6, 5, 3))
        h = Conv2D(17, 3, padding="same", activation="elu")(x)
        h = Reshape((6, 5 * 17))(h)
        h = LSTM(19, return_sequences=True)(h)
        for activation in ("gelu", "sigmoid", "tanh", "elu", "softplus", "swish", "linear", "relu"):
            h = Dense(21, activation)(h)
        model = clnet.Model(x, Dense(4)(Flatten()(h)), floatx=dtype, seed=0)
        model.compile("sgd", clnet.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model.compute_gradients(rng.normal(size=(7, 6, 5, 3)), rng.integers(0, 4, 7))[:2]

    default = loss_and_gradients()
    monkeypatch.setattr(DeviceInfo, "builds_without_avx512", property(lambda self: True))
    monkeypatch.setattr(rt, "_programs", {})  # builds of their own, as that device's
    monkeypatch.setenv("CLNET_TUNE", "0")  # the first candidate: two of the target's 32-byte registers
    halved = loss_and_gradients()
    assert all(("HALVED_BUILTINS", 1) in options for _, options in rt._programs)
    assert any(dict(options).get("VW") == 64 // np.dtype(dtype).itemsize for _, options in rt._programs)
    tolerance = {"float32": dict(rtol=2e-5, atol=1e-6), "float64": dict(rtol=1e-11, atol=1e-14)}[dtype]
    assert halved[0] == pytest.approx(default[0], rel=tolerance["rtol"])
    for a, b in zip(halved[1], default[1], strict=True):
        np.testing.assert_allclose(a, b, **tolerance)


def test_numpy_scalars_are_kernel_arguments_as_python_ones(rt):
    """A layer may hold a size as a numpy integer (a shape's entry): it packs as an int, not as a
    buffer (which failed in clSetKernelArg with INVALID_ARG_SIZE)."""
    program = rt.program(("layers/merge.cl",), np.float32)
    src = clnet.Tensor.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), rt=rt)
    dst = clnet.Tensor.from_numpy(np.zeros((3, 2), np.float32), rt=rt)
    copy = rt.kernel(program, "CopyBlock", np.float32)
    copy((2, 3), None, src, np.int64(4), np.int32(1), dst, np.int64(2), 0, np.int16(2))
    np.testing.assert_array_equal(dst.numpy(), [[1, 2], [5, 6], [9, 10]])


def test_a_cpu_launch_left_open_gets_a_power_of_two_work_group(rt):
    """On a CPU a launch that leaves the local size open gets the largest power of two up to
    CPU_GROUP dividing its first axis and 1 along the others: on PoCL, which compiles a kernel per
    local size, at most 7 sizes a kernel, not one per shape; on Intel's runtime, not its own
    choice, several times slower for some shapes. A GPU's runtime keeps its choice. The kernel
    computes the same at every one (CopyBlock at shapes whose first axis takes 1, 2, ..., 64)."""
    assert runtime_module.cpu_work_group((96, 7)) == (32, 1)
    assert runtime_module.cpu_work_group((5, 4, 3)) == (1, 1, 1)
    assert runtime_module.cpu_work_group((1024,)) == (runtime_module.CPU_GROUP,) == (64,)
    assert runtime_module.cpu_work_group((1024,), 48) == (32,)  # POCL_MAX_WORK_GROUP_SIZE=48
    program = rt.program(("layers/merge.cl",), np.float32)
    copy = rt.kernel(program, "CopyBlock", np.float32)
    assert copy.group_limit == (0 if rt.info.is_gpu else min(64, rt.device.max_work_group_size))
    for width in (1, 2, 12, 64, 96, 130):
        x = np.arange(3 * width, dtype=np.float32).reshape(3, width)
        src, dst = clnet.Tensor.from_numpy(x, rt=rt), clnet.Tensor.from_numpy(np.zeros_like(x), rt=rt)
        copy((width, 3), None, src, width, 0, dst, width, 0, width)
        np.testing.assert_array_equal(dst.numpy(), x)


def test_four_per_item_launches_come_in_whole_work_groups(rt):
    """An element-wise kernel's work-items, four elements each, are rounded up to whole groups
    (local_size on a GPU, CPU_GROUP on a CPU): an odd count of items would otherwise run on a CPU
    in groups of one. The guards leave the items past the end idle (SGD's float64 update of 9 and
    235 146 elements, against numpy's)."""
    for total in (9, 235_146):
        (items,), local = rt.four_per_item(total)
        group = rt.local_size if rt.info.is_gpu else runtime_module.CPU_GROUP
        assert items % group == 0 and 0 <= items - -(-total // 4) < group
        assert local == ((group,) if rt.info.is_gpu else None)
        model = clnet.Sequential([Input((total,)), Dense(1, use_bias=False)], seed=1, floatx="float64")
        model.compile(clnet.optimizers.SGD(0.5), "mse")
        x = np.random.default_rng(0).normal(size=(2, total))
        y = np.zeros((2, 1))
        kernel = model.get_weights()[0]
        gradient = 2 * x.T @ (x @ kernel - y) / 2  # mse's, the mean over 2 rows of 1 output
        model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
        np.testing.assert_allclose(model.get_weights()[0], kernel - 0.5 * gradient, rtol=1e-10, atol=1e-12)


def test_evaluate_makes_no_kernel_objects_after_its_first_call(rt, monkeypatch):
    """A batch feed is made per evaluate() call; its gather kernel is the runtime's shared one
    (Runtime.shared_kernel), as a new kernel object costs more than a small model's evaluation.
    Calls that alternate between two feeds of other arrays still read their own."""
    model = clnet.Sequential([Input((3,)), Dense(2, "softmax")], seed=1)
    model.compile(clnet.optimizers.SGD(), "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    (x1, y1), (x2, y2) = [(rng.normal(size=(5, 3)).astype(np.float32), rng.integers(0, 2, 5)) for _ in range(2)]
    first = [model.evaluate(x1, y1), model.evaluate(x2, y2)]
    made = []
    monkeypatch.setattr(runtime_module.Kernel, "__init__",
                        lambda self, *arguments, init=runtime_module.Kernel.__init__: made.append(init(self, *arguments)))
    assert [model.evaluate(x1, y1), model.evaluate(x2, y2)] == first and first[0] != first[1]
    assert not made
    assert rt.shared_kernel(("data.cl",), "GatherRows", np.float32) is rt.shared_kernel(("data.cl",), "GatherRows",
                                                                                        "float32")


def test_a_source_name_stands_for_one_text():
    """Programs are kept by source name: another text under a name already given, or a package
    file's, is refused instead of running the old program."""
    from clnet.cl.runtime import add_source
    text = "__kernel void Fill(__global TYPE *x) { x[get_global_id(0)] = 1; }"
    add_source("user/fill_once.cl", text)
    add_source("user/fill_once.cl", text)  # the same text again: nothing to refuse
    with pytest.raises(ValueError, match=r"add_source: 'user/fill_once.cl' already names a source with other text"):
        add_source("user/fill_once.cl", text.replace("= 1", "= 2"))
    with pytest.raises(ValueError, match=r"add_source: 'layers/merge.cl' already names a package file"):
        add_source("layers/merge.cl", text)


GATHER_AXPY = """
__kernel void GatherAxpy(__global const TYPE *x, __global TYPE *y, __global const int *index, const TYPE a,
                         const int n)
{
    const int i = get_global_id(0);
    if (i < n)
        y[i] += a * x[index[i]];
}
"""


def gather_axpy(rt):
    runtime_module.add_source("tests/gather_axpy.cl", GATHER_AXPY)
    return rt.kernel(rt.program(("tests/gather_axpy.cl",), np.float32), "GatherAxpy", np.float32)


def test_a_kernel_knows_its_arguments_as_compiled(rt):
    kernel = gather_axpy(rt)
    assert [(a.name, a.space, a.type) for a in kernel.signature] == [
        ("x", "global", "float*"), ("y", "global", "float*"), ("index", "global", "int*"), ("a", "private", "float"),
        ("n", "private", "int")]


def test_arguments_by_name_in_any_order_are_those_by_position(rt):
    kernel = gather_axpy(rt)
    x = clnet.cl.tensor.Tensor.from_numpy(np.arange(5, dtype=np.float32), rt=rt)
    index = clnet.cl.tensor.Tensor.from_numpy(np.array([4, 0, 2, 2, 1], np.int32), rt=rt)
    ys = [clnet.cl.tensor.Tensor.zeros((5,), np.float32, rt) for _ in range(4)]
    kernel((5,), None, x, ys[0], index, 2.0, 5)
    kernel((5,), None, x=x, y=ys[1], index=index, a=2.0, n=5)
    kernel((5,), None, n=5, a=2.0, index=index, y=ys[2], x=x)
    kernel((5,), None, x, ys[3], n=5, index=index, a=2.0)
    for y in ys:
        np.testing.assert_array_equal(y.numpy(), [8, 0, 4, 4, 2])
    kernel((5,), None, n=5, a=1.0, index=index, y=ys[2], x=x)  # (the order worked out before, other values)
    np.testing.assert_array_equal(ys[2].numpy(), [12, 0, 6, 6, 3])


@pytest.mark.parametrize("call, message", [
    (lambda k, x, y, i: k((5,), None, x=x, y=y, index=i, a=2.0), "kernel GatherAxpy: missing argument 'n'"),
    (lambda k, x, y, i: k((5,), None, x=x, y=y, index=i, a=2.0, n=5, m=1),
     "kernel GatherAxpy has no argument 'm'; its arguments: x, y, index, a, n"),
    (lambda k, x, y, i: k((5,), None, x, y, x=x, index=i, a=2.0, n=5), "kernel GatherAxpy: argument 'x' given twice"),
    (lambda k, x, y, i: k((5,), None, x=x, y=y, index=x, a=2.0, n=5),
     r"kernel GatherAxpy: argument 'index' must be a buffer of int32 \(int\*\), got a Tensor of float32"),
    (lambda k, x, y, i: k((5,), None, x=np.arange(5.0), y=y, index=i, a=2.0, n=5),
     r"kernel GatherAxpy: argument 'x' must be a buffer \(Tensor or cl.Buffer\), got ndarray"),
    (lambda k, x, y, i: k((5,), None, x, y, i, 2.0, 5.0),
     r"kernel GatherAxpy: argument 'n' must be an integer \(int\), got 5.0"),
    (lambda k, x, y, i: k((5,), None, x, y, i, "2", 5), r"kernel GatherAxpy: argument 'a' must be a number \(float\)"),
    (lambda k, x, y, i: k((5,), None, x, y, i, 2.0), "GatherAxpy takes 5 arguments, got 4"),
])
def test_a_wrong_argument_is_named_before_any_launch(rt, call, message):
    kernel = gather_axpy(rt)
    x = clnet.cl.tensor.Tensor.from_numpy(np.arange(5, dtype=np.float32), rt=rt)
    index = clnet.cl.tensor.Tensor.from_numpy(np.zeros(5, np.int32), rt=rt)
    y = clnet.cl.tensor.Tensor.zeros((5,), np.float32, rt)
    kernel((5,), None, x, y, index, 1.0, 5)  # (a good call first: later ones change arguments)
    launches = rt.launches
    with pytest.raises(TypeError, match=message):
        call(kernel, x, y, index)
    assert rt.launches == launches
    np.testing.assert_array_equal(y.numpy(), np.zeros(5))


def test_a_kernel_bound_by_name_launches_with_what_changes(rt):
    """Kernel.bind names every argument once; a launch gives the varying ones by position, in the
    order bound, and computes what the same launch by position computes."""
    kernel = gather_axpy(rt)
    x = clnet.cl.tensor.Tensor.from_numpy(np.arange(5, dtype=np.float32), rt=rt)
    index = clnet.cl.tensor.Tensor.from_numpy(np.array([4, 0, 2, 2, 1], np.int32), rt=rt)
    ys = [clnet.cl.tensor.Tensor.zeros((5,), np.float32, rt) for _ in range(2)]
    launch = kernel.bind(("a", "y"), n=5, index=index, x=x)
    launch((5,), None, 2.0, ys[0])
    launch((5,), None, 1.0, ys[1])
    launch((5,), None, 1.0, ys[0])
    np.testing.assert_array_equal(ys[0].numpy(), [12, 0, 6, 6, 3])
    np.testing.assert_array_equal(ys[1].numpy(), [4, 0, 2, 2, 1])
    everything = kernel.bind(x=x, y=ys[1], index=index, a=-1.0, n=5)  # nothing varying
    everything((5,), None)
    np.testing.assert_array_equal(ys[1].numpy(), np.zeros(5))


@pytest.mark.parametrize("bind, message", [
    (lambda k, x, y, i: k.bind(("a",), x=x, y=y, index=i), "kernel GatherAxpy: missing argument 'n'"),
    (lambda k, x, y, i: k.bind(("a", "n", "m"), x=x, y=y, index=i),
     "kernel GatherAxpy has no argument 'm'; its arguments: x, y, index, a, n"),
    (lambda k, x, y, i: k.bind(("a", "n", "x"), x=x, y=y, index=i), "kernel GatherAxpy: argument 'x' given twice"),
])
def test_a_wrong_name_is_named_when_bound(rt, bind, message):
    kernel = gather_axpy(rt)
    x = clnet.cl.tensor.Tensor.from_numpy(np.arange(5, dtype=np.float32), rt=rt)
    index = clnet.cl.tensor.Tensor.from_numpy(np.zeros(5, np.int32), rt=rt)
    y = clnet.cl.tensor.Tensor.zeros((5,), np.float32, rt)
    with pytest.raises(TypeError, match=message):
        bind(kernel, x, y, index)


def test_a_bound_launch_checks_its_values_before_launching(rt):
    """A bound value of the wrong kind, or a launch giving too few values, raises naming the
    kernel and the argument, and nothing is launched."""
    kernel = gather_axpy(rt)
    x = clnet.cl.tensor.Tensor.from_numpy(np.arange(5, dtype=np.float32), rt=rt)
    index = clnet.cl.tensor.Tensor.from_numpy(np.zeros(5, np.int32), rt=rt)
    y = clnet.cl.tensor.Tensor.zeros((5,), np.float32, rt)
    launches = rt.launches
    with pytest.raises(TypeError, match=r"kernel GatherAxpy: argument 'index' must be a buffer of int32"):
        kernel.bind(("a",), x=x, y=y, index=x, n=5)((5,), None, 2.0)
    with pytest.raises(TypeError, match=r"kernel GatherAxpy: a launch gives a, n \(2 values\), got 1"):
        kernel.bind(("a", "n"), x=x, y=y, index=index)((5,), None, 2.0)
    assert rt.launches == launches
    np.testing.assert_array_equal(y.numpy(), np.zeros(5))


def test_a_training_run_launches_only_bound_kernels(rt, monkeypatch):
    """Every launch of fit, evaluate and predict (a CNN with normalization and dropout, embedded
    recurrent layers, the tiny GPT, with metrics and a validation split) goes through a Launch
    bound where its owner allocated: none passes its arguments at the launch (Kernel.__call__)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
    import tiny_gpt
    from clnet.layers import (GRU, LSTM, BatchNormalization, Conv2D, Dense, Dropout, Embedding, Flatten, Input,
                              MaxPooling2D)
    unbound = []
    monkeypatch.setattr(runtime_module.Kernel, "__call__", lambda kernel, *a, **k: unbound.append(kernel.name))
    rng = np.random.default_rng(0)
    models = [
        (clnet.Sequential([Input((8, 8, 1)), Conv2D(4, 3, activation="relu"), MaxPooling2D(), BatchNormalization(),
                           Flatten(), Dropout(0.2), Dense(10, "softmax")]), rng.normal(size=(40, 8, 8, 1)),
         rng.integers(0, 10, 40)),
        (clnet.Sequential([Input((6,)), Embedding(20, 8), LSTM(8, return_sequences=True), GRU(8),
                           Dense(3, "softmax")]), rng.integers(0, 20, (40, 6)), rng.integers(0, 3, 40)),
        (tiny_gpt.build_model(11, 8, 16, 2, 2, seed=4), rng.integers(0, 11, (40, 8)).astype(np.float32),
         rng.integers(0, 11, (40, 8))),
    ]
    for model, x, y in models:
        model.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
        launches = rt.launches
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, validation_split=0.2)
        model.evaluate(x, y, verbose=0)
        model.predict(x, verbose=0)
        assert rt.launches > launches
    assert unbound == []
