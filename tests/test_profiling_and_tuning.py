"""clnet.profile() and the autotuner's on-disk cache."""
import io
import json
import subprocess
import sys
import types

import numpy as np
import pytest

import clnet
from clnet.cl import tuning
from clnet.cl.parameters import ParameterStore
from clnet.layers import Dense
from clnet.products import forms, tuner


def test_profile_counts_every_kernel():
    rng = np.random.default_rng(0)
    model = clnet.Sequential([Dense(16, "relu", input_shape=(8,)), Dense(3, "softmax")], seed=0)
    model.compile("sgd", "categorical_crossentropy", ["accuracy"])
    x, y = rng.normal(size=(40, 8)), rng.integers(0, 3, 40)
    model.fit(x, y, batch_size=10, epochs=1, verbose=0)
    out = io.StringIO()
    launches = clnet.runtime().launches
    with clnet.profile(file=out) as p:
        model.fit(x, y, batch_size=10, epochs=1, verbose=0)
    assert sum(row[0] for row in p.rows.values()) == clnet.runtime().launches - launches
    calls = {name: row[0] for name, row in p.rows.items()}
    assert calls["PerceptronFeedForward"] == 8 and calls["CalcHiddenGradient"] == 4
    assert calls["SGDUpdate"] == 4 and calls["ReduceMetrics"] == 1
    assert p.rows["PerceptronFeedForward"][2] == 4 * (2 * 10 * 8 * 16 + 2 * 10 * 16 * 3)  # flops
    assert all(row[1] > 0 for row in p.rows.values())
    table = out.getvalue()
    assert table.splitlines()[0].split() == ["kernel", "calls", "total", "ms", "share", "GFLOP/s"]
    assert "CalcDeltaWeights" in table and table.splitlines()[-1].startswith("total")
    assert not clnet.runtime().profiling


def test_kernel_times_by_name():
    """tuning.kernel_times: one entry a kernel name, the names a profile of the same run counts
    (a dense layer's two forwards are one PerceptronFeedForward entry), each a positive time, from
    a warm-up call and the repeats; the events and profiling as they were before."""
    rt = clnet.runtime()
    model = clnet.Sequential([Dense(16, "relu", input_shape=(8,)), Dense(3)], seed=0)
    x = np.random.default_rng(0).normal(size=(10, 8))
    with clnet.profile(print_table=False) as p:
        model.predict(x)
    assert p.rows["PerceptronFeedForward"][0] == 2
    before, launches = list(rt.events), rt.launches
    times = tuning.kernel_times(rt, lambda: model.predict(x), repeats=2)
    assert set(times) == set(p.rows) and all(t > 0 for t in times.values())
    assert rt.launches - launches == 3 * sum(row[0] for row in p.rows.values())  # a warm-up and two repeats
    assert rt.events == before and not rt.profiling


def test_a_block_that_launched_nothing_says_so():
    out = io.StringIO()
    with clnet.profile(file=out) as p:
        pass
    assert p.rows == {} and p.total_seconds == 0
    lines = out.getvalue().splitlines()
    assert lines[1].split() == ["total", "0", "0.00"]
    assert lines[2] == (f"(no kernel ran on {clnet.runtime().info.describe()} inside the block: a model on another "
                        "device, such as a DataParallel's replicas outside strategy.scope(), is not profiled)")


@pytest.fixture
def tuner_on(monkeypatch):
    """The tuner as a user meets it: the suite turns it off (conftest.py)."""
    monkeypatch.delenv("CLNET_TUNE", raising=False)


def test_tuning_is_measured_once_and_kept_on_disk(tmp_path, monkeypatch, tuner_on):
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "_memory", {})
    rt = clnet.runtime()
    candidates = tuner.usable_candidates(rt, np.float32)
    measured = []
    monkeypatch.setattr(tuner, "_tune", lambda rt, dtype, c: measured.append(1) or [{"size": [8, 8, 8], "tiles": c[-1]}])
    assert tuner.matrix_tiles(rt, np.float32, 30, 20) == candidates[-1]
    stored = json.loads((tmp_path / "tuning.json").read_text())
    (key,) = stored
    assert rt.info.name in key and "float32" in key and f"clnet {clnet.__version__}" in key
    monkeypatch.setattr(tuning, "_memory", {})  # as a new process
    assert tuner.matrix_tiles(rt, np.float32, 30, 20, rows=5) == candidates[-1]
    assert measured == [1]


def test_a_layer_takes_the_choice_for_the_nearest_tuned_size(tmp_path, monkeypatch, tuner_on):
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "_memory", {})
    rt = clnet.runtime()
    small, large = {"VW": 4, "FF_RM": 1, "DW_RM": 1, "HG_RM": 1, "WG": 0}, {"VW": 4, "FF_RM": 4, "DW_RM": 4, "HG_RM": 4, "WG": 0}
    monkeypatch.setattr(tuner, "_tune", lambda *a: [{"size": [128, 784, 256], "tiles": small},
                                                   {"size": [2048, 2048, 2048], "tiles": large}])
    assert tuner.matrix_tiles(rt, np.float32, 784, 256) == small
    assert tuner.matrix_tiles(rt, np.float32, 4096, 4096) == large
    assert tuner.matrix_tiles(rt, np.float32, 1024, 1024, rows=32) == small  # a small batch decides
    assert tuner.matrix_tiles(rt, np.float32, 1024, 1024, rows=4096) == large
    # A layer lays out its weights once and takes the blocks for its batch size when allocated.
    layer = Dense(1024, "relu")
    layer.build((1024,), ParameterStore(rt, np.float32), np.random.default_rng(0))
    layer.allocate(32)
    assert layer.tiles == small
    layer.allocate(4096)
    assert layer.tiles == large


def test_tuning_can_be_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CLNET_TUNE", "0")
    monkeypatch.setattr(tuning, "_memory", {})
    monkeypatch.setattr(tuner, "_tune", lambda *a: (_ for _ in ()).throw(AssertionError("measured")))
    rt = clnet.runtime()
    assert tuner.matrix_tiles(rt, np.float64, 30, 20) == forms.tile_candidates(rt, np.float64)[0]
    assert not (tmp_path / "tuning.json").exists()


@pytest.mark.slow  # every candidate built and timed at every size: minutes on two cores
def test_real_tuning_picks_a_candidate_per_size(tmp_path, monkeypatch):
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path))
    rt = clnet.runtime()
    candidates = tuner.usable_candidates(rt, np.float32)
    assert candidates
    choices = tuner._tune(rt, np.float32, candidates)
    assert len(choices) >= 2 and len({tuple(c["size"]) for c in choices}) == len(choices)
    # One weight layout for every size, since a layer lays out its weights before it knows its batch.
    assert len({forms.layout(c["tiles"]) for c in choices}) == 1
    for chosen in (c["tiles"] for c in choices):
        # Each setting comes from a candidate of the same family (same vector width or tile, and
        # form: the tensor cores' or not).
        family = [c for c in candidates if c["VW"] == chosen["VW"] and c.get("TILE") == chosen.get("TILE")
                  and c.get("MMA") == chosen.get("MMA") and c.get("WGMMA") == chosen.get("WGMMA")]
        # On a CPU, a kernel's vectors of columns and rows may come from the second measurement
        # (tuner.COLUMN_BLOCKS) instead.
        columns = {f"{k}_CN" for k in forms.KERNEL_PREFIXES} & set(chosen)
        assert family and set(chosen) - columns == set(family[0])
        for key, value in chosen.items():
            if key in columns:
                assert value in {vectors for vectors, _ in tuner.COLUMN_BLOCKS}
            elif key.endswith("_RM") and not rt.info.is_gpu:
                assert value in {c[key] for c in family} | {rows for _, rows in tuner.COLUMN_BLOCKS}
            else:
                assert value in {c[key] for c in family}


def test_the_tuner_takes_each_kernels_fastest_vectors_of_columns(monkeypatch):
    """On a CPU the tuner measures its choice at each size again beside two vectors of columns by
    COLUMN_BLOCKS' rows, unblocked, and each kernel takes its own fastest (its depth with it), a
    kernel that gains nothing keeping one vector (no _CN key)."""
    rt = clnet.runtime()
    if rt.info.is_gpu:
        pytest.skip("the CPU form's vectors of columns")
    first = {"VW": 8, "FF_RM": 6, "DW_RM": 6, "HG_RM": 6, "HG_T": 1, "WG": 4}
    other = {**first, "WG": 2}
    fastest = {"FF": (2, 8), "HG": (2, 6)}  # DW: one vector, as chosen first

    def measure(rt_, dtype, candidates, size):
        times = []
        for tiles in candidates:
            seconds = {}
            for kernel in forms.KERNEL_PREFIXES:
                block = (tiles.get(f"{kernel}_CN", 1), tiles[f"{kernel}_RM"])
                seconds[size, kernel] = (0.5 if block == fastest.get(kernel) else 1.0) * (2 if tiles is other else 1)
            times.append(seconds)
        return times

    monkeypatch.setattr(tuner, "_sizes", lambda rt_: [(64, 32, 16)])
    monkeypatch.setattr(tuner, "_measure", measure)
    monkeypatch.setattr(tuner, "usable_candidates", lambda rt_, dtype, candidates: candidates)
    (choice,) = tuner._tune(rt, np.float32, [first, other])
    assert choice["size"] == [64, 32, 16]
    unblocked = {"NB": 1, "KB": 0}  # the variants' depth (forms.UNBLOCKED)
    assert choice["tiles"] == {**first, "FF_CN": 2, "FF_RM": 8, "HG_CN": 2, "HG_RM": 6,
                               **{f"{k}_{key}": v for k in ("FF", "HG") for key, v in unblocked.items()}}


def test_tuning_keeps_what_another_process_stored_while_it_measured(tmp_path, monkeypatch, tuner_on):
    """Two processes tuning different kernels at once (MPI ranks): each adds its result to the file
    as it is when the result is stored, not as it was when its own measuring began."""
    monkeypatch.setenv("CLNET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "_memory", {})
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps({"first": 1}))

    def tune():  # meanwhile another process stores its own result
        path.write_text(json.dumps({"first": 1, "other": 2}))
        return 3

    assert tuning.tuned(clnet.runtime(), np.float32, "family", (), tune, default=0) == 3
    stored = json.loads(path.read_text())
    assert stored["first"] == 1 and stored["other"] == 2 and sorted(stored.values()) == [1, 2, 3]


def test_processes_adding_to_one_cache_file_at_once_lose_nothing(tmp_path):
    script = ("import sys; from pathlib import Path; from clnet.cache import update_json\n"
              "for i in range(150): update_json(Path(sys.argv[1]), {f'{sys.argv[2]}-{i}': i})\n")
    path = tmp_path / "cache.json"
    processes = [subprocess.Popen([sys.executable, "-c", script, str(path), name]) for name in "abc"]
    assert [p.wait(timeout=120) for p in processes] == [0, 0, 0]
    stored = json.loads(path.read_text())
    assert len(stored) == 450 and stored["c-149"] == 149


def test_the_cache_lock_on_windows_locks_and_unlocks_the_first_byte(tmp_path, monkeypatch):
    """Windows has no fcntl: msvcrt.locking on the lock file's first byte, released after the block
    (also when the block raises)."""
    from clnet import system
    calls = []
    fake = types.SimpleNamespace(LK_LOCK=1, LK_UNLCK=0,
                                 locking=lambda fd, mode, size: calls.append((mode, size)))
    monkeypatch.setitem(sys.modules, "fcntl", None)  # import fcntl raises ImportError
    monkeypatch.setitem(sys.modules, "msvcrt", fake)
    with pytest.raises(KeyError):
        with system.exclusive(tmp_path / "x.lock"):
            assert calls == [(1, 1)]
            raise KeyError("inside")
    assert calls == [(1, 1), (0, 1)] and (tmp_path / "x.lock").exists()
