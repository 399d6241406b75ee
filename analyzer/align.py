"""Per-rank clock offsets from the ends of matched blocking collectives.

Blocking collectives end almost together on every rank, so each end is e[i, r] = T[i] + o[r] + noise.
Offsets are fitted by alternating medians (robust to outliers, and it chains through groups that do
not contain the reference rank, e.g. TP pairs linked by DP pairs). ``offsets[r]`` is subtracted from
rank r's timestamps to put it on the reference rank's clock; nothing is written back to the input.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

BLOCKING_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")


@dataclass(frozen=True)
class ClockFit:
    method: str  # "collective-end" | "none"
    reference: int | None
    offsets_ns: dict[int, float]
    uncertainty_ns: float | None
    instances: int


def fit_offsets(inst: pl.DataFrame, ranks: list[int], iterations: int = 200) -> ClockFit:
    """``inst``: matched collective rows (rank, instance, op, end_ns)."""
    blocking = inst.filter(pl.col("instance").is_not_null() & pl.col("op").is_in(BLOCKING_OPS))
    rows = blocking.select("rank", "instance", pl.col("end_ns").cast(pl.Float64).alias("e"))
    if rows.height == 0 or rows["rank"].n_unique() < 2:
        return ClockFit("none", ranks[0] if ranks else None, {r: 0.0 for r in ranks}, None, 0)
    # shift to a small origin so float medians keep nanoseconds
    origin = rows["e"].min()
    rows = rows.with_columns(pl.col("e") - origin)
    ref = int(rows["rank"].min())
    offs = pl.DataFrame({"rank": rows["rank"].unique().sort(), "o": 0.0})
    for _ in range(iterations):
        last = offs
        t = rows.join(offs, on="rank").group_by("instance").agg((pl.col("e") - pl.col("o")).median().alias("t"))
        offs = (
            rows.join(t, on="instance")
            .group_by("rank")
            .agg((pl.col("e") - pl.col("t")).median().alias("o"))
        )
        o_ref = offs.filter(pl.col("rank") == ref)["o"][0]
        offs = offs.with_columns(pl.col("o") - o_ref)
        # pairwise groups chained through other ranks converge geometrically (by half per round): stop
        # when no offset moves by half a nanosecond, not after a fixed count that leaves a fraction
        change = last.join(offs, on="rank").select((pl.col("o") - pl.col("o_right")).abs().max()).item()
        if change < 0.5:
            break
    t = rows.join(offs, on="rank").group_by("instance").agg((pl.col("e") - pl.col("o")).median().alias("t"))
    resid = rows.join(offs, on="rank").join(t, on="instance").with_columns(
        (pl.col("e") - pl.col("t") - pl.col("o")).abs().alias("r")
    )
    spread = resid.group_by("rank").agg(pl.col("r").median().alias("mad"))
    inf = float("inf")
    # a clock that already satisfies causality needs no correction (ranks on one host): ends can
    # disagree by milliseconds there (GPU time-slicing) without the clocks disagreeing at all. A rank
    # that shares no collective with the reference has no such evidence: it keeps its estimate.
    fitted = (
        pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int64})
        .join(offs.select(pl.col("rank").cast(pl.Int64), "o"), on="rank", how="left")
        .join(_causal_bounds(blocking, ref), on="rank", how="left")
        .with_columns(pl.col("lo").is_not_null().alias("bounded"))
        .with_columns(pl.col("o").fill_null(0.0), pl.col("lo").fill_null(-inf), pl.col("hi").fill_null(inf))
        .with_columns(
            pl.when(pl.col("bounded") & (pl.col("lo") <= 0.0) & (pl.col("hi") >= 0.0)).then(0.0)
            .otherwise(pl.min_horizontal(pl.max_horizontal("o", "lo"), "hi")).alias("chosen")
        )
    )
    moved = float((fitted["o"] - fitted["chosen"]).abs().max() or 0.0) if fitted.height else 0.0
    offsets = dict(zip(ranks, fitted["chosen"].to_list()))
    return ClockFit(
        method="collective-end",
        reference=ref,
        offsets_ns=offsets,
        uncertainty_ns=max(float(spread["mad"].max()), moved),
        instances=int(rows["instance"].n_unique()),
    )


def _causal_bounds(rows: pl.DataFrame, ref: int) -> pl.DataFrame:
    """rank, lo, hi: the interval for o[r] − o[ref] in which no rank leaves a shared collective before
    the other entered."""
    me = rows.filter(pl.col("rank") == ref).select("instance", pl.col("start_ns").alias("s0"),
                                                    pl.col("end_ns").alias("e0"))
    pairs = rows.filter(pl.col("rank") != ref).join(me, on="instance")
    return pairs.group_by("rank").agg(
        (pl.col("start_ns") - pl.col("e0")).max().cast(pl.Float64).alias("lo"),
        (pl.col("end_ns") - pl.col("s0")).min().cast(pl.Float64).alias("hi"),
    ).with_columns(pl.col("rank").cast(pl.Int64))


def apply(df: pl.DataFrame, fit: ClockFit, cols: tuple[str, ...] = ("start_ns", "end_ns")) -> pl.DataFrame:
    """A copy of ``df`` with ``cols`` on the reference clock (rank column required)."""
    table = pl.DataFrame(
        {"rank": list(fit.offsets_ns), "_off": [round(v) for v in fit.offsets_ns.values()]},
        schema={"rank": pl.Int32, "_off": pl.Int64},
    )
    return (
        df.join(table, on="rank", how="left")
        .with_columns([(pl.col(c) - pl.col("_off").fill_null(0)).alias(c) for c in cols])
        .drop("_off")
    )
