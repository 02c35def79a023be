"""Keras's building rules: a model that knows its input shape is built when constructed, and one
that does not says how to build it instead of failing inside a layer."""
import io

import numpy as np
import pytest

import clnet
from clnet.layers import Dense, Flatten, Input

SHAPES = [(13, 11), (11,), (11, 3), (3,)]


def test_input_first_builds_on_construction():
    model = clnet.Sequential([Input((13,)), Dense(11, "relu"), Dense(3)], seed=0)
    assert model.built
    assert [w.shape for w in model.get_weights()] == SHAPES
    assert model.count_params() == 13 * 11 + 11 + 11 * 3 + 3
    new = [np.full(shape, i + 0.5, np.float32) for i, shape in enumerate(SHAPES)]
    model.set_weights(new)
    for got, want in zip(model.get_weights(), new):
        np.testing.assert_array_equal(got, want)
    x = np.ones((2, 13), np.float32)
    expected = np.maximum(x @ new[0] + new[1], 0) @ new[2] + new[3]
    np.testing.assert_allclose(model.predict(x), expected, rtol=1e-6)
    text = io.StringIO()
    model.summary(file=text)
    assert "(None, 11)" in text.getvalue() and f"Total params: {model.count_params():,}" in text.getvalue()


def test_input_shape_argument_builds_on_construction():
    model = clnet.Sequential([Dense(11, input_shape=(13,)), Dense(3)], seed=0)
    assert model.built and [w.shape for w in model.get_weights()] == SHAPES


def test_add_rebuilds_and_keeps_the_weights_it_had():
    model = clnet.Sequential(seed=0)
    model.add(Input((2, 3)))
    model.add(Flatten())
    model.add(Dense(4, "tanh"))
    assert model.built
    before = [np.arange(24, dtype=np.float32).reshape(6, 4) / 10, np.ones(4, np.float32)]
    model.set_weights(before)
    model.add(Dense(2))
    weights = model.get_weights()
    assert [w.shape for w in weights] == [(6, 4), (4,), (4, 2), (2,)]
    for got, want in zip(weights[:2], before):
        np.testing.assert_array_equal(got, want)
    model.compile("sgd", "mse")
    model.fit(np.ones((4, 2, 3)), np.zeros((4, 2)), epochs=1, verbose=0)
    with pytest.raises(RuntimeError, match="cannot add layers to model 'sequential': it has been trained"):
        model.add(Dense(1))


@pytest.mark.parametrize("call", ["get_weights", "set_weights", "count_params", "summary"])
def test_unbuilt_model_says_how_to_build_it(call):
    model = clnet.Sequential([Dense(3), Dense(2)])
    assert not model.built
    args = ([],) if call == "set_weights" else ()
    with pytest.raises(clnet.NotBuiltError,
                       match=rf"model 'sequential' is not built yet, so {call}\(\).*Input\(shape\).*build\(input_shape\)"):
        getattr(model, call)(*args)
    model.build((5,))
    assert [w.shape for w in model.get_weights()] == [(5, 3), (3,), (3, 2), (2,)]


def test_unbuilt_model_builds_from_its_first_data():
    model = clnet.Sequential([Dense(3)], seed=0)
    model.compile("sgd", "mse")
    model.fit(np.ones((4, 7)), np.zeros((4, 3)), verbose=0)
    assert model.built and model.layers[0].input_shape == (7,)


def test_layers_and_get_layer_as_keras():
    """Keras 3's `layers`: a Sequential's leaves its Input out, a functional model's lists its
    Inputs first; get_layer by name or index, and errors that say what exists."""
    hidden = Dense(4, "relu", name="hidden")
    sequential = clnet.Sequential([Input((3,), name="x"), hidden, Dense(2, name="head")], seed=0)
    assert [l.name for l in sequential.layers] == ["hidden", "head"]
    assert sequential.get_layer("head") is sequential.layers[1] and sequential.get_layer(index=0) is hidden
    assert sequential.get_layer(index=-1).name == "head"
    x = Input((3,), name="x")
    functional = clnet.Model(x, Dense(2, name="head")(Dense(4, name="hidden")(x)))
    assert [type(l).__name__ for l in functional.layers] == ["Input", "Dense", "Dense"]
    assert functional.get_layer(index=0) is x and functional.get_layer("hidden").units == 4
    with pytest.raises(ValueError, match=r"No such layer: 'tail'. Existing layers are: \['hidden', 'head'\]"):
        sequential.get_layer("tail")
    with pytest.raises(ValueError, match=r"index 2 is not a position in model 'sequential', which has 2 layers"):
        sequential.get_layer(index=2)
    with pytest.raises(ValueError, match=r"only a layer name or a layer index"):
        sequential.get_layer("head", 0)
    with pytest.raises(ValueError, match=r"either a layer name or a layer index"):
        sequential.get_layer()
    text = io.StringIO()
    sequential.summary(file=text)
    assert "hidden (Dense)" in text.getvalue() and "(Input)" not in text.getvalue()


def test_layers_are_named_at_construction_as_keras_names_them():
    assert [Dense(2).name, Dense(2).name, clnet.layers.LSTM(3).name, Input((2,)).name, Input((2,)).name] == [
        "dense", "dense_1", "lstm", "input_layer", "input_layer_1"]
    assert clnet.layers.BatchNormalization().name == "batch_normalization"
    with pytest.raises(ValueError, match="GlobalAveragePooling1D 'global_average_pooling1d' expects"):
        clnet.layers.GlobalAveragePooling1D()(Input((5,)))  # named in errors before any build
    clnet.utils.clear_session()
    assert Dense(2).name == "dense"
    x = Input((3,))
    with pytest.raises(ValueError, match=r"the name 'twin' is used by two layers of the model"):
        clnet.Model(x, Dense(2, name="twin")(Dense(3, name="twin")(x)))


def test_inputs_and_outputs_of_layers_and_models():
    x, y = Input((3,)), Input((2,))
    hidden = Dense(4)
    h = hidden(x)
    out = Dense(1)(clnet.layers.Concatenate()([h, y]))
    model = clnet.Model([x, y], out)
    assert hidden.input is x.output and hidden.output is h and x.input is x.output
    assert model.input == [x.output, y.output] and model.output is out
    assert clnet.Model(x, h).input is x.output
    assert clnet.Model(x, {"h": h}).output == {"h": h}
    with pytest.raises(AttributeError, match="Dense 'never' has never been called and thus has no defined output"):
        Dense(2, name="never").output


def test_an_input_takes_keras_dtype(rng):
    """Input(shape, dtype="int32"), as Keras's text examples write it: token ids in, the model's
    float type inside; kept in the config; a dtype that is no number is refused."""
    ids = Input((6,), dtype="int32")
    model = clnet.Model(ids, clnet.layers.GlobalAveragePooling1D()(clnet.layers.Embedding(10, 3)(ids)))
    assert model.get_config()["layers"][0]["config"]["dtype"] == "int32"
    assert clnet.Model.from_config(model.get_config()).layers[0].input_dtype == "int32"
    tokens = rng.integers(0, 10, (4, 6)).astype(np.int32)
    table = model.layers[1].get_weights()[0]
    np.testing.assert_allclose(model.predict(tokens), table[tokens].mean(1), rtol=1e-6)
    with pytest.raises(ValueError, match="Input dtype must be a numeric dtype such as 'int32'.*got 'string'"):
        Input((3,), dtype="string")
