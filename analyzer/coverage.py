"""Vectorized interval algebra (numpy): the union of many intervals, measured over many windows at once.

Apart from ``timeline`` so that parse workers, which only classify kernels, never import numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Coverage:
    """A union of disjoint intervals that answers |union ∩ [a, b]| for many windows at once."""

    starts: np.ndarray
    ends: np.ndarray
    cum: np.ndarray  # covered length before segment i

    @staticmethod
    def of(starts: np.ndarray, ends: np.ndarray) -> Coverage:
        """Build from arbitrary (possibly overlapping, unsorted) intervals."""
        s = np.asarray(starts, dtype=np.int64)
        e = np.asarray(ends, dtype=np.int64)
        keep = e > s
        s, e = s[keep], e[keep]
        if s.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return Coverage(z, z, z)
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        run_end = np.maximum.accumulate(e)
        new = np.ones(s.size, dtype=bool)
        new[1:] = s[1:] > run_end[:-1]
        seg = np.cumsum(new) - 1
        seg_s = s[new]
        seg_e = np.zeros(seg_s.size, dtype=np.int64)
        np.maximum.at(seg_e, seg, e)
        lengths = seg_e - seg_s
        cum = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        return Coverage(seg_s, seg_e, cum)

    @property
    def total(self) -> int:
        return int((self.ends - self.starts).sum()) if self.starts.size else 0

    def upto(self, t: np.ndarray) -> np.ndarray:
        """Covered length in (-inf, t]."""
        t = np.asarray(t, dtype=np.int64)
        if self.starts.size == 0:
            return np.zeros(t.shape, dtype=np.int64)
        k = np.searchsorted(self.starts, t, side="right") - 1
        kk = np.clip(k, 0, None)
        within = np.clip(t - self.starts[kk], 0, self.ends[kk] - self.starts[kk])
        return np.where(k >= 0, self.cum[kk] + within, 0)

    def within(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """|union ∩ [a_i, b_i]| for each window i."""
        return self.upto(b) - self.upto(a)

    def __or__(self, other: Coverage) -> Coverage:
        return Coverage.of(np.concatenate([self.starts, other.starts]), np.concatenate([self.ends, other.ends]))
