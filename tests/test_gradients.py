"""Gradient checks in float64: every layer x activation x loss, weights and inputs, against
central differences of the loss the device computes."""
import numpy as np
import pytest

import clnet
from clnet.layers import Activation, Dense, Flatten, Input, Softmax
from clnet.products import tile_candidates
from reference import EVERY_ENTRY, assert_gradients_close, derivative_along, gradient_probes

ACTIVATIONS = {"linear": {"a": 1.3, "b": 0.2}, "sigmoid": {"a": 1.5, "b": 0.3}, "tanh": {}, "relu": {},
               "lrelu": {"a": 0.2}, "swish": {"b": 1.2}, "gelu": {}, "softplus": {}, "softmax": {}}
# The output activation each loss is normally used with (folded into the loss's gradient where it can).
OUTPUT_FOR = {"mse": None, "mae": "linear", "categorical_crossentropy": "softmax", "binary_crossentropy": "sigmoid"}
H = 1e-6
TOLERANCE = 1e-6


def targets(loss, rows, cols, rng):
    if loss == "categorical_crossentropy":
        return rng.integers(0, cols, rows)          # integer labels, one-hot on the device
    if loss == "binary_crossentropy":
        return rng.integers(0, 2, (rows, cols)).astype(float)
    return rng.normal(size=(rows, cols))


def relative_error(analytic, numeric):
    scale = max(np.linalg.norm(analytic), np.linalg.norm(numeric), 1e-12)
    return np.linalg.norm(analytic - numeric) / scale


def gradient_error(loss_at, array, analytic, put=lambda: None) -> tuple[float, float]:
    """The relative error of `analytic`, the gradient of loss_at() with respect to `array`
    (changed in place and restored; `put` makes a change seen), against central differences at
    reference.gradient_probes: the larger of the entries' and the directions', and the norm of
    the numeric derivatives (near 0: the check would be vacuous)."""
    errors, norm = [], 0.0
    for probes in gradient_probes(array.shape):
        if not probes:
            continue
        numeric = np.array([derivative_along(loss_at, array, probe, H, put) for probe in probes])
        wanted = np.array([np.sum(analytic * probe) for probe in probes])
        # Against the whole gradient's norm, as entry by entry, which a Gaussian direction's
        # derivative has on average: a few sampled entries near 0 are not a relative error of 1.
        scale = max(np.linalg.norm(wanted), np.linalg.norm(numeric), np.linalg.norm(analytic), 1e-12)
        errors.append(np.linalg.norm(wanted - numeric) / scale)
        norm = max(norm, np.linalg.norm(numeric))
    return max(errors), norm


def check_model(model, x, y, rng, training=False, constant=(), ids=()):
    """`training`: differentiate the training-mode loss (Dropout's mask of this step, batch
    statistics), which compute_gradients returns, instead of evaluate's. `constant`: indices of
    weights the loss does not depend on by construction (attention over one key, whose softmax
    is 1, ignores the query and key weights; a recurrent kernel over one time step meets only the
    zero initial state), whose gradients must be zero. `ids`: indices of inputs that are token
    ids (an Embedding's, which no small change moves), not differentiated."""
    model.compile(clnet.optimizers.SGD(), model.loss_name)
    _, grads, input_grad = model.compute_gradients(x, y)
    # The whole batch at once (a masked loss averages per batch, so batches of a few would differ).
    samples = len(x[0]) if isinstance(x, list) else len(x)
    loss_at = ((lambda: model.compute_gradients(x, y)[0]) if training
               else (lambda: model.evaluate(x, y, batch_size=samples)))
    weights = model.get_weights()
    trainable = [p.trainable for layer in model.layers for p in layer.parameters]
    for i, (w, a) in enumerate(zip(weights, grads)):
        assert a.shape == w.shape
        if not trainable[i]:  # the loss does not depend on it; its gradient is reported as zeros
            assert not a.any(), f"weight {i} is not trainable but has a gradient"
            continue
        error, norm = gradient_error(loss_at, w, a, lambda: model.set_weights(weights))
        if i in constant:
            assert np.abs(a).max() < 1e-12 and norm < 1e-8, f"weight {i} should not matter"
            continue
        assert norm > 1e-8, f"weight {i}: the check would be vacuous"
        assert error < TOLERANCE, f"weight {i}: relative error {error:.2e}"
    # A model of several inputs takes and returns a list: one array (and gradient) per input.
    inputs, input_grads = (x, input_grad) if isinstance(x, list) else ([x], [input_grad])
    for number, (part, a) in enumerate(zip(inputs, input_grads)):
        if number in ids:
            continue
        error, _ = gradient_error(loss_at, part, a)
        assert error < TOLERANCE, f"input {number}: {error:.2e}"


def build(layers, loss, seed=3):
    model = clnet.Sequential(layers, floatx="float64", seed=seed)
    model.loss_name = loss
    return model


@pytest.mark.parametrize("loss", sorted(OUTPUT_FOR))
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_dense_and_activation_layers(fp64, loss, activation):
    """Input -> Flatten -> Dense(act) -> Activation(act) -> Dense(output activation of the loss)."""
    rng = np.random.default_rng(7)
    params = ACTIVATIONS[activation]
    output = OUTPUT_FOR[loss] or activation
    model = build([Input((2, 3)), Flatten(), Dense(5, activations_with(activation, params)),
                   Activation(activation, **params),
                   Dense(3, activations_with(output, ACTIVATIONS[output]))], loss)
    x = rng.normal(size=(4, 2, 3))
    check_model(model, x, targets(loss, 4, 3, rng), rng)


def activations_with(name, params):
    return clnet.activations.get(name, **params)


@pytest.mark.parametrize("loss,output", [("categorical_crossentropy", "sigmoid"),   # not folded
                                         ("binary_crossentropy", "softmax"),        # not folded
                                         ("mse", "softmax")])
def test_unfolded_output_activations(fp64, loss, output):
    rng = np.random.default_rng(11)
    model = build([Dense(4, "tanh", input_shape=(3,)), Dense(3, output)], loss)
    check_model(model, rng.normal(size=(5, 3)), targets(loss, 5, 3, rng), rng)


@pytest.mark.parametrize("loss", ["categorical_crossentropy", "mse"])
def test_softmax_layer_and_dense_without_bias(fp64, loss):
    """A standalone Softmax layer (folded into cross-entropy, or differentiated for MSE)."""
    rng = np.random.default_rng(5)
    model = build([Input((3,)), Dense(6, "swish", use_bias=False), Dense(4), Softmax()], loss)
    check_model(model, rng.normal(size=(3, 3)), targets(loss, 3, 4, rng), rng)


def test_single_output_binary(fp64):
    rng = np.random.default_rng(2)
    model = build([Input((4,)), Dense(3, "relu"), Dense(1, "sigmoid")], "binary_crossentropy")
    check_model(model, rng.normal(size=(6, 4)), rng.integers(0, 2, 6).astype(float), rng)


def test_dense_input_gradient_forms(fp64):
    """Each form of the input gradient the device has (the CPU form's from W's rows and, HG_T, from
    W^T, which the launch making delta writes; the GPU's tiles), through three Dense layers of
    sizes no multiple of a vector width; and the CPU form with several vectors of columns a
    work-item (FF_CN, DW_CN, HG_CN) in both."""
    forms = {}
    for tiles in tile_candidates(clnet.runtime(), np.float64):
        forms.setdefault(tiles.get("HG_T"), tiles)
    columns = [{**tiles, **{f"{k}_CN": 2 for k in ("FF", "DW", "HG")}} for tiles in forms.values() if "TILE" not in tiles]
    for tiles in [*forms.values(), *columns]:
        rng = np.random.default_rng(13)
        model = build([Input((7,)), Dense(11, "tanh", tiles=tiles), Dense(5, "gelu", tiles=tiles),
                       Dense(3, "softmax", tiles=tiles)], "categorical_crossentropy")
        check_model(model, rng.normal(size=(9, 7)), targets("categorical_crossentropy", 9, 3, rng), rng)


def test_gradients_match_float32(rt):
    """The float32 model's gradients agree with the float64 model's to float32 precision."""
    rng = np.random.default_rng(9)
    x, y = rng.normal(size=(16, 10)), rng.integers(0, 4, 16)
    results = []
    for floatx in ("float64", "float32"):
        model = clnet.Sequential([Dense(17, "relu", input_shape=(10,)), Dense(4, "softmax")], floatx=floatx, seed=4)
        model.compile("sgd", "categorical_crossentropy")
        results.append(model.compute_gradients(x, y))
    (loss64, g64, x64), (loss32, g32, x32) = results
    assert abs(loss64 - loss32) < 1e-5 * abs(loss64)
    for a, b in zip(g64, g32):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(x32, x64, rtol=1e-4, atol=1e-6)


def test_the_gradient_checks_find_a_wrong_entry_anywhere():
    """The probed checks (reference.gradient_probes) on an array of more than EVERY_ENTRY values
    pass the true gradient and fail it with any one entry off by 1e-4 of the gradient's norm,
    sampled or not: check_model's relative error, and assert_gradients_close's bounds with one off
    by 1e-2 (its directions sense rtol and atol over the whole array)."""
    rng = np.random.default_rng(0)
    w, c = rng.normal(size=(7, 11)), rng.normal(size=(7, 11))
    loss = lambda: np.sum(np.sin(w) * c)
    true = np.cos(w) * c
    assert w.size > EVERY_ENTRY
    assert gradient_error(loss, w, true)[0] < TOLERANCE
    assert_gradients_close(np.sin, [w], c, [true], rtol=1e-4, atol=2e-5)
    for j in range(w.size):
        wrong = true.copy()
        wrong.flat[j] += 1e-4 * np.linalg.norm(true)
        assert gradient_error(loss, w, wrong)[0] > TOLERANCE, j
        wrong.flat[j] = true.flat[j] + 1e-2 * np.linalg.norm(true)  # past rtol and atol at any entry
        with pytest.raises(AssertionError):
            assert_gradients_close(np.sin, [w], c, [wrong], rtol=1e-4, atol=2e-5)
