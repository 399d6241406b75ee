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


@dataclass(frozen=True)
class RankAxis:
    """Many ranks' clocks laid end to end on one axis, so one ``Coverage`` answers for every rank.

    Rank ``ranks[i]`` owns [lo[i], hi[i]] on its own clock (the extent of all its intervals) and
    [base[i], base[i] + hi[i] − lo[i]] on the shared axis, one nanosecond clear of its neighbours so
    their segments never merge. A query time is clipped to the rank's extent first: nothing of the
    rank lies outside it, so clipping changes no measured length, and the shift stays exact in int64.
    """

    ranks: np.ndarray  # sorted rank ids
    lo: np.ndarray
    hi: np.ndarray
    base: np.ndarray

    @staticmethod
    def of(rank: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> RankAxis:
        rank = np.asarray(rank, dtype=np.int64)
        ranks, inv = np.unique(rank, return_inverse=True)
        lo = np.full(ranks.size, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(ranks.size, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(lo, inv, np.asarray(starts, dtype=np.int64))
        np.maximum.at(hi, inv, np.asarray(ends, dtype=np.int64))
        hi = np.maximum(hi, lo)
        width = hi - lo + 1
        if ranks.size and float(width.astype(np.float64).sum()) >= 2.0**62:
            raise ValueError("the ranks' time ranges add up to more than int64 nanoseconds can hold")
        base = (np.cumsum(width) - width).astype(np.int64)
        return RankAxis(ranks, lo, hi, base)

    def index(self, rank: np.ndarray) -> np.ndarray:
        """Position of each rank on the axis; -1 where the axis does not hold it."""
        rank = np.asarray(rank, dtype=np.int64)
        if self.ranks.size == 0:
            return np.full(rank.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.ranks, rank), 0, self.ranks.size - 1)
        return np.where(self.ranks[pos] == rank, pos, -1)

    def place(self, idx: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Rank-clock times ``t`` of axis positions ``idx`` (>= 0) on the shared axis."""
        lo = self.lo[idx]
        return np.clip(np.asarray(t, dtype=np.int64), lo, self.hi[idx]) - lo + self.base[idx]


@dataclass(frozen=True)
class RankedCoverage:
    """Per-rank unions of intervals over all ranks at once: |union_r ∩ [a_i, b_i]| in one search."""

    axis: RankAxis
    cov: Coverage

    @staticmethod
    def of(axis: RankAxis, rank: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> RankedCoverage:
        """``rank``: every interval's rank, all held by ``axis``."""
        idx = axis.index(rank)
        return RankedCoverage(axis, Coverage.of(axis.place(idx, starts), axis.place(idx, ends)))

    def within(self, idx: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """|union of rank at axis position idx_i ∩ [a_i, b_i]| for each i."""
        return self.cov.within(self.axis.place(idx, a), self.axis.place(idx, b))

    def totals(self) -> np.ndarray:
        """Covered length of every axis rank."""
        ax = self.axis
        return self.cov.within(ax.base, ax.base + (ax.hi - ax.lo))
