"""Keras's masks: Embedding(mask_zero=True) and Masking make them, the layers that work a step at
a time pass them on, the recurrent layers (and Bidirectional), GlobalAveragePooling1D and the
losses read them. Against numpy (Keras's rules, tests/reference.py) in float32 at awkward sizes,
float64 central differences, Keras 3's own numbers (data/keras_archives), padding that changes
nothing; the warnings and errors of masks a layer does not take."""
import warnings
from pathlib import Path

import numpy as np
import pytest

import clnet
from clnet import layers
from clnet.layers import GRU, LSTM, SimpleRNN
from reference import device, layer_alone, multi_head_attention, recurrent
from test_gradients import check_model
from test_recurrent import FORMS, _with_initial_state, compare_with_numpy

KINDS = {"SimpleRNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU}
# (rows, 6 steps): padded at the end, at the start, in gaps, throughout, nowhere.
MASK = np.array([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [1, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
ARCHIVES = Path(__file__).parent / "data"


def ids_for(mask, rng, vocabulary=9):
    """Token ids whose zeros are `mask`'s padding."""
    return np.where(mask, rng.integers(1, vocabulary, mask.shape), 0)


# -- the recurrent layers ----------------------------------------------------------------------
@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("sequences,backwards", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("initial_state", [False, True])
@pytest.mark.parametrize("return_state", [False, True])
def test_recurrent_layers_read_the_mask_as_keras(rt, kind, sequences, backwards, initial_state, return_state, whole):
    """A padded step keeps the states and outputs the step before's output (zeros before the first
    step that holds data, though the state there is the initial one): output, final states and
    every gradient (the input's, the initial states', the weights') against numpy and its central
    differences, for rows padded at the end, at the start, in gaps, throughout and nowhere;
    float32, 5 units over 6 steps."""
    layer = KINDS[kind](5, return_sequences=sequences, go_backwards=backwards, return_state=return_state,
                        whole_sequence=whole)
    rows, steps = MASK.shape
    if initial_state and return_state and not sequences:  # (the last output and the state differ: refused)
        x = layers.Embedding(5, 3, mask_zero=True)(layers.Input((steps,)))
        with pytest.raises(ValueError, match="called with a mask and initial states"):
            layer(x, initial_state=[layers.Input((5,)) for _ in range(layer.state_count)])
        return
    if initial_state:
        layer = _with_initial_state(layer, steps, 3, rows, np.float32)
    else:
        layer = layer_alone(layer, (steps, 3), rows, np.float32)
    compare_with_numpy(layer, kind, steps, rows, mask=MASK)


def masked_model(kind, sequences, backwards, whole, initial_state=False, steps=6):
    """x (steps, 3) plus an Embedding(mask_zero=True) of ids (steps,), whose mask the sum carries,
    into the recurrent layer; then a softmax per step (the loss reads the mask) or of the last
    output. With initial_state, an Input gives the states (LSTM: h and c alike)."""
    x, ids = layers.Input((steps, 3), name="x"), layers.Input((steps,), name="ids")
    summed = layers.Add()([x, layers.Embedding(5, 3, mask_zero=True)(ids)])
    layer = KINDS[kind](3, return_sequences=sequences, go_backwards=backwards, whole_sequence=whole)
    inputs = [x, ids]
    if initial_state:
        h = layers.Input((3,), name="h")
        inputs.append(h)
        summed = layer(summed, initial_state=[h] * layer.state_count)
    else:
        summed = layer(summed)
    return clnet.Model(inputs, layers.Dense(2, "softmax")(summed), floatx="float64", seed=4)


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("sequences,backwards", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("initial_state", [False, True])
def test_masked_gradients_through_time(fp64, kind, sequences, backwards, initial_state, whole):
    """Float64 central differences (check_model) of every weight and of x (and the initial state)
    through masked time steps; with return_sequences the loss reads the mask too."""
    rng = np.random.default_rng(7)
    model = masked_model(kind, sequences, backwards, whole, initial_state)
    model.loss_name = "sparse_categorical_crossentropy"
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    rows, steps = MASK.shape
    inputs = [rng.normal(size=(rows, steps, 3)), ids_for(MASK, rng, 5)]
    if initial_state:
        inputs.append(rng.normal(size=(rows, 3)))
    y = rng.integers(0, 2, (rows, steps) if sequences else rows)
    check_model(model, inputs, y, rng, ids=(1,))


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("bidirectional", [False, True])
def test_padding_changes_nothing(rt, kind, bidirectional):
    """The same sentences padded at the end, padded further, and padded at the start (Keras's
    pad_sequences default): the same predictions, the same loss, the same weights after a training
    step. A model of Inputs of length None, made again on each length with the same layers."""
    rng = np.random.default_rng(3)
    lengths = [5, 2, 7, 1]
    sentences = [rng.integers(1, 20, n) for n in lengths]

    def padded(width, at_start=False):
        out = np.zeros((len(sentences), width), int)
        for row, s in enumerate(sentences):
            if at_start:
                out[row, width - len(s):] = s
            else:
                out[row, :len(s)] = s
        return out

    ids = layers.Input((None,))
    h = layers.Embedding(20, 4, mask_zero=True)(ids)
    recurrent_layer = KINDS[kind](6, return_sequences=bidirectional)
    h = layers.Bidirectional(recurrent_layer)(h) if bidirectional else recurrent_layer(h)
    if bidirectional:
        h = layers.GlobalAveragePooling1D()(h)
    model = clnet.Model(ids, layers.Dense(3, "softmax")(h), seed=2, floatx="float64")
    model.compile(clnet.optimizers.SGD(0.5), "sparse_categorical_crossentropy", ["accuracy"])
    y = np.array([0, 1, 2, 1])
    model.build((7,))
    start = model.get_weights()
    results = []
    for x in (padded(7), padded(11), padded(9, at_start=True)):
        model.set_weights(start)
        predictions = model.predict(x, verbose=0)
        loss = model.evaluate(x, y, verbose=0)
        model.fit(x, y, epochs=1, batch_size=4, verbose=0, shuffle=False)
        results.append((predictions, loss, model.get_weights()))
    for predictions, loss, weights in results[1:]:
        np.testing.assert_allclose(predictions, results[0][0], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(loss, results[0][1], rtol=1e-12)
        for got, want in zip(weights, results[0][2]):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# -- Bidirectional ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul"])
@pytest.mark.parametrize("sequences", [False, True])
def test_bidirectional_reads_the_mask_as_keras(rt, kind, merge_mode, sequences):
    """Both layers read the mask (the backward one reversed); where they return sequences the merge
    is zeros at the padded steps, as Keras's zero_output_for_mask; against numpy, float32."""
    rng = np.random.default_rng(11)
    rows, steps = MASK.shape
    ids = layers.Input((steps,))
    inner = KINDS[kind](4, return_sequences=sequences)
    out = layers.Bidirectional(inner, merge_mode=merge_mode)(layers.Embedding(9, 3, mask_zero=True)(ids))
    model = clnet.Model(ids, out, seed=1)
    x = ids_for(MASK, rng)
    table, *weights = model.get_weights()
    half = len(weights) // 2
    emb = table[x].astype(np.float64)
    forward = recurrent(kind, emb, *weights[:half], return_sequences=sequences, mask=MASK)
    backward = recurrent(kind, emb, *weights[half:], return_sequences=sequences, go_backwards=True, mask=MASK)
    if sequences:
        backward = backward[:, ::-1] * MASK[..., None]
        forward = forward * MASK[..., None]
    want = {"concat": lambda a, b: np.concatenate([a, b], -1), "sum": np.add, "mul": np.multiply}[merge_mode](
        forward, backward)
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6)
    assert (out._keras_mask is not None) == sequences


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_bidirectional_masked_gradients(fp64, kind):
    """Float64 central differences through a masked Bidirectional returning sequences into
    GlobalAveragePooling1D, which reads the mask too."""
    rng = np.random.default_rng(2)
    rows, steps = MASK.shape
    x, ids = layers.Input((steps, 3)), layers.Input((steps,))
    summed = layers.Add()([x, layers.Embedding(5, 3, mask_zero=True)(ids)])
    h = layers.Bidirectional(KINDS[kind](3, return_sequences=True))(summed)
    model = clnet.Model([x, ids], layers.Dense(2, "softmax")(layers.GlobalAveragePooling1D()(h)), floatx="float64",
                        seed=3)
    model.loss_name = "sparse_categorical_crossentropy"
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    mask = MASK[[0, 1, 2, 4]]  # (a row padded throughout averages nothing: 0/0, as Keras's)
    check_model(model, [rng.normal(size=(4, steps, 3)), ids_for(mask, rng, 5)], rng.integers(0, 2, 4), rng, ids=(1,))


def test_bidirectional_without_merge_refuses_a_mask(rt):
    with pytest.raises(ValueError, match="merge_mode=None"):
        layers.Bidirectional(LSTM(2, return_sequences=True), merge_mode=None)(
            layers.Embedding(5, 3, mask_zero=True)(layers.Input((4,))))


# -- the layers that make masks -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_mask_zero(rt, dtype):
    """The mask is 1 where an id is not 0, made in the forward launch; the config keeps mask_zero."""
    rng = np.random.default_rng(0)
    layer = layers.Embedding(9, 5, mask_zero=True)
    ids = layers.Input((3, 7))
    out = layer(ids)
    assert out._keras_mask.shape == (None, 3, 7)
    layer = layer_alone(layer, (3, 7), 4, dtype)
    x = rng.integers(0, 9, (4, 3, 7))
    x[0, 0] = 0
    layer.forward(device(x, dtype), 4)
    np.testing.assert_array_equal(layer.output_mask.numpy()[:4], x != 0)
    assert layers.Embedding.from_config(layer.get_config()).mask_zero
    with pytest.raises(TypeError, match="mask_zero must be True or False"):
        layers.Embedding(9, 5, mask_zero="yes")


def masking_reference(x, value):
    keep = np.any(x != value, axis=-1)
    return x * keep[..., None], keep


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,value", [((5, 7), 0.0), ((3, 4, 2), -1.5)])
def test_masking_layer(rt, dtype, shape, value):
    """Keras's Masking: a step whose features all equal mask_value is padding (one that holds the
    value in some features only is not); output, mask and input gradient against numpy, which the
    layer's gradient is exactly (dL/dy where a step holds data, else 0)."""
    rng = np.random.default_rng(1)
    rows = 3
    x = rng.normal(size=(rows, *shape))
    x[0, 1] = value
    x[1, -1] = value
    x[2, 0, ..., 0] = value  # some features only: not padding
    layer = layer_alone(layers.Masking(value), shape, rows, dtype)
    y, keep = masking_reference(x.astype(dtype), value)
    np.testing.assert_array_equal(layer.forward(device(x, dtype), rows).numpy(), y)
    np.testing.assert_array_equal(layer.output_mask.numpy(), keep)
    dy = rng.normal(size=x.shape)
    np.testing.assert_array_equal(layer.backward(device(dy, dtype), rows, True).numpy(),
                                  (dy * keep[..., None]).astype(dtype))
    assert layers.Masking.from_config(layer.get_config()).mask_value == value


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_masking_exports_to_onnx(rt, dtype, tmp_path):
    """Masking exports as |x - mask_value| > 0, its maximum over the features, and a product:
    onnxruntime (float64: onnx's reference evaluator) and the model clnet.onnx.load makes of the
    file (ops) predict what the model does, padded steps included. A model whose layers read the
    mask is refused (see test_masked_outputs_refuse_what_cannot_read_the_mask)."""
    onnx = pytest.importorskip("onnx")
    from test_onnx import run_onnx
    rng = np.random.default_rng(2)
    x = layers.Input((4, 3))
    with pytest.warns(UserWarning, match="does not support masking") as caught:  # (Reshape drops the mask, as Keras's)
        model = clnet.Model(x, layers.Dense(2)(layers.Reshape((12,))(layers.Masking(-0.5)(x))), seed=1,
                            floatx=np.dtype(dtype).name)
    assert [w.filename for w in caught if "masking" in str(w.message)] == [__file__]  # (the call's line)
    data = rng.normal(size=(7, 4, 3)).astype(dtype)
    data[0, 1] = data[2, 3] = -0.5
    data[3, 0, 0] = -0.5  # (one feature only: a step that holds data)
    want = model.predict(data, verbose=0)
    model.export(tmp_path / "masking.onnx")
    onnx.checker.check_model(onnx.load(tmp_path / "masking.onnx"), full_check=True)
    np.testing.assert_allclose(run_onnx(tmp_path / "masking.onnx", data), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(clnet.onnx.load(tmp_path / "masking.onnx").predict(data, verbose=0), want)


def test_masking_layer_feeds_a_recurrent_layer(rt):
    """Masking then an LSTM: what the LSTM computes over the rows that Masking padded, as numpy."""
    rng = np.random.default_rng(5)
    rows, steps = MASK.shape
    x = rng.normal(size=(rows, steps, 3)) * MASK[..., None]
    inp = layers.Input((steps, 3))
    model = clnet.Model(inp, LSTM(4, return_sequences=True)(layers.Masking()(inp)), seed=2)
    want = recurrent("LSTM", x, *model.get_weights(), return_sequences=True, mask=MASK)
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="mask_value must be a finite number"):
        layers.Masking(float("nan"))


# -- GlobalAveragePooling1D ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_global_average_pooling_1d_reads_the_mask(rt, dtype):
    """The mean over the steps that hold data (Keras's), and its gradient spread over them; y^T too,
    where a Dense reads it."""
    rng = np.random.default_rng(4)
    mask = MASK[[0, 1, 2, 4]]
    rows, steps = mask.shape
    x = rng.normal(size=(rows, steps, 5))
    layer = layer_alone(layers.GlobalAveragePooling1D(), (steps, 5), rows, dtype)
    got = layer.forward(device(x, dtype), rows, mask=device(mask, dtype)).numpy()
    count = mask.sum(1, keepdims=True)
    np.testing.assert_allclose(got, (x * mask[..., None]).sum(1) / count, rtol=1e-6)
    dy = rng.normal(size=(rows, 5))
    dx = layer.backward(device(dy, dtype), rows, True).numpy()
    np.testing.assert_allclose(dx, dy[:, None] * mask[..., None] / count[..., None], rtol=1e-6)
    ids, x_in = layers.Input((steps,)), layers.Input((steps, 5))
    pooled = layers.GlobalAveragePooling1D()(layers.Add()([x_in, layers.Embedding(9, 5, mask_zero=True)(ids)]))
    assert pooled._keras_mask is None
    model = clnet.Model([x_in, ids], layers.Dense(3)(pooled), floatx=np.dtype(dtype).name, seed=0)
    table, kernel, bias = model.get_weights()
    model.set_weights([np.zeros_like(table), kernel, bias])
    np.testing.assert_allclose(model.predict([x, ids_for(mask, rng)], verbose=0),
                               (x * mask[..., None]).sum(1) / count @ kernel + bias, rtol=1e-5, atol=1e-6)


def test_the_merges_of_ops_combine_every_input_s_mask(rt):
    """Subtract, Average, Maximum, Minimum (traced into ops) as Keras's merges: the output's mask
    is the AND of the inputs' masks, whichever input carries one."""
    steps = MASK.shape[1]
    ids, other, x_in = layers.Input((steps,)), layers.Input((steps,)), layers.Input((steps, 4))
    first, second = layers.Embedding(9, 4, mask_zero=True)(ids), layers.Embedding(9, 4, mask_zero=True)(other)
    assert layers.Subtract()([x_in, first])._keras_mask is first._keras_mask
    assert layers.Maximum()([first, x_in])._keras_mask is first._keras_mask
    both = layers.Average()([first, second])
    model = clnet.Model([ids, other], both._keras_mask)
    rng = np.random.default_rng(2)
    a, b = ids_for(MASK, rng), ids_for(MASK[::-1], rng)
    np.testing.assert_array_equal(model.predict([a, b], verbose=0), MASK * MASK[::-1])


class HeldError(clnet.metrics.Metric):
    """A metric of one's own: given the mask as its sample_weight (rows, steps), as Keras's."""

    def __init__(self, name="held_error"):
        super().__init__(name=name)
        self.total, self.seen = self.add_variable(name="total"), self.add_variable(name="seen")

    def update_state(self, y_true, y_pred, sample_weight=None):
        weight = np.ones(y_true.shape[:-1]) if sample_weight is None else sample_weight
        self.total.assign_add(np.sum(weight[..., None] * np.abs(y_true - y_pred)))
        self.seen.assign_add(np.sum(weight) * y_true.shape[-1])

    def result(self):
        return self.total / self.seen


@pytest.mark.parametrize("weighted", [False, True])
def test_the_metrics_of_a_masked_output_count_its_held_positions(rt, weighted):
    """Keras's: a mask weighs each position of every metric as a sample weight does. Behind
    Masking, each metric (a mean, counts, AUC, one of the user's) over padded sequences is the
    same metric over the held positions alone, each a sample of its own; as weighted_metrics of
    a weighted evaluation, each position counts its sample's weight too."""
    rng = np.random.default_rng(5)
    rows, steps, cols = *MASK.shape, 3
    p = (rng.random((rows, steps, cols)) + 0.01) * MASK[..., None]  # padded steps all 0: Masking(0) marks them
    t = (rng.random((rows, steps, cols)) < 0.5).astype(np.float64)
    w = rng.random(rows) + 0.5
    chosen = lambda: ["mae", clnet.metrics.AUC(name="auc"), clnet.metrics.Precision(name="precision"),
                      clnet.metrics.BinaryAccuracy(name="hits"), HeldError()]
    given = (lambda: {"weighted_metrics": chosen()}) if weighted else (lambda: {"metrics": chosen()})
    weights = {"sample_weight": w} if weighted else {}
    x = layers.Input((steps, cols))
    masked = clnet.Model(x, layers.Activation("linear")(layers.Masking(0.0)(x)))
    masked.compile("sgd", "mse", **given())
    got = masked.evaluate(p, t, batch_size=2, return_dict=True, **weights)
    held = MASK.astype(bool)
    alone = clnet.Sequential([layers.Input((cols,)), layers.Activation("linear")])
    alone.compile("sgd", "mse", **given())
    per_position = {"sample_weight": np.repeat(w, MASK.sum(1))} if weighted else {}
    want = alone.evaluate(p[held], t[held], batch_size=7, return_dict=True, **per_position)
    for name in ("mae", "auc", "precision", "hits", "held_error"):
        assert got[name] == pytest.approx(want[name], rel=1e-5), name


# -- MultiHeadAttention --------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked_key", ["value", "query"])
def test_attention_reads_the_masks(rt, causal, masked_key):
    """Keras's _compute_attention_mask: a query step that holds data attends the key steps that do
    (and the causal mask with it), a padded query step nothing it may (-1e9 everywhere: a uniform
    average, as Keras's); the query and value sequences masked apart (cross-attention: the one
    not named carries no mask); the output carries the query's mask. Against numpy, float32."""
    rng = np.random.default_rng(13)
    rows, steps = MASK.shape
    q_in, v_in = layers.Input((steps,)), layers.Input((steps,))
    embed = layers.Embedding(9, 4, mask_zero=True)
    plain = layers.Embedding(9, 4)
    query, value = (embed(q_in), plain(v_in)) if masked_key == "query" else (plain(q_in), embed(v_in))
    attention = layers.MultiHeadAttention(2, 3)
    out = attention(query, value, use_causal_mask=causal)
    assert out._keras_mask is (query._keras_mask if masked_key == "query" else None)
    model = clnet.Model([q_in, v_in], out, seed=3)
    q_ids, v_ids = ids_for(MASK, rng), ids_for(MASK[::-1], rng)
    query_table, value_table, *weights = model.get_weights()  # (the query's Embedding was called first)
    xq, xv = query_table[q_ids].astype(np.float64), value_table[v_ids].astype(np.float64)
    held = MASK if masked_key == "query" else MASK[::-1]
    mask = held[:, :, None] * np.ones(steps) if masked_key == "query" else np.ones(steps)[:, None] * held[:, None]
    want, _ = multi_head_attention(xq, xv, xv, weights, 2, mask=mask, causal=causal)
    np.testing.assert_allclose(model.predict([q_ids, v_ids], verbose=0), want, rtol=1e-5, atol=1e-6)


def test_attention_over_padding_masks_saves_and_reloads(rt, tmp_path):
    """A MultiHeadAttention that reads its inputs' padding masks (no attention_mask of the
    user's) saves its graph without the ops that made the attention mask (Keras's config: the
    layer makes it again from the masks), and reloads from .h5 and .keras predicting the same."""
    rng = np.random.default_rng(15)
    rows, steps = MASK.shape
    ids = layers.Input((steps,))
    h = layers.Embedding(9, 4, mask_zero=True)(ids)
    h = layers.MultiHeadAttention(2, 3)(h, h, use_causal_mask=True)
    model = clnet.Model(ids, layers.Dense(2)(layers.GlobalAveragePooling1D()(h)), seed=4)
    model.compile("adam", "mse")
    data = ids_for(MASK, rng)
    want = model.predict(data, verbose=0)
    config = model.get_config()
    assert [layer["class_name"] for layer in config["layers"]] == [
        "Input", "Embedding", "MultiHeadAttention", "GlobalAveragePooling1D", "Dense"]
    for path in (tmp_path / "m.h5", tmp_path / "m.keras"):
        model.save(path)
        loaded = clnet.load_model(path)
        np.testing.assert_allclose(loaded.predict(data, verbose=0), want, rtol=1e-6, atol=1e-7)


def test_self_attention_mask_and_given_attention_mask(fp64):
    """Self-attention over a masked sequence with an attention_mask input as well: the three
    combined; float64 central differences of a model ending in the loss that reads the mask."""
    rng = np.random.default_rng(14)
    rows, steps = MASK.shape
    x, ids, given = layers.Input((steps, 4)), layers.Input((steps,)), layers.Input((steps, steps))
    h = layers.Add()([x, layers.Embedding(5, 4, mask_zero=True)(ids)])
    h = layers.MultiHeadAttention(2, 2)(h, h, attention_mask=given)
    model = clnet.Model([x, ids, given], layers.Dense(2, "softmax")(h), floatx="float64", seed=5)
    model.loss_name = "sparse_categorical_crossentropy"
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    allowed = (rng.random((rows, steps, steps)) > 0.3).astype(float)
    # (the key's bias shifts every score of a query alike: the softmax does not see it)
    check_model(model, [rng.normal(size=(rows, steps, 4)), ids_for(MASK, rng, 5), allowed],
                rng.integers(0, 2, (rows, steps)), rng, constant=(4,), ids=(1, 2))


# -- losses and accuracy -----------------------------------------------------------------------
def per_step_model(loss_units, activation, floatx="float64"):
    ids = layers.Input((6,))
    out = layers.Dense(loss_units, activation)(layers.Embedding(9, 4, mask_zero=True)(ids))
    return clnet.Model(ids, out, floatx=floatx, seed=6)


def test_loss_and_accuracy_leave_padding_out(rt):
    """A per-step softmax whose output carries the mask: Keras's loss over a batch is the sum over
    its held positions divided by their count (sample weights multiply), the epoch's the batches'
    mean weighted by their sizes; the accuracy is the held positions' share of hits over the epoch.
    The gradient is that loss's (one SGD step against numpy's gradient of it)."""
    rng = np.random.default_rng(8)
    model = per_step_model(3, "softmax")
    x = ids_for(MASK, rng)
    y = rng.integers(0, 3, MASK.shape)
    model.compile(clnet.optimizers.SGD(1.0), "sparse_categorical_crossentropy", ["accuracy"])
    p = model.predict(x, verbose=0)
    nll = -np.log(np.take_along_axis(p, y[..., None], -1)[..., 0])
    hits = p.argmax(-1) == y

    def batch_loss(rows, weights=None):
        w = np.ones(len(rows)) if weights is None else weights[rows]
        held = MASK[rows]
        return (nll[rows] * held * w[:, None]).sum() / held.sum() if held.sum() else 0.0

    loss, accuracy = model.evaluate(x, y, verbose=0, batch_size=5)
    np.testing.assert_allclose(loss, batch_loss(np.arange(5)), rtol=1e-12)
    np.testing.assert_allclose(accuracy, hits[MASK == 1].mean(), rtol=1e-12)
    # Batches of 2, 2 and 1 (the last all padding): Keras's loss tracker weighs each by its size.
    loss, accuracy = model.evaluate(x, y, verbose=0, batch_size=2)
    want = (2 * batch_loss(np.arange(2)) + 2 * batch_loss(np.arange(2, 4)) + batch_loss(np.array([4]))) / 5
    np.testing.assert_allclose(loss, want, rtol=1e-12)
    np.testing.assert_allclose(accuracy, hits[MASK == 1].mean(), rtol=1e-12)
    weights = np.array([0.5, 2.0, 1.0, 3.0, 0.25])
    loss = model.evaluate(x, y, sample_weight=weights, verbose=0, batch_size=5)[0]
    np.testing.assert_allclose(loss, batch_loss(np.arange(5), weights), rtol=1e-12)
    # One SGD step of learning rate 1: the Dense's bias moves by minus the gradient of the loss.
    _, _, bias = model.get_weights()
    model.fit(x, y, batch_size=5, epochs=1, verbose=0, shuffle=False)
    dz = p.copy()
    np.put_along_axis(dz, y[..., None], np.take_along_axis(dz, y[..., None], -1) - 1, -1)
    grad_bias = (dz * MASK[..., None]).sum((0, 1)) / MASK.sum()
    np.testing.assert_allclose(model.get_weights()[2], bias - grad_bias, rtol=1e-10, atol=1e-12)


def test_regression_loss_leaves_padding_out(rt):
    """Mean squared error per step over the held positions only."""
    rng = np.random.default_rng(9)
    model = per_step_model(2, "linear")
    model.compile("sgd", "mse")
    x = ids_for(MASK, rng)
    y = rng.normal(size=(*MASK.shape, 2))
    p = model.predict(x, verbose=0)
    want = (((p - y) ** 2).mean(-1) * MASK).sum() / MASK.sum()
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0, batch_size=5), want, rtol=1e-12)


@FORMS
@pytest.mark.parametrize("loss", ["sparse_categorical_crossentropy", "mse"])
def test_masked_loss_gradients(fp64, loss, whole):
    """Float64 central differences of a masked sequence model's loss: the loss's mask weighs the
    gradient of every position."""
    rng = np.random.default_rng(12)
    model = masked_model("GRU", True, False, whole)
    model.loss_name = loss
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    rows, steps = MASK.shape
    y = rng.integers(0, 2, (rows, steps)) if loss.startswith("sparse") else rng.normal(size=(rows, steps, 2))
    check_model(model, [rng.normal(size=(rows, steps, 3)), ids_for(MASK, rng, 5)], y, rng, ids=(1,))


# -- Keras 3's own numbers ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["masked_sequence", "masked_pooling"])
def test_keras_masked_models(rt, name):
    """Masked models Keras 3.15 trained and saved (tests/make_keras_archive_fixture.py): evaluate's
    loss and accuracy in batches of 4 (the last of one sample), and the weights after a step of
    SGD(1), as Keras's, in float64 (its predictions: test_keras_archive.py)."""
    model = clnet.load_model(ARCHIVES / "keras_archives" / f"{name}.keras", floatx="float64", compile=False)
    data = np.load(ARCHIVES / "keras_archives.npz")
    x, y = data[f"{name}/x0"], data[f"{name}/t0"]
    sequence = name == "masked_sequence"
    model.compile(clnet.optimizers.SGD(1.0), "sparse_categorical_crossentropy" if sequence else "mse",
                  ["accuracy"] if sequence else None)
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=4, verbose=0), data[f"{name}/evaluate"],
                               rtol=2e-5, atol=1e-6)
    model.fit(x, y, batch_size=len(x), epochs=1, verbose=0, shuffle=False)
    for i, got in enumerate(model.get_weights()):
        np.testing.assert_allclose(got, data[f"{name}/sgd{i}"], rtol=1e-4, atol=2e-6)


# -- which layers take a mask, and how ---------------------------------------------------------
def test_layers_pass_on_drop_or_refuse_a_mask(rt):
    """Keras's rules: a layer that works a step at a time passes the mask on; a recurrent layer
    with return_sequences too, without it (and its states) not; one that does not support masking
    warns as Keras's and drops it; one whose Keras counterpart reads it and clnet's cannot
    refuses, naming the layer; inputs of two different masks are refused."""
    ids = layers.Input((6,))
    h = layers.Embedding(9, 4, mask_zero=True)(ids)
    mask = h._keras_mask
    for layer in (layers.Dense(3), layers.Dropout(0.5), layers.Activation("relu"), layers.LayerNormalization(),
                  layers.ReLU(), layers.GaussianNoise(0.1), layers.Softmax()):
        assert layer(h)._keras_mask is mask, layer
    assert layers.Add()([h, layers.Dense(4)(h)])._keras_mask is mask
    sequence, state = GRU(4, return_sequences=True, return_state=True)(h)
    assert sequence._keras_mask is mask and state._keras_mask is None
    assert LSTM(4)(h)._keras_mask is None
    for layer in (layers.Flatten(), layers.Conv1D(2, 3), layers.GlobalMaxPooling1D()):
        with pytest.warns(UserWarning, match=f"Layer '{layer.name}' .* does not support masking"):
            assert layer(h)._keras_mask is None
    with pytest.raises(ValueError, match="BatchNormalization 'norm' was given an input with a mask"):
        layers.BatchNormalization(name="norm")(h)
    assert layers.MultiHeadAttention(2, 2)(h, h)._keras_mask is mask  # (the query's)
    other = layers.Embedding(9, 4, mask_zero=True)(ids)
    both = layers.Add()([h, other])._keras_mask  # Keras's merge: held where both are
    assert both is not None and both is not mask and both.shape == (None, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ops carry no mask, silently, as Keras's
        assert clnet.ops.multiply(h, 2.0)._keras_mask is None


def test_an_explicit_mask_argument(rt):
    """`layer(x, mask=m)` with m a (batch, steps) tensor of 1 and 0 (here an Input) reads m; a mask
    of the wrong shape, or not a tensor, is refused."""
    rng = np.random.default_rng(6)
    rows, steps = MASK.shape
    x, m = layers.Input((steps, 3)), layers.Input((steps,))
    model = clnet.Model([x, m], GRU(4, return_sequences=True)(x, mask=m), seed=1)
    data = rng.normal(size=(rows, steps, 3))
    want = recurrent("GRU", data, *model.get_weights(), return_sequences=True, mask=MASK)
    np.testing.assert_allclose(model.predict([data, MASK], verbose=0), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"a mask of shape \(None, 5\) for an input of shape \(None, 6, 3\)"):
        GRU(4)(x, mask=layers.Input((5,)))
    with pytest.raises(TypeError, match="a mask is a symbolic tensor"):
        GRU(4)(x, mask=np.ones((rows, steps)))


def test_onnx_export_refuses_layers_that_read_a_mask(rt, tmp_path):
    """ONNX export does not carry masks: where a layer reads one it raises (where none does, the
    file computes what predict does)."""
    ids = layers.Input((6,))
    reader = clnet.Model(ids, LSTM(2)(layers.Embedding(9, 4, mask_zero=True)(ids)))
    with pytest.raises(ValueError, match=r"layers that read a mask .*: LSTM 'lstm.*'; clnet does not export masks"):
        clnet.onnx.export(reader, tmp_path / "m.onnx")


def test_masked_model_saves_and_reloads(rt, tmp_path):
    """A model with Embedding(mask_zero=True), Masking and a masked LSTM: .h5 and .keras round
    trips give the same predictions."""
    rng = np.random.default_rng(2)
    ids, x = layers.Input((6,)), layers.Input((6, 4))
    h = layers.Concatenate()([layers.Embedding(9, 4, mask_zero=True)(ids), layers.Masking()(x)])
    model = clnet.Model([ids, x], layers.Dense(2)(LSTM(3)(h)), seed=3)
    model.compile("adam", "mse")
    other = MASK[[4, 0, 1, 2, 3]]
    data = [ids_for(MASK, rng), rng.normal(size=(5, 6, 4)) * other[..., None]]
    want = model.predict(data, verbose=0)
    table, *lstm, kernel, bias = model.get_weights()  # the Concatenate's mask: where both hold data
    features = np.concatenate([table[data[0]], data[1]], -1).astype(np.float64)
    np.testing.assert_allclose(want, recurrent("LSTM", features, *lstm, mask=MASK * other) @ kernel + bias,
                               rtol=1e-5, atol=1e-6)
    for name in ("m.h5", "m.keras"):
        model.save(tmp_path / name)
        np.testing.assert_allclose(clnet.load_model(tmp_path / name).predict(data, verbose=0), want, rtol=1e-6)
