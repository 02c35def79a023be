"""clnet's convolution and pooling layers given Keras's weights (as Keras's get_weights returns
them) reproduce Keras's outputs: fixtures/keras_conv.npz, written by fixtures/make_keras_conv.py
with real Keras, holds the inputs, weights and outputs of the same cases."""
from pathlib import Path

import numpy as np
import pytest

import clnet
from clnet.layers import (AveragePooling1D, AveragePooling2D, Conv1D, Conv2D, GlobalAveragePooling2D,
                          GlobalMaxPooling1D, Input, MaxPooling1D, MaxPooling2D, ZeroPadding2D)

FIXTURE = np.load(Path(__file__).parent / "fixtures" / "keras_conv.npz")

# The same layers as in make_keras_conv.py, with clnet's classes.
CASES = {
    "conv2d_same_even_stride2": lambda: Conv2D(4, (2, 4), strides=2, padding="same"),
    "conv2d_valid_dilated": lambda: Conv2D(5, 3, dilation_rate=2, activation="relu"),
    "conv2d_same_strides_2_3": lambda: Conv2D(3, (4, 2), strides=(2, 3), padding="same"),
    "conv2d_one_pixel": lambda: Conv2D(2, 3, padding="same", activation="tanh"),
    "conv1d_same_stride2": lambda: Conv1D(4, 3, strides=2, padding="same"),
    "conv1d_dilated": lambda: Conv1D(3, 2, dilation_rate=3, use_bias=False),
    "maxpool2d_same": lambda: MaxPooling2D(2, padding="same"),
    "maxpool2d_overlapping": lambda: MaxPooling2D(3, strides=1, padding="same"),
    "avgpool2d_same": lambda: AveragePooling2D(3, strides=2, padding="same"),
    "avgpool2d_valid": lambda: AveragePooling2D((2, 3), strides=(1, 2)),
    "maxpool1d_same": lambda: MaxPooling1D(2, padding="same"),
    "avgpool1d_valid": lambda: AveragePooling1D(3, 2),
    "globalavg2d": lambda: GlobalAveragePooling2D(),
    "globalmax1d": lambda: GlobalMaxPooling1D(),
    "zeropadding2d": lambda: ZeroPadding2D(((1, 0), (2, 1))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_keras(rt, name):
    x, y = FIXTURE[f"{name}/x"], FIXTURE[f"{name}/y"]
    weights = [FIXTURE[f"{name}/w{i}"] for i in range(2) if f"{name}/w{i}" in FIXTURE]
    model = clnet.Sequential([Input(x.shape[1:]), CASES[name]()], seed=0)
    model.build(x.shape[1:])
    assert [w.shape for w in model.get_weights()] == [w.shape for w in weights]
    model.set_weights(weights)
    for got, given in zip(model.get_weights(), weights):
        np.testing.assert_array_equal(got, given)
    np.testing.assert_allclose(model.predict(x), y, rtol=1e-5, atol=1e-5)
