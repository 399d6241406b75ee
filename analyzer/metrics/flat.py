"""All ranks laid end to end on one time axis, so one interval union answers every rank at once.

Rank r's time t maps to t - origin_r + r * stride (stride: longer than any rank's span), which keeps
ranks apart without a Python loop per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..coverage import Coverage


@dataclass(frozen=True)
class FlatAxis:
    shift: pl.DataFrame  # rank, _shift

    @staticmethod
    def of(gpu: pl.DataFrame) -> FlatAxis:
        span = gpu.group_by("rank").agg(pl.col("start_ns").min().alias("_o"), pl.col("end_ns").max().alias("_e"))
        stride = int((span["_e"] - span["_o"]).max() or 0) + 1 if span.height else 1
        return FlatAxis(span.select("rank", (pl.col("rank").cast(pl.Int64) * stride - pl.col("_o")).alias("_shift")))

    def map(self, df: pl.DataFrame, start: str = "start_ns", end: str = "end_ns") -> tuple[np.ndarray, np.ndarray]:
        """``df``'s intervals on the flat axis (rows keep their order)."""
        d = df.select("rank", start, end).join(self.shift, on="rank", how="left", maintain_order="left")
        shift = d["_shift"].fill_null(0)
        return (d[start] + shift).to_numpy(), (d[end] + shift).to_numpy()

    def coverage(self, df: pl.DataFrame, start: str = "start_ns", end: str = "end_ns") -> Coverage:
        return Coverage.of(*self.map(df, start, end))
