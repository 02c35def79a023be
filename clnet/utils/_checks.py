"""Argument checks shared by clnet.utils: each error names the argument and the value received."""
from __future__ import annotations

import numpy as np


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type. A TypeError, and a ValueError too: Keras raises ValueError
    for some of these (set_random_seed's seed), and code written for Keras catches that."""


def integer(argument: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value` as an int, else an ArgumentTypeError (not an integer) or ValueError (outside
    [minimum, maximum]).

    numpy integers are accepted; bools are not, although Python counts them as ints: True is far
    more likely a mistake than a deliberate 1."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{argument} must be an integer, got {value!r} (of type {type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{argument} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{argument} must be <= {maximum}, got {value}")
    return int(value)


def choice(argument: str, value, options: tuple[str, ...]) -> str:
    """`value` if it is one of `options`, else a ValueError listing them."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{argument} must be one of {', '.join(map(repr, options))}, got {value!r}")
    return value
