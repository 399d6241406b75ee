"""Timeline downsampling: GPU intervals on the aligned clock -> at most N merged segments per lane and kind.

A browser cannot draw a million kernels; a screen cannot show more than ~1000 segments per lane anyway.
The visible window is cut into ``max_segments`` bins per lane and kind; each bin draws its busy time as one
segment, so the drawn length equals the true busy time and positions move by less than one bin.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analyzer.analysis import Analysis
from analyzer.rules import NS_PER_MS

# drawn categories: memset joins memcpy; sync/other stay separate so compute/comm colours stay honest
KIND_GROUP = {"compute": "compute", "comm": "comm", "memcpy": "memcpy", "memset": "memcpy", "sync": "other",
              "other": "other"}
KIND_ORDER = ("compute", "comm", "memcpy", "other")


@dataclass(frozen=True)
class Prepared:
    """The aligned GPU table once per Analysis (aligning a big trace's kernels is the costly part)."""

    gpu: pl.DataFrame  # rank, stream, start_ns, end_ns, name, group (aligned, origin-relative ns)
    origin_ns: int  # absolute aligned time of x = 0
    steps: pl.DataFrame  # rank, step, start_ns, end_ns (aligned, origin-relative)
    ranks: tuple[int, ...]


_CACHE: list[tuple[Analysis, Prepared]] = []


def prepare(a: Analysis) -> Prepared:
    for cached, prep in _CACHE:
        if cached is a:
            return prep
    # the graph's clock (the one place offsets are applied) and its step windows, already aligned
    g = a.graph
    gpu = g.clock.to_reference(g.gpu.select("rank", "stream", "start_ns", "end_ns", "name", "kind"))
    origin = int(gpu["start_ns"].min()) if gpu.height else 0
    gpu = gpu.with_columns(
        (pl.col("start_ns") - origin).alias("start_ns"),
        (pl.col("end_ns") - origin).alias("end_ns"),
        pl.col("kind").replace_strict(KIND_GROUP, default="other").alias("group"),
    ).drop("kind").sort("rank", "start_ns")
    steps = g.steps.select("rank", "step", (pl.col("a_start_ns") - origin).alias("start_ns"),
                           (pl.col("a_end_ns") - origin).alias("end_ns"))
    prep = Prepared(gpu=gpu, origin_ns=origin, steps=steps, ranks=tuple(int(r) for r in a.source["ranks"]))
    _CACHE.insert(0, (a, prep))
    del _CACHE[4:]  # a dashboard serves one analysis; tests build a few
    return prep


def step_window_ms(a: Analysis, step: int, ranks: list[int] | None = None) -> tuple[float, float] | None:
    """The union of one step's windows over ``ranks`` on the timeline's axis (ms from the origin)."""
    st = prepare(a).steps.filter(pl.col("step") == step)
    if ranks:
        st = st.filter(pl.col("rank").is_in(ranks))
    if st.height == 0:
        return None
    return float(st["start_ns"].min()) / NS_PER_MS, float(st["end_ns"].max()) / NS_PER_MS


def to_axis_ms(a: Analysis, abs_ms: float) -> float:
    """An aligned absolute time in ms (e.g. ``collectives.start_ms``) on the timeline's axis."""
    return abs_ms - prepare(a).origin_ns / NS_PER_MS


def segments(gpu: pl.DataFrame, lane_cols: list[str], window_ns: tuple[int, int] | None,
             max_segments: int) -> pl.DataFrame:
    """At most ``max_segments`` drawn segments per (lane, group) whose total length is the exact busy time.

    The window is cut into ``max_segments`` equal bins (about a pixel each). In every bin the busy time
    (union of the lane's kernels there) is drawn as one segment from the bin's first activity, so the
    drawn union equals the true union and nothing moves by more than one bin; touching segments are
    merged. Returns lane columns, group, start_ns, end_ns, busy_ns (= end - start), count (kernels),
    name (the kernel name when a segment is one kernel).
    """
    keys = [*lane_cols, "group"]
    df = gpu.filter(pl.col("end_ns") > pl.col("start_ns"))
    if window_ns is not None:
        lo, hi = window_ns
        df = df.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)).with_columns(
            pl.col("start_ns").clip(lo, hi), pl.col("end_ns").clip(lo, hi))
    if df.height == 0:
        return df.select(*keys, "start_ns", "end_ns", pl.col("end_ns").alias("busy_ns"),
                         pl.lit(0, pl.UInt32).alias("count"), "name").clear()
    if window_ns is None:
        lo, hi = int(df["start_ns"].min()), int(df["end_ns"].max())
    res = max(-(-(hi - lo) // max(max_segments, 1)), 1)  # ceil: never more than max_segments bins
    # exact unions first (overlapping kernels of one lane and kind), then cut them at bin edges
    df = df.sort([*keys, "start_ns"]).with_columns(pl.col("end_ns").cum_max().shift(1).over(keys).alias("_prev"))
    df = df.with_columns((pl.col("_prev").is_null() | (pl.col("start_ns") > pl.col("_prev"))).cum_sum().alias("_uni"))
    unions = df.group_by("_uni").agg(*[pl.col(c).first() for c in keys], pl.col("start_ns").min(),
                                     pl.col("end_ns").max(), pl.len().alias("count"), pl.col("name").first())
    first_bin = (pl.col("start_ns") - lo) // res
    pieces = (
        unions.with_columns(first_bin.alias("_b0"), pl.int_ranges(first_bin, (pl.col("end_ns") - 1 - lo) // res + 1)
                            .alias("_b"))
        .explode("_b")
        .with_columns(
            pl.max_horizontal("start_ns", lo + pl.col("_b") * res).alias("start_ns"),
            pl.min_horizontal("end_ns", lo + (pl.col("_b") + 1) * res).alias("end_ns"),
            pl.when(pl.col("_b") == pl.col("_b0")).then(pl.col("count")).otherwise(0).alias("count"),
        )
    )
    bins = pieces.group_by([*keys, "_b"]).agg(
        pl.col("start_ns").min(), (pl.col("end_ns") - pl.col("start_ns")).sum().alias("busy_ns"),
        pl.col("count").sum(), pl.col("name").first(),
    ).with_columns((pl.col("start_ns") + pl.col("busy_ns")).alias("end_ns"))
    # full bins in a row touch: one segment, fewer points to ship
    bins = bins.sort([*keys, "start_ns"]).with_columns(pl.col("end_ns").shift(1).over(keys).alias("_prev"))
    bins = bins.with_columns((pl.col("_prev").is_null() | (pl.col("start_ns") > pl.col("_prev"))).cum_sum()
                             .alias("_seg"))
    segs = bins.group_by("_seg").agg(
        *[pl.col(c).first() for c in keys], pl.col("start_ns").min(), pl.col("end_ns").max(),
        pl.col("busy_ns").sum(), pl.col("count").sum(), pl.col("name").first(),
    )
    return segs.drop("_seg").sort([*keys, "start_ns"])


def lane_extent(gpu: pl.DataFrame, lane_cols: list[str], window_ns: tuple[int, int] | None) -> pl.DataFrame:
    """First start and last end per lane (clipped): the idle background line under the busy segments."""
    df = gpu
    if window_ns is not None:
        lo, hi = window_ns
        df = df.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)).with_columns(
            pl.col("start_ns").clip(lo, hi), pl.col("end_ns").clip(lo, hi))
    return df.group_by(lane_cols).agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort(lane_cols)


def union_length(starts: list[int], ends: list[int]) -> int:
    """|∪ [s, e)| of plain intervals (tests use it against the merged segments)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(zip(starts, ends)):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total
