"""Data that does not fit: arrays over the device-memory budget stream in batch by batch, and
fit/evaluate/predict take generators and PyDatasets. Streaming never changes a result."""
import warnings

import numpy as np
import pytest

import clnet
import clnet.data
from clnet.layers import Dense, Flatten, Input

X = np.random.default_rng(0).normal(size=(203, 3, 7))
Y = np.random.default_rng(1).integers(0, 5, 203)
BATCH = 16


send = clnet.data.Staging.send


def model(seed=3):
    m = clnet.Sequential([Input((3, 7)), Flatten(), Dense(9, "relu"), Dense(5, "softmax")], seed=seed)
    m.compile("adam", "categorical_crossentropy", ["accuracy"])
    return m


@pytest.fixture
def streaming(monkeypatch):
    """Forces every array data set to stream (a budget of 256 bytes) and counts the batches sent."""
    monkeypatch.setenv("CLNET_DEVICE_MEMORY", "256")
    sent = []
    send = clnet.data.Staging.send
    monkeypatch.setattr(clnet.data.Staging, "send", lambda self, slot, rows: sent.append(rows) or send(self, slot, rows))
    return sent


@pytest.fixture
def resident(monkeypatch):
    monkeypatch.delenv("CLNET_DEVICE_MEMORY", raising=False)


class Batched(clnet.PyDataset):
    """Fixed-size batches of (x, y) in sequence; records which batches were asked for."""

    def __init__(self, x, y=None, batch_size=BATCH, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size
        self.asked, self.epochs = [], []

    def __len__(self):
        return -(-len(self.x) // self.batch_size)

    def __getitem__(self, index):
        self.asked.append(index)
        part = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.x[part] if self.y is None else (self.x[part], self.y[part])

    def on_epoch_begin(self):
        self.epochs.append("begin")

    def on_epoch_end(self):
        self.epochs.append("end")


def batches(x, y=None, batch_size=BATCH, fail_at=None, bad=None):
    """A generator of batches; at batch `fail_at` it raises, or yields `bad(x, y)` instead."""
    for step, first in enumerate(range(0, len(x), batch_size)):
        xb, yb = x[first:first + batch_size], None if y is None else y[first:first + batch_size]
        if step == fail_at:
            if bad is None:
                raise OSError("disk went away")
            xb, yb = bad(xb, yb)
        yield xb if y is None else (xb, yb)


def equal_weights(a, b):
    for u, v in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("shuffle", [True, False])
def test_streaming_is_bit_identical(monkeypatch, shuffle):
    runs, streamed = [], []
    for budget in (None, "1K"):  # X is 17 KiB in float32
        if budget is None:
            monkeypatch.delenv("CLNET_DEVICE_MEMORY", raising=False)
        else:
            monkeypatch.setenv("CLNET_DEVICE_MEMORY", budget)
            monkeypatch.setattr(clnet.data.Staging, "send", lambda *args: streamed.append(1) or send(*args))
        m = model()
        history = m.fit(X, Y, batch_size=BATCH, epochs=2, shuffle=shuffle, validation_split=0.2, verbose=0)
        runs.append((m, history.history, m.evaluate(X, Y, batch_size=7), m.predict(X, batch_size=50)))
    (a, history_a, eval_a, pred_a), (b, history_b, eval_b, pred_b) = runs
    assert len(streamed) == 2 * 11 + 2 * 3 + 29 + 5  # every batch of fit, validation, evaluate, predict
    equal_weights(a, b)
    assert history_a == history_b and eval_a == eval_b
    np.testing.assert_array_equal(pred_a, pred_b)


def test_streaming_runs_the_resident_launches(streaming):
    """The same kernels per step as the resident path (GatherRows reads the staging slot): the
    copies and the events ordering the two queues are no launches."""
    x, y = np.random.default_rng(0).normal(size=(64, 20)), np.arange(64) % 10
    m = clnet.Sequential([Input((20,)), Dense(32, "relu"), Dense(16, "tanh"), Dense(10, "softmax")], seed=0)
    m.compile("adam", "categorical_crossentropy", ["accuracy"])
    m.fit(x, y, batch_size=16, epochs=1, verbose=0)
    rt = clnet.runtime()
    before, sent_before = rt.launches, len(streaming)
    m.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    assert len(streaming) - sent_before == 4  # every batch streamed
    per_dense = 1 + (2 if m.layers[-1].tiled else 3)  # as test_launches_per_training_step counts them
    assert rt.launches - before == 4 * (1 + 3 * per_dense - 1 + 1 + 1) + 1


def test_streaming_a_short_last_batch_and_no_targets(rt, rng, streaming):
    """Batches straight from the host arrays, the last one short; predict's have no targets."""
    x, y = rng.normal(size=(20, 7)).astype(np.float32), rng.normal(size=(20, 2)).astype(np.float32)
    batches = clnet.data.Batches(rt, x, y, capacity=6)
    assert not batches.resident
    order = rng.permutation(20)
    batches.order(order)
    for first in (0, 6, 12, 18):
        xb, yb = batches.batch(first, min(6, 20 - first))
        rows = len(order[first:first + 6])
        np.testing.assert_array_equal(xb.numpy()[:rows], x[order[first:first + 6]])
        np.testing.assert_array_equal(xb.transposed.numpy()[:, :rows], x[order[first:first + 6]].T)
        np.testing.assert_array_equal(yb.numpy()[:rows], y[order[first:first + 6]])
    xb, _ = clnet.data.Batches(rt, x, None, capacity=6).batch(18, 2)
    np.testing.assert_array_equal(xb.numpy()[:2], x[18:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_memmap(tmp_path, monkeypatch, dtype):
    path = tmp_path / "x.dat"
    mapped = np.memmap(path, dtype=dtype, mode="w+", shape=X.shape)
    mapped[:] = X
    mapped.flush()
    mapped = np.memmap(path, dtype=dtype, mode="r", shape=X.shape)
    monkeypatch.delenv("CLNET_DEVICE_MEMORY", raising=False)
    in_memory = model()
    in_memory.fit(np.array(mapped), Y, batch_size=BATCH, epochs=2, verbose=0)
    monkeypatch.setenv("CLNET_DEVICE_MEMORY", "1K")
    streamed = model()
    streamed.fit(mapped, Y, batch_size=BATCH, epochs=2, verbose=0)
    equal_weights(in_memory, streamed)
    assert streamed.evaluate(mapped, Y) == in_memory.evaluate(np.array(mapped), Y)


def test_memmap_is_checked_in_blocks(tmp_path, monkeypatch, streaming):
    """NaN/inf are found without reading a memmap whole; the message names the block's rows."""
    monkeypatch.setattr(clnet.data, "CHECK_BYTES", 10 * 21 * 8)  # 10 rows a block
    mapped = np.memmap(tmp_path / "x.dat", dtype=np.float64, mode="w+", shape=X.shape)
    mapped[:] = X
    mapped[57, 1, 2] = np.nan
    with pytest.raises(ValueError, match=r"x\[50:60\] contains 1 NaN or infinite value\(s\), the first at index \(7, 1, 2\)"):
        model().fit(mapped, Y, verbose=0)


def test_pydataset_and_generator_match_arrays(resident):
    reference = model()
    history = reference.fit(X, Y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                            validation_data=(X[:50], Y[:50]))
    dataset = Batched(X, Y)
    from_dataset = model()
    dataset_history = from_dataset.fit(dataset, epochs=2, shuffle=False, verbose=0,
                                       validation_data=Batched(X[:50], Y[:50]))
    equal_weights(reference, from_dataset)
    assert dataset_history.history == history.history
    assert dataset.epochs == ["begin", "end"] * 2
    from_generator = model()
    from_generator.fit(batches(X, Y), epochs=1, verbose=0)
    once = model()
    once.fit(X, Y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    equal_weights(once, from_generator)

    expected = reference.evaluate(X, Y, batch_size=BATCH)
    assert reference.evaluate(Batched(X, Y)) == expected
    assert reference.evaluate(batches(X, Y)) == expected
    assert reference.evaluate(Batched(X, Y), steps=3) == reference.evaluate(X[:48], Y[:48])
    predicted = reference.predict(X, batch_size=BATCH)
    np.testing.assert_array_equal(reference.predict(Batched(X)), predicted)
    np.testing.assert_array_equal(reference.predict(batches(X)), predicted)
    np.testing.assert_array_equal(reference.predict(Batched(X, Y)), predicted)  # (x, y) batches: y unused
    np.testing.assert_array_equal(reference.predict(batches(X), steps=2), predicted[:32])


def test_pydataset_batch_order_is_shuffled_per_epoch(resident):
    """As Keras: shuffle=True reorders a PyDataset's batches each epoch; (seed, epoch) fixes the order."""
    dataset = Batched(X, Y)
    model(seed=5).fit(dataset, epochs=2, verbose=0)
    batches_per_epoch = len(dataset)
    # The model starts with an Input, so it is built and reads no batch ahead to learn its shape.
    first, second = dataset.asked[:batches_per_epoch], dataset.asked[batches_per_epoch:]
    assert sorted(first) == sorted(second) == list(range(batches_per_epoch))
    assert first != second and first != sorted(first)
    again = Batched(X, Y)
    model(seed=5).fit(again, epochs=2, verbose=0)
    assert again.asked == dataset.asked


def test_steps_per_epoch(resident):
    """A generator continues across epochs; a PyDataset's epochs walk through one order, the
    last stopping at its end (Keras's EpochIterator); running out interrupts training."""
    m = model()
    history = m.fit(batches(X, Y), epochs=2, steps_per_epoch=5, verbose=0)  # 13 batches in all
    assert history.epoch == [0, 1] and m.optimizer.iterations == 10
    dataset = Batched(X, Y)  # 13 batches: epochs of 5, 5, 3, then a new pass
    history = model().fit(dataset, epochs=4, steps_per_epoch=5, shuffle=False, verbose=0)
    assert dataset.asked == list(range(13)) + list(range(5))  # a built model reads no batch ahead
    m = model()
    with pytest.warns(UserWarning, match="ran out of data; interrupting training") as caught:
        history = m.fit(batches(X, Y), epochs=3, steps_per_epoch=8, verbose=0)
    assert [w.filename for w in caught if "ran out" in str(w.message)] == [__file__]  # (fit's line)
    assert history.epoch == [0, 1] and m.optimizer.iterations == 13
    with pytest.warns(UserWarning, match="ran out of data"):
        assert model().fit(batches(X, Y), epochs=2, verbose=0).epoch == [0]
    history = model().fit(X, Y, epochs=2, validation_data=batches(X[:32], Y[:32]), validation_steps=1, verbose=0)
    assert len(history.history["val_loss"]) == 2
    with pytest.raises(ValueError, match=r"validation_data \(a generator\) yielded no batches in epoch 2; a generator "
                                         "is read once"):
        model().fit(X, Y, epochs=2, validation_data=batches(X[:32], Y[:32]), verbose=0)


def wrong_shape(xb, yb):
    return xb[:, :2], yb


def not_finite(xb, yb):
    xb = xb.copy()
    xb[4, 1, 1] = np.inf
    return xb, yb


def bad_label(xb, yb):
    return xb, yb + 5


@pytest.mark.parametrize("bad,error,message", [
    (None, RuntimeError, r"x \(a generator\) raised OSError at batch 3 of epoch 1: disk went away"),
    (wrong_shape, ValueError, r"x in batch 3 has shape \(16, 2, 7\), but the model's first layer expects samples of shape \(3, 7\)"),
    (not_finite, ValueError, r"x in batch 3 contains 1 NaN or infinite value\(s\), the first at index \(4, 1, 1\)"),
    (bad_label, ValueError, r"y in batch 3 holds label \d at index 0; the model has 5 classes"),
])
@pytest.mark.parametrize("budget", [None, "1K"])
def test_a_bad_batch_leaves_the_last_completed_step(monkeypatch, bad, error, message, budget):
    """Each batch is checked before anything is launched for it: the weights are those of a model
    trained on exactly the batches before it."""
    if budget:
        monkeypatch.setenv("CLNET_DEVICE_MEMORY", budget)
    m = model()
    with pytest.raises(error, match=message):
        m.fit(batches(X, Y, fail_at=3, bad=bad), epochs=1, verbose=0)
    three_steps = model()
    three_steps.fit(X[:3 * BATCH], Y[:3 * BATCH], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    equal_weights(m, three_steps)
    assert m.optimizer.iterations == 3


def test_a_bad_pydataset_batch_names_it(resident):
    class Broken(Batched):
        def __getitem__(self, index):
            if index == 2:
                raise KeyError(index)
            return super().__getitem__(index)

    with pytest.raises(RuntimeError, match=r"x \(a PyDataset\) raised KeyError at batch 2 of epoch 1"):
        model().fit(Broken(X, Y), shuffle=False, verbose=0)


def test_argument_errors(resident):
    m = model()
    with pytest.raises(ValueError, match="x is a generator, which gives the targets in its \\(x, y\\) batches: "
                                         "y must not be passed, got ndarray"):
        m.fit(batches(X, Y), Y)
    with pytest.raises(ValueError, match="x is a PyDataset, which gives the targets .* y must not be passed"):
        m.evaluate(Batched(X, Y), Y)
    with pytest.raises(ValueError, match="validation_data is a PyDataset, .* validation_data y must not be passed"):
        m.fit(X, Y, validation_data=(Batched(X, Y), Y), verbose=0)
    with pytest.raises(ValueError, match="validation_split needs arrays, but x is a generator or PyDataset"):
        m.fit(Batched(X, Y), validation_split=0.1)
    with pytest.raises(ValueError, match=r"y \(the targets\) is required when x is an array"):
        m.fit(X)
    with pytest.raises(ValueError, match=r"x \(a generator\) must give batches as \(x, y\); batch 0 is ndarray"):
        model().fit(batches(X))
    with pytest.raises(ValueError, match=r"x \(a PyDataset\) has no batches: len\(\) is 0"):
        m.fit(Batched(X[:0], Y[:0]))
    with pytest.raises(ValueError, match="x \\(a generator\\) yielded no batches"):
        model().fit(iter([]))
    with pytest.raises(ValueError, match="steps_per_epoch must be >= 1, got 0"):
        m.fit(batches(X, Y), steps_per_epoch=0)


@pytest.mark.parametrize("text,size", [("4096", 4096), ("256M", 256 << 20), ("1.5G", 3 << 29), ("64KiB", 65536),
                                       ("2 gb", 2 << 30), ("0", 0)])
def test_budget_sizes(text, size):
    assert clnet.data.parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-1G", "12Q", "1.5.2M"])
def test_bad_budget(monkeypatch, text):
    monkeypatch.setenv("CLNET_DEVICE_MEMORY", text)
    with pytest.raises(ValueError, match=f"CLNET_DEVICE_MEMORY must be a size in bytes such as 268435456, 256M "
                                         f"or 2G; got '{text}'"):
        model().fit(X, Y, verbose=0)


def test_batch_buffers_follow_the_model_capacity(resident):
    """The first layer reads x^T with the model's capacity as its row length: data sets whose
    batches are smaller than an earlier call's, or a validation PyDataset with larger batches than
    training, must still give the weight gradients of a model that never saw a larger batch."""
    fresh = model()
    fresh.fit(X, Y, batch_size=8, epochs=2, validation_data=(X[:64], Y[:64]), verbose=0)
    grown_first = model()
    grown_first.evaluate(X, Y, batch_size=32)
    grown_first.fit(X, Y, batch_size=8, epochs=2, validation_data=(X[:64], Y[:64]), verbose=0)
    grown_between = model()
    grown_between.fit(X, Y, batch_size=8, epochs=2, validation_data=Batched(X[:64], Y[:64], batch_size=32), verbose=0)
    for other in (grown_first, grown_between):
        for a, b in zip(fresh.get_weights(), other.get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_streamed_batches_of_another_dtype_ignore_what_the_staging_slots_held():
    """float64 arrays streamed as float32: the pinned slots' earlier bytes (here signalling NaNs,
    which any uninitialised memory may hold) are overwritten without a RuntimeWarning about them,
    and the batch holds the arrays' rows."""
    rt = clnet.runtime()
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(11, 5)), rng.normal(size=(11, 2))
    batches = clnet.data.Batches(rt, x, y, capacity=8, dtype=np.float32, budget=0)
    assert not batches.resident
    for slot in batches.staging.slots:
        slot.x.view(np.uint32)[:] = 0x7FA00000
        slot.y.view(np.uint32)[:] = 0x7FA00000
    order = rng.permutation(11)
    batches.order(order)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for first, rows in [(0, 8), (8, 3)]:
            x_batch, y_batch = batches.batch(first, rows)
            np.testing.assert_array_equal(x_batch.numpy()[:rows], x[order[first:first + rows]].astype(np.float32))
            np.testing.assert_array_equal(y_batch.numpy()[:rows], y[order[first:first + rows]].astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("resident", [True, False])
@pytest.mark.parametrize("transposed", [True, False])
def test_batch_gather_matches_numpy_at_awkward_sizes(dtype, resident, transposed):
    """GatherRows (four columns of four rows a work-item on a CPU or where it writes x^T, else of one) against
    numpy's take: x, y and x^T for batches of 1, 5 and 13 rows of 13 shuffled samples of 7
    features and 3 targets, resident and streamed; x^T's columns past the batch's rows are left
    as they were."""
    rt = clnet.runtime()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(13, 7)), rng.normal(size=(13, 3))
    batches = clnet.data.Batches(rt, x, y, capacity=13, dtype=dtype, budget=None if resident else 0,
                                 transposed=transposed)
    assert batches.resident is resident
    order = rng.permutation(13)
    batches.order(order)
    for first, rows in [(0, 13), (2, 5), (12, 1)]:
        x_batch, y_batch = batches.batch(first, rows)
        assert (x_batch.transposed is not None) is transposed
        if transposed:
            x_batch.transposed.write(np.full((7, 13), 9.0, dtype))
        x_batch.write(np.full((13, 7), 9.0, dtype))
        x_batch, y_batch = batches.batch(first, rows)
        want = order[first:first + rows]
        np.testing.assert_array_equal(x_batch.numpy()[:rows], x[want].astype(dtype))
        assert (x_batch.numpy()[rows:] == 9.0).all()
        np.testing.assert_array_equal(y_batch.numpy()[:rows], y[want].astype(dtype))
        if transposed:
            x_t = x_batch.transposed.numpy()
            np.testing.assert_array_equal(x_t[:, :rows], x[want].astype(dtype).T)
            assert (x_t[:, rows:] == 9.0).all()
