"""GPU events that cannot be as the file says: fixed in one stated way, counted, and said; one rule for every format.

After ``hygiene`` (no null or negative times are left), per rank, in this order:

1. exact duplicates (same device, stream, times, name, correlation) are dropped: a writer repeated them;
2. an event longer than everything else the rank recorded (its capture window without it) by over a second is
   dropped: a ``dur`` of 1e15 us would otherwise make ``comm_ms`` ~1e12;
3. an event that runs past the start of the next event on its stream is clipped to end there: a stream runs one
   thing at a time, and a stretched kernel would lower compute or raise waits without a word;
4. kernels without a name are kept as kind ``other`` (``comm_catalogue.gpu_kind``): counted as neither compute nor
   communication, never guessed.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..ranklist import compact
from ..rules import NS_PER_MS

# how much longer than the rest of its rank's capture an event may be: a kernel launched before the profiler started
# can outlast the events around it; one that outlasts them by over a second (a dur of 1e15 us) is a broken record
WINDOW_SLACK_NS = 10**9
_KEY = ["rank", "device", "stream", "start_ns", "end_ns", "name", "correlation"]


def _ranks(df: pl.DataFrame) -> str:
    return compact(sorted(df["rank"].unique().to_list()))


def check_gpu(gpu: pl.DataFrame, cpu: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """The canonical ``gpu`` table (all ranks) with the rules above applied, and one warning per rule that fired."""
    warnings: list[str] = []
    if gpu.height == 0:
        return gpu, warnings
    n = gpu.height
    if _may_repeat(gpu):
        gpu = gpu.unique(subset=_KEY, keep="first", maintain_order=True)
    if gpu.height < n:
        warnings.append(f"dropped {n - gpu.height} duplicate GPU events (same stream, times, name and correlation "
                        f"as another) on rank(s) {_ranks(gpu)}")
    gpu, w = _longer_than_window(gpu, cpu)
    warnings += w
    gpu, w = _clip_stream_overlaps(gpu)
    warnings += w
    unnamed = gpu.filter(pl.col("name").is_null())
    if unnamed.height:
        warnings.append(f"{unnamed.height} GPU kernels on rank(s) {_ranks(unnamed)} have no name (null, empty or not "
                        "a string): counted as neither compute nor communication")
    return gpu, warnings


_NUMERIC_KEY = ["rank", "device", "stream", "start_ns", "end_ns", "correlation"]


def _keys(gpu: pl.DataFrame, names: list[str]) -> list[np.ndarray]:
    """Each column as int64 with its nulls told apart: a null flag, then the values (nulls as 0)."""
    out = []
    for c in names:
        s = gpu[c]
        if s.null_count():
            out.append(s.is_null().to_numpy())
        out.append(s.fill_null(0).cast(pl.Int64).to_numpy())
    return out


def _may_repeat(gpu: pl.DataFrame) -> bool:
    """Whether two events agree on every numeric column of ``_KEY``, which a duplicate must: one sort of six
    integer columns (~0.07 s for 1.1 M events), where the exact ``unique`` hashes the names too (~0.4 s)."""
    cols = _keys(gpu, _NUMERIC_KEY)
    order = np.lexsort(cols[::-1])
    same = np.ones(max(gpu.height - 1, 0), dtype=bool)
    for c in cols:
        v = c[order]
        same &= v[1:] == v[:-1]
    return bool(same.any())


def _longer_than_window(gpu: pl.DataFrame, cpu: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Drop events longer than the span of all the rank's other events (host and GPU) plus ``WINDOW_SLACK_NS``."""
    spans = pl.concat([gpu.select("rank", "start_ns", "end_ns"),
                       cpu.select("rank", "start_ns", "end_ns").drop_nulls()])
    # the window without one event: its rank's extremes, or the runner-up where that event is the extreme
    edges = spans.group_by("rank").agg(
        pl.col("start_ns").bottom_k(2).alias("lo"), pl.col("end_ns").top_k(2).alias("hi"))
    edges = edges.select(
        "rank",
        pl.col("lo").list.get(0, null_on_oob=True).alias("lo1"), pl.col("lo").list.get(1, null_on_oob=True).alias("lo2"),
        pl.col("hi").list.get(0, null_on_oob=True).alias("hi1"), pl.col("hi").list.get(1, null_on_oob=True).alias("hi2"),
    )
    g = gpu.join(edges, on="rank", how="left")
    lo = pl.when(pl.col("start_ns") == pl.col("lo1")).then(pl.col("lo2")).otherwise(pl.col("lo1"))
    hi = pl.when(pl.col("end_ns") == pl.col("hi1")).then(pl.col("hi2")).otherwise(pl.col("hi1"))
    too_long = ((pl.col("end_ns") - pl.col("start_ns")) > (hi - lo) + WINDOW_SLACK_NS).fill_null(False)
    bad = g.filter(too_long)
    if bad.height == 0:
        return gpu, []
    longest = float((bad["end_ns"] - bad["start_ns"]).max()) / 1e9  # type: ignore[arg-type]
    kept = g.filter(~too_long).select(gpu.columns)
    return kept, [f"dropped {bad.height} GPU events longer than their rank's whole capture window (rank(s) "
                  f"{_ranks(bad)}; the longest claimed {longest:,.3g} s)"]


def _clip_stream_overlaps(gpu: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Clip each event that ends after the next event on its (rank, device, stream) has ended: a stream runs its
    kernels one after another, so an event that spans its successor is impossible (a stretched or corrupt
    record); it now ends where the successor begins. A partial overlap (the successor starts a little before
    this one ends) is real: programmatic dependent launch, and Kineto's microsecond rounding (2 us on an HTA
    sample), so it is left as measured. CUDA sync records
    (``Stream Wait Event``, ``Stream Sync``) are no work the stream runs: they lie over the kernels around them
    in real captures (58 on the shared Nsight export's device 0), so they neither clip nor are clipped."""
    if not _any_spans_next(gpu):
        return gpu, []
    order = gpu.with_row_index("_i").with_columns((pl.col("kind") == "sync").fill_null(False).alias("_sync"))
    order = order.sort("rank", "device", "stream", "_sync", "start_ns", "end_ns")
    by = ("rank", "device", "stream", "_sync")
    order = order.with_columns(pl.col("start_ns").shift(-1).over(by).alias("_next"),
                               pl.col("end_ns").shift(-1).over(by).alias("_next_end"))
    over = ((pl.col("end_ns") > pl.col("_next")) & (pl.col("end_ns") >= pl.col("_next_end"))
            & pl.col("stream").is_not_null() & ~pl.col("_sync"))
    hit = order.filter(over.fill_null(False))
    if hit.height == 0:
        return gpu, []
    worst = float((hit["end_ns"] - hit["_next"]).max()) / NS_PER_MS  # type: ignore[arg-type]
    fixed = order.with_columns(
        pl.when(over.fill_null(False)).then(pl.col("_next")).otherwise(pl.col("end_ns")).alias("end_ns")
    ).sort("_i").select(gpu.columns)
    return fixed, [f"clipped {hit.height} GPU events that overlap the next event on their stream past its end (a "
                   f"stream runs one at a time) by up to {worst:,.3f} ms on rank(s) {_ranks(hit)}: each now ends where "
                   "the next begins"]


def _any_spans_next(gpu: pl.DataFrame) -> bool:
    """Whether any event ends after the next one on its stream has ended (the clip's condition), in numpy: most
    jobs have none, and the Polars form (a six-key sort, two shifts over groups) cost ~0.4 s at 1.1 M events to
    find none. Events tied on (start, end) give the same answer in any order, so the sort need not be stable."""
    if gpu["start_ns"].null_count() or gpu["end_ns"].null_count():
        return True  # not after hygiene: the exact form decides
    sync = (gpu["kind"] == "sync").fill_null(False).to_numpy()
    group = _keys(gpu, ["rank", "device", "stream"])
    start, end = gpu["start_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    order = np.lexsort([end, start, sync, *group[::-1]])
    same = np.ones(max(gpu.height - 1, 0), dtype=bool)
    for c in (*group, sync):
        v = c[order]
        same &= v[1:] == v[:-1]
    s, e = start[order], end[order]
    works = (~sync & gpu["stream"].is_not_null().to_numpy())[order]  # sync records and stream-less events never clip
    return bool((same & (e[:-1] > s[1:]) & (e[:-1] >= e[1:]) & works[:-1]).any())
