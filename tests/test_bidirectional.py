"""Bidirectional: Keras 3's outputs and gradients (a fixture), the merge kernels against numpy at
awkward sizes, float64 central differences through time, launches, config, saving and errors."""
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clnet
from clnet.layers import GRU, LSTM, Bidirectional, Concatenate, Dense, Flatten, Input, SimpleRNN
from reference import device, layer_alone, recurrent
from test_gradients import check_model

KINDS = {"SimpleRNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU}
MODES = ["concat", "sum", "ave", "mul", None]
FIXTURE = np.load(Path(__file__).parent / "data" / "keras_bidirectional.npz")
FORMS = pytest.mark.parametrize("whole", [False, True], ids=["cpu", "sequence"])


def case(name: str, prefix: str) -> list[np.ndarray]:
    count = sum(1 for key in FIXTURE.files if key.startswith(f"{name}/{prefix}"))
    return [FIXTURE[f"{name}/{prefix}{i}"] for i in range(count)]


def merged(mode, y, y_rev):
    """Keras's merge of the forward output and the backward one, already in time order."""
    return {"concat": lambda: np.concatenate([y, y_rev], -1), "sum": lambda: y + y_rev, "ave": lambda: (y + y_rev) / 2,
            "mul": lambda: y * y_rev, None: lambda: [y, y_rev]}[mode]()


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sequences", [False, True])
def test_keras_outputs(fp64, kind, mode, sequences, whole):
    """Keras's weights (forward layer's, then backward's) give Keras's outputs, float64, 1e-12;
    and so does numpy (tests/reference.py's recurrent layers, flipped and merged). Keras's
    SimpleRNN on its torch backend is off from float64 numpy by 1.4e-7 (its LSTM and GRU are
    not), so there Keras is met to 1e-6 and numpy still to 1e-12."""
    name = f"{kind}/{mode}/{int(sequences)}"
    weights, (x,), want = case(name, "w"), case(name, "x"), case(name, "y")
    inputs = Input(x.shape[1:])
    outputs = Bidirectional(KINDS[kind](5, return_sequences=sequences, whole_sequence=whole), merge_mode=mode)(inputs)
    model = clnet.Model(inputs, outputs if mode else Concatenate()(outputs), floatx="float64")
    model.set_weights(weights)
    got = model.predict(x)
    keras_tolerance = 1e-6 if kind == "SimpleRNN" else 1e-12
    np.testing.assert_allclose(got, np.concatenate(want, -1), rtol=keras_tolerance, atol=keras_tolerance)
    half = len(weights) // 2
    y = recurrent(kind, x, *weights[:half], return_sequences=sequences)
    y_rev = recurrent(kind, x, *weights[half:], return_sequences=sequences, go_backwards=True)
    numpy = merged(mode, y, y_rev[:, ::-1] if sequences else y_rev)
    np.testing.assert_allclose(got, np.concatenate(numpy, -1) if mode is None else numpy, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_keras_states_and_initial_states(fp64, kind):
    """return_state with initial states: [output, forward states, backward states], the initial
    states split the same way (Keras's first half to the forward layer)."""
    weights, (x, *states), want = case(f"{kind}/states", "w"), case(f"{kind}/states", "x"), case(f"{kind}/states", "y")
    inputs = [Input(x.shape[1:])] + [Input(s.shape[1:]) for s in states]
    layer = Bidirectional(KINDS[kind](5, return_sequences=True, return_state=True))
    outputs = layer(inputs[0], initial_state=inputs[1:])
    assert len(outputs) == 1 + len(states)
    model = clnet.Model(inputs, Concatenate()([Flatten()(outputs[0]), *outputs[1:]]), floatx="float64")
    model.set_weights(weights)
    np.testing.assert_allclose(model.predict([x, *states]), np.concatenate([want[0].reshape(len(x), -1), *want[1:]], -1),
                               rtol=1e-12, atol=1e-12)


def test_keras_weight_gradients(fp64):
    """Bidirectional(LSTM, "mul"), mean squared error: the loss and every weight's
    gradient as PyTorch's autograd computes them through the Keras model, float64, 1e-10."""
    weights, (x, target), (loss, *grads) = case("gradients", "w"), case("gradients", "x"), case("gradients", "y")
    model = clnet.Sequential([Input(x.shape[1:]), Bidirectional(LSTM(5, return_sequences=True), merge_mode="mul")],
                             floatx="float64")
    model.set_weights(weights)
    model.compile("sgd", "mse")
    got_loss, got_grads, _ = model.compute_gradients(x, target)
    assert abs(got_loss - loss) < 1e-12
    for got, want in zip(got_grads, grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@FORMS
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sequences", [False, True])
def test_merge_kernels_match_numpy(rt, mode, sequences, whole):
    """float32, 7 units (a partial vector), 5 steps, 70 rows. Forward against numpy; backward:
    the merged gradient split as numpy splits it, through two layers of the same weights run
    alone: the same weight gradients, and the input's gradient their sum."""
    rows, steps, features, units = 70, 5, 3, 7
    rng = np.random.default_rng(4)
    layer = layer_alone(Bidirectional(GRU(units, return_sequences=sequences, whole_sequence=whole), merge_mode=mode),
                        (steps, features), rows, np.float32)
    alone = [layer_alone(GRU(units, return_sequences=sequences, go_backwards=back, whole_sequence=whole),
                         (steps, features), rows, np.float32) for back in (False, True)]
    weights = [0.5 * rng.normal(size=w.shape) for w in layer.get_weights()]
    layer.set_weights(weights)
    alone[0].set_weights(weights[:3])
    alone[1].set_weights(weights[3:])
    x = rng.normal(size=(rows, steps, features))
    got = layer.forward(device(x, np.float32), rows)
    got = [t.numpy()[:rows] for t in (got if isinstance(got, list) else [got])]
    y, y_rev = (recurrent("GRU", x, *weights[k:k + 3], return_sequences=sequences, go_backwards=bool(k)) for k in (0, 3))
    flipped = y_rev[:, ::-1] if sequences else y_rev
    want = merged(mode, y, flipped)
    for g, w in zip(got, want if mode is None else [want], strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
    dy = [rng.normal(size=g.shape) for g in got]
    grad_f, grad_b = {"concat": lambda: (dy[0][..., :units], dy[0][..., units:]), "sum": lambda: (dy[0], dy[0]),
                      "ave": lambda: (dy[0] / 2, dy[0] / 2), "mul": lambda: (dy[0] * flipped, dy[0] * y),
                      None: lambda: (dy[0], dy[1])}[mode]()
    grad_b = grad_b[:, ::-1] if sequences else grad_b
    dx = layer.backward(device(dy[0], np.float32), rows, True,
                        state_grads=[device(dy[1], np.float32)] if mode is None else None).numpy()[:rows]
    for a in alone:
        a.forward(device(x, np.float32), rows)
    dx_alone = sum(a.backward(device(g, np.float32), rows, True).numpy()[:rows] for a, g in zip(alone, (grad_f, grad_b)))
    np.testing.assert_allclose(dx, dx_alone, rtol=1e-5, atol=1e-5)
    for got_grad, want_grad in zip(layer.gradients(), alone[0].gradients() + alone[1].gradients(), strict=True):
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-5, atol=1e-4)


def _bidirectional_model(kind, steps, mode, sequences, whole, states=False):
    """Input -> Bidirectional(KIND(3)) -> Dense(2, softmax); with `states`, return_state and
    initial states from a second input through Dense layers, the final states read as well."""
    x = Input((steps, 3))
    layer = Bidirectional(KINDS[kind](3, return_sequences=sequences, return_state=states, whole_sequence=whole),
                          merge_mode=mode)
    inputs = [x]
    if states:
        z = Input((2,))
        inputs.append(z)
        count = 2 * layer.forward_layer.state_count
        outputs = layer(x, initial_state=[Dense(3, "tanh")(z) for _ in range(count)])
    else:
        outputs = layer(x)
    outputs = outputs if isinstance(outputs, list) else [outputs]
    parts = [Flatten()(t) if len(t.shape) == 3 else t for t in outputs]
    model = clnet.Model(inputs, Dense(2, "softmax")(Concatenate()(parts) if len(parts) > 1 else parts[0]),
                        floatx="float64", seed=3)
    model.loss_name = "categorical_crossentropy"
    return model


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("steps", [1, 2, 7])
@pytest.mark.parametrize("mode,sequences", [("concat", True), ("mul", False), ("ave", True), (None, True),
                                            ("sum", False)])
def test_gradients_through_time(fp64, kind, steps, mode, sequences, whole):
    """Weights and input, float64 central differences, relative error < 1e-6 (check_model)."""
    rng = np.random.default_rng(steps)
    model = _bidirectional_model(kind, steps, mode, sequences, whole)
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    # Over one step the recurrent kernels meet only the zero initial states.
    one_step = (1, 1 + len(model.layers[1].forward_layer.parameters)) if steps == 1 else ()
    check_model(model, rng.normal(size=(3, steps, 3)), rng.integers(0, 2, 3), rng, constant=one_step)


@FORMS
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("mode", ["concat", None])
def test_gradients_with_states(fp64, kind, mode, whole):
    """return_state and initial states made by layers of a second input: the states' gradients
    reach those layers, through both directions, over 4 steps."""
    rng = np.random.default_rng(11)
    model = _bidirectional_model(kind, 4, mode, True, whole, states=True)
    model.set_weights([0.7 * rng.normal(size=w.shape) for w in model.get_weights()])
    check_model(model, [rng.normal(size=(3, 4, 3)), rng.normal(size=(3, 2))], rng.integers(0, 2, 3), rng)


@pytest.mark.parametrize("mode", MODES)
def test_launches(rt, mode):
    """The two layers' launches, one merge (none for None without return_sequences) and, back,
    one split and one sum of the input's gradients."""
    steps, rows = 6, 5
    for sequences in (False, True):
        layer = layer_alone(Bidirectional(LSTM(3, return_sequences=sequences, whole_sequence=False), merge_mode=mode),
                            (steps, 2), rows, np.float32)
        one = layer_alone(LSTM(3, return_sequences=sequences, whole_sequence=False), (steps, 2), rows, np.float32)
        x = device(np.ones((rows, steps, 2)), np.float32)
        launches = rt.launches
        one.forward(x, rows)
        one.backward(device(np.ones((rows, *one.output_shape)), np.float32), rows, True)
        alone = rt.launches - launches
        launches = rt.launches
        outputs = layer.forward(x, rows)
        merges = 0 if mode is None and not sequences else 1
        assert rt.launches - launches == 2 * (1 + 1) + merges  # each layer's input product and time loop
        dy = [device(np.ones(t.shape), np.float32) for t in (outputs if isinstance(outputs, list) else [outputs])]
        layer.backward(dy[0], rows, True, state_grads=dy[1:])
        assert rt.launches - launches == 2 * alone + 2 * merges + 1


@FORMS
@pytest.mark.parametrize("mode", ["concat", None])
def test_branch_queue_trains_the_same(rt, monkeypatch, mode, whole):
    """On a GPU the backward layer runs on the runtime's branch queue (Runtime.branch), beside
    the forward layer on the main queue. A CPU runtime has none: here one is made, with a side
    queue as a GPU has, and training (a Dense below, so that the input's gradient is summed from
    both queues' layers) comes out the same to the bit as on one queue."""
    joins = []
    join = type(rt).join_branch
    monkeypatch.setattr(type(rt), "join_branch", lambda self: joins.append(self.branch_event is not None) or join(self))

    def trained(queues: bool):
        for name in ("branch_queue", "side_queue"):
            monkeypatch.setattr(rt, name, cl.CommandQueue(rt.context, rt.device) if queues else None)
        x = Input((6, 3))
        outputs = Bidirectional(GRU(5, return_sequences=True, whole_sequence=whole), merge_mode=mode)(Dense(4)(x))
        parts = [Flatten()(t) for t in (outputs if isinstance(outputs, list) else [outputs])]
        model = clnet.Model(x, Dense(2, "softmax")(Concatenate()(parts) if len(parts) > 1 else parts[0]), seed=5)
        model.compile(clnet.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
        rng = np.random.default_rng(1)
        model.fit(rng.normal(size=(64, 6, 3)), rng.integers(0, 2, 64), batch_size=16, epochs=2, verbose=0,
                  shuffle=False)
        return model.get_weights()

    alone = trained(False)
    assert not any(joins)
    branched = trained(True)
    assert sum(joins) == 2 * 2 * 4  # forward and backward, 4 steps of 2 epochs (predict: none here)
    for a, b in zip(alone, branched, strict=True):
        np.testing.assert_array_equal(a, b)


def test_learns_what_needs_both_directions(rt):
    """The class is the sign of a sequence's first step, read after its last: a Bidirectional
    LSTM without return_sequences has it in its backward layer's final state at once."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(256, 12, 2)).astype(np.float32)
    y = (x[:, 0, 0] > 0).astype(np.int64)
    model = clnet.Sequential([Input((12, 2)), Bidirectional(LSTM(8)), Dense(2, "softmax")], seed=1)
    model.compile(clnet.optimizers.Adam(0.02), "sparse_categorical_crossentropy", ["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=10, verbose=0).history
    assert history["accuracy"][-1] > 0.95, history["accuracy"]


def test_config_save_summary_and_sharing(rt, tmp_path):
    """Keras's config (the forward and backward layers' configs, named forward_lstm and
    backward_lstm), save and exact resume, summary, and a layer called twice sharing its weights."""
    rng = np.random.default_rng(8)
    layer = Bidirectional(LSTM(4, return_sequences=True, name="lstm"), merge_mode="sum")
    assert (layer.forward_layer.name, layer.backward_layer.name) == ("forward_lstm", "backward_lstm")
    assert (layer.forward_layer.go_backwards, layer.backward_layer.go_backwards) == (False, True)
    a, b = Input((5, 3)), Input((5, 3))
    y = Dense(2, "softmax")(Flatten()(clnet.layers.Add()([layer(a), layer(b)])))
    model = clnet.Model([a, b], y, seed=2)
    config = model.get_config()
    entry = config["layers"][2]
    assert entry["class_name"] == "Bidirectional" and entry["config"]["merge_mode"] == "sum"
    assert entry["config"]["layer"]["config"]["name"] == "forward_lstm"
    assert entry["config"]["backward_layer"]["config"]["go_backwards"] is True
    assert clnet.Model.from_config(config).get_config() == config
    assert [w.shape for w in model.get_weights()[:6]] == [(3, 16), (4, 16), (16,)] * 2
    xs, target = [rng.normal(size=(8, 5, 3)), rng.normal(size=(8, 5, 3))], rng.integers(0, 2, 8)
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(xs, target, batch_size=4, epochs=1, verbose=0)
    # Shared: the second call's gradients add to the first's. Swapping the inputs changes nothing.
    np.testing.assert_allclose(model.predict(xs), model.predict(xs[::-1]), rtol=1e-6)
    model.save(tmp_path / "bidirectional.h5")
    loaded = clnet.load_model(tmp_path / "bidirectional.h5")
    np.testing.assert_array_equal(loaded.predict(xs), model.predict(xs))
    for m in (model, loaded):
        m.fit(xs, target, batch_size=4, epochs=1, verbose=0)
    for got, want in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    text = []
    model.summary(file=type("F", (), {"write": lambda self, s: text.append(s)})())
    assert any("bidirectional (Bidirectional)" in line and "(None, 5, 4)" in line and "256" in line
               for line in "".join(text).splitlines()), "".join(text)


def test_sequential_and_errors(rt):
    x = Input((5, 3))
    with pytest.raises(ValueError, match="Bidirectional layer must be a SimpleRNN, LSTM or GRU instance, got Dense"):
        Bidirectional(Dense(3))
    with pytest.raises(ValueError, match="merge_mode must be one of 'sum', 'mul', 'ave', 'concat' or None, got 'max'"):
        Bidirectional(LSTM(3), merge_mode="max")
    with pytest.raises(ValueError, match="must have different go_backwards, got False for both"):
        Bidirectional(LSTM(3), backward_layer=LSTM(3))
    with pytest.raises(ValueError, match="must have the same return_sequences, got False and True"):
        Bidirectional(LSTM(3), backward_layer=LSTM(3, go_backwards=True, return_sequences=True))
    with pytest.raises(ValueError, match="must have the same units, got 3 and 4"):
        Bidirectional(LSTM(3), backward_layer=GRU(4, go_backwards=True))
    with pytest.raises(ValueError, match=r"takes initial_state: the forward layer's states, then the backward "
                                         r"layer's, 4 tensors of shapes \[\(None, 3\), \(None, 3\), \(None, 3\), "
                                         r"\(None, 3\)\]; got"):
        Bidirectional(LSTM(3))(x, initial_state=[Input((3,)), Input((3,))])
    with pytest.raises(ValueError, match=r"expects samples of shape \(timesteps, features\), got input_shape \(5,\)"):
        Bidirectional(GRU(3))(Input((5,)))
    with pytest.raises(ValueError, match="should have a single output tensor; Bidirectional 'b' has 2"):
        clnet.Sequential([Input((5, 3)), Bidirectional(GRU(3), merge_mode=None, name="b")])
    with pytest.raises(ValueError, match=r"expects 6 weight arrays \(the forward layer's 3, then the backward layer's\)"):
        clnet.Sequential([Input((5, 3)), Bidirectional(GRU(3))]).layers[0].set_weights([np.zeros((3, 9))])
    # Another backward layer: its own activation, its name kept.
    model = clnet.Sequential([Input((5, 3)), Bidirectional(LSTM(3), backward_layer=LSTM(3, "relu", go_backwards=True,
                                                                                       name="back"))])
    assert model.layers[0].backward_layer.name == "back"
    assert model.layers[0].backward_layer.activation.name == "relu"
    assert model.predict(np.ones((2, 5, 3))).shape == (2, 6)
