"""Replay the measured run on the dependency graph, with chosen operations changed (what-if).

Clock-free delta formulation: every operation gets Δs, Δe (replayed − measured start/end).
- An operation starts when its binding predecessor ends plus its measured gap (host/launch time kept,
  or changed by the scenario: δgap), and not before its stream predecessor ends (the measured slack
  on the stream may be used up): Δs = max(Δe(binding) + δgap, Δe(stream) − slack).
  A rank's first operation: Δs = δgap (its gap is measured from the job's first operation).
- A non-communication operation (and an unmatched communication kernel) ends after its duration:
  Δe = Δs + δdur.
- A matched instance ends at (last arrival + transfer) on every participant. With measured waits
  w_q = d_q − transfer (the last arriver's is 0), max_q arrival'_q = A + max_q(Δs_q − w_q), so every
  participant gets Δe = max_q(Δs_q − w_q) + δtransfer: the same on each, no clock alignment needed.
  A hidden instance (communication that costs nothing) ends where it started: Δe = Δs − d.
With no change every Δ is 0, so the replay reproduces the measured times exactly where the measured
gaps and waits are consistent; what remains is reported as the replay error.

Order: each rank's events (an operation's start; a matched kernel's end separately, at its end time)
are processed in its own time order, one event per rank per wave, vectorized over ranks and over
scenarios. An operation whose binding predecessor is its stream predecessor (most of a compute stream)
needs no event: along such a chain the deltas add up (a prefix sum from the chain's first operation).
A kernel's end waits until every participant has arrived (the order in which the real run completed
them guarantees progress; inconsistent matches are forced through and counted).
The wave schedule depends only on the graph, so it is built once and reused by every scenario.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .graph import Graph

OP, ARR, END = 0, 1, 2


@dataclass(frozen=True)
class Schedule:
    """The wave order of every event, laid out for the replay loop (structure only; shared by scenarios).

    Start events (an operation's start, or a matched kernel's arrival) and end events (a matched kernel's
    end) are each stored in wave order, so a wave's events are one contiguous slice of each array: the loop
    reads views, not fancy-indexed copies. Arrivals are also stored grouped by (wave, instance), so each
    wave updates an instance's latest arrival once (``maximum.reduceat``) instead of with ``maximum.at``.
    """

    n_waves: int
    forced: int  # kernel ends processed before all participants arrived (inconsistent matches)
    s_off: np.ndarray  # (waves+1) start-event slice of each wave
    x_s: np.ndarray  # node of each start event
    rb: np.ndarray  # root of its binding predecessor (n: none, reads 0)
    bpx: np.ndarray  # its binding predecessor (n: none)
    rs: np.ndarray  # root of its stream predecessor (n+1: none, reads -inf)
    spx: np.ndarray  # its stream predecessor (n+1: none)
    a_off: np.ndarray  # (waves+1) slice of arrivals, grouped by (wave, instance)
    a_pos: np.ndarray  # start-event position of each arrival
    g_off: np.ndarray  # (waves+1) slice of instance groups
    g_first: np.ndarray  # each group's first arrival, relative to its wave's first arrival
    g_inst: np.ndarray  # each group's instance
    e_off: np.ndarray  # (waves+1) end-event slice of each wave
    x_e: np.ndarray  # node of each end event
    e_inst: np.ndarray  # its instance
    e_pos: np.ndarray  # start-event position of its node


@dataclass
class Mods:
    """Changes of one batch of scenarios (S rows). Arrays are float64 ns, bool for ``hide``."""

    ddur: np.ndarray  # (S, nodes) duration change of non-communication operations
    dgap: np.ndarray  # (S, nodes) gap change
    dtr: np.ndarray  # (S, instances) transfer change
    hide: np.ndarray  # (S, nodes) communication that costs nothing

    @classmethod
    def zeros(cls, s: int, n_nodes: int, n_inst: int) -> Mods:
        return cls(np.zeros((s, n_nodes)), np.zeros((s, n_nodes)), np.zeros((s, n_inst)),
                   np.zeros((s, n_nodes), dtype=bool))


@dataclass(frozen=True)
class Arrays:
    """The graph's columns as numpy (null -> -1), read by every replay."""

    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    bind_pred: np.ndarray
    stream_pred: np.ndarray
    slack: np.ndarray
    inst: np.ndarray
    wait: np.ndarray
    n_inst: np.ndarray  # participants per instance
    n_instances: int
    simple: np.ndarray  # follows its stream predecessor, which is also its binding one: Δ just adds up
    root: np.ndarray  # the first operation of a node's chain of simple successors (itself if not simple)
    chain_order: np.ndarray  # nodes ordered by (root, start): chains are contiguous, root first
    chain_first: np.ndarray  # for each position in chain_order, the position of its chain's root

    @classmethod
    def of(cls, g: Graph) -> Arrays:
        n = g.nodes

        def col(name: str, fill: int = -1) -> np.ndarray:
            return n[name].fill_null(fill).to_numpy().astype(np.int64)

        bp, sp, inst, start = col("bind_pred"), col("stream_pred"), col("inst"), col("start_ns")
        simple = (inst < 0) & (bp >= 0) & (bp == sp)
        root = np.where(simple, bp, np.arange(bp.size))
        while bp.size:  # pointer jumping: log(chain length) rounds
            nxt = root[root]
            if np.array_equal(nxt, root):
                break
            root = nxt
        order = np.lexsort((start, root))
        first_pos = np.flatnonzero(np.r_[True, root[order][1:] != root[order][:-1]]) if bp.size else order
        chain_first = np.repeat(first_pos, np.diff(np.r_[first_pos, order.size])) if bp.size else order
        return cls(rank=col("rank"), start=start, end=col("end_ns"), dur=col("dur_ns"),
                   bind_pred=bp, stream_pred=sp, slack=col("slack_ns", 0), inst=inst, wait=col("wait_ns", 0),
                   n_inst=g.instances.sort("inst")["n"].to_numpy().astype(np.int64), n_instances=g.instances.height,
                   simple=simple, root=root, chain_order=order, chain_first=chain_first)


def _waves(a: Arrays) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, int]:
    """Greedy waves: each rank's next event, in its time order; a matched kernel's end once all arrived."""
    matched = a.inst >= 0
    lead = np.flatnonzero(~a.simple)  # simple operations follow their chain's root: no event of their own
    node = np.concatenate([lead, np.flatnonzero(matched)])
    typ = np.concatenate([np.where(matched[lead], ARR, OP), np.full(int(matched.sum()), END)])
    t = np.concatenate([a.start[lead], a.end[matched]])
    # at equal times ends come first (a binding predecessor ends at or before its successor starts)
    sub = np.where(typ == END, 0, 1)
    order = np.lexsort((node, sub, t, a.rank[node]))
    ev_node, ev_type = node[order], typ[order]
    if ev_node.size == 0:
        return [], ev_node, ev_type, 0
    ev_rank = a.rank[ev_node]
    _, first = np.unique(ev_rank, return_index=True)
    last = np.append(first[1:], ev_rank.size)
    is_end = ev_type == END
    end_inst = np.where(is_end, a.inst[ev_node], 0)
    arr_inst = np.where(ev_type == ARR, a.inst[ev_node], -1)
    count = np.zeros(max(a.n_instances, 1), dtype=np.int64)
    need = a.n_inst if a.n_instances else np.zeros(1, dtype=np.int64)
    waves: list[np.ndarray] = []
    forced = 0
    ptr, stop = first.copy(), last  # live ranks only: a finished rank is dropped
    while ptr.size:
        e = end_inst[ptr]
        ready = ~is_end[ptr] | (count[e] >= need[e])
        if not ready.all():
            if not ready.any():  # inconsistent matching: release the blocked ends with what has arrived
                ready = is_end[ptr]
                forced += int(ready.sum())
            sel = ptr[ready]
        else:
            sel = ptr
        waves.append(sel)
        ai = arr_inst[sel]
        np.add.at(count, ai[ai >= 0], 1)
        ptr = ptr + ready
        alive = ptr < stop
        if not alive.all():
            ptr, stop = ptr[alive], stop[alive]
    return waves, ev_node, ev_type, forced


def schedule(a: Arrays) -> Schedule:
    """The wave order of every event and its layout for :func:`run` (structure only; shared by all scenarios)."""
    waves, ev_node, ev_type, forced = _waves(a)
    n, nw = a.rank.size, len(waves)
    ev = np.concatenate(waves) if waves else np.zeros(0, dtype=np.int64)
    wave = np.repeat(np.arange(nw), [w.size for w in waves]) if waves else ev
    end = ev_type[ev] == END
    x_s, w_s, x_e, w_e = ev_node[ev[~end]], wave[~end], ev_node[ev[end]], wave[end]
    bp, sp = a.bind_pred[x_s], a.stream_pred[x_s]
    pos = np.full(n, -1, dtype=np.int64)
    pos[x_s] = np.arange(x_s.size)
    # arrivals grouped by (wave, instance): one reduceat per wave
    a_pos = np.flatnonzero(a.inst[x_s] >= 0)
    a_inst, a_w = a.inst[x_s[a_pos]], w_s[a_pos]
    o = np.lexsort((a_inst, a_w))
    a_pos, a_inst, a_w = a_pos[o], a_inst[o], a_w[o]
    new = np.r_[True, (a_inst[1:] != a_inst[:-1]) | (a_w[1:] != a_w[:-1])] if a_pos.size else np.zeros(0, bool)
    g_at = np.flatnonzero(new)
    a_off = np.searchsorted(a_w, np.arange(nw + 1))
    g_w = a_w[g_at]
    return Schedule(
        n_waves=nw, forced=forced, s_off=np.searchsorted(w_s, np.arange(nw + 1)), x_s=x_s,
        rb=np.where(bp >= 0, a.root[np.maximum(bp, 0)], n), bpx=np.where(bp >= 0, bp, n),
        rs=np.where(sp >= 0, a.root[np.maximum(sp, 0)], n + 1), spx=np.where(sp >= 0, sp, n + 1),
        a_off=a_off, a_pos=a_pos, g_off=np.searchsorted(g_w, np.arange(nw + 1)),
        g_first=g_at - a_off[g_w], g_inst=a_inst[g_at],
        e_off=np.searchsorted(w_e, np.arange(nw + 1)), x_e=x_e, e_inst=a.inst[x_e], e_pos=pos[x_e])


def run(a: Arrays, sch: Schedule, mods: Mods) -> tuple[np.ndarray, np.ndarray]:
    """Δs, Δe (S, nodes) of every operation under each scenario row of ``mods``."""
    s, n = mods.ddur.shape
    # along a chain Δe grows by each member's (gap change, at least −gap) + duration change: a prefix sum
    step = np.where(a.simple, np.maximum(mods.dgap, -a.slack) + mods.ddur, 0.0)
    cs = np.cumsum(step[:, a.chain_order], axis=1)
    del step
    chain = np.empty_like(cs)
    chain[:, a.chain_order] = cs - cs[:, a.chain_first]
    del cs
    # node-major (rows = nodes) so a wave gathers whole rows; rows n, n+1: "no predecessor" (0, -inf)
    de = np.zeros((n + 2, s))
    de[n + 1] = -np.inf
    chain_t = np.zeros((n + 2, s))
    chain_t[:n] = chain.T
    x = sch.x_s
    # per start event, in wave order: what its binding / stream predecessor's end is shifted by
    after_bind = chain_t[sch.bpx] + mods.dgap.T[x]
    after_stream = chain_t[sch.spx] - a.slack[x].astype(np.float64)[:, None]
    del chain_t
    ddur = mods.ddur.T[x]
    dstart = np.zeros((x.size, s))
    imax = np.full((max(a.n_instances, 1), s), -np.inf)
    wait = a.wait[x].astype(np.float64)[:, None]
    hide, dur = mods.hide.T[sch.x_e], a.dur[sch.x_e].astype(np.float64)[:, None]
    dtr = mods.dtr.T[sch.e_inst]
    # Python ints: indexing a numpy offset array per wave would cost more than the slices it bounds
    s_off, a_off, g_off, e_off = sch.s_off.tolist(), sch.a_off.tolist(), sch.g_off.tolist(), sch.e_off.tolist()
    rb, rs, xe, ei, ep, ap, gf, gi = sch.rb, sch.rs, sch.x_e, sch.e_inst, sch.e_pos, sch.a_pos, sch.g_first, sch.g_inst
    for k in range(sch.n_waves):
        lo, hi = s_off[k], s_off[k + 1]
        if hi > lo:
            v = np.maximum(de[rb[lo:hi]] + after_bind[lo:hi], de[rs[lo:hi]] + after_stream[lo:hi])
            dstart[lo:hi] = v
            de[x[lo:hi]] = v + ddur[lo:hi]  # a matched kernel's end is set again at its end event
            al, ah = a_off[k], a_off[k + 1]
            if ah > al:
                p = ap[al:ah]
                vals = dstart[p] - wait[p]  # arrival − measured wait
                gl, gh = g_off[k], g_off[k + 1]
                if gh - gl < ah - al:
                    vals = np.maximum.reduceat(vals, gf[gl:gh], axis=0)
                i = gi[gl:gh]
                imax[i] = np.maximum(imax[i], vals)
        lo, hi = e_off[k], e_off[k + 1]
        if hi > lo:
            de[xe[lo:hi]] = np.where(hide[lo:hi], dstart[ep[lo:hi]] - dur[lo:hi], imax[ei[lo:hi]] + dtr[lo:hi])
    del after_bind, after_stream, ddur, dtr, hide, imax
    ds = np.zeros((s, n))
    ds[:, x] = dstart.T
    de_out = de[:n].T[:, a.root] + chain
    ds = np.where(a.simple, de_out - mods.ddur, ds)
    return ds, de_out


@dataclass(frozen=True)
class Segments:
    """Nodes grouped by (rank, step) window, for step times."""

    order: np.ndarray  # node indices, grouped
    bounds: np.ndarray  # segment start offsets into ``order``
    rel_start: np.ndarray  # each grouped node's start − its segment's first start (ns)
    rel_end: np.ndarray  # each grouped node's end − its segment's first start
    table: pl.DataFrame  # rank, step, span_ns (window), first_ns (min start), last_ns (max end)
    next_seg: np.ndarray  # the rank's next segment when this window ends where it starts (tiled), else -1


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
    bounds = np.concatenate([[0], np.cumsum(seg["_n"].to_numpy())[:-1]]).astype(np.int64)
    table = seg.select("rank", "step", (pl.col("we") - pl.col("ws")).alias("span_ns"), "first_ns", "last_ns")
    rel_s = (n["start_ns"] - n["_f"]).to_numpy().astype(np.float64)
    rel_e = (n["end_ns"] - n["_f"]).to_numpy().astype(np.float64)
    tiled = seg.with_row_index("_i").with_columns(
        pl.col("_i").shift(-1).over("rank").alias("_next"), pl.col("ws").shift(-1).over("rank").alias("_next_ws"))
    nxt = tiled.select(pl.when(pl.col("_next_ws") == pl.col("we")).then(pl.col("_next")).otherwise(None)
                       .cast(pl.Int64).fill_null(-1))["_next"].to_numpy()
    return Segments(n["node"].to_numpy(), bounds, rel_s, rel_e, table, nxt)


def step_spans(seg: Segments, ds: np.ndarray, de: np.ndarray) -> np.ndarray:
    """Replayed span (S, segments): a window's start moves with its first operation, its end with its last
    operation's end, or, where windows tile, with the next window's start."""
    if seg.order.size == 0:
        return np.zeros((ds.shape[0], 0))
    first = np.minimum.reduceat(ds[:, seg.order] + seg.rel_start, seg.bounds, axis=1)
    last = np.maximum.reduceat(de[:, seg.order] + seg.rel_end, seg.bounds, axis=1)
    last_m = (seg.table["last_ns"] - seg.table["first_ns"]).to_numpy().astype(np.float64)
    span = seg.table["span_ns"].to_numpy().astype(np.float64)
    # a window that ends where the next starts (tiled steps) ends where the next one starts in the replay
    tiled = seg.next_seg >= 0
    end_shift = np.where(tiled, first[:, np.maximum(seg.next_seg, 0)], last - last_m[None, :])
    return span[None, :] + end_shift - first
