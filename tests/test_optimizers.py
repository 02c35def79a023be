"""Every optimizer and every argument: 50 steps on the device against tests/reference.py's numpy
transcription of Keras 3, and 20 steps against real Keras numbers stored in
tests/data/keras_optimizers.npz (written by make_keras_optimizer_fixture.py)."""
import inspect
import json
from pathlib import Path

import numpy as np
import pytest

import clnet
from clnet.cl.parameters import ParameterStore, parameter_ranges
from clnet.layers import Dense, Input
from clnet.optimizers import schedules
from reference import OptimizerReference, schedule_reference

FIXTURE = Path(__file__).parent / "data" / "keras_optimizers.npz"

OPTIMIZERS = {
    "sgd": ("sgd", {}),
    "sgd_momentum": ("sgd", {"momentum": 0.7}),
    "sgd_nesterov": ("sgd", {"momentum": 0.9, "nesterov": True}),
    "momentum": ("momentum", {"momentum": 0.8}),
    "adagrad": ("adagrad", {"initial_accumulator_value": 0.3}),
    "rmsprop": ("rmsprop", {"rho": 0.85}),
    "rmsprop_centered": ("rmsprop", {"rho": 0.85, "centered": True}),
    "rmsprop_momentum": ("rmsprop", {"momentum": 0.6}),
    "rmsprop_centered_momentum": ("rmsprop", {"rho": 0.8, "momentum": 0.5, "centered": True}),
    "adadelta": ("adadelta", {"rho": 0.9}),
    "adam": ("adam", {"beta_1": 0.85, "beta_2": 0.99}),
    "adam_amsgrad": ("adam", {"beta_1": 0.85, "beta_2": 0.99, "amsgrad": True}),
    "adamw": ("adamw", {"weight_decay": 0.1}),
}
EXPONENTIAL = {"class_name": "ExponentialDecay",
               "config": {"initial_learning_rate": 0.08, "decay_steps": 6, "decay_rate": 0.7, "staircase": True}}
COSINE = {"class_name": "CosineDecay", "config": {"initial_learning_rate": 0.01, "decay_steps": 30, "alpha": 0.2,
                                                   "warmup_target": 0.08, "warmup_steps": 10}}
PIECEWISE = {"class_name": "PiecewiseConstantDecay", "config": {"boundaries": [10, 25], "values": [0.1, 0.03, 0.01]}}
# Gradients are N(0, 1): the 130-element parameter's norm is about 11, all of them together about 12.
ARGUMENTS = {
    "clipnorm": {"clipnorm": 1.0},
    "global_clipnorm": {"global_clipnorm": 5.0},
    "clipvalue": {"clipvalue": 0.5},
    "weight_decay": {"weight_decay": 0.2},
    "exponential": {"learning_rate": EXPONENTIAL},
    "cosine_warmup": {"learning_rate": COSINE},
    "piecewise": {"learning_rate": PIECEWISE},
    "l1l2_clipnorm_decay": {"l1": 0.01, "l2": 0.02, "clipnorm": 2.0, "weight_decay": 0.1},
}
SHAPES = [(3, 2), (1,), (7, 3)]  # after the first parameter, whose size varies


def make_store(dtype, shapes, rng):
    store = ParameterStore(clnet.runtime(), dtype)
    initial = [rng.normal(size=shape) for shape in shapes]
    for w in initial:
        store.add(w)
    store.allocate()
    return store, [w.ravel().copy() for w in initial]


def bind(optimizer, store):
    """The optimizer over every parameter of `store`: one range, the whole store."""
    ranges = parameter_ranges(store.parameters)
    assert len(ranges) == 1 and ranges[0].whole
    optimizer.bind(ranges, store.rt, store.dtype)


def write_grads(store, grads):
    host = np.zeros(store.size)  # the padding's gradient is 0, as the layers leave it
    for p, g in zip(store.parameters, grads):
        host[p.offset:p.offset + p.size] = g
    store.grads.write(host)


def padding_of(store, flat):
    outside = np.ones(store.size, bool)
    for p in store.parameters:
        outside[p.offset:p.offset + p.size] = False
    return flat[outside]


def run(case, dtype, size=130, steps=50, extra=None, seed=0):
    """(device weights, reference weights, padding values, reference) after `steps` steps."""
    name, arguments = OPTIMIZERS[case]
    arguments = {**arguments, **(extra or {})}
    rng = np.random.default_rng(seed)
    store, weights = make_store(dtype, [(size,), *SHAPES], rng)
    optimizer = clnet.optimizers.get(name).__class__(**{"learning_rate": 0.05, **arguments})
    bind(optimizer, store)
    config = {k: v for k, v in optimizer.get_config().items() if k != "name"}
    reference = OptimizerReference(name, [w.size for w in weights], **config)
    for _ in range(steps):
        grads = [rng.normal(size=w.size) for w in weights]
        write_grads(store, grads)
        optimizer.step()
        weights = reference.step(weights, grads)
    assert optimizer.iterations == reference.iterations == steps
    device = store.values.numpy()
    got = [p.own(device) for p in store.parameters]
    return got, weights, padding_of(store, device), reference


@pytest.mark.parametrize("regularization", [{}, {"l1": 0.01, "l2": 0.02}], ids=["plain", "l1l2"])
@pytest.mark.parametrize("size", [1, 5, 130])
@pytest.mark.parametrize("case", sorted(OPTIMIZERS))
def test_fifty_steps_float64(fp64, case, size, regularization):
    got, want, padding, _ = run(case, np.float64, size, extra=regularization)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    assert np.all(padding == 0), "the padding between parameters must stay zero"


@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
@pytest.mark.parametrize("case", ["sgd_nesterov", "adagrad", "rmsprop_centered_momentum", "adadelta",
                                  "adam_amsgrad", "adamw"])
def test_arguments_fifty_steps_float64(fp64, case, argument):
    got, want, padding, reference = run(case, np.float64, 130, extra=ARGUMENTS[argument])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    assert np.all(padding == 0), "the padding between parameters must stay zero"
    if any(key in ARGUMENTS[argument] for key in ("clipnorm", "global_clipnorm", "clipvalue")):
        assert reference.clip_active >= 45, f"the clip changed the gradient on only {reference.clip_active} of 50 steps"


def test_clipping_and_decay_change_the_result(fp64):
    plain = run("adam", np.float64, steps=5)[0]
    for argument in ("clipnorm", "global_clipnorm", "clipvalue", "weight_decay"):
        changed = run("adam", np.float64, steps=5, extra=ARGUMENTS[argument])[0]
        assert not np.allclose(plain[0], changed[0], rtol=1e-6), argument


@pytest.mark.parametrize("case", sorted(OPTIMIZERS))
def test_float32_follows_float64(case):
    extra = {"l1": 0.01, "l2": 0.02, "global_clipnorm": 4.0, "weight_decay": 0.05, "learning_rate": COSINE}
    got, want, padding, _ = run(case, np.float32, 33, steps=10, extra=extra)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert np.all(padding == 0)


@pytest.mark.parametrize("argument", ["none", "clipnorm", "global_clipnorm", "l1l2_clipnorm_decay"])
@pytest.mark.parametrize("case", ["adam_amsgrad", "rmsprop_centered_momentum", "sgd_nesterov"])
def test_parameters_of_several_stores_step_as_one_list(fp64, case, argument):
    """A model sharing layers that other models built trains runs of their stores: here two of
    store A's three parameters (the middle one skipped: a layer of another model) and all of
    store B's, four update launches. Each follows the reference of those four parameters, global
    norms included, and the skipped parameter and all padding stay as they were."""
    name, arguments = OPTIMIZERS[case]
    rng = np.random.default_rng(3)
    a, a_weights = make_store(np.float64, [(130,), (37,), (5, 3)], rng)
    b, b_weights = make_store(np.float64, [(2, 9), (1,)], rng)
    trained = [a.parameters[0], a.parameters[2], *b.parameters]
    weights = [a_weights[0], a_weights[2], *b_weights]
    optimizer = clnet.optimizers.get(name).__class__(learning_rate=0.05, **arguments,
                                                     **ARGUMENTS.get(argument, {}))
    ranges = parameter_ranges(trained)
    assert [(r.store, len(r.parameters), r.whole) for r in ranges] == [(a, 1, False), (a, 1, False), (b, 2, True)]
    optimizer.bind(ranges, a.rt, np.float64)
    config = {k: v for k, v in optimizer.get_config().items() if k != "name"}
    reference = OptimizerReference(name, [w.size for w in weights], **config)
    with clnet.profile(print_table=False) as launches:
        for _ in range(30):
            grads = [rng.normal(size=w.size) for w in weights]
            write_grads(a, [grads[0], rng.normal(size=37), grads[1]])  # the skipped one's gradient is not used
            write_grads(b, grads[2:])
            optimizer.step()
            weights = reference.step(weights, grads)
    norms = "clip" in argument  # a norm pass per range, then the scale
    assert sum(calls for calls, _, _ in launches.rows.values()) == 30 * (3 + 4 * norms)  # an update per range
    for p, want in zip(trained, weights):
        np.testing.assert_allclose(p.value.numpy().ravel(), want, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(a.parameters[1].value.numpy().ravel(), a_weights[1])
    for store in (a, b):
        assert np.all(padding_of(store, store.values.numpy()) == 0)
    flat = next(iter(optimizer.moments.values())).numpy()
    assert optimizer.moment(trained[1], flat).shape == (trained[1].size,)
    with pytest.raises(ValueError, match="keeps no moments"):
        optimizer.moment(a.parameters[1], flat)


# -- real Keras numbers --------------------------------------------------------------------------
def keras_fixture():
    data = np.load(FIXTURE)
    count = sum(1 for key in data.files if key[0] == "w" and key[1:].isdigit())
    return data, [data[f"w{i}"] for i in range(count)], [data[f"g{i}"] for i in range(count)]


@pytest.mark.parametrize("case", sorted(json.loads(str(np.load(FIXTURE)["cases"]))))
def test_matches_real_keras(fp64, case):
    """Each step's weights as Keras 3.15 (torch backend, float64) computed them, to 1e-9."""
    data, initial, grads = keras_fixture()
    class_name, config = json.loads(str(data["cases"]))[case]
    store = ParameterStore(clnet.runtime(), np.float64)
    for w in initial:
        store.add(w)
    store.allocate()
    optimizer = getattr(clnet.optimizers, class_name)(**config)
    bind(optimizer, store)
    for step in range(len(grads[0])):
        write_grads(store, [g[step].ravel() for g in grads])
        optimizer.step()
        device = store.values.numpy()
        for i, p in enumerate(store.parameters):
            np.testing.assert_allclose(p.own(device), data[f"{case}/w{i}"][step].ravel(), rtol=1e-9, atol=1e-12,
                                       err_msg=f"{case}, parameter {i}, step {step}")
        assert np.all(padding_of(store, device) == 0)


@pytest.mark.parametrize("case", sorted(json.loads(str(np.load(FIXTURE)["schedules"]))))
def test_schedules_match_keras_and_the_reference(case):
    data = np.load(FIXTURE)
    entry = json.loads(str(data["schedules"]))[case]
    keras_values = data[f"schedule/{case}"]
    schedule = schedules.deserialize(entry)
    got = np.array([schedule(step) for step in range(len(keras_values))])
    want = np.array([schedule_reference(entry, step) for step in range(len(keras_values))])
    np.testing.assert_allclose(got, keras_values, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(want, keras_values, rtol=1e-12, atol=1e-15)


def test_schedule_values_at_chosen_steps():
    staircase = schedules.ExponentialDecay(0.1, decay_steps=4, decay_rate=0.5, staircase=True)
    assert [staircase(s) for s in (0, 3, 4, 7, 8, 12)] == [0.1, 0.1, 0.05, 0.05, 0.025, 0.0125]
    assert schedules.ExponentialDecay(0.1, 4, 0.5)(2) == pytest.approx(0.1 * 0.5 ** 0.5, rel=1e-15)
    warm = schedules.CosineDecay(0.0, decay_steps=10, alpha=0.1, warmup_target=0.2, warmup_steps=4)
    assert [warm(s) for s in (0, 1, 2, 4)] == pytest.approx([0.0, 0.05, 0.1, 0.2], rel=1e-15)
    assert warm(9) == pytest.approx(0.2 * (0.9 * 0.5 * (1 + np.cos(np.pi * 0.5)) + 0.1), rel=1e-15)
    assert warm(14) == warm(100) == pytest.approx(0.02, rel=1e-12)  # alpha times the target after the decay
    assert schedules.CosineDecay(1.0, 10)(5) == pytest.approx(0.5, rel=1e-15)
    piecewise = schedules.PiecewiseConstantDecay([3, 8], [1.0, 0.5, 0.1])
    assert [piecewise(s) for s in (0, 3, 4, 8, 9, 1000)] == [1.0, 1.0, 0.5, 0.5, 0.1, 0.1]


def test_schedule_is_evaluated_at_the_iteration_count_before_the_step(fp64):
    """Keras: `iterations` is 0 before the first step, and step t uses schedule(t)."""
    rng = np.random.default_rng(3)
    store, weights = make_store(np.float64, [(4,)], rng)
    optimizer = clnet.optimizers.SGD(schedules.PiecewiseConstantDecay([0, 1], [0.5, 0.1, 0.0]))
    bind(optimizer, store)
    assert optimizer.iterations == 0 and optimizer.learning_rate == 0.5
    for step, rate in enumerate([0.5, 0.1, 0.0]):
        assert optimizer.learning_rate == rate
        before = store.values.numpy()
        write_grads(store, [np.ones(4)])
        optimizer.step()
        np.testing.assert_array_equal(store.values.numpy()[:4], before[:4] - rate)
        assert optimizer.iterations == step + 1
    with pytest.raises(TypeError, match=r"SGD was created with the learning-rate schedule PiecewiseConstantDecay"):
        optimizer.learning_rate = 0.1
    optimizer.learning_rate = schedules.ExponentialDecay(1.0, 1, 0.5)  # a schedule may replace a schedule
    assert optimizer.learning_rate == 0.125


# -- launches ------------------------------------------------------------------------------------
@pytest.mark.parametrize("clip,extra", [({}, 0), ({"clipvalue": 0.1}, 0), ({"clipnorm": 1.0}, 2),
                                        ({"global_clipnorm": 1.0}, 2)])
def test_launches_per_step_with_clipping(clip, extra):
    """Clipping by value is part of the update kernel; by norm it adds CalcGradientNorm and
    CalcClipScale, whatever the number of parameters; weight decay and schedules add nothing."""
    x, y = np.random.default_rng(0).normal(size=(64, 20)), np.arange(64) % 10
    model = clnet.Sequential([Input((20,)), Dense(32, "relu"), Dense(16, "tanh"), Dense(10, "softmax")], seed=0)
    model.compile(clnet.optimizers.AdamW(schedules.CosineDecay(0.01, 100), **clip), "categorical_crossentropy")
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    rt = clnet.runtime()
    before = rt.launches
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    # Without clipping, as tests/test_training.py counts them for this model (14 on a CPU, 11 in
    # the GPU form); + the epoch-end ReduceMetrics.
    plain = 11 if model.layers[-1].tiled else 14
    assert rt.launches - before == 4 * (plain + extra) + 1


# -- names, config, errors -----------------------------------------------------------------------
def test_keras_defaults_names_and_aliases():
    assert clnet.optimizers.get("adam").get_config() == {
        "name": "adam", "learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": False,
        "weight_decay": None, "clipnorm": None, "global_clipnorm": None, "clipvalue": None, "l1": 0.0, "l2": 0.0}
    assert clnet.optimizers.get("sgd").learning_rate == 0.01
    assert clnet.optimizers.get("sgd").hyper == {"momentum": 0.0, "nesterov": False}
    assert clnet.optimizers.get("rmsprop").hyper == {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-7, "centered": False}
    assert clnet.optimizers.get("adagrad").hyper == {"initial_accumulator_value": 0.1, "epsilon": 1e-7}
    assert clnet.optimizers.get("adadelta").hyper == {"rho": 0.95, "epsilon": 1e-7}
    assert clnet.optimizers.get("adamw").weight_decay == 0.004
    assert clnet.optimizers.Momentum().hyper == {"momentum": 0.9, "nesterov": False}
    assert clnet.optimizers.Adagrad is clnet.optimizers.AdaGrad
    assert clnet.optimizers.RMSprop is clnet.optimizers.RMSProp
    assert clnet.optimizers.Adadelta is clnet.optimizers.AdaDelta
    assert clnet.optimizers.AdaGrad(initial_accumulator_value=0.5).slots == {"accumulator": 0.5}
    assert list(clnet.optimizers.RMSprop(momentum=0.5, centered=True).slots) == ["mean_square", "mean_grad", "momentum"]
    assert list(clnet.optimizers.Adam(amsgrad=True).slots) == ["first_moment", "second_moment", "max_second_moment"]
    assert clnet.optimizers.SGD().slots == {} and list(clnet.optimizers.SGD(momentum=0.5).slots) == ["velocity"]


@pytest.mark.parametrize("optimizer", [
    clnet.optimizers.Momentum(0.1, momentum=0.5, l2=0.01),
    clnet.optimizers.SGD(0.1, momentum=0.9, nesterov=True, global_clipnorm=2.0),
    clnet.optimizers.Adam(amsgrad=True, clipnorm=1.0, weight_decay=0.01),
    clnet.optimizers.AdamW(schedules.CosineDecay(0.01, 50, alpha=0.1, warmup_target=0.1, warmup_steps=5)),
    clnet.optimizers.RMSprop(schedules.PiecewiseConstantDecay([5], [0.1, 0.01]), momentum=0.5, centered=True,
                             clipvalue=0.5),
    clnet.optimizers.Adagrad(schedules.ExponentialDecay(0.1, 10, 0.9, staircase=True), initial_accumulator_value=0.2),
], ids=lambda o: type(o).__name__)
def test_config_round_trip(optimizer):
    config = optimizer.get_config()
    # As a checkpoint stores it: its class and its config (whose name is the optimizer's own).
    stored = json.loads(json.dumps({"class_name": type(optimizer).__name__, "config": config}))
    restored = clnet.optimizers.get(stored)
    assert type(restored) is type(optimizer)
    assert restored.get_config() == config
    assert restored.slots == optimizer.slots
    if optimizer.schedule is not None:
        assert type(restored.schedule) is type(optimizer.schedule)
        assert [restored.schedule(s) for s in range(60)] == [optimizer.schedule(s) for s in range(60)]


# Keras 3.15.1's signatures, in order up to global_clipnorm (inspect.signature of keras.optimizers.X).
CLIPS = ("clipnorm", "clipvalue", "global_clipnorm")
KERAS_POSITIONS = {
    "SGD": ("learning_rate", "momentum", "nesterov", "weight_decay", *CLIPS),
    "Adagrad": ("learning_rate", "initial_accumulator_value", "epsilon", "weight_decay", *CLIPS),
    "RMSprop": ("learning_rate", "rho", "momentum", "epsilon", "centered", "weight_decay", *CLIPS),
    "Adadelta": ("learning_rate", "rho", "epsilon", "weight_decay", *CLIPS),
    "Adam": ("learning_rate", "beta_1", "beta_2", "epsilon", "amsgrad", "weight_decay", *CLIPS),
    "AdamW": ("learning_rate", "weight_decay", "beta_1", "beta_2", "epsilon", "amsgrad", *CLIPS),
}


@pytest.mark.parametrize("cls, values", [
    ("SGD", (0.05, 0.9, True, 0.01, 1.5)),
    ("Adagrad", (0.05, 0.3, 1e-6, 0.01, None, 0.5)),
    ("RMSprop", (0.05, 0.8, 0.5, 1e-6, True, 0.01, None, None, 2.0)),
    ("Adadelta", (0.05, 0.9, 1e-6, 0.01)),
    ("Adam", (0.05, 0.8, 0.99, 1e-6, True, 0.01, 1.5)),
    ("AdamW", (0.05, 0.02, 0.8, 0.99, 1e-6, True)),
])
def test_arguments_by_position_in_keras_s_order(cls, values):
    """`SGD(0.05, 0.9, True)` is Keras's SGD(learning_rate=0.05, momentum=0.9, nesterov=True): each
    optimizer takes its arguments positionally in Keras 3's order; l1, l2 and name by keyword only."""
    optimizer_class = getattr(clnet.optimizers, cls)
    by_position = optimizer_class(*values, name="same")
    by_keyword = optimizer_class(**dict(zip(KERAS_POSITIONS[cls], values)), name="same")
    assert by_position.get_config() == by_keyword.get_config()
    for argument, value in zip(KERAS_POSITIONS[cls], values):
        assert by_position.get_config()[argument] == value, argument
    positions = list(inspect.signature(optimizer_class).parameters)
    assert positions[:len(KERAS_POSITIONS[cls])] == list(KERAS_POSITIONS[cls])
    with pytest.raises(TypeError, match="positional argument"):  # (Keras's next is use_ema, not taken)
        optimizer_class(*KERAS_POSITIONS[cls], 0.0)


def test_momentum_takes_sgd_s_positions():
    assert clnet.optimizers.Momentum(0.05, 0.5, True).get_config() == {
        **clnet.optimizers.SGD(0.05, 0.5, True).get_config(), "name": "momentum"}


def test_names_as_keras_s_and_kept_by_the_config():
    """Keras 3.15.1's automatic names (optimizer.name after keras.utils.clear_session()): the
    class's name in snake_case, made unique: adam, adam_1, sgd, rm_sprop, adam_w, adagrad,
    adadelta."""
    opt = clnet.optimizers
    made = [opt.Adam(), opt.Adam(), opt.SGD(), opt.RMSprop(), opt.AdamW(), opt.Adagrad(), opt.Adadelta(),
            opt.get("adam")]
    assert [o.name for o in made] == ["adam", "adam_1", "sgd", "rm_sprop", "adam_w", "adagrad", "adadelta",
                                      "adam_2"]
    named = opt.RMSprop(0.01, name="my_rmsprop")
    assert named.name == named.get_config()["name"] == "my_rmsprop"
    assert opt.RMSprop.from_config(named.get_config()).name == "my_rmsprop"
    assert opt.get({"class_name": "RMSprop", "config": named.get_config()}).get_config() == named.get_config()
    assert opt.get({"name": "rmsprop", "learning_rate": 0.5}).name == "rmsprop"  # (as clnet wrote it before)
    with pytest.raises(ValueError, match=r"its name 'my_rmsprop' is not an optimizer's"):
        opt.get(named.get_config())
    with pytest.raises(ValueError, match="RMSProp name must be a non-empty string, got ''"):
        opt.RMSprop(name="")


def test_bad_arguments():
    opt = clnet.optimizers
    with pytest.raises(ValueError, match="Adam learning_rate must be a non-negative number, got -1"):
        opt.Adam(learning_rate=-1)
    with pytest.raises(TypeError, match=r"Adam got unknown argument\(s\) \['betas'\]"):
        opt.Adam(betas=(0.9, 0.99))
    with pytest.raises(ValueError, match="unknown optimizer 'nadam'"):
        opt.get("nadam")
    with pytest.raises(ValueError, match="SGD clipnorm must be a non-negative number, got -1.0"):
        opt.SGD(clipnorm=-1.0)
    with pytest.raises(ValueError, match="Adam global_clipnorm must be a non-negative number, got -2"):
        opt.Adam(global_clipnorm=-2)
    with pytest.raises(ValueError, match=r"Adam takes only one of clipnorm, clipvalue and global_clipnorm, got "
                                         r"clipnorm=1.0, global_clipnorm=2.0"):
        opt.Adam(clipnorm=1.0, global_clipnorm=2.0)
    with pytest.raises(ValueError, match="RMSProp weight_decay must be a non-negative number, got -0.1"):
        opt.RMSprop(weight_decay=-0.1)
    with pytest.raises(ValueError, match=r"SGD momentum must be in \[0, 1\], got 1.5"):
        opt.SGD(momentum=1.5)
    with pytest.raises(TypeError, match="Adam amsgrad must be True or False, got 'yes'"):
        opt.Adam(amsgrad="yes")
    with pytest.raises(TypeError, match="AdaGrad initial_accumulator_value must be a non-negative number, got '0.1'"):
        opt.Adagrad(initial_accumulator_value="0.1")
    with pytest.raises(ValueError, match="AdamW weight_decay must be a non-negative number .*got None"):
        opt.AdamW(weight_decay=None)
    with pytest.raises(TypeError, match="Adam learning_rate must be a non-negative number, got 'fast'"):
        opt.Adam("fast")
    assert opt.SGD(nesterov=True).slots == {}  # Keras allows nesterov without momentum: plain SGD
    assert opt.SGD(clipnorm=0).clipnorm == 0.0  # 0 means no clipping, as in Keras


def test_bad_schedule_arguments():
    with pytest.raises(TypeError, match=r"ExponentialDecay got unknown argument\(s\) decay=0.5"):
        schedules.ExponentialDecay(0.1, 10, 0.9, decay=0.5)
    with pytest.raises(ValueError, match="ExponentialDecay decay_steps must be > 0, got 0"):
        schedules.ExponentialDecay(0.1, 0, 0.9)
    with pytest.raises(TypeError, match="ExponentialDecay staircase must be True or False, got 1"):
        schedules.ExponentialDecay(0.1, 10, 0.9, staircase=1)
    with pytest.raises(TypeError, match=r"CosineDecay got unknown argument\(s\) warmup=5"):
        schedules.CosineDecay(0.1, 10, warmup=5)
    with pytest.raises(ValueError, match="CosineDecay warmup_steps must be >= 0, got -1"):
        schedules.CosineDecay(0.1, 10, warmup_target=0.2, warmup_steps=-1)
    with pytest.raises(TypeError, match="CosineDecay initial_learning_rate must be a finite number, got None"):
        schedules.CosineDecay(None, 10)
    with pytest.raises(ValueError, match=r"needs one more value than boundaries, got boundaries=\[1, 2\] \(2\) "
                                         r"and values=\[0.1, 0.01\] \(2\)"):
        schedules.PiecewiseConstantDecay([1, 2], [0.1, 0.01])
    with pytest.raises(ValueError, match=r"boundaries must increase strictly, got \[5, 5\]"):
        schedules.PiecewiseConstantDecay([5, 5], [0.1, 0.01, 0.001])
    with pytest.raises(ValueError, match="unknown learning-rate schedule 'StepDecay'"):
        schedules.deserialize({"class_name": "StepDecay", "config": {}})
    with pytest.raises(TypeError, match=r"PiecewiseConstantDecay got unknown argument\(s\) step=3"):
        clnet.optimizers.get({"name": "sgd", "learning_rate": {
            "class_name": "PiecewiseConstantDecay", "config": {"boundaries": [1], "values": [1.0, 0.1], "step": 3}}})
