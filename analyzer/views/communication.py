"""Communication split by library and engine (``Analysis.communication``), for every presenter.

``records`` are the JSON's ``communication`` rows (one per rank, family and engine); ``summary`` the reports'
table (one per family and engine: kernels and bytes summed over ranks, times the mean per rank that has them).
"""

from __future__ import annotations

import polars as pl

from ..analysis import Analysis
from ..comm_catalogue import USER_FAMILY, catalogue
from .units import ms_frame

FIELDS = ("rank", "family", "library", "engine", "kernels", "bytes", "comm_ms", "overlapped_comm_ms",
          "exposed_comm_ms", "overlap_pct", "gbps")
SUMMARY_FIELDS = ("family", "library", "engine", "ranks", "kernels", "bytes", "comm_ms", "overlapped_comm_ms",
                  "exposed_comm_ms", "overlap_pct", "gbps")


def library(family: str) -> str:
    """A family's library as the catalogue names it (a user rule's and an unnamed row's said so)."""
    if family == USER_FAMILY:
        return "user rule (--comm-kernel / config)"
    f = catalogue().by_id.get(family)
    return f.library if f is not None else "not named by the trace"


def _frame(a: Analysis) -> pl.DataFrame | None:
    df = a.communication
    if df is None or df.height == 0:
        return None
    libs = {f: library(f) for f in df["family"].unique().to_list()}
    return df.with_columns(pl.col("family").replace_strict(libs, return_dtype=pl.Utf8).alias("library"))


def _rates(df: pl.DataFrame) -> pl.DataFrame:
    # GB/s = bytes per ns of the family's busy time (its union): what its engine moved while it ran
    return df.with_columns(
        pl.when(pl.col("comm_ns") > 0).then(100.0 * pl.col("overlapped_comm_ns") / pl.col("comm_ns"))
        .alias("overlap_pct"),
        pl.when((pl.col("comm_ns") > 0) & pl.col("bytes").is_not_null()).then(pl.col("bytes") / pl.col("comm_ns"))
        .alias("gbps"),
    )


def records(a: Analysis) -> pl.DataFrame | None:
    """Per (rank, family, engine), in ms: the JSON's rows."""
    df = _frame(a)
    if df is None:
        return None
    return ms_frame(_rates(df)).select(FIELDS)


def summary(a: Analysis) -> pl.DataFrame | None:
    """Per (family, engine): over the ranks that have it; times are the mean per such rank."""
    df = _frame(a)
    if df is None:
        return None
    agg = df.group_by("family", "library", "engine").agg(
        pl.col("rank").n_unique().alias("ranks"), pl.col("kernels").sum(),
        pl.col("bytes").sum().alias("bytes"), pl.col("bytes").is_not_null().any().alias("_sized"),
        *[pl.col(c).mean().alias(c) for c in ("comm_ns", "overlapped_comm_ns", "exposed_comm_ns")],
        pl.col("comm_ns").sum().alias("_comm_sum"),
    )
    agg = agg.with_columns(pl.when(pl.col("_sized")).then(pl.col("bytes")).alias("bytes"))
    out = _rates(agg.with_columns(pl.col("_comm_sum").alias("comm_ns_total"))).with_columns(
        pl.when(pl.col("_comm_sum") > 0).then(pl.col("bytes") / pl.col("_comm_sum")).alias("gbps"))
    return ms_frame(out.sort("comm_ns", "family", descending=[True, False])).select(SUMMARY_FIELDS)


# (field, header, digits) of the reports' table; times are ms (mean per rank that has the family)
COLUMNS = (("library", "library", 0), ("engine", "engine", 0), ("ranks", "ranks", 0), ("kernels", "kernels", 0),
           ("comm_ms", "comm ms", 1), ("overlapped_comm_ms", "overlapped ms", 1),
           ("exposed_comm_ms", "exposed ms", 1), ("overlap_pct", "overlap %", 1), ("bytes", "bytes", 0),
           ("gbps", "GB/s", 2))
# the terminal's 100 columns: the family's short name (the library is in the JSON and the other reports)
TEXT_COLUMNS = (("family", "family", 0), ("engine", "engine", 0), ("ranks", "ranks", 0), ("kernels", "kernels", 0),
                ("comm_ms", "comm", 1), ("overlapped_comm_ms", "overlapped", 1), ("exposed_comm_ms", "exposed", 1),
                ("bytes", "bytes", 0), ("gbps", "GB/s", 2))
TITLE = "Communication by library and engine"
NOTE = ("ms: mean per rank that has it; overlapped: ran beside compute kernels (the copy engine uses no SMs); "
        "exposed: the step waited for it; GB/s: bytes over its busy time")
