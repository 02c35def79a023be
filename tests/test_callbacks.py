"""Callbacks: ModelCheckpoint, EarlyStopping, ReduceLROnPlateau, LearningRateScheduler, CSVLogger,
TerminateOnNaN, on real training runs; a scripted metric makes every decision predictable."""
import csv
import math
import os

import numpy as np
import pytest

import clnet
from clnet.callbacks import (Callback, CSVLogger, EarlyStopping, LearningRateScheduler, ModelCheckpoint,
                             ReduceLROnPlateau, TerminateOnNaN)
from clnet.layers import Dense
from clnet.optimizers import SGD, Adam

X = np.random.default_rng(0).normal(size=(120, 4))
Y = (X[:, 0] - X[:, 1] > 0).astype(int)


def model(optimizer=None, seed=3):
    m = clnet.Sequential([Dense(6, "tanh", input_shape=(4,)), Dense(2, "softmax")], seed=seed, floatx="float64")
    m.compile(optimizer or Adam(0.01), "categorical_crossentropy", ["accuracy"])
    return m


def fit(m, callbacks, epochs=4, **kwargs):
    return m.fit(X, Y, batch_size=32, epochs=epochs, callbacks=callbacks, verbose=0, **kwargs)


class Script(Callback):
    """Puts logs["score"] = scores[epoch]; listed before the callback that monitors it."""

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def on_epoch_end(self, epoch, logs=None):
        logs["score"] = self.scores[epoch]


class Weights(Callback):
    """The weights at the end of each epoch."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_epoch_end(self, epoch, logs=None):
        self.seen.append(self.model.get_weights())


# -- ModelCheckpoint ---------------------------------------------------------------------------
def test_checkpoint_every_epoch_with_templated_names(tmp_path):
    m = model()
    history = fit(m, [ModelCheckpoint(tmp_path / "ck {epoch:02d}-{val_loss:.4f}.h5")], epochs=3,
                  validation_split=0.25)
    expected = [f"ck {e + 1:02d}-{history.history['val_loss'][e]:.4f}.h5" for e in range(3)]
    assert sorted(os.listdir(tmp_path)) == expected
    last = clnet.load_model(tmp_path / expected[-1])
    assert last.epoch == 3
    for a, b in zip(last.get_weights(), m.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_resume_from_a_checkpoint_written_during_fit(tmp_path):
    whole = model(seed=5)
    fit(whole, [ModelCheckpoint(tmp_path / "ck-{epoch}.h5")], epochs=4)
    resumed = clnet.load_model(tmp_path / "ck-2.h5")
    assert resumed.epoch == 2
    fit(resumed, [], epochs=4, initial_epoch=resumed.epoch)
    for a, b in zip(resumed.get_weights(), whole.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_checkpoint_save_best_only(tmp_path, capsys):
    m = model()
    weights = Weights()
    fit(m, [Script([3.0, 1.0, 2.0, 0.5, 0.7]), weights,
            ModelCheckpoint(tmp_path / "best.h5", monitor="score", save_best_only=True, mode="min",
                            verbose=1),
            ModelCheckpoint(tmp_path / "e{epoch}.h5", monitor="score", save_best_only=True, mode="min")],
        epochs=5)
    assert sorted(os.listdir(tmp_path)) == ["best.h5", "e1.h5", "e2.h5", "e4.h5"]
    best = clnet.load_model(tmp_path / "best.h5")
    assert best.epoch == 4
    for a, b in zip(best.get_weights(), weights.seen[3]):
        np.testing.assert_array_equal(a, b)
    out = capsys.readouterr().out
    assert f"Epoch 1: score improved from None to 3.00000, saving to {tmp_path / 'best.h5'}" in out
    assert "Epoch 3: score did not improve from 1.00000" in out
    assert f"Epoch 4: score improved from 1.00000 to 0.50000, saving to {tmp_path / 'best.h5'}" in out
    assert "Epoch 5: score did not improve from 0.50000" in out


def test_checkpoint_mode_max_and_auto_for_accuracy(tmp_path):
    fit(model(), [Script([0.1, 0.5, 0.3]), ModelCheckpoint(tmp_path / "{epoch}.h5", monitor="score",
                                                              save_best_only=True, mode="max")], epochs=3)
    assert sorted(os.listdir(tmp_path)) == ["1.h5", "2.h5"]
    auto = ModelCheckpoint(tmp_path / "x.h5", monitor="val_accuracy", save_best_only=True)
    auto.set_model(model())
    assert auto.improved(0.9, 0.8) and not auto.improved(0.7, 0.8) and auto.monitor_op is np.greater
    with pytest.raises(ValueError, match="ModelCheckpoint mode must be 'auto', 'min' or 'max', got 'up'"):
        ModelCheckpoint(tmp_path / "x.h5", mode="up")


def test_checkpoint_weights_only(tmp_path):
    m = model()
    fit(m, [ModelCheckpoint(tmp_path / "w.h5", save_weights_only=True)], epochs=2)
    other = model(seed=11)
    other.load_weights(tmp_path / "w.h5")
    np.testing.assert_array_equal(other.predict(X), m.predict(X))
    with pytest.raises(clnet.saving.CheckpointError, match="weights only"):
        clnet.load_model(tmp_path / "w.h5")


def test_checkpoint_missing_monitor_warns_and_bad_template_raises(tmp_path):
    with pytest.warns(RuntimeWarning, match=r"ModelCheckpoint: the monitored metric 'val_loss' is not in the "
                                            r"logs \(available: loss, accuracy\)"):
        history = fit(model(), [ModelCheckpoint(tmp_path / "m.h5", save_best_only=True)], epochs=2)
    assert history.epoch == [0, 1] and os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match=r"cannot fill in filepath '.*\{val_loss\}\.h5' with epoch and the logs "
                                         r"\(loss, accuracy\): KeyError"):
        fit(model(), [ModelCheckpoint(tmp_path / "{val_loss}.h5")], epochs=1)


# -- EarlyStopping -----------------------------------------------------------------------------
@pytest.mark.parametrize("scores,kwargs,stopped", [
    ([5, 4, 4.5, 4.2, 4.1, 3], {"patience": 2}, 3),
    ([5, 4, 4.5, 4.2, 4.1, 3], {"patience": 0}, 2),
    ([5, 4.6, 4.2, 3.9, 3.5, 3.0], {"patience": 1, "min_delta": 0.5}, 1),
    ([5, 6, 7, 8, 9, 10], {"patience": 2}, 2),
    ([5, 6, 7, 8, 9, 10], {"patience": 2, "baseline": 2}, 1),  # the first epoch did not beat the baseline
    ([1, 2, 3, 2, 1, 0], {"patience": 1, "mode": "max"}, 3),
    ([5, 4, 3, 2, 1, 0], {"patience": 0}, None),
])
def test_early_stopping(scores, kwargs, stopped):
    stopper = EarlyStopping(monitor="score", **{"mode": "min", **kwargs})
    history = fit(model(), [Script(scores), stopper], epochs=6)
    epochs = 6 if stopped is None else stopped + 1
    assert history.epoch == list(range(epochs))
    assert stopper.stopped_epoch == (stopped or 0)


def test_early_stopping_restores_best_weights():
    m, weights = model(), Weights()
    stopper = EarlyStopping(monitor="score", patience=2, restore_best_weights=True, mode="min")
    fit(m, [Script([3, 1, 2, 2, 0]), weights, stopper], epochs=5)
    assert stopper.stopped_epoch == 3 and stopper.best_epoch == 1 and len(weights.seen) == 4
    assert not np.array_equal(weights.seen[3][0], weights.seen[1][0])
    for a, b in zip(m.get_weights(), weights.seen[1]):
        np.testing.assert_array_equal(a, b)


def test_early_stopping_auto_mode_and_missing_monitor():
    for monitor, better, worse in [("accuracy", 0.9, 0.7), ("val_loss", 0.7, 0.9)]:
        stopper = EarlyStopping(monitor=monitor)
        stopper.set_model(model())
        assert stopper.improved(better, 0.8) and not stopper.improved(worse, 0.8)
    missing = "EarlyStopping: the monitored metric 'val_loss' is not in the logs"
    with pytest.warns(RuntimeWarning, match=missing) as caught:
        history = fit(model(), [EarlyStopping()], epochs=3)
    assert {w.filename for w in caught if "monitored metric" in str(w.message)} == {__file__}  # (fit's line)
    assert history.epoch == [0, 1, 2]


# Keras 3.15.1's EarlyStopping(patience=2), mode "auto", fed these histories through on_epoch_end
# after compile(metrics=["auc", Precision(), "mae"]): rising ones stop at epoch 4 with best 0.8
# (maximised), falling ones at epoch 4 with best 0.3 (minimised).
RISING, FALLING = [0.6, 0.7, 0.8, 0.75, 0.74, 0.9], [0.5, 0.4, 0.3, 0.35, 0.36, 0.2]


def binary_model(metrics=("auc", clnet.metrics.Precision(), "mae")):
    m = clnet.Sequential([Dense(1, "sigmoid", input_shape=(4,))], seed=3, floatx="float64")
    m.compile(Adam(0.01), "binary_crossentropy", list(metrics))
    return m


def drive(callback, m, monitor, values):
    """Feeds a scripted history of `monitor` through the callback's hooks, as Keras's unit tests do."""
    callback.set_model(m)
    m.stop_training = False
    callback.on_train_begin()
    for epoch, value in enumerate(values):
        callback.on_epoch_end(epoch, {monitor: value})
        if m.stop_training:
            break
    return callback


@pytest.mark.parametrize("monitor,history,op,stopped,best", [
    ("val_auc", RISING, np.greater, 4, 0.8),
    ("val_precision", RISING, np.greater, 4, 0.8),
    ("auc", FALLING, np.greater, 2, 0.5),  # (maximised even while it falls, as in Keras)
    ("val_loss", FALLING, np.less, 4, 0.3),
    ("val_mae", FALLING, np.less, 4, 0.3),
])
def test_early_stopping_auto_mode_goes_the_way_the_compiled_metric_improves(monitor, history, op, stopped,
                                                                            best):
    stopper = drive(EarlyStopping(monitor=monitor, patience=2), binary_model(), monitor, history)
    assert stopper.monitor_op is op
    assert (stopper.stopped_epoch, stopper.best) == (stopped, best)


def test_auto_mode_reads_every_monitoring_callback_s_metric_direction(tmp_path):
    m = binary_model()
    m.optimizer.learning_rate = 0.1
    drive(ReduceLROnPlateau(monitor="val_auc", patience=1, factor=0.5), m, "val_auc",
          [0.6, 0.7, 0.65, 0.8, 0.79])
    assert m.optimizer.learning_rate == 0.025  # Keras's: [0.1, 0.1, 0.05, 0.05, 0.025] over the epochs
    checkpoint = ModelCheckpoint(tmp_path / "{epoch}.h5", monitor="val_precision", save_best_only=True)
    drive(checkpoint, m, "val_precision", [0.5, 0.7, 0.6, 0.9])
    assert checkpoint.monitor_op is np.greater and sorted(os.listdir(tmp_path)) == ["1.h5", "2.h5", "4.h5"]


def test_auto_mode_raises_where_the_direction_is_unknown_as_keras():
    """A key that is neither a loss nor a compiled metric, or a metric without `_direction` (a
    user's, as Keras's own TruePositives), raises at the first epoch's end; `_direction` decides."""
    class Hits(clnet.metrics.Metric):
        def __init__(self, name="hits"):
            super().__init__(name=name)
            self.total = self.add_variable(shape=(), initializer="zeros", name="total")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.total.assign_add(1.0)

        def result(self):
            return self.total

    for monitor, metrics in [("val_score", ["auc"]), ("val_hits", [Hits()]), ("val_accuracy", ["auc"])]:
        with pytest.raises(ValueError, match=rf"EarlyStopping callback received monitor='{monitor}', but "
                                             r"cannot tell whether that metric should be maximized or "
                                             r"minimized"):
            drive(EarlyStopping(monitor=monitor), binary_model(metrics), monitor, [0.5])
    rising = Hits()
    rising._direction = "up"  # (as a Keras metric sets it in its constructor)
    stopper = drive(EarlyStopping(monitor="val_hits"), binary_model([rising]), "val_hits", [0.5])
    assert stopper.monitor_op is np.greater
    stopper = drive(EarlyStopping(monitor="val_score", mode="max"), binary_model(), "val_score", [0.5])
    assert stopper.monitor_op is np.greater


def test_auto_mode_with_several_outputs_reads_the_output_s_metric():
    """The log keys of a model of several outputs carry the output's name: `<name>_loss` is
    minimised, `<name>_<metric>` goes its metric's way (Keras 3.15 raises for these: it looks the
    key up among unprefixed metric names)."""
    x = clnet.layers.Input((4,))
    m = clnet.Model(x, {"score": Dense(1, name="score")(x), "flags": Dense(1, "sigmoid", name="flags")(x)},
                    seed=2)
    m.compile("adam", loss={"score": "mse", "flags": "binary_crossentropy"},
              metrics={"score": ["mae"], "flags": ["auc", "accuracy"]})
    for monitor, op in [("val_score_loss", np.less), ("val_score_mae", np.less),
                        ("val_flags_auc", np.greater), ("flags_accuracy", np.greater), ("val_loss", np.less)]:
        assert drive(EarlyStopping(monitor=monitor), m, monitor, [0.5]).monitor_op is op, monitor
    with pytest.raises(ValueError, match="received monitor='val_auc'"):
        drive(EarlyStopping(monitor="val_auc"), m, "val_auc", [0.5])


# -- ReduceLROnPlateau -------------------------------------------------------------------------
def test_reduce_lr_on_plateau(tmp_path):
    m = model(SGD(0.1))
    history = fit(m, [Script([1.0] * 7),
                      ReduceLROnPlateau(monitor="score", factor=0.5, patience=2, cooldown=1, mode="min"),
                      ModelCheckpoint(tmp_path / "m.h5")], epochs=7)
    assert history.history["learning_rate"] == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125]
    assert m.optimizer.learning_rate == 0.0125
    assert clnet.load_model(tmp_path / "m.h5").optimizer.learning_rate == 0.0125  # resumes at the reduced rate


def test_reduce_lr_on_plateau_min_lr_min_delta_and_improvement():
    history = fit(model(SGD(0.1)), [Script([1.0] * 6), ReduceLROnPlateau(monitor="score", patience=1,
                                                                       factor=0.2, min_lr=0.01, mode="min")],
                  epochs=6)
    assert history.history["learning_rate"] == pytest.approx([0.1, 0.02, 0.01, 0.01, 0.01, 0.01], rel=1e-15)
    # Improving by less than min_delta counts as a plateau; by more resets the wait.
    history = fit(model(SGD(0.1)), [Script([1.0, 0.99995, 0.5, 0.49, 0.3]),
                                    ReduceLROnPlateau(monitor="score", patience=1, factor=0.5, min_delta=1e-4,
                                                      mode="min")],
                  epochs=5)
    assert history.history["learning_rate"] == [0.1, 0.05, 0.05, 0.05, 0.05]
    with pytest.raises(ValueError, match=r"ReduceLROnPlateau factor must be in \[0, 1\), got 1.0"):
        ReduceLROnPlateau(factor=1.0)


def test_reduce_lr_on_plateau_missing_monitor_warns():
    with pytest.warns(RuntimeWarning, match="ReduceLROnPlateau: the monitored metric 'val_loss' is not in"):
        history = fit(model(SGD(0.1)), [ReduceLROnPlateau(patience=0)], epochs=2)
    assert history.history["learning_rate"] == [0.1, 0.1]


# -- LearningRateScheduler ---------------------------------------------------------------------
def test_scheduler_sets_the_rate_each_epoch():
    m = model(SGD(0.1))
    history = fit(m, [LearningRateScheduler(lambda epoch: 0.1 * 0.5 ** epoch)], epochs=3)
    assert history.history["learning_rate"] == [0.1, 0.05, 0.025]
    history = fit(m, [LearningRateScheduler(lambda epoch, lr: lr * 0.5)], epochs=5, initial_epoch=3)
    assert history.history["learning_rate"] == [0.0125, 0.00625]


def test_scheduler_rate_reaches_the_kernel():
    # A schedule of constant 0.05 trains exactly as SGD(0.05); a rate of 0 leaves the weights alone.
    scheduled, plain = model(SGD(1.0)), model(SGD(0.05))
    fit(scheduled, [LearningRateScheduler(lambda epoch: 0.05)], epochs=2)
    fit(plain, [], epochs=2)
    for a, b in zip(scheduled.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(a, b)
    frozen = model(SGD(0.1))
    frozen.build((4,))
    before = frozen.get_weights()
    fit(frozen, [LearningRateScheduler(lambda epoch: 0)], epochs=2)
    for a, b in zip(frozen.get_weights(), before):
        np.testing.assert_array_equal(a, b)


def test_scheduler_rejects_bad_rates():
    with pytest.raises(ValueError, match=r"schedule returned nan for epoch 0; expected a finite non-negative"):
        fit(model(), [LearningRateScheduler(lambda epoch: math.nan)], epochs=1)
    with pytest.raises(ValueError, match=r"schedule returned '0.1' for epoch 0"):
        fit(model(), [LearningRateScheduler(lambda epoch: "0.1")], epochs=1)
    with pytest.raises(TypeError, match="schedule must be callable, got 0.1"):
        LearningRateScheduler(0.1)


# -- CSVLogger ---------------------------------------------------------------------------------
def read_csv(path, separator=","):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f, delimiter=separator))


def test_csv_logger(tmp_path):
    path = tmp_path / "log ü.csv"
    history = fit(model(), [CSVLogger(path)], epochs=3, validation_split=0.25)
    rows = read_csv(path)
    assert rows[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [int(r[0]) for r in rows[1:]] == [0, 1, 2]
    for column, key in enumerate(rows[0][1:], start=1):
        assert [float(r[column]) for r in rows[1:]] == history.history[key]  # repr: exact round trip


def test_csv_logger_append_across_a_resume_and_separator(tmp_path):
    path = tmp_path / "log.csv"
    m = model()
    fit(m, [CSVLogger(path, separator=";", append=True)], epochs=2)
    fit(m, [CSVLogger(path, separator=";", append=True)], epochs=4, initial_epoch=2)
    rows = read_csv(path, ";")
    assert rows[0] == ["epoch", "accuracy", "loss"] and [r[0] for r in rows[1:]] == ["0", "1", "2", "3"]
    fit(m, [CSVLogger(path)], epochs=1)  # append=False starts the file again
    assert len(read_csv(path)) == 2


def test_csv_logger_marks_keys_missing_later_as_na(tmp_path):
    class DropAccuracy(Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                del logs["accuracy"]
    fit(model(), [DropAccuracy(), CSVLogger(tmp_path / "log.csv")], epochs=2)
    rows = read_csv(tmp_path / "log.csv")
    assert rows[2][:2] == ["1", "NA"] and rows[2][2] != "NA"


# -- TerminateOnNaN and History ----------------------------------------------------------------
def test_terminate_on_nan():
    x = np.random.default_rng(1).normal(size=(64, 3)) * 1e3
    y = x @ [1.0, 2.0, 3.0]
    m = clnet.Sequential([Dense(1, input_shape=(3,))], seed=0)
    m.compile(SGD(10.0), "mse")  # diverges to inf, then NaN, within the first epoch
    history = m.fit(x, y, batch_size=8, epochs=5, callbacks=[TerminateOnNaN()], verbose=0)
    assert history.epoch == [0] and not math.isfinite(history.history["loss"][0])
    healthy = model()
    assert fit(healthy, [TerminateOnNaN()], epochs=3).epoch == [0, 1, 2]


def test_history_records_every_metric():
    history = fit(model(SGD(0.1)), [Script([1, 2, 3]), LearningRateScheduler(lambda e: 0.1)], epochs=3,
                  validation_split=0.25)
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy", "score", "learning_rate"}
    assert history.history["score"] == [1, 2, 3] and all(len(v) == 3 for v in history.history.values())
