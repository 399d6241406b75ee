"""All ranks laid end to end on one time axis (``coverage.RankAxis``), addressed with Polars frames.

A thin adapter for metrics that hold their intervals in tables: the axis itself, and the rule that
keeps ranks apart on it, live in one place (``RankAxis``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .coverage import Coverage, RankAxis


@dataclass(frozen=True)
class FlatAxis:
    axis: RankAxis

    @staticmethod
    def of(gpu: pl.DataFrame) -> FlatAxis:
        return FlatAxis(RankAxis.of(gpu["rank"].to_numpy(), gpu["start_ns"].to_numpy(), gpu["end_ns"].to_numpy()))

    def map(self, df: pl.DataFrame, start: str = "start_ns", end: str = "end_ns") -> tuple[np.ndarray, np.ndarray]:
        """``df``'s intervals on the flat axis (rows keep their order; ranks the axis lacks map to empty)."""
        idx = self.axis.index(df["rank"].to_numpy())
        ok = idx >= 0
        safe = np.where(ok, idx, 0)
        s = self.axis.place(safe, df[start].to_numpy())
        e = self.axis.place(safe, df[end].to_numpy())
        return np.where(ok, s, 0), np.where(ok, e, 0)

    def coverage(self, df: pl.DataFrame, start: str = "start_ns", end: str = "end_ns") -> Coverage:
        return Coverage.of(*self.map(df, start, end))
