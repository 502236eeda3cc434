"""The uniform shuffle of the order engine: a permutation that depends only on ``(seed, epoch)``.

Its own module so that :mod:`~loaderfactory.components.order` (which falls back on it when a dataset
offers no order) and :mod:`~loaderfactory.components.order_forwarding` (when a wrapper forwards to a
dataset without one) share it without importing each other.
"""

from __future__ import annotations

import numpy as np


def permutation(length: int, seed: int, epoch: int) -> list[int]:
    """A uniform permutation of ``range(length)`` that depends only on ``(seed, epoch)``."""
    rng = np.random.default_rng([seed % 2**64, epoch])
    return rng.permutation(length).tolist()  # type: ignore[no-any-return]  # list of int
