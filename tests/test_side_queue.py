"""Kernels launched beside the main queue (Runtime.side_queue): on a GPU, the gradient sums, the
weight gradients that no input gradient waits for, and the attention's dL/dV and dL/dK. On a CPU
runtime there is no side queue; here one is made, so that the GPU forms' side launches run
concurrently with the main queue's work on whichever device runs the tests, and training must
come out the same to the bit."""
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clnet
from clnet.cl.runtime import Kernel
from clnet.cl.tuning import best_seconds
from clnet.layers import Dense, LayerNormalization, MultiHeadAttention, layer_normalization
from clnet.products import tuner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import tiny_gpt  # noqa: E402

TILES = {"VW": 4, "TILE": 16, "WPT": 4, "TK": 4}  # the GPU form of Dense, with small tiles


@pytest.fixture
def gpu_forms(monkeypatch):
    """Dense's tiled form (split-K where a layer's result is one tile: the attention's output
    Dense, 16 x 16), the attention's products form and the norm's chunked form, as a GPU runs them."""
    monkeypatch.setattr(tuner, "matrix_tiles", lambda rt, dtype, n_in, units, rows=None, half=None: TILES)
    monkeypatch.setattr(layer_normalization, "chunked_form", lambda rt: True)
    init = MultiHeadAttention.__init__
    monkeypatch.setattr(MultiHeadAttention, "__init__", lambda self, *args, **kwargs: init(self, *args, tiles=TILES,
                                                                                           **kwargs))


def trained(rt, monkeypatch, side: bool):
    """The tiny GPT (16 wide, 2 blocks, context 8) after two epochs of 4 steps, with or without
    the side queue; its weights and the kernels marked `beside`, by name, per step."""
    monkeypatch.setattr(rt, "side_queue", cl.CommandQueue(rt.context, rt.device) if side else None)
    beside = Counter()
    enqueue = Kernel.enqueue  # where every launch goes, by position, by name or bound

    def counted(kernel, global_size, local_size, flops, beside_main, *queue_and_events):
        if beside_main:
            beside[kernel.name] += 1
        return enqueue(kernel, global_size, local_size, flops, beside_main, *queue_and_events)

    monkeypatch.setattr(Kernel, "enqueue", counted)
    model = tiny_gpt.build_model(11, 8, 16, 2, 2, seed=4)
    model.compile(clnet.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 11, (256, 8)).astype(np.float32)
    y = rng.integers(0, 11, (256, 8))
    before = rt.launches_beside
    model.fit(x, y, batch_size=64, epochs=2, verbose=0, shuffle=False)
    assert rt.launches_beside - before == (sum(beside.values()) if side else 0)
    return model, {name: count / 8 for name, count in beside.items()}


def dense_layers(model):
    """Every Dense of the model, those inside MultiHeadAttention too."""
    for layer in model.layers:
        if isinstance(layer, MultiHeadAttention):
            yield from (*layer._projection_layers(), layer.output_dense)
        elif isinstance(layer, Dense):
            yield layer


def test_training_beside_matches_one_queue(rt, monkeypatch, gpu_forms):
    one, _ = trained(rt, monkeypatch, side=False)
    two, beside = trained(rt, monkeypatch, side=True)
    norms = sum(isinstance(layer, LayerNormalization) for layer in two.layers)
    denses = list(dense_layers(two))
    splits = sum(layer.plan.splits(layer.plan.capacity)[0] > 1 for layer in denses)
    # The weight gradients of the linear Dense layers and of the softmax head, whose softmax the
    # loss folds in (its 11 units padded to 12): their input gradients read dL/dy (dL/dz).
    reading_dy = sum(layer.activation.name in ("linear", "softmax") for layer in denses)
    attentions = [layer for layer in two.layers if isinstance(layer, MultiHeadAttention)]
    assert norms == 5 and splits >= 1 and reading_dy >= 4 and all(layer.tiles for layer in attentions)
    assert beside == {"CalcDeltaWeightsLayerNorm": norms, "SumChunksLayerNorm": norms, "SumSplits": splits,
                      "CalcDeltaWeights": reading_dy, "AttentionProduct": 2 * len(attentions),  # dL/dV, dL/dK
                      "CountEmbeddingIds": 1, "CalcDeltaWeightsEmbedding": 1, "CalcDeltaWeightsPositionEmbedding": 1}
    for a, b in zip(one.get_weights(), two.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_host_reads_wait_for_the_side_queue(rt, monkeypatch, gpu_forms):
    """A layer's backward called alone, then its gradients read: the read joins the side queue."""
    monkeypatch.setattr(rt, "side_queue", cl.CommandQueue(rt.context, rt.device))
    rng = np.random.default_rng(1)
    layer = clnet.layers.LayerNormalization()
    from reference import device, layer_alone
    layer = layer_alone(layer, (300,), 64, np.float32)
    x = rng.normal(size=(64, 300)).astype(np.float32)
    dy = rng.normal(size=(64, 300)).astype(np.float32)
    layer.forward(device(x, np.float32), 64)
    before = rt.launches_beside
    layer.backward(device(dy, np.float32), 64, False)
    assert rt.launches_beside - before == 2
    xhat = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-3)
    dgamma, dbeta = layer.gradients()
    np.testing.assert_allclose(dgamma, (dy * xhat).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dbeta, dy.sum(0), rtol=1e-4, atol=1e-4)


def test_timing_waits_for_the_side_queue(rt, monkeypatch, gpu_forms):
    """The tuners' best_seconds times a run until the side queue's work is done too."""
    monkeypatch.setattr(rt, "side_queue", cl.CommandQueue(rt.context, rt.device))
    from reference import device, layer_alone
    layer = layer_alone(clnet.layers.LayerNormalization(), (40,), 64, np.float32)
    layer.forward(device(np.ones((64, 40)), np.float32), 64)
    dy = device(np.ones((64, 40)), np.float32)
    joined = []  # the side queue's last kernel at each join
    join = rt.join_side
    monkeypatch.setattr(rt, "join_side", lambda: (joined.append(rt.side_event), join())[1])
    best_seconds(rt, lambda: layer.backward(dy, 64, False), repeats=2)
    assert len(joined) == 3 and all(event is not None for event in joined)  # a join after each run
    assert all(event.command_execution_status == cl.command_execution_status.COMPLETE for event in joined)


def test_recurrent_weight_gradients_beside(rt, monkeypatch):
    """Stacked recurrent layers in the sequence form (a GPU's): each layer's two weight-gradient
    products and their slices' sum run beside; the second layer's input gradient does not wait.
    (On a GPU the Dense on top, linear, runs its weight gradient, and any split-K sum, beside too.)"""
    from clnet.layers import GRU, LSTM, Input
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(40, 6, 3)), rng.normal(size=(40, 2))

    def train(side):
        monkeypatch.setattr(rt, "side_queue", cl.CommandQueue(rt.context, rt.device) if side else None)
        inputs = Input((6, 3))
        hidden = LSTM(8, return_sequences=True, whole_sequence=True)(inputs)
        model = clnet.Model(inputs, Dense(2)(GRU(4, whole_sequence=True)(hidden)), seed=1)
        model.compile(clnet.optimizers.Adam(1e-2), "mse")
        before = rt.launches_beside
        model.fit(x, y, batch_size=20, epochs=2, verbose=0, shuffle=False)
        return model, (rt.launches_beside - before) / 4

    one, none_beside = train(False)
    two, beside = train(True)
    top = two.layers[-1]
    assert none_beside == 0 and beside == 2 * 3 + (top.tiled + top.plan.splits(top.plan.capacity)[0] > 1)
    for a, b in zip(one.get_weights(), two.get_weights()):
        np.testing.assert_array_equal(a, b)
