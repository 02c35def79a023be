"""TimeDistributed(layer), Keras's wrapper: `layer` applied to every time step of a (time, ...)
input, with one set of weights. The layers that act on the last axis alone already do that here,
over all the leading axes in one launch (Dense: one product over batch × time rows), so for them
the wrapper is the layer's own call; a layer that needs a step's whole sample (a convolution per
frame) is not supported yet, and the wrapper says so when it is made."""
from __future__ import annotations

from .activation import Activation, Softmax
from .base import Layer
from .dense import Dense
from .dropout import Dropout
from .embedding import Embedding
from .layer_normalization import LayerNormalization
from .relu import ELU, LeakyReLU, ReLU


def _per_position(layer: Layer) -> bool:
    """Whether `layer` computes each position of its leading axes on its own, from the last axis."""
    # Softmax is an Activation: its axis is asked first, or the Activation check would let any axis through.
    if isinstance(layer, (Softmax, LayerNormalization)):
        return layer.axis == -1
    if isinstance(layer, (Dense, Activation, ReLU, LeakyReLU, ELU, Embedding)):
        return True
    if isinstance(layer, Dropout):
        return layer.noise_shape is None  # (a noise shape names the sample's axes)
    return False


class TimeDistributed(Layer):
    """Keras's `TimeDistributed(layer)`: `layer` applied to every time step of a `(batch, time,
    ...)` input, with one set of weights. The layers clnet takes act on the last axis alone and
    already apply to every position of the leading axes in one launch (Dense: one product over batch
    × time rows), so the wrapper calls `layer` itself on the whole input: Dense, Activation, ReLU,
    LeakyReLU, ELU, Embedding, Dropout without a `noise_shape`, and Softmax and LayerNormalization
    over axis -1. Another layer (a convolution per frame) raises `NotImplementedError` when the
    wrapper is made; an input of fewer than three axes raises a `ValueError`. Its further keyword
    arguments are `name` and `input_shape`."""
    mask_handling = "propagate"  # (the layers it applies work a step at a time)

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(layer, Layer):
            raise TypeError(f"TimeDistributed wraps a clnet layer, got {type(layer).__name__}")
        if not _per_position(layer):
            raise NotImplementedError(
                f"TimeDistributed({layer.describe()}) is not supported yet: clnet applies Dense, Activation, "
                "ReLU/LeakyReLU/ELU, Dropout, Embedding, and Softmax or LayerNormalization over the last axis to "
                "every time step (those layers already act on the last axis alone)")
        self.layer = layer

    def call(self, inputs, training=None):
        if len(inputs.shape) < 3:
            raise ValueError(f"{self.describe()} needs inputs of shape (batch, time, ...), got {inputs.shape}")
        return self.layer(inputs, training=training)
