"""MultiHeadAttention: forward against a numpy transcription of Keras (float32, awkward sizes,
masks, dropout), float64 central-difference gradients (self- and cross-attention, causal and
explicit masks, sequence lengths 1, 2 and 7, a residual graph), masked positions changing
nothing, launches per step, Keras's weight layout (a fixture written by real Keras), config,
save/load and bad arguments."""
import gc
from pathlib import Path

import numpy as np
import pytest

import clnet
from clnet.layers import Add, Dense, Flatten, Input, LayerNormalization, MultiHeadAttention
from clnet.layers import multi_head_attention as attention
from reference import dropout_keep, multi_head_attention
from test_gradients import check_model

FIXTURE = Path(__file__).parent / "fixtures" / "keras_attention.npz"


def attention_model(tq, tk, query_dim, value_dim, mha, floatx="float32", masked=False, causal=False,
                    self_attention=False, seed=1):
    """Input(s) -> mha -> output: self-attention reads one input; cross-attention a query and a
    value input (and a mask input when `masked`)."""
    query = Input((tq, query_dim), name="query")
    if self_attention:
        return clnet.Model(query, mha(query, query, use_causal_mask=causal), floatx=floatx, seed=seed)
    value = Input((tk, value_dim), name="value")
    inputs = [query, value]
    mask = None
    if masked:
        mask = Input((tq, tk), name="mask")
        inputs.append(mask)
    return clnet.Model(inputs, mha(query, value, attention_mask=mask, use_causal_mask=causal), floatx=floatx,
                       seed=seed)


# The key's bias adds one number to a row's scores, which the softmax ignores (Keras keeps it);
# over one key the softmax is 1: the query and key weights do not matter either.
KEY_BIAS, ONE_KEY = (3,), (0, 1, 2, 3)


def random_mask(rng, rows, tq, tk):
    mask = rng.random((rows, tq, tk)) < 0.6
    mask[:, :, 0] = True  # every row attends somewhere (a row masked entirely is tested apart)
    mask[0, :, :2] = True  # and some to two keys, so that the query and key weights matter
    return mask.astype(float)


def randomized(model, rng, scale=0.5):
    weights = [rng.normal(0, scale, w.shape) for w in model.get_weights()]
    model.set_weights(weights)
    return [w.astype(model.dtype) for w in weights]


# (2, 16, 9, 17, 13, 2): three blocks of eight query rows, the last one row, in the CPU form
# (its lanes), key rows of two whole TYPE8s and value rows of one and a lane.
@pytest.mark.parametrize("heads,key_dim,value_dim,tq,tk,rows", [(1, 5, None, 3, 5, 1), (3, 5, 2, 4, 7, 5),
                                                                (3, 1, 4, 7, 1, 3), (2, 8, 8, 9, 9, 2),
                                                                (2, 16, 9, 17, 13, 2)])
@pytest.mark.parametrize("masking", ["none", "causal", "mask", "both"])
def test_forward_matches_numpy_float32(rt, heads, key_dim, value_dim, tq, tk, rows, masking):
    forward_matches_numpy(heads, key_dim, value_dim, tq, tk, rows, masking)


def forward_matches_numpy(heads, key_dim, value_dim, tq, tk, rows, masking, tiles=None):
    rng = np.random.default_rng(heads * 100 + tq * 10 + tk)
    masked, causal = masking in ("mask", "both"), masking in ("causal", "both")
    mha = MultiHeadAttention(heads, key_dim, value_dim=value_dim, output_shape=None if tq % 2 else 3, tiles=tiles)
    model = attention_model(tq, tk, 6, 5, mha, masked=masked, causal=causal)
    assert tiles is None or mha.tiles == tiles
    weights = randomized(model, rng)
    xq, xv = rng.normal(size=(rows, tq, 6)), rng.normal(size=(rows, tk, 5))
    xs = [xq, xv] + ([random_mask(rng, rows, tq, tk)] if masked else [])
    f32 = lambda a: np.asarray(a, np.float32)
    want, _ = multi_head_attention(f32(xq), f32(xv), f32(xv), weights, heads, mask=xs[2] if masked else None,
                                   causal=causal)
    got = model.predict(xs)
    assert got.shape == (rows, tq, 3 if tq % 2 == 0 else 6)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("causal", [False, True])
def test_a_row_masked_entirely_is_uniform_as_in_keras(rt, causal):
    """Keras replaces masked scores by -1e9, so a row with nothing to attend to averages all
    values, those of future positions too under the causal mask."""
    rng = np.random.default_rng(2)
    model = attention_model(2, 3, 4, 4, MultiHeadAttention(2, 3), masked=True, causal=causal)
    weights = randomized(model, rng)
    xq, xv = rng.normal(size=(2, 2, 4)), rng.normal(size=(2, 3, 4))
    mask = np.ones((2, 2, 3))
    mask[1, 0] = 0
    want, probabilities = multi_head_attention(xq.astype(np.float32), xv.astype(np.float32), xv.astype(np.float32),
                                               weights, 2, mask=mask, causal=causal)
    np.testing.assert_allclose(probabilities[1, :, 0], 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(model.predict([xq, xv, mask]), want, rtol=2e-5, atol=2e-5)
    model.loss_name = "mse"
    x64 = clnet.Model.from_config(model.get_config(), floatx="float64")
    x64.set_weights(model.get_weights())
    x64.loss_name = "mse"
    check_model(x64, [xq, xv, mask], rng.normal(size=(2, 2, 4)), rng, constant=KEY_BIAS)


def test_masked_positions_change_nothing(rt):
    """Values and keys at a masked position, and future positions under the causal mask, do not
    reach the output: changing them leaves it identical, bit for bit."""
    rng = np.random.default_rng(4)
    model = attention_model(3, 5, 4, 6, MultiHeadAttention(3, 5, value_dim=2), masked=True)
    randomized(model, rng)
    xq, xv, mask = rng.normal(size=(4, 3, 4)), rng.normal(size=(4, 5, 6)), np.ones((4, 3, 5))
    mask[:, :, 3] = 0                       # key position 3 masked for every query
    before = model.predict([xq, xv, mask])
    xv[:, 3] = rng.normal(size=(4, 6)) * 100
    np.testing.assert_array_equal(model.predict([xq, xv, mask]), before)

    causal = attention_model(6, 6, 4, 4, MultiHeadAttention(2, 3), causal=True, self_attention=True)
    randomized(causal, rng)
    x = rng.normal(size=(3, 6, 4))
    before = causal.predict(x)
    x[:, 4:] = rng.normal(size=(3, 2, 4)) * 100  # the last two positions
    after = causal.predict(x)
    np.testing.assert_array_equal(after[:, :4], before[:, :4])
    assert not np.allclose(after[:, 4:], before[:, 4:])


@pytest.mark.parametrize("length", [1, 2, 7, 11])  # 11: a row's exp runs eight keys at once, then the rest
@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_gradients(fp64, length, causal):
    rng = np.random.default_rng(length + 10 * causal)
    model = attention_model(length, length, 4, 4, MultiHeadAttention(2, 3, value_dim=2), floatx="float64",
                            causal=causal, self_attention=True)
    randomized(model, rng)
    model.loss_name = "mse"
    check_model(model, rng.normal(size=(3, length, 4)), rng.normal(size=(3, length, 4)), rng,
                constant=ONE_KEY if length == 1 else KEY_BIAS)


@pytest.mark.parametrize("tq,tk", [(1, 2), (2, 7), (7, 1), (9, 10)])  # (9, 10): two blocks of queries, three of keys
@pytest.mark.parametrize("masking", ["none", "causal", "mask"])
def test_cross_attention_gradients(fp64, tq, tk, masking):
    rng = np.random.default_rng(tq * 10 + tk)
    model = attention_model(tq, tk, 3, 4, MultiHeadAttention(3, 2, value_dim=3, output_shape=2), floatx="float64",
                            masked=masking == "mask", causal=masking == "causal")
    randomized(model, rng)
    model.loss_name = "mse"
    xs = [rng.normal(size=(2, tq, 3)), rng.normal(size=(2, tk, 4))]
    if masking == "mask":
        xs.append(random_mask(rng, 2, tq, tk))
    one_key = tk == 1 or (tq == 1 and masking == "causal")  # the first query sees the first key alone
    check_model(model, xs, rng.normal(size=(2, tq, 2)), rng, constant=ONE_KEY if one_key else KEY_BIAS)


def test_key_apart_from_value_and_no_bias_gradients(fp64):
    rng = np.random.default_rng(3)
    query, value, key = Input((3, 2), name="q"), Input((4, 3), name="v"), Input((4, 5), name="k")
    mha = MultiHeadAttention(2, 3, use_bias=False)
    model = clnet.Model([query, value, key], mha(query, value, key=key), floatx="float64", seed=2)
    assert [w.shape for w in model.get_weights()] == [(2, 2, 3), (5, 2, 3), (3, 2, 3), (2, 3, 2)]
    randomized(model, rng)
    model.loss_name = "mse"
    check_model(model, [rng.normal(size=(2, 3, 2)), rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 4, 5))],
                rng.normal(size=(2, 3, 2)), rng)


def residual_block(length, floatx="float64", dropout=0.0, seed=3, tiles=None):
    """x + mha(LayerNorm(x), causal) -> Flatten -> Dense(3, softmax): the GPT block's shape."""
    x = Input((length, 4), name="x")
    h = LayerNormalization(name="norm")(x)
    mha = MultiHeadAttention(2, 4 if tiles else 3, dropout=dropout, seed=5, name="mha", tiles=tiles)
    h = Add(name="residual")([x, mha(h, h, use_causal_mask=True)])
    return clnet.Model(x, Dense(3, "softmax", name="head")(Flatten()(h)), floatx=floatx, seed=seed)


@pytest.mark.parametrize("length", [1, 2, 7])
def test_residual_graph_gradients(fp64, length):
    rng = np.random.default_rng(length)
    model = residual_block(length)
    randomized(model, rng)
    model.loss_name = "categorical_crossentropy"
    # The norm's gamma and beta come first: the attention's query and key weights are 2..5.
    check_model(model, rng.normal(size=(3, length, 4)), rng.integers(0, 3, 3), rng,
                constant=tuple(i + 2 for i in (ONE_KEY if length == 1 else KEY_BIAS)))


def test_dropout_gradients_with_the_steps_mask(fp64):
    rng = np.random.default_rng(8)
    model = residual_block(5, dropout=0.4)
    randomized(model, rng)
    model.loss_name = "categorical_crossentropy"
    check_model(model, rng.normal(size=(3, 5, 4)), rng.integers(0, 3, 3), rng, training=True,
                constant=tuple(i + 2 for i in KEY_BIAS))


@pytest.mark.parametrize("tq,tk", [(4, 5), (10, 9)])
def test_dropout_in_fit_only_and_reproducible(rt, tq, tk):
    """In training the probabilities are dropped by dropout.cl's hash of (seed, step, index),
    as the Dropout layer's; predict does not drop."""
    rng = np.random.default_rng(6)
    mha = MultiHeadAttention(3, 2, dropout=0.3, seed=11)
    model = attention_model(tq, tk, 3, 2, mha)
    weights = randomized(model, rng)
    xq, xv = rng.normal(size=(2, tq, 3)).astype(np.float32), rng.normal(size=(2, tk, 2)).astype(np.float32)
    y = rng.normal(size=(2, tq, 3))
    model.compile("sgd", "mse")
    for step in (0, 3):
        model.optimizer.iterations = step  # the step seeds the masks, as after `step` updates
        loss = model.compute_gradients([xq, xv], y)[0]
        keep = dropout_keep(np.arange(2 * 3 * tq * tk).reshape(2, 3, tq, tk), 11, step, 0.3, np.float32)
        want, _ = multi_head_attention(xq, xv, xv, weights, 3, keep=keep, rate=0.3)
        np.testing.assert_allclose(loss, np.mean((want - y) ** 2), rtol=1e-5)
    inferred, _ = multi_head_attention(xq, xv, xv, weights, 3)
    np.testing.assert_allclose(model.predict([xq, xv]), inferred, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("masking", ["causal", "both"])
def test_the_other_form_on_this_device(rt, fp64, monkeypatch, masking):
    """The form this device does not choose (on a CPU the GPU form's row per work-item, on a GPU
    the CPU form's lanes) against numpy, and its gradients."""
    monkeypatch.setattr(attention, "lanes_form", lambda rt: rt.info.is_gpu)
    rng = np.random.default_rng(12)
    model = attention_model(10, 9, 6, 5, MultiHeadAttention(2, 5, value_dim=3), masked=masking == "both",
                            causal=True)
    weights = randomized(model, rng)
    assert model.layers[-1].lanes == rt.info.is_gpu
    xq, xv = rng.normal(size=(2, 10, 6)), rng.normal(size=(2, 9, 5))
    xs = [xq, xv] + ([random_mask(rng, 2, 10, 9)] if masking == "both" else [])
    f32 = lambda a: np.asarray(a, np.float32)
    want, _ = multi_head_attention(f32(xq), f32(xv), f32(xv), weights, 2, mask=xs[2] if len(xs) > 2 else None,
                                   causal=True)
    got = model.predict(xs)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    x64 = clnet.Model.from_config(model.get_config(), floatx="float64")
    x64.set_weights(model.get_weights())
    x64.loss_name = "mse"
    check_model(x64, xs, rng.normal(size=(2, 10, 6)), rng, constant=KEY_BIAS)


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("masking", ["causal", "both"])
def test_lanes_of_each_width(rt, fp64, monkeypatch, lanes, masking):
    """The CPU form at each lane width (multi_head_attention.lane_width), on any device: 17 queries
    (whole blocks of 8 or 16, then one row), 13 keys, query rows of 16 (one vector of 16 lanes or
    two of 8) and value rows of 9, against numpy in float32, and its float64 gradients."""
    monkeypatch.setattr(attention, "lanes_form", lambda rt: True)
    monkeypatch.setattr(attention, "lane_width", lambda vector_width: lanes)
    rng = np.random.default_rng(lanes)
    model = attention_model(17, 13, 6, 5, MultiHeadAttention(2, 16, value_dim=9, tiles=False),
                            masked=masking == "both", causal=True)
    weights = randomized(model, rng, scale=0.3)
    mha = model.layers[-1]
    assert mha.lanes and mha.lane_width == lanes
    xq, xv = rng.normal(size=(2, 17, 6)), rng.normal(size=(2, 13, 5))
    xs = [xq, xv] + ([random_mask(rng, 2, 17, 13)] if masking == "both" else [])
    f32 = lambda a: np.asarray(a, np.float32)
    want, _ = multi_head_attention(f32(xq), f32(xv), f32(xv), weights, 2, mask=xs[2] if len(xs) > 2 else None,
                                   causal=True)
    np.testing.assert_allclose(model.predict(xs), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    x64 = clnet.Model.from_config(model.get_config(), floatx="float64")
    assert x64.layers[-1].lane_width == lanes
    x64.set_weights(model.get_weights())
    x64.loss_name = "mse"
    check_model(x64, xs, rng.normal(size=(2, 17, 6)), rng, constant=KEY_BIAS)


def test_launches_per_training_step(rt):
    """Per step, for x -> LayerNorm -> x + mha(h, h, causal) -> Flatten -> Dense: the gather; the
    norm (1); the query, key and value products (3), the attention (1), the output product (1,
    adding x: the residual Add launches nothing); the head's product (1; the loss takes its
    softmax); the loss (1); the head's bias, weight and input gradients and the transpose of its
    input (4); the output product's three (3, its input
    x^T written by the attention); the attention's two (2); one transpose of h shared by the three
    projections (1); their bias, weight and input gradients (9); two Sums of those (2); the
    norm's gamma and beta gradients (1: x, an Input, needs no gradient); the update (1). That is
    the CPU form's Dense; the GPU form's weight gradient makes delta and dL/db itself and reads x,
    not x^T: no bias gradients, no transposes."""
    rng = np.random.default_rng(0)
    model = residual_block(6, floatx="float32")
    model.compile("adam", "categorical_crossentropy")
    x, y = rng.normal(size=(64, 6, 4)), rng.integers(0, 3, 64)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    before = rt.launches
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    per_step = 1 + 1 + 3 + 1 + 1 + 1 + 1 + 4 + 3 + 2 + 1 + 9 + 2 + 1 + 1
    norm, mha, head = model.layers[1], model.layers[2], model.layers[-1]
    assert [call.layer.name for call in model.calls if id(call) in model._folded] == ["residual"]
    per_step -= sum(layer.tiled for layer in (head, mha.output_dense, *mha._projection_layers()))  # dL/db
    per_step -= (not head.reads_transposed) + (not mha.reads_transposed)  # x^T
    if norm.chunked:  # the norm's GPU form sums its weight gradient's chunks: 1 more
        per_step += 1
    assert rt.launches - before == 4 * per_step + 1  # + the epoch's one metrics read


# The products form (a GPU's), forced here with small tiles; it needs dims and lengths that are
# multiples of 4 (elsewhere the layer keeps the rows form). TILE 16 with 20 queries: two blocks;
# with 36 queries and keys the causal mask leaves out three blocks of scores and parts of every
# product's depth; 264 keys make rows longer than four times the row kernels' work-groups of 64
# (under the causal mask alone, the row of 8 queries ends at their block's 16).
TILES = {"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}


@pytest.mark.parametrize("heads,key_dim,value_dim,tq,tk,rows", [(1, 4, None, 4, 8, 1), (3, 8, 4, 8, 4, 3),
                                                                (2, 4, 12, 20, 12, 2), (2, 4, 8, 36, 36, 2),
                                                                (1, 4, None, 8, 264, 1)])
@pytest.mark.parametrize("masking", ["none", "causal", "mask", "both"])
def test_products_form_matches_numpy_float32(rt, heads, key_dim, value_dim, tq, tk, rows, masking):
    forward_matches_numpy(heads, key_dim, value_dim, tq, tk, rows, masking, TILES)


@pytest.mark.parametrize("tq,tk", [(4, 8), (36, 36), (132, 132), (8, 264)])
@pytest.mark.parametrize("masking", ["none", "causal", "both"])
def test_products_form_in_the_gpus_tiles(rt, tq, tk, masking):
    """The tiles a GPU takes (PRODUCT_TILES, 64-square, 32 deep) on whichever device runs the
    tests: slices deeper than the 4 and 8 dims, rows of up to 4 key tiles in the row blocks (132
    keys: 3, the last almost empty), and past them (264 keys) the row kernels."""
    forward_matches_numpy(2, 8, 12, tq, tk, 2, masking, attention.PRODUCT_TILES)


@pytest.mark.parametrize("tiles", [{"VW": 4, "TILE": 128, "WPT": 8, "TK": 16, "MMA": 1},
                                   {"VW": 4, "TILE": 64, "WPT": 4, "TK": 32, "MMA": 1}])
@pytest.mark.parametrize("masking", ["none", "causal", "both"])
def test_products_form_on_tensor_cores(rt, masking, tiles):
    """The products in gpu_tiles.cl's tensor-core form (MMA, 3xTF32: 128-square blocks, where 132
    keys take two, the second almost empty, and the causal mask leaves one out; and 64-square
    ones, three blocks and two of them left out)."""
    if not rt.info.tensor_cores:
        pytest.skip(f"the tensor-core form runs on NVIDIA GPUs of compute capability 8.0 on, not {rt.info.name!r}")
    forward_matches_numpy(2, 8, 12, 132, 132, 2, masking, tiles)


def bfloat16(a):
    """a rounded to bfloat16 (to nearest even), as float64."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("masking", ["none", "causal"])
def test_products_form_in_sixteen_bits(rt, masking):
    """The MMA form's bfloat16 tiles, 64-square 16 deep (what a layer under a 16-bit policy runs its
    products in; here the scores' too, given as tiles): each product's operands rounded to
    bfloat16, sums in float, as numpy computes it from the rounded operands; 132 positions, 16 key
    dims, two heads."""
    if not rt.info.tensor_cores:
        pytest.skip(f"the tensor-core form runs on NVIDIA GPUs of compute capability 8.0 on, not {rt.info.name!r}")
    rng = np.random.default_rng(4)
    heads, dim, length, rows, causal = 2, 16, 132, 2, masking == "causal"
    tiles = {**attention.SIXTEEN_BIT_PRODUCT_TILES, "HALF": 1}
    mha = MultiHeadAttention(heads, dim, tiles=tiles)
    model = attention_model(length, length, 6, 5, mha, causal=causal)
    (wq, bq, wk, bk, wv, bv, wo, bo) = randomized(model, rng)
    xq, xv = rng.normal(size=(rows, length, 6)), rng.normal(size=(rows, length, 5))
    xq32, xv32 = (np.asarray(x, np.float32).astype(np.float64) for x in (xq, xv))
    project = lambda x, w, b: np.einsum("btf,fhd->bhtd", x, w.astype(np.float64)) + b.astype(np.float64)[:, None]
    q, k, v = project(xq32, wq, bq), project(xv32, wk, bk), project(xv32, wv, bv)
    scores = np.einsum("bhqd,bhkd->bhqk", bfloat16(q), bfloat16(k)) / np.sqrt(dim)
    if causal:
        scores = np.where(np.tril(np.ones((length, length), bool)), scores, -1e9)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    context = np.einsum("bhqk,bhkd->bqhd", bfloat16(p), bfloat16(v))
    want = np.einsum("bqhd,hdo->bqo", context, wo.astype(np.float64)) + bo
    got = model.predict([xq, xv])
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * np.abs(want).max())
    unrounded = np.einsum("bhqk,bhkd->bqhd", p, v)  # the same in float: farther than bfloat16's rounding
    far = np.einsum("bqhd,hdo->bqo", unrounded, wo.astype(np.float64)) + bo
    assert np.abs(far - want).max() > 4 * np.abs(got - want).max()


def test_products_form_only_where_aligned(rt):
    mha = MultiHeadAttention(2, 3, tiles=TILES)
    attention_model(4, 8, 3, 3, mha)
    assert mha.tiles is None
    rows = MultiHeadAttention(2, 4, tiles=False)
    attention_model(4, 8, 3, 3, rows)
    assert rows.tiles is None
    with pytest.raises(ValueError, match="tiles must be None, False or local-memory tiles"):
        MultiHeadAttention(2, 4, tiles={"VW": 4, "FF_RM": 2})


@pytest.mark.parametrize("masking", ["none", "causal", "mask"])
def test_products_form_gradients(fp64, masking):
    rng = np.random.default_rng(17)
    mha = MultiHeadAttention(2, 4, value_dim=8, output_shape=2, tiles=TILES)
    model = attention_model(4, 8, 3, 4, mha, floatx="float64", masked=masking == "mask", causal=masking == "causal")
    assert mha.tiles == TILES
    randomized(model, rng)
    model.loss_name = "mse"
    xs = [rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 8, 4))]
    if masking == "mask":
        xs.append(random_mask(rng, 2, 4, 8))
    check_model(model, xs, rng.normal(size=(2, 4, 2)), rng, constant=KEY_BIAS)


def step_in_both_forms(length, dropout, tiles, floatx):
    """One training step of x + mha(LayerNorm(x), causal) -> Flatten -> Dense in the rows form and
    in the products form of `tiles`: [(loss, gradients)] of each, the launches of a fit step of
    each, and the products form's layer."""
    results, counts = [], []
    rt = clnet.runtime()
    for form in (False, tiles):  # False: the rows form
        rng = np.random.default_rng(9)
        x = Input((length, 4))
        h = LayerNormalization()(x)
        mha = MultiHeadAttention(2, 4, dropout=dropout, seed=5, tiles=form)
        h = Add()([x, mha(h, h, use_causal_mask=True)])
        model = clnet.Model(x, Dense(3, "softmax")(Flatten()(h)), floatx=floatx, seed=3)
        model.set_weights([rng.normal(0, 0.5, w.shape) for w in model.get_weights()])
        model.compile(clnet.optimizers.SGD(), "categorical_crossentropy")
        x, y = rng.normal(size=(3, length, 4)), rng.integers(0, 3, 3)
        loss, grads, _ = model.compute_gradients(x, y)
        results.append((loss, grads))
        before = rt.launches
        model.fit(x, y, batch_size=3, epochs=1, verbose=0)
        counts.append(rt.launches - before)
    return results, counts, mha


@pytest.mark.parametrize("length,dropout", [(8, 0.4), (36, 0.0), (36, 0.3), (264, 0.3)])
def test_products_form_matches_the_rows_form_and_launches(fp64, length, dropout):
    """In training the products form gives the rows form's loss and gradients (which
    test_dropout_gradients_with_the_steps_mask and the tests above check by central differences)
    to rounding: with dropout the context and dL/dV sum the step's dropped probabilities; at 36
    positions the causal mask leaves parts of the products out; at 264 the last queries' rows are
    longer than four times the row kernels' work-groups of 64, and than the row-block kernels' 4
    key tiles of 16. Per step it launches 2 kernels forward (3 with the row kernels; 1 in the rows
    form) and 4 backward (5; 2)."""
    ((loss_rows, grads_rows), (loss_products, grads_products)), counts, mha = step_in_both_forms(
        length, dropout, TILES, "float64")
    assert abs(loss_rows - loss_products) < 1e-12
    for rows_grad, products_grad in zip(grads_rows, grads_products):
        np.testing.assert_allclose(products_grad, rows_grad, rtol=1e-10, atol=1e-13)
    assert (mha.row_tiles > 0) == (length <= 4 * TILES["TILE"])
    assert counts[1] - counts[0] == (2 - 1 + 4 - 2 if mha.row_tiles else 3 - 1 + 5 - 2)


@pytest.mark.parametrize("length,dropout", [(36, 0.3), (132, 0.0), (132, 0.3)])
def test_row_blocks_on_tensor_cores_match_the_rows_form(rt, length, dropout):
    """The row-block kernels in the MMA form's accumulators (64-square blocks, 3xTF32: float's
    accuracy), whose rows lie in a quad of lanes of two warps: one key tile (36 positions) or three
    (132, the last almost empty), the causal mask, dropout; loss and gradients of a float32 step
    as the rows form's, and the row blocks' launches."""
    if not rt.info.tensor_cores:
        pytest.skip(f"the tensor-core form runs on NVIDIA GPUs of compute capability 8.0 on, not {rt.info.name!r}")
    tiles = {"VW": 4, "TILE": 64, "WPT": 4, "TK": 32, "MMA": 1}
    ((loss_rows, grads_rows), (loss_products, grads_products)), counts, mha = step_in_both_forms(
        length, dropout, tiles, "float32")
    assert mha.row_tiles == -(-length // 64)
    assert abs(loss_rows - loss_products) < 1e-5 * abs(loss_rows)
    # (to float's rounding of the largest: the key's bias has none but rounding, KEY_BIAS)
    largest = max(np.abs(grad).max() for grad in grads_rows)
    for rows_grad, products_grad in zip(grads_rows, grads_products):
        np.testing.assert_allclose(products_grad, rows_grad, rtol=1e-3, atol=1e-5 * largest)
    assert counts[1] - counts[0] == 2 - 1 + 4 - 2


# Self-attention with heads x key_dim a whole number of the store's alignment steps (32 floats on
# PoCL and Intel's runtime, 128 on NVIDIA's: 2 x 64) projects its input once (JoinedDense).
JOINED_KEY_DIM = 64


def joined_block(length, joined, monkeypatch, shared=False, dropout=0.0, form="products"):
    """x + mha(LayerNorm(x), causal) (twice, the same layer, when `shared`) -> Flatten -> Dense,
    in the attention's `form` (products, lanes or rows) on any device, its projections joined or
    (`joined` False) not."""
    if not joined:
        monkeypatch.setattr(attention.JoinedDense, "joinable", staticmethod(lambda *arguments: False))
    if form != "products":
        monkeypatch.setattr(attention, "lanes_form", lambda rt: form == "lanes")
    x = Input((length, 3), name="x")
    mha = MultiHeadAttention(2, JOINED_KEY_DIM, output_shape=3, dropout=dropout, seed=5, name="mha",
                             tiles=TILES if form == "products" else False)
    h = x
    for _ in range(2 if shared else 1):
        normed = LayerNormalization()(h)
        h = Add()([h, mha(normed, normed, use_causal_mask=True)])
    model = clnet.Model(x, Dense(3, "softmax", name="head")(Flatten()(h)), floatx="float64", seed=3)
    monkeypatch.undo()
    assert mha.joined == joined and bool(mha.tiles) == (form == "products") and mha.lanes == (form == "lanes")
    return model


@pytest.mark.parametrize("form,length", [("products", 4), ("products", 8), ("lanes", 5), ("rows", 3)])
def test_joined_projections_gradients(fp64, monkeypatch, form, length):
    rng = np.random.default_rng(length)
    model = joined_block(length, True, monkeypatch, form=form)
    # Weights of 0.3, not 0.5: over 2 x 64 dims larger ones saturate the head's softmax, whose
    # clipped probabilities then make the loss flat where its gradient (unclipped, as Keras's) is
    # not (lanes at 5 positions: 14.8 of loss, relative error 0.5); smaller ones leave the query
    # and key weights' gradients at the differences' rounding (0.15: 7e-6).
    randomized(model, rng, scale=0.3)
    model.loss_name = "categorical_crossentropy"
    # The norm's gamma and beta come first: the key's bias is weight 5.
    check_model(model, rng.normal(size=(2, length, 3)), rng.integers(0, 3, 2), rng, constant=(5,))


@pytest.mark.parametrize("form,shared,dropout", [("products", False, 0.0), ("products", False, 0.3),
                                                 ("products", True, 0.0), ("lanes", False, 0.3), ("rows", True, 0.0)])
def test_joined_projections_match_the_separate_ones_and_launches(fp64, monkeypatch, form, shared, dropout):
    """The joined projections give the three Dense layers' loss and gradients (drawn alike, the
    same weights) to rounding, a shared layer's too; per step and call they launch one forward
    product instead of three and one layer's backward instead of three, and no Sums of the three
    input gradients (two)."""
    results, counts = [], []
    rt = clnet.runtime()
    for joined in (False, True):
        rng = np.random.default_rng(4)
        model = joined_block(8, joined, monkeypatch, shared, dropout, form)
        model.set_weights([rng.normal(0, 0.5, w.shape) for w in model.get_weights()])
        model.compile(clnet.optimizers.SGD(), "categorical_crossentropy")
        x, y = rng.normal(size=(3, 8, 3)), rng.integers(0, 3, 3)
        results.append(model.compute_gradients(x, y)[:2])
        before = rt.launches
        model.fit(x, y, batch_size=3, epochs=1, verbose=0)
        counts.append(rt.launches - before)
    (loss_separate, grads_separate), (loss_joined, grads_joined) = results
    assert abs(loss_separate - loss_joined) < 1e-12
    for separate, joined in zip(grads_separate, grads_joined, strict=True):
        np.testing.assert_allclose(joined, separate, rtol=1e-10, atol=1e-13)
    projection = model.layers[2].joined_projection
    backward = 2 if projection.tiled else 3  # (the GPU form's weight gradient makes delta and dL/db)
    assert counts[0] - counts[1] == (2 if shared else 1) * (2 + 2 * backward + 2)


def test_weights_in_keras_layout_reproduce_keras(rt):
    """tests/fixtures/make_keras_attention.py ran real Keras 3: its weights set here give its outputs."""
    data = np.load(FIXTURE)
    for case in sorted({k.split("/")[0] for k in data.files}):
        get = lambda name: data[f"{case}/{name}"]
        heads, key_dim, value_dim, causal = (int(v) for v in get("config"))
        xq, xv = get("query"), get("value")
        masked = f"{case}/mask" in data.files
        mha = MultiHeadAttention(heads, key_dim, value_dim=value_dim)
        model = attention_model(xq.shape[1], xv.shape[1], xq.shape[2], xv.shape[2], mha, masked=masked,
                                causal=bool(causal))
        weights = [get(f"w{i}") for i in range(8)]
        assert [w.shape for w in model.get_weights()] == [w.shape for w in weights]
        model.set_weights(weights)
        xs = [xq, xv] + ([get("mask").astype(np.float32)] if masked else [])
        np.testing.assert_allclose(model.predict(xs), get("output"), rtol=1e-5, atol=1e-5)


def test_config_round_trip_save_and_load(tmp_path, rng):
    model = residual_block(4, floatx="float32", dropout=0.2)
    model.compile(clnet.optimizers.Adam(0.01), "categorical_crossentropy")
    config = model.get_config()
    rebuilt = clnet.Model.from_config(config)
    assert rebuilt.get_config() == config
    mha = next(l for l in model.layers if isinstance(l, MultiHeadAttention))
    assert mha.get_config()["wiring"] == {"query": 0, "value": 0, "key": 0, "mask": None, "causal": True}
    x, y = rng.normal(size=(24, 4, 4)), rng.integers(0, 3, 24)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    model.save(tmp_path / "attention.h5")
    loaded = clnet.load_model(tmp_path / "attention.h5")
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    model.fit(x, y, batch_size=8, epochs=2, initial_epoch=1, verbose=0)
    loaded.fit(x, y, batch_size=8, epochs=2, initial_epoch=1, verbose=0)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_joined_projections_through_growing_batches(fp64, monkeypatch):
    """A larger batch makes new batch buffers, the joined rows' among them, and the old ones go:
    the model computes as before, and nothing is left reading them. (Views of the joined rows as
    sub-buffers crashed NVIDIA's runtime at garbage collection: the attention takes each part's
    first column instead.)"""
    rng = np.random.default_rng(6)
    model = joined_block(8, True, monkeypatch)
    model.compile(clnet.optimizers.SGD(), "categorical_crossentropy")
    x, y = rng.normal(size=(9, 8, 3)), rng.integers(0, 3, 9)
    small = model.predict(x[:2], batch_size=2)
    large = model.predict(x, batch_size=9)  # new, larger buffers and views
    np.testing.assert_allclose(large[:2], small, rtol=1e-12, atol=1e-14)
    model.fit(x[:4], y[:4], batch_size=4, epochs=1, verbose=0)
    gc.collect()
    trained = model.predict(x, batch_size=9)
    assert not np.allclose(trained, large)
    np.testing.assert_allclose(model.predict(x[:2], batch_size=2), trained[:2], rtol=1e-12, atol=1e-14)
    del model
    gc.collect()


def test_joined_projections_save_and_load(tmp_path, fp64, monkeypatch):
    """The joined parts are saved as Keras's query, key and value weights: a model loaded from
    them (in this device's own form, unforced) predicts the same."""
    rng = np.random.default_rng(5)
    model = joined_block(8, True, monkeypatch)
    model.compile(clnet.optimizers.Adam(0.01), "categorical_crossentropy")
    x, y = rng.normal(size=(6, 8, 3)), rng.integers(0, 3, 6)
    model.fit(x, y, batch_size=3, epochs=1, verbose=0)
    model.save(tmp_path / "joined.h5")
    loaded = clnet.load_model(tmp_path / "joined.h5")
    for a, b in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(loaded.predict(x), model.predict(x), rtol=1e-12, atol=1e-14)


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_heads must be a positive integer, got 0"):
        MultiHeadAttention(0, 4)
    with pytest.raises(ValueError, match="dropout must be a number in \\[0, 1\\), got 1.5"):
        MultiHeadAttention(2, 4, dropout=1.5)
    with pytest.raises(ValueError, match="output_shape must be one integer"):
        MultiHeadAttention(2, 4, output_shape=(3, 4))
    q, v = Input((3, 4)), Input((5, 4))
    with pytest.raises(TypeError, match="needs a query and a value"):
        MultiHeadAttention(2, 4)(q)
    with pytest.raises(TypeError, match="called with value = ndarray"):
        MultiHeadAttention(2, 4)(q, np.zeros((5, 4)))
    with pytest.raises(ValueError, match=r"expects a query of shape \(None, time, features\), got \(None, 12\)"):
        MultiHeadAttention(2, 4)(Flatten()(q), v)
    with pytest.raises(ValueError, match=r"needs key and value of one length, got key \(None, 3, 4\)"):
        MultiHeadAttention(2, 4)(q, v, key=q)
    with pytest.raises(ValueError, match=r"attention_mask of shape \(None, 3, 5\) .* got \(None, 5, 3\)"):
        MultiHeadAttention(2, 4)(q, v, attention_mask=Input((5, 3)))
    mha = MultiHeadAttention(2, 4)
    mha(q, v)
    with pytest.raises(ValueError, match="must be called the same way each time"):
        mha(q, v, use_causal_mask=True)
