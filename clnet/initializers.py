"""Weight initializers with Keras's names and formulas. Each takes (shape, rng) with shape
(fan_in, fan_out), or a convolution kernel's (..., in, out), and returns a float64 array; the
layer casts it to its dtype."""
from __future__ import annotations

import numpy as np


def _fans(shape):
    # Keras's compute_fans: a convolution kernel's fans count its receptive field.
    if len(shape) < 2:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


def glorot_uniform(shape, rng):
    limit = np.sqrt(6.0 / sum(_fans(shape)))
    return rng.uniform(-limit, limit, shape)


def glorot_normal(shape, rng):
    return _truncated_normal(shape, rng, np.sqrt(2.0 / sum(_fans(shape))))


def he_uniform(shape, rng):
    limit = np.sqrt(6.0 / _fans(shape)[0])
    return rng.uniform(-limit, limit, shape)


def he_normal(shape, rng):
    return _truncated_normal(shape, rng, np.sqrt(2.0 / _fans(shape)[0]))


def zeros(shape, rng):
    return np.zeros(shape)


def ones(shape, rng):
    return np.ones(shape)


def _truncated_normal(shape, rng, stddev):
    # Keras draws from a normal truncated at two standard deviations, rescaled so that the
    # result has the requested standard deviation (0.8796 is the truncated normal's stddev).
    sample = rng.standard_normal(shape)
    outside = np.abs(sample) > 2
    while outside.any():
        sample[outside] = rng.standard_normal(outside.sum())
        outside = np.abs(sample) > 2
    return sample * stddev / 0.87962566103423978


INITIALIZERS = {f.__name__: f for f in (glorot_uniform, glorot_normal, he_uniform, he_normal, zeros, ones)}


def get(identifier):
    if callable(identifier):
        return identifier
    if identifier not in INITIALIZERS:
        raise ValueError(f"unknown initializer {identifier!r}; expected one of {sorted(INITIALIZERS)} or a callable")
    return INITIALIZERS[identifier]
