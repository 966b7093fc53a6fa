"""A ``random.Random`` whose draws are fixed, for code that takes an ``rng``."""

from __future__ import annotations

import random


class Fixed(random.Random):
    """Draws ``fraction`` of every range asked for (``uniform``)."""

    def __init__(self, fraction: float) -> None:
        super().__init__(0)
        self.fraction = fraction

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.fraction
