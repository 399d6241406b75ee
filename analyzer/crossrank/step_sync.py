"""Steps of a synchronous job: one interval per step on the aligned clock, the same span on every rank.

Per-rank step windows do not measure the job's step. Kineto's GPU-side ``ProfilerStep#N`` starts at the
rank's first kernel of the step and ends at its last, so a rank that spends the start of each step on its
host (a data loader, a sleep, extra launches) has a shorter window: the idle time before its first kernel
falls between its windows, while the ranks waiting for it have that time inside theirs, as collective wait
(`gpu_h200/hybrid_tp_dp`: rank 3 226 ms against 287 ms on the others). Tiling (step N runs until step N+1
starts) fixes the steady state but not the edges: the first step of a rank that starts late and the last
step of one that ends early stay short.

The rule: ranks that share matched collectives run in lockstep, so step N is one interval on the aligned
clock, from the earliest start of step N on any of those ranks to the earliest start of step N+1 (the last
step: to the latest end of any rank's last window). Each rank's window is that interval on its own clock
(the graph's clock: ``Graph.steps`` holds the windows on both), for the steps the rank has. Time a rank
spends before its first kernel of a step is then idle in that step, where the question "who held the step
back" can see it. Ranks without a matched collective, and runs without a clock fit, keep their own windows.
"""

from __future__ import annotations

import polars as pl

from ..rules import NS_PER_MS
from .graph import Graph

DIFFERED_PCT = 5.0  # say so when the ranks' own mean step spans differed by more than this


def common_windows(g: Graph, linked: list[int]) -> tuple[pl.DataFrame, str]:
    """The graph's step windows (rank, step, start_ns, end_ns on each rank's clock) with one aligned interval per
    step for the ``linked`` ranks (those in a matched collective), and a warning when their own spans had differed."""
    aligned = g.steps if g.steps is not None else pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64,
                                                                       "start_ns": pl.Int64, "end_ns": pl.Int64})
    steps = aligned.drop("a_start_ns", "a_end_ns", strict=False)
    if steps.height == 0 or g.clock.method == "none" or len(linked) < 2:
        return steps, ""
    mine = aligned.filter(pl.col("rank").is_in(linked))
    if mine["rank"].n_unique() < 2:
        return steps, ""
    job = (
        mine.group_by("step")
        .agg(pl.col("a_start_ns").min().alias("_s"), pl.col("a_end_ns").max().alias("_e"))
        .sort("step")
        .with_columns(pl.coalesce(pl.col("_s").shift(-1), pl.col("_e")).alias("_e"))
    )
    synced = g.clock.to_rank_clock(  # the same span on every rank, to the ns
        mine.join(job, on="step", how="left").select("rank", "step", pl.col("_s").alias("start_ns"),
                                                      pl.col("_e").alias("end_ns")))
    kept = steps.filter(~pl.col("rank").is_in(linked))
    out = pl.concat([kept, synced.select(steps.columns).cast(dict(steps.schema))]).sort("rank", "start_ns")
    return out, _differed(mine)


def _differed(own: pl.DataFrame) -> str:
    means = own.group_by("rank").agg((pl.col("end_ns") - pl.col("start_ns")).mean().alias("m")).sort("m")
    lo, hi = means.row(0, named=True), means.row(-1, named=True)
    if not hi["m"] or 100.0 * (hi["m"] - lo["m"]) / hi["m"] <= DIFFERED_PCT:
        return ""
    return (f"step windows differed across ranks (mean span {lo['m'] / NS_PER_MS:,.1f} ms on rank {lo['rank']}, "
            f"{hi['m'] / NS_PER_MS:,.1f} ms on rank {hi['rank']}): a synchronous job's step is one interval on the aligned "
            "clock, so every rank's step N now runs from the first rank's start of step N to the start of step N+1; "
            "a rank's time before its first kernel of a step is idle in that step")
