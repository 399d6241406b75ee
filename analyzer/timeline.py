"""Interval unions and step windows over GPU timelines.

Which GPU work is communication is decided in one place, the catalogue (``comm_catalogue.py``), which every
reader calls (HTA decides it twice and one copy went stale).
"""

from __future__ import annotations

import polars as pl

from .ranklist import compact
from .rules import STEP_MARKER

BUSY_KINDS = ("compute", "comm", "memcpy", "memset", "other")


# ----------------------------------------------------------------------------- interval algebra


def union(df: pl.DataFrame, by: list[str], start: str = "start_ns", end: str = "end_ns") -> pl.DataFrame:
    """Merge overlapping intervals within each group; returns disjoint sorted segments."""
    if df.height == 0:
        return df.select([*by, start, end]).clear()
    return (
        df.lazy()
        .select([*by, start, end])
        .filter(pl.col(end) > pl.col(start))
        .sort([*by, start])
        .with_columns(pl.col(end).cum_max().shift(1).over(by).alias("_prev"))
        .with_columns(
            (pl.col("_prev").is_null() | (pl.col(start) > pl.col("_prev"))).cum_sum().over(by).alias("_seg")
        )
        .group_by([*by, "_seg"])
        .agg(pl.col(start).min(), pl.col(end).max())
        .sort([*by, start])
        .drop("_seg")
        .collect()
    )


# ----------------------------------------------------------------------------- step windows


def launches(cpu: pl.DataFrame) -> pl.DataFrame:
    """The host launch of each GPU operation (rank, correlation, tid, launch_ns): one row per correlation.

    A runtime call (``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaMemcpyAsync``, ...) shares its
    correlation id with the GPU operation it launched; this is the one place that link is made.
    """
    calls = cpu.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
    # the first call of each (rank, correlation), in order: a filter, 2.3x faster than an order-keeping unique
    return calls.filter(pl.struct("rank", "correlation").is_first_distinct()).select(
        "rank", "correlation", "tid", pl.col("start_ns").alias("launch_ns"))


def gpu_step_windows(steps: pl.DataFrame, gpu: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """Move host-side step windows onto the GPU timeline.

    A host step (``ProfilerStep#N`` on the CPU) ends long before its kernels do. Each kernel belongs
    to the step whose host window contains its launch (linked by correlation); a step's GPU window
    runs from its first kernel's start to the next step's first kernel start (the last step ends at
    its last kernel's end), so windows tile the GPU timeline and idle between steps is counted.
    Ranks without launch links keep their host windows.
    """
    if steps.height == 0:
        return steps
    work = gpu.filter(pl.col("correlation").is_not_null()).join(
        launches(cpu).select("rank", "correlation", "launch_ns"), on=["rank", "correlation"], how="inner"
    )
    if work.height == 0:
        return steps
    host = steps.sort("start_ns").select(
        "rank", "step", pl.col("start_ns").alias("h_start"), pl.col("end_ns").alias("h_end")
    )
    tagged = (
        work.sort("launch_ns")
        .join_asof(host, left_on="launch_ns", right_on="h_start", by="rank", strategy="backward", check_sortedness=False)
        .filter(pl.col("launch_ns") <= pl.col("h_end"))
    )
    per_step = tagged.group_by("rank", "step").agg(
        pl.col("start_ns").min().alias("g_start"), pl.col("end_ns").max().alias("g_end")
    )
    moved = (
        per_step.sort("rank", "g_start")
        .with_columns(pl.col("g_start").shift(-1).over("rank").alias("next_start"))
        .select(
            "rank",
            "step",
            pl.col("g_start").alias("start_ns"),
            pl.coalesce("next_start", "g_end").alias("end_ns"),
        )
    )
    linked_ranks = moved["rank"].unique()
    kept = steps.filter(~pl.col("rank").is_in(linked_ranks.implode()))
    return pl.concat([moved.select(steps.columns).cast(dict(steps.schema)), kept]).sort("rank", "start_ns")


MIN_STEP_COVERAGE = 1.0  # any GPU work outside the step windows (other threads, between steps): tile
MIN_LAUNCH_LINKED = 0.9  # a rank's steps follow its host ranges where this share of its GPU work has its launch
DEFAULT_STEP_MARKER = STEP_MARKER


def step_coverage(steps: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Per rank: the share of its GPU time (from its first step on) that falls inside its step windows.

    Kernels launched from other threads than the annotating one (autograd engine, FSDP hooks, side
    streams) fall outside Kineto's GPU-side ``ProfilerStep#N``; this measures how much did.
    """
    work = gpu.filter(pl.col("kind").is_in(BUSY_KINDS) & (pl.col("end_ns") > pl.col("start_ns"))).select(
        "rank", "start_ns", "end_ns"
    )
    windows = steps.select("rank", pl.col("start_ns").alias("w_start"), pl.col("end_ns").alias("w_end")).sort("w_start")
    first = steps.group_by("rank").agg(pl.col("start_ns").min().alias("first"))
    inside = (
        work.join(first, on="rank").filter(pl.col("start_ns") >= pl.col("first")).sort("start_ns")
        .join_asof(windows, left_on="start_ns", right_on="w_start", by="rank", strategy="backward",
                   check_sortedness=False)
        .with_columns((pl.min_horizontal("end_ns", "w_end") - pl.col("start_ns")).clip(0).fill_null(0).alias("_in"))
    )
    return inside.group_by("rank").agg(
        (pl.col("_in").sum() / (pl.col("end_ns") - pl.col("start_ns")).sum()).alias("coverage")
    ).sort("rank")


def tile_steps(steps: pl.DataFrame, gpu: pl.DataFrame, ranks: pl.Series | list[int]) -> pl.DataFrame:
    """Step N of each listed rank runs from its start to the start of step N+1; the last to the rank's last GPU event."""
    last = gpu.group_by("rank").agg(pl.col("end_ns").max().alias("_last"))
    tiled = (
        steps.filter(pl.col("rank").is_in(list(ranks)))
        .sort("rank", "start_ns")
        .join(last, on="rank", how="left")
        .with_columns(
            pl.coalesce(pl.col("start_ns").shift(-1).over("rank"),
                        pl.max_horizontal("end_ns", "_last")).alias("end_ns")
        )
        .drop("_last")
    )
    kept = steps.filter(~pl.col("rank").is_in(list(ranks)))
    return pl.concat([kept, tiled.select(steps.columns)]).sort("rank", "start_ns")


def host_step_windows(cpu: pl.DataFrame, marker: str | None = None) -> pl.DataFrame:
    """Host-side step windows (rank, step, start_ns, end_ns) from annotations named like the step marker."""
    pattern = marker or DEFAULT_STEP_MARKER
    ann = cpu.filter((pl.col("kind") == "annotation") & pl.col("name").str.contains(pattern))
    if ann.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
    number = pl.col("name").str.extract(r"(\d+)", 1).cast(pl.Int64, strict=False)
    return (
        ann.sort("rank", "start_ns")
        .with_columns(pl.coalesce(number, pl.int_range(pl.len()).over("rank").cast(pl.Int64)).alias("step"))
        .group_by("rank", "step").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort("rank", "start_ns")
    )


def fill_sparse_steps(steps: pl.DataFrame, gpu: pl.DataFrame, cpu: pl.DataFrame, marker: str | None = None
                      ) -> tuple[pl.DataFrame, str]:
    """The step windows of ranks whose step annotations cover too little of their GPU time, and the warning that
    says so ("" when none).

    Kineto's GPU-side ``ProfilerStep#N`` spans only the kernels it attributes to the host range (the annotating
    thread's; in ``torch.distributed.pipelining`` jobs only the optimizer's, 40 us of a 74 ms step). Where a rank
    has the host-side ranges and its kernels' launches, its steps are those ranges moved onto the GPU by launch
    (``gpu_step_windows``: every kernel in the step whose host range launched it, any thread): the job's own steps,
    as its step timer sees them. Elsewhere step N runs from its start to the start of step N+1 (tiled).
    """
    if steps.height == 0:
        return steps, ""
    cov = step_coverage(steps, gpu)
    sparse = cov.filter(pl.col("coverage") < MIN_STEP_COVERAGE)
    if sparse.height == 0:
        return steps, ""
    lo, hi = float(sparse["coverage"].min()), float(sparse["coverage"].max())
    share = f"{100 * lo:.0f}%" if round(100 * lo) == round(100 * hi) else f"{100 * lo:.0f}-{100 * hi:.0f}%"
    host = host_step_windows(cpu, marker).filter(pl.col("rank").is_in(sparse["rank"].implode()))
    moved = gpu_step_windows(host, gpu, cpu) if host.height else host
    # a rank whose GPU work is linked to its launches has its windows moved (gpu_step_windows keeps the others'
    # host windows); a trace that kept few of its runtime calls (a filtered excerpt) is tiled instead
    work = gpu.filter(pl.col("rank").is_in(sparse["rank"].implode()) & pl.col("kind").is_in(BUSY_KINDS))
    with_launch = (work.join(launches(cpu).select("rank", "correlation", pl.lit(True).alias("_l")),
                             on=["rank", "correlation"], how="left")
                   .group_by("rank").agg(pl.col("_l").fill_null(False).mean().alias("_share")))
    linked = with_launch.filter(pl.col("_share") >= MIN_LAUNCH_LINKED)["rank"]
    moved = moved.filter(pl.col("rank").is_in(linked.implode()))
    by_host = moved["rank"].unique().sort().to_list()
    rest = [r for r in sparse["rank"].to_list() if r not in set(by_host)]
    out = tile_steps(steps, gpu, rest) if rest else steps
    if by_host:
        out = pl.concat([out.filter(~pl.col("rank").is_in(by_host)), moved.select(out.columns).cast(dict(out.schema))]
                        ).sort("rank", "start_ns")
    said = f"step annotations cover only {share} of the GPU time on rank(s) {compact(sparse['rank'].to_list())} " \
           "(work launched from other threads falls outside them): "
    if not rest:
        return out, said + "each step is the host's ProfilerStep range, every GPU operation in the step that launched it"
    if not by_host:
        return out, said + "steps were tiled, step N running until step N+1 starts"
    return out, said + (f"steps of rank(s) {compact(by_host)} are the host's ranges (every GPU operation in the step "
                        f"that launched it); those of rank(s) {compact(rest)} were tiled, step N running until N+1 starts")
