"""Communication the catalogue may have missed: the warnings that keep a report from being silently wrong.

Two cases, per rank:
- a job that declares several ranks but shows no recognized communication at all: its top candidates are the
  longest kernels off the rank's main compute stream (where a side stream carries communication in every
  library the catalogue knows), or, without side streams, the kernels whose names use the words of
  communication (``candidate_words`` in ``comm_catalogue.toml``);
- kernels on a stream without recognized communication, off the main compute stream, whose names use those
  words, that overlap the main stream's compute for at least half their time and add up to at least 1% of the
  rank's summed kernel time: either communication beside compute, or compute the report counts rightly;
  the user decides with ``--comm-kernel``.
Pure: tables in, (rank, name, ns) rows out; the analysis words the warnings.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..comm_catalogue import catalogue
from .coverage import RankAxis, RankedCoverage

MIN_SHARE = 0.01  # of the rank's summed kernel time: below this a side-stream kernel is not worth a warning
MIN_OVERLAP = 0.5  # of the kernels' own time spent beside the main stream's compute
TOP = 3

CANDIDATES = {"rank": pl.Int32, "name": pl.Utf8, "kernels": pl.UInt32, "total_ns": pl.Int64, "overlap_ns": pl.Int64}


def short_name(name: str) -> str:
    """A kernel's name without return type, template and argument lists: what a person (and a regex) names."""
    n = name.removeprefix("void ").strip()
    for stop in ("(", "<"):
        at = n.find(stop)
        if at > 0:
            n = n[:at]
    return n.strip() or name


def _side(gpu: pl.DataFrame, coll: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(compute kernels off their rank's main stream and off every stream with recognized communication, the
    main streams' compute kernels)."""
    comp = gpu.filter((pl.col("kind") == "compute") & (pl.col("end_ns") > pl.col("start_ns"))).select(
        "rank", "stream", "start_ns", "end_ns", "name")
    busy = comp.group_by("rank", "stream").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("_t"))
    main = busy.sort("_t", "stream", descending=[True, False]).unique("rank", keep="first").select("rank", "stream")
    comm_streams = coll.select("rank", "stream").unique() if coll.height else main.head(0)
    side = comp.join(main, on=["rank", "stream"], how="anti").join(comm_streams, on=["rank", "stream"], how="anti")
    return side, comp.join(main, on=["rank", "stream"], how="semi")


def _overlap(side: pl.DataFrame, main: pl.DataFrame) -> np.ndarray:
    """Each side kernel's time beside its rank's main-stream compute."""
    if side.height == 0 or main.height == 0:
        return np.zeros(side.height, dtype=np.int64)
    r = np.concatenate([side["rank"].to_numpy(), main["rank"].to_numpy()])
    s = np.concatenate([side["start_ns"].to_numpy(), main["start_ns"].to_numpy()])
    e = np.concatenate([side["end_ns"].to_numpy(), main["end_ns"].to_numpy()])
    axis = RankAxis.of(r, s, e)
    cov = RankedCoverage.of(axis, main["rank"].to_numpy(), main["start_ns"].to_numpy(), main["end_ns"].to_numpy())
    idx = axis.index(side["rank"].to_numpy())
    return cov.within(idx, side["start_ns"].to_numpy(), side["end_ns"].to_numpy())


def _by_name(side: pl.DataFrame, overlap: np.ndarray) -> pl.DataFrame:
    if side.height == 0:
        return pl.DataFrame(schema=CANDIDATES)
    return (side.with_columns(pl.Series("_o", overlap, dtype=pl.Int64),
                              pl.col("name").map_elements(short_name, return_dtype=pl.Utf8).alias("name"))
            .group_by("rank", "name").agg(pl.len().alias("kernels"),
                                          (pl.col("end_ns") - pl.col("start_ns")).sum().alias("total_ns"),
                                          pl.col("_o").sum().alias("overlap_ns"))
            .select([pl.col(c).cast(t) for c, t in CANDIDATES.items()]))


def no_comm_candidates(gpu: pl.DataFrame, coll: pl.DataFrame) -> pl.DataFrame:
    """Where no communication was recognized: per rank, the longest kernels off the main compute stream, or
    (no side stream) the longest whose names use communication's words; the first ``TOP`` by time."""
    side, main = _side(gpu, coll)
    found = _by_name(side, _overlap(side, main))
    words = catalogue().candidate_words
    if found.height == 0 and words:
        comp = gpu.filter((pl.col("kind") == "compute") & pl.col("name").str.contains(words).fill_null(False))
        found = _by_name(comp.select("rank", "stream", "start_ns", "end_ns", "name"), np.zeros(comp.height, np.int64))
    return found.sort("total_ns", "name", descending=[True, False]).group_by("rank", maintain_order=True).head(TOP)


def side_candidates(gpu: pl.DataFrame, coll: pl.DataFrame) -> pl.DataFrame:
    """Long side-stream kernels named like communication that overlap compute (see the module doc)."""
    words = catalogue().candidate_words
    side, main = _side(gpu, coll)
    if not words or side.height == 0:
        return pl.DataFrame(schema=CANDIDATES)
    named = side.filter(pl.col("name").str.contains(words).fill_null(False))
    found = _by_name(named, _overlap(named, main))
    busy = gpu.filter(pl.col("kind").is_in(["compute", "comm"])).group_by("rank").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("_busy"))
    return (found.join(busy, on="rank")
            .filter((pl.col("total_ns") >= MIN_SHARE * pl.col("_busy"))
                    & (pl.col("overlap_ns") >= MIN_OVERLAP * pl.col("total_ns")))
            .drop("_busy").sort("total_ns", "name", descending=[True, False])
            .group_by("rank", maintain_order=True).head(TOP))
