"""Range maxima over an array: a sparse table (the flow assembler's NumPy path uses it)."""

from __future__ import annotations

import numpy as np


class RangeMax:
    """Maximum of ``x[lo+1 .. hi]`` for many (lo, hi) pairs: a sparse table."""

    def __init__(self, x: np.ndarray):
        levels = [x]
        while 2 ** len(levels) <= len(x):
            prev, step = levels[-1], 2 ** (len(levels) - 1)
            levels.append(np.maximum(prev[:-step], prev[step:]))
        self.table = np.full((len(levels), len(x)), -np.inf)  # (log2 n, n)
        for k, lev in enumerate(levels):
            self.table[k, : len(lev)] = lev

    def __call__(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        length = hi - lo  # >= 1
        k = np.floor(np.log2(length)).astype(np.int64)
        return np.maximum(self.table[k, lo + 1], self.table[k, hi - (1 << k) + 1])
