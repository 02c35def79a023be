"""set_random_seed: one call that makes a clnet program repeat, as keras.utils.set_random_seed."""
from __future__ import annotations

import random

import numpy as np

from .. import model
from ._checks import integer


def set_random_seed(seed) -> None:
    """Seed every source of randomness a clnet program draws from.

    Seeds Python's `random`, numpy's global generator (np.random.seed) and clnet's own seed
    (clnet.set_seed): the weight initialisation, dropout and shuffling of models made
    afterwards repeat exactly. A model made before the call keeps the seed it was given.

    Args:
        seed: an integer from 0 to 2**32 - 1 (numpy's global generator takes no other).

    Raises:
        TypeError: seed is not an integer (a bool or a float such as 1.0 included); the error
            is also a ValueError, which Keras raises for it.
        ValueError: seed is negative or >= 2**32.
    """
    # Checked once, before anything is seeded, so that a bad seed leaves every generator as it was.
    seed = integer("seed", seed, minimum=0, maximum=2**32 - 1)
    random.seed(seed)
    np.random.seed(seed)
    model.set_seed(seed)
