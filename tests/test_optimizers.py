"""Every optimizer: 50 steps on the device against the numpy reference of the same formula."""
import numpy as np
import pytest

import clnet
from clnet.cl.parameters import ParameterStore
from reference import OptimizerReference

OPTIMIZERS = {"sgd": {}, "momentum": {"momentum": 0.8}, "adagrad": {}, "rmsprop": {"rho": 0.85},
              "adadelta": {"rho": 0.9}, "adam": {"beta_1": 0.85, "beta_2": 0.99}}


def run(name, dtype, size, regularization, steps, seed=0):
    rng = np.random.default_rng(seed)
    rt = clnet.runtime()
    store = ParameterStore(rt, dtype)
    # Two parameters, so that the flat buffer has alignment padding between them.
    first, second = rng.normal(size=size), rng.normal(size=(3, 2))
    store.add(first), store.add(second)
    store.allocate()
    optimizer = clnet.optimizers.get(name).__class__(learning_rate=0.05, **regularization, **OPTIMIZERS[name])
    optimizer.bind(store)
    config = {k: v for k, v in optimizer.get_config().items() if k != "name"}
    reference = [OptimizerReference(name, p.size, **config) for p in (first, second)]
    weights = [first.ravel().copy(), second.ravel().copy()]
    for _ in range(steps):
        grads = [rng.normal(size=w.size) for w in weights]
        host = np.zeros(store.size)
        for p, g in zip(store.parameters, grads):
            host[p.offset:p.offset + p.size] = g
        store.grads.write(host)
        optimizer.step()
        weights = [ref.step(w, g) for ref, w, g in zip(reference, weights, grads)]
    device = store.values.numpy()
    got = [device[p.offset:p.offset + p.size] for p in store.parameters]
    padding = np.ones(store.size, bool)
    for p in store.parameters:
        padding[p.offset:p.offset + p.size] = False
    return got, weights, device[padding]


@pytest.mark.parametrize("regularization", [{}, {"l1": 0.01, "l2": 0.02}], ids=["plain", "l1l2"])
@pytest.mark.parametrize("size", [1, 5, 130])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fifty_steps_float64(fp64, name, size, regularization):
    got, want, padding = run(name, np.float64, size, regularization, steps=50)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    assert np.all(padding == 0), "the padding between parameters must stay zero"


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_float32_follows_float64(name):
    got, want, _ = run(name, np.float32, 33, {"l1": 0.01, "l2": 0.02}, steps=10)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_regularization_changes_the_result(fp64):
    plain, _, _ = run("sgd", np.float64, 5, {}, steps=3)
    regularized, _, _ = run("sgd", np.float64, 5, {"l1": 0.1}, steps=3)
    assert not np.allclose(plain[0], regularized[0])


def test_keras_defaults_and_names():
    assert clnet.optimizers.get("adam").get_config() == {
        "name": "adam", "learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "l1": 0.0, "l2": 0.0}
    assert clnet.optimizers.get("sgd").learning_rate == 0.01
    assert clnet.optimizers.get("rmsprop").hyper == {"rho": 0.9, "epsilon": 1e-7}
    restored = clnet.optimizers.get(clnet.optimizers.Momentum(0.1, momentum=0.5, l2=0.01).get_config())
    assert restored.get_config() == {"name": "momentum", "learning_rate": 0.1, "momentum": 0.5, "l1": 0.0, "l2": 0.01}
    with pytest.raises(ValueError, match="learning_rate must be a non-negative number, got -1"):
        clnet.optimizers.Adam(learning_rate=-1)
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['betas'\]"):
        clnet.optimizers.Adam(betas=(0.9, 0.99))
    with pytest.raises(ValueError, match="unknown optimizer 'adamw'"):
        clnet.optimizers.get("adamw")
