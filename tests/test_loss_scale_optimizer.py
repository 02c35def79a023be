"""LossScaleOptimizer, Keras 3's dynamic loss scaling on the device: each step's weights as a numpy
model with Keras's optimizer formulas (tests/reference.py) and as the unwrapped optimizer's (scaling
by a power of two is exact), the scale and counter by Keras's rule (keras_rule, checked against
Keras 3.15.1's own), skipped non-finite steps, clipping of unscaled gradients, several parameter
ranges, a layer frozen mid-training, two launches more per step and no host read, configs,
checkpoints, DataParallel and MPIDataParallel, float32 at awkward sizes, bad arguments."""
import json

import h5py
import numpy as np
import pyopencl as cl
import pytest

import clnet
from clnet.cl.parameters import ParameterStore, parameter_ranges
from clnet.layers import Dense, Input
from clnet.optimizers import SGD, Adam, AdamW, LossScaleOptimizer, schedules
from reference import OptimizerReference


def keras_rule(scale: float, counter: int, finite: bool, growth_steps: int) -> tuple[float, int]:
    """Keras's LossScaleOptimizer after one step: (scale, step_counter)."""
    if not finite:
        return scale * 0.5, 0
    if counter == growth_steps - 1:
        return scale * 2, 0
    return scale, counter + 1


def mlp(optimizer, floatx="float64", features=5, hidden=4, outputs=3, seed=1):
    model = clnet.Sequential([Input((features,)), Dense(hidden, "tanh"), Dense(outputs)], seed=seed, floatx=floatx)
    model.compile(optimizer, "mse")
    return model


def batches(count, rows=8, features=5, outputs=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(rows, features)), rng.normal(size=(rows, outputs))) for _ in range(count)]


def numpy_gradients(weights, x, y):
    """dL/dw of mlp's model (Dense tanh, Dense linear, Keras's mean squared error) in numpy."""
    w1, b1, w2, b2 = weights
    h = np.tanh(x @ w1 + b1)
    p = h @ w2 + b2
    dp = 2 * (p - y) / p.size
    dz = dp @ w2.T * (1 - h * h)
    return [x.T @ dz, dz.sum(0), h.T @ dp, dp.sum(0)]


def moments(optimizer) -> dict:
    return {name: tensor.numpy() for name, tensor in optimizer.moments.items()}


# -- against numpy, Keras's rule and the unwrapped optimizer ---------------------------------------
@pytest.mark.parametrize("inner", [lambda: SGD(0.1, momentum=0.9), lambda: Adam(0.05, beta_1=0.8)],
                         ids=["sgd_momentum", "adam"])
def test_steps_follow_numpy_keras_s_rule_and_the_unwrapped_optimizer(fp64, inner):
    """Eight steps with dynamic_growth_steps=3: the weights after each step are the numpy model's
    with Keras's formulas (1e-9) and the unwrapped optimizer's (to the bit, the scale being a power
    of two); the scale doubles every third step, as Keras's; the loss logged is not scaled."""
    wrapped = mlp(LossScaleOptimizer(inner(), initial_scale=2.0**10, dynamic_growth_steps=3))
    plain = mlp(inner())
    config = {k: v for k, v in plain.optimizer.get_config().items() if k != "name"}
    name = "sgd" if isinstance(plain.optimizer, SGD) else "adam"
    weights = [w.astype(np.float64) for w in plain.get_weights()]
    reference = OptimizerReference(name, [w.size for w in weights], **config)
    scale, counter = 2.0**10, 0
    assert (wrapped.optimizer.dynamic_scale, wrapped.optimizer.step_counter) == (scale, counter)
    for step, (x, y) in enumerate(batches(8)):
        logs = wrapped.train_on_batch(x, y, return_dict=True)
        assert logs == plain.train_on_batch(x, y, return_dict=True)
        grads = numpy_gradients(weights, x, y)
        flat = reference.step([w.ravel() for w in weights], [g.ravel() for g in grads])
        weights = [f.reshape(w.shape) for f, w in zip(flat, weights)]
        scale, counter = keras_rule(scale, counter, True, 3)
        assert (wrapped.optimizer.dynamic_scale, wrapped.optimizer.step_counter) == (scale, counter), step
        for got, same, want in zip(wrapped.get_weights(), plain.get_weights(), weights):
            np.testing.assert_array_equal(got, same)
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert scale == 2.0**12 and wrapped.optimizer.iterations == 8


def test_compute_gradients_are_not_scaled(fp64):
    """Only the training step scales the loss (Keras's train_step), not compute_gradients."""
    (x, y), = batches(1)
    wrapped = mlp(LossScaleOptimizer(SGD(0.1), initial_scale=2.0**20))
    plain = mlp(SGD(0.1))
    for a, b in zip(wrapped.compute_gradients(x, y)[1], plain.compute_gradients(x, y)[1]):
        np.testing.assert_array_equal(a, b)


# -- non-finite gradients --------------------------------------------------------------------------
@pytest.mark.parametrize("inner", [lambda: SGD(0.1, momentum=0.9), lambda: Adam(0.05)], ids=["sgd_momentum", "adam"])
def test_a_non_finite_step_is_skipped_and_training_goes_on(fp64, inner):
    """A target of 1e306 makes the scaled output gradient overflow: that step leaves the weights and
    moments as they were, halves the scale and resets the counter; the next steps train again. With
    SGD the weights are then those of the unwrapped optimizer that never saw the bad batch.
    Unlike Keras's, the skipped step counts in `iterations` (documented)."""
    good = batches(4)
    x_bad, y_bad = good[0][0], good[0][1].copy()
    y_bad[3, 1] = 1e306
    wrapped = mlp(LossScaleOptimizer(inner(), dynamic_growth_steps=2))
    plain = mlp(inner())
    wrapped.train_on_batch(*good[0])
    plain.train_on_batch(*good[0])
    assert (wrapped.optimizer.dynamic_scale, wrapped.optimizer.step_counter) == (2.0**15, 1)
    weights, kept = wrapped.get_weights(), moments(wrapped.optimizer)
    wrapped.train_on_batch(x_bad, y_bad)
    for a, b in zip(wrapped.get_weights(), weights):
        np.testing.assert_array_equal(a, b)
    for name, flat in moments(wrapped.optimizer).items():
        np.testing.assert_array_equal(flat, kept[name])
    assert (wrapped.optimizer.dynamic_scale, wrapped.optimizer.step_counter) == (2.0**14, 0)
    assert wrapped.optimizer.iterations == 2
    for x, y in good[1:]:
        wrapped.train_on_batch(x, y)
        plain.train_on_batch(x, y)
    assert (wrapped.optimizer.dynamic_scale, wrapped.optimizer.step_counter) == (2.0**15, 1)
    assert all(np.isfinite(w).all() for w in wrapped.get_weights())
    assert not np.array_equal(wrapped.get_weights()[0], weights[0])
    if isinstance(plain.optimizer, SGD):
        for a, b in zip(wrapped.get_weights(), plain.get_weights()):
            np.testing.assert_array_equal(a, b)


def test_float32_scale_that_overflows_comes_down_and_training_recovers():
    """float32, Dense(37) on 53 features, initial_scale 2**127 and targets far from the outputs:
    the scaled gradients overflow, so the first steps are skipped, each halving the scale, until
    they fit; from then on the weights are those of the unwrapped SGD trained on the batches that
    were applied."""
    rng = np.random.default_rng(5)
    data = [(rng.normal(size=(8, 53)), 500 + rng.normal(size=(8, 37))) for _ in range(8)]

    def model(optimizer):
        m = clnet.Sequential([Input((53,)), Dense(37)], seed=2, floatx="float32")
        m.compile(optimizer, "mse")
        return m
    wrapped = model(LossScaleOptimizer(SGD(1e-3), initial_scale=2.0**127, dynamic_growth_steps=1000))
    plain = model(SGD(1e-3))
    scale, counter, applied = 2.0**127, 0, 0
    for x, y in data:
        before = wrapped.get_weights()
        wrapped.train_on_batch(x, y)
        finite = not all(np.array_equal(a, b) for a, b in zip(wrapped.get_weights(), before))
        scale, counter = keras_rule(scale, counter, finite, 1000)
        assert (wrapped.optimizer.dynamic_scale, wrapped.optimizer.step_counter) == (scale, counter)
        if finite:
            plain.train_on_batch(x, y)
            applied += 1
    assert 2 <= applied <= 6 and scale < 2.0**127
    for a, b in zip(wrapped.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_float32_at_awkward_sizes_follows_the_unwrapped_adam():
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(45, 53)), rng.normal(size=(45, 37))

    def model(optimizer):
        m = clnet.Sequential([Input((53,)), Dense(19, "relu"), Dense(37)], seed=3, floatx="float32")
        m.compile(optimizer, "mse")
        return m
    wrapped = model(LossScaleOptimizer(Adam(0.01), dynamic_growth_steps=2))
    plain = model(Adam(0.01))
    wrapped.fit(x, y, batch_size=16, epochs=2, verbose=0)
    plain.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert wrapped.history.history["loss"] == plain.history.history["loss"]
    for a, b in zip(wrapped.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert (wrapped.optimizer.dynamic_scale, wrapped.optimizer.step_counter) == (2.0**18, 0)  # 6 steps


# -- clipping, several ranges ----------------------------------------------------------------------
@pytest.mark.parametrize("clip", [{"clipnorm": 0.05}, {"global_clipnorm": 0.05}, {"clipvalue": 0.01}],
                         ids=lambda c: next(iter(c)))
def test_clipping_sees_the_unscaled_gradients(fp64, clip):
    """The inner optimizer clips what Keras's does, the unscaled gradients: its weights are the
    unwrapped one's, which the clipping changes."""
    wrapped = mlp(LossScaleOptimizer(SGD(0.1, **clip), initial_scale=2.0**30))
    plain = mlp(SGD(0.1, **clip))
    unclipped = mlp(SGD(0.1))
    for x, y in batches(3):
        for model in (wrapped, plain, unclipped):
            model.train_on_batch(x, y)
    for a, b in zip(wrapped.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    assert not np.allclose(plain.get_weights()[0], unclipped.get_weights()[0], rtol=1e-6)


def test_parameters_of_several_ranges(fp64):
    """Three ranges of two stores: a CheckFinite per range, the inner update per range, one
    UpdateLossScale; a non-finite gradient in the last range skips every range's update."""
    rng = np.random.default_rng(3)
    stores = []
    for shapes in ([(130,), (37,), (5, 3)], [(2, 9), (1,)]):
        store = ParameterStore(clnet.runtime(), np.float64)
        for shape in shapes:
            store.add(rng.normal(size=shape))
        store.allocate()
        stores.append(store)
    a, b = stores
    trained = [a.parameters[0], a.parameters[2], *b.parameters]
    ranges = parameter_ranges(trained)
    assert len(ranges) == 3
    optimizer = LossScaleOptimizer(Adam(0.05, global_clipnorm=3.0), initial_scale=2.0**8, dynamic_growth_steps=2)
    optimizer.bind(ranges, a.rt, np.float64)
    weights = [p.value.numpy().ravel().copy() for p in trained]
    reference = OptimizerReference("adam", [w.size for w in weights],
                                   **{k: v for k, v in optimizer.inner_optimizer.get_config().items() if k != "name"})

    def write(grads, scale):
        for store in stores:
            host = np.zeros(store.size)
            for p, g in zip(trained, grads):
                if p.store is store:
                    host[p.offset:p.offset + p.size] = g * scale
            store.grads.write(host)
    rt, scale, counter = clnet.runtime(), 2.0**8, 0
    for step in range(6):
        grads = [rng.normal(size=w.size) for w in weights]
        finite = step != 3
        if not finite:
            grads[-1][0] = np.inf
        write(grads, scale)
        before = rt.launches
        optimizer.step()
        assert rt.launches - before == 3 + 3 + (3 + 1) + 1  # checks, updates, the norm passes, UpdateLossScale
        if finite:
            weights = reference.step(weights, grads)
        else:
            reference.iterations += 1  # a skipped step counts in clnet's iterations (not in Keras's)
        scale, counter = keras_rule(scale, counter, finite, 2)
        assert (optimizer.dynamic_scale, optimizer.step_counter) == (scale, counter)
        for p, want in zip(trained, weights):
            np.testing.assert_allclose(p.value.numpy().ravel(), want, rtol=1e-9, atol=1e-12)


def test_a_layer_frozen_between_steps(fp64):
    """Freezing a layer binds the optimizer again on the parameters trainable then: the scale and
    counter go on, the frozen layer stays as it was, and the rest trains as under the unwrapped
    optimizer."""
    wrapped = mlp(LossScaleOptimizer(Adam(0.01), initial_scale=2.0**4, dynamic_growth_steps=2))
    plain = mlp(Adam(0.01))
    data = batches(5)
    for model in (wrapped, plain):
        for x, y in data[:3]:
            model.train_on_batch(x, y)
        model.layers[0].trainable = False
    frozen = wrapped.get_weights()[:2]
    for model in (wrapped, plain):
        for x, y in data[3:]:
            model.train_on_batch(x, y)
    assert (wrapped.optimizer.dynamic_scale, wrapped.optimizer.step_counter) == (2.0**6, 1)
    for a, b in zip(wrapped.get_weights()[:2], frozen):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(wrapped.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(a, b)


# -- launches and reads ----------------------------------------------------------------------------
def copies_to_host(monkeypatch) -> list:
    """Every copy from the device to host memory from now on (what Tensor.numpy and the batch
    reads do), as the list it returns gets them."""
    reads, copy = [], cl.enqueue_copy
    monkeypatch.setattr(cl, "enqueue_copy", lambda queue, dest, src, **kwargs: (
        reads.append(dest) if isinstance(dest, np.ndarray) else None, copy(queue, dest, src, **kwargs))[1])
    return reads


@pytest.mark.parametrize("clip", [{}, {"clipnorm": 1.0}], ids=["plain", "clipnorm"])
def test_two_launches_more_per_step_and_no_read(monkeypatch, clip):
    """Per step: CheckFinite (one parameter range) and UpdateLossScale more than the unwrapped
    optimizer's launches; and an epoch reads from the device exactly what the unwrapped one's does
    (the logs), so the steps read nothing."""
    x, y = np.random.default_rng(0).normal(size=(64, 20)), np.arange(64) % 10
    counts, reads = [], []
    for optimizer in (AdamW(schedules.CosineDecay(0.01, 100), **clip),
                      LossScaleOptimizer(AdamW(schedules.CosineDecay(0.01, 100), **clip))):
        model = clnet.Sequential([Input((20,)), Dense(32, "relu"), Dense(16, "tanh"), Dense(10, "softmax")], seed=0)
        model.compile(optimizer, "categorical_crossentropy", ["accuracy"])
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # builds the programs
        rt = clnet.runtime()
        with monkeypatch.context() as patch:
            copied = copies_to_host(patch)
            before = rt.launches
            model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
            counts.append(rt.launches - before)
        reads.append(len(copied))
    assert counts[1] == counts[0] + 4 * 2  # 4 steps
    assert reads[1] == reads[0] <= 2


# -- config, names, errors -------------------------------------------------------------------------
def test_config_round_trip_and_get():
    optimizer = LossScaleOptimizer(Adam(0.01, clipnorm=1.0), initial_scale=1024, dynamic_growth_steps=50)
    config = optimizer.get_config()
    assert config == {"name": "loss_scale_optimizer",
                      "inner_optimizer": {"class_name": "Adam", "config": optimizer.inner_optimizer.get_config()},
                      "initial_scale": 1024.0, "dynamic_growth_steps": 50}
    stored = json.loads(json.dumps({"class_name": "LossScaleOptimizer", "config": config}))
    for restored in (clnet.optimizers.get(stored), LossScaleOptimizer.from_config(stored["config"]),
                     clnet.optimizers.get({"class_name": "lossscaleoptimizer", "config": config})):
        assert type(restored) is LossScaleOptimizer and type(restored.inner_optimizer) is Adam
        assert restored.get_config() == config
        assert restored.inner_optimizer is not optimizer.inner_optimizer
    assert stored["config"]["inner_optimizer"] == config["inner_optimizer"]  # (from_config left it as it was)
    assert repr(optimizer).startswith("LossScaleOptimizer(Adam(learning_rate=0.01")
    with pytest.raises(ValueError, match="unknown optimizer 'lossscaleoptimizer'"):
        clnet.optimizers.get("lossscaleoptimizer")  # (no string alias: it needs an inner optimizer)


def test_names_learning_rate_and_iterations_are_the_inner_optimizer_s():
    made = [LossScaleOptimizer(SGD()), LossScaleOptimizer(SGD()), LossScaleOptimizer(SGD(), name="mine")]
    assert [o.name for o in made] == ["loss_scale_optimizer", "loss_scale_optimizer_1", "mine"]
    assert made[0].inner_optimizer.name == "sgd"
    optimizer = made[0]
    assert optimizer.learning_rate == 0.01
    optimizer.learning_rate = 0.5
    assert optimizer.inner_optimizer.learning_rate == 0.5
    optimizer.iterations = 7
    assert optimizer.inner_optimizer.iterations == 7
    assert (optimizer.dynamic_scale, optimizer.step_counter) == (2.0**15, 0)  # before training, no device
    scheduled = LossScaleOptimizer(SGD(schedules.ExponentialDecay(0.1, 1, 0.5)))
    scheduled.iterations = 2
    assert scheduled.learning_rate == 0.025 and scheduled.schedule is scheduled.inner_optimizer.schedule


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"LossScaleOptimizer does not support `learning_rate` \(got 0.1\)\. "
                                         r"Instead, set `learning_rate` on the `inner_optimizer`"):
        LossScaleOptimizer(SGD(), learning_rate=0.1)
    with pytest.raises(ValueError, match=r"does not support `clipnorm` \(got 1.0\)"):
        LossScaleOptimizer(SGD(), clipnorm=1.0)
    assert LossScaleOptimizer(SGD(), clipnorm=None, use_ema=False).get_config()["initial_scale"] == 2.0**15
    with pytest.raises(TypeError, match=r"LossScaleOptimizer got unknown argument\(s\) \['scale'\]"):
        LossScaleOptimizer(SGD(), scale=2)
    with pytest.raises(ValueError, match="dynamic=False"):
        LossScaleOptimizer(SGD(), dynamic=False)
    with pytest.raises(TypeError, match="LossScaleOptimizer inner_optimizer must be an instance of "
                                        "clnet.optimizers.Optimizer .*got 'adam'"):
        LossScaleOptimizer("adam")
    with pytest.raises(TypeError, match="inner_optimizer .* other than a LossScaleOptimizer"):
        LossScaleOptimizer(LossScaleOptimizer(SGD()))
    for value in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=f"LossScaleOptimizer initial_scale must be a finite number > 0, "
                                             f"got {value!r}"):
            LossScaleOptimizer(SGD(), initial_scale=value)
    with pytest.raises(TypeError, match="LossScaleOptimizer initial_scale must be a number > 0, got '2'"):
        LossScaleOptimizer(SGD(), initial_scale="2")
    for value in (0, -3, 2**31):
        with pytest.raises(ValueError, match=rf"dynamic_growth_steps must be an integer in \[1, 2147483647\], "
                                             rf"got {value}"):
            LossScaleOptimizer(SGD(), dynamic_growth_steps=value)
    for value in (2.0, True, "5"):
        with pytest.raises(TypeError, match=f"dynamic_growth_steps must be an integer >= 1, got {value!r}"):
            LossScaleOptimizer(SGD(), dynamic_growth_steps=value)
    with pytest.raises(ValueError, match="LossScaleOptimizer name must be a non-empty string, got ''"):
        LossScaleOptimizer(SGD(), name="")
    with pytest.raises(ValueError, match="LossScaleOptimizer config has no 'inner_optimizer'"):
        LossScaleOptimizer.from_config({"initial_scale": 2.0})
    optimizer = LossScaleOptimizer(SGD(), dynamic_growth_steps=4)
    with pytest.raises(ValueError, match=r"step_counter must be an integer in \[0, 3\].*got 4"):
        optimizer.set_scalar_state({"dynamic_scale": 8.0, "step_counter": 4})
    with pytest.raises(ValueError, match="dynamic_scale must be a finite number > 0, got -8.0"):
        optimizer.set_scalar_state({"dynamic_scale": -8.0, "step_counter": 0})


# -- checkpoints and distributions -----------------------------------------------------------------
def test_checkpoint_resumes_exactly(fp64, tmp_path):
    """save, load_model: the inner optimizer's moments and iterations, the scale and the counter
    come back, and training continues as an uninterrupted run; a corrupt state is a clear error."""
    x = np.random.default_rng(2).normal(size=(40, 5))
    y = np.random.default_rng(3).normal(size=(40, 3))

    def make():
        return mlp(LossScaleOptimizer(Adam(0.02), initial_scale=2.0**9, dynamic_growth_steps=3), seed=4)
    run = make()
    run.fit(x, y, batch_size=8, epochs=3, verbose=0)
    through = make()
    through.fit(x, y, batch_size=8, epochs=2, verbose=0)
    path = tmp_path / "lso.h5"
    through.save(path)
    loaded = clnet.load_model(path)
    assert type(loaded.optimizer) is LossScaleOptimizer
    assert loaded.optimizer.get_config() == through.optimizer.get_config()
    state = {"dynamic_scale": 2.0**12, "step_counter": 1}  # 10 steps: grown after the 3rd, 6th and 9th
    assert loaded.optimizer.scalar_state() == through.optimizer.scalar_state() == state
    assert loaded.optimizer.iterations == 10
    loaded.fit(x, y, batch_size=8, epochs=3, initial_epoch=loaded.epoch, verbose=0)
    for a, b in zip(loaded.get_weights(), run.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert loaded.optimizer.scalar_state() == run.optimizer.scalar_state()
    for key, value, message in [("step_counter", 3, r"step_counter must be an integer in \[0, 2\]"),
                                ("dynamic_scale", np.inf, "dynamic_scale must be a finite number > 0"),
                                ("dynamic_scale", None, "has no attribute 'dynamic_scale'")]:
        with h5py.File(path, "r+") as f:
            if value is None:
                del f["optimizer"].attrs[key]
            else:
                f["optimizer"].attrs[key] = value
        with pytest.raises(clnet.saving.CheckpointError, match=f"lso.h5.*{message}"):
            clnet.load_model(path)


def test_data_parallel_equals_one_device(fp64):
    """DataParallel (two replicas of this device) with a LossScaleOptimizer trains as one device,
    a skipped step included (a target of 1e306 in one replica's shard); its replicas take the
    model's scale, counter and learning rate as they are set between fits."""
    from test_distribute import two_replicas_on_one_device
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 5)), rng.normal(size=(40, 3))
    y[13, 2] = 1e306

    def make():
        return clnet.Sequential([Input((5,)), Dense(7, "tanh"), Dense(3)], floatx="float64", seed=3)
    single = make()
    single.compile(LossScaleOptimizer(Adam(0.01), dynamic_growth_steps=2), "mse")
    strategy = clnet.distribute.DataParallel(devices=two_replicas_on_one_device(), check_speed=False)
    with strategy.scope():
        model = make()
        model.compile(LossScaleOptimizer(Adam(0.01), dynamic_growth_steps=2), "mse")
    for fit in range(2):
        for m in (single, model):
            m.fit(x, y, batch_size=8, epochs=fit + 1, initial_epoch=fit, shuffle=False, verbose=0)
        state = single.optimizer.scalar_state()
        assert model.optimizer.scalar_state() == strategy.replica_models[0].optimizer.scalar_state() == state
        for m in (single, model):
            m.optimizer.set_scalar_state({"dynamic_scale": 2.0**20, "step_counter": 1})
            m.optimizer.learning_rate = 0.003
    scale, counter = 2.0**20, 1
    for step in range(5):  # the second step of the epoch (rows 8 to 15) is skipped
        scale, counter = keras_rule(scale, counter, step != 1, 2)
    assert state == {"dynamic_scale": scale, "step_counter": counter}
    for a, b, c in zip(model.get_weights(), single.get_weights(), strategy.replica_models[0].get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(a, c)


def test_mpi_two_ranks_equal_one_device(tmp_path):
    """MPIDataParallel over two ranks with a LossScaleOptimizer: rank 1, started from another scale,
    gets rank 0's with its weights; the ranks train as one device does, scale and counter included,
    and resume alike from rank 0's checkpoint."""
    from test_distribute import STEPS_ARGS, data, mpirun
    arguments = {"initial_scale": 2.0**12, "dynamic_growth_steps": 2}
    run = mpirun("train", str(tmp_path), LOSS_SCALE=json.dumps(arguments))
    assert run.returncode == 0, run.stdout + run.stderr
    x, y = data()
    reference = clnet.Sequential([Input((5,)), Dense(7, "tanh"), Dense(3)], floatx="float64", seed=3)
    reference.compile(LossScaleOptimizer(Adam(0.01), **arguments), "mse")
    reference.fit(x, y, epochs=4, shuffle=False, **STEPS_ARGS)
    result = np.load(tmp_path / "weights.npz")
    for i, want in enumerate(reference.get_weights()):
        np.testing.assert_allclose(result[f"arr_{i}"], want, rtol=0, atol=1e-10)
    reference.fit(x, y, epochs=5, initial_epoch=4, shuffle=False, **STEPS_ARGS)
    for i, want in enumerate(reference.get_weights()):
        np.testing.assert_allclose(np.load(tmp_path / "resumed.npz")[f"arr_{i}"], want, rtol=0, atol=1e-10)
    state = reference.optimizer.scalar_state()
    assert state == {"dynamic_scale": 2.0**12 * 2**12, "step_counter": 1}  # 25 finite steps
    for rank in (0, 1):
        saved = np.load(tmp_path / f"loss-scale-{rank}.npz")
        assert (float(saved["scale"]), int(saved["counter"])) == (state["dynamic_scale"], state["step_counter"])
