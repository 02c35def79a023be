"""fit, evaluate and predict called again with the same arrays reuse their device copy (a
walk-forward loop, fit epoch by epoch): nothing is prepared or copied again, the results are those
of fresh copies, and a change the fingerprint can see, compile, or forget_data makes a new copy."""
import numpy as np
import pytest

import clnet
import clnet.data
import clnet.trainer
from clnet.layers import Dense, Input

X = np.random.default_rng(0).normal(size=(203, 7))
Y = np.random.default_rng(1).integers(0, 4, 203)
X_VAL = np.random.default_rng(2).normal(size=(41, 7))
Y_VAL = np.random.default_rng(3).integers(0, 4, 41)


def model(seed=5):
    m = clnet.Sequential([Input((7,)), Dense(6, "tanh"), Dense(4, "softmax")], seed=seed, floatx="float64")
    m.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
    return m


@pytest.fixture
def copies(monkeypatch):
    """The (use, samples) of every data set fit/evaluate/predict copies to the device."""
    monkeypatch.delenv("CLNET_DEVICE_MEMORY", raising=False)
    made = []
    batches = clnet.trainer.Batches

    def counted(rt, x, y, *args, **kwargs):
        made.append(len(x))
        return batches(rt, x, y, *args, **kwargs)
    monkeypatch.setattr(clnet.trainer, "Batches", counted)
    return made


def test_fit_in_a_loop_copies_its_data_once_and_trains_as_with_fresh_copies(copies):
    kept, fresh = model(), model()
    for epoch in range(3):
        kept.fit(X, Y, batch_size=32, epochs=epoch + 1, initial_epoch=epoch, verbose=0, validation_data=(X_VAL, Y_VAL))
        kept.evaluate(X_VAL, Y_VAL, verbose=0)  # (walk-forward: its copy does not push fit's out)
    assert copies == [203, 41, 41]
    del copies[:]
    for epoch in range(3):
        fresh.forget_data()
        fresh.fit(X, Y, batch_size=32, epochs=epoch + 1, initial_epoch=epoch, verbose=0,
                  validation_data=(X_VAL, Y_VAL))
    assert copies == [203, 41] * 3
    for a, b in zip(kept.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(kept.predict(X_VAL), fresh.predict(X_VAL))


def test_a_change_the_fingerprint_sees_makes_a_new_copy(copies):
    m = model()
    x, y = X.copy(), Y.copy()
    m.fit(x, y, epochs=1, verbose=0)
    m.fit(x, y, epochs=1, verbose=0)
    x[-1] += 1  # in place, in a sampled row (the last)
    m.fit(x, y, epochs=1, verbose=0)
    m.fit(x.copy(), y, epochs=1, verbose=0)  # equal values, another array
    m.fit(x[:150], y[:150], epochs=1, verbose=0)  # a view: other rows
    m.fit(x, y, epochs=1, verbose=0, sample_weight=np.ones(len(x)))
    m.fit(list(x), y, epochs=1, verbose=0)  # not arrays: prepared anew each time
    m.fit(list(x), y, epochs=1, verbose=0)
    assert copies == [203, 203, 203, 150, 203, 203, 203]


def test_the_copy_read_after_a_change_gives_what_a_fresh_model_gives(copies):
    x = X.copy()
    kept, fresh = model(), model()
    kept.fit(x, Y, epochs=1, verbose=0)
    x *= 0.5  # every row, in place
    kept.fit(x, Y, epochs=1, verbose=0)
    fresh.fit(X, Y, epochs=1, verbose=0)
    fresh.forget_data()
    fresh.fit(x, Y, epochs=1, verbose=0)
    for a, b in zip(kept.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_validation_split_predict_and_evaluate_keep_their_copies_until_compile(copies):
    m = model()
    for _ in range(2):
        m.fit(X, Y, epochs=1, verbose=0, validation_split=0.25)
        m.predict(X_VAL)
        m.evaluate(X_VAL, Y_VAL)
    assert copies == [153, 50, 41, 41]
    m.fit(X, Y, epochs=1, verbose=0, validation_split=0.5)
    assert copies[4:] == [102, 101]
    m.compile("sgd", "sparse_categorical_crossentropy")
    m.predict(X_VAL)
    assert copies[6:] == [41]


def test_kept_copies_stay_within_the_device_budget(copies, monkeypatch):
    m = model()
    row = 7 * 8
    monkeypatch.setenv("CLNET_DEVICE_MEMORY", str(250 * row))  # x alone: predict's
    m.predict(X)        # 203 rows kept
    m.predict(X_VAL)    # replaces predict's
    m.evaluate(X_VAL, Y_VAL)  # 41 rows of x and of y: both fit beside predict's
    assert copies == [203, 41, 41]
    kept = m.kept_data.device_bytes()
    m.evaluate(X, Y)    # 203 rows and targets: predict's copy must go first
    assert m.kept_data.device_bytes() <= 250 * row and kept <= 250 * row
    assert "predict" not in m.kept_data.entries
    m.forget_data()
    assert m.kept_data.device_bytes() == 0


def test_a_fingerprint_of_other_data_never_equals():
    a = np.arange(12.0).reshape(6, 2)
    same = clnet.data.Fingerprint.of(a, None)
    assert same == clnet.data.Fingerprint.of(a, None)
    assert same != clnet.data.Fingerprint.of(a, None, options=("float32",))
    assert same != clnet.data.Fingerprint.of(a.copy(), None)
    assert same != clnet.data.Fingerprint.of(a[:5], None)
    assert clnet.data.Fingerprint.of([[1.0, 2.0]], None) is None
    assert clnet.data.Fingerprint.of({"a": a}, None) != clnet.data.Fingerprint.of({"b": a}, None)


def test_an_unshuffled_fit_after_a_shuffled_one_reads_the_kept_copy_in_order(copies):
    kept, fresh = model(), model()
    kept.fit(X, Y, batch_size=32, epochs=1, verbose=0)
    kept.fit(X, Y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    fresh.fit(X, Y, batch_size=32, epochs=1, verbose=0)
    fresh.forget_data()
    fresh.fit(X, Y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    assert copies == [203, 203, 203]
    for a, b in zip(kept.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_fit_in_a_loop_shuffles_afresh_each_call_as_one_fit_of_all_the_epochs():
    """fit(epochs=1) called three times shuffles each call its own way (Keras reshuffles every
    epoch) and trains to the same weights as one fit of 3 epochs; so does a run resumed with
    initial_epoch."""
    whole, loop, resumed = model(), model(), model()
    whole.fit(X, Y, batch_size=32, epochs=3, verbose=0)
    for _ in range(3):
        loop.fit(X, Y, batch_size=32, epochs=1, verbose=0)
    resumed.fit(X, Y, batch_size=32, epochs=1, verbose=0)
    resumed.fit(X, Y, batch_size=32, epochs=3, initial_epoch=1, verbose=0)
    for other in (loop, resumed):
        for a, b in zip(whole.get_weights(), other.get_weights()):
            np.testing.assert_array_equal(a, b)
    same = model()  # three calls each in the first epoch's order train to other weights
    for _ in range(3):
        same.fit(X, Y, batch_size=32, epochs=1, verbose=0)
        same.data_epoch = 0  # (as a model that has trained no epoch)
    assert not np.allclose(loop.get_weights()[0], same.get_weights()[0])


@pytest.mark.parametrize("shape, dtype", [((1003, 7), np.float64), ((211, 3, 5), np.int64), ((40, 9), np.float32)])
def test_a_staged_copy_converts_chunk_by_chunk_as_from_numpy(shape, dtype):
    """Tensor.staged (a GPU's copy of resident data) through chunks of 100 rows or fewer, the last
    one short: the values as from_numpy gives them."""
    from clnet.cl.tensor import Tensor
    array = (np.random.default_rng(4).normal(size=shape) * 1000).astype(dtype)
    row = int(np.prod(shape[1:]))
    staged = Tensor.staged(array, np.float32, chunk_bytes=row * 4 * 100)
    np.testing.assert_array_equal(staged.numpy(), Tensor.from_numpy(array, np.float32).numpy())
    assert staged.shape == shape and staged.dtype == np.float32
