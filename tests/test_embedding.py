"""Embedding and PositionEmbedding: kernels against numpy at awkward sizes, float64 gradient
checks over sequence lengths 1, 2 and 7, Keras's layout and numbers, configs, checkpoints, the
ids' checks before any launch, and launches per step."""
from pathlib import Path

import numpy as np
import pytest

import clnet
from clnet.cl.parameters import ParameterStore
from clnet.layers import Add, Dense, Embedding, Input, LayerNormalization, PositionEmbedding
from clnet.layers import embedding
from test_gradients import relative_error

F32 = np.float32
H = 1e-6
DATA = Path(__file__).parent / "data"


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def token_model(vocab, time, dim, classes, floatx="float32", seed=1):
    """ids -> token embedding + position embedding -> Dense(classes, softmax) at every position."""
    ids = Input((time,))
    tokens = Embedding(vocab, dim, name="tokens")(ids)
    h = Add()([tokens, PositionEmbedding(time + 2, name="positions")(tokens)])
    return clnet.Model(ids, Dense(classes, "softmax")(h), floatx=floatx, seed=seed)


@pytest.mark.parametrize("vocab,dim,time", [(1, 1, 1), (3, 5, 7), (129, 127, 3), (1000, 4, 1)])
def test_embedding_forward_and_gradient_match_numpy(rng, vocab, dim, time):
    """The lookup, and the table gradient: each row the sum of its tokens' gradients (np.add.at)."""
    rows = 5
    model = clnet.Sequential([Input((time,)), Embedding(vocab, dim)], seed=2)
    table = rng.normal(size=(vocab, dim))
    model.set_weights([table])
    ids = rng.integers(0, vocab, (rows, time))
    close(model.predict(ids), table[ids].astype(F32), rtol=0, atol=0)
    model.compile("sgd", "mse")
    y = rng.normal(size=(rows, time, dim))
    for _ in range(2):  # the id counts are back at 0 after a step: the second gradient is the same
        _, (grad,), _ = model.compute_gradients(ids, y)
        want = np.zeros_like(table)
        np.add.at(want, ids.ravel(), (2 * (table[ids] - y) / (rows * time * dim)).reshape(-1, dim))
        close(grad, want, rtol=1e-4, atol=1e-7)


def test_embedding_gradient_with_many_repeats(rng):
    """An id occurring in many windows (the row's work-group, 3 items, checks 3 x IDS_PER_ITEM
    ids at a time), next to rare ones."""
    rows, time, vocab, dim = 97, 7, 5, 3
    ids = np.where(rng.random((rows, time)) < 0.9, 2, rng.integers(0, vocab, (rows, time)))
    model = clnet.Sequential([Input((time,)), Embedding(vocab, dim)], floatx="float64", seed=2)
    model.compile("sgd", "mse")
    y = rng.normal(size=(rows, time, dim))
    table = model.get_weights()[0]
    _, (grad,), dx = model.compute_gradients(ids, y)
    want = np.zeros_like(table)
    np.add.at(want, ids.ravel(), (2 * (table[ids] - y) / (rows * time * dim)).reshape(-1, dim))
    assert (ids == 2).sum() > 512
    close(grad, want, rtol=1e-12, atol=1e-15)
    assert not dx.any()  # ids have no gradient


def table_gradient(rt, ids, grad, vocab, dtype, seed=0):
    """The layer's backward pass on its own, fed these output gradients: dL/dtable, twice (the
    second pass checks that the counts were set back)."""
    store = ParameterStore(rt, dtype)
    layer = Embedding(vocab, grad.shape[-1])
    layer.build(ids.shape[1:], store, np.random.default_rng(seed))
    store.allocate()
    layer.allocate(len(ids))
    x, g = clnet.Tensor.from_numpy(ids.astype(dtype), rt=rt), clnet.Tensor.from_numpy(grad.astype(dtype), rt=rt)
    layer.forward(x, len(ids))
    results = []
    for _ in range(2):
        layer.backward(g, len(ids), False)
        results.append(layer.gradients()[0])
    return results


def ordered_sums(ids, grad, vocab, dtype):
    """Each row's tokens added one by one in token order, from zero, in `dtype`: the kernel's sums."""
    want = np.zeros((vocab, grad.shape[-1]), dtype)
    for v, row in zip(ids.ravel(), grad.reshape(-1, grad.shape[-1]).astype(dtype)):
        want[v] += row
    return want


def batch_ids(rng, vocab, shape, concentrated):
    """Uniform ids, or 90% of them one id (in the middle of the table) among uniform ones."""
    ids = rng.integers(0, vocab, shape)
    return np.where(rng.random(shape) < 0.9, vocab // 2, ids) if concentrated else ids


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("vocab,dim,shape,concentrated", [
    (1, 1, (1, 1), False), (3, 5, (5, 1), False), (3, 3, (1, 5), True), (7, 1, (32, 256), True),
    (7, 5, (32, 256), False), (113, 256, (32, 256), False), (113, 256, (32, 256), True), (113, 3, (1, 5), False),
    (7, 257, (5, 1), True), (50000, 3, (32, 256), False)])
def test_embedding_table_gradient_is_the_ordered_sum(rt, fp64, rng, dtype, vocab, dim, shape, concentrated):
    """Bit for bit the sums of each row's tokens in token order (the kernel's windows list them
    in that order), zeros for ids the batch lacks, at group sizes 1, 3, 5, 256 and 256 with
    columns to spare, up to 8192 tokens, one id or spread."""
    ids = batch_ids(rng, vocab, shape, concentrated)
    grad = rng.normal(size=(*shape, dim))
    want = ordered_sums(ids, grad, vocab, dtype)
    for got in table_gradient(rt, ids, grad, vocab, dtype):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("per_item", [1, 3, 16, 64])
def test_embedding_table_gradient_ids_per_item(rt, rng, monkeypatch, per_item):
    """The kernel at other window widths than the layer's (up to the 64 bits an item keeps its
    hits in): windows past the last token, hits at both ends of an item's ids, 8192 tokens of one id."""
    monkeypatch.setattr(embedding, "IDS_PER_ITEM", per_item)
    for vocab, dim, shape, concentrated in ((5, 3, (3, 7), False), (113, 256, (32, 256), False),
                                            (7, 5, (32, 256), True), (1, 4, (32, 256), False)):
        ids = batch_ids(rng, vocab, shape, concentrated)
        grad = rng.normal(size=(*shape, dim)).astype(F32)
        want = ordered_sums(ids, grad, vocab, F32)
        for got in table_gradient(rt, ids, grad, vocab, F32):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("time,length,leading", [(1, 1, ()), (3, 5, ()), (7, 7, (2,)), (2, 9, (3, 1))])
def test_position_embedding_matches_numpy(rng, time, length, leading):
    """The first `time` rows of the table broadcast over the batch (and leading axes); their
    gradient sums over the samples; rows past the input's length get none."""
    features, rows = 5, 4
    shape = (*leading, time, features)
    model = clnet.Sequential([Input(shape), PositionEmbedding(length)], seed=3)
    table = rng.normal(size=(length, features))
    model.set_weights([table])
    x = rng.normal(size=(rows, *shape))
    close(model.predict(x), np.broadcast_to(table[:time], x.shape).astype(F32), rtol=0, atol=0)
    model.compile("sgd", "mse")
    y = rng.normal(size=x.shape)
    _, (grad,), dx = model.compute_gradients(x, y)
    d = 2 * (np.broadcast_to(table[:time], x.shape) - y) / y.size * features
    want = np.zeros_like(table)
    want[:time] = d.reshape(-1, time, features).sum(0) / features
    close(grad, want, rtol=1e-4, atol=1e-7)
    assert not dx.any()


@pytest.mark.parametrize("time", [1, 2, 7])
def test_gradients_float64(fp64, time):
    """Central differences of the loss for every weight: token and position tables, Dense, through
    the per-token sparse cross-entropy (ids are not differentiable: weights only)."""
    rng = np.random.default_rng(time)
    model = token_model(6, time, 3, 4, floatx="float64")
    model.compile(clnet.optimizers.SGD(), "sparse_categorical_crossentropy")
    ids, y = rng.integers(0, 6, (3, time)), rng.integers(0, 4, (3, time))
    ids[0, 0] = ids[-1, -1]  # an id used twice
    _, grads, _ = model.compute_gradients(ids, y)
    weights = model.get_weights()
    for i, w in enumerate(weights):
        numeric = np.zeros_like(w)
        for index in np.ndindex(w.shape):
            original = w[index]
            w[index] = original + H
            model.set_weights(weights)
            plus = model.evaluate(ids, y, batch_size=3)
            w[index] = original - H
            model.set_weights(weights)
            minus = model.evaluate(ids, y, batch_size=3)
            w[index] = original
            numeric[index] = (plus - minus) / (2 * H)
        model.set_weights(weights)
        assert np.linalg.norm(numeric) > 1e-8
        assert relative_error(grads[i], numeric) < 1e-6, f"weight {i}: {relative_error(grads[i], numeric):.2e}"


def test_keras_layout_and_numbers():
    """Keras's weights load as they are and give Keras's outputs, loss and one SGD step
    (tests/data/keras_embedding.npz, written by tests/make_keras_embedding_fixture.py)."""
    stored = np.load(DATA / "keras_embedding.npz")
    weights = [stored[f"w{i}"] for i in range(int(stored["count"]))]
    ids = Input((stored["x"].shape[1],))
    h = Embedding(*weights[0].shape)(ids)
    h = LayerNormalization()(Add()([h, PositionEmbedding(weights[1].shape[0])(h)]))
    model = clnet.Model(ids, Dense(weights[-1].shape[0])(Dense(weights[4].shape[1], "gelu")(h)),
                        floatx="float64")
    model.set_weights(weights)
    close(model.predict(stored["x"]), stored["y"], rtol=1e-6, atol=1e-9)
    model.compile(clnet.optimizers.SGD(0.5), clnet.losses.SparseCategoricalCrossentropy(from_logits=True))
    close(model.evaluate(stored["x"], stored["labels"]), stored["loss"], rtol=1e-6)
    model.fit(stored["x"], stored["labels"], batch_size=len(stored["x"]), epochs=1, verbose=0, shuffle=False)
    for i, w in enumerate(model.get_weights()):
        close(w, stored[f"after{i}"], rtol=1e-6, atol=1e-9)


def test_config_round_trip_and_checkpoint(tmp_path, rng):
    model = token_model(11, 5, 4, 3, seed=4)
    assert model.layers[1].get_config() == {"name": "tokens", "input_dim": 11, "output_dim": 4,
                                            "embeddings_initializer": "uniform", "mask_zero": False}
    assert model.layers[2].get_config() == {"name": "positions", "sequence_length": 7,
                                            "initializer": "glorot_uniform"}
    assert np.abs(model.layers[1].get_weights()[0]).max() <= 0.05  # Keras's "uniform": U(-0.05, 0.05)
    model.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
    ids, y = rng.integers(0, 11, (20, 5)), rng.integers(0, 3, (20, 5))
    model.fit(ids, y, batch_size=8, epochs=2, verbose=0)
    copy = clnet.Model.from_config(model.get_config())
    assert [type(l).__name__ for l in copy.layers] == [type(l).__name__ for l in model.layers]
    model.save(tmp_path / "m.h5")
    loaded = clnet.load_model(tmp_path / "m.h5")
    close(loaded.predict(ids), model.predict(ids), rtol=0, atol=0)
    model.fit(ids, y, batch_size=8, epochs=4, initial_epoch=2, verbose=0)
    loaded.fit(ids, y, batch_size=8, epochs=4, initial_epoch=2, verbose=0)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_bad_ids_raise_before_any_launch(rt, rng):
    model = token_model(10, 4, 3, 2)
    model.compile("sgd", "sparse_categorical_crossentropy")
    ids, y = rng.integers(0, 10, (6, 4)), rng.integers(0, 2, (6, 4))
    model.fit(ids, y, verbose=0)
    for bad, message in ((10, r"got 10 at index \(2, 3\), outside \[0, 10\)"),
                         (-1, r"got -1 at index \(2, 3\), outside \[0, 10\)"),
                         (2.5, r"got 2.5 at index \(2, 3\), not a whole number")):
        x = ids.astype(float)
        x[2, 3] = bad
        before = rt.launches
        for run in (lambda: model.fit(x, y, verbose=0), lambda: model.predict(x), lambda: model.evaluate(x, y)):
            with pytest.raises(ValueError, match=r"Embedding 'tokens' reads x as token ids, integers in \[0, 10\) "
                                                 r"\(its input_dim\); " + message):
                run()
        assert rt.launches == before
    with pytest.raises(ValueError, match=r"validation_data x reads|Embedding 'tokens' reads validation_data x"):
        model.fit(ids, y, validation_data=(ids + 10, y), verbose=0)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"Embedding 'e': input_dim=16777217 is more ids than float32 holds exactly "
                                         r"\(the model carries ids in its float type: integers up to 16777216\); "
                                         r"use floatx='float64'"):
        clnet.Sequential([Input((2,)), Embedding(2**24 + 1, 1, name="e")])
    with pytest.raises(ValueError, match="Embedding: output_dim must be a positive integer, got 0"):
        Embedding(3, 0)
    with pytest.raises(TypeError, match="Embedding: mask_zero must be True or False, got 1"):
        Embedding(3, 2, mask_zero=1)
    with pytest.raises(ValueError, match="PositionEmbedding: sequence_length must be a positive integer"):
        PositionEmbedding(0)
    with pytest.raises(ValueError, match=r"PositionEmbedding 'p' expects inputs of shape \(..., positions, features\) "
                                         r"with at most sequence_length=4 positions, got \(None, 5, 3\)"):
        PositionEmbedding(4, name="p")(Input((5, 3)))


def test_launches_per_training_step(rt, rng):
    """Embedding: 1 forward, 2 backward (count the ids, sum the rows); PositionEmbedding 1 + 1."""
    model = token_model(50, 6, 8, 5)
    model.compile("adam", "sparse_categorical_crossentropy")
    ids, y = rng.integers(0, 50, (64, 6)), rng.integers(0, 5, (64, 6))
    model.fit(ids, y, batch_size=16, epochs=1, verbose=0)
    before = rt.launches
    model.fit(ids, y, batch_size=16, epochs=1, verbose=0)
    # GatherRows; forward: Embedding 1, PositionEmbedding 1, Add 1, Dense 1 (the product; the loss
    # takes its softmax); the loss 1; backward: Dense 4 (delta and bias, weights, the transpose of
    # the Add's output, input gradient), PositionEmbedding 1, Sum 1 (the token embeddings feed two
    # calls), Embedding 2 (count the ids, sum the rows); Adam 1.
    per_step = (rt.launches - before - 1) / 4  # + the epoch-end ReduceMetrics
    # The GPU form's weight gradient makes delta and dL/db, and reads x, not x^T: 2 launches fewer.
    dense = 2 if model.layers[-1].tiled else 4
    assert per_step == 1 + (1 + 1 + 1 + 1) + 1 + (dense + 1 + 1 + 2) + 1
