"""SimpleRNN, LSTM, GRU: forward and backpropagation through time against numpy (Keras's
formulas, tests/reference.py) in float32 at awkward sizes; Keras 3's own outputs for its weights
(fixtures/keras_recurrent.npz); float64 gradient checks through time; training a stacked LSTM;
launches per step; initializers; config, save/load; bad arguments."""
import io
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import clnet
from clnet.layers import GRU, LSTM, Concatenate, Dense, Flatten, Input, SimpleRNN
from clnet.cl.runtime import Kernel
from clnet.layers import recurrent as recurrent_layers
from reference import ACTIVATIONS, assert_gradients_close, built, device, layer_alone, recurrent
from test_gradients import build, check_model

KINDS = {"SimpleRNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU}
FIXTURE = np.load(Path(__file__).parent / "fixtures" / "keras_recurrent.npz")
# (return_sequences, go_backwards)
DIRECTIONS = [(False, False), (True, False), (False, True), (True, True)]
# whole_sequence: the CPU form (a work-item per block of units) or the sequence form (a GPU's, a
# work-group per batch row sharing out U's columns); both loop over the steps in one launch each way.
FORMS = pytest.mark.parametrize("whole", [False, True], ids=["cpu", "sequence"])


def compare_with_numpy(layer, kind, steps, rows, activation="tanh", recurrent_activation="sigmoid", seed=0,
                       read=None, mask=None):
    """The layer's output, input gradient and weight gradients in float32 against the numpy
    forward pass and central differences of it in float64. With return_state, its outputs are the
    output and the final states, and `read` says which of them a gradient comes from (a list of
    booleans; all by default). A layer called with initial states takes random ones, and their
    gradients are compared too. `mask` (rows, steps), if given, is the call's (Keras's rules)."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    # Weights of Glorot's scale past 16 units: wide layers' sums stay as well conditioned in float32.
    scale = 0.5 * min(1.0, (16 / layer.units) ** 0.5)
    weights = [scale * rng.normal(size=w.shape) for w in layer.get_weights()]
    layer.set_weights(weights)
    for got, want in zip(layer.get_weights(), weights):
        np.testing.assert_array_equal(got, want.astype(f32))
    weights = layer.get_weights()  # as float32 holds them
    x = rng.normal(size=(rows, steps, layer.n_in)).astype(f32)
    initial = [rng.normal(size=(rows, layer.units)).astype(f32) for _ in range(layer.state_count * layer.multi_input)]
    act = lambda name: (lambda z, f=ACTIVATIONS[name][0]: f(z, 1.0, 0.0))

    def outputs(x, *rest):
        states, w = rest[:len(initial)], rest[len(initial):]
        result = recurrent(kind, x, *w, return_sequences=layer.return_sequences, go_backwards=layer.go_backwards,
                           activation=act(activation), recurrent_activation=act(recurrent_activation),
                           return_state=layer.return_state, initial_state=states if initial else None, mask=mask)
        return result if layer.return_state else [result]

    wants = outputs(x.astype(np.float64), *initial, *weights)
    inputs = [device(a, f32) for a in (x, *initial)]
    got = layer.forward(inputs if initial else inputs[0], rows, **({} if mask is None else {"mask": device(mask, f32)}))
    for y, want in zip(got if layer.return_state else [got], wants, strict=True):
        np.testing.assert_allclose(y.numpy()[:rows], want, rtol=1e-5, atol=1e-6)
    read = read or [True] * len(wants)
    dys = [rng.normal(size=want.shape) if used else np.zeros(want.shape) for want, used in zip(wants, read)]
    grads = [device(dy, f32) if used else None for dy, used in zip(dys, read)]
    states = {"state_grads": grads[1:]} if layer.return_state else {}
    dxs = layer.backward(grads[0], rows, [True] * len(inputs) if initial else True, **states)
    flat = lambda *a: np.concatenate([y.ravel() for y in outputs(*a)])
    got = [dx.numpy()[:rows] for dx in (dxs if initial else [dxs])] + list(layer.gradients())
    assert_gradients_close(flat, [x, *initial, *weights], np.concatenate([dy.ravel() for dy in dys]), got,
                           rtol=1e-4, atol=2e-5)


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("units", [1, 3, 5])
@pytest.mark.parametrize("sequences,backwards", DIRECTIONS)
def test_kernels_match_numpy(rt, kind, units, sequences, backwards, whole):
    """Batch 3, 7 input features, 4 steps."""
    layer = layer_alone(KINDS[kind](units, return_sequences=sequences, go_backwards=backwards, whole_sequence=whole),
                        (4, 7), 3, np.float32)
    compare_with_numpy(layer, kind, 4, 3)


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("units,rows", [(16, 11), (13, 9)])
@pytest.mark.parametrize("sequences,backwards", [(False, False), (True, True)])
def test_blocks_of_units_and_rows_match_numpy(rt, kind, units, rows, sequences, backwards, whole):
    """Several blocks of VW units and of batch rows per launch: whole aligned blocks (16 units,
    read as vectors) and a partial last one (13), rows not a multiple of the blocks."""
    layer = layer_alone(KINDS[kind](units, return_sequences=sequences, go_backwards=backwards, whole_sequence=whole),
                        (5, 6), rows, np.float32)
    compare_with_numpy(layer, kind, 5, rows, seed=units)


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cpu_form_in_both_cpu_widths(rt, kind, width, monkeypatch):
    """The CPU form's vector width VW, 8 (AVX2) or 16 floats (AVX-512; step_width), both on any
    CPU (pip's PoCL 3.0 on a Zen 4 calls the gates' builtins on a float16's halves, common.cl's
    AVEC), two vectors a block: 40 units, two whole blocks of 16 and one of 8 in its first vector,
    or one of 32 and one of 8 (its second vector past the units); 11 rows, a block of 6 and one
    of 5."""
    monkeypatch.setattr(recurrent_layers, "step_width", lambda rt, dtype: width)
    layer = layer_alone(KINDS[kind](40, return_sequences=True, whole_sequence=False), (5, 6), 11, np.float32)
    assert layer.vw == width
    # The weight gradients' rows a work-item: 8 where a vector is a 64-byte register.
    assert layer.dw_rows == {8: recurrent_layers.RM, 16: recurrent_layers.WIDE_DW_ROWS}[width]
    compare_with_numpy(layer, kind, 5, 11, seed=40)


def test_cpu_weight_gradients_take_a_work_group_per_column_panel_pair_where_the_device_allows():
    """The CPU form's weight gradients: a work-group per pair of column panels holding every
    block of DW_ROWS rows and the bias's work-item; the runtime's choice where that is more
    work-items than the device allows in a work-group or along its second axis."""
    device = SimpleNamespace(max_work_group_size=64, max_work_item_sizes=[64, 32, 32])
    layer = SimpleNamespace(dw_rows=4, rt=SimpleNamespace(info=SimpleNamespace(cl_device=device)))
    size = recurrent_layers.Recurrent._weight_gradient_size
    assert size(layer, 16, 120) == ((16, 31, 1), (1, 31, 1))
    assert size(layer, 16, 124) == ((16, 32, 1), (1, 32, 1))
    assert size(layer, 16, 125) == ((16, 33, 1), None)
    layer.dw_rows = 8
    assert size(layer, 3, 125) == ((3, 17, 1), (1, 17, 1))


def test_cpu_form_time_loop_blocks_follow_the_units():
    """Where a vector is a 64-byte register, a time-loop work-item takes as many vectors as the
    units fill, up to WIDE_STEP_BLOCKS' 4, by its 4 rows; elsewhere STEP_BLOCKS, whatever the units."""
    blocks = recurrent_layers.step_blocks
    assert [blocks(16, np.float32, units)["SV"] for units in (1, 16, 17, 40, 48, 49, 64, 100, 512)] == \
           [1, 1, 2, 3, 3, 4, 4, 4, 4]
    assert blocks(16, np.float32, 100)["RB"] == 4
    assert blocks(8, np.float64, 20) == {"SV": 3, "RB": 4}
    assert blocks(8, np.float32, 128) == recurrent_layers.STEP_BLOCKS
    assert blocks(4, np.float64, 5) == recurrent_layers.STEP_BLOCKS


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("units", [5, 40, 100])
def test_cpu_form_with_wide_vectors_matches_numpy(rt, kind, units, monkeypatch):
    """The CPU form with 16-float vectors (an AVX-512 CPU's, forced here on any device) at 1, 3
    and 4 vectors a work-item (100 units: a second block of 36, its last vector past the units)
    and 9 rows (3 work-groups of 4 rows, the last with one): against numpy."""
    monkeypatch.setattr(recurrent_layers, "step_width", lambda rt, dtype: 16)
    layer = layer_alone(KINDS[kind](units, return_sequences=True, whole_sequence=False), (4, 3), 9, np.float32)
    assert layer.vw == 16 and layer.blocks == {"SV": min(4, -(-units // 16)), "RB": 4}
    # the input product's rows: 8 where a 16-float vector is one register, else 4 (RM)
    assert layer.in_rows == (8 if rt.info.vector_bytes(4) == 64 else 4)
    compare_with_numpy(layer, kind, 4, 9, seed=units)


def test_cpu_form_needs_a_work_group_of_every_block(rt, monkeypatch):
    """The CPU form's work-group holds a work-item per (block of units, gate): a layer with more
    than the device allows takes the sequence form by default (a GPU's default anyway), and says
    so where whole_sequence=False asks for the CPU form. (Blocks of one unit make such a layer
    small.)"""
    monkeypatch.setattr(recurrent_layers, "step_width", lambda rt, dtype: 1)
    monkeypatch.setitem(recurrent_layers.STEP_BLOCKS, "SV", 1)
    limit = rt.info.cl_device.max_work_group_size
    fits, too_many = limit // 4, limit // 4 + 1
    fitting = LSTM(fits, recurrent_initializer="zeros", whole_sequence=False)
    assert not layer_alone(fitting, (2, 3), 1, np.float32).whole_sequence
    assert layer_alone(LSTM(too_many, recurrent_initializer="zeros"), (2, 3), 1, np.float32).whole_sequence
    with pytest.raises(ValueError, match=rf"lstm.*whole_sequence=False needs work-groups of {4 * too_many} "
                                         rf"work-items .* which allows {limit}"):
        layer_alone(LSTM(too_many, recurrent_initializer="zeros", whole_sequence=False), (2, 3), 1, np.float32)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_wide_layers_in_both_forms(rt, kind):
    """200 units: the sequence form's work-groups have fewer work-items (512) than LSTM's and
    GRU's columns (800, 600) and fewer than units times gates. The output against numpy; the
    gradients (too many weights for central differences) against the step form's."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(3, 4, 6)).astype(np.float32)
    dy = rng.normal(size=(3, 4, 200)).astype(np.float32)
    results = []
    for whole in (False, True):
        layer = layer_alone(KINDS[kind](200, return_sequences=True, whole_sequence=whole), (4, 6), 3, np.float32)
        if not results:
            weights = [0.5 / np.sqrt(w.shape[0]) * rng.normal(size=w.shape) for w in layer.get_weights()]
        layer.set_weights(weights)
        y = layer.forward(device(x, np.float32), 3).numpy()
        dx = layer.backward(device(dy, np.float32), 3, True).numpy()
        results.append([y, dx, *layer.gradients()])
    want = recurrent(kind, x.astype(np.float64), *layer.get_weights(), return_sequences=True)
    np.testing.assert_allclose(results[1][0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5, atol=1e-6)
    for steps, sequence in zip(results[0][1:], results[1][1:]):  # compare_with_numpy's tolerance for gradients
        np.testing.assert_allclose(sequence, steps, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("limit", [32, 96])
def test_sequence_form_in_the_work_groups_its_kernels_allow(rt, kind, limit, monkeypatch):
    """Where the sequence form's kernels allow fewer work-items than SEQ_ITEMS (a GPU's registers,
    with the rows of U each keeps: CL_KERNEL_WORK_GROUP_SIZE), the loops run in work-groups of that
    many (at most the columns' whole warps): 24 units' columns (24 to 96) shared out by 32
    work-items, one part of U's rows each, or by 96, in several parts."""
    monkeypatch.setattr(Kernel, "work_group_size", limit)
    local_sizes = {}
    enqueue = Kernel.enqueue

    def recording(self, global_size, local_size, *args, **kwargs):
        local_sizes[self.name] = local_size
        return enqueue(self, global_size, local_size, *args, **kwargs)

    monkeypatch.setattr(Kernel, "enqueue", recording)
    layer = layer_alone(KINDS[kind](24, return_sequences=True, whole_sequence=True), (5, 6), 4, np.float32)
    compare_with_numpy(layer, kind, 5, 4, seed=limit)
    loops = {name: size for name, size in local_sizes.items() if name.endswith("Sequence")}
    assert len(loops) == 2 and set(loops.values()) == {(min(limit, -(-layer.cols // 32) * 32),)}


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_weight_gradients_in_slices_of_rows(rt, kind):
    """The sequence form sums its weight gradients in at most MAX_SPLITS slices of batch rows:
    67 rows make 34 slices of 2 rows, the last of 1."""
    layer = layer_alone(KINDS[kind](5, return_sequences=True, whole_sequence=True), (3, 4), 67, np.float32)
    compare_with_numpy(layer, kind, 3, 67, seed=4)


# LSTM's and GRU's steps keep the gates in place of z where both derivatives follow from the
# outputs (relu, tanh), and z where one does not (softplus, gelu): both ways through backpropagation.
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("activation, recurrent_activation", [("relu", "tanh"), ("softplus", "gelu")])
def test_other_activations_match_numpy(rt, kind, use_bias, activation, recurrent_activation):
    layer = layer_alone(KINDS[kind](3, activation=activation, recurrent_activation=recurrent_activation,
                                    use_bias=use_bias, return_sequences=True), (5, 7), 3, np.float32)
    compare_with_numpy(layer, kind, 5, 3, activation=activation, recurrent_activation=recurrent_activation, seed=1)


def test_simple_rnn_activation_matches_numpy(rt):
    layer = layer_alone(SimpleRNN(5, activation="sigmoid", use_bias=False), (3, 7), 1, np.float32)
    compare_with_numpy(layer, "SimpleRNN", 3, 1, activation="sigmoid", seed=2)


@pytest.mark.parametrize("case", sorted(json.loads(str(FIXTURE["cases"]))))
def test_keras_weights_give_keras_outputs(rt, case):
    """Keras's get_weights arrays load as they are (set_weights) and predict gives Keras's outputs;
    clnet's weights have the shapes Keras's initializers drew; the numpy reference is Keras's."""
    kind, kwargs, shape = json.loads(str(FIXTURE["cases"]))[case]
    model = clnet.Sequential([Input(tuple(shape)), KINDS[kind](**kwargs)], seed=0)
    count = sum(1 for k in FIXTURE.files if k.startswith(f"{case}/w"))
    weights = [FIXTURE[f"{case}/w{i}"] for i in range(count)]
    assert [w.shape for w in model.get_weights()] == [FIXTURE[f"{case}/init{i}"].shape for i in range(count)]
    model.set_weights(weights)
    x, want = FIXTURE[f"{case}/x"], FIXTURE[f"{case}/y"]
    np.testing.assert_allclose(model.predict(x), want, rtol=1e-5, atol=1e-6)
    activation = {"relu": lambda z: np.maximum(z, 0)}.get(kwargs.get("activation"), np.tanh)
    numpy = recurrent(kind, x.astype(np.float64), *weights, return_sequences=kwargs.get("return_sequences", False),
                      go_backwards=kwargs.get("go_backwards", False), activation=activation)
    np.testing.assert_allclose(numpy, want, rtol=1e-5, atol=1e-6)


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("steps", [1, 2, 7])
@pytest.mark.parametrize("sequences,backwards", DIRECTIONS)
def test_gradients_through_time(fp64, kind, steps, sequences, backwards, whole):
    """Weights and inputs, float64 central differences, relative error < 1e-6 (check_model)."""
    rng = np.random.default_rng(steps)
    layers = [Input((steps, 3)), KINDS[kind](3, return_sequences=sequences, go_backwards=backwards,
                                             whole_sequence=whole)]
    model = build(layers + ([Flatten()] if sequences else []) + [Dense(2, "softmax")], "categorical_crossentropy")
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    # Over one step the recurrent kernel meets only the zero initial state.
    check_model(model, rng.normal(size=(3, steps, 3)), rng.integers(0, 2, 3), rng, constant=(1,) if steps == 1 else ())


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_gradients_whole_blocks(fp64, kind, whole):
    """8 units: the step kernels' whole-vector path (WHOLE_UNITS), over 3 steps."""
    rng = np.random.default_rng(5)
    model = build([Input((3, 2)), KINDS[kind](8, whole_sequence=whole), Dense(2, "softmax")],
                  "categorical_crossentropy")
    model.set_weights([0.5 * rng.normal(size=w.shape) for w in model.get_weights()])
    check_model(model, rng.normal(size=(3, 3, 2)), rng.integers(0, 2, 3), rng)


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_gradients_stacked_without_bias(fp64, kind, whole):
    """Two layers, the first without bias: the second's input gradient flows back through time."""
    rng = np.random.default_rng(9)
    model = build([Input((4, 2)), KINDS[kind](3, use_bias=False, return_sequences=True, go_backwards=True,
                                              whole_sequence=whole),
                   KINDS[kind](2, activation="relu", whole_sequence=whole)], "mse")
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    check_model(model, rng.normal(size=(3, 4, 2)), rng.normal(size=(3, 2)), rng)


def test_stacked_lstm_trains(rt):
    """LSTM -> LSTM -> Dense learns whether a sequence's sum is positive: the loss falls."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(256, 8, 2)).astype(np.float32)
    y = (x[:, :, 0].sum(1) > 0).astype(np.int64)
    model = clnet.Sequential([Input((8, 2)), LSTM(8, return_sequences=True), LSTM(6), Dense(2, "softmax")], seed=1)
    model.compile(clnet.optimizers.Adam(0.01), "sparse_categorical_crossentropy", ["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=15, verbose=0).history
    assert history["loss"][-1] < 0.25 * history["loss"][0], history["loss"]
    assert history["accuracy"][-1] > 0.9, history["accuracy"]


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_launches_per_training_step(rt, kind, whole):
    """Forward: the input product and the time loop (one launch for every step); backward: the
    loop, then the kernel, recurrent kernel and input gradient products (the sequence form adds
    the sum of its weight gradients' slices). The count depends on the form only, never on the
    batch or the steps."""
    steps = 6
    loop, sums = 1, int(whole)
    for rows in (1, 5, 70):
        layer = layer_alone(KINDS[kind](3, return_sequences=True, whole_sequence=whole), (steps, 2), rows, np.float32)
        assert layer.whole_sequence == whole
        x, dy = device(np.ones((rows, steps, 2)), np.float32), device(np.ones((rows, steps, 3)), np.float32)
        launches = rt.launches
        layer.forward(x, rows)
        assert rt.launches - launches == loop + 1
        layer.backward(dy, rows, True)
        assert rt.launches - launches == 2 * loop + 4 + sums
        layer.backward(dy, rows, False)
        assert rt.launches - launches == 2 * loop + 4 + sums + loop + 2 + sums  # no input gradient: one launch less


def test_the_device_chooses_the_form(rt):
    """By default a GPU takes the sequence form, a CPU the CPU form."""
    layer = layer_alone(LSTM(3), (4, 2), 2, np.float32)
    assert layer.whole_sequence == rt.info.is_gpu


def test_initial_weights(rt):
    """Keras's initializers: glorot_uniform over the whole (features, gates * units) kernel,
    orthogonal rows of the recurrent kernel, LSTM's forget bias 1 (unit_forget_bias)."""
    lstm = layer_alone(LSTM(4), (3, 6), 1, np.float64)
    kernel, recurrent_kernel, bias = lstm.get_weights()
    assert np.abs(kernel).max() <= np.sqrt(6 / (6 + 16))
    np.testing.assert_allclose(recurrent_kernel @ recurrent_kernel.T, np.eye(4), atol=1e-12)
    np.testing.assert_array_equal(bias, np.repeat([0.0, 1.0, 0.0, 0.0], 4))
    assert not layer_alone(LSTM(4, unit_forget_bias=False), (3, 6), 1, np.float64).get_weights()[2].any()
    square = layer_alone(SimpleRNN(5), (3, 2), 1, np.float64).get_weights()[1]
    np.testing.assert_allclose(square.T @ square, np.eye(5), atol=1e-12)
    assert layer_alone(GRU(2), (3, 2), 1, np.float64).get_weights()[2].shape == (2, 6)


def test_config_round_trip_and_save(rt, tmp_path):
    rng = np.random.default_rng(4)
    model = clnet.Sequential([Input((5, 3)), GRU(4, return_sequences=True, go_backwards=True, name="g"),
                              LSTM(3, activation="relu", recurrent_activation="tanh", unit_forget_bias=False,
                                   return_sequences=True, recurrent_initializer="glorot_uniform"),
                              SimpleRNN(2, use_bias=False, activation=clnet.activations.get("lrelu", a=0.2))], seed=1)
    again = clnet.Sequential.from_config(model.get_config())
    assert again.get_config() == model.get_config()
    for a, b in zip(again.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert model.get_config()["layers"][1]["config"] == {
        "name": "g", "units": 4, "activation": {"name": "tanh"}, "recurrent_activation": {"name": "sigmoid", "a": 1.0,
                                                                                         "b": 0.0},
        "use_bias": True, "kernel_initializer": "glorot_uniform", "recurrent_initializer": "orthogonal",
        "bias_initializer": "zeros", "dropout": 0.0, "recurrent_dropout": 0.0, "seed": None, "return_sequences": True,
        "return_state": False, "go_backwards": True, "reset_after": True}
    model.compile("adam", "mse")
    x, y = rng.normal(size=(6, 5, 3)), rng.normal(size=(6, 2))
    model.fit(x, y, batch_size=3, epochs=1, verbose=0)
    model.save(tmp_path / "rnn.h5")
    loaded = clnet.load_model(tmp_path / "rnn.h5")
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


# -- return_state -----------------------------------------------------------------------------
# Which outputs of a layer with return_state a gradient comes from: all of them; the states only
# (an encoder's: its output is read by nobody); LSTM's cell state only.
READS = {"all": lambda n: [True] * n, "states": lambda n: [False] + [True] * (n - 1),
         "last state": lambda n: [False] * (n - 1) + [True]}


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("sequences,backwards", DIRECTIONS)
@pytest.mark.parametrize("read", sorted(READS))
def test_return_state_matches_numpy(rt, kind, sequences, backwards, read, whole):
    """The output and the final states (h; LSTM's h and c) against Keras's formulas, and the
    gradients that the states carry back into the last step: batch 3, 5 input features, 4 steps,
    5 units (a partial block of units in the step form)."""
    layer = layer_alone(KINDS[kind](5, return_sequences=sequences, go_backwards=backwards, return_state=True,
                                    whole_sequence=whole), (4, 5), 3, np.float32)
    compare_with_numpy(layer, kind, 4, 3, read=READS[read](1 + layer.state_count))


def _with_states(kind, steps, read, sequences, backwards, whole, features=3):
    """Input -> KIND(3, return_state=True) -> Dense(2, softmax) of what `read` takes of its
    outputs, concatenated (the output flattened where it is every step's)."""
    x = Input((steps, features))
    y, *states = KINDS[kind](3, return_state=True, return_sequences=sequences, go_backwards=backwards,
                             whole_sequence=whole, name="r")(x)
    parts = [part for part, used in zip([Flatten()(y) if sequences else y, *states], READS[read](1 + len(states)))
             if used]
    return clnet.Model(x, Dense(2, "softmax")(Concatenate()(parts) if len(parts) > 1 else parts[0]),
                       floatx="float64", seed=3)


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("steps", [1, 2, 7])
@pytest.mark.parametrize("read,sequences,backwards", [("all", False, False), ("all", True, True),
                                                      ("states", True, False), ("last state", False, True)])
def test_gradients_through_time_with_states(fp64, kind, steps, read, sequences, backwards, whole):
    """Float64 central differences (check_model) with the final states read downstream: with the
    output, which without return_sequences is the same h and so gets two gradients; without it."""
    rng = np.random.default_rng(steps)
    model = _with_states(kind, steps, read, sequences, backwards, whole)
    model.loss_name = "categorical_crossentropy"
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    check_model(model, rng.normal(size=(3, steps, 3)), rng.integers(0, 2, 3), rng, constant=(1,) if steps == 1 else ())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_return_state_launches_nothing_more(rt, kind):
    """The states are written by the last step and their gradients read by it: a training step
    of a model reading the last state (LSTM's c) launches what one reading the output does."""
    x, y = np.ones((4, 5, 3)), np.zeros(4, np.int64)
    launches = []
    for model in (_with_states(kind, 5, "last state", False, False, None),
                  (lambda i: clnet.Model(i, Dense(2, "softmax")(KINDS[kind](3)(i)), floatx="float64"))(Input((5, 3)))):
        model.compile("sgd", "sparse_categorical_crossentropy")
        model.train_on_batch(x, y)
        before = rt.launches
        model.train_on_batch(x, y)
        launches.append(rt.launches - before)
    assert launches[0] == launches[1], launches


def test_return_state_config_save_summary_and_sequential(rt, tmp_path):
    """The states as graph tensors: config round trip (a tensor [layer, call, output]), a saved
    model's predictions and exact resume, summary's shapes; a Sequential refuses the layer."""
    rng = np.random.default_rng(6)
    model = _with_states("LSTM", 4, "states", True, True, None)
    config = model.get_config()
    assert config["layers"][1]["config"]["return_state"] is True
    assert [call["inputs"] for call in config["calls"]][1:3] == [[[1, 0, 1], [1, 0, 2]], [[2, 0]]]
    again = clnet.Model.from_config(config)
    assert again.get_config() == config
    model.compile("adam", "sparse_categorical_crossentropy")
    x, y = rng.normal(size=(8, 4, 3)), rng.integers(0, 2, 8)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    model.save(tmp_path / "states.h5")
    loaded = clnet.load_model(tmp_path / "states.h5")
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    loaded.fit(x, y, batch_size=4, epochs=1, verbose=0)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    summary = io.StringIO()
    model.summary(file=summary)
    assert "[(None, 4, 3), (None, 3), (None, 3)]" in summary.getvalue()
    assert "r[1], r[2]" in summary.getvalue()  # the Concatenate reads the states, outputs 1 and 2
    # Keras's layer call returns the list; so does clnet's, in Keras's order.
    y, h, c = LSTM(2, return_state=True, name="seq")(Input((3, 4)))
    assert (y.shape, h.shape, c.shape, h.index, c.index) == ((None, 2), (None, 2), (None, 2), 1, 2)
    assert "produced by LSTM 'seq' (output 2)" in repr(c)
    with pytest.raises(ValueError, match=r"all layers in a Sequential model should have a single output tensor; "
                                         r"GRU 'g' has 2 \(return_state=True\): use the functional API"):
        clnet.Sequential([Input((3, 2)), GRU(2, return_state=True, name="g")])
    stack = clnet.Sequential([Input((3, 2)), LSTM(2, return_sequences=True)])
    with pytest.raises(ValueError, match="LSTM 'l' has 3"):
        stack.add(LSTM(2, return_state=True, name="l"))
    assert len(stack.layers) == 1  # the layer that did not fit is not kept


# -- initial_state ----------------------------------------------------------------------------
def _with_initial_state(layer, steps, features, rows, dtype):
    """`layer` called with initial states (Inputs), built alone for `rows` (see layer_alone)."""
    layer(Input((steps, features)), initial_state=[Input((layer.units,)) for _ in range(layer.state_count)])
    return layer_alone(layer, [(steps, features)] + [(layer.units,)] * layer.state_count, rows, dtype)


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("sequences,backwards", [(False, False), (True, True)])
@pytest.mark.parametrize("return_state", [False, True])
def test_initial_state_matches_numpy(rt, kind, sequences, backwards, return_state, whole):
    """The first step starts from the call's initial states; their gradients (through U, GRU's
    through z too, LSTM's c through the forget gate) against central differences, with the
    input's and the weights'. Batch 3, 5 features, 4 steps, 5 units."""
    layer = _with_initial_state(KINDS[kind](5, return_sequences=sequences, go_backwards=backwards,
                                            return_state=return_state, whole_sequence=whole), 4, 5, 3, np.float32)
    compare_with_numpy(layer, kind, 4, 3)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_initial_state_launches(rt, kind):
    """Initial states launch nothing more forward; backward, dL/dh_0 is one launch
    (CalcInitialStateGradient) where it is wanted, LSTM's dL/dc_0 none."""
    steps, rows = 6, 5
    plain = layer_alone(KINDS[kind](3, whole_sequence=False), (steps, 2), rows, np.float32)
    started = _with_initial_state(KINDS[kind](3, whole_sequence=False), steps, 2, rows, np.float32)
    x, dy = device(np.ones((rows, steps, 2)), np.float32), device(np.ones((rows, 3)), np.float32)
    states = [device(np.ones((rows, 3)), np.float32) for _ in range(started.state_count)]
    counts = []
    for layer, inputs, wanted in ((plain, x, True), (started, [x, *states], [True] * (1 + len(states))),
                                  (started, [x, *states], [True] + [False] * len(states))):
        launches = rt.launches
        layer.forward(inputs, rows)
        layer.backward(dy, rows, wanted)
        counts.append(rt.launches - launches)
    assert counts == [counts[0], counts[0] + 1, counts[0]], counts


def _encoder_decoder(kind, steps, whole, dtype="float64"):
    """An encoder's final states start a decoder (Keras's sequence-to-sequence pattern): two
    inputs, the decoder's output every step, flattened, into Dense(2, softmax)."""
    x, z = Input((3, 2), name="encoder_in"), Input((steps, 3), name="decoder_in")
    _, *states = KINDS[kind](3, return_state=True, whole_sequence=whole, name="encoder")(x)
    y = KINDS[kind](3, return_sequences=True, go_backwards=True, whole_sequence=whole, name="decoder")(
        z, initial_state=states)
    return clnet.Model([x, z], Dense(2, "softmax")(Flatten()(y)), floatx=dtype, seed=5)


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("steps", [1, 2, 7])
def test_gradients_through_time_with_initial_state(fp64, kind, steps, whole):
    """Float64 central differences (check_model) of an encoder-decoder: the encoder learns only
    through the states it hands the decoder."""
    rng = np.random.default_rng(steps)
    model = _encoder_decoder(kind, steps, whole)
    model.loss_name = "categorical_crossentropy"
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    check_model(model, [rng.normal(size=(3, 3, 2)), rng.normal(size=(3, steps, 3))], rng.integers(0, 2, 3), rng)


def test_initial_state_config_save_and_errors(rt, tmp_path):
    """The states are the call's inputs after x: config round trip, Keras's `layer([x, h, c])`
    form, save and exact resume; wrong counts, shapes and mixed calls raise."""
    rng = np.random.default_rng(8)
    model = _encoder_decoder("LSTM", 4, None, "float32")
    config = model.get_config()
    assert config["calls"][1]["inputs"] == [[1, 0], [2, 0, 1], [2, 0, 2]]  # the decoder: z, h, c
    assert clnet.Model.from_config(config).get_config() == config
    model.compile("adam", "sparse_categorical_crossentropy")
    xs, y = [rng.normal(size=(8, 3, 2)), rng.normal(size=(8, 4, 3))], rng.integers(0, 2, 8)
    model.fit(xs, y, batch_size=4, epochs=1, verbose=0)
    model.save(tmp_path / "seq2seq.h5")
    loaded = clnet.load_model(tmp_path / "seq2seq.h5")
    np.testing.assert_array_equal(loaded.predict(xs), model.predict(xs))
    for m in (model, loaded):
        m.fit(xs, y, batch_size=4, epochs=1, verbose=0)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    x, h = Input((3, 2)), Input((4,))
    with pytest.raises(ValueError, match=r"LSTM 'l' takes initial_state=\[h, c\], 2 tensor\(s\) of shape "
                                         r"\(None, 4\), got 1"):
        LSTM(4, name="l")(x, initial_state=[h])
    with pytest.raises(ValueError, match=r"GRU 'g' takes initial states of shape \(None, 4\), got \(None, 3\) from"):
        GRU(4, name="g")(x, initial_state=Input((3,)))
    with pytest.raises(ValueError, match=r"SimpleRNN 's' was given initial states both in its inputs and as "
                                         "initial_state"):
        SimpleRNN(4, name="s")([x, h], initial_state=[h])
    shared = GRU(4, name="shared")
    shared(x, initial_state=h)
    with pytest.raises(ValueError, match="GRU 'shared' was called with initial_state before; a shared recurrent "
                                         "layer's calls all take one or none"):
        shared(x)


# -- dropout ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_dropout_drops_the_same_input_features_at_every_step(fp64, kind):
    """dropout=0.5, as Keras: in fit each input feature is dropped (the rest scaled by 2) at
    every step of a sequence alike; the training loss's gradients (that step's mask) by central
    differences; evaluate and predict as without dropout; one launch more a training step
    (the mask; the first layer needs no input gradient)."""
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(64, 5, 8)), rng.integers(0, 2, 64)

    def model(dropout):
        inputs = Input((5, 8))
        return clnet.Model(inputs, Dense(2, "softmax")(KINDS[kind](3, dropout=dropout, seed=7, name="r")(inputs)),
                           floatx="float64", seed=1)

    dropped, plain = model(0.5), model(0.0)
    plain.set_weights(dropped.get_weights())
    for m in (dropped, plain):
        m.compile("sgd", "sparse_categorical_crossentropy")
    np.testing.assert_array_equal(dropped.predict(x), plain.predict(x))
    assert dropped.evaluate(x, y, verbose=0) == plain.evaluate(x, y, verbose=0)
    launches = []
    for m in (dropped, plain):
        m.train_on_batch(x, y)
        before = m.rt.launches
        m.train_on_batch(x, y)
        launches.append(m.rt.launches - before)
    assert launches[0] == launches[1] + 1, launches
    kept = dropped.get_layer("r").x.numpy()[:64] / x  # the mask times 1 / (1 - rate), per element
    np.testing.assert_allclose(kept, np.broadcast_to(kept[:, :1], kept.shape), atol=1e-12)  # alike at every step
    assert set(np.round(np.unique(kept), 12)) == {0.0, 2.0} and 0.35 < (kept[:, 0] == 0).mean() < 0.65
    small = model(0.5)
    small.loss_name = "sparse_categorical_crossentropy"
    small.set_weights([0.7 * rng.normal(size=w.shape) for w in small.get_weights()])
    check_model(small, x[:4], y[:4], rng, training=True)


STATES_FIXTURE = np.load(Path(__file__).parent / "data" / "keras_recurrent_states.npz")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_keras_encoder_decoder_states(fp64, kind):
    """Keras 3's own encoder-decoder (tests/make_keras_recurrent_states_fixture.py: the encoder's
    final states, go_backwards, start the decoder, whose output and final states feed a Dense):
    with Keras's weights clnet predicts Keras's outputs, computes its MSE, and after one SGD step
    holds its weights: return_state and initial_state, forward and backward, as Keras has them."""
    f = lambda key: STATES_FIXTURE[f"{kind}/{key}"]
    source, target = Input((5, 3)), Input((4, 2))
    _, *states = KINDS[kind](3, return_state=True, go_backwards=True, name="encoder")(source)
    y, *decoded = KINDS[kind](3, return_sequences=True, return_state=True, name="decoder")(target,
                                                                                         initial_state=states)
    out = Dense(2, name="head")(Concatenate()([Flatten()(y), *decoded]))
    model = clnet.Model([source, target], out, floatx="float64")
    layers = ("encoder", "decoder", "head")
    count = lambda name, key: sum(1 for k in STATES_FIXTURE.files if k.startswith(f"{kind}/{name}/{key}"))
    for name in layers:
        model.get_layer(name).set_weights([f(f"{name}/w{i}") for i in range(count(name, "w"))])
    xs = [f("source"), f("target")]
    np.testing.assert_allclose(model.predict(xs), f("y"), rtol=1e-12, atol=1e-12)
    model.compile(clnet.optimizers.SGD(0.5), "mse")
    assert model.evaluate(xs, f("labels"), verbose=0) == pytest.approx(float(f("loss")), rel=1e-12)
    model.train_on_batch(xs, f("labels"))
    for name in layers:
        for i, got in enumerate(model.get_layer(name).get_weights()):
            np.testing.assert_allclose(got, f(f"{name}/after{i}"), rtol=1e-10, atol=1e-12)


def test_bad_arguments(rt):
    with pytest.raises(ValueError, match=r"LSTM 'seq' expects samples of shape \(timesteps, features\), got "
                                         r"input_shape \(7,\)"):
        built(clnet.Sequential([Input((7,)), LSTM(2, name="seq")]), (7,))
    with pytest.raises(ValueError, match=r"GRU 'g' expects samples of shape \(timesteps, features\), got "
                                         r"input_shape \(2, 3, 4\)"):
        GRU(2, name="g")(Input((2, 3, 4)))
    for kind in KINDS:
        for units in (0, -3, 2.5, True):
            with pytest.raises(ValueError, match=rf"{kind} units must be a positive integer, got {units!r}"):
                KINDS[kind](units)
        with pytest.raises(ValueError, match=rf"{kind} activation must be an elementwise activation .* got 'softmax'"):
            KINDS[kind](2, activation="softmax")
        with pytest.raises(ValueError, match=rf"{kind} whole_sequence must be None, True or False, got 'yes'"):
            KINDS[kind](2, whole_sequence="yes")
    with pytest.raises(ValueError, match="LSTM recurrent_dropout=0.2 is not supported: clnet drops the inputs' "
                                         r"features \(dropout=\), not the recurrent state's"):
        LSTM(2, recurrent_dropout=0.2)
    with pytest.raises(ValueError, match=r"GRU dropout must be a number in \[0, 1\), got 1"):
        GRU(2, dropout=1)
    with pytest.raises(ValueError, match="SimpleRNN seed must be a non-negative integer or None, got -1"):
        SimpleRNN(2, seed=-1)
    with pytest.raises(ValueError, match="LSTM recurrent_activation must be an elementwise activation"):
        LSTM(2, recurrent_activation="softmax")
    with pytest.raises(ValueError, match="GRU reset_after=False is not supported"):
        GRU(2, reset_after=False)
    with pytest.raises(ValueError, match="unknown activation 'nope'"):
        SimpleRNN(2, activation="nope")
    model = clnet.Sequential([Input((3, 2)), LSTM(2, name="l")])
    with pytest.raises(ValueError, match=r"layer 'l' weight 2 must have shape \(8,\), got \(2, 4\)"):
        model.set_weights([np.zeros((2, 8)), np.zeros((2, 8)), np.zeros((2, 4))])
    with pytest.raises(ValueError, match=r"x has shape \(4, 3, 5\), but the model's first layer expects samples "
                                         r"of shape \(3, 2\)"):
        model.predict(np.zeros((4, 3, 5)))

