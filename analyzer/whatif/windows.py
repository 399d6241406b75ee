"""Step times of a replay (replay.py): the (rank, step) windows, how far each moved, and the job's step.

A window's start moves with its first operation, its end with its last operation's end (or, where windows tile,
with the next window's start). The job's step is what step_sync reports for a synchronous job: one interval on
the aligned clock, from the earliest start of step N on any rank to the earliest start of step N+1 (the last step
to the latest end), replayed the same way. Its mean over steps is the step time every scenario is measured by
(it telescopes: making operations faster can shorten it, never lengthen it, where the replay is monotone). Ranks
that share no matched collective have no common clock: their step is the longest rank window.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..crossrank.graph import Graph

TOKENS = itertools.count()  # never reused (an id() is, once its object is gone)


@dataclass(frozen=True)
class Segments:
    """Nodes grouped by (rank, step) window, for step times."""

    order: np.ndarray  # node indices, grouped
    bounds: np.ndarray  # segment start offsets into ``order``
    rel_start: np.ndarray  # each grouped node's start − its segment's first start (ns)
    rel_end: np.ndarray  # each grouped node's end − its segment's first start
    table: pl.DataFrame  # rank, step, span_ns (window), first_ns (min start), last_ns (max end), a_ws, a_we
    next_seg: np.ndarray  # the rank's next segment when this window ends where it starts (tiled), else -1
    job: bool = False  # one step interval for the whole job (aligned clock), else the longest rank window
    token: int = field(default_factory=lambda: next(TOKENS), compare=False)  # names these windows in memos


def segments(g: Graph, steps: pl.DataFrame) -> Segments:
    """(rank, step) windows with their nodes; without steps, each rank's whole window is one step (-1)."""
    n = g.nodes.select("node", "rank", "start_ns", "end_ns", pl.col("step").fill_null(-2))
    if steps.height:
        n = n.filter(pl.col("step") >= 0)
        win = steps.group_by("rank", "step").agg(pl.col("start_ns").min().alias("ws"), pl.col("end_ns").max().alias("we"))
    else:
        n = n.with_columns(pl.lit(-1, dtype=pl.Int64).alias("step"))
        win = n.group_by("rank", "step").agg(pl.col("start_ns").min().alias("ws"), pl.col("end_ns").max().alias("we"))
    n = n.sort("rank", "step", "node").with_columns(pl.col("start_ns").min().over("rank", "step").alias("_f"))
    seg = n.group_by("rank", "step", maintain_order=True).agg(
        pl.len().alias("_n"), pl.col("start_ns").min().alias("first_ns"), pl.col("end_ns").max().alias("last_ns"))
    seg = seg.join(win, on=["rank", "step"], how="left", maintain_order="left").with_columns(
        pl.coalesce("ws", "first_ns").alias("ws"), pl.coalesce("we", "last_ns").alias("we"))
    off = g.clock.offset()
    bounds = np.concatenate([[0], np.cumsum(seg["_n"].to_numpy())[:-1]]).astype(np.int64)
    table = seg.select("rank", "step", (pl.col("we") - pl.col("ws")).alias("span_ns"), "first_ns", "last_ns",
                       (pl.col("ws") - off).alias("a_ws"), (pl.col("we") - off).alias("a_we"))
    rel_s = (n["start_ns"] - n["_f"]).to_numpy().astype(np.float64)
    rel_e = (n["end_ns"] - n["_f"]).to_numpy().astype(np.float64)
    tiled = seg.with_row_index("_i").with_columns(
        pl.col("_i").shift(-1).over("rank").alias("_next"), pl.col("ws").shift(-1).over("rank").alias("_next_ws"))
    nxt = tiled.select(pl.when(pl.col("_next_ws") == pl.col("we")).then(pl.col("_next")).otherwise(None)
                       .cast(pl.Int64).fill_null(-1))["_next"].to_numpy()
    # the job's step where its ranks share a clock (as step_sync reports it)
    linked = g.instances.height > 0 and g.clock.method != "none" and table["rank"].n_unique() > 1
    return Segments(n["node"].to_numpy(), bounds, rel_s, rel_e, table, nxt, job=bool(linked))


def shifts(seg: Segments, ds: np.ndarray, de: np.ndarray) -> np.ndarray:
    """(S, 2, windows): how far each window's first start and last end moved (from ``run``'s Δs, Δe)."""
    s = ds.shape[0]
    if seg.order.size == 0:
        return np.zeros((s, 2, 0))
    out = np.empty((s, 2, seg.bounds.size))
    out[:, 0] = np.minimum.reduceat(ds[:, seg.order] + seg.rel_start, seg.bounds, axis=1)
    last_m = (seg.table["last_ns"] - seg.table["first_ns"]).to_numpy().astype(np.float64)
    out[:, 1] = np.maximum.reduceat(de[:, seg.order] + seg.rel_end, seg.bounds, axis=1) - last_m
    return out


def window_spans(seg: Segments, sh: np.ndarray) -> np.ndarray:
    """Replayed span of each (rank, step) window from its ``shifts`` (..., 2, windows) -> (..., windows)."""
    span = seg.table["span_ns"].to_numpy().astype(np.float64)
    first, last = sh[..., 0, :], sh[..., 1, :]
    if not span.size:
        return first.copy()
    # a window that ends where the next starts (tiled steps) ends where the next one starts in the replay
    tiled = seg.next_seg >= 0
    end_shift = np.where(tiled, first[..., np.maximum(seg.next_seg, 0)], last)
    return span + end_shift - first


def step_spans(seg: Segments, ds: np.ndarray, de: np.ndarray) -> np.ndarray:
    """Replayed span (S, windows) of every (rank, step) window."""
    return window_spans(seg, shifts(seg, ds, de))


def step_times(seg: Segments, sh: np.ndarray) -> np.ndarray:
    """Each step's time (..., steps) from the windows' ``shifts`` (..., 2, windows): the job's interval where its
    ranks share a clock, else the longest rank window (steps in ascending order)."""
    steps = seg.table["step"].to_numpy()
    keys, inv = np.unique(steps, return_inverse=True)
    lead = sh.shape[:-2]
    if not keys.size:
        return np.zeros((*lead, 0))
    # windows grouped by step, each step's least and greatest at once (a maximum or minimum is exact, so grouped
    # or one step at a time, the same bits; a Python loop over steps cost 0.15 s on a 200-step job)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(keys.size))
    if not seg.job:
        return np.maximum.reduceat(window_spans(seg, sh)[..., order], bounds, axis=-1)
    ws = seg.table["a_ws"].to_numpy().astype(np.float64) + sh[..., 0, :]
    we = seg.table["a_we"].to_numpy().astype(np.float64) + sh[..., 1, :]
    start = np.minimum.reduceat(ws[..., order], bounds, axis=-1)
    end = np.maximum.reduceat(we[..., order], bounds, axis=-1)
    # step N ends where step N+1 starts; the last where its latest window ends
    stop = np.concatenate([start[..., 1:], end[..., -1:]], axis=-1)
    return stop - start
