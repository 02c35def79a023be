"""evaluate's and predict's callbacks (Keras 3's on_test_* and on_predict_* hooks), also run by
fit's validation, and model.stop_evaluating / stop_predicting."""
import numpy as np
import pytest

import clnet
from clnet.callbacks import Callback
from clnet.layers import Dense, Input

X = np.random.default_rng(0).normal(size=(70, 4))
Y = (X[:, 0] - X[:, 1] > 0).astype(int)


def model():
    m = clnet.Sequential([Input((4,)), Dense(5, "tanh"), Dense(2, "softmax")], seed=3, floatx="float64")
    m.compile(clnet.optimizers.Adam(0.01), "sparse_categorical_crossentropy", ["accuracy"])
    return m


class Recorder(Callback):
    """Every test and predict hook's call, with a copy of its logs."""

    def __init__(self, stop_after=None):
        super().__init__()
        self.calls, self.stop_after = [], stop_after

    def _record(self, hook, *args):
        self.calls.append((hook, *[dict(a) if isinstance(a, dict) else a for a in args]))

    def on_test_begin(self, logs=None): self._record("test_begin", logs)
    def on_test_end(self, logs=None): self._record("test_end", logs)
    def on_test_batch_begin(self, batch, logs=None): self._record("test_batch_begin", batch, logs)
    def on_predict_begin(self, logs=None): self._record("predict_begin", logs)
    def on_predict_end(self, logs=None): self._record("predict_end", logs)
    def on_predict_batch_begin(self, batch, logs=None): self._record("predict_batch_begin", batch, logs)

    def on_test_batch_end(self, batch, logs=None):
        self._record("test_batch_end", batch, logs)
        if batch == self.stop_after:
            self.model.stop_evaluating = True

    def on_predict_batch_end(self, batch, logs=None):
        self.calls.append(("predict_batch_end", batch, np.array(logs["outputs"])))
        if batch == self.stop_after:
            self.model.stop_predicting = True


def test_evaluate_runs_the_test_hooks_in_keras_order_with_the_running_metrics():
    m = model()
    want = m.evaluate(X, Y, batch_size=32, return_dict=True)
    recorder = Recorder()
    assert m.evaluate(X, Y, batch_size=32, callbacks=[recorder], return_dict=True) == want
    names = [call[0] for call in recorder.calls]
    assert names == ["test_begin"] + ["test_batch_begin", "test_batch_end"] * 3 + ["test_end"]
    assert recorder.calls[1] == ("test_batch_begin", 0, None)
    assert [call[1] for call in recorder.calls if call[0] == "test_batch_end"] == [0, 1, 2]
    # A batch's logs are the metrics so far: the first batch's are evaluate's over its 32 rows.
    assert recorder.calls[2][2] == pytest.approx(m.evaluate(X[:32], Y[:32], batch_size=32, return_dict=True))
    assert recorder.calls[-2][2] == pytest.approx(want) and recorder.calls[-1] == ("test_end", want)
    assert recorder.params == {"verbose": 0, "epochs": 1, "steps": 3} and recorder.model is m


def test_fit_validation_runs_the_test_hooks_with_unprefixed_logs():
    m, recorder = model(), Recorder()
    history = m.fit(X[:50], Y[:50], batch_size=16, epochs=2, validation_data=(X[50:], Y[50:]), callbacks=[recorder],
                    verbose=0, shuffle=False)
    ends = [call[1] for call in recorder.calls if call[0] == "test_end"]
    assert [call[0] for call in recorder.calls].count("test_begin") == 2 and len(ends) == 2
    for epoch, logs in enumerate(ends):
        assert set(logs) == {"loss", "accuracy"}
        assert logs == {key: history.history["val_" + key][epoch] for key in logs}


def test_stop_evaluating_ends_after_that_batch():
    m, recorder = model(), Recorder(stop_after=0)
    logs = m.evaluate(X, Y, batch_size=32, callbacks=[recorder], return_dict=True)
    assert logs == pytest.approx(m.evaluate(X[:32], Y[:32], batch_size=32, return_dict=True))
    assert [call[0] for call in recorder.calls] == ["test_begin", "test_batch_begin", "test_batch_end", "test_end"]
    assert m.evaluate(X, Y, batch_size=32, return_dict=True) != logs  # reset by the next call


def test_predict_runs_the_predict_hooks_with_each_batchs_outputs():
    m, recorder = model(), Recorder()
    want = m.predict(X, batch_size=32)
    np.testing.assert_array_equal(m.predict(X, batch_size=32, callbacks=[recorder]), want)
    names = [call[0] for call in recorder.calls]
    assert names == ["predict_begin"] + ["predict_batch_begin", "predict_batch_end"] * 3 + ["predict_end"]
    outputs = [call[2] for call in recorder.calls if call[0] == "predict_batch_end"]
    assert [len(o) for o in outputs] == [32, 32, 6]
    np.testing.assert_array_equal(np.concatenate(outputs), want)


def test_stop_predicting_returns_the_outputs_so_far():
    m = model()
    want = m.predict(X, batch_size=32)
    got = m.predict(X, batch_size=32, callbacks=[Recorder(stop_after=1)])
    np.testing.assert_array_equal(got, want[:64])


def test_batch_logs_are_read_only_for_a_callback_that_takes_them(monkeypatch):
    """A callback with only on_test_begin costs no read of the metrics per batch: evaluate reads
    them once, at the end."""
    class Begin(Callback):
        def on_test_begin(self, logs=None):
            self.began = True

    m, reads, begin = model(), [], Begin()
    epoch_logs = m.epoch_logs
    monkeypatch.setattr(m, "epoch_logs", lambda *a, **k: reads.append(a) or epoch_logs(*a, **k))
    m.evaluate(X, Y, batch_size=8, callbacks=[begin])
    assert begin.began and len(reads) == 1


def test_callbacks_must_be_callbacks():
    m = model()
    with pytest.raises(TypeError, match="callbacks must be Callback instances, got function"):
        m.evaluate(X, Y, callbacks=[lambda: None])
    with pytest.raises(TypeError, match="callbacks must be Callback instances, got str"):
        m.predict(X, callbacks=["progbar"])
