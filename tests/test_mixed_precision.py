"""Keras's dtype policies (clnet.mixed_precision): names, dtypes and errors as Keras 3's; layers'
`dtype=`; the global policy; what a model computes a policy in (its one float type; 16-bit
computations in float32 with a PrecisionFallbackWarning); configs, clnet checkpoints and Keras
archives keep the policies, and a Keras archive saved under "mixed_float16" loads and predicts
as Keras does (tests/make_keras_mixed_precision_fixture.py)."""
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import clnet
from clnet import mixed_precision
from clnet.layers import Activation, Dense, Input, MultiHeadAttention
from clnet.products import HALF_TYPES, SixteenBitDensePlan, half_candidates, tensor_core_form, tile_candidates

DATA = Path(__file__).parent / "data"

# Keras 3.15's table: name -> (compute_dtype, variable_dtype).
KERAS_POLICIES = {"float32": ("float32", "float32"), "float64": ("float64", "float64"),
                  "mixed_float16": ("float16", "float32"), "mixed_bfloat16": ("bfloat16", "float32"),
                  "float16": ("float16", "float16"), "bfloat16": ("bfloat16", "bfloat16")}

# The tensor-core forms' tiles, whose 16-bit products (HALF) the training tests fix: the WGMMA
# form's on operands stored in 16 bits where a layer's sizes allow (SixteenBitDensePlan).
TENSOR_CORE_TILES = {"mma": {"VW": 4, "TILE": 128, "WPT": 8, "TK": 16, "MMA": 1},
                     "wgmma": {"VW": 4, "TILE": 128, "WPT": 8, "TK": 32, "WGMMA": 1}}


def skip_unless_sixteen_bit_products(form: str) -> None:
    rt = clnet.runtime()
    if not tensor_core_form(rt, np.float32):
        pytest.skip(f"the 16-bit products run on NVIDIA's tensor cores, not {rt.info.name!r}")
    if form == "wgmma" and not rt.info.warpgroup_products:
        pytest.skip(f"the WGMMA form runs on NVIDIA GPUs of compute capability 9.0, not {rt.info.name!r}")


def fix_sixteen_bit_tiles(monkeypatch, form: str) -> None:
    """The Dense tuner replaced: a layer whose policy lets its products run in 16 bits takes the
    form's 16-bit tiles (the tuner takes them where they are faster), any other its tuned ones; the
    WGMMA form's on operands stored in 16 bits in every layer whose sizes allow, small ones too."""
    from clnet.products import sixteen_bit, tuner
    tuned = tuner.matrix_tiles
    monkeypatch.setattr(sixteen_bit, "LEAST_SIDE", 8)

    def sixteen_bit_tiles(rt, dtype, n_in, units, rows=None, half=None):
        if half is None:
            return tuned(rt, dtype, n_in, units, rows)
        return {**TENSOR_CORE_TILES[form], "HALF": HALF_TYPES[half]}

    monkeypatch.setattr(tuner, "matrix_tiles", sixteen_bit_tiles)


def trained_in_both(build, learning_rate, fit, evaluate, stored: bool) -> dict:
    """{policy: validation loss} of the model `build()` makes under "float32" and under
    "mixed_bfloat16", each compiled with Adam(learning_rate), fitted (`fit(model)`) and evaluated
    (`evaluate(model)`) alike; and
    that the bfloat16 model's Dense and attention products ran in bfloat16, the float32 one's in float, and
    whether some of them on operands stored in 16 bits (`stored`)."""
    losses = {}
    for policy in ("float32", "mixed_bfloat16"):
        mixed_precision.set_global_policy(policy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mixed_precision.PrecisionFallbackWarning)
            model = build()
        model.compile(clnet.optimizers.Adam(learning_rate), "sparse_categorical_crossentropy")
        fit(model)
        losses[policy] = evaluate(model)
        denses = [d for layer in model.layers for d in
                  ((*layer._projection_layers(), layer.output_dense) if isinstance(layer, MultiHeadAttention)
                   else (layer,) if isinstance(layer, Dense) else ())]
        assert denses and all(d.tiles.get("HALF") == (1 if policy != "float32" else None) for d in denses)
        assert any(isinstance(d.plan, SixteenBitDensePlan) for d in denses) == (stored and policy != "float32")
        # attention's own products (the context and the gradients; the scores' in the row blocks stay float)
        assert all(layer.product_tiles.get("HALF") == (1 if policy != "float32" else None)
                   for layer in model.layers if isinstance(layer, MultiHeadAttention))
    assert losses["mixed_bfloat16"] != losses["float32"]  # (bfloat16's products, not float's)
    return losses


@pytest.mark.parametrize("name", sorted(KERAS_POLICIES))
def test_a_policy_has_keras_s_dtypes_and_config(name):
    policy = mixed_precision.Policy(name)
    assert (policy.name, policy.compute_dtype, policy.variable_dtype) == (name, *KERAS_POLICIES[name])
    assert policy == mixed_precision.DTypePolicy.from_config(policy.get_config()) == mixed_precision.DTypePolicy(name)
    assert policy.get_config() == {"name": name} and repr(policy) == f'<DTypePolicy "{name}">'
    assert policy.quantization_mode is None and len({policy, mixed_precision.DTypePolicy(name)}) == 1


def test_bad_policies_raise_keras_s_errors_naming_the_value():
    with pytest.raises(ValueError, match="Cannot convert 'int8'"):
        mixed_precision.DTypePolicy("int8")  # (Keras takes it; clnet's layers compute in floats)
    with pytest.raises(TypeError, match="'name' must be a string.*name=3"):
        mixed_precision.Policy(3)
    with pytest.raises(ValueError, match="Invalid `policy` argument.*policy=None"):
        mixed_precision.set_global_policy(None)
    with pytest.raises(ValueError, match="Dense: dtype='float8'"):
        Dense(3, dtype="float8")
    with pytest.raises(ValueError, match=r"Cannot interpret `dtype` argument.*dtype=\[1\]"):
        Dense(3, dtype=[1])


def test_the_global_policy_follows_floatx_until_set_and_clear_session_unsets_it():
    assert mixed_precision.global_policy() == mixed_precision.dtype_policy() == mixed_precision.Policy("float32")
    clnet.set_floatx("float64")
    try:
        assert mixed_precision.global_policy().name == "float64"
        mixed_precision.set_global_policy("mixed_bfloat16")
        assert mixed_precision.global_policy().name == "mixed_bfloat16" and clnet.floatx() == "float64"
    finally:
        clnet.set_floatx("float32")
    mixed_precision.set_dtype_policy(mixed_precision.Policy("mixed_float16"))
    assert mixed_precision.global_policy().name == "mixed_float16"
    clnet.utils.clear_session()
    assert mixed_precision.global_policy().name == "float32"


def test_layers_take_the_global_policy_when_made_or_their_own():
    before = Dense(2)
    mixed_precision.set_global_policy("mixed_float16")
    made = [Dense(2), Dense(2, dtype="float32"), Dense(2, dtype=mixed_precision.Policy("mixed_bfloat16")),
            Dense(2, dtype={"module": "keras", "class_name": "DTypePolicy", "config": {"name": "bfloat16"},
                            "registered_name": None})]
    clnet.utils.clear_session()
    assert [l.dtype_policy.name for l in [before, *made]] == ["float32", "mixed_float16", "float32", "mixed_bfloat16",
                                                             "bfloat16"]
    assert (made[0].compute_dtype, made[0].variable_dtype) == ("float16", "float32")
    assert [l.dtype_given for l in [before, *made]] == [False, False, True, True, True]
    layer = Dense(2)
    layer.dtype_policy = "mixed_bfloat16"
    assert layer.compute_dtype == "bfloat16" and layer.dtype_given
    # Input's dtype is its tensor's, not a policy.
    assert Input((3,), dtype="int32").input_dtype == "int32"


def _mlp(seed, **dtypes):
    return clnet.Sequential([Input((5,)), Dense(7, activation="relu", dtype=dtypes.get("hidden")),
                             Dense(3, dtype=dtypes.get("logits")), Activation("softmax", dtype=dtypes.get("softmax"))],
                            seed=seed)


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(53, 5)).astype(np.float32), rng.integers(0, 3, 53)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16", "float16", "bfloat16"])
def test_sixteen_bit_policies_train_as_float32_with_one_warning_naming_the_layers(policy, monkeypatch):
    # (where the tensor cores run, the tuner may take 16-bit products by their times: here it takes
    # float32's, so that the rest is seen computing float32's numbers exactly)
    from clnet.products import tuner
    tuned = tuner.matrix_tiles
    monkeypatch.setattr(tuner, "matrix_tiles", lambda rt, dtype, n_in, units, rows=None, half=None:
                        tuned(rt, dtype, n_in, units, rows))
    x, y = _data()
    reference = _mlp(4)
    mixed_precision.set_global_policy(policy)
    with pytest.warns(mixed_precision.PrecisionFallbackWarning) as caught:
        model = _mlp(4, softmax="float32")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"'dense_2' ({policy}), 'dense_3' ({policy})" in message and "'activation_1'" not in message
    tensor_cores = tensor_core_form(clnet.runtime(), np.float32)
    assert ("Dense products in 16 bits on the tensor cores" if tensor_cores else "in float32 on") in message
    assert caught[0].filename == __file__  # (the user's line)
    assert model.dtype == np.float32 and model.dtype_policy.name == policy
    for m in (reference, model):
        m.compile(clnet.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per model: fitting builds nothing again that warns
        history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    expected = reference.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert history.history["loss"] == expected.history["loss"]
    for mine, theirs in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_array_equal(mine, theirs)


def test_float_policies_choose_the_model_s_type():
    mixed_precision.set_global_policy("float64")
    model = _mlp(1)
    assert model.dtype == np.float64 and model.dtype_policy.name == "float64"
    assert model.predict(_data()[0][:4], verbose=0).dtype == np.float64
    mixed_precision.set_global_policy("mixed_bfloat16")
    with pytest.warns(mixed_precision.PrecisionFallbackWarning):
        assert _mlp(1).dtype == np.float32


def test_a_layer_given_the_other_float_type_is_refused_naming_it():
    with pytest.raises(ValueError, match="Dense 'wide' was given dtype='float64', but model 'sequential' computes "
                                         "in float32.*floatx='float64'"):
        clnet.Sequential([Input((3,)), Dense(2, dtype="float64", name="wide")])
    model = clnet.Sequential([Input((3,)), Dense(2, dtype="float64")], floatx="float64")
    assert model.dtype == np.float64
    with pytest.raises(ValueError, match="given dtype='float32', but model 'model' computes in float64"):
        source = Input((3,))
        clnet.Model(source, Dense(2, dtype="float32")(source), floatx="float64")


def test_configs_and_checkpoints_keep_the_policies(tmp_path):
    mixed_precision.set_global_policy("mixed_bfloat16")
    with pytest.warns(mixed_precision.PrecisionFallbackWarning):
        model = _mlp(2, softmax="float32")
    clnet.utils.clear_session()
    policies = ["mixed_bfloat16", "mixed_bfloat16", "float32"]
    config = model.get_config()
    assert [e["config"].get("dtype") for e in config["layers"][1:]] == policies
    with pytest.warns(mixed_precision.PrecisionFallbackWarning):
        again = clnet.Sequential.from_config(config)
    assert [l.dtype_policy.name for l in again.layers] == policies
    model.compile("adam", "sparse_categorical_crossentropy")
    model.save(tmp_path / "m.h5")
    with pytest.warns(mixed_precision.PrecisionFallbackWarning):
        loaded = clnet.load_model(tmp_path / "m.h5")
    assert [l.dtype_policy.name for l in loaded.layers] == policies
    x = _data()[0]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_a_keras_archive_saved_under_mixed_float16_loads_predicts_and_saves_its_policies(tmp_path):
    expected = np.load(DATA / "keras_mixed_precision.npz")
    with pytest.warns(mixed_precision.PrecisionFallbackWarning, match="'dense' \\(mixed_float16\\)"):
        model = clnet.load_model(DATA / "keras_mixed_precision.keras")
    assert [l.dtype_policy.name for l in model.layers] == ["mixed_float16"] * 3 + ["float32"]
    assert model.dtype == np.float32 and model.dtype_policy.name == "mixed_float16"
    # Keras's compile wraps its Adam (the archive's) in loss scaling, as compile(auto_scale_loss=True) does
    assert type(model.optimizer.inner_optimizer) is clnet.optimizers.Adam
    predicted = model.predict(expected["x"], verbose=0)
    # clnet computes in float32: Keras's float32 predictions of the same weights, and its float16
    # ones within what float16's 11-bit significand allows through three layers.
    np.testing.assert_allclose(predicted, expected["float32"], rtol=0, atol=2e-6)
    np.testing.assert_allclose(predicted, expected["mixed"], rtol=0, atol=2e-3)
    assert np.abs(predicted - expected["mixed"]).max() > 1e-5  # (the fixture's two really differ)
    model.save(tmp_path / "again.keras")
    with zipfile.ZipFile(tmp_path / "again.keras") as archive:
        layers = json.loads(archive.read("config.json"))["config"]["layers"]
    assert [e["config"]["dtype"] for e in layers] == ["float32", *["mixed_float16"] * 3, "float32"]
    with pytest.warns(mixed_precision.PrecisionFallbackWarning):
        reloaded = clnet.load_model(tmp_path / "again.keras")
    np.testing.assert_array_equal(reloaded.predict(expected["x"], verbose=0), predicted)


def test_a_sixteen_bit_policy_lets_the_tuner_take_sixteen_bit_products():
    """Under a 16-bit policy a Dense layer's tuner chooses among the float32 candidates and, where
    the tensor cores run, their tensor-core tiles with 16-bit operands too (HALF: 1 bfloat16, 2
    float16), and on Hopper the WGMMA form's 32 deep a slice; elsewhere among the float32 ones
    alone, so that its tuned choices are float32's."""
    rt = clnet.runtime()
    plain = tile_candidates(rt, np.float32)
    for half, code in HALF_TYPES.items():
        candidates = half_candidates(rt, np.float32, half)
        assert candidates[:len(plain)] == plain
        extra = candidates[len(plain):]
        if tensor_core_form(rt, np.float32):
            deeper = [{"VW": 4, "TILE": 128, "WPT": 8, "TK": 32, "WGMMA": 1, "HALF": code}] * rt.info.warpgroup_products
            assert extra == [{**t, "HALF": code} for t in plain if t.get("MMA") or t.get("WGMMA")] + deeper and extra
        else:
            assert extra == []
    assert half_candidates(rt, np.float64, "bfloat16") == tile_candidates(rt, np.float64)
    mixed_precision.set_global_policy("mixed_float16")
    layer = Dense(3)
    with pytest.warns(mixed_precision.PrecisionFallbackWarning):
        clnet.Sequential([Input((4,)), layer])
    assert layer.half == "float16"


@pytest.mark.parametrize("form", TENSOR_CORE_TILES)
def test_bfloat16_products_train_within_2_percent_of_float32(monkeypatch, form):
    """An MLP under "mixed_bfloat16" whose Dense products run in bfloat16 (each tensor-core form's
    16-bit tiles, fixed here) trains to a validation loss within 2% of the same model's in
    float32. Needs NVIDIA's tensor cores (elsewhere the policy computes float32's numbers exactly:
    test_sixteen_bit_policies_train_as_float32...)."""
    skip_unless_sixteen_bit_products(form)
    fix_sixteen_bit_tiles(monkeypatch, form)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(12288, 256)).astype(np.float32)
    y = (np.tanh(x @ rng.normal(0, 0.1, (256, 64))) @ rng.normal(0, 1, (64, 10))).argmax(1)
    losses = trained_in_both(
        lambda: clnet.Sequential([Input((256,)), Dense(1024, activation="relu"), Dense(1024, activation="relu"),
                                  Dense(10, activation="softmax")], seed=7), 1e-3,
        lambda model: model.fit(x[:10240], y[:10240], batch_size=1024, epochs=4, verbose=0),
        lambda model: model.evaluate(x[10240:], y[10240:], batch_size=1024, verbose=0), form == "wgmma")
    assert abs(losses["mixed_bfloat16"] - losses["float32"]) <= 0.02 * losses["float32"], losses


def launches_saved_by_writers(monkeypatch, build, check, x, y, rows) -> int:
    """The model of `build` with its layers writing their readers' 16-bit inputs, and with each
    layer rounding its own (Dense.take_sixteen_bit_inputs refused): the same bits in the
    predictions, the loss and gradients on the first `rows` samples, and the weights after an
    epoch in batches of 8; `check(model, linked)` asserts who writes for whom. Returns the
    launches the writers saved over the epoch."""
    rt = clnet.runtime()
    results = {}
    for linked in (True, False):
        if not linked:
            monkeypatch.setattr(Dense, "take_sixteen_bit_inputs", lambda self, writer: None)
        model = build()
        predicted = model.predict(x, verbose=0)
        loss, grads, _ = model.compute_gradients(x[:rows], y[:rows])
        before = rt.launches
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        results[linked] = (predicted, loss, grads, model.get_weights(), rt.launches - before)
        check(model, linked)
    linked, alone = results[True], results[False]
    np.testing.assert_array_equal(linked[0], alone[0])
    assert linked[1] == alone[1]
    for mine, theirs in zip([*linked[2], *linked[3]], [*alone[2], *alone[3]]):
        np.testing.assert_array_equal(mine, theirs)
    return alone[4] - linked[4]


def test_a_dense_layer_writes_the_next_one_s_sixteen_bit_input(monkeypatch):
    """Under "mixed_bfloat16" with operands stored in 16 bits (the WGMMA form), a Dense layer whose
    output only the next Dense reads writes it in bfloat16 into that layer's 16-bit copy, which
    then rounds none itself: one RoundToSixteenBits launch fewer a step for each such pair (GELU
    -> linear, 72 rows of positions, and linear -> softmax; ReLU's output, read by two layers, is
    rounded by each; the Add's, by Dense(16)), and the same bits as the model whose layers each
    round their own, in the
    predictions, the loss, every gradient and the weights after training. Needs Hopper."""
    skip_unless_sixteen_bit_products("wgmma")
    fix_sixteen_bit_tiles(monkeypatch, "wgmma")
    from clnet.layers import Add
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=(40, 3, 24)).astype(np.float32), rng.integers(0, 8, (40, 3))

    def build():
        mixed_precision.set_global_policy("mixed_bfloat16")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mixed_precision.PrecisionFallbackWarning)
            source = Input((3, 24))
            h = Dense(40, activation="relu")(source)
            a, b = Dense(48, activation="gelu")(h), Dense(48)(h)
            out = Dense(8, activation="softmax")(Dense(16)(Add()([Dense(32)(a), Dense(32)(b)])))
            model = clnet.Model(source, out, seed=8)
        model.compile(clnet.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
        return model

    def check(model, linked):
        plans = [layer.plan for layer in model.layers if isinstance(layer, Dense)]
        assert all(isinstance(plan, SixteenBitDensePlan) for plan in plans)
        given = [plan.input_writer is not None for plan in plans]
        # (each Dense(48) -> its Dense(32), and Dense(16) -> the softmax layer; Dense(16) reads the Add's output)
        assert sum(given) == (3 if linked else 0), given

    assert launches_saved_by_writers(monkeypatch, build, check, x, y, 16) == 3 * 5  # 5 steps: three roundings each


def test_layer_normalization_writes_its_reader_s_sixteen_bit_input(monkeypatch):
    """Under "mixed_bfloat16" with operands stored in 16 bits (the WGMMA form), a transformer
    block's norms write their output in bfloat16 into the 16-bit copy of the one layer reading it
    (the attention's joined projection, the first feed-forward Dense), as the feed-forward Dense
    layers do the next one's: four RoundToSixteenBits launches fewer a step, and the same bits as the model whose
    layers each round their own in the predictions, the loss, every gradient and the weights
    after training. Needs Hopper."""
    skip_unless_sixteen_bit_products("wgmma")
    fix_sixteen_bit_tiles(monkeypatch, "wgmma")
    from clnet.layers import Add, LayerNormalization
    rng = np.random.default_rng(12)
    x, y = rng.normal(size=(24, 8, 32)).astype(np.float32), rng.integers(0, 8, (24, 8))

    def build():
        mixed_precision.set_global_policy("mixed_bfloat16")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mixed_precision.PrecisionFallbackWarning)
            source = Input((8, 32))
            h = LayerNormalization()(source)
            x1 = Add()([source, MultiHeadAttention(2, 64)(h, h, use_causal_mask=True)])  # (128 wide: the projections join)
            h = Dense(24)(Dense(64, activation="gelu")(LayerNormalization()(x1)))
            model = clnet.Model(source, Dense(8, activation="softmax")(Add()([x1, Dense(32)(h)])), seed=12)
        model.compile(clnet.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
        return model

    def check(model, linked):
        norm1, attention, norm2, gelu, linear, last = (model.layers[i] for i in (1, 2, 4, 5, 6, 7))
        assert isinstance(attention.joined_projection.plan, SixteenBitDensePlan)
        writers = [reader.plan.input_writer for reader in (attention.joined_projection, gelu, linear, last)]
        assert writers == ([norm1, norm2, gelu.plan, linear.plan] if linked else [None] * 4), writers

    assert launches_saved_by_writers(monkeypatch, build, check, x, y, 8) == 3 * 4  # 3 steps: four roundings each


def test_a_shared_dense_layer_writes_only_its_latest_reader_s_sixteen_bit_input(monkeypatch):
    """Two models share a Dense layer under "mixed_bfloat16" (the WGMMA form), each with a Dense
    of its own reading it: the model built last links the shared layer to its reader, and the
    first model's reader, whose 16-bit copy the shared layer no longer writes, rounds its input
    itself again (reading a stale copy would predict for the batch it saw before). Needs Hopper."""
    skip_unless_sixteen_bit_products("wgmma")
    fix_sixteen_bit_tiles(monkeypatch, "wgmma")
    rng = np.random.default_rng(9)
    x1, x2, x3 = (rng.normal(size=(8, 24)).astype(np.float32) for _ in range(3))
    mixed_precision.set_global_policy("mixed_bfloat16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mixed_precision.PrecisionFallbackWarning)
        source = Input((24,))
        shared = Dense(40, activation="relu")
        first = clnet.Model(source, Dense(8, activation="softmax")(shared(source)), seed=9)
        want = first.predict(x2, batch_size=8, verbose=0)
        first.predict(x1, batch_size=8, verbose=0)  # (the first reader's copy now holds x1's)
        reader = first.layers[-1]
        assert reader.plan.input_writer is shared.plan and shared.plan.outputs16 is reader.plan.inputs16
        second = clnet.Model(source, Dense(16)(shared(source)), seed=10)
        second.predict(x3, batch_size=8, verbose=0)
    assert shared.plan.outputs16 is second.layers[-1].plan.inputs16 and reader.plan.input_writer is None
    np.testing.assert_array_equal(first.predict(x2, batch_size=8, verbose=0), want)


@pytest.mark.parametrize("form", TENSOR_CORE_TILES)
def test_a_cnn_s_bfloat16_products_train_within_2_percent_of_float32(monkeypatch, form):
    """The Fashion-MNIST CNN of examples/fashion_mnist_cnn.py (without its Dropout) under
    "mixed_bfloat16", its Dense products in each tensor-core form's bfloat16 tiles and, with the
    WGMMA form's, its second convolution on operands stored in 16 bits (its first, on one channel,
    computes in float32), trains on 12,000 real images to a validation loss within 2% of the same
    model's in float32. Needs NVIDIA's tensor cores."""
    skip_unless_sixteen_bit_products(form)
    fix_sixteen_bit_tiles(monkeypatch, form)
    from clnet.layers import Conv2D, Flatten, MaxPooling2D
    from clnet.products import tuner
    stored = []  # the convolutions the tuner was asked about, where the form's are stored in 16 bits
    if form == "wgmma":
        monkeypatch.setattr(tuner, "convolution_in_sixteen_bits", lambda *args: stored.append(args) or True)
    (x, y), (x_test, y_test) = clnet.datasets.fashion_mnist.load_data()
    x, x_test = (images.reshape(-1, 28, 28, 1).astype(np.float32) / 255 for images in (x, x_test))
    losses = trained_in_both(
        lambda: clnet.Sequential([Input((28, 28, 1)), Conv2D(32, 3, activation="relu"), MaxPooling2D(),
                                  Conv2D(64, 3, activation="relu"), MaxPooling2D(), Flatten(),
                                  Dense(128, activation="relu"), Dense(10, activation="softmax")], seed=2), 1e-3,
        lambda model: model.fit(x[:12000], y[:12000], batch_size=128, epochs=2, verbose=0),
        lambda model: model.evaluate(x_test[:2000], y_test[:2000], batch_size=500, verbose=0), form == "wgmma")
    assert abs(losses["mixed_bfloat16"] - losses["float32"]) <= 0.02 * losses["float32"], losses
    if form == "wgmma":  # the second convolution's geometry (32 channels), and no other
        assert {args[2][2] for args in stored} == {32}


def test_compile_wraps_a_mixed_float16_model_s_optimizer_in_loss_scaling_as_keras():
    """As Keras's compile(auto_scale_loss=True): a model made under "mixed_float16" trains with
    its optimizer in a LossScaleOptimizer (not one given already; not with auto_scale_loss=False,
    nor under another policy), which clnet.mixed_precision exports too; its scaling by powers of
    two leaves float32's steps exact."""
    assert mixed_precision.LossScaleOptimizer is clnet.optimizers.LossScaleOptimizer
    x, y = _data()
    reference = _mlp(5)
    mixed_precision.set_global_policy("mixed_float16")
    with pytest.warns(mixed_precision.PrecisionFallbackWarning):
        model = _mlp(5)
    model.compile(clnet.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    assert isinstance(model.optimizer, mixed_precision.LossScaleOptimizer)
    assert type(model.optimizer.inner_optimizer) is clnet.optimizers.Adam and model.optimizer.name.startswith(
        "loss_scale_optimizer")
    reference.compile(clnet.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    assert model.fit(x, y, batch_size=16, epochs=2, verbose=0).history == \
        reference.fit(x, y, batch_size=16, epochs=2, verbose=0).history
    for mine, theirs in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_array_equal(mine, theirs)
    assert model.optimizer.dynamic_scale == 2.0**15 and model.optimizer.step_counter == 8
    given = mixed_precision.LossScaleOptimizer(clnet.optimizers.SGD(), initial_scale=4.0)
    model.compile(given, "sparse_categorical_crossentropy")
    assert model.optimizer is given
    model.compile("sgd", "sparse_categorical_crossentropy", auto_scale_loss=False)
    assert type(model.optimizer) is clnet.optimizers.SGD
    with pytest.raises(TypeError, match="auto_scale_loss must be True or False, got 'yes'"):
        model.compile("sgd", "mse", auto_scale_loss="yes")
    mixed_precision.set_global_policy("mixed_bfloat16")
    with pytest.warns(mixed_precision.PrecisionFallbackWarning):
        other = _mlp(5)
    other.compile("sgd", "sparse_categorical_crossentropy")
    assert type(other.optimizer) is clnet.optimizers.SGD


@pytest.mark.parametrize("form", TENSOR_CORE_TILES)
def test_a_gpt_s_bfloat16_products_train_within_2_percent_of_float32(monkeypatch, form):
    """examples/tiny_gpt.py's model (2 blocks, d 128, context 32) under "mixed_bfloat16" with every
    Dense product (attention's projections included) in each tensor-core form's bfloat16 tiles
    (fixed here) trains, on text from a peaked Markov chain, to a validation loss within 2% of the
    same model's in float32. Needs NVIDIA's tensor cores."""
    skip_unless_sixteen_bit_products(form)
    fix_sixteen_bit_tiles(monkeypatch, form)
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import tiny_gpt
    rng = np.random.default_rng(3)
    chain = rng.dirichlet(np.full(16, 0.2), 16)  # each token's next-token probabilities, peaked
    tokens = [0]
    for _ in range(40 * 1024):
        tokens.append(rng.choice(16, p=chain[tokens[-1]]))
    windows = np.lib.stride_tricks.sliding_window_view(np.array(tokens), 33)[::33]
    x, y = windows[:, :32].astype(np.float32), windows[:, 1:]
    losses = trained_in_both(
        lambda: tiny_gpt.build_model(16, 32, 128, 4, 2, seed=5), 3e-3,
        lambda model: model.fit(x[:1024], y[:1024], batch_size=64, epochs=3, verbose=0),
        lambda model: model.evaluate(x[1024:], y[1024:], batch_size=64, verbose=0), form == "wgmma")
    assert abs(losses["mixed_bfloat16"] - losses["float32"]) <= 0.02 * losses["float32"], losses
