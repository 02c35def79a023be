"""to_categorical: integer class ids to one-hot rows, as keras.utils.to_categorical."""
from __future__ import annotations

import numpy as np

from ._checks import ArgumentTypeError, integer


def to_categorical(x, num_classes=None) -> np.ndarray:
    """One-hot encode the integer class ids in `x`.

    Args:
        x: array-like of class ids, integers from 0 to num_classes - 1, of any shape (a scalar
            too). Floats are accepted where they are whole numbers (2.0), bools as 0/1.
        num_classes: the number of classes, a positive integer; None (the default) infers it
            as max(x) + 1.

    Returns:
        A float64 array (Keras's type for numpy input) of shape x.shape + (num_classes,), 1 at
        each id's class and 0 elsewhere.
        As in Keras, a trailing axis of size 1 is dropped first when x has two or more axes:
        labels of shape (n, 1) give (n, num_classes), not (n, 1, num_classes); labels of shape
        (1,) keep it and give (1, num_classes).

    Raises:
        TypeError: x holds something other than numbers, or num_classes is not an integer.
        ValueError: a label is negative, not a whole number (1.5, NaN), or >= num_classes;
            num_classes < 1; or x is empty and num_classes is None (nothing to infer it from).
    """
    labels = _class_ids(x)
    shape = labels.shape
    if len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]  # Keras's squeeze: a column of labels is one label per sample
    flat = labels.reshape(-1)
    if num_classes is None:
        if flat.size == 0:
            raise ValueError(f"x holds no labels (shape {labels.shape}) and num_classes is None, so the number of "
                             "classes cannot be inferred: pass num_classes")
        num_classes = int(flat.max()) + 1
    else:
        num_classes = integer("num_classes", num_classes, minimum=1)
        too_large = labels >= num_classes
        if too_large.any():
            where = _first(too_large)
            raise ValueError(f"x holds label {labels[where]} at index {where}, but num_classes is {num_classes}: "
                             f"labels must be in 0..{num_classes - 1}")
    one_hot = np.zeros((flat.size, num_classes), np.float64)
    one_hot[np.arange(flat.size), flat] = 1
    return one_hot.reshape(shape + (num_classes,))


def _class_ids(x) -> np.ndarray:
    """x as an int64 array of ids >= 0, or an error naming the first bad value and its index."""
    try:
        array = np.asarray(x)
    except (ValueError, TypeError) as error:  # e.g. a ragged list
        raise ValueError(f"x must be an array of integer class ids, got {type(x).__name__} that is not one: "
                         f"{error}") from None
    if array.dtype == bool:
        return array.astype(np.int64)
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        # Also a ValueError, which Keras raises when its int64 cast fails on such values.
        raise ArgumentTypeError(f"x must hold integer class ids, got dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.floating):
        # Keras would truncate 1.7 to 1 silently; a fractional or NaN label is a bug upstream.
        fractional = ~np.isfinite(array) | (array != np.round(array))
        if fractional.any():
            where = _first(fractional)
            raise ValueError(f"x holds {array[where]} at index {where}, which is not a whole number: "
                             "class ids must be integers")
    negative = array < 0
    if negative.any():
        where = _first(negative)
        raise ValueError(f"x holds label {array[where]} at index {where}: class ids must be >= 0")
    return array.astype(np.int64)


def _first(mask: np.ndarray) -> tuple[int, ...]:
    """The index of the first True in `mask`, as a tuple of ints (() for a scalar)."""
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))
