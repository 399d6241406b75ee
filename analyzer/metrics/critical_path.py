"""The critical path of each step through the dependency graph: what the step's end depended on.

Backwards from the step's last operation to end (over all ranks, aligned clock): each operation was
held up by its binding predecessor (what ended last before it started on its rank), the time between
them being host/launch time or idle. At a matched collective the path jumps to the last arriver (its
kernel is the transfer; the others' extra duration was waiting for it) and goes on from that rank's
predecessor. The path stops where it leaves the step (a predecessor that ended before the step began: the earliest
window start of any rank, aligned); everything is clipped to the step, so the time from its start to
the path's first operation is host/idle on that rank and the parts add up to the step's span.
The step's span splits into compute (operations that are not communication), exposed transfer
(communication on the path: nothing hid it), wait (a kernel's duration beyond the transfer, where the
path could not jump) and host/idle, per rank on the path. Pure: tables in, table out.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..crossrank.graph import Graph

FIELDS = ("compute_ns", "exposed_transfer_ns", "wait_ns", "host_idle_ns")


def critical_path(g: Graph) -> pl.DataFrame:
    """One row per (step, rank on the path): step, rank, compute_ns, exposed_transfer_ns, wait_ns, host_idle_ns.
    Steps are the graph's own windows (``g.steps``, on the aligned clock there)."""
    empty = pl.DataFrame(schema={"step": pl.Int64, "rank": pl.Int32, **{f: pl.Float64 for f in FIELDS}})
    n = g.nodes
    if n.height == 0 or g.steps is None or g.steps.height == 0 or n["step"].null_count() == n.height:
        return empty
    bp = n["bind_pred"].fill_null(-1).to_numpy()
    inst = n["inst"].fill_null(-1).to_numpy()
    # a matched kernel stands for the one it waited for (its instance's last arriver; in a ring's hop, its peer)
    redirect = n["gate_node"].to_numpy()
    a_end = n["a_end_ns"].to_numpy().astype(np.float64)
    a_start = n["a_start_ns"].to_numpy().astype(np.float64)
    job = _job_windows(g.steps)
    in_step = n.select("node", "step", "rank", "a_end_ns").filter(pl.col("step").is_not_null())
    ends = in_step.sort("a_end_ns", "node").group_by("step").agg(pl.col("node").last(), pl.col("rank").last())
    ends = ends.join(job, on="step", how="inner").sort("step")
    if ends.height == 0:
        return empty
    root0 = ends["node"].to_numpy()
    # walk every step's path at once; a path leaves its step where a predecessor ended before the step began.
    # `upper`: where the path stands when it reaches a node (the end of the kernel it came from: at a jump
    # to the last arriver, the kernel on the rank it left may end later than the last arriver's)
    cur, t0, stp = redirect[root0], ends["start_ns"].to_numpy().astype(np.float64), ends["step"].to_numpy()
    # a kernel that runs past its step's end (windows tile: the next step began) counts up to that end only
    pre, upper = root0, np.minimum(a_end[root0], ends["end_ns"].to_numpy().astype(np.float64))
    seen: list[tuple[np.ndarray, ...]] = []
    for _ in range(n.height):  # strictly backwards in time; the bound only guards against bad matches
        seen.append((cur, pre, upper, t0, stp))
        b = bp[cur]
        more = (b >= 0) & (a_end[np.maximum(b, 0)] > t0)
        b, t0, stp = b[more], t0[more], stp[more]
        cur, pre, upper = redirect[b], b, a_end[b]
        if cur.size == 0:
            break
    on, pre, upper, t0, stp = (np.concatenate(x) for x in zip(*seen))

    dur = n["dur_ns"].to_numpy().astype(np.float64)[on]
    tr = n["transfer_ns"].fill_null(-1).to_numpy().astype(np.float64)[on]
    comm = (n["kind"] == "comm").to_numpy()[on]
    matched = inst[on] >= 0
    s0, e0 = a_start[on], np.minimum(a_end[on], upper)
    # a kernel's last `transfer` is transfer, what comes before it waiting; everything clipped to [t0, upper]
    transfer = np.where(matched, np.clip(tr, 0, dur), np.where(comm, dur, 0.0))
    w_end = a_end[on] - transfer
    clip_start = np.maximum(s0, t0)
    compute = np.where(comm, 0.0, np.maximum(e0 - clip_start, 0.0))
    wait = np.where(comm, np.maximum(np.minimum(w_end, e0) - clip_start, 0.0), 0.0)
    xfer = np.where(comm, np.maximum(e0 - np.maximum(w_end, t0), 0.0), 0.0)
    b = bp[on]
    b_end = np.where(b >= 0, a_end[np.maximum(b, 0)], -np.inf)
    idle = np.maximum(np.minimum(s0, upper) - np.maximum(b_end, t0), 0.0)  # host/launch gap before it
    # the kernel the path jumped from ran on after the last arriver's ended: its tail is transfer on that rank
    tail_x = np.maximum(upper - np.maximum(a_end[on], t0), 0.0)
    ranks = n["rank"].to_numpy()
    zero = np.zeros(on.size)
    contrib = pl.DataFrame({
        "step": np.concatenate([stp, stp]), "rank": np.concatenate([ranks[on], ranks[pre]]),
        "compute_ns": np.concatenate([compute, zero]), "exposed_transfer_ns": np.concatenate([xfer, tail_x]),
        "wait_ns": np.concatenate([wait, zero]), "host_idle_ns": np.concatenate([idle, zero]),
    })
    # the step's tail after its last operation (idle until the step ends) is the ending rank's
    tail = ends.select("step", "rank", pl.lit(0.0).alias("compute_ns"), pl.lit(0.0).alias("exposed_transfer_ns"),
                       pl.lit(0.0).alias("wait_ns"),
                       pl.max_horizontal(pl.col("end_ns") - pl.Series(a_end[root0]), pl.lit(0)).cast(pl.Float64)
                       .alias("host_idle_ns"))
    out = pl.concat([contrib.cast({"rank": pl.Int32, "step": pl.Int64}), tail.cast({"rank": pl.Int32, "step": pl.Int64})])
    return out.group_by("step", "rank").agg(pl.col(f).sum() for f in FIELDS).sort("step", "rank")


def _job_windows(steps: pl.DataFrame) -> pl.DataFrame:
    """Per step, the earliest window start and the latest window end over ranks, on the aligned clock."""
    return steps.group_by("step").agg(pl.col("a_start_ns").min().alias("start_ns"), pl.col("a_end_ns").max().alias("end_ns"))


def step_summary(cp: pl.DataFrame) -> pl.DataFrame:
    """Per step: the path's total split and the rank holding most of it (for a text line per step)."""
    if cp.height == 0:
        return cp.select("step")
    tot = pl.sum_horizontal(*FIELDS)
    return (
        cp.with_columns(tot.alias("_t"))
        .group_by("step")
        .agg(*(pl.col(f).sum() for f in FIELDS), pl.col("_t").sum().alias("path_ns"),
             pl.col("rank").sort_by("_t", descending=True).first().alias("top_rank"),
             pl.col("rank").n_unique().alias("ranks"))
        .sort("step")
    )
