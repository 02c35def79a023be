"""Inputs with lengths of None (Input((None, 8)), Input((None,)) of ids): the graph is made as
given, and made again on each data's lengths, sharing its layers' weights; a trained seq2seq
model's inference models decode exactly what it predicts; save, load, errors."""
import numpy as np
import pytest

import clnet
from clnet import layers
from clnet.model import Model


def one_hot(rng, n, steps, tokens):
    return np.eye(tokens)[rng.integers(0, tokens, (n, steps))]


def test_seq2seq_with_lengths_of_none_decodes_what_the_model_predicts(rng):
    """lstm_seq2seq's shape: encoder and decoder Inputs of any length; after training, an encoder
    model and a one-step decoder model built from the same layers decode, step by step with the
    true previous token, exactly what the trained model predicts (float64, difference 0)."""
    enc_tokens, dec_tokens, units = 5, 6, 7
    encoder_inputs = layers.Input((None, enc_tokens))
    _, h, c = layers.LSTM(units, return_state=True)(encoder_inputs)
    decoder_inputs = layers.Input((None, dec_tokens))
    decoder_lstm = layers.LSTM(units, return_sequences=True, return_state=True)
    sequences, _, _ = decoder_lstm(decoder_inputs, initial_state=[h, c])
    decoder_dense = layers.Dense(dec_tokens, activation="softmax")
    model = Model([encoder_inputs, decoder_inputs], decoder_dense(sequences), floatx="float64", seed=3)
    assert not model.built and encoder_inputs.output.shape == (None, None, enc_tokens)
    model.compile("rmsprop", "categorical_crossentropy", metrics=["accuracy"])
    source, target = one_hot(rng, 24, 4, enc_tokens), one_hot(rng, 24, 6, dec_tokens)
    before = [w.copy() for w in model.get_weights()] if model.built else None
    history = model.fit([source, target], np.roll(target, -1, axis=1), batch_size=8, epochs=2, verbose=0,
                        validation_split=0.25)
    assert before is None and sorted(history.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    encoder = Model(encoder_inputs, [h, c], floatx="float64")
    state_h, state_c = layers.Input((units,)), layers.Input((units,))
    step, h2, c2 = decoder_lstm(decoder_inputs, initial_state=[state_h, state_c])
    decoder = Model([decoder_inputs, state_h, state_c], [decoder_dense(step), h2, c2], floatx="float64")
    states = encoder.predict(source[:3])
    wanted = model.predict([source[:3], target[:3]])
    for t in range(6):
        out, *states = decoder.predict([target[:3, t:t + 1], *states])
        np.testing.assert_array_equal(out[:, 0], wanted[:, t])
    # The trained model still predicts at other lengths, with the same weights.
    shorter = model.predict([source[:3, :2], target[:3, :3]])
    assert shorter.shape == (3, 3, dec_tokens)
    np.testing.assert_array_equal(model.predict([source[:3], target[:3]]), wanted)


def ids_model():
    """The functional API guide's shape: id sequences of any length, several inputs and outputs."""
    title, body, tags = layers.Input((None,), name="title"), layers.Input((None,), name="body"), layers.Input(
        (3,), name="tags")
    features = layers.concatenate([layers.LSTM(4)(layers.Embedding(20, 5)(title)),
                                   layers.GlobalAveragePooling1D()(layers.Embedding(20, 5)(body)), tags])
    return Model([title, body, tags], {"priority": layers.Dense(1, name="priority")(features),
                                       "department": layers.Dense(2, name="department")(features)}, seed=5)


def test_ids_of_any_length_train_each_length_and_save(tmp_path, rng):
    model = ids_model()
    model.compile(clnet.optimizers.RMSprop(1e-3), loss={"priority": clnet.losses.BinaryCrossentropy(from_logits=True),
                                                        "department": "categorical_crossentropy"},
                  loss_weights={"priority": 1.0, "department": 0.2})
    data = {"title": rng.integers(0, 20, (32, 6)), "body": rng.integers(0, 20, (32, 9)),
            "tags": rng.integers(0, 2, (32, 3)).astype(np.float32)}
    targets = {"priority": rng.random((32, 1)), "department": np.eye(2)[rng.integers(0, 2, 32)]}
    first = model.fit(data, targets, epochs=2, batch_size=8, verbose=0).history
    assert sorted(first) == ["department_loss", "loss", "priority_loss"]
    bound = model.optimizer.moments
    longer = {**data, "title": rng.integers(0, 20, (32, 11))}
    model.fit(longer, targets, epochs=1, batch_size=8, verbose=0)  # made again on 11 steps: the same weights
    assert model.optimizer.iterations == 12 and model.optimizer.moments is bound  # (its state goes on)
    path = tmp_path / "ids.h5"
    model.save(path)
    loaded = clnet.load_model(path)
    assert loaded.built and loaded.get_config()["built_on"] == [[11], [9], [3]]
    assert [layer["config"]["shape"] for layer in loaded.get_config()["layers"][:3]] == [[None], [None], [3]]
    for x in (longer, data):
        want, got = model.predict(x), loaded.predict(x)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_lengths_are_checked(rng):
    model = ids_model()
    model.compile("adam", {"priority": "mse", "department": "mse"})
    data = {"title": rng.integers(0, 20, (8, 4)), "body": rng.integers(0, 20, (8, 5)),
            "tags": np.zeros((8, 3))}
    targets = {"priority": np.zeros((8, 1)), "department": np.zeros((8, 2))}
    with pytest.raises(ValueError, match=r"input 'tags' takes samples of shape \(3,\) \(None: any length\)"):
        model.predict({**data, "tags": np.zeros((8, 4))})
    with pytest.raises(ValueError, match=r"input 'title' takes samples of shape \(None,\)"):
        model.predict({**data, "title": np.zeros((8, 4, 2))})
    shorter = {**data, "body": data["body"][:, :3]}  # (validation data of other lengths: made on them)
    history = model.fit(data, targets, validation_data=(shorter, targets), verbose=0).history
    assert history["val_loss"][0] == pytest.approx(model.evaluate(shorter, targets, return_dict=True)["loss"], rel=1e-5)
    with pytest.raises(TypeError, match="positive integers or None"):
        layers.Input(("a", 3))


def test_inference_models_from_a_reloaded_seq2seq_model(tmp_path, rng):
    """lstm_seq2seq's second half: the model saved and loaded (clnet.models.load_model), its
    encoder taken as `model.input[0]` and `model.layers[2].output`, its decoder's layers by
    position, and a one-step decoder built from them decodes what the loaded model predicts."""
    encoder_inputs = layers.Input((None, 4))
    _, h, c = layers.LSTM(5, return_state=True)(encoder_inputs)
    decoder_inputs = layers.Input((None, 3))
    sequences, _, _ = layers.LSTM(5, return_sequences=True, return_state=True)(decoder_inputs, initial_state=[h, c])
    model = Model([encoder_inputs, decoder_inputs], layers.Dense(3, activation="softmax")(sequences),
                  floatx="float64", seed=1)
    model.compile("rmsprop", "categorical_crossentropy")
    source, target = one_hot(rng, 16, 5, 4), one_hot(rng, 16, 4, 3)
    model.fit([source, target], target, batch_size=8, epochs=1, verbose=0)
    model.save(tmp_path / "s2s.keras")
    model = clnet.models.load_model(tmp_path / "s2s.keras")
    assert [type(l).__name__ for l in model.layers] == ["Input", "Input", "LSTM", "LSTM", "Dense"]
    assert model.input[0].shape == (None, None, 4)
    encoder = Model(model.input[0], model.layers[2].output[1:])
    state_h, state_c = layers.Input((5,)), layers.Input((5,))
    step, h2, c2 = model.layers[3](model.input[1], initial_state=[state_h, state_c])
    decoder = Model([model.input[1], state_h, state_c], [model.layers[4](step), h2, c2])
    states = encoder.predict(source[:2])
    wanted = model.predict([source[:2], target[:2]])
    for t in range(4):
        out, *states = decoder.predict([target[:2, t:t + 1], *states])
        np.testing.assert_array_equal(out[:, 0], wanted[:, t])


def test_a_sequential_stack_on_an_input_of_lengths_none(tmp_path):
    """Sequential([Input((None, 5)), LSTM, Dense]), as keras.io's time-series examples write it:
    made on each data's lengths like a functional model of such an Input, saved as given."""
    rng = np.random.default_rng(0)
    model = clnet.Sequential([layers.Input((None, 5)), layers.LSTM(4), layers.Dense(2, "softmax")], seed=0)
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(rng.normal(size=(16, 7, 5)), np.arange(16) % 2, epochs=1, verbose=0)
    x9, x11 = rng.normal(size=(3, 9, 5)), rng.normal(size=(2, 11, 5))
    functional_input = layers.Input((None, 5))
    functional = clnet.Model(functional_input, model.layers[1](model.layers[0](functional_input)))
    for x in (x9, x11):
        np.testing.assert_allclose(model.predict(x), functional.predict(x), rtol=1e-6)
    model.save(tmp_path / "stack.h5")
    loaded = clnet.load_model(tmp_path / "stack.h5")
    assert isinstance(loaded, clnet.Sequential) and loaded.get_config()["layers"][0]["config"]["shape"][0] is None
    np.testing.assert_allclose(loaded.predict(x11), model.predict(x11), rtol=1e-6)
    grown = clnet.Sequential([layers.Input((None, 5))], seed=0)
    grown.add(layers.GRU(3))
    grown.add(layers.Dense(1))
    assert grown.predict(x9).shape == (3, 1) and grown.predict(x11).shape == (2, 1)


@pytest.mark.parametrize("kind", ["SimpleRNN", "GRU"])
def test_each_length_trains_on_its_own_gradient(rng, kind):
    """A model of Input((None,)) made again on another length runs its layers as copies: their
    gradient replaces the layer's own, which still holds the last step on the other length (it
    used to be added in). Gradients on length 11 after a step on length 7 equal a model built for
    11 alone with the same weights, in float64."""
    def model(length):
        ids = layers.Input((length,))
        h = getattr(layers, kind)(6)(layers.Embedding(20, 4)(ids))
        made = clnet.Model(ids, layers.Dense(3, "softmax")(h), seed=2, floatx="float64")
        made.compile(clnet.optimizers.SGD(0.5), "sparse_categorical_crossentropy")
        return made
    x7, x11, y = rng.integers(0, 20, (4, 7)), rng.integers(0, 20, (4, 11)), np.array([0, 1, 2, 1])
    any_length = model(None)
    any_length.build((7,))
    weights = any_length.get_weights()
    any_length.compute_gradients(x7, y)
    alone = model(11)
    alone.set_weights(weights)
    for got, want in zip(any_length.compute_gradients(x11, y)[1], alone.compute_gradients(x11, y)[1], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


class Buckets(clnet.PyDataset):
    """Batches of other lengths, as bucketed sequences come."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]


@pytest.mark.parametrize("tagging", [False, True])
def test_each_batch_of_one_fit_runs_at_its_own_lengths(rng, tagging):
    """A PyDataset of batches of lengths 5, 9, 5, 3 in one fit, validation arrays of length 7:
    each batch trains at its length, as train_on_batch on the same batches one by one does (the
    same weights after two epochs, float64); the epoch's loss is the batches' weighted by their
    sizes, its accuracy over every sample (a tagger's: over every step, as Keras's), with a
    metric of clnet.metrics beside; no program is built after the first epoch; compiled again,
    the lengths' instantiations train with the new step."""
    def model():
        x = layers.Input((None, 3))
        h = layers.LSTM(5, return_sequences=tagging)(x)
        made = Model(x, layers.Dense(3, "softmax")(h), seed=4, floatx="float64")
        made.compile(clnet.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                     metrics=["accuracy", clnet.metrics.SparseCategoricalAccuracy(name="sca")])
        return made
    shapes = [(6, 5), (4, 9), (3, 5), (5, 3)]
    batches = [(rng.normal(size=(n, t, 3)), rng.integers(0, 3, (n, t) if tagging else n)) for n, t in shapes]
    xv, yv = rng.normal(size=(4, 7, 3)), rng.integers(0, 3, (4, 7) if tagging else 4)
    bucketed, one_by_one = model(), model()
    rt = clnet.runtime()
    history = bucketed.fit(Buckets(batches), epochs=1, shuffle=False, validation_data=(xv, yv), verbose=0).history
    validation = bucketed.evaluate(xv, yv, return_dict=True)  # (the weights the validation saw)
    builds = rt.builds
    history2 = bucketed.fit(Buckets(batches), epochs=1, shuffle=False, verbose=0).history
    assert rt.builds == builds
    logs = [[], []]
    for epoch in range(2):
        for x, y in batches:
            logs[epoch].append(one_by_one.train_on_batch(x, y, return_dict=True))
    for got, want in zip(bucketed.get_weights(), one_by_one.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    sizes = np.array([n for n, _ in shapes])
    tokens = sizes * np.array([t for _, t in shapes]) if tagging else sizes
    for got, epoch in ((history, logs[0]), (history2, logs[1])):
        assert got["loss"][0] == pytest.approx(np.dot([b["loss"] for b in epoch], sizes) / sizes.sum(), rel=1e-12)
        for name in ("accuracy", "sca"):
            assert got[name][0] == pytest.approx(np.dot([b[name] for b in epoch], tokens) / tokens.sum(), rel=1e-12)
    assert history["val_loss"][0] == pytest.approx(validation["loss"], rel=1e-12)
    assert history["val_sca"][0] == pytest.approx(validation["sca"], rel=1e-12)
    for made in (bucketed, one_by_one):  # compiled again: the lengths' kept instantiations with it
        made.compile(clnet.optimizers.SGD(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
    bucketed.fit(Buckets(batches[::-1]), epochs=1, shuffle=False, verbose=0)
    for x, y in batches[::-1]:
        one_by_one.train_on_batch(x, y)
    for got, want in zip(bucketed.get_weights(), one_by_one.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_predict_over_batches_of_other_lengths(rng):
    """A PyDataset of batches of other lengths: a classifier's outputs are one array, each batch
    predicted at its length; a tagger's (one output per step) cannot be, which says so."""
    x = layers.Input((None, 3))
    h = layers.LSTM(4, return_sequences=True)(x)
    classifier = Model(x, layers.Dense(2)(layers.GlobalAveragePooling1D()(h)), seed=1)
    tagger = Model(x, layers.Dense(2)(h))
    batches = [(rng.normal(size=(3, t, 3)),) for t in (4, 7, 2)]
    got = classifier.predict(Buckets(batches))
    np.testing.assert_allclose(got, np.concatenate([classifier.predict(b[0]) for b in batches]), rtol=1e-6)
    tagger.predict(Buckets(batches[:1]))
    with pytest.raises(ValueError, match=r"outputs of samples of shapes \[\(\(2, 2\),\), \(\(4, 2\),\), \(\(7, 2\),\)\]"):
        tagger.predict(Buckets(batches))
