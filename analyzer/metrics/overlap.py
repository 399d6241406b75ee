"""Compute / communication overlap and the temporal breakdown, per rank and per step (pure, in ns).

With C = ∪ comm kernels, M = ∪ compute kernels, B = ∪ all GPU activity (over all streams):
overlapped = |C ∩ M| = |C| + |M| − |C ∪ M|, exposed = |C − M|, idle = span − |B|, and the
temporal breakdown compute-only + overlapped + exposed + memcpy/memset-only + idle = span.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..coverage import Coverage
from ..timeline import BUSY_KINDS


@dataclass(frozen=True)
class RankCoverage:
    comm: Coverage
    compute: Coverage
    busy: Coverage
    comm_or_compute: Coverage

    def measure(self, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
        comm = self.comm.within(a, b)
        compute = self.compute.within(a, b)
        cc = self.comm_or_compute.within(a, b)
        busy = self.busy.within(a, b)
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


def coverages(gpu: pl.DataFrame) -> dict[int, RankCoverage]:
    """One set of unions per rank (all streams and devices of the rank together)."""
    out: dict[int, RankCoverage] = {}
    busy_rows = gpu.filter(pl.col("kind").is_in(BUSY_KINDS))
    for (rank,), part in busy_rows.partition_by("rank", as_dict=True, maintain_order=True).items():
        s = part["start_ns"].to_numpy()
        e = part["end_ns"].to_numpy()
        kind = part["kind"].to_numpy()
        is_comm = kind == "comm"
        is_compute = kind == "compute"
        out[int(rank)] = RankCoverage(
            comm=Coverage.of(s[is_comm], e[is_comm]),
            compute=Coverage.of(s[is_compute], e[is_compute]),
            busy=Coverage.of(s, e),
            comm_or_compute=Coverage.of(s[is_comm | is_compute], e[is_comm | is_compute]),
        )
    return out


def rank_totals(gpu: pl.DataFrame, covs: dict[int, RankCoverage]) -> pl.DataFrame:
    """Whole captured window per rank: from its first to its last GPU event."""
    bounds = (
        gpu.filter(pl.col("kind").is_in(BUSY_KINDS))
        .group_by("rank")
        .agg(pl.col("start_ns").min().alias("a"), pl.col("end_ns").max().alias("b"))
        .sort("rank")
    )
    rows = []
    for rank, a, b in bounds.iter_rows():
        m = covs[rank].measure(np.array([a]), np.array([b]))
        rows.append({"rank": rank, "window_start_ns": a, **{k: int(v[0]) for k, v in m.items()}})
    schema = {"rank": pl.Int32, "window_start_ns": pl.Int64, **{c: pl.Int64 for c in METRIC_COLUMNS}}
    return pl.DataFrame(rows, schema=schema)


def step_breakdown(steps: pl.DataFrame, covs: dict[int, RankCoverage]) -> pl.DataFrame:
    """The same measures inside each step window."""
    schema = {"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, **{c: pl.Int64 for c in METRIC_COLUMNS}}
    parts = []
    for (rank,), part in steps.partition_by("rank", as_dict=True, maintain_order=True).items():
        if rank not in covs:
            continue
        a = part["start_ns"].to_numpy()
        b = part["end_ns"].to_numpy()
        m = covs[int(rank)].measure(a, b)
        parts.append(
            pl.DataFrame(
                {"rank": part["rank"], "step": part["step"], "start_ns": part["start_ns"], **m}, schema=schema
            )
        )
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema)
