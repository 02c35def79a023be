"""Keras's activation functions (clnet.activations.relu(x), ...), as call() code uses them: on
symbolic tensors (an Activation or ReLU layer of the graph) and on arrays (computed now), against
numpy in float64."""
import math

import numpy as np
import pytest

from clnet import activations, layers
from clnet.model import Model

erf = np.vectorize(math.erf, otypes=[float])
REFERENCES = {
    "relu": lambda x: np.maximum(x, 0),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.2 * x),
    "elu": lambda x: np.where(x > 0, x, np.exp(x) - 1),
    "gelu": lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "softplus": lambda x: np.log1p(np.exp(x)),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "softmax": lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True),
    "linear": lambda x: x,
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_functions_on_tensors_and_arrays(rng, name):
    data = rng.normal(size=(5, 3, 7))
    function = getattr(activations, name)
    np.testing.assert_allclose(function(data.astype(np.float32)), REFERENCES[name](data), rtol=2e-5, atol=2e-6)
    x = layers.Input((3, 7))
    model = Model(x, layers.Dense(7)(function(x)), floatx="float64")
    kernel, bias = model.get_weights()
    np.testing.assert_allclose(model.predict(data), REFERENCES[name](data) @ kernel + bias, rtol=1e-12, atol=1e-12)


def test_relu_options_and_the_tanh_gelu(rng):
    data = rng.normal(size=(4, 6)) * 3
    x = data.astype(np.float32)
    np.testing.assert_allclose(activations.relu(x, negative_slope=0.1, max_value=2.0, threshold=0.5),
                               np.where(data > 0.5, np.minimum(data, 2.0), 0.1 * (data - 0.5)), rtol=1e-6, atol=1e-6)
    tanh_form = 0.5 * data * (1 + np.tanh(np.sqrt(2 / np.pi) * (data + 0.044715 * data ** 3)))
    np.testing.assert_allclose(activations.gelu(x, approximate=True), tanh_form, rtol=2e-5, atol=2e-6)
    assert activations.swish is activations.silu
