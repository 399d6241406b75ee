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
  A ring's hop is no barrier (each kernel waited for its own gate, ``waits.per_row``): it is replayed as
  one such group per gate: the gate's arrival (with no wait) and the kernels that waited for it, which end
  with it. A gate that itself waited for another ends with that one's group: its arrival joins two groups.
  A hidden instance (communication that costs nothing) ends where it started: Δe = Δs − d.
With no change every Δ is 0, so the replay reproduces the measured times exactly where the measured
gaps and waits are consistent; what remains is reported as the replay error.

Order: events (an operation's start; a matched kernel's end separately) are grouped in waves by level:
an event's level is the length of the longest chain of events it depends on (its binding and stream
predecessors' ends; for an end, its instance's arrivals, which may share its level), so each wave is one
vectorized step over every event of that level and every scenario. An operation whose binding predecessor
is its stream predecessor (most of a compute stream) needs no event: along such a chain the deltas add up
(a prefix sum from the chain's first operation). A kernel's end waits until every participant has arrived;
inconsistent matches (crossing orders, which no order completes) are forced through, each rank's earliest
blocked end with what has arrived, and counted.
The wave schedule depends only on the graph, so it is built once and reused by every scenario.
From ``COMPILED_WAVES`` waves on, the schedule's levels and the replay run compiled (waves.py: numba, a block
of scenarios a pass), with the same bits as the numpy form here.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np
import polars as pl

from ..crossrank.graph import Graph
from ..crossrank.host import NO_BIND
from ..rules import P2P_OPS

LIST_WIDTH = 4  # successors / ends per key kept in a padded table; longer lists are read as ranges
COMPILED_WAVES = 2_000  # from this many waves on the replay runs in numba (waves.py); below, its load costs more
CELLS = 5_000_000  # scenario x node cells per replay batch (memory bound: ~9 float arrays of this size)
CELLS_COMPILED = 8 * 10**6  # where numba replays it (waves.spans: the changes, 2 float arrays and a bool one), in
# batches of at most waves.BLOCK scenarios (one pass)


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
    rb: np.ndarray  # root of its binding predecessor (n: the job's start, reads 0; n+1: none, reads -inf)
    bpx: np.ndarray  # its binding predecessor (n: none)
    rs: np.ndarray  # root of its stream predecessor (n+1: none, reads -inf)
    spx: np.ndarray  # its stream predecessor (n+1: none)
    a_off: np.ndarray  # (waves+1) slice of arrivals, grouped by (wave, instance)
    a_pos: np.ndarray  # start-event position of each arrival
    a_wait: np.ndarray  # its measured wait in that group (float)
    g_off: np.ndarray  # (waves+1) slice of instance groups
    g_first: np.ndarray  # each group's first arrival, relative to its wave's first arrival
    g_inst: np.ndarray  # each group's instance
    e_off: np.ndarray  # (waves+1) end-event slice of each wave
    x_e: np.ndarray  # node of each end event
    e_inst: np.ndarray  # its instance
    e_pos: np.ndarray  # start-event position of its node
    # further dependencies (Graph.deps), ordered by their op's start-event position: each wave's slice, the
    # dependency's chain root and chain position, its op's position, and where each op's run of them begins
    x_off: np.ndarray
    x_root: np.ndarray
    x_cpos: np.ndarray
    x_dpos: np.ndarray
    x_slack: np.ndarray
    xg_off: np.ndarray  # (waves+1) slice of ops with dependencies
    xg_first: np.ndarray  # each such op's first dependency, relative to its wave's first
    # spans already replayed on this schedule, by (segments' token, scenario key): see Keyed; waves.py's ("waves", ...)
    memo: dict = field(default_factory=dict, compare=False, repr=False)


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
    end: np.ndarray
    dur: np.ndarray
    bind_pred: np.ndarray
    stream_pred: np.ndarray
    slack: np.ndarray
    inst: np.ndarray  # the group each matched kernel ends with (an instance, or part of a ring's hop)
    wait: np.ndarray
    n_inst: np.ndarray  # participants per group
    n_instances: int  # groups
    parent: np.ndarray  # each group's instance in the graph (whose transfer change it takes)
    n_graph_instances: int
    also: np.ndarray  # a second group its arrival joins, with no wait (a ring hop's gate that waited), or -1
    simple: np.ndarray  # follows its stream predecessor, which is also its binding one: Δ just adds up
    root: np.ndarray  # the first operation of a node's chain of simple successors (itself if not simple)
    chain_order: np.ndarray  # nodes ordered by (root, start): chains are contiguous, root first
    chain_first: np.ndarray  # for each position in chain_order, the position of its chain's root
    chain_pos: np.ndarray  # each node's position in chain_order, and n for "none" (reads 0)
    lead: np.ndarray  # the operations that are not simple (each has an event of its own), ascending
    chain_lead: np.ndarray  # for each position in chain_order, the index in ``lead`` of its chain's root
    chain_floor: np.ndarray  # for each position in chain_order: −slack (float)
    dep_src: np.ndarray  # further dependencies (Graph.deps): src, dst, slack (ns)
    dep_dst: np.ndarray
    dep_slack: np.ndarray

    @classmethod
    def of(cls, g: Graph, eager: bool = True) -> Arrays:
        """``eager`` False: a send/recv pair always ends together, even where the send finished before its
        receiver started (the What-if study's model)."""
        n = g.events

        def col(name: str, fill: int = -1) -> np.ndarray:
            return n[name].fill_null(fill).to_numpy().astype(np.int64)

        bp, sp, inst, start = col("bind_pred"), col("stream_pred"), col("inst"), col("start_ns")
        deps = g.replay_deps
        if deps is None:
            deps = pl.DataFrame(schema={"src": pl.Int64, "dst": pl.Int64, "slack_ns": pl.Int64})
        d_src, d_dst = deps["src"].to_numpy().astype(np.int64), deps["dst"].to_numpy().astype(np.int64)
        has_dep = np.zeros(bp.size, dtype=bool)
        has_dep[d_dst] = True
        simple = (inst < 0) & (bp >= 0) & (bp == sp) & ~has_dep
        root = np.where(simple, bp, np.arange(bp.size))
        while bp.size:  # pointer jumping: log(chain length) rounds
            nxt = root[root]
            if np.array_equal(nxt, root):
                break
            root = nxt
        order = np.lexsort((start, root))
        first_pos = np.flatnonzero(np.r_[True, root[order][1:] != root[order][:-1]]) if bp.size else order
        chain_first = np.repeat(first_pos, np.diff(np.r_[first_pos, order.size])) if bp.size else order
        slack = col("slack_ns", 0)
        pos = np.empty(bp.size + 1, dtype=np.int64)
        pos[order] = np.arange(bp.size)
        pos[bp.size] = bp.size
        lead = np.flatnonzero(~simple)
        p2p = n["op"].is_in(P2P_OPS).fill_null(False).to_numpy()
        gate = _apart(np.where(p2p, inst, -1), col("gate_node"), col("a_start_ns"), col("a_end_ns"),
                      g.instances.height) if eager else col("gate_node")
        groups, also, parent = _gate_groups(inst, gate, g.instances.height)
        joined = np.concatenate([groups[groups >= 0], also[also >= 0]])
        # a kernel that waited for nobody arrives with no wait (a collective's last arriver has none anyway)
        wait = np.where(gate == np.arange(gate.size), 0, col("wait_ns", 0))
        return cls(rank=col("rank"), end=col("end_ns"), dur=col("dur_ns"),
                   bind_pred=bp, stream_pred=sp, slack=slack, inst=groups, wait=wait,
                   n_inst=np.bincount(joined, minlength=parent.size).astype(np.int64),
                   n_instances=parent.size, parent=parent, n_graph_instances=g.instances.height, also=also,
                   simple=simple, root=root, chain_order=order, chain_first=chain_first, chain_pos=pos, lead=lead,
                   chain_lead=np.searchsorted(lead, root[order]), chain_floor=-slack[order].astype(np.float64),
                   dep_src=d_src, dep_dst=d_dst, dep_slack=deps["slack_ns"].to_numpy().astype(np.float64))


def _apart(inst: np.ndarray, gate: np.ndarray, start: np.ndarray, end: np.ndarray, n_inst: int) -> np.ndarray:
    """``gate`` with each kernel of a send/recv pair (``inst``: -1 for the rest) that did not overlap its partner
    on the aligned clock as its own: an eager send that finished before its receiver started, and that
    receiver, waited for neither. A collective's kernels end together, so they always overlap."""
    m = inst >= 0
    if not m.any():
        return gate
    i = inst[m]
    size = np.bincount(i, minlength=n_inst)
    last_start = np.full(n_inst, np.iinfo(np.int64).min)
    first_end = np.full(n_inst, np.iinfo(np.int64).max)
    np.maximum.at(last_start, i, start[m])
    np.minimum.at(first_end, i, end[m])
    apart = np.zeros(inst.size, dtype=bool)
    apart[m] = (size[i] == 2) & (first_end[i] < last_start[i])
    return np.where(apart, np.arange(inst.size), gate)


def _gate_groups(inst: np.ndarray, gate: np.ndarray, n_inst: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Replay groups: an instance whose kernels all waited for one kernel stays whole; one whose kernels
    waited for different ones (a ring's hop, a pair that did not overlap) splits into one group per kernel
    waited for. A kernel ends with the group of the kernel it waited for (its own, if none); a kernel others
    waited for also arrives, with no wait, in its own group. Returns each node's group (-1: unmatched), its
    second group (-1: none) and each group's instance in the graph."""
    node = np.arange(inst.size)
    m = inst >= 0
    # an instance splits where its kernels' gates differ: their least and greatest differ (no sort)
    lo, hi = np.full(n_inst, np.iinfo(np.int64).max), np.full(n_inst, -1)
    np.minimum.at(lo, inst[m], gate[m])
    np.maximum.at(hi, inst[m], gate[m])
    split = (hi >= 0) & (lo != hi)
    also = np.full(inst.size, -1, dtype=np.int64)
    if not split.any():
        return inst, also, np.arange(n_inst)
    in_split = m & split[np.maximum(inst, 0)]
    waited_for = np.zeros(inst.size, dtype=bool)
    waited_for[gate[in_split & (gate != node)]] = True
    keys, sub = np.unique(gate[in_split], return_inverse=True)  # every kernel waited for is its own gate too
    groups = inst.copy()
    groups[in_split] = n_inst + sub
    second = in_split & waited_for & (gate != node)
    also[second] = n_inst + np.searchsorted(keys, node[second])
    # the split instances' own ids keep no kernel; they point at themselves
    return groups, also, np.concatenate([np.arange(n_inst), inst[keys]])


class _Lists:
    """Lists of ids per key (successors of an event, ends of an instance), read for a few keys at a time.

    Keys with at most ``width`` items sit in a padded table (one gather); longer lists are read as CSR ranges.
    """

    def __init__(self, keys: np.ndarray, vals: np.ndarray, n_keys: int, width: int) -> None:
        o = np.argsort(keys, kind="stable")
        keys, self.vals = keys[o], vals[o]
        self.ptr = np.searchsorted(keys, np.arange(n_keys + 1))
        size = np.diff(self.ptr)
        self.big = size > width
        self.any_big = bool(self.big.any())
        self.table = np.full((n_keys, width), -1, dtype=np.int64)
        small = ~self.big[keys]
        col = np.arange(keys.size) - self.ptr[keys]
        self.table[keys[small], col[small]] = self.vals[small]

    def of(self, keys: np.ndarray) -> np.ndarray:
        out = self.table[keys].ravel()
        out = out[out >= 0]
        if self.any_big:
            big = keys[self.big[keys]]
            if big.size:
                lo = self.ptr[big]
                cnt = self.ptr[big + 1] - lo
                ends = np.cumsum(cnt)
                out = np.concatenate([out, self.vals[np.repeat(lo - ends + cnt, cnt) + np.arange(ends[-1])]])
        return out


def _levels(a: Arrays, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Each event's level: the length of the longest chain of events it depends on (Kahn's algorithm, one
    pass per level). Events of one level depend only on earlier levels (an end also on its instance's
    arrivals, which may share its level): the replay's loop runs once per level, not once per event of the
    busiest rank. Returns start-event nodes and levels, end-event nodes and levels, and the forced ends."""
    n = a.rank.size
    matched = a.inst >= 0
    lead = a.lead  # simple operations follow their chain's root: no event of their own
    ends = np.flatnonzero(matched)
    n_s, n_e = lead.size, ends.size
    # an operation's final event (where its end is known): its end event if matched, else its start
    fin = np.full(n, -1, dtype=np.int64)
    fin[lead] = np.arange(n_s)
    fin[ends] = n_s + np.arange(n_e)
    bp, sp = a.bind_pred[lead], a.stream_pred[lead]
    d1 = np.where(bp >= 0, fin[a.root[np.maximum(bp, 0)]], -1)
    d2 = np.where(sp >= 0, fin[a.root[np.maximum(sp, 0)]], -1)
    d2 = np.where(d2 == d1, -1, d2)
    indeg = (d1 >= 0).astype(np.int64) + (d2 >= 0)
    ids = np.arange(n_s)
    d3 = fin[a.root[a.dep_src]]  # further dependencies: each op that has some is a lead
    i3 = np.searchsorted(lead, a.dep_dst)
    np.add.at(indeg, i3, 1)
    succ = _Lists(np.concatenate([d1[d1 >= 0], d2[d2 >= 0], d3]), np.concatenate([ids[d1 >= 0], ids[d2 >= 0], i3]),
                  n_s + n_e, LIST_WIDTH)
    n_inst = max(a.n_instances, 1)
    inst_ends = _Lists(a.inst[ends], n_s + np.arange(n_e), n_inst, LIST_WIDTH)
    arr_inst = np.where(matched[lead], a.inst[lead], -1)
    arr_also = a.also[lead]
    need = a.n_inst if a.n_instances else np.zeros(1, dtype=np.int64)
    count = np.zeros(n_inst, dtype=np.int64)
    lev = np.full(n_s + n_e, -1, dtype=np.int64)
    own_start = np.searchsorted(lead, ends)  # the start event of each end's own kernel (matched ops lead)
    forced, k = 0, 0
    inst_slot, start_slot = np.empty(n_inst, dtype=np.int64), np.empty(max(n_s, 1), dtype=np.int64)  # _distinct
    fr = np.flatnonzero(indeg == 0)
    # numpy for the first COMPILED_WAVES levels; past that, numba's loop (waves.levels) from where this one stands
    handoff = (0 if compiled else -1) if compiled is not None else COMPILED_WAVES
    while True:
        while fr.size:
            if k == handoff and (waves := _compiled(True)) is not None:
                ranks = np.unique(a.rank[ends])
                forced = waves.levels(indeg, succ.ptr, succ.vals, inst_ends.ptr, inst_ends.vals, arr_inst, arr_also,
                                      need, own_start, np.searchsorted(ranks, a.rank[ends]), a.end[ends], ends,
                                      ranks.size, lev, count, fr, k, forced)
                return lead, lev[:n_s], ends, lev[n_s:], forced
            lev[fr] = k
            ai = arr_inst[fr]
            got = ai >= 0
            rel = fr[~got]
            if got.any():
                a2 = arr_also[fr]
                ai = np.concatenate([ai[got], a2[a2 >= 0]])
                np.add.at(count, ai, 1)
                done = ai[count[ai] == need[ai]]
                if done.size:
                    es = inst_ends.of(_distinct(done, inst_slot))
                    es = es[lev[es] < 0]  # an end forced through earlier is not released twice
                    lev[es] = k
                    rel = np.concatenate([rel, es])
            k += 1
            if not rel.size:
                fr = rel
                break
            fr = _release(succ, indeg, rel, start_slot)
        if (lev >= 0).all():
            break
        # inconsistent matching (crossing orders): release each rank's earliest blocked end, with what has
        # arrived, as the ranks' own order would
        e_lev = lev[n_s:]
        blocked = np.flatnonzero((e_lev < 0) & (lev[own_start] >= 0))
        if blocked.size == 0:
            blocked = np.flatnonzero(e_lev < 0)
        r = a.rank[ends[blocked]]
        o = np.lexsort((ends[blocked], a.end[ends[blocked]], r))
        first = o[np.r_[True, r[o][1:] != r[o][:-1]]]
        es = n_s + blocked[first]
        forced += es.size
        lev[es] = k
        k += 1
        fr = _release(succ, indeg, es, start_slot)
    return lead, lev[:n_s], ends, lev[n_s:], forced


def _release(succ: _Lists, indeg: np.ndarray, done: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """The start events left with nothing to wait for once ``done`` events are final (each once)."""
    nxt = succ.of(done)
    np.subtract.at(indeg, nxt, 1)
    return _distinct(nxt[indeg[nxt] == 0], slot)


def _distinct(ids: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """``ids`` without repeats, in no set order (levels do not depend on it); ``slot`` is scratch indexed by
    id. Two gathers, where np.unique sorts: 36 k calls on a few ids each cost 0.2 s in a 4-rank replay."""
    if ids.size < 2:
        return ids
    at = np.arange(ids.size)
    slot[ids] = at
    return ids[slot[ids] == at]


def schedule(a: Arrays, compiled: bool | None = None) -> Schedule:
    """The level of every event and its layout for :func:`run` (structure only; shared by all scenarios).
    ``compiled``: the levels found by numba's loop or numpy's (the same; by default numba's past
    ``COMPILED_WAVES`` levels)."""
    lead, lev_s, ends, lev_e, forced = _levels(a, compiled)
    n = a.rank.size
    nw = int(max(lev_s.max(initial=-1), lev_e.max(initial=-1))) + 1
    o = np.argsort(lev_s, kind="stable")
    x_s, w_s = lead[o], lev_s[o]
    o = np.argsort(lev_e, kind="stable")
    x_e, w_e = ends[o], lev_e[o]
    bp, sp = a.bind_pred[x_s], a.stream_pred[x_s]
    pos = np.full(n, -1, dtype=np.int64)
    pos[x_s] = np.arange(x_s.size)
    # arrivals grouped by (wave, instance): one reduceat per wave
    a_pos = np.flatnonzero(a.inst[x_s] >= 0)
    a_inst, a_wait = a.inst[x_s[a_pos]], a.wait[x_s[a_pos]].astype(np.float64)
    extra = np.flatnonzero(a.also[x_s] >= 0)  # a ring hop's gate that waited: its arrival in its own group
    a_pos = np.concatenate([a_pos, extra])
    a_inst = np.concatenate([a_inst, a.also[x_s[extra]]])
    a_wait = np.concatenate([a_wait, np.zeros(extra.size)])
    a_w = w_s[a_pos]
    o = np.lexsort((a_inst, a_w))
    a_pos, a_inst, a_w, a_wait = a_pos[o], a_inst[o], a_w[o], a_wait[o]
    new = np.r_[True, (a_inst[1:] != a_inst[:-1]) | (a_w[1:] != a_w[:-1])] if a_pos.size else np.zeros(0, bool)
    g_at = np.flatnonzero(new)
    a_off = np.searchsorted(a_w, np.arange(nw + 1))
    g_w = a_w[g_at]
    x_dpos = pos[a.dep_dst]
    o = np.argsort(x_dpos, kind="stable")
    x_dpos, x_src = x_dpos[o], a.dep_src[o]
    x_w = w_s[x_dpos]
    xg_at = np.flatnonzero(np.r_[True, x_dpos[1:] != x_dpos[:-1]]) if x_dpos.size else np.zeros(0, np.int64)
    x_off = np.searchsorted(x_w, np.arange(nw + 1))
    xg_w = x_w[xg_at]
    return Schedule(
        n_waves=nw, forced=forced, s_off=np.searchsorted(w_s, np.arange(nw + 1)), x_s=x_s,
        rb=np.where(bp >= 0, a.root[np.maximum(bp, 0)], np.where(bp == NO_BIND, n + 1, n)), bpx=np.where(bp >= 0, bp, n),
        rs=np.where(sp >= 0, a.root[np.maximum(sp, 0)], n + 1), spx=np.where(sp >= 0, sp, n + 1),
        a_off=a_off, a_pos=a_pos, a_wait=a_wait, g_off=np.searchsorted(g_w, np.arange(nw + 1)),
        g_first=g_at - a_off[g_w], g_inst=a_inst[g_at],
        e_off=np.searchsorted(w_e, np.arange(nw + 1)), x_e=x_e, e_inst=a.inst[x_e], e_pos=pos[x_e],
        x_off=x_off, x_root=a.root[x_src], x_cpos=a.chain_pos[x_src], x_dpos=x_dpos, x_slack=a.dep_slack[o],
        xg_off=np.searchsorted(xg_w, np.arange(nw + 1)), xg_first=xg_at - x_off[xg_w])


def run(a: Arrays, sch: Schedule, mods: Mods, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Δs, Δe (S, nodes) of every operation under each scenario row of ``mods``. ``compiled``: numba's form
    (waves.py, ``waves.BLOCK`` scenarios a pass) or this numpy one; by default numba from ``COMPILED_WAVES`` waves on
    (both give the same bits)."""
    if (waves := _compiled(sch.n_waves >= COMPILED_WAVES if compiled is None else compiled)) is not None:
        return waves.run(a, sch, mods)
    s, n = mods.ddur.shape
    co = a.chain_order
    # along a chain Δe grows by each member's (gap change, at least −gap) + duration change: a prefix sum,
    # kept in chain order (column n: 0, what "no predecessor" reads)
    chain = np.zeros((s, n + 1))
    c = chain[:, :n]
    np.maximum(mods.dgap[:, co], a.chain_floor, out=c)
    c += mods.ddur[:, co]
    np.cumsum(c, axis=1, out=c)
    c -= c[:, a.chain_first]  # from the chain's root (its own step, first in the sum, cancels)
    # node-major (rows = nodes) so a wave gathers whole rows; rows n, n+1: "no predecessor" (0, -inf)
    de = np.zeros((n + 2, s))
    de[n + 1] = -np.inf
    x = sch.x_s
    # per start event, in wave order: what its binding / stream predecessor's end is shifted by
    after_bind = np.ascontiguousarray((chain[:, a.chain_pos[np.minimum(sch.bpx, n)]] + mods.dgap[:, x]).T)
    after_stream = np.ascontiguousarray((chain[:, a.chain_pos[np.minimum(sch.spx, n)]] - a.slack[x]).T)
    ddur = np.ascontiguousarray(mods.ddur[:, x].T)
    after_dep = np.ascontiguousarray((chain[:, sch.x_cpos] - sch.x_slack).T)
    x_off, xg_off = sch.x_off.tolist(), sch.xg_off.tolist()
    dstart = np.zeros((x.size, s))
    imax = np.full((max(a.n_instances, 1), s), -np.inf)
    wait = sch.a_wait[:, None]
    hide, dur = np.ascontiguousarray(mods.hide[:, sch.x_e].T), a.dur[sch.x_e].astype(np.float64)[:, None]
    dtr = np.ascontiguousarray(mods.dtr[:, a.parent[sch.e_inst]].T)
    # Python ints: indexing a numpy offset array per wave would cost more than the slices it bounds
    s_off, a_off, g_off, e_off = sch.s_off.tolist(), sch.a_off.tolist(), sch.g_off.tolist(), sch.e_off.tolist()
    rb, rs, xe, ei, ep, ap, gf, gi = sch.rb, sch.rs, sch.x_e, sch.e_inst, sch.e_pos, sch.a_pos, sch.g_first, sch.g_inst
    for k in range(sch.n_waves):
        lo, hi = s_off[k], s_off[k + 1]
        if hi > lo:
            v = np.maximum(de[rb[lo:hi]] + after_bind[lo:hi], de[rs[lo:hi]] + after_stream[lo:hi])
            xl, xh = x_off[k], x_off[k + 1]
            if xh > xl:  # and not before its further dependencies end
                vals = de[sch.x_root[xl:xh]] + after_dep[xl:xh]
                gl, gh = xg_off[k], xg_off[k + 1]
                first = sch.xg_first[gl:gh]
                if gh - gl < xh - xl:
                    vals = np.maximum.reduceat(vals, first, axis=0)
                t = sch.x_dpos[xl:xh][first] - lo
                v[t] = np.maximum(v[t], vals)
            dstart[lo:hi] = v
            de[x[lo:hi]] = v + ddur[lo:hi]  # a matched kernel's end is set again at its end event
            al, ah = a_off[k], a_off[k + 1]
            if ah > al:
                p = ap[al:ah]
                vals = dstart[p] - wait[al:ah]  # arrival − measured wait
                gl, gh = g_off[k], g_off[k + 1]
                if gh - gl < ah - al:
                    vals = np.maximum.reduceat(vals, gf[gl:gh], axis=0)
                i = gi[gl:gh]
                imax[i] = np.maximum(imax[i], vals)
        lo, hi = e_off[k], e_off[k + 1]
        if hi > lo:
            de[xe[lo:hi]] = np.where(hide[lo:hi], dstart[ep[lo:hi]] - dur[lo:hi], imax[ei[lo:hi]] + dtr[lo:hi])
    del after_bind, after_stream, after_dep, ddur, dtr, hide, imax
    # every operation ends where its chain's root does, plus its chain offset; a simple one starts its
    # duration before that, the others where the waves put them
    de_out = np.empty((s, n))
    c += np.ascontiguousarray(de[a.lead].T)[:, a.chain_lead]
    de_out[:, co] = c
    del chain, c
    ds = de_out - mods.ddur
    ds[:, x] = dstart.T
    return ds, de_out


def _compiled(use: bool) -> ModuleType | None:
    """analyzer.whatif.waves where it is to run (``use``), imported on first use (numba's import and the cached
    machine code cost ~0.45 s of CPU); None for the numpy form, also where numba cannot run (no place to cache
    its machine code raises at import): the same bits."""
    if not use:
        return None
    try:
        from . import waves
    except (ImportError, RuntimeError, OSError):
        return None
    return waves


TOKENS = itertools.count()  # never reused (an id() is, once its object is gone)


@dataclass(frozen=True)
class Keyed:
    """A scenario's ``fill`` with a key naming the changes it writes: two fills with one key write the same bits,
    so :func:`batched` replays one of them, once per schedule (the counterfactual's measured and ideal runs and
    its per-rank fixes are the scenarios' too; a put-back that changes nothing is the ideal run)."""

    fill: Callable[[Mods, int], None]
    key: Hashable

    def __call__(self, m: Mods, i: int) -> None:
        self.fill(m, i)


def digest(a: np.ndarray | None) -> bytes | None:
    """A set of node (or instance) positions as a key (None stays None)."""
    if a is None:
        return None
    a = np.ascontiguousarray(a)
    return hashlib.blake2b(a.dtype.str.encode() + a.tobytes(), digest_size=16).digest()


@dataclass(frozen=True)
class Segments:
    """Nodes grouped by (rank, step) window, for step times."""

    order: np.ndarray  # node indices, grouped
    bounds: np.ndarray  # segment start offsets into ``order``
    rel_start: np.ndarray  # each grouped node's start − its segment's first start (ns)
    rel_end: np.ndarray  # each grouped node's end − its segment's first start
    table: pl.DataFrame  # rank, step, span_ns (window), first_ns (min start), last_ns (max end)
    next_seg: np.ndarray  # the rank's next segment when this window ends where it starts (tiled), else -1
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


def spans(a: Arrays, sch: Schedule, seg: Segments, mods: Mods, compiled: bool | None = None) -> np.ndarray:
    """``step_spans(seg, *run(a, sch, mods))``; compiled (``compiled`` as in :func:`run`), without the (scenarios x
    nodes) arrays of deltas."""
    if seg.order.size and (waves := _compiled(sch.n_waves >= COMPILED_WAVES if compiled is None else compiled)) is not None:
        return waves.spans(a, sch, seg, mods)
    return step_spans(seg, *run(a, sch, mods, compiled))


def batched(a: Arrays, sch: Schedule, seg: Segments, fill: list[Callable[[Mods, int], None]],
            measure: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> list[np.ndarray]:
    """Replayed span per (rank, step) window of each scenario (or ``measure(ds, de)`` of it); ``fill(mods, i)``
    writes scenario i's changes. Scenarios run in batches that keep the (scenarios x nodes) arrays within
    ``CELLS``."""
    n = a.rank.size
    # a keyed scenario (Keyed) already replayed on this schedule and windows, or twice in ``fill``, runs once
    keys = [(seg.token, f.key) if measure is None and isinstance(f, Keyed) else None for f in fill]
    todo = [i for i, k in enumerate(keys) if k is None or (k not in sch.memo and keys.index(k) == i)]
    cells, rows = CELLS, len(todo)
    if measure is None and (waves := _compiled(sch.n_waves >= COMPILED_WAVES)) is not None:
        cells, rows = CELLS_COMPILED, waves.BLOCK  # no (scenarios x nodes) deltas there: the changes bound it
    batch = max(1, min(len(todo), rows, cells // max(n, 1)))
    got: dict[int, np.ndarray] = {}
    for lo in range(0, len(todo), batch):
        part = todo[lo:lo + batch]
        mods = Mods.zeros(len(part), n, a.n_graph_instances)
        for i, j in enumerate(part):
            fill[j](mods, i)
        for j, r in zip(part, spans(a, sch, seg, mods) if measure is None else measure(*run(a, sch, mods))):
            got[j] = r
            if keys[j] is not None:
                r.flags.writeable = False  # shared by every scenario with its key
                sch.memo[keys[j]] = r
    return [got[i] if i in got else sch.memo[k] for i, k in enumerate(keys)]
