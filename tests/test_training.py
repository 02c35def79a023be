"""Real training runs: Fashion-MNIST, determinism, validation, the launch budget per step."""
import numpy as np
import pytest

import clnet
from clnet.callbacks import Callback
from clnet.layers import Dense, Flatten, Input


@pytest.fixture(scope="module")
def fashion():
    (x_train, y_train), (x_test, y_test) = clnet.datasets.fashion_mnist.load_data()
    return (x_train[:6000] / 255.0, y_train[:6000]), (x_test[:2000] / 255.0, y_test[:2000])


def mlp(seed=1, floatx=None):
    return clnet.Sequential([Input((28, 28)), Flatten(), Dense(64, "relu"), Dense(10, "softmax")],
                            seed=seed, floatx=floatx)


def test_fashion_mnist_learns(fashion):
    (x, y), (x_test, y_test) = fashion
    model = mlp()
    model.compile("adam", "categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=64, epochs=2, validation_split=0.1, verbose=0)
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history.epoch == [0, 1]
    assert history.history["loss"][1] < history.history["loss"][0]
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=500)
    assert accuracy > 0.75, f"test accuracy {accuracy:.3f}: chance is 0.10"
    assert 0 < loss < 0.8
    probabilities = model.predict(x_test, batch_size=300)
    assert probabilities.shape == (2000, 10)
    np.testing.assert_allclose(probabilities.sum(1), 1, rtol=1e-5)
    assert (probabilities.argmax(1) == y_test).mean() == pytest.approx(accuracy, abs=1e-6)


def test_train_on_batch_is_a_step_of_fit(fashion):
    """train_on_batch is fit's step on the same rows (the same weights after, bit for bit, a partial
    batch of 37 too) and, as Keras's, returns the batch's loss and accuracy before the update: what
    test_on_batch and numpy's cross-entropy of predict_on_batch give then."""
    (x, y), _ = fashion
    model, twin = mlp(), mlp()
    for m in (model, twin):
        m.compile("adam", "categorical_crossentropy", metrics=["accuracy"])
    for rows in (slice(0, 64), slice(64, 101)):
        xb, yb = x[rows], y[rows]
        p = model.predict_on_batch(xb)
        np.testing.assert_array_equal(p, twin.predict(xb, batch_size=len(xb)))
        want_loss = -np.log(np.clip(p[np.arange(len(yb)), yb], 1e-7, 1)).mean()
        want_accuracy = (p.argmax(1) == yb).mean()
        before = model.test_on_batch(xb, yb, return_dict=True)
        assert before == twin.evaluate(xb, yb, batch_size=len(xb), return_dict=True)
        assert before["loss"] == pytest.approx(want_loss, rel=1e-5) and before["accuracy"] == want_accuracy
        loss, accuracy = model.train_on_batch(xb, yb)
        assert loss == pytest.approx(want_loss, rel=1e-5) and accuracy == want_accuracy
        twin.fit(xb, yb, batch_size=len(xb), epochs=1, verbose=0, shuffle=False)
    assert model.optimizer.iterations == 2
    for a, b in zip(model.get_weights(), twin.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert model.train_on_batch(x[:8], y[:8], return_dict=True).keys() == {"loss", "accuracy"}


def test_on_batch_methods_check_their_input():
    model = mlp()
    x, y = np.zeros((4, 28, 28)), np.zeros(4, int)
    with pytest.raises(clnet.NotCompiledError, match=r"compile\(optimizer, loss\) before train_on_batch"):
        model.train_on_batch(x, y)
    model.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match=r"y \(the targets\) is required"):
        model.test_on_batch(x)
    with pytest.raises(ValueError, match=r"x has shape \(4, 28\), but the model's first layer expects samples "
                                         r"of shape \(28, 28\)"):
        model.train_on_batch(x[:, 0], y)
    with pytest.raises(ValueError, match=r"x has 4 samples but y has 3"):
        model.train_on_batch(x, y[:3])
    assert model.optimizer.iterations == 0
    assert isinstance(model.train_on_batch(x, y), float)  # the loss alone, without metrics


def test_same_seed_same_run(fashion):
    (x, y), _ = fashion
    x, y = x[:1000], y[:1000]
    runs = []
    for _ in range(2):
        model = mlp(seed=42)
        model.compile(clnet.optimizers.Momentum(0.05), "categorical_crossentropy", ["accuracy"])
        history = model.fit(x, y, batch_size=50, epochs=2, verbose=0)
        runs.append((model.get_weights(), history.history))
    (w1, h1), (w2, h2) = runs
    for a, b in zip(w1, w2):
        np.testing.assert_array_equal(a, b)
    assert h1 == h2
    other = mlp(seed=43)
    other.build((28, 28))
    assert not np.array_equal(other.get_weights()[0], w1[0])


def test_validation_data_and_partial_batches():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(103, 4))
    y = (x[:, 0] + x[:, 1] > 0).astype(float)
    model = clnet.Sequential([Dense(8, "tanh", input_shape=(4,)), Dense(1, "sigmoid")], seed=0)
    model.compile(clnet.optimizers.Adam(0.05), "binary_crossentropy", ["accuracy"])
    history = model.fit(x, y, batch_size=10, epochs=15, validation_data=(x[:20], y[:20]), verbose=0)
    assert history.history["accuracy"][-1] > 0.9
    loss, accuracy = model.evaluate(x[:20], y[:20], batch_size=7)
    assert loss == pytest.approx(history.history["val_loss"][-1], rel=1e-5)
    assert accuracy == pytest.approx(history.history["val_accuracy"][-1])


def test_regression_with_mse():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (256, 3))
    y = np.stack([x @ [0.5, -1.0, 2.0] + 0.3, np.sin(x[:, 0])], axis=1)
    model = clnet.Sequential([Dense(32, "swish", input_shape=(3,)), Dense(2)], seed=2, floatx="float64")
    model.compile(clnet.optimizers.Adam(0.01), "mse")
    history = model.fit(x, y, batch_size=32, epochs=40, verbose=0)
    assert history.history["loss"][-1] < 0.01 * history.history["loss"][0]
    assert model.evaluate(x, y) == pytest.approx(np.mean((model.predict(x) - y) ** 2), rel=1e-9)


class Recorder(Callback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def on_train_begin(self, logs=None): self.calls.append("train_begin")
    def on_epoch_begin(self, epoch, logs=None): self.calls.append(f"epoch_begin {epoch}")
    def on_batch_end(self, batch, logs=None): self.calls.append(f"batch {batch} {logs['size']}")
    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(f"epoch_end {epoch} {sorted(logs)}")
        if epoch == 3:
            self.model.stop_training = True
    def on_train_end(self, logs=None): self.calls.append("train_end")


def test_callback_hooks_and_initial_epoch():
    x, y = np.random.default_rng(0).normal(size=(25, 2)), np.arange(25) % 2
    model = clnet.Sequential([Dense(2, "softmax", input_shape=(2,))], seed=0)
    model.compile("sgd", "categorical_crossentropy", ["accuracy"])
    recorder = Recorder()
    history = model.fit(x, y, batch_size=10, epochs=9, initial_epoch=2, callbacks=[recorder], verbose=0)
    assert history.epoch == [2, 3]
    assert recorder.calls[:6] == ["train_begin", "epoch_begin 2", "batch 0 10", "batch 1 10", "batch 2 5",
                                  "epoch_end 2 ['accuracy', 'loss']"]
    assert recorder.calls[-1] == "train_end" and len(recorder.calls) == 1 + 2 * 5 + 1
    assert model.epoch == 4


@pytest.mark.parametrize("batch_size", [16, 128])
def test_launches_per_training_step(batch_size):
    """One launch per op per batch: gather, per Dense 1 forward + 3 backward (delta and the bias
    gradient, weight gradient, input gradient; the GPU form's weight gradient makes delta and the
    bias gradient itself) less the first layer's input gradient, the loss (which takes the output
    layer's softmax itself), and one update for all parameters; no more with a larger batch."""
    x, y = np.random.default_rng(0).normal(size=(batch_size * 4, 20)), np.arange(batch_size * 4) % 10
    model = clnet.Sequential([Input((20,)), Dense(32, "relu"), Dense(16, "tanh"), Dense(10, "softmax")], seed=0)
    model.compile("adam", "categorical_crossentropy", ["accuracy"])
    model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)  # builds the programs
    rt = clnet.runtime()
    before = rt.launches
    model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False)
    per_epoch_reads = 1  # the epoch-end ReduceMetrics
    dense_layers = 3
    per_dense = 1 + (2 if model.layers[-1].tiled else 3)
    expected_per_step = 1 + dense_layers * per_dense - 1 + 1 + 1
    assert rt.launches - before == 4 * expected_per_step + per_epoch_reads
    assert expected_per_step <= 4 * dense_layers + 3


def test_keras_batch_hooks_and_their_aliases_are_called_and_stop_training_ends_the_epoch():
    """Keras 3 calls on_train_batch_begin/end, whose defaults call the on_batch_* aliases: a
    callback overriding either name is called, once per batch. stop_training set in a batch hook
    ends the epoch after that batch, as Keras's."""
    calls = []

    class KerasNames(Callback):
        def on_train_batch_begin(self, batch, logs=None):
            calls.append(f"train_batch_begin {batch}")

        def on_train_batch_end(self, batch, logs=None):
            calls.append(f"train_batch_end {batch}")
            if batch == 1:
                self.model.stop_training = True

    class Aliases(Callback):
        def on_batch_end(self, batch, logs=None):
            calls.append(f"batch_end {batch}")

    x, y = np.random.default_rng(0).normal(size=(40, 2)), np.arange(40) % 2
    model = clnet.Sequential([Dense(2, "softmax", input_shape=(2,))], seed=0)
    model.compile("sgd", "sparse_categorical_crossentropy")
    history = model.fit(x, y, batch_size=10, epochs=3, callbacks=[KerasNames(), Aliases()], verbose=0)
    assert calls == ["train_batch_begin 0", "train_batch_end 0", "batch_end 0",
                     "train_batch_begin 1", "train_batch_end 1", "batch_end 1"]
    assert history.epoch == [0]


def test_evaluate_lists_one_outputs_metrics_in_compile_order():
    """`loss, mse, accuracy, auc = model.evaluate(...)`, as Keras 3 returns them (its dict and the
    history are by name)."""
    x = np.random.default_rng(1).normal(size=(32, 4))
    y = (x[:, 0] > 0).astype(float)
    model = clnet.Sequential([Input((4,)), Dense(1, "sigmoid")], seed=0)
    model.compile("adam", "binary_crossentropy", ["mse", "accuracy", "AUC"])
    logs = model.evaluate(x, y, return_dict=True)
    assert model.evaluate(x, y) == [logs["loss"], logs["mse"], logs["accuracy"], logs["AUC"]]


@pytest.mark.parametrize("verbose, shown", [("auto", True), (1, True), (True, True), (0, False), (False, False)])
def test_verbose_auto_is_a_progress_bar(verbose, shown, capsys):
    x, y = np.random.default_rng(2).normal(size=(20, 3)), np.arange(20) % 2
    model = clnet.Sequential([Input((3,)), Dense(2, "softmax")], seed=0)
    model.compile("sgd", "sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=10, verbose=verbose)
    assert ("Epoch 1/1" in capsys.readouterr().err) == shown


def test_verbose_out_of_range_is_refused():
    model = clnet.Sequential([Input((3,)), Dense(2, "softmax")], seed=0)
    model.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="verbose must be 0, 1, 2 or 'auto', got 'loud'"):
        model.fit(np.zeros((4, 3)), np.zeros(4), verbose="loud")


def test_evaluate_lists_several_outputs_losses_then_metrics_by_name():
    x = np.random.default_rng(3).normal(size=(32, 4))
    y = (x[:, 0] > 0).astype(float)
    inputs = Input((4,))
    zeta, alpha = Dense(1, "sigmoid", name="zeta")(inputs), Dense(1, "sigmoid", name="alpha")(inputs)
    model = clnet.Model(inputs, [zeta, alpha], seed=0)
    model.compile("adam", ["binary_crossentropy", "mse"], metrics=[["mse", "accuracy"], ["accuracy", "AUC"]])
    logs = model.evaluate(x, [y, y], return_dict=True)
    order = ["loss", "zeta_loss", "alpha_loss", "alpha_AUC", "alpha_accuracy", "zeta_accuracy", "zeta_mse"]
    assert sorted(logs) == sorted(order)
    assert model.evaluate(x, [y, y]) == [logs[key] for key in order]
