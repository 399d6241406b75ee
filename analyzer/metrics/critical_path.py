"""The critical path of each step through the dependency graph: what the step's end depended on.

Backwards from the step's last operation to end (over all ranks, aligned clock): each operation was
held up by its binding predecessor (what ended last before it started on its rank), the time between
them being host/launch time or idle. At a matched collective the path jumps to the last arriver (its
kernel is the transfer; the others' extra duration was waiting for it) and goes on from that rank's
predecessor. The path stops where it leaves the step; the time from the step's start (the earliest
window start of any rank, aligned) to the first operation on the path is host/idle on that rank.
The step's span splits into compute (operations that are not communication), exposed transfer
(communication on the path: nothing hid it), wait (a kernel's duration beyond the transfer, where the
path could not jump) and host/idle, per rank on the path. Pure: tables in, table out.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..graph import Graph

FIELDS = ("compute_ns", "exposed_transfer_ns", "wait_ns", "host_idle_ns")


def critical_path(g: Graph, steps: pl.DataFrame, offsets_ns: dict[int, float] | None = None) -> pl.DataFrame:
    """One row per (step, rank on the path): step, rank, compute_ns, exposed_transfer_ns, wait_ns, host_idle_ns."""
    empty = pl.DataFrame(schema={"step": pl.Int64, "rank": pl.Int32, **{f: pl.Float64 for f in FIELDS}})
    n = g.nodes
    if n.height == 0 or steps.height == 0 or n["step"].null_count() == n.height:
        return empty
    step = n["step"].fill_null(-1).to_numpy()
    bp = n["bind_pred"].fill_null(-1).to_numpy()
    inst = n["inst"].fill_null(-1).to_numpy()
    last = g.instances.sort("inst")["last_node"].to_numpy()
    # redirect a matched kernel to its instance's last arriver (same instance, same step)
    redirect = np.where(inst >= 0, last[np.maximum(inst, 0)] if last.size else 0, np.arange(n.height))
    inside = (bp >= 0) & (step[np.maximum(bp, 0)] == step) & (step >= 0)
    nxt = np.where(inside, redirect[np.maximum(bp, 0)], -1)

    a_end = n["a_end_ns"].to_numpy()
    a_start = n["a_start_ns"].to_numpy()
    job = _job_windows(steps, offsets_ns)
    in_step = n.select("node", "step", "rank", "a_end_ns").filter(pl.col("step").is_not_null())
    ends = in_step.sort("a_end_ns", "node").group_by("step").agg(pl.col("node").last(), pl.col("rank").last())
    ends = ends.join(job, on="step", how="inner").sort("step")
    if ends.height == 0:
        return empty
    root0 = ends["node"].to_numpy()
    cur = redirect[root0]
    path_nodes, path_terminal = [cur], []
    for _ in range(n.height):  # strictly backwards in time; the bound only guards against bad matches
        nx = nxt[cur]
        path_terminal.append(cur[nx < 0])
        cur = nx[nx >= 0]
        if cur.size == 0:
            break
        path_nodes.append(cur)
    on = np.concatenate(path_nodes)
    term = np.concatenate(path_terminal)

    dur = n["dur_ns"].to_numpy().astype(np.float64)
    gap = n["gap_ns"].fill_null(0).to_numpy().astype(np.float64)
    kind = n["kind"].to_numpy()
    tr = n["transfer_ns"].fill_null(-1).to_numpy().astype(np.float64)
    comm = kind == "comm"
    matched = inst >= 0
    transfer = np.where(matched, np.minimum(dur, np.maximum(tr, 0)), np.where(comm, dur, 0.0))
    wait = np.where(matched, dur - transfer, 0.0)
    compute = np.where(comm, 0.0, dur)
    idle = gap.copy()
    # a path's first operation: only the time since the job's step start counts (aligned clock)
    job_start = dict(zip(job["step"].to_list(), job["start_ns"].to_list()))
    t_step = np.array([job_start.get(int(s), 0) for s in step[term]], dtype=np.float64)
    bp_end = np.where(bp[term] >= 0, a_end[np.maximum(bp[term], 0)], -np.inf)
    idle_term = np.maximum(a_start[term] - np.maximum(bp_end, t_step), 0.0)
    contrib = pl.DataFrame({
        "node": on, "step": step[on], "rank": n["rank"].to_numpy()[on],
        "compute_ns": compute[on], "exposed_transfer_ns": transfer[on], "wait_ns": wait[on], "host_idle_ns": idle[on],
    }).unique("node", keep="first")
    contrib = contrib.with_columns(
        pl.when(pl.col("node").is_in(pl.Series(term).implode()))
        .then(pl.col("node").replace_strict(term, idle_term, default=0.0, return_dtype=pl.Float64))
        .otherwise(pl.col("host_idle_ns")).alias("host_idle_ns"))
    # the step's tail after its last operation (idle until the step ends) is the ending rank's
    tail = ends.select("step", "rank", pl.lit(0.0).alias("compute_ns"), pl.lit(0.0).alias("exposed_transfer_ns"),
                       pl.lit(0.0).alias("wait_ns"),
                       pl.max_horizontal(pl.col("end_ns") - pl.Series(a_end[root0]), pl.lit(0)).cast(pl.Float64)
                       .alias("host_idle_ns"))
    out = pl.concat([contrib.drop("node").cast({"rank": pl.Int32, "step": pl.Int64}),
                     tail.cast({"rank": pl.Int32, "step": pl.Int64})])
    return out.group_by("step", "rank").agg(pl.col(f).sum() for f in FIELDS).sort("step", "rank")


def _job_windows(steps: pl.DataFrame, offsets_ns: dict[int, float] | None) -> pl.DataFrame:
    """Per step, the earliest window start and the latest window end over ranks, on the aligned clock."""
    off = pl.DataFrame({"rank": list((offsets_ns or {}).keys()), "_o": [round(v) for v in (offsets_ns or {}).values()]},
                       schema={"rank": pl.Int32, "_o": pl.Int64})
    return (
        steps.join(off, on="rank", how="left").with_columns(pl.col("_o").fill_null(0))
        .group_by("step").agg((pl.col("start_ns") - pl.col("_o")).min().alias("start_ns"),
                              (pl.col("end_ns") - pl.col("_o")).max().alias("end_ns"))
    )


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
