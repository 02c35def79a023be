"""pad_sequences: sequences of different lengths to one array, as keras.utils.pad_sequences."""
from __future__ import annotations

import numpy as np

from ._checks import choice, integer


def pad_sequences(sequences, maxlen=None, dtype="int32", padding="pre", truncating="pre", value=0.0) -> np.ndarray:
    """Pad (and truncate) sequences to one length, giving an array of shape (len(sequences), maxlen).

    Args:
        sequences: a list (any sized collection) of sequences: lists or arrays. A sequence may
            hold vectors rather than numbers: every non-empty one must then have the samples'
            shape of the first non-empty one, and the result is (len(sequences), maxlen,
            *sample_shape). Empty sequences come out as all padding.
        maxlen: the length to pad or truncate to, an integer >= 0; None (the default) is the
            longest sequence's length.
        dtype: the result's dtype, "int32" by default (values are cast as numpy casts: 1.7 in an
            int32 result is 1). For strings use object (or a numpy string dtype).
        padding: "pre" (the default) or "post": add `value` before or after each sequence.
        truncating: "pre" (the default) or "post": drop the steps of a sequence longer than
            maxlen at its beginning or at its end.
        value: the padding value, 0.0 by default. A str value needs dtype object or a string
            dtype, as in Keras: a numeric result would turn it into a number or fail.

    Returns:
        A numpy array of `dtype`.

    Raises:
        ValueError: sequences has no length (a generator: make it a list) or holds something
            that is not a sequence; a sequence's samples have another shape than the first
            non-empty one's or do not convert to dtype; padding or truncating is neither "pre"
            nor "post"; maxlen < 0; sequences is empty and maxlen is None; a str value with a
            numeric dtype.
        TypeError: maxlen is not an integer, or dtype is not a dtype.
    """
    padding = choice("padding", padding, ("pre", "post"))
    truncating = choice("truncating", truncating, ("pre", "post"))
    if not hasattr(sequences, "__len__"):  # Keras's rule too: it reads the sequences twice
        raise ValueError(f"sequences must be a list of sequences (something with a length), got "
                         f"{type(sequences).__name__}; wrap an iterator in list()")
    try:
        kind = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"dtype must be a numpy dtype or its name, got {dtype!r}: {error}") from None
    if maxlen is not None:
        maxlen = integer("maxlen", maxlen, minimum=0)

    lengths, sample_shape = [], None
    for index, sequence in enumerate(sequences):
        try:
            lengths.append(len(sequence))
        except TypeError:
            raise ValueError(f"sequences must be a list of sequences, but sequences[{index}] is "
                             f"{type(sequence).__name__} {sequence!r}, which has no length") from None
        if sample_shape is None and lengths[-1]:  # the first non-empty sequence sets the samples' shape
            sample_shape = _as_array(sequence, None, index).shape[1:]
    sample_shape = sample_shape or ()
    if maxlen is None:
        if not lengths:
            raise ValueError("sequences is empty and maxlen is None, so there is no length to pad to: pass maxlen")
        maxlen = max(lengths)

    if isinstance(value, str) and kind != object and kind.kind not in "SU":
        raise ValueError(f"value {value!r} is a str but dtype is {kind}: pass dtype=object (or a string dtype) "
                         "to pad with a string")
    shape = (len(lengths), maxlen, *sample_shape)
    try:
        padded = np.full(shape, value, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as error:
        raise ValueError(f"value {value!r} cannot fill an array of dtype {kind} and shape {shape}: {error}") from None

    for index, (sequence, length) in enumerate(zip(sequences, lengths)):
        if not length or not maxlen:
            continue  # all padding
        # Slice before converting, as Keras does: steps that are cut off are never read.
        try:
            kept = sequence[max(length - maxlen, 0):] if truncating == "pre" else sequence[:maxlen]
        except (TypeError, KeyError):
            raise ValueError(f"sequences[{index}] ({type(sequence).__name__}) cannot be sliced; each sequence "
                             "must be a list or an array") from None
        kept = _as_array(kept, dtype, index)
        if kept.ndim == 0:  # e.g. a str, which has a length but is one value to numpy
            raise ValueError(f"sequences[{index}] is {type(sequence).__name__} {sequence!r}, not a sequence of "
                             "steps; each sequence must be a list or an array")
        if kept.shape[1:] != sample_shape:
            raise ValueError(f"sequences[{index}] has samples of shape {kept.shape[1:]}, but the first non-empty "
                             f"sequence's have shape {sample_shape}; all must match")
        if padding == "post":
            padded[index, :len(kept)] = kept
        else:
            padded[index, maxlen - len(kept):] = kept
    return padded


def _as_array(sequence, dtype, index: int) -> np.ndarray:
    """sequences[index] (or its kept part) as an array, or a ValueError naming it."""
    try:
        return np.asarray(sequence, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as error:
        to = "" if dtype is None else f" of dtype {np.dtype(dtype)}"
        raise ValueError(f"sequences[{index}] cannot be made an array{to}: {error}") from None
