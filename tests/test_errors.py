"""Bad input raises an error that names the argument, what was received and what was expected."""
import numpy as np
import pytest

import clnet
from clnet.layers import Dense, Input


@pytest.fixture
def model():
    m = clnet.Sequential([Input((4,)), Dense(5, "relu"), Dense(3, "softmax")], seed=0)
    m.compile("adam", "categorical_crossentropy", ["accuracy"])
    return m


X = np.random.default_rng(0).normal(size=(10, 4))
Y = np.arange(10) % 3


def test_fit_before_compile():
    m = clnet.Sequential([Dense(2, input_shape=(3,))])
    with pytest.raises(ValueError, match=r"call compile\(optimizer, loss\) before fit\(\)"):
        m.fit(np.zeros((2, 3)), np.zeros((2, 2)))
    with pytest.raises(RuntimeError):  # also a RuntimeError, as Keras raises
        m.evaluate(np.zeros((2, 3)), np.zeros((2, 2)))


def test_compile_defaults_are_keras():
    """Keras's defaults: RMSprop with its own defaults, and no loss, which clnet cannot train on."""
    m = clnet.Sequential([Input((3,)), Dense(2)])
    with pytest.raises(ValueError, match=r"loss is None: every output of a clnet model trains on a loss named in "
                                         r"compile\(loss=\.\.\.\)"):
        m.compile()
    m.compile(loss="mse")
    assert isinstance(m.optimizer, clnet.optimizers.RMSprop)
    assert m.optimizer.get_config()["learning_rate"] == pytest.approx(1e-3)
    assert m.optimizer.get_config()["rho"] == pytest.approx(0.9)


@pytest.mark.parametrize("x,message", [
    (np.zeros((10, 5)), r"x has shape \(10, 5\), but the model's first layer expects samples of shape \(4,\)"),
    (np.zeros(10), r"x must have a batch axis and at least one sample, got shape \(10,\)"),
    (np.zeros((0, 4)), r"at least one sample, got shape \(0, 4\)"),
])
def test_wrong_shapes(model, x, message):
    with pytest.raises(ValueError, match=message):
        model.fit(x, Y)


def test_wrong_feature_count_after_build(model):
    model.fit(X, Y, verbose=0)
    with pytest.raises(ValueError, match=r"x has shape \(10, 6\), but the model's first layer expects samples of shape \(4,\)"):
        model.predict(np.zeros((10, 6)))


def test_length_mismatch(model):
    with pytest.raises(ValueError, match="x has 10 samples but y has 9; they must match"):
        model.fit(X, Y[:9])


def test_labels_out_of_range(model):
    bad = Y.copy()
    bad[7] = 3
    with pytest.raises(ValueError, match=r"y holds label 3 at index 7; the model has 3 classes, so labels must be in 0..2"):
        model.fit(X, bad)
    bad[7] = -1
    with pytest.raises(ValueError, match="label -1 at index 7"):
        model.evaluate(X, bad)


def test_target_shape_mismatch(model):
    with pytest.raises(ValueError, match=r"y has shape \(10, 4\), but the model's output is \(samples, 3\)"):
        model.fit(X, np.zeros((10, 4)))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs(model, value):
    x = X.copy()
    x[3, 2] = value
    with pytest.raises(ValueError, match=r"x contains 1 NaN or infinite value\(s\), the first at index \(3, 2\)"):
        model.fit(x, Y)
    y = np.eye(3)[Y]
    y[1, 1] = value
    with pytest.raises(ValueError, match=r"y contains 1 NaN or infinite value\(s\), the first at index \(1, 1\)"):
        model.fit(X, y)


@pytest.mark.parametrize("x", [np.array([["a"] * 4] * 10), np.zeros((10, 4), dtype=object)])
def test_non_numeric_dtypes(model, x):
    with pytest.raises(TypeError, match="x must hold integers or floats, got dtype"):
        model.fit(x, Y)


def test_boolean_arrays_are_zeros_and_ones(model):
    """As in Keras, boolean inputs and one-hot targets read as 0/1."""
    x = X > 0
    one_hot = np.eye(3, dtype=bool)[Y]
    assert model.evaluate(x, one_hot) == model.evaluate(x.astype(np.float64), one_hot.astype(np.float64))
    model.fit(x, one_hot, epochs=1, verbose=0)
    np.testing.assert_array_equal(model.predict(x), model.predict(x.astype(np.float64)))


@pytest.mark.parametrize("batch_size,error", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_batch_size(model, batch_size, error):
    with pytest.raises(error, match="batch_size must be"):
        model.fit(X, Y, batch_size=batch_size)


def test_other_bad_arguments(model):
    with pytest.raises(ValueError, match=r"validation_split must be a number in \[0, 1\), got 1.5"):
        model.fit(X, Y, validation_split=1.5)
    with pytest.raises(ValueError, match="epochs must be >= 0, got -1"):
        model.fit(X, Y, epochs=-1)
    with pytest.raises(ValueError, match=r"validation_data must be a tuple \(x_val, y_val\)"):
        model.fit(X, Y, validation_data=X)
    with pytest.raises(ValueError, match=r"validation_data y holds label 3 at index 0"):
        model.fit(X, Y, validation_data=(X, Y + 3))


def test_bad_configuration():
    with pytest.raises(ValueError, match="Dense units must be a positive integer, got 0"):
        Dense(0)
    with pytest.raises(ValueError, match="unknown activation 'selu'"):
        Dense(3, activation="selu")
    with pytest.raises(TypeError, match=r"activation 'lrelu' got unknown parameter\(s\) \['b'\]; it takes a"):
        clnet.activations.get("lrelu", b=1.0)
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        clnet.Sequential([Dense(1, input_shape=(1,))]).compile("sgd", "hinge")
    with pytest.raises(ValueError, match="unknown metric .hinge."):
        clnet.Sequential([Dense(1, input_shape=(1,))]).compile("sgd", "mse", ["hinge"])
    with pytest.raises(ValueError, match="unknown initializer 'variance_scaling'"):
        Dense(3, kernel_initializer="variance_scaling")
    with pytest.raises(TypeError, match="floatx must be 'float32' or 'float64', got 'float16'"):
        clnet.Sequential([Dense(1)], floatx="float16")


def test_set_weights_checks_shapes():
    m = clnet.Sequential([Dense(3, input_shape=(2,))])
    m.build((2,))
    with pytest.raises(ValueError, match=r"layer 'dense' weight 0 must have shape \(2, 3\), got \(3, 2\)"):
        m.set_weights([np.zeros((3, 2)), np.zeros(3)])
    with pytest.raises(ValueError, match="set_weights expects 2 arrays, got 1"):
        m.set_weights([np.zeros((2, 3))])
    with pytest.raises(ValueError, match="weight 1 must be finite numbers"):
        m.set_weights([np.zeros((2, 3)), np.array([0, np.nan, 0])])
