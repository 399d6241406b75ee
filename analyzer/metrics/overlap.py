"""Compute / communication overlap and the temporal breakdown, per rank and per step (pure, in ns).

With C = ∪ comm kernels, M = ∪ compute kernels, B = ∪ all GPU activity (over all streams):
overlapped = |C ∩ M| = |C| + |M| − |C ∪ M|, exposed = |C − M|, idle = span − |B|, and the
temporal breakdown compute-only + overlapped + exposed + memcpy/memset-only + idle = span.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..timeline import BUSY_KINDS
from .coverage import RankAxis, RankedCoverage


@dataclass(frozen=True)
class RankCoverage:
    """Every rank's unions (all streams and devices of a rank together) on one shared axis."""

    axis: RankAxis
    comm: RankedCoverage
    compute: RankedCoverage
    busy: RankedCoverage
    comm_or_compute: RankedCoverage

    def index(self, rank: np.ndarray) -> np.ndarray:
        """Axis position of each rank; -1 for a rank without GPU activity."""
        return self.axis.index(rank)

    def measure(self, idx: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
        """The breakdown of windows [a_i, b_i] of the ranks at axis positions idx_i (>= 0)."""
        comm = self.comm.within(idx, a, b)
        compute = self.compute.within(idx, a, b)
        cc = self.comm_or_compute.within(idx, a, b)
        busy = self.busy.within(idx, a, b)
        span = b - a
        overlapped = comm + compute - cc
        return {
            "span_ns": span,
            "compute_ns": compute,
            "comm_ns": comm,
            "overlapped_comm_ns": overlapped,
            "exposed_comm_ns": comm - overlapped,
            "compute_only_ns": compute - overlapped,
            "memcpy_ns": busy - cc,
            "busy_ns": busy,
            "idle_ns": span - busy,
        }


METRIC_COLUMNS = (
    "span_ns", "compute_ns", "comm_ns", "overlapped_comm_ns", "exposed_comm_ns", "compute_only_ns",
    "memcpy_ns", "busy_ns", "idle_ns",
)


def coverages(gpu: pl.DataFrame) -> RankCoverage:
    """The unions of every rank with GPU activity, built at once."""
    busy_rows = gpu.filter(pl.col("kind").is_in(BUSY_KINDS))
    rank = busy_rows["rank"].to_numpy()
    s = busy_rows["start_ns"].to_numpy()
    e = busy_rows["end_ns"].to_numpy()
    kind = busy_rows["kind"].to_numpy()
    axis = RankAxis.of(rank, s, e)
    is_comm = kind == "comm"
    is_compute = kind == "compute"
    cc = is_comm | is_compute
    return RankCoverage(
        axis=axis,
        comm=RankedCoverage.of(axis, rank[is_comm], s[is_comm], e[is_comm]),
        compute=RankedCoverage.of(axis, rank[is_compute], s[is_compute], e[is_compute]),
        busy=RankedCoverage.of(axis, rank, s, e),
        comm_or_compute=RankedCoverage.of(axis, rank[cc], s[cc], e[cc]),
    )


def rank_totals(gpu: pl.DataFrame, covs: RankCoverage) -> pl.DataFrame:
    """Whole captured window per rank: from its first to its last GPU event."""
    ax = covs.axis
    idx = np.arange(ax.ranks.size)
    m = covs.measure(idx, ax.lo, ax.hi)
    schema = {"rank": pl.Int32, "window_start_ns": pl.Int64, **{c: pl.Int64 for c in METRIC_COLUMNS}}
    return pl.DataFrame({"rank": ax.ranks, "window_start_ns": ax.lo, **m}, schema=schema)


def step_breakdown(steps: pl.DataFrame, covs: RankCoverage) -> pl.DataFrame:
    """The same measures inside each step window (steps of ranks without GPU activity are left out)."""
    schema = {"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, **{c: pl.Int64 for c in METRIC_COLUMNS}}
    idx = covs.index(steps["rank"].to_numpy())
    kept = steps.filter(pl.Series(idx >= 0))
    idx = idx[idx >= 0]
    m = covs.measure(idx, kept["start_ns"].to_numpy(), kept["end_ns"].to_numpy())
    return pl.DataFrame({"rank": kept["rank"], "step": kept["step"], "start_ns": kept["start_ns"], **m}, schema=schema)


SPLIT_COLUMNS = ("comm_ns", "overlapped_comm_ns", "exposed_comm_ns")


def family_split(coll: pl.DataFrame, covs: RankCoverage) -> pl.DataFrame:
    """Communication per (rank, family, engine), whole window: with F = ∪ the family's rows and M = ∪ compute,
    comm = |F|, overlapped = |F ∩ M| (ran beside compute: on the copy engine it costs no SMs), exposed = |F − M|
    (the step waited for it); kernels and the bytes their calls recorded. Families may overlap each other, so
    their rows need not add up to the rank's comm."""
    schema = {"rank": pl.Int32, "family": pl.Utf8, "engine": pl.Utf8, "kernels": pl.UInt32, "bytes": pl.Int64,
              **{c: pl.Int64 for c in SPLIT_COLUMNS}}
    if coll.height == 0 or covs.axis.ranks.size == 0:
        return pl.DataFrame(schema=schema)
    rows = coll.select("rank", pl.col("family").fill_null("unknown"), pl.col("engine").fill_null("sm"), "start_ns",
                       "end_ns", pl.max_horizontal("in_bytes", "out_bytes").alias("_bytes"))
    rows = rows.filter(pl.Series(covs.index(rows["rank"].to_numpy()) >= 0))
    compute = covs.compute.totals()
    parts = []
    for (family, engine), g in rows.group_by("family", "engine", maintain_order=True):
        f = RankedCoverage.of(covs.axis, g["rank"].to_numpy(), g["start_ns"].to_numpy(), g["end_ns"].to_numpy())
        comm = f.totals()
        both = RankedCoverage(covs.axis, f.cov | covs.compute.cov).totals()
        overlapped = comm + compute - both
        has = comm > 0
        counts = g.group_by("rank").agg(pl.len().alias("kernels"), pl.col("_bytes").sum().alias("bytes"))
        parts.append(pl.DataFrame({
            "rank": covs.axis.ranks[has], "family": family, "engine": engine, "comm_ns": comm[has],
            "overlapped_comm_ns": overlapped[has], "exposed_comm_ns": comm[has] - overlapped[has],
        }).with_columns(pl.col("rank").cast(pl.Int32)).join(counts, on="rank", how="left"))
    if not parts:
        return pl.DataFrame(schema=schema)
    out = pl.concat(parts, how="diagonal_relaxed").with_columns(
        pl.when(pl.col("bytes") > 0).then(pl.col("bytes")).alias("bytes"))
    return out.select([pl.col(c).cast(t) for c, t in schema.items()]).sort("rank", "family", "engine")
