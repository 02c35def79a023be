"""Layers keep their weights: a model made of layers another model built (or trained) shares
them, as in Keras, and the two models train each other's weights."""
import numpy as np
import pytest

import clnet
from clnet.layers import LSTM, Dense, Input
from clnet.model import Model, Sequential


def relu(x):
    return np.maximum(x, 0)


def encoder_and_head(floatx="float64", seed=1):
    """(Input, shared Dense, model): Dense(5, relu) then Dense(2)."""
    x = Input((4,))
    encoder = Dense(5, "relu")
    model = Model(x, Dense(2)(encoder(x)), floatx=floatx, seed=seed)
    return x, encoder, model


def test_a_model_of_trained_layers_keeps_their_weights(rng):
    x, encoder, model = encoder_and_head()
    model.compile(clnet.optimizers.Adam(0.01), "mse")
    data, target = rng.normal(size=(32, 4)), rng.normal(size=(32, 2))
    model.fit(data, target, batch_size=8, epochs=2, verbose=0)
    trained, predicted = model.get_weights(), model.predict(data)

    features = Model(x, encoder(x), floatx="float64")
    kernel, bias = encoder.get_weights()
    np.testing.assert_array_equal(features.get_weights()[0], kernel)
    np.testing.assert_allclose(features.predict(data), relu(data @ kernel + bias), rtol=1e-13, atol=1e-14)
    for before, after in zip(trained, model.get_weights()):
        np.testing.assert_array_equal(before, after)
    np.testing.assert_array_equal(model.predict(data), predicted)


def test_models_sharing_a_layer_train_each_others_weights(rng):
    """B = the shared encoder + a new head, trained with Adam and a global norm clip: the encoder
    in A changes, A's head does not, and B's weights follow a model that owns copies of the same
    weights, step for step. B's update is two launches: the encoder's range of A's store, B's own."""
    x, encoder, first = encoder_and_head()
    first.compile(clnet.optimizers.Adam(0.01), "mse")
    data, target = rng.normal(size=(24, 4)), rng.normal(size=(24, 3))
    first.fit(data, rng.normal(size=(24, 2)), batch_size=8, epochs=1, verbose=0)  # A's moments are not zero
    head_before = first.layers[-1].get_weights()

    second = Model(x, Dense(3, "tanh")(encoder(x)), floatx="float64", seed=7)
    alone = Model(inputs := Input((4,)), Dense(3, "tanh")(Dense(5, "relu")(inputs)), floatx="float64")
    alone.set_weights(second.get_weights())
    for model in (second, alone):
        model.compile(clnet.optimizers.Adam(0.02, global_clipnorm=0.5), "mse")
    assert len(second.optimizer.ranges) == 2 and len(alone.optimizer.ranges) == 1
    rt = clnet.runtime()
    launches = []
    for model in (second, alone):
        before = rt.launches
        model.fit(data, target, batch_size=8, epochs=3, shuffle=False, verbose=0)
        launches.append(rt.launches - before)
    assert launches[0] == launches[1] + 3 * 3 * 2  # per step: an update and a norm pass more
    for got, want in zip(second.get_weights(), alone.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(first.get_weights()[0], second.get_weights()[0])  # one encoder
    for before, after in zip(head_before, first.layers[-1].get_weights()):
        np.testing.assert_array_equal(before, after)
    first.fit(data, rng.normal(size=(24, 2)), batch_size=8, epochs=1, verbose=0)  # A trains on from there


def test_a_shared_model_saves_and_resumes_exactly(tmp_path, rng):
    """The optimizer's moments of a model whose weights lie in two stores go into its checkpoint
    and come back in a model that built its own layers: both runs then go on alike."""
    x, encoder, first = encoder_and_head()
    second = Model(x, Dense(3)(encoder(x)), floatx="float64", seed=3)
    second.compile(clnet.optimizers.RMSprop(0.01, momentum=0.5), "mse")
    data, target = rng.normal(size=(16, 4)), rng.normal(size=(16, 3))
    second.fit(data, target, batch_size=8, epochs=1, verbose=0)
    second.save(tmp_path / "shared.h5")
    loaded = clnet.load_model(tmp_path / "shared.h5")
    for model in (second, loaded):
        model.fit(data, target, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(loaded.get_weights(), second.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_a_layer_called_on_another_shape_names_both_shapes():
    x, encoder, model = encoder_and_head()
    wider = Input((6,))
    with pytest.raises(ValueError, match=r"dense.*built for inputs of shape \(4,\).*shape \(6,\)"):
        encoder(wider)  # where the graph is made, as Keras
    with pytest.raises(ValueError, match="float32 on"):
        Model(x, encoder(x), floatx="float32")


def test_a_recurrent_layer_runs_over_fewer_steps_with_its_weights(rng):
    """Trained over 6 steps, the LSTM runs over the first 3 in a second model (a copy with
    buffers of its own, reading the same weights): the same outputs, exactly."""
    sequence = Input((6, 3))
    lstm = LSTM(4, return_sequences=True)
    model = Model(sequence, Dense(2)(lstm(sequence)), floatx="float64")
    model.compile("adam", "mse")
    data = rng.normal(size=(10, 6, 3))
    model.fit(data, rng.normal(size=(10, 6, 2)), batch_size=5, epochs=1, verbose=0)
    shorter = Input((3, 3))
    head = Model(shorter, lstm(shorter), floatx="float64")
    whole = Model(sequence, lstm(sequence), floatx="float64")
    np.testing.assert_array_equal(head.predict(data[:, :3]), whole.predict(data)[:, :3])


def test_adding_layers_keeps_one_store_unless_another_model_reads_them(rng):
    # tanh, not relu: a relu layer whose six units are all negative at the probe would read zeros
    # before and after training, whatever the seed drew
    model = Sequential([Input((4,)), Dense(6, "tanh")], floatx="float64")
    first = model.layers[0].get_weights()
    model.add(Dense(3))
    model.add(Dense(2))
    model.compile("sgd", "mse")
    assert len(model.optimizer.ranges) == 1 and model.store is model.optimizer.ranges[0].store
    np.testing.assert_array_equal(model.layers[0].get_weights()[0], first[0])

    x = Input((4,))
    reader = Model(x, model.layers[0](x), floatx="float64")
    model.add(Dense(1))  # model.layers[0] is read by `reader` too: it stays where it is
    model.compile("sgd", "mse")
    assert len(model.optimizer.ranges) == 2
    with pytest.raises(ValueError, match="not one flat store"):
        model.store
    before = reader.predict(np.ones((1, 4)))
    model.fit(rng.normal(size=(8, 4)), rng.normal(size=(8, 1)), epochs=1, verbose=0)
    assert not np.array_equal(reader.predict(np.ones((1, 4))), before)  # the reader sees the training


def test_seq2seq_inference_models_decode_what_the_trained_model_predicts(rng):
    """The sequence-to-sequence pattern: an encoder LSTM's final states start a decoder LSTM, a
    softmax over its outputs; trained, then split into an encoder model (its states) and a
    decoder model of one step (states in, states out) built from the same layers. Decoding the
    targets step by step (teacher-forced) gives what the trained model predicts, exactly."""
    steps, tokens, units = 5, 7, 6
    encoder_inputs = Input((4, tokens))
    _, h, c = LSTM(units, return_state=True)(encoder_inputs)
    decoder_inputs = Input((steps, tokens))
    decoder_lstm = LSTM(units, return_sequences=True, return_state=True)
    decoder_outputs, _, _ = decoder_lstm(decoder_inputs, initial_state=[h, c])
    decoder_dense = Dense(tokens, "softmax")
    model = Model([encoder_inputs, decoder_inputs], decoder_dense(decoder_outputs), floatx="float64")
    model.compile(clnet.optimizers.RMSprop(0.01), "categorical_crossentropy", ["accuracy"])
    one_hot = lambda shape: np.eye(tokens)[rng.integers(0, tokens, shape)]
    source, target = one_hot((12, 4)), one_hot((12, steps))
    model.fit([source, target], np.roll(target, -1, axis=1), batch_size=4, epochs=3, verbose=0)
    trained = model.get_weights()

    encoder_model = Model(encoder_inputs, [h, c], floatx="float64")
    state_inputs = [Input((units,)), Input((units,))]
    step_input = Input((1, tokens))
    step_outputs, step_h, step_c = decoder_lstm(step_input, initial_state=state_inputs)
    decoder_model = Model([step_input, *state_inputs], [decoder_dense(step_outputs), step_h, step_c],
                          floatx="float64")
    predicted = model.predict([source, target])
    states = encoder_model.predict(source)
    for t in range(steps):
        probabilities, *states = decoder_model.predict([target[:, t:t + 1], *states])
        np.testing.assert_array_equal(probabilities[:, 0], predicted[:, t])
    for before, after in zip(trained, model.get_weights()):
        np.testing.assert_array_equal(before, after)
