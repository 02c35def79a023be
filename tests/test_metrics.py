"""clnet.metrics: every metric against a numpy reference (float32 at awkward sizes, float64 to
1e-12) and against Keras 3's numbers on the same predictions (tests/data/keras_metrics.npz,
written by tests/make_keras_metrics_fixture.py); their state summed over batches and started
again each epoch and evaluation; one launch each per step; saved and loaded with the model; and
the errors."""
import json
from pathlib import Path

import numpy as np
import pytest

import clnet
from clnet import metrics, ops
from clnet.layers import Activation, Dense, Input
from clnet.model import Model, Sequential

FIXTURE = np.load(Path(__file__).parent / "data" / "keras_metrics.npz")
CASES = json.loads(FIXTURE["cases"].tobytes())


def identity(shape, floatx="float32"):
    """A model whose outputs are its inputs: the metrics see the predictions given as x."""
    return Sequential([Input(shape), Activation("linear")], floatx=floatx)


def measured(p, t, loss, chosen, batch_size=7, floatx="float32", sample_weight=None):
    """evaluate's logs of `chosen` metrics on predictions p; with `sample_weight`, as
    weighted_metrics."""
    model = identity(p.shape[1:], floatx)
    if sample_weight is None:
        model.compile("sgd", loss, metrics=chosen)
    else:
        model.compile("sgd", loss, weighted_metrics=chosen)
    return model.evaluate(p, t, batch_size=batch_size, return_dict=True, sample_weight=sample_weight)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_metric_is_keras_s_on_the_same_predictions(case):
    """Also weighted: compile's weighted_metrics with evaluate's sample_weight, against Keras's
    metrics updated with the same sample weights."""
    entry = CASES[case]
    chosen = [getattr(metrics, cls)(**kwargs) for cls, kwargs, _ in entry["metrics"]]
    weights = FIXTURE[f"{case}/w"] if f"{case}/w" in FIXTURE else None
    logs = measured(FIXTURE[f"{case}/p"], FIXTURE[f"{case}/t"], entry["loss"], chosen, sample_weight=weights)
    for metric, (cls, kwargs, expected) in zip(chosen, entry["metrics"]):
        np.testing.assert_allclose(logs[metric.name], expected, rtol=3e-6, atol=1e-7, err_msg=f"{cls}({kwargs})")


# -- numpy references -------------------------------------------------------------------------
def auc_reference(p, t, n=200, curve="ROC"):
    """Keras's AUC by its definition: counts of p > threshold at n thresholds from -1e-7 to
    1 + 1e-7, the trapezoids between them (for PR, Davis and Goadrich's interpolation is not
    taken here: PR uses the plain trapezoids and summation_method="interpolation" is not asked)."""
    thresholds = np.array([-1e-7, *[(i + 1) / (n - 1) for i in range(n - 2)], 1 + 1e-7])
    p, positive = p.ravel(), t.ravel() != 0
    tp = np.array([(positive & (p > h)).sum() for h in thresholds], float)
    fp = np.array([(~positive & (p > h)).sum() for h in thresholds], float)
    tpr, fpr = tp / max(positive.sum(), 1), fp / max((~positive).sum(), 1)  # 0 where a kind is missing, as Keras
    return float(np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2))


def reference(name, p, t):
    """The metric `name` of predictions p against dense targets t (class ids for sparse_*)."""
    p64, t64 = p.astype(np.float64), t.astype(np.float64)
    if name == "binary_accuracy":
        return np.mean((p64 > 0.5) == t64)
    if name == "categorical_accuracy":
        return np.mean(p.argmax(-1) == t.argmax(-1))
    if name == "sparse_categorical_accuracy":
        return np.mean(p.argmax(-1) == t)
    if name == "top_k_categorical_accuracy":  # k = 2 below
        label = p64[np.arange(len(p)), t.argmax(-1)]
        return np.mean((p64 > label[:, None]).sum(-1) < 2)
    if name == "mean_squared_error":
        return np.mean((p64 - t64) ** 2)
    if name == "mean_absolute_error":
        return np.mean(np.abs(p64 - t64))
    if name == "root_mean_squared_error":
        return np.sqrt(np.mean((p64 - t64) ** 2))
    if name == "precision":
        predicted, positive = p64 > 0.5, t64 != 0
        return (predicted & positive).sum() / max(predicted.sum(), 1)
    if name == "recall":
        predicted, positive = p64 > 0.5, t64 != 0
        return (predicted & positive).sum() / max(positive.sum(), 1)
    if name == "auc":
        return auc_reference(p64, t64)
    if name == "f1_score":  # average="micro", threshold None: each row's largest is its prediction
        predicted = p64 == p64.max(-1, keepdims=True)
        tp, fp, fn = (predicted * t64).sum(), (predicted * (1 - t64)).sum(), ((1 - predicted) * t64).sum()
        precision, recall = tp / (tp + fp + 1e-7), tp / (tp + fn + 1e-7)  # Keras's epsilons
        return 2 * precision * recall / (precision + recall + 1e-7)
    raise KeyError(name)


MADE = {"top_k_categorical_accuracy": lambda: metrics.TopKCategoricalAccuracy(k=2),
        "f1_score": lambda: metrics.F1Score(average="micro")}
DENSE = ["binary_accuracy", "categorical_accuracy", "top_k_categorical_accuracy", "mean_squared_error",
         "mean_absolute_error", "root_mean_squared_error", "precision", "recall", "auc", "f1_score"]


def drawn(rng, samples, cols, name, dtype):
    """Predictions in (0, 1) (distinct, so no argmax ties), and targets as the metric takes them."""
    p = rng.random((samples, cols)).astype(dtype)
    if name.startswith("sparse"):
        return p, rng.integers(0, cols, samples).astype(dtype)
    if name in ("categorical_accuracy", "top_k_categorical_accuracy", "f1_score"):
        return p, np.eye(cols, dtype=dtype)[rng.integers(0, cols, samples)]
    if name in DENSE[3:6]:
        return p, rng.normal(size=(samples, cols)).astype(dtype)
    return p, (rng.random((samples, cols)) < 0.5).astype(dtype)


@pytest.mark.parametrize("name", [*DENSE, "sparse_categorical_accuracy"])
@pytest.mark.parametrize("samples", [1, 3, 129])
@pytest.mark.parametrize("cols", [1, 3, 5])
def test_each_metric_is_numpys_in_float32_at_awkward_sizes(rng, name, samples, cols):
    if cols == 1 and name in ("categorical_accuracy", "top_k_categorical_accuracy", "sparse_categorical_accuracy"):
        cols = 2  # a choice among classes
    p, t = drawn(rng, samples, cols, name, np.float32)
    loss = "sparse_categorical_crossentropy" if name.startswith("sparse") else "mse"
    logs = measured(p, t, loss, [MADE.get(name, lambda: name)()], batch_size=64)
    np.testing.assert_allclose(logs[name], reference(name, p, t), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("name", [*DENSE, "sparse_categorical_accuracy"])
def test_each_metric_is_numpys_in_float64(rng, name):
    p, t = drawn(rng, 37, 4, name, np.float64)
    loss = "sparse_categorical_crossentropy" if name.startswith("sparse") else "mse"
    logs = measured(p, t, loss, [MADE.get(name, lambda: name)()], batch_size=10, floatx="float64")
    np.testing.assert_allclose(logs[name], reference(name, p, t), rtol=1e-12, atol=1e-15)


# -- state over batches, epochs and evaluations -------------------------------------------------
def test_multi_label_auc_is_the_mean_of_each_column_s(rng):
    """AUC(multi_label=True): a curve per output column from its own counts (one launch), their
    mean, or their mean weighted by label_weights; against numpy's AUC of each column."""
    p, t = rng.random((37, 3)).astype(np.float32), (rng.random((37, 3)) < 0.5).astype(np.float32)
    logs = measured(p, t, "binary_crossentropy", [metrics.AUC(multi_label=True, name="ml"),
                                                  metrics.AUC(multi_label=True, label_weights=[1, 0, 3], name="w")],
                    batch_size=5)
    each = [auc_reference(p[:, c], t[:, c]) for c in range(3)]
    assert logs["ml"] == pytest.approx(np.mean(each), rel=1e-5)
    assert logs["w"] == pytest.approx((each[0] + 3 * each[2]) / 4, rel=1e-5)
    with pytest.raises(ValueError, match="label_weights give 2 labels, but the output has 3 columns"):
        measured(p, t, "mse", [metrics.AUC(multi_label=True, label_weights=[1, 2])])


def test_batches_sum_into_one_result_and_each_evaluation_starts_again(rng):
    p, t = rng.random((41, 3)).astype(np.float32), (rng.random((41, 3)) < 0.5).astype(np.float32)
    model = identity((3,))
    model.compile("sgd", "mse", metrics=["mae", "AUC", "precision", metrics.F1Score("macro", threshold=0.5)])
    whole = model.evaluate(p, t, batch_size=41, return_dict=True)
    for batch_size in (1, 6):
        np.testing.assert_allclose(list(model.evaluate(p, t, batch_size=batch_size, return_dict=True).values()),
                                   list(whole.values()), rtol=2e-6)
    model.evaluate(1 - p, t, batch_size=5)  # other numbers, then the first again: nothing carried over
    np.testing.assert_allclose(list(model.evaluate(p, t, batch_size=9, return_dict=True).values()),
                               list(whole.values()), rtol=2e-6)
    model.test_on_batch(1 - p, t)
    assert model.test_on_batch(p, t, return_dict=True)["AUC"] == pytest.approx(whole["AUC"], rel=2e-6)


def test_fit_logs_each_epoch_s_metrics_and_the_validation_s(rng):
    """SGD at learning rate 0 keeps the weights: every epoch's training metrics are evaluate's on
    the training data, its validation metrics evaluate's on the validation data."""
    x, y = rng.normal(size=(60, 5)), rng.integers(0, 2, (60, 1))
    xv, yv = rng.normal(size=(23, 5)), rng.integers(0, 2, (23, 1))
    model = Sequential([Input((5,)), Dense(1, activation="sigmoid")], seed=1)
    model.compile(clnet.optimizers.SGD(0.0), "binary_crossentropy", metrics=["AUC", "mse", "binary_accuracy"])
    history = model.fit(x, y, batch_size=8, epochs=3, validation_data=(xv, yv), verbose=0).history
    train, val = model.evaluate(x, y, return_dict=True), model.evaluate(xv, yv, return_dict=True)
    for name in ("AUC", "mse", "binary_accuracy"):
        np.testing.assert_allclose(history[name], [train[name]] * 3, rtol=2e-6)
        np.testing.assert_allclose(history[f"val_{name}"], [val[name]] * 3, rtol=2e-6)


def test_keras_s_names_in_the_logs():
    """As Keras 3 names them: a string as given, an object by its name, a second of a name _1."""
    model = identity((1,))
    model.compile("sgd", "binary_crossentropy",
                  metrics=["acc", "AUC", "mse", metrics.AUC(), metrics.AUC(), "Precision", metrics.Recall(name="r")])
    logs = model.evaluate(np.full((4, 1), 0.3), np.array([[0], [1], [0], [1]]), return_dict=True)
    assert list(logs) == ["loss", "AUC", "Precision", "accuracy", "auc", "auc_1", "mse", "r"]


def test_several_outputs_have_their_own_metrics(rng):
    x = Input((3,))
    model = Model(x, [Dense(2, activation="softmax", name="kind")(x), Dense(1, name="size")(x)], seed=2)
    model.compile("sgd", {"kind": "categorical_crossentropy", "size": "mse"},
                  metrics={"kind": ["AUC", "accuracy"], "size": ["mae"]})
    xs, kinds, sizes = rng.normal(size=(20, 3)), np.eye(2)[rng.integers(0, 2, 20)], rng.normal(size=(20, 1))
    logs = model.evaluate(xs, {"kind": kinds, "size": sizes}, return_dict=True)
    kind, size = model.predict(xs)
    assert logs["kind_AUC"] == pytest.approx(auc_reference(kind, kinds), abs=1e-6)
    assert logs["kind_accuracy"] == pytest.approx(np.mean(kind.argmax(1) == kinds.argmax(1)))
    assert logs["size_mae"] == pytest.approx(np.mean(np.abs(size - sizes)), rel=2e-6)


# -- on the device ---------------------------------------------------------------------------
def test_one_launch_per_metric_per_step_and_the_loss_keeps_its_softmax_where_order_is_enough(rng):
    """A metric adds one launch to a step; one that needs only each row's order (accuracy, top-k)
    leaves the output's softmax to the loss kernel, one that reads probabilities (AUC) takes it
    back to the layer: one launch more, and the probabilities it sees are predict's."""
    x, y = rng.normal(size=(32, 6)), np.eye(4)[rng.integers(0, 4, 32)]

    def launches(chosen):
        model = Sequential([Input((6,)), Dense(4, activation="softmax")], seed=3)
        model.compile("sgd", "categorical_crossentropy", metrics=chosen)
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)
        before = model.rt.launches
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)
        return model, model.rt.launches - before

    _, plain = launches(["accuracy"])
    _, top_k = launches([metrics.TopKCategoricalAccuracy(k=2)])
    model, auc = launches(["AUC"])
    assert top_k == plain + 1
    assert auc == plain + 2  # its own launch and the layer's softmax
    logs = model.evaluate(x, y, batch_size=32, return_dict=True)
    assert logs["AUC"] == pytest.approx(auc_reference(model.predict(x), y), abs=1e-6)


def test_metrics_are_saved_and_loaded_with_the_model(rng, tmp_path):
    x, y = rng.normal(size=(30, 4)), rng.integers(0, 2, (30, 1))
    model = Sequential([Input((4,)), Dense(1, activation="sigmoid")], seed=4)
    model.compile("adam", "binary_crossentropy",
                  metrics=["accuracy", metrics.AUC(curve="PR", name="pr_auc"), metrics.Precision(thresholds=0.3)])
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "m.h5")
    loaded = clnet.load_model(tmp_path / "m.h5")
    assert [type(m).__name__ if m != "accuracy" else m for m in loaded.metrics] == ["accuracy", "AUC", "Precision"]
    assert loaded.metrics[1].curve == "PR" and loaded.metrics[2].threshold == 0.3
    assert loaded.evaluate(x, y, return_dict=True) == pytest.approx(model.evaluate(x, y, return_dict=True))


# -- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("chosen, loss, message", [
    (["AUCs"], "mse", "unknown metric 'AUCs'"),
    ([3], "mse", "unknown metric 3"),
    (["sparse_categorical_accuracy"], "categorical_crossentropy", "takes class ids"),
    (["AUC"], "sparse_categorical_crossentropy", "takes class ids; use 'categorical_crossentropy'"),
    ([metrics.TopKCategoricalAccuracy(k=9)], "categorical_crossentropy", "k=9 is more than the output's 4"),
    ([metrics.Precision(class_id=4)], "mse", "class_id=4 is not a column"),
])
def test_a_metric_that_cannot_take_the_output_says_why(chosen, loss, message):
    model = Sequential([Input((3,)), Dense(4, activation="softmax")])
    with pytest.raises(ValueError, match=message):
        model.compile("sgd", loss, metrics=chosen)


@pytest.mark.parametrize("make, message", [
    (lambda: metrics.AUC(multi_label="yes"), "multi_label must be True or False"),
    (lambda: metrics.AUC(label_weights=[1.0, 2.0]), "label_weights must be one non-negative number per label"),
    (lambda: metrics.AUC(thresholds=[0.5]), "thresholds is not supported"),
    (lambda: metrics.AUC(curve="LIFT"), "curve must be 'ROC' or 'PR'"),
    (lambda: metrics.AUC(num_thresholds=1), "num_thresholds must be an integer > 1"),
    (lambda: metrics.Precision(top_k=2), "top_k is not supported"),
    (lambda: metrics.Recall(thresholds=[0.2, 0.5]), "thresholds must be one number"),
    (lambda: metrics.F1Score(average="mean"), "average must be None, 'micro'"),
    (lambda: metrics.FBetaScore(beta=0), "beta must be above 0"),
    (lambda: metrics.BinaryAccuracy(threshold="half"), "threshold must be a number"),
    (lambda: metrics.TopKCategoricalAccuracy(k=0), "k must be a positive integer"),
])
def test_bad_metric_arguments_say_which(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_same_metric_object_twice_is_refused():
    auc = metrics.AUC()
    with pytest.raises(ValueError, match="lists metric 'auc' twice"):
        identity((1,)).compile("sgd", "mse", metrics=[auc, auc])


def test_a_distribution_refuses_metrics_it_does_not_reduce():
    model = Sequential([Input((3,)), Dense(1, activation="sigmoid")])
    strategy = clnet.distribute.DataParallel(devices=[0])
    with pytest.raises(ValueError, match=r"reports the loss and 'accuracy'; metrics \['AUC'\] are computed on one"):
        model.compile("sgd", "binary_crossentropy", metrics=["accuracy", "AUC"], distribution=strategy)


class ClassHits(metrics.Metric):
    """A metric of one's own as Keras's guides write one: variables, update_state with ops on the
    batch's arrays, result."""

    def __init__(self, name="class_hits", **kwargs):
        super().__init__(name=name, **kwargs)
        self.hits = self.add_variable(shape=(), initializer="zeros", name="hits")

    def update_state(self, y_true, y_pred, sample_weight=None):
        chosen = ops.argmax(y_pred, axis=-1)  # (rows,)
        values = ops.cast(ops.cast(y_true, "int32") == ops.cast(chosen, "int32"), "float32")
        if sample_weight is not None:
            values = ops.multiply(values, sample_weight)
        self.hits.assign_add(ops.sum(values))

    def result(self):
        return self.hits


class MeanError(metrics.Metric):
    """Two variables and a result of Python's operators on them; a reset of its own."""

    def __init__(self, name="mean_error", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_weight(name="total", initializer="zeros")
        self.seen = self.add_weight(name="seen", initializer="zeros")
        self.resets = 0

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(np.abs(y_true - y_pred).sum())
        self.seen.assign_add(y_true.size)

    def result(self):
        return self.total / self.seen

    def reset_state(self):
        self.resets += 1
        super().reset_state()


def test_a_metric_of_one_s_own_runs_update_state_on_each_batch(rng, tmp_path):
    """Keras's Metric subclass: fit's History and evaluate's logs are its result over the epoch's
    batches (numpy's on the predictions), its state starting again at each epoch and each
    evaluation; weighted_metrics pass sample_weight; y_true is the class ids a sparse loss takes."""
    x, y, w = rng.normal(size=(37, 5)), rng.integers(0, 3, 37), rng.random(37) * 2
    model = Sequential([Input((5,)), Dense(3, activation="softmax")], seed=3)
    model.compile(clnet.optimizers.SGD(0.0), "sparse_categorical_crossentropy",
                  metrics=["accuracy", ClassHits()], weighted_metrics=[ClassHits(name="weighted_hits")])
    history = model.fit(x, y, batch_size=8, epochs=2, sample_weight=w, validation_data=(x[:11], y[:11]),
                        verbose=0).history
    hits = model.predict(x).argmax(-1) == y
    np.testing.assert_array_equal(history["class_hits"], [hits.sum()] * 2)
    np.testing.assert_allclose(history["weighted_hits"], [np.sum(w * hits)] * 2, rtol=1e-5)
    np.testing.assert_array_equal(history["val_class_hits"], [hits[:11].sum()] * 2)
    assert history["accuracy"] == pytest.approx([hits.mean()] * 2)
    logs = model.evaluate(x, y, batch_size=5, return_dict=True)
    assert logs["class_hits"] == hits.sum() and logs["weighted_hits"] == hits.sum()  # (no sample_weight)
    model.save(tmp_path / "own.h5")  # by its class name, as Keras finds a registered class
    assert clnet.load_model(tmp_path / "own.h5").evaluate(x, y, return_dict=True) == pytest.approx(logs)


def test_a_metric_of_one_s_own_sees_the_output_s_shape_and_resets(rng):
    p, t = rng.random((23, 4, 3)).astype(np.float32), rng.random((23, 4, 3)).astype(np.float32)
    error = MeanError()
    logs = measured(p, t, "mse", [error, "mae"])
    assert logs["mean_error"] == pytest.approx(np.abs(t - p).mean(), rel=1e-5)
    assert logs["mean_error"] == pytest.approx(logs["mae"], rel=1e-5)
    assert error.resets == 1  # at the evaluation's first batch
    error.reset_state()
    error.update_state(t[:2], p[:2])  # alone, as Keras's: on arrays
    assert float(error.result()) == pytest.approx(np.abs(t[:2] - p[:2]).mean(), rel=1e-6)


def test_a_metric_of_one_s_own_gets_the_targets_as_given(rng):
    """As Keras passes y: class ids given as (n,) come as (rows,), as (n, 1) as (rows, 1)."""
    class Shapes(metrics.Metric):
        def __init__(self):
            super().__init__(name="shapes")
            self.seen = []

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.seen.append((y_true.shape, y_pred.shape))

        def result(self):
            return 0.0

    x = rng.normal(size=(10, 4))
    for y, want in ((rng.integers(0, 3, 10), (4,)), (rng.integers(0, 3, (10, 1)), (4, 1))):
        shapes = Shapes()
        model = Sequential([Input((4,)), Dense(3, activation="softmax")])
        model.compile("sgd", "sparse_categorical_crossentropy", metrics=[shapes])
        model.evaluate(x[:4], y[:4], batch_size=4)
        assert shapes.seen == [(want, (4, 3))]


def test_a_metric_of_one_s_own_says_what_it_lacks():
    class NoResult(metrics.Metric):
        def update_state(self, y_true, y_pred, sample_weight=None):
            pass

    class Nothing(metrics.Metric):
        pass

    with pytest.raises(TypeError, match=r"'no_result' \(NoResult\) defines update_state but not result\(\)"):
        identity((2,)).compile("sgd", "mse", metrics=[NoResult()])
    with pytest.raises(TypeError, match=r"'nothing' \(Nothing\) has neither a device kernel nor an update_state"):
        identity((2,)).compile("sgd", "mse", metrics=[Nothing()])
    with pytest.raises(ValueError, match=r"variable 'hits'.assign_add: a value of shape \(2,\)"):
        ClassHits().hits.assign_add(np.ones(2))


def test_weighted_metrics_are_named_as_keras_names_them_and_saved(rng, tmp_path):
    """compile(weighted_metrics=...): weighted by evaluate's sample_weight (each sample's weight
    over the weights' sum), unweighted without one; named weighted_<name> where `metrics` has
    the name too (Keras 3's logs), and kept by a checkpoint."""
    x, y, w = rng.normal(size=(30, 4)), rng.integers(0, 2, (30, 1)), rng.random(30) * 3
    model = Sequential([Input((4,)), Dense(1, activation="sigmoid")], seed=5)
    model.compile("adam", "binary_crossentropy", metrics=["accuracy", "mse"], weighted_metrics=["accuracy", "mse", "AUC"])
    model.fit(x, y, epochs=1, verbose=0, sample_weight=w)
    logs = model.evaluate(x, y, sample_weight=w, return_dict=True)
    assert list(logs) == ["loss", "AUC", "accuracy", "mse", "weighted_accuracy", "weighted_mse"]
    p = model.predict(x)
    hits, errors = ((p > 0.5) == y)[:, 0], ((p - y) ** 2)[:, 0]
    assert logs["accuracy"] == pytest.approx(hits.mean()) and logs["mse"] == pytest.approx(errors.mean(), rel=1e-5)
    assert logs["weighted_accuracy"] == pytest.approx(np.sum(w * hits) / w.sum(), rel=1e-6)
    assert logs["weighted_mse"] == pytest.approx(np.sum(w * errors) / w.sum(), rel=1e-5)
    plain = model.evaluate(x, y, return_dict=True)
    assert plain["weighted_mse"] == pytest.approx(plain["mse"], rel=1e-6)
    model.save(tmp_path / "w.h5")
    loaded = clnet.load_model(tmp_path / "w.h5")
    assert loaded.evaluate(x, y, sample_weight=w, return_dict=True) == pytest.approx(logs)
