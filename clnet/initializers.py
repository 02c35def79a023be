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


# The built-in initializers also take `fans`, for a layer whose kernel holds many independent
# kernels (LocallyConnected1D: one per position) that each should be scaled as one.
def glorot_uniform(shape, rng, fans=None):
    """Keras's `"glorot_uniform"` (the Dense and convolution kernels' default): uniform on [-limit,
    limit], limit = sqrt(6 / (fan_in + fan_out)). The fans come from `shape` as Keras computes them
    (a convolution kernel's count its receptive field), or from `fans` where a layer gives them."""
    limit = np.sqrt(6.0 / sum(fans or _fans(shape)))
    return rng.uniform(-limit, limit, shape)


def glorot_normal(shape, rng, fans=None):
    """Keras's `"glorot_normal"`: a normal truncated at two standard deviations, of stddev sqrt(2 /
    (fan_in + fan_out)). The fans come from `shape` as Keras computes them, or from `fans` where a
    layer gives them."""
    return _truncated_normal(shape, rng, np.sqrt(2.0 / sum(fans or _fans(shape))))


def he_uniform(shape, rng, fans=None):
    """Keras's `"he_uniform"`: uniform on [-limit, limit], limit = sqrt(6 / fan_in). The fans come
    from `shape` as Keras computes them, or from `fans` where a layer gives them."""
    limit = np.sqrt(6.0 / (fans or _fans(shape))[0])
    return rng.uniform(-limit, limit, shape)


def he_normal(shape, rng, fans=None):
    """Keras's `"he_normal"`: a normal truncated at two standard deviations, of stddev sqrt(2 /
    fan_in). The fans come from `shape` as Keras computes them, or from `fans` where a layer gives
    them."""
    return _truncated_normal(shape, rng, np.sqrt(2.0 / (fans or _fans(shape))[0]))


def uniform(shape, rng):
    """Keras's `"uniform"`: uniform on [-0.05, 0.05] (Keras's RandomUniform defaults; the
    Embedding table's default)."""
    # Keras's "uniform": RandomUniform(minval=-0.05, maxval=0.05), Embedding's default.
    return rng.uniform(-0.05, 0.05, shape)


def random_uniform(shape, rng):
    """Keras's `"random_uniform"` with its defaults: uniform on [-0.05, 0.05], as `"uniform"`."""
    # Keras's RandomUniform defaults (-0.05, 0.05), as "uniform".
    return uniform(shape, rng)


def random_normal(shape, rng):
    """Keras's `"random_normal"` with its defaults: normal of mean 0 and stddev 0.05."""
    # Keras's RandomNormal defaults: mean 0, stddev 0.05.
    return rng.normal(0.0, 0.05, shape)


def truncated_normal(shape, rng):
    """Keras's `"truncated_normal"` with its defaults: normal of mean 0 and stddev 0.05, values
    beyond two standard deviations drawn again."""
    # Keras's TruncatedNormal defaults: stddev 0.05, redrawn beyond two standard deviations.
    return _truncated_normal(shape, rng, 0.05 * 0.87962566103423978)


def lecun_uniform(shape, rng, fans=None):
    """Keras's `"lecun_uniform"`: uniform on [-limit, limit], limit = sqrt(3 / fan_in). The fans
    come from `shape` as Keras computes them, or from `fans` where a layer gives them."""
    limit = np.sqrt(3.0 / (fans or _fans(shape))[0])
    return rng.uniform(-limit, limit, shape)


def lecun_normal(shape, rng, fans=None):
    """Keras's `"lecun_normal"`: a normal truncated at two standard deviations, of stddev sqrt(1 /
    fan_in). The fans come from `shape` as Keras computes them, or from `fans` where a layer gives
    them."""
    return _truncated_normal(shape, rng, np.sqrt(1.0 / (fans or _fans(shape))[0]))


def zeros(shape, rng):
    """Keras's `"zeros"`: an array of zeros of `shape` (biases' default); `rng` is not used."""
    return np.zeros(shape)


def ones(shape, rng):
    """Keras's `"ones"`: an array of ones of `shape` (the normalisations' gamma default); `rng` is
    not used."""
    return np.ones(shape)


def orthogonal(shape, rng):
    """Keras's `"orthogonal"` (gain 1), the recurrent kernels' default: `shape` seen as (rows, last
    axis), its rows orthonormal where there are fewer rows than columns, else its columns."""
    # Keras's Orthogonal (gain 1): the Q of a normal matrix's QR, signs fixed by R's diagonal,
    # transposed when there are fewer rows than columns, so the rows (a recurrent kernel's
    # (units, gates * units)) are orthonormal.
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    q, r = np.linalg.qr(rng.standard_normal((max(rows, cols), min(rows, cols))))
    q *= np.sign(np.diag(r))
    return (q.T if rows < cols else q).reshape(shape)


def _truncated_normal(shape, rng, stddev):
    # Keras draws from a normal truncated at two standard deviations, rescaled so that the
    # result has the requested standard deviation (0.8796 is the truncated normal's stddev).
    sample = rng.standard_normal(shape)
    outside = np.abs(sample) > 2
    while outside.any():
        sample[outside] = rng.standard_normal(outside.sum())
        outside = np.abs(sample) > 2
    return sample * stddev / 0.87962566103423978


INITIALIZERS = {f.__name__: f for f in (glorot_uniform, glorot_normal, he_uniform, he_normal, lecun_uniform, lecun_normal,
                                        uniform, random_uniform, random_normal, truncated_normal, orthogonal, zeros,
                                        ones)}


def draw(initializer, shape, rng, fans):
    """`initializer`'s values for `shape`, scaled for `fans` where it scales by fans (a callable of
    the user's is given the shape alone)."""
    return initializer(shape, rng, fans=fans) if initializer in _SCALED_BY_FANS else initializer(shape, rng)


_SCALED_BY_FANS = (glorot_uniform, glorot_normal, he_uniform, he_normal, lecun_uniform, lecun_normal)


def get(identifier):
    """The initializer a layer's `*_initializer` argument names: one of this module's names
    (`"glorot_uniform"`, `"he_normal"`, `"orthogonal"`, `"zeros"`, ...), or a callable
    `(shape, rng) -> array` of your own, returned as it is (`rng` a `numpy.random.Generator`, the
    array float64 or anything the layer can cast). Unlike Keras, a config dict or a Keras
    initializer object is not taken; an unknown name raises a `ValueError`."""
    if callable(identifier):
        return identifier
    if identifier not in INITIALIZERS:
        raise ValueError(f"unknown initializer {identifier!r}; expected one of {sorted(INITIALIZERS)} or a callable")
    return INITIALIZERS[identifier]
