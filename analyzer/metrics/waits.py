"""Waiting inside collectives: per instance transfer and wait, per rank wait suffered and caused.

For a matched instance with per-rank kernel durations d_r: transfer ≈ min_r d_r (the last arriver
barely waits) and wait_r = d_r − transfer. This needs no clock alignment; the rank with the shortest
kernel is the one that arrived last. Start/end skews use the aligned clock.

``last_rank`` is per row: the rank that row waited for. In a collective that is the instance's last
arriver on every row. A ring's hop (a group exchange of batched SendRecv kernels among 3 ranks or more,
each kernel sending to one rank and receiving from another) is no barrier: each kernel waits only for its
own two peers, its kernels do not end together, and an eager send completes without its receiver, so the
shortest kernel need not be the last arriver's. There a row waited for whichever of its send and recv peers
started last on the aligned clock, before the row's kernel ended (itself, when it started after both: it
waited for nobody). ``inst_last`` is the instance's last arriver (a ring's hop: the latest start).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..crossrank.match import ring_hop
from .coverage import Coverage
from .overlap import RankCoverage


def per_row(inst: pl.DataFrame, aligned_start: pl.Series, aligned_end: pl.Series) -> pl.DataFrame:
    """Every comm kernel with duration; matched ones also get transfer, wait and the last rank."""
    df = inst.with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
        aligned_start.alias("a_start_ns"),
        aligned_end.alias("a_end_ns"),
    )
    matched = pl.col("instance").is_not_null()
    df = df.with_columns(
        pl.when(matched).then(pl.col("dur_ns").min().over("instance")).alias("transfer_ns"),
        pl.when(matched).then(pl.col("rank").sort_by("dur_ns").first().over("instance")).alias("inst_last"),
    ).with_columns((pl.col("dur_ns") - pl.col("transfer_ns")).alias("wait_ns"))
    ring = ring_hop(df)
    if ring is None:  # no ring hops (the common case): every row waited for its instance's last arriver
        return df.with_columns(pl.col("inst_last").alias("last_rank"))
    latest = pl.col("rank").sort_by("a_start_ns", descending=True).first().over("instance")
    df = df.with_columns(pl.when(matched & ring).then(latest).otherwise(pl.col("inst_last")).alias("inst_last"))
    df = df.with_columns(_gates(df, ring).alias("last_rank"))
    # in a ring's hop a row waited only until its gate started (not at all when it was its own gate); the rest
    # of its kernel moved data, however much longer that took than the hop's fastest kernel
    starts = df.filter(ring).select("instance", pl.col("rank").alias("last_rank"), pl.col("a_start_ns").alias("_gs"))
    if starts.height == 0:
        return df
    df = df.join(starts, on=["instance", "last_rank"], how="left", maintain_order="left")
    hop_wait = pl.min_horizontal("wait_ns", (pl.col("_gs") - pl.col("a_start_ns")).clip(0))
    return df.with_columns(
        pl.when(ring).then(hop_wait).otherwise(pl.col("wait_ns")).alias("wait_ns"),
    ).with_columns(
        pl.when(ring).then(pl.col("dur_ns") - pl.col("wait_ns")).otherwise(pl.col("transfer_ns")).alias("transfer_ns"),
    ).drop("_gs")


def _gates(df: pl.DataFrame, ring: pl.Expr) -> pl.Series:
    """Per row, the rank it waited for: the instance's last arriver, or in a ring's hop the latest starter of
    itself and its two peers that started before it ended (a tie goes to itself, then to the lower rank)."""
    hop = df.with_row_index("_i").filter(ring).select("_i", "instance", "rank", "a_start_ns", "a_end_ns",
                                                         "send_peer", "recv_peer")
    if hop.height == 0:
        return df["inst_last"]
    starts = hop.select("instance", pl.col("rank").alias("_p"), pl.col("a_start_ns").alias("_ps"))
    cand = pl.concat([
        hop.select("_i", "instance", "a_end_ns", pl.col(p).alias("_p"), pl.lit(k, pl.Int8).alias("_other"))
        for p, k in (("rank", 0), ("send_peer", 1), ("recv_peer", 1))
    ]).join(starts, on=["instance", "_p"])  # a peer absent from the instance (not in the traces) drops out
    # a peer that started after this kernel ended held nothing of it (an eager send to it finished first)
    cand = cand.filter((pl.col("_other") == 0) | (pl.col("_ps") <= pl.col("a_end_ns")))
    gate = (cand.sort(["_ps", "_other", "_p"], descending=[True, False, False])
            .group_by("_i").agg(pl.col("_p").first()))
    return df["inst_last"].scatter(gate["_i"], gate["_p"].cast(df["inst_last"].dtype))


def matched(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.filter(pl.col("instance").is_not_null())


def rank_table(rows: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Per rank: wait suffered, wait caused to others, instances, last arrivals, steps where last."""
    base = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32})
    if rows.height == 0:
        return base.with_columns(
            pl.lit(0, dtype=pl.Int64).alias("wait_ns"), pl.lit(0, dtype=pl.Int64).alias("caused_wait_ns"),
            pl.lit(0, dtype=pl.UInt32).alias("instances"), pl.lit(0, dtype=pl.UInt32).alias("last_count"),
            pl.lit(0, dtype=pl.UInt32).alias("steps_seen"), pl.lit(0, dtype=pl.UInt32).alias("steps_last"),
        )
    suffered = rows.group_by("rank").agg(pl.col("wait_ns").sum(), pl.len().alias("instances"))
    # wait is caused by the rank each row waited for (a row that waited for nobody has no wait)
    caused = (
        rows.group_by("instance", "last_rank")
        .agg(pl.col("wait_ns").sum().alias("caused_wait_ns"))
        .group_by("last_rank")
        .agg(pl.col("caused_wait_ns").sum(), pl.len().alias("last_count"))
        .rename({"last_rank": "rank"})
    )
    # a step's straggler: the rank that caused the most wait in it
    step_rows = rows.filter(pl.col("step").is_not_null())
    by_step = (
        step_rows.group_by("step", "last_rank").agg(pl.col("wait_ns").sum().alias("w"))
        .sort("w", descending=True)
        .group_by("step")
        .agg(pl.col("last_rank").first().alias("rank"), pl.col("w").first())
        .filter(pl.col("w") > 0)
        .group_by("rank")
        .agg(pl.len().alias("steps_last"))
    )
    steps_seen = step_rows.group_by("rank").agg(pl.col("step").n_unique().alias("steps_seen"))
    out = (
        base.join(suffered, on="rank", how="left")
        .join(caused, on="rank", how="left")
        .join(by_step, on="rank", how="left")
        .join(steps_seen, on="rank", how="left")
    )
    return out.with_columns(pl.col(c).fill_null(0) for c in
                            ("wait_ns", "instances", "caused_wait_ns", "last_count", "steps_last", "steps_seen"))


def exposed_split(rows: pl.DataFrame, covs: RankCoverage, windows: pl.DataFrame) -> pl.DataFrame:
    """Exposed comm split into wait and transfer, per (rank, window), for all ranks at once.

    Each comm kernel's exposed part (not under compute) is split in proportion wait/d; the per-kernel
    parts are then scaled to the window's exposed union so wait + transfer = exposed exactly.
    Unmatched kernels count as transfer (no peer to wait for is known).
    ``windows``: rank, key, start_ns, end_ns, exposed_comm_ns; a negative key marks a whole-window row.
    Ranks without comm kernels or without GPU activity get no rows.
    """
    schema = {"rank": pl.Int32, "key": pl.Int64, "exposed_wait_ns": pl.Float64, "exposed_transfer_ns": pl.Float64}
    kern = rows.select("rank", "start_ns", "end_ns", pl.col("wait_ns").fill_null(0))
    w = (
        windows.filter(pl.col("rank").is_in(kern["rank"].unique().implode()))
        .with_row_index("_w").sort("rank", "_w")  # rank by rank, each rank's windows in their order
    )
    widx = covs.index(w["rank"].to_numpy())
    w = w.filter(pl.Series(widx >= 0))
    widx = widx[widx >= 0]
    kern = kern.filter(pl.col("end_ns") > pl.col("start_ns"))  # an empty kernel has no exposed part
    kidx = covs.index(kern["rank"].to_numpy())
    kern = kern.filter(pl.Series(kidx >= 0))
    kidx = kidx[kidx >= 0]
    a, b = w["start_ns"].to_numpy(), w["end_ns"].to_numpy()
    exposed = w["exposed_comm_ns"].to_numpy()
    s, e = kern["start_ns"].to_numpy(), kern["end_ns"].to_numpy()
    wait = kern["wait_ns"].to_numpy().astype(np.float64)

    k, j = _overlapping_pairs(covs, kidx, s, e, widx, a, b, w["key"].to_numpy() < 0)
    cs, ce = np.clip(s[k], a[j], b[j]), np.clip(e[k], a[j], b[j])
    d = (ce - cs).astype(np.float64)
    mask = d > 0
    k, j, cs, ce, d = k[mask], j[mask], cs[mask], ce[mask], d[mask]
    kexp = d - covs.compute.within(kidx[k], cs, ce)
    full = (e - s)[k].astype(np.float64)
    frac = np.divide(np.minimum(wait[k], full), full, out=np.zeros_like(full), where=full > 0)
    n = w.height
    ew = np.bincount(j, weights=kexp * frac, minlength=n)
    total = np.bincount(j, weights=kexp, minlength=n)
    seen = np.bincount(j, minlength=n) > 0
    scale = np.divide(exposed, total, out=np.zeros(n), where=total > 0)
    ew = np.where(seen & (exposed > 0), ew * scale, 0.0)
    transfer = np.where(seen & (exposed > 0), exposed - ew, np.maximum(exposed, 0).astype(np.float64))
    return pl.DataFrame(
        {"rank": w["rank"], "key": w["key"], "exposed_wait_ns": ew, "exposed_transfer_ns": transfer}, schema=schema
    )


def _overlapping_pairs(covs: RankCoverage, kidx: np.ndarray, s: np.ndarray, e: np.ndarray, widx: np.ndarray,
                       a: np.ndarray, b: np.ndarray, whole: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kernel, window) index pairs of the same rank: every pair that overlaps, and a few that do not.

    On the shared axis a rank's windows sorted by start are searched for those starting before the
    kernel ends and, by the running maximum of their ends, ending after it starts. Whole-window rows
    are searched apart from the steps, whose windows follow one another, so a kernel meets ~1-2 steps.
    """
    ax = covs.axis
    ps, pe = ax.place(kidx, s), ax.place(kidx, e)
    ks, js = [], []
    for layer in (whole, ~whole):  # two layers, not a loop over ranks
        cand = np.flatnonzero(layer)
        pa, pb = ax.place(widx[cand], a[cand]), ax.place(widx[cand], b[cand])
        order = np.argsort(pa, kind="stable")
        run_end = np.maximum.accumulate(pb[order]) if order.size else pb
        lo = np.searchsorted(run_end, ps, side="right")
        hi = np.searchsorted(pa[order], pe, side="left")
        count = np.maximum(hi - lo, 0)
        k = np.repeat(np.arange(s.size), count)
        first = np.repeat(lo - (np.cumsum(count) - count), count)
        ks.append(k)
        js.append(cand[order[first + np.arange(k.size)]])
    return np.concatenate(ks), np.concatenate(js)


def lateness_cause(rows: pl.DataFrame, covs: RankCoverage, rank: int) -> dict[str, float]:
    """What the late rank's GPU did while the others already waited: compute or nothing (host).

    Its lateness windows [start − L, start] (L: the longest wait it caused in that instance) overlap
    when several collectives of a step wait for it, so they are measured as one union. The extra
    compute it ran compared with its peers (whole window) tells a compute straggler apart: a host
    straggler's GPU sits idle in those windows and computes no more than anyone else.
    """
    lateness = (
        rows.filter((pl.col("last_rank") == rank) & (pl.col("rank") != rank))
        .group_by("instance").agg(pl.col("wait_ns").max().alias("L"))
    )
    # its own kernel in each instance where someone waited for it (in a ring's hop it may itself have waited)
    mine = rows.filter(pl.col("rank") == rank).join(lateness, on="instance")
    idx = int(covs.index(np.array([rank]))[0])
    if idx < 0 or mine.height == 0:
        return {"late_ns": 0.0, "compute_ns": 0.0, "idle_ns": 0.0, "excess_compute_ns": 0.0, "steps": 0.0}
    s = mine["start_ns"].to_numpy()
    windows = Coverage.of(s - mine["L"].to_numpy(), s)
    a, b = windows.starts, windows.ends
    at = np.full(a.size, idx)
    union = float((b - a).sum())
    # how late it was: per step, the longest wait it caused (the step's collectives wait for the same delay)
    late = float(mine.group_by("step").agg(pl.col("L").max())["L"].sum())
    busy = float(covs.busy.within(at, a, b).sum())
    compute = covs.compute.totals()
    peers = np.delete(compute, idx)
    excess = compute[idx] - float(np.median(peers)) if peers.size else 0.0
    return {
        "late_ns": late,
        "compute_ns": float(covs.compute.within(at, a, b).sum()),
        "idle_ns": union - busy,
        "excess_compute_ns": max(float(excess), 0.0),
        "steps": float(mine["step"].n_unique()),
    }
