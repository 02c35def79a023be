"""Data-parallel training (clnet.distribute): DataParallel over two OpenCL devices of one process and
MPIDataParallel over two MPI ranks give, in float64, the weights of single-device training on the
whole batch (1e-10 after 20 steps, shuffled and not); the replicas stay identical; checkpoints
resume with another number of replicas; bad input is a clear error.

Devices are fixed when a process first asks OpenCL for them, so the two-device runs happen in
child processes (tests/distributed_worker.py) with PoCL asked for two pthread devices; with
CLNET_TEST_DEVICES=own, on the environment's own first two devices (two GPUs: one process with
both, or one MPI rank on each, by its local rank)."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clnet
from clnet.distribute import SlowerThanOneDeviceWarning
from clnet.distribute import base as distribute_base
from clnet.distribute import data_parallel
from clnet.distribute.base import FlatState
from clnet.layers import BatchNormalization, Dense, Dropout, Input

sys.path.insert(0, str(Path(__file__).parent))
from distributed_worker import data, make  # noqa: E402

WORKER = str(Path(__file__).parent / "distributed_worker.py")
STEPS_ARGS = dict(batch_size=8, verbose=0)  # 40 samples: 5 steps an epoch


def single_device(epochs: int, shuffle: bool, batch_size: int = 8) -> clnet.Model:
    x, y = data()
    model = make()
    model.compile(clnet.optimizers.Adam(0.01), "mse")
    model.fit(x, y, epochs=epochs, shuffle=shuffle, **{**STEPS_ARGS, "batch_size": batch_size})
    return model


def assert_weights(expected: list, npz, tolerance=1e-10) -> None:
    got = [npz[f"arr_{i}"] for i in range(len(expected))]
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=0, atol=tolerance)


OWN_DEVICES = os.environ.get("CLNET_TEST_DEVICES") == "own"


def two_devices() -> dict:
    if OWN_DEVICES:
        return {**os.environ, "CLNET_QUIET": "1"}
    return {**os.environ, "CLNET_QUIET": "1", "POCL_DEVICES": "pthread pthread"}


# dp-devices: the reduction on the devices, in one shared context (and the rows split unevenly).
@pytest.mark.parametrize("mode", ["dp", "dp-shuffled", "dp-uneven", "dp-devices", "dp-devices-uneven-shuffled"])
def test_data_parallel_equals_single_device_training(mode, tmp_path):
    subprocess.run([sys.executable, WORKER, mode, str(tmp_path)], env=two_devices(), check=True, timeout=600)
    result = np.load(tmp_path / "weights.npz")
    assert OWN_DEVICES or all("pthread" in name for name in result["devices"]), result["devices"]
    reference = single_device(4, shuffle=mode not in ("dp", "dp-devices"))  # 20 steps
    assert_weights(reference.get_weights(), result)
    np.testing.assert_allclose(result["loss"], reference.history.history["loss"], rtol=1e-12)
    # The replica on the second device holds exactly the same weights (the same update of the same values).
    replica = np.load(tmp_path / "replica.npz")
    for i in range(len(reference.get_weights())):
        np.testing.assert_array_equal(replica[f"arr_{i}"], result[f"arr_{i}"])
    # No kernel beyond a single device's but the reduction's (on the devices of one context, as
    # PoCL's two are, one a step and flat array on the first device; through the host, one a step
    # and flat array on every device): each replica launches its own step, and every epoch the
    # same kernels as every other.
    data_parallel, on_replica, first_epoch, later_epoch = result["launches"]
    on_first, on_second = result["reduction_launches"]
    assert bool(result["on_devices"]) == ("devices" in mode)
    assert result["one_context"]  # devices alike share one: the host reduction's copies wait on the devices
    assert (on_first, on_second) == ((1, 0) if "devices" in mode else (1, 1))  # the model has no non-trainables
    assert first_epoch == later_epoch and data_parallel == 4 * later_epoch + 20 * on_first
    assert on_replica == 4 * later_epoch + 20 * on_second


def test_data_parallel_trains_recurrent_states(tmp_path):
    """A graph whose tensors include a recurrent layer's final states, read as another's
    initial_state, and a Bidirectional layer: two replicas give the single device's float64
    weights."""
    subprocess.run([sys.executable, WORKER, "dp-states", str(tmp_path)], env=two_devices(), check=True, timeout=600)
    result = np.load(tmp_path / "states.npz")
    count = len(result.files) // 2
    for i in range(count):
        np.testing.assert_allclose(result[f"arr_{count + i}"], result[f"arr_{i}"], rtol=0, atol=1e-12)


def test_split_shares_rows_by_weight():
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), split=[3, 1])
    assert strategy.split(8) == [6, 2]
    assert strategy.split(2) == [1, 1]   # every replica gets a row
    assert strategy.split(5) == [4, 1]
    even = clnet.distribute.DataParallel(devices=two_replicas_on_one_device())
    assert even.split(7) == [4, 3]


def test_measured_split_follows_the_device_probe():
    """"measured": shares in proportion to each device's probe speed; one device twice runs alike."""
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), split="measured")
    assert strategy.shares() == pytest.approx([0.5, 0.5], abs=1e-12)
    assert strategy.split(9) == [5, 4]


def two_replicas_on_one_device(fp64=True) -> list:
    """Two DataParallel devices that are the one this process has, each with its own context: enough
    for the checks that need two replicas but not two devices."""
    info = clnet.runtime().info
    return [info, dataclasses.replace(info, index=info.index + 100, fp64=fp64)]


def test_float64_model_on_a_device_without_float64_is_refused():
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(fp64=False))
    with strategy.scope():
        model = make()
        with pytest.raises(clnet.DeviceError, match=r"float64.*\+100|cl_khr_fp64.*floatx='float32'"):
            model.compile("adam", "mse")
    model32 = clnet.Sequential([Input((5,)), Dense(3)], seed=1)  # float32 runs on both
    model32.compile("adam", "mse", distribution=strategy)


def test_train_on_batch_is_refused_under_a_distribution():
    """train_on_batch would step the main replica alone; fit is the way under DataParallel."""
    x, y = data()
    with clnet.distribute.DataParallel(devices=two_replicas_on_one_device()).scope():
        model = make()
        model.compile("adam", "mse")
    with pytest.raises(ValueError, match=r"train_on_batch runs one device's step.*DataParallel.*use fit"):
        model.train_on_batch(x[:8], y[:8])
    assert model.optimizer.iterations == 0


def test_batches_smaller_than_the_replicas_are_refused():
    x, y = data()
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device())
    with strategy.scope():
        model = make()
        model.compile("adam", "mse")
    with pytest.raises(ValueError, match=r"batch_size=1 is smaller than the 2 replicas of DataParallel"):
        model.fit(x, y, batch_size=1, verbose=0)
    with pytest.raises(ValueError, match=r"the last batch of 33 samples in batches of 8 has 1 rows, fewer than the "
                                         r"2 replicas"):
        model.fit(x[:33], y[:33], batch_size=8, verbose=0)
    model.fit(x[:34], y[:34], batch_size=8, verbose=0)  # a last batch of 2: one row each


def test_bad_arguments():
    with pytest.raises(TypeError, match="DataParallel devices must be a non-empty list"):
        clnet.distribute.DataParallel(devices=0)
    with pytest.raises(ValueError, match=r"name device\(s\) \[0\] more than once"):
        clnet.distribute.DataParallel(devices=[0, 0])
    with pytest.raises(ValueError, match=r"split must be 'even', 'measured' or a list of 2 positive numbers"):
        clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), split=[1, 0])
    with pytest.raises(ValueError, match="split must be one of"):
        clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), split="fast")
    with pytest.raises(ValueError, match="reduction must be one of"):
        clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), reduction="nccl")
    with pytest.raises(ValueError, match=r"reduction='devices' needs two or more distinct devices of one kind"):
        clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), reduction="devices")
    with pytest.raises(TypeError, match=r"DataParallel check_speed must be True or False, got 'yes'"):
        clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), check_speed="yes")
    model = make()
    with pytest.raises(TypeError, match="distribution must be a clnet.distribute strategy"):
        model.compile("adam", "mse", distribution="mirrored")
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device())
    model.compile("adam", "mse", distribution=strategy)  # made outside the scope, on the same device: fine
    with pytest.raises(TypeError, match="trains on arrays"):
        model.fit(((x, y) for x, y in [data()]), verbose=0)


def test_model_on_another_device_than_the_first_is_refused():
    info = clnet.runtime().info
    strategy = clnet.distribute.DataParallel(devices=[dataclasses.replace(info, index=info.index + 100), info])
    with pytest.raises(ValueError, match=r"built on device .* but DataParallel's first device"):
        make().compile("adam", "mse", distribution=strategy)


def test_replicas_with_different_parameter_layouts_meet_in_keras_layout(monkeypatch):
    """Devices tuned differently may pad Dense's panels differently; the reduction then gathers each
    replica's elements in Keras layout. Forced here on two replicas of one device."""
    x, y = data()
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device())
    monkeypatch.setattr(strategy, "_same_layout", lambda states: False)
    with strategy.scope():
        model = make()
        model.compile(clnet.optimizers.Adam(0.01), "mse")
    model.fit(x, y, epochs=4, **STEPS_ARGS)
    assert not strategy.same_layout
    assert_weights(single_device(4, shuffle=True).get_weights(),
                   {f"arr_{i}": w for i, w in enumerate(model.get_weights())})


def test_data_parallel_fit_in_a_loop_keeps_its_copies_and_follows_the_models_weights():
    """fit called epoch by epoch (a walk-forward loop) on the same arrays keeps the replica's copy
    of the data and the reduction's arrays from one call to the next (the same objects), yet starts
    every call from the model's weights and optimizer state: set_weights between calls reaches the
    replica. It trains as one device called the same way, the replica to the bit as the model."""
    x, y = data()
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), check_speed=False)
    with strategy.scope():
        model = make()
        model.compile(clnet.optimizers.Adam(0.01), "mse")
    reference = make()
    reference.compile(clnet.optimizers.Adam(0.01), "mse")
    kept = None
    for call in range(4):
        if call == 2:  # the user's own weights between two calls
            weights = [0.5 * w for w in model.get_weights()]
            model.set_weights(weights)
            reference.set_weights(weights)
        model.fit(x, y, epochs=1, **STEPS_ARGS)
        reference.fit(x, y, epochs=1, **STEPS_ARGS)
        now = (strategy.sharded.batches[1], *strategy.states, *strategy.replica_sums)
        assert kept is None or all(a is b for a, b in zip(now, kept))
        kept = now
        replica = strategy.replica_models[0]
        for want, got, copy in zip(reference.get_weights(), model.get_weights(), replica.get_weights()):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
            np.testing.assert_array_equal(copy, got)
    other_x, other_y = x[::-1].copy(), y[::-1].copy()  # other arrays: a copy of their own
    model.fit(other_x, other_y, epochs=1, **STEPS_ARGS)
    assert strategy.sharded.batches[1] is not kept[0]


def test_replicas_laid_out_larger_than_the_first_train_as_one_device(monkeypatch):
    """A replica whose device pads Dense's columns to a wider vector than the first device's has more
    flat elements than the model: the host's sum in Keras layout gives each replica back its own
    layout (it indexed past the first's on two contexts of one H200, tuned apart). Forced here with
    the tuner giving the first device narrower vectors than the other."""
    from clnet.products import tile_candidates, tuner
    candidates = tile_candidates(clnet.runtime(), np.float64)
    widths = sorted({tiles["VW"] for tiles in candidates})
    if len(widths) < 2:  # (a GPU's candidates: VW 4 alone)
        pytest.skip(f"every tile candidate here has vector width {widths[0]}: no layouts to force apart")
    narrow = next(tiles for tiles in candidates if tiles["VW"] == widths[0])
    wide = next(tiles for tiles in candidates if tiles["VW"] == widths[-1])
    tiles_by_device = lambda rt, dtype, *args, **kwargs: wide if rt.info.index >= 100 else narrow

    monkeypatch.setattr(tuner, "matrix_tiles", tiles_by_device)
    x, y = data()
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), check_speed=False)
    with strategy.scope():
        model = make()
        model.compile(clnet.optimizers.Adam(0.01), "mse")
    model.fit(x, y, epochs=4, shuffle=False, **STEPS_ARGS)
    first, other = strategy.states
    assert not strategy.same_layout and other.host.size > first.host.size
    reference = single_device(4, shuffle=False)
    for replica in (model, *strategy.replica_models):
        for got, want in zip(replica.get_weights(), reference.get_weights()):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_batch_normalization_moving_mean_is_the_whole_batch_mean():
    """Each replica normalises with its shard's statistics; the moving statistics travel in the
    reduction as the rows-weighted average: after one step the moving mean is one device's exactly
    (the mean of the shards' means), and the replicas hold the same moving statistics."""
    x, y = data()

    def bn_model():
        return clnet.Sequential([Input((5,)), Dense(6), BatchNormalization(momentum=0.5), Dense(3)],
                                floatx="float64", seed=4)
    single = bn_model()
    single.compile(clnet.optimizers.SGD(0.1), "mse")
    single.fit(x[:10], y[:10], batch_size=10, epochs=1, verbose=0)
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), split=[7, 3])
    with strategy.scope():
        model = bn_model()
        model.compile(clnet.optimizers.SGD(0.1), "mse")
    model.fit(x[:10], y[:10], batch_size=10, epochs=1, verbose=0)
    moving_mean = 4  # Dense: kernel, bias; BatchNormalization: gamma, beta, moving_mean, moving_variance
    np.testing.assert_allclose(model.get_weights()[moving_mean], single.get_weights()[moving_mean], rtol=0, atol=1e-14)
    for a, b in zip(model.get_weights(), strategy.replica_models[0].get_weights()):
        np.testing.assert_array_equal(a, b)


def test_host_reduction_in_pieces_sums_as_in_one(monkeypatch):
    """The host reduction moves the flat arrays in pieces (here of about 12 elements), each layer's
    started down on the transfer queue once its backward pass is enqueued, and each piece up to the
    other replica while the next comes down: the same bits as in one piece, on both replicas, and
    BatchNormalization's moving statistics (not written by a backward pass) read after it. The
    copies' events are kept until the step after next, so that the host need not wait for them."""
    x, y = data()

    def trained():
        strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), split=[3, 2])
        with strategy.scope():
            model = clnet.Sequential([Input((5,)), Dense(6), BatchNormalization(momentum=0.5), Dense(3)],
                                     floatx="float64", seed=4)
            model.compile(clnet.optimizers.Adam(0.01), "mse")
        model.fit(x, y, epochs=2, **STEPS_ARGS)
        return model, strategy

    monkeypatch.setattr(distribute_base, "PIECE_ELEMENTS", 1 << 30)
    whole, strategy = trained()
    assert len(strategy.pieces) == 4  # three layers' gradients, then the moving statistics
    reads = []
    read = FlatState.read
    monkeypatch.setattr(FlatState, "read", lambda state, *args: (reads.append((state, *args)), read(state, *args))[1])
    monkeypatch.setattr(distribute_base, "PIECE_ELEMENTS", 12)
    pieced, strategy = trained()
    assert len(strategy.pieces) > 6 and not strategy.one_context  # one device twice: a context each, host waits
    during_backward = {(start, end) for state, start, end, *queue in reads if queue and queue[0] is not None}
    after = {(start, end) for state, start, end, *queue in reads if not queue or queue[0] is None}
    assert len(during_backward) == len(strategy.pieces) - 1 and after == {strategy.pieces[-1]}
    assert strategy.pieces[-1][0] == strategy.states[0].size  # the moving statistics, after the gradients
    # The last two steps' copies up (one a piece and replica) are kept: deleting the event of a copy
    # from host memory makes pyopencl wait for it (with one context, the pieces' reads too).
    assert [len(step) for step in strategy._in_flight] == [2 * len(strategy.pieces)] * 2
    for a, b, c in zip(whole.get_weights(), pieced.get_weights(), strategy.replica_models[0].get_weights()):
        np.testing.assert_array_equal(b, a)
        np.testing.assert_array_equal(c, b)


def test_large_dense_gradients_come_down_in_parts_as_they_are_computed(monkeypatch):
    """Dense's GPU form (its tiles forced here on every Dense) computes a large kernel's gradient in
    launches of whole tiles of rows, and the host reduction starts each part down as soon as its
    launch is done (the wide MLP's last 67 MB, copied after the backward pass, kept two H200s at
    1.65x one), the last launch's part in TAIL_PIECES pieces; each replica sums the pieces done
    before that launch while the last ones are copied, then those: the same bits as one launch,
    one piece and one sum, on both replicas, and as one device's to 1e-10 in float64 (the shard
    weights, written only when they change, with each epoch's smaller last batch too). Outside the
    distribution's backward pass (compute_gradients) the layers launch once."""
    from clnet.products import tuner
    tiles = {"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}
    monkeypatch.setattr(tuner, "matrix_tiles", lambda *args, **kwargs: dict(tiles))
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(38, 70)), rng.normal(size=(38, 3))  # each epoch's last batch 6 rows: 4 + 2, not 5 + 3

    def make_wide():
        return clnet.Sequential([Input((70,)), Dense(50, "tanh"), Dense(3)], floatx="float64", seed=4)

    def trained(pieces: bool):
        strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), split=[3, 2])
        with strategy.scope():
            model = make_wide()
            model.compile(clnet.optimizers.Adam(0.01), "mse")
        monkeypatch.setattr(distribute_base, "PIECE_ELEMENTS", 800 if pieces else 1 << 30)
        parts, order = [], []  # the parts handed over; the copies up and the sums, as enqueued
        part_done = distribute_base.PieceReads.part_done
        monkeypatch.setattr(distribute_base.PieceReads, "part_done",
                            lambda reads, *args: (parts.append(args[:2]), part_done(reads, *args))[1])
        profiled = FlatState._profiled
        monkeypatch.setattr(FlatState, "_profiled", lambda state, name, events: (
            order.append(name) if name == "ReduceWrite" else None, profiled(state, name, events))[1])
        summed = distribute_base.ReplicaSum.sum
        monkeypatch.setattr(distribute_base.ReplicaSum, "sum",
                            lambda replica_sum, ranges, *args: (order.append(ranges),
                                                                summed(replica_sum, ranges, *args))[1])
        launches = model.rt.launches
        model.fit(x, y, epochs=2, **STEPS_ARGS)  # 10 steps
        return model, strategy, parts, order, model.rt.launches - launches

    whole, whole_strategy, none, _, whole_launches = trained(pieces=False)
    assert none == [] and len(whole_strategy.sums) == 1  # one sum of everything
    pieced, strategy, parts, order, pieced_launches = trained(pieces=True)
    dense, second = pieced.layers[0], pieced.layers[1]
    assert dense.tiled and dense.units_p == 52 and dense.kernel.size == 70 * 52
    # 70 rows are 5 tiles of 16 (the last of 6); 3640 elements make 4 parts: rows 0-16, 16-32, 32-48, 48-70,
    # each a piece of its own but the last, the backward pass's last launch, in TAIL_PIECES.
    rows = [(0, 16), (16, 32), (32, 48), (48, 70)]
    expected = [(dense.kernel.offset + a * 52, dense.kernel.offset + b * 52) for a, b in rows]
    tail = np.linspace(*expected[-1], distribute_base.TAIL_PIECES + 1).astype(int).tolist()
    kernel_end = dense.kernel.offset + dense.kernel.size
    assert [p for p in strategy.pieces if dense.kernel.offset <= p[0] < kernel_end] == [
        *expected[:-1], *zip(tail[:-1], tail[1:])]
    assert parts == expected * 20  # both replicas, 10 steps, every part as its launch was enqueued
    # The second layer's piece and the first three parts are summed first (two ranges), then the
    # last part's pieces and the first layer's bias (one), each sum after the copies up of its pieces.
    late = strategy.pieces.index((tail[0], tail[1]))
    second_end = second.bias.offset + second.bias.size
    assert strategy.sums == [(late, [(dense.kernel.offset, tail[0]), (second.kernel.offset, second_end)]),
                             (len(strategy.pieces), [(tail[0], second.kernel.offset)])]
    step = ["ReduceWrite"] * 2 * late + [strategy.sums[0][1]] * 2 + \
        ["ReduceWrite"] * 2 * (len(strategy.pieces) - late) + [strategy.sums[1][1]] * 2  # both replicas
    assert order == step * 10
    # Three more weight-gradient launches a step, and the sums in three launches instead of one.
    assert strategy.launches_per_step == [3, 3] and pieced_launches == whole_launches + 10 * (3 + 2)
    for a, b, c in zip(whole.get_weights(), pieced.get_weights(), strategy.replica_models[0].get_weights()):
        np.testing.assert_array_equal(b, a)
        np.testing.assert_array_equal(c, b)
    single = make_wide()
    single.compile(clnet.optimizers.Adam(0.01), "mse")
    single.fit(x, y, epochs=2, shuffle=True, **STEPS_ARGS)
    assert_weights(single.get_weights(), {f"arr_{i}": w for i, w in enumerate(pieced.get_weights())})
    single.set_weights(pieced.get_weights())
    _, expected_grads, _ = single.compute_gradients(x[:8], y[:8])
    _, grads, _ = pieced.compute_gradients(x[:8], y[:8])
    assert len(parts) == 80
    for e, g in zip(expected_grads, grads):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-13)


def test_dropout_and_the_last_partial_batch_keep_replicas_identical():
    """Two replicas on one device: Dropout draws each replica's masks for its own rows (so results
    differ from one device's, as documented), and the replicas stay identical."""
    x, y = data()
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device())
    with strategy.scope():
        model = clnet.Sequential([Input((5,)), Dense(7, "tanh"), Dropout(0.5), Dense(3)], floatx="float64", seed=2)
        model.compile(clnet.optimizers.SGD(0.1), "mse")
    model.fit(x[:38], y[:38], batch_size=8, epochs=2, verbose=0)
    for a, b in zip(model.get_weights(), strategy.replica_models[0].get_weights()):
        np.testing.assert_array_equal(a, b)


def test_data_parallel_checkpoint_resumes_on_one_device(tmp_path):
    """A checkpoint written under DataParallel holds one model: loaded without a distribution (or with
    another number of replicas) it continues exactly as uninterrupted single-device training."""
    x, y = data()
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device())
    with strategy.scope():
        model = make()
        model.compile(clnet.optimizers.Adam(0.01), "mse")
    model.fit(x, y, epochs=2, **STEPS_ARGS)
    model.save(tmp_path / "dp.h5")
    resumed = clnet.load_model(tmp_path / "dp.h5")
    assert resumed.distribution is None
    resumed.fit(x, y, epochs=4, initial_epoch=resumed.epoch, **STEPS_ARGS)
    assert_weights(single_device(4, shuffle=True).get_weights(),
                   {f"arr_{i}": w for i, w in enumerate(resumed.get_weights())})


CHECKED_ARGS = dict(batch_size=4, verbose=0)  # 40 samples: 10 steps an epoch, enough for the speed check


def checked_model(check_speed=True):
    """A model with Dropout (random draws each step) under DataParallel on two replicas."""
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), check_speed=check_speed)
    with strategy.scope():
        model = clnet.Sequential([Input((5,)), Dense(7, "tanh"), Dropout(0.5), Dense(3)], floatx="float64", seed=2)
        model.compile(clnet.optimizers.Adam(0.01), "mse")
    return model, strategy


def check_warnings(fit) -> list:
    """The SlowerThanOneDeviceWarnings that fit() gives, all of them shown."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit()
    return [w for w in caught if issubclass(w.category, SlowerThanOneDeviceWarning)]


@pytest.mark.parametrize("data_parallel_ms, one_device_ms, warns", [
    ([3.0, 2.5, 2.75], [1.0, 1.5, 1.25], True),   # every data-parallel block slower: a warning with both times
    ([1.0, 1.5, 1.25], [3.0, 2.5, 2.75], False),  # faster: none
    ([3.0, 1.0, 2.75], [1.5, 1.5, 1.25], False),  # slower in the median, but within the blocks' spread: none
])
def test_speed_check_warns_where_data_parallel_is_slower_than_one_device(monkeypatch, data_parallel_ms,
                                                                         one_device_ms, warns):
    """The first fit times blocks of its data-parallel steps, each followed by the same batches on
    the first device alone (the clock scripted here: timing never asserts real speed); the warning
    names both median step times, the devices and what to do, at the line of the fit call. A
    later fit checks nothing (the clock would run out)."""
    blocks = [ms for pair in zip(data_parallel_ms, one_device_ms) for ms in pair]
    times = iter(np.cumsum([0.0, *blocks]) * data_parallel.BLOCK_STEPS / 1e3)  # seconds at each block's end
    monkeypatch.setattr(data_parallel, "clock", lambda: next(times))
    x, y = data()
    model, strategy = checked_model()
    found = check_warnings(lambda: model.fit(x, y, epochs=2, **CHECKED_ARGS))
    assert strategy.step_ms == pytest.approx((np.median(data_parallel_ms), np.median(one_device_ms)), rel=1e-9)
    assert next(times, None) is None  # every block timed
    if warns:
        assert len(found) == 1 and found[0].filename == __file__
        message = str(found[0].message)
        info = clnet.runtime().info  # (Intel's runtime is device 1 beside pip's PoCL on some machines)
        name, first = repr(info.name), info.index
        assert (f"DataParallel over 2 devices ({first}: {name}, {first + 100}: {name}) took 2.75 ms a training step, "
                f"and device {first} ({name}) alone 1.25 ms, on the same batches of 4 rows") in message
        assert "Train on one device" in message and "larger batch or model" in message and "split='measured'" in message
    else:
        assert found == []
    assert check_warnings(lambda: model.fit(x, y, epochs=3, initial_epoch=2, **CHECKED_ARGS)) == []


@pytest.mark.filterwarnings("ignore::clnet.distribute.SlowerThanOneDeviceWarning")  # (two replicas, one device)
def test_speed_check_leaves_training_as_it_is():
    """The check trains a copy of the model: with and without it, the weights, the optimizer's
    moments and count, the replica's weights and the logs are the same to the bit, Dropout's masks
    and the shuffled order included."""
    x, y = data()
    runs = []
    for check_speed in (True, False):
        model, strategy = checked_model(check_speed)
        history = model.fit(x, y, epochs=2, **CHECKED_ARGS)
        assert (strategy.step_ms is not None) == check_speed
        runs.append((model.get_weights(), [m.numpy() for m in model.optimizer.moments.values()],
                     model.optimizer.iterations, strategy.replica_models[0].get_weights(), history.history["loss"]))
    (weights, moments, iterations, replica, loss), unchecked = runs
    for a, b in zip([*weights, *moments, *replica], [*unchecked[0], *unchecked[1], *unchecked[3]]):
        np.testing.assert_array_equal(a, b)
    assert iterations == unchecked[2] == 20 and loss == unchecked[4]


@pytest.mark.parametrize("case", ["off", "short epochs", "profiled", "no memory"])
def test_speed_check_measures_nothing_where_it_is_off_or_cannot_run(monkeypatch, case):
    """check_speed=False; epochs of fewer than CHECK_STEPS steps; a fit under clnet.profile(),
    whose table would hold the copy's kernels (the first fit inside the strategy's scope, where the
    replicas still compile as one device's models); a first device without memory for the copy:
    no copy timed, no warning, and training goes on."""
    monkeypatch.setattr(data_parallel, "clock", lambda: pytest.fail("the speed check's clock was read"))
    if case == "no memory":
        def no_memory(check):
            raise cl.MemoryError("clEnqueueNDRangeKernel failed: MEM_OBJECT_ALLOCATION_FAILURE")
        monkeypatch.setattr(data_parallel.SpeedCheck, "_copy", no_memory)
    x, y = data()
    model, strategy = checked_model(check_speed=case != "off")
    fit_args = STEPS_ARGS if case == "short epochs" else CHECKED_ARGS
    assert (-(-len(x) // fit_args["batch_size"]) < data_parallel.CHECK_STEPS) == (case == "short epochs")
    if case == "profiled":
        with strategy.scope(), clnet.profile(print_table=False):
            found = check_warnings(lambda: model.fit(x, y, epochs=2, **fit_args))
    else:
        found = check_warnings(lambda: model.fit(x, y, epochs=2, **fit_args))
    assert found == [] and strategy.step_ms is None
    assert model.optimizer.iterations == 2 * -(-len(x) // fit_args["batch_size"])


def test_mpi_data_parallel_without_mpi4py_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'clnet\[mpi\]'"):
        clnet.distribute.MPIDataParallel()


def mpirun(*args, timeout=600, ranks=2, **env) -> subprocess.CompletedProcess:
    """`ranks` ranks of distributed_worker.py on this machine, by the MPI there: Open MPI's `mpirun`
    (Debian's, CI's) with its local-only options, else `mpiexec -n 2` (MPICH, Intel MPI, Microsoft
    MPI on Windows)."""
    launcher = shutil.which("mpirun") or shutil.which("mpiexec")
    assert launcher, ("neither mpirun nor mpiexec found: install an MPI (Debian: apt-get install openmpi-bin "
                      "libopenmpi-dev, as CI does; macOS: brew install open-mpi; Windows: Microsoft MPI)")
    open_mpi = "Open MPI" in subprocess.run([launcher, "--version"], capture_output=True, text=True).stdout
    env = {**os.environ, "CLNET_QUIET": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo",
           **({"WORKER_DEVICE": "local-rank"} if OWN_DEVICES else {}), **env}
    options = ["--oversubscribe", "-np", str(ranks), "--host", f"127.0.0.1:{ranks}"] if open_mpi else ["-n", str(ranks)]
    return subprocess.run([launcher, *options, sys.executable, WORKER, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("shuffle", [False, True])
def test_mpi_two_ranks_equal_single_device_training(shuffle, tmp_path):
    run = mpirun("train-shuffled" if shuffle else "train", str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rank 0 done" in run.stdout and "rank 1 done" in run.stdout
    reference = single_device(4, shuffle)
    result = np.load(tmp_path / "weights.npz")
    assert_weights(reference.get_weights(), result)
    np.testing.assert_allclose(result["loss"], reference.history.history["loss"], rtol=1e-12)
    # Every rank resumed from rank 0's checkpoint and took 5 more steps, as one device does.
    reference.fit(*data(), epochs=5, initial_epoch=4, shuffle=shuffle, **STEPS_ARGS)
    assert_weights(reference.get_weights(), np.load(tmp_path / "resumed.npz"))
    # The checkpoint of 2 ranks, loaded by one process, continues the same way.
    one = clnet.load_model(tmp_path / "checkpoint.h5")
    one.fit(*data(), epochs=5, initial_epoch=one.epoch, shuffle=shuffle, **STEPS_ARGS)
    assert_weights(reference.get_weights(), {f"arr_{i}": w for i, w in enumerate(one.get_weights())})


def test_mpi_ranks_of_one_host_sum_on_their_devices_on_host_threads_or_by_mpi_alike(tmp_path):
    """By default the two ranks (one host) meet in the shared window and each device sums both
    ranks' pieces; sum_on="host" sums them on host threads in the window (also where only one
    rank asks for it); hierarchical=False by MPI's all-reduce, also where only one rank says so (no
    hang): all train as one device does."""
    reference = single_device(4, False).get_weights()
    cases = [({}, {}, True, True), ({"sum_on": "host"}, {"sum_on": "host"}, True, False),
             ({}, {"sum_on": "host"}, True, False), ({"hierarchical": False}, {"hierarchical": False}, False, False),
             ({}, {"hierarchical": False}, False, False)]
    for case, (options, rank_1, shared, on_devices) in enumerate(cases):
        out = tmp_path / str(case)
        out.mkdir()
        run = mpirun("train", str(out), STRATEGY_OPTIONS=json.dumps(options), RANK_1_OPTIONS=json.dumps(rank_1),
                     timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        ranks = [np.load(out / f"weights-{rank}.npz") for rank in (0, 1)]
        for ran in ranks:
            assert (bool(ran["shared"]), bool(ran["on_devices"])) == (shared, on_devices), (options, rank_1)
        for i in range(len(reference)):  # every rank applied the same sums: the same bits
            np.testing.assert_array_equal(ranks[1][f"arr_{i}"], ranks[0][f"arr_{i}"])
        assert_weights(reference, np.load(out / "weights.npz"))


def test_mpi_four_ranks_sum_on_their_devices_as_one_device_trains(tmp_path):
    """Four ranks of one host, each device summing the three others' pieces from the window: in
    batches of 6 (shards of 2, 2, 1 and 1 rows, each epoch's last batch of 4 one row a rank, so
    that the shard weights change within an epoch), shuffled, every rank ends with the same bits
    as the others and one device's weights to 1e-10, after the fit and after a resumed one."""
    run = mpirun("train-shuffled", str(tmp_path), ranks=4, BATCH="6", timeout=400)
    assert run.returncode == 0, run.stdout + run.stderr
    reference = single_device(4, True, batch_size=6)
    ranks = [np.load(tmp_path / f"weights-{rank}.npz") for rank in range(4)]
    assert all(bool(ran["on_devices"]) for ran in ranks)
    for ran in ranks[1:]:
        for i in range(len(reference.get_weights())):
            np.testing.assert_array_equal(ran[f"arr_{i}"], ranks[0][f"arr_{i}"])
    assert_weights(reference.get_weights(), np.load(tmp_path / "weights.npz"))
    reference.fit(*data(), epochs=5, initial_epoch=4, shuffle=True, **{**STEPS_ARGS, "batch_size": 6})
    assert_weights(reference.get_weights(), np.load(tmp_path / "resumed.npz"))


def test_mpi_fit_in_a_loop_keeps_its_state_and_starts_every_call_alike(tmp_path):
    """fit called three times keeps each rank's flat state and pieces from one call to the next;
    each call compares the ranks' digests and starts them from rank 0's weights where they differ
    (rank 1 halved its own before the third): every rank ends as one device called the same way."""
    run = mpirun("loop", str(tmp_path), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    x, y = data()
    reference = make()
    reference.compile(clnet.optimizers.Adam(0.01), "mse")
    for epochs in (2, 1, 1):
        reference.fit(x, y, epochs=epochs, **STEPS_ARGS)
    for rank in (0, 1):
        result = np.load(tmp_path / f"loop-{rank}.npz")
        assert bool(result["kept"])
        assert_weights(reference.get_weights(), result)


def test_shared_sum_over_two_hosts_of_two_ranks(tmp_path):
    """SharedSum on 4 ranks taken as 2 hosts of 2: each host sums its ranks' weighted pieces in
    shared memory (3 threads), the hosts' slices are all-reduced across; pieces of 1, 2 and
    uneven sizes (slices of none). Every rank holds the same numbers, numpy's sum to rounding."""
    run = mpirun("shared-sum", str(tmp_path), ranks=4)
    assert run.returncode == 0, run.stdout + run.stderr
    arrays = [np.random.default_rng(rank).normal(size=70001) for rank in range(4)]
    expected = sum(0.1 * (rank + 1) * array for rank, array in enumerate(arrays))
    sums = [np.load(tmp_path / f"sum-{rank}.npy") for rank in range(4)]
    np.testing.assert_allclose(sums[0], expected, rtol=1e-13, atol=1e-15)
    for rank in (1, 2, 3):
        np.testing.assert_array_equal(sums[rank], sums[0])


def test_mpi_smaller_buckets_cut_the_gradients_finer_and_sum_them_exactly(tmp_path):
    """bucket_mb sets the pieces' size: at 128 bytes (16 float64s) each layer's gradients go in
    several pieces (with the default 1 Mi elements, one each), and the sum is the same as one
    device's."""
    run = mpirun("train", str(tmp_path), STRATEGY_OPTIONS=json.dumps({"bucket_mb": 128 / 2**20}))
    assert run.returncode == 0, run.stdout + run.stderr
    reference = single_device(4, False)
    state = FlatState(reference)
    default, fine = (len(distribute_base.plan_pieces(reference, state, *elements)[0]) for elements in ((), (16,)))
    assert default == 2 and fine > 2 and int(np.load(tmp_path / "weights-0.npz")["pieces"]) == fine
    assert_weights(reference.get_weights(), np.load(tmp_path / "weights.npz"))


@pytest.mark.parametrize("floatx", ["float32", "float64"])
def test_state_digest_is_numpys_xor_and_wrapping_sum_of_the_states_words(floatx):
    """state_digest (DigestWords, the ranks' check at each fit's start) against numpy: the xor and
    the wrapping 64-bit sum of the 32-bit words of the weights and Adam's moments, at sizes that
    fill no work-group evenly (7 * 3 + 3 + 3 * 2 + 2 and BatchNormalization's statistics), random
    words and the largest; one changed bit changes both halves of the digest."""
    model = clnet.Sequential([Input((7,)), Dense(3), BatchNormalization(), Dense(2)], floatx=floatx, seed=1)
    model.compile(clnet.optimizers.Adam(0.01), "mse")
    tensors = [model.store.values, *model.optimizer.moments.values()]
    assert len(tensors) == 3
    rng = np.random.default_rng(2)
    for tensor in tensors:
        words = rng.integers(0, 2**32, tensor.nbytes // 4, dtype=np.uint64).astype(np.uint32)
        words[:4] = 0xffffffff
        tensor.write(words.view(tensor.dtype))
    every = np.concatenate([t.numpy().view(np.uint32) for t in tensors]).astype(np.uint64)
    expected = (int(np.bitwise_xor.reduce(every)), int(every.sum(dtype=np.uint64)))
    assert distribute_base.state_digest(model) == expected
    moment = tensors[-1].numpy()
    moment.view(np.uint32)[-1] ^= 1 << 17
    tensors[-1].write(moment)
    changed = distribute_base.state_digest(model)
    assert changed[0] != expected[0] and changed[1] != expected[1]


def bfloat16(array) -> np.ndarray:
    """numpy's reference of to_bfloat16 (parameters.cl): float32 bits rounded to their upper half,
    to nearest even, a NaN kept a NaN; as uint16."""
    bits = np.asarray(array, np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7fff) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(array), (bits >> 16 | 0x40).astype(np.uint16), rounded)


def widened(packed: np.ndarray) -> np.ndarray:
    return (packed.astype(np.uint32) << 16).view(np.float32)


def test_bfloat16_gradients_pack_and_sum_as_numpy_rounds_and_adds_them():
    """MPIDataParallel(compression="bf16")'s two kernels against numpy: FlatState.pack makes read()
    round the trainable gradients to bfloat16 on the device (ties to even both ways, the largest
    float to infinity, NaN kept, subnormals, -0) into the packed tensor and the host array, while the
    non-trainable values come down whole; ReplicaSum(bfloat16=True) adds three replicas' packed
    gradients (this one's, the middle, read from its own packed part) and their float values,
    weighted, in replica order, to the bit."""
    model = clnet.Sequential([Input((5,)), Dense(7), BatchNormalization(), Dense(3)], floatx="float32", seed=3)
    model.compile(clnet.optimizers.SGD(0.1), "mse")
    state = FlatState(model)
    size, extra = state.size, state.extra
    special = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), np.finfo(np.float32).max, np.inf, -np.inf,
                        np.nan, -0.0, 1e-40, -3e-39, 1.0 + 2**-8 + 2**-20], np.float32)
    rng = np.random.default_rng(5)
    grads = rng.normal(size=model.store.grads.size).astype(np.float32)
    grads[:special.size] = special
    model.store.grads.write(grads)
    replica_sum = distribute_base.ReplicaSum(state, 3, 1, bfloat16=True)
    host = np.zeros(size, np.uint16)
    state.pack(replica_sum.packed, size, host)
    cl.wait_for_events(state.read())
    expected = bfloat16(grads[:size])
    np.testing.assert_array_equal(host, expected)
    assert host[3] == 0x7f80 and host[0] == 0x3f80 and host[1] == 0x3f82 and np.isnan(widened(host[6:7]))[0]
    np.testing.assert_array_equal(state.host[size:], model.store.values.numpy()[size:])
    # The sum: replicas 0 and 2 come from the host, this one's packed part is on the device.
    grads[:special.size] = 0.5  # (finite terms)
    model.store.grads.write(grads)
    cl.wait_for_events(state.read())
    others = [bfloat16(rng.normal(size=size)) for _ in range(2)]
    values = [rng.normal(size=extra).astype(np.float32) for _ in range(2)]
    own_values = model.store.values.numpy()[size:]
    hosts = {}  # the other replicas' host arrays: packed gradients in the first half, then the values
    for replica, packed, value in ((0, others[0], values[0]), (2, others[1], values[1])):
        hosts[replica] = np.zeros(size + extra, np.float32)
        hosts[replica].view(np.uint16)[:size] = packed
        hosts[replica][size:] = value
    uploads = [replica_sum.upload(replica, hosts[replica], start, end) for replica in (0, 2)
               for start, end in ((0, size), (size, size + extra))]
    shares = np.array([0.2, 0.5, 0.3])
    replica_sum.sum([(0, size + extra)], shares, uploads)
    weights = shares.astype(np.float32)
    terms = [widened(others[0]), widened(host), widened(others[1])]
    np.testing.assert_array_equal(model.store.grads.numpy()[:size],
                                  (weights[0] * terms[0] + weights[1] * terms[1]) + weights[2] * terms[2])
    np.testing.assert_array_equal(model.store.values.numpy()[size:],
                                  (weights[0] * values[0] + weights[1] * own_values) + weights[2] * values[1])


def compressed_reference(rounded: bool) -> list[np.ndarray]:
    """The worker's compressed mode on one device, by numpy: every step, each rank's shard
    gradient (compute_gradients on its 4 rows) rounded to bfloat16 (or not), the two summed
    halves applied by SGD."""
    x, y = data()
    model = make(floatx="float32")
    model.compile(clnet.optimizers.SGD(0.1), "mse")
    weights, half = model.get_weights(), np.float32(0.5)
    for step in range(5):
        shards = []
        for rows in (slice(8 * step, 8 * step + 4), slice(8 * step + 4, 8 * step + 8)):
            _, gradients, _ = model.compute_gradients(x[rows], y[rows])
            shards.append([widened(bfloat16(g)) if rounded else g for g in gradients])
        weights = [w - np.float32(0.1) * (half * a + half * b) for w, a, b in zip(weights, *shards)]
        model.set_weights(weights)
    return weights


@pytest.mark.parametrize("options, shared, on_devices", [({}, True, True), ({"sum_on": "host"}, True, False),
                                                         ({"hierarchical": False}, False, False)])
def test_mpi_bf16_compression_sums_every_ranks_rounded_gradients(options, shared, on_devices, tmp_path):
    """compression="bf16" on each way of summing: every rank ends with the same bits, and with the
    weights of training on the ranks' gradients rounded to bfloat16 (numpy's rounding, float32's
    sums: to a few float32 ulps), which differ from float32 training's by far more; the moving
    statistics of BatchNormalization travel whole (those of one step are the same bits as without
    compression, while its trainable weights differ)."""
    run = mpirun("compressed", str(tmp_path), STRATEGY_OPTIONS=json.dumps({**options, "compression": "bf16"}),
                 timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    ranks = [np.load(tmp_path / f"weights-{rank}.npz") for rank in (0, 1)]
    assert all((bool(ran["shared"]), bool(ran["on_devices"])) == (shared, on_devices) for ran in ranks)
    rounded, exact = compressed_reference(True), compressed_reference(False)
    for i, (expected, unrounded) in enumerate(zip(rounded, exact)):
        np.testing.assert_array_equal(ranks[1][f"arr_{i}"], ranks[0][f"arr_{i}"])
        np.testing.assert_allclose(ranks[0][f"arr_{i}"], expected, rtol=0, atol=1e-7)
    assert max(np.abs(ranks[0][f"arr_{i}"] - unrounded).max() for i, unrounded in enumerate(exact)) > 5e-5
    normalized = [np.load(tmp_path / f"normalized-{rank}.npz") for rank in (0, 1)]
    for name in normalized[0].files:
        np.testing.assert_array_equal(normalized[1][name], normalized[0][name])
    moving = [4, 5]  # (Dense's kernel and bias, gamma, beta, then the moving mean and variance)
    for i in range(8):
        same = np.array_equal(normalized[0][f"bf16_{i}"], normalized[0][f"None_{i}"])
        assert same if i in moving or i == 1 else not same, i  # (the bias before BatchNormalization: no gradient)


def test_mpi_bf16_compression_is_for_float32_models_on_every_rank(tmp_path):
    """A float64 model, or ranks given different compression: every rank raises before a step."""
    pytest.importorskip("mpi4py")
    strategy = clnet.distribute.MPIDataParallel(compression="bf16")
    model = make()
    model.compile(clnet.optimizers.SGD(0.1), "mse", distribution=strategy)
    with pytest.raises(ValueError, match=r"compression='bf16' rounds float32 gradients; this model is float64"):
        model.fit(*data(), batch_size=8, epochs=1, verbose=0)
    run = mpirun("compressed", str(tmp_path), RANK_1_OPTIONS=json.dumps({"compression": None}),
                 STRATEGY_OPTIONS=json.dumps({"compression": "bf16"}), timeout=300, TIMEOUT="60")
    assert run.returncode != 0
    expected = ("MPIDataParallel: the ranks were given different compression (rank 0: 'bf16', rank 1: None); "
                "every rank must round its gradients alike")
    assert expected in run.stderr, run.stderr[-3000:]
    assert "CollectiveTimeout" not in run.stderr


@pytest.mark.parametrize("kwargs, message", [
    ({"bucket_mb": 0}, r"bucket_mb must be a positive number of megabytes \(or None for 1048576 elements a "
                       r"piece\), got 0"),
    ({"bucket_mb": True}, "bucket_mb must be a positive number of megabytes"),
    ({"bucket_mb": -4}, "bucket_mb must be a positive number of megabytes"),
    ({"compression": "fp16"}, "compression must be None or 'bf16', got 'fp16'"),
])
def test_mpi_bad_arguments(kwargs, message):
    pytest.importorskip("mpi4py")
    with pytest.raises(ValueError, match="MPIDataParallel " + message):
        clnet.distribute.MPIDataParallel(**kwargs)


def test_mpi_hierarchical_must_be_a_bool_and_sum_on_a_known_place():
    pytest.importorskip("mpi4py")
    with pytest.raises(TypeError, match="MPIDataParallel hierarchical must be True or False, got 'yes'"):
        clnet.distribute.MPIDataParallel(hierarchical="yes")
    with pytest.raises(ValueError, match="MPIDataParallel sum_on must be one of 'devices', 'host', got 'gpu'"):
        clnet.distribute.MPIDataParallel(sum_on="gpu")


def test_mpi_ranks_given_different_data_say_so_before_a_step(tmp_path):
    run = mpirun("uneven-data", str(tmp_path), timeout=300, TIMEOUT="60")
    assert run.returncode != 0
    expected = ("MPIDataParallel: the ranks were given different training data or precision (rank 0: 40 samples "
                "in batches of 8 (5 steps an epoch), float64, rank 1: 39 samples in batches of 8 (5 steps an epoch), "
                "float64)")
    assert expected in run.stderr, run.stderr[-3000:]
    assert "CollectiveTimeout" not in run.stderr


def test_mpi_a_stuck_rank_makes_the_others_fail_not_hang(tmp_path):
    run = mpirun("stuck", str(tmp_path), timeout=300, TIMEOUT="5")
    assert run.returncode != 0
    expected = "CollectiveTimeout: rank 0 of 2: the gradient all-reduce of step 2 did not complete within 5 s"
    assert expected in run.stderr, run.stderr[-3000:]


def test_mpi_a_dead_rank_ends_the_job_with_an_error(tmp_path):
    """The launcher ends the job and says why, in its own words: Open MPI 4 (Debian's) names the
    rank's exit code; Open MPI 5 (PyPI's wheel) aborts the waiting rank on the lost peer first."""
    run = mpirun("dies", str(tmp_path), timeout=300, TIMEOUT="30")
    assert run.returncode != 0
    open_mpi_4 = "exited with non-zero status" in run.stderr and "Exit code:    3" in run.stderr
    open_mpi_5 = "peer process has unexpectedly disconnected" in run.stderr and "MPI_ERRORS_ARE_FATAL" in run.stderr
    assert open_mpi_4 or open_mpi_5, run.stderr[-3000:]
