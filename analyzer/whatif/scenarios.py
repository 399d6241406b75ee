"""What would it buy? Modified replays of the measured run (see replay.py) and what each saves.

Scenarios (each a row of changes to durations, gaps, transfers, or hidden communication):
- ``no_straggler``: the verdict's rank made ideal, everything else as measured. With the counterfactual's
  ideal run (``ideal``, analyzer/whatif/counterfactual.py: each operation at its role's typical duration and gap,
  never above measured) that is its operations and gaps at their ideal values; without one (no counterfactual),
  its compute beyond its peers' median for the same operation (compute straggler; work its peers do not run
  is all extra), its host gap beyond theirs (host straggler), or both (unknown kind).
- ``no_exposed_comm`` (and ``no_exposed_comm:<dim>`` with a process-group -> dimension map):
  communication costs nothing, waits included: an upper bound on what overlap could buy.
- ``busbw:<op>=<GB/s>`` (``all`` for every op): transfers at that bus bandwidth,
  transfer = bytes × nccl-tests factor(op, n) / busbw.
- ``balanced_experts`` (expert parallelism, when the ranks' received tokens differ): each rank's received
  tokens, all-to-all bytes and expert compute at the mean of its expert-parallel group (expert_balance.py).
- ``ideal``: the counterfactual's ideal run (S = replay / ideal); without one, every compute operation at its
  mean across ranks and steps, every transfer at the median of its (op, bytes, group size), every gap at the
  median for its operation.
- per rank: that rank's operations and gaps made ideal; replayed for the ``max_ranks`` ranks with the
  most to gain (all ranks up to that many), a saving per step for the heatmap.
Step time: the job's step as step_sync reports it (one interval per step on the aligned clock; the longest rank
window where ranks share no clock), replayed (windows.step_times), averaged over steps; savings are against the
replay of the unchanged run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from ..crossrank.graph import Graph
from ..crossrank.host import UNEXPLAINED_NS
from ..errors import UsageError
from ..rules import NS_PER_MS, bus_factor_expr
from . import counterfactual, replay
from .expert_balance import expert_changes

MAX_RANKS = 32  # per-rank scenarios replayed (ranks with the most to gain)
ERROR_WARN_PCT = 5.0


@dataclass(frozen=True)
class WhatIf:
    measured_step_time_ns: float
    replay_step_time_ns: float
    replay_error_pct: float  # whole run: |replay − measured| / measured
    errors: pl.DataFrame  # rank, step, measured_ns, replay_ns, error_pct (unchanged replay)
    scenarios: pl.DataFrame  # name, step_time_ns, saving_ns, saving_pct
    ranks: pl.DataFrame  # rank, saving_ns, saving_pct (replayed ranks, largest saving first)
    rank_steps: pl.DataFrame  # rank, step, saving_ns (mean step span saved in that step)
    ideal_speedup: float | None  # S = replay of the measured run / ideal run (>= 1)
    ranks_replayed: int
    forced_ends: int  # kernel ends replayed before every participant arrived (inconsistent matches)
    unexplained_ops: int = 0  # launched GPU operations whose late start no recorded dependency explains (kept)
    unexplained_ns: float = 0.0  # their waits, in all
    unexplained_rank: int | None = None  # the rank with most of it


def parse_specs(specs: tuple[str, ...] | list[str]) -> dict[str, float]:
    """``busbw:all_reduce=400`` (GB/s; op ``all`` = every op) -> {op: GB/s}."""
    out: dict[str, float] = {}
    for spec in specs:
        m = re.fullmatch(r"busbw:([a-z_]+)=([0-9]*\.?[0-9]+)", spec.strip())
        if not m or float(m.group(2)) <= 0:
            raise UsageError(f"--whatif {spec!r}: expected busbw:OP=GBPS, e.g. busbw:all_reduce=400")
        out[m.group(1)] = float(m.group(2))
    return out


def prepare(g: Graph, steps: pl.DataFrame) -> tuple[replay.Arrays, replay.Schedule, replay.Segments] | None:
    """The replay's structure (arrays, wave schedule, step windows), built once for every scenario."""
    if g.n_nodes == 0:
        return None
    arr = replay.Arrays.of(g)
    seg = replay.segments(g, steps)
    if seg.order.size == 0:
        return None
    return arr, replay.schedule(arr), seg


def analyze(g: Graph, steps: pl.DataFrame, straggler: tuple[int, str] | None = None,
            busbw: dict[str, float] | None = None, dims: dict[str, str] | None = None,
            max_ranks: int = MAX_RANKS, peers: list[int] | None = None, ideal: counterfactual.Ideal | None = None,
            prepared: tuple[replay.Arrays, replay.Schedule, replay.Segments] | None = None,
            experts: dict[str, pl.DataFrame] | None = None) -> WhatIf | None:
    """Replay the unchanged run and every scenario. None when the graph is empty. ``peers``: the
    straggler's ranks of the same role (none: every other rank); ``experts``: metrics.experts.balance (adds
    ``balanced_experts`` when the ranks' received tokens differ). ``ideal``: the counterfactual's ideal run;
    with it ``ideal``, ``no_straggler`` and the per-rank scenarios make operations ideal that way (so no
    scenario is faster than the ideal run and no saving is negative). ``dims``: process group -> dimension (by
    default the graph's, ``Graph.pg_dimensions``)."""
    dims = g.pg_dimensions if dims is None else dims
    got = prepared or prepare(g, steps)
    if got is None:
        return None
    arr, sch, seg = got
    # the columns the scenarios read, names as integer codes: grouping a million kernel names by their
    # text cost 0.5 s and 0.4 GB on the 484 MB Nsight export, by code a fraction of that
    nodes = g.events.select("node", "rank", "kind", pl.col("name").cast(pl.Categorical).to_physical(), "step",
                           "occurrence", "dur_ns", "gap_ns", "inst", "pg")
    rank_arr = nodes["rank"].to_numpy()
    # (keyed where the counterfactual replays the same changes: replayed once, see replay.Keyed)
    named: list[tuple[str, Callable[[replay.Mods, int], None]]] = [
        ("replay", replay.Keyed(lambda m, i: None, ("measured",)))]
    if straggler is not None and ideal is not None:
        named.append(("no_straggler", ideal.remove(np.flatnonzero(rank_arr == straggler[0]))))
    elif straggler is not None:
        named.append(("no_straggler", lambda m, i: _no_straggler(m, i, nodes, *straggler, peers)))
    balanced = expert_changes(nodes, g.instances, experts)
    if balanced is not None:
        named.append(("balanced_experts", lambda m, i: _apply(m, i, balanced)))
    comm = (nodes["kind"] == "comm").to_numpy()
    named.append(("no_exposed_comm", lambda m, i: _hide(m, i, nodes, comm)))
    if dims:
        pg_dim = nodes["pg"].replace_strict(dims, default=None, return_dtype=pl.Utf8)
        for dim in sorted({d for d in dims.values() if d}):
            mask = comm & (pg_dim == dim).fill_null(False).to_numpy()
            named.append((f"no_exposed_comm:{dim}", lambda m, i, mask=mask: _hide(m, i, nodes, mask)))
    for op, gbps in (busbw or {}).items():
        named.append((f"busbw:{op}={gbps:g}", lambda m, i, op=op, gbps=gbps: _busbw(m, i, g.instances, op, gbps)))
    if ideal is not None:
        named.append(("ideal", ideal.whole()))
        cands = _candidates(_Ideal(nodes["node"].to_numpy(), rank_arr, ideal.ddur, ideal.dgap,
                                   g.instances["inst"].to_numpy(), ideal.dtr), max_ranks)
        for r in cands:
            named.append((f"rank:{r}", ideal.remove(np.flatnonzero(rank_arr == r))))
    else:  # (their own statistics only without the counterfactual's ideal: 1.4 s on the 484 MB Nsight export)
        ideal_old = _ideal_stats(nodes, g.instances)
        named.append(("ideal", lambda m, i: _ideal(m, i, ideal_old, None)))
        cands = _candidates(ideal_old, max_ranks)
        for r in cands:
            named.append((f"rank:{r}", lambda m, i, r=r: _ideal(m, i, ideal_old, r)))

    shifted = replay.batched(arr, sch, seg, [f for _, f in named])
    tab = seg.table
    zero = np.zeros((2, tab.height))
    m_steps, base = replay.step_times(seg, zero), replay.step_times(seg, shifted[0])
    m_mean, r_mean = float(m_steps.mean()), float(base.mean())
    step_keys = np.unique(tab["step"].to_numpy())
    errors = tab.select("rank", "step", pl.col("span_ns").cast(pl.Float64).alias("measured_ns")).with_columns(
        pl.Series("replay_ns", replay.window_spans(seg, shifted[0])),
    ).with_columns((100.0 * (pl.col("replay_ns") - pl.col("measured_ns")).abs()
                    / pl.col("measured_ns")).alias("error_pct"))
    rows = []
    for (name, _), sh in zip(named, shifted):
        if name == "replay" or name.startswith("rank:"):
            continue
        t = float(replay.step_times(seg, sh).mean())
        rows.append({"name": name, "step_time_ns": t, "saving_ns": r_mean - t,
                     "saving_pct": 100.0 * (r_mean - t) / r_mean if r_mean > 0 else None})
    scen = pl.DataFrame(rows, schema={"name": pl.Utf8, "step_time_ns": pl.Float64, "saving_ns": pl.Float64,
                                      "saving_pct": pl.Float64})
    rank_rows, cell_rows = [], []
    for (name, _), sh in zip(named, shifted):
        if not name.startswith("rank:"):
            continue
        r = int(name.split(":")[1])
        per = replay.step_times(seg, sh)
        saving = r_mean - float(per.mean())
        rank_rows.append({"rank": r, "saving_ns": saving, "saving_pct": 100.0 * saving / r_mean if r_mean > 0 else None})
        for j, s_ in enumerate(step_keys):
            cell_rows.append({"rank": r, "step": int(s_), "saving_ns": float(base[j] - per[j])})
    ranks = pl.DataFrame(rank_rows, schema={"rank": pl.Int32, "saving_ns": pl.Float64, "saving_pct": pl.Float64})
    ideal_t = scen.filter(pl.col("name") == "ideal")["step_time_ns"]
    return WhatIf(
        measured_step_time_ns=m_mean, replay_step_time_ns=r_mean,
        replay_error_pct=100.0 * abs(r_mean - m_mean) / m_mean if m_mean > 0 else 0.0,
        errors=errors, scenarios=scen,
        ranks=ranks.sort(["saving_ns", "rank"], descending=[True, False]),
        rank_steps=pl.DataFrame(cell_rows, schema={"rank": pl.Int32, "step": pl.Int64, "saving_ns": pl.Float64}),
        # S against the replay of the measured run (its error cancels), never below 1
        ideal_speedup=max(r_mean / float(ideal_t[0]), 1.0) if ideal_t.len() and ideal_t[0] > 0 else None,
        ranks_replayed=len(cands), forced_ends=sch.forced, **_unexplained(g),
    )


def _unexplained(g: Graph) -> dict:
    """The launched GPU operations the replay keeps late as measured (crossrank/host.py ``UNEXPLAINED_NS``)."""
    ev = g.events
    if "unexplained" not in ev.columns:
        return {}
    late = ev.filter(pl.col("unexplained").fill_null(False)).select("rank", "gap_ns")
    if late.height == 0:
        return {}
    top = late.group_by("rank").agg(pl.col("gap_ns").sum()).sort(["gap_ns", "rank"], descending=[True, False])
    return {"unexplained_ops": late.height, "unexplained_ns": float(late["gap_ns"].sum()),
            "unexplained_rank": int(top["rank"][0])}


# ----------------------------------------------------------------------------------------- scenarios

_WORK = ("compute", "memcpy", "memset", "other")


def _key_median(nodes: pl.DataFrame, rank: int, value: str, kinds: tuple[str, ...] | None,
                peers: list[int] | None = None) -> pl.DataFrame:
    """The rank's nodes with its peers' median ``value`` for the same (step, name, occurrence); peers: the
    given ranks, else every other rank."""
    key = ["step", "name", "occurrence"]
    pool = nodes if kinds is None else nodes.filter(pl.col("kind").is_in(kinds))
    them = pl.col("rank").is_in(peers) if peers else pl.col("rank") != rank
    median = pool.filter(them).group_by(key).agg(pl.col(value).median().alias("_peer"))
    return pool.filter(pl.col("rank") == rank).join(median, on=key, how="left", nulls_equal=True)


def _no_straggler(m: replay.Mods, i: int, nodes: pl.DataFrame, rank: int, kind: str,
                  peers: list[int] | None = None) -> None:
    if kind in ("compute", "unknown"):
        mine = _key_median(nodes, rank, "dur_ns", _WORK, peers)
        extra = (pl.col("dur_ns") - pl.col("_peer").fill_null(0)).clip(lower_bound=0)
        m.ddur[i, mine["node"].to_numpy()] -= mine.select(extra)["dur_ns"].to_numpy()
        # work its peers do not run at all: the host time spent launching it is extra too
        only = mine.filter(pl.col("_peer").is_null())
        m.dgap[i, only["node"].to_numpy()] -= only["gap_ns"].to_numpy()
    if kind in ("host", "unknown"):
        mine = _key_median(nodes, rank, "gap_ns", None, peers).filter(pl.col("_peer").is_not_null())
        extra = (pl.col("gap_ns") - pl.col("_peer")).clip(lower_bound=0)
        m.dgap[i, mine["node"].to_numpy()] -= mine.select(extra)["gap_ns"].to_numpy()


def _apply(m: replay.Mods, i: int, ch: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
    node, ddur, inst, dtr = ch
    m.ddur[i, node] += ddur
    m.dtr[i, inst] += dtr


def _hide(m: replay.Mods, i: int, nodes: pl.DataFrame, mask: np.ndarray) -> None:
    m.hide[i] |= mask
    unmatched = mask & nodes["inst"].is_null().to_numpy()  # no instance: its kernel simply takes no time
    m.ddur[i, unmatched] -= nodes["dur_ns"].to_numpy()[unmatched]


def _busbw(m: replay.Mods, i: int, inst: pl.DataFrame, op: str, gbps: float) -> None:
    sel = inst.filter((pl.col("op") == op) if op != "all" else pl.lit(True)).filter(pl.col("bytes") > 0)
    new = sel.select("inst", (pl.col("bytes") * bus_factor_expr(pl.col("op"), pl.col("group_n")) / gbps
                              - pl.col("transfer_ns")).alias("d"))
    m.dtr[i, new["inst"].to_numpy()] += new["d"].to_numpy()


@dataclass(frozen=True)
class _Ideal:
    node: np.ndarray
    rank: np.ndarray
    ddur: np.ndarray  # to the mean duration (work operations; 0 for communication)
    dgap: np.ndarray  # to the median gap
    inst: np.ndarray
    dtr: np.ndarray  # to the median transfer


def _ideal_stats(nodes: pl.DataFrame, inst: pl.DataFrame) -> _Ideal:
    key = ["name", "occurrence"]
    work = pl.col("kind").is_in(_WORK)
    n = nodes.with_columns(
        pl.when(work).then(pl.col("dur_ns").cast(pl.Float64).mean().over(key, work) - pl.col("dur_ns"))
        .otherwise(0.0).alias("_dd"),
        (pl.col("gap_ns").cast(pl.Float64).median().over(key) - pl.col("gap_ns")).alias("_dg"),
    )
    t = inst.with_columns(
        (pl.col("transfer_ns").cast(pl.Float64).median().over("op", "bytes", "group_n") - pl.col("transfer_ns"))
        .alias("_dt"))
    return _Ideal(n["node"].to_numpy(), n["rank"].to_numpy(), n["_dd"].to_numpy(), n["_dg"].fill_null(0).to_numpy(),
                  t["inst"].to_numpy(), t["_dt"].fill_null(0).to_numpy())


def _ideal(m: replay.Mods, i: int, st: _Ideal, rank: int | None) -> None:
    sel = np.ones(st.node.size, dtype=bool) if rank is None else st.rank == rank
    m.ddur[i, st.node[sel]] += st.ddur[sel]
    m.dgap[i, st.node[sel]] += st.dgap[sel]
    if rank is None:  # a transfer belongs to every participant; one rank alone cannot make it ideal
        m.dtr[i, st.inst] += st.dtr


def _candidates(st: _Ideal, k: int) -> list[int]:
    """Ranks with the most time above ideal (duration and gap excess), at most k."""
    excess = np.maximum(-st.ddur, 0) + np.maximum(-st.dgap, 0)
    ranks, inv = np.unique(st.rank, return_inverse=True)
    tot = np.bincount(inv, weights=excess, minlength=ranks.size)
    order = np.lexsort((ranks, -tot))
    return [int(r) for r in ranks[order[:k]]]


def warnings(w: WhatIf | None) -> list[str]:
    """What the report must say about the replay's own accuracy."""
    if w is None:
        return []
    out = []
    worst = w.errors.sort("error_pct", descending=True, nulls_last=True).head(1)
    if worst.height and (worst["error_pct"][0] or 0.0) > ERROR_WARN_PCT:
        r = worst.row(0, named=True)
        n_bad = w.errors.filter(pl.col("error_pct") > ERROR_WARN_PCT).height
        out.append(f"the replay misses the measured step time by more than {ERROR_WARN_PCT:g}% on {n_bad} (rank, step) "
                   f"windows (worst: rank {r['rank']} step {r['step']}, {r['error_pct']:.1f}%): what-if savings are "
                   "approximate there")
    if w.unexplained_ns > 0:
        out.append(f"{w.unexplained_ops} GPU operations started more than {UNEXPLAINED_NS / NS_PER_MS:g} ms after "
                   f"everything the traces say they wait for ({w.unexplained_ns / NS_PER_MS:,.1f} ms in all, most on rank "
                   f"{w.unexplained_rank}): the GPU was busy with work the traces do not show (another process's time "
                   "slice on a shared GPU, say); the replay keeps those waits as measured, as it keeps host time")
    if w.forced_ends:
        out.append(f"{w.forced_ends} collective kernel ends were replayed before every participant had arrived "
                   "(inconsistent matching): what-if savings are approximate")
    return out
