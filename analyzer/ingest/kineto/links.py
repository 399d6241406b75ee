"""Which runtime calls launched GPU work: the GPU events' correlations as int64, and a fast membership test.

Shared by the paths that select runtime calls by number before decoding them (``native``, ``blocks``).
"""

from __future__ import annotations

import numpy as np

from .scan import _number


def _linked(num: np.ndarray, linked: np.ndarray) -> np.ndarray:
    """``np.isin(num, linked)``; by a lookup table where the numbers are small (correlations count up
    from 0), which is O(n) where isin sorts 1.4 M numbers per 500 MB rank (0.3 s)."""
    if linked.size == 0:
        return np.zeros(num.size, dtype=bool)
    top = int(linked.max())
    if linked.min() < 0 or top > 64 * max(num.size, 1 << 20):
        return np.isin(num, linked)
    table = np.zeros(top + 2, dtype=bool)
    table[linked] = True
    return table[np.clip(num, -1, top + 1)]  # -1 and top + 1 read False (table[-1] is table[top + 1])


_NONE = -(2**63)  # no correlation (or one too long: such blocks are offered anyway); no event has it


def _numbers(values: list[object]) -> np.ndarray:
    """GPU events' correlations as int64, those that are numbers at all (the scan path's ``_number``).

    Nearly always plain ints: one numpy conversion. Otherwise each value on its own: an integral float
    reads as its int, anything else links nothing."""
    arr = np.array(values) if values else np.zeros(0, dtype=np.int64)
    if arr.dtype == np.int64:
        return arr  # (a bool among ints would read as 0/1: one more runtime call offered, which is safe)
    out = [_number(v) for v in values]
    return np.array([v for v in out if v is not None], dtype=np.int64)

