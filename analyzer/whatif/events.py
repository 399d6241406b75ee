"""What every replay reads: the graph's events as arrays (``Arrays``), one batch of scenarios' changes (``Mods``) and
the wave order shared by all scenarios (``Schedule``). Data only, beside the replay's loops (``replay``: numpy,
``native``: compiled) and the schedule's construction (``levels``), which all import it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..crossrank.graph import Graph
from ..rules import P2P_OPS


@dataclass
class Mods:
    """Changes of one batch of scenarios (S rows). Arrays are float64 ns, bool for ``hide``."""

    ddur: np.ndarray  # (S, events) duration change of non-communication operations
    dgap: np.ndarray  # (S, events) gap change
    dtr: np.ndarray  # (S, instances) transfer change
    hide: np.ndarray  # (S, events) communication that costs nothing

    @classmethod
    def zeros(cls, s: int, n_nodes: int, n_inst: int) -> Mods:
        # (S, events) views of event-major buffers: a scenario writes its row, the replay reads whole events
        return cls(np.zeros((n_nodes, s)).T, np.zeros((n_nodes, s)).T, np.zeros((s, n_inst)),
                   np.zeros((n_nodes, s), dtype=bool).T)


@dataclass(frozen=True)
class Arrays:
    """The graph's events as numpy (null -> -1), read by every replay."""

    rank: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    bind_pred: np.ndarray  # -1: the job's start; host.NO_BIND: none
    stream_pred: np.ndarray
    slack: np.ndarray
    inst: np.ndarray  # the group each matched kernel ends with (an instance, or part of a ring's hop)
    wait: np.ndarray
    n_inst: np.ndarray  # participants per group
    n_instances: int  # groups
    parent: np.ndarray  # each group's instance in the graph (whose transfer change it takes)
    n_graph_instances: int
    also: np.ndarray  # a second group its arrival joins, with no wait (a ring hop's gate that waited), or -1
    simple: np.ndarray  # follows its stream predecessor, which is also its binding one, and nothing else
    root: np.ndarray  # the first event of a node's run of simple successors (itself if not simple)
    lead: np.ndarray  # the events that are not simple (each has an event of its own in the order), ascending
    chain: np.ndarray  # its chain (stream or thread): the first event along its stream predecessors
    dep_src: np.ndarray  # further dependencies (Graph.replay_deps): src, dst, slack (ns)
    dep_dst: np.ndarray
    dep_slack: np.ndarray

    @classmethod
    def of(cls, g: Graph, eager: bool = True) -> Arrays:
        """``eager`` False: a send/recv pair always ends together, even where the send finished before its
        receiver started (the What-if study's model)."""
        n = g.events

        def col(name: str, fill: int = -1) -> np.ndarray:
            # (no second copy: to_numpy already made one of a column in two chunks, GPU nodes and host events)
            return n[name].fill_null(fill).to_numpy().astype(np.int64, copy=False)

        bp, sp, inst = col("bind_pred"), col("stream_pred"), col("inst")
        deps = g.replay_deps
        if deps is None:
            deps = pl.DataFrame(schema={"src": pl.Int64, "dst": pl.Int64, "slack_ns": pl.Int64})
        d_src, d_dst = deps["src"].to_numpy().astype(np.int64), deps["dst"].to_numpy().astype(np.int64)
        has_dep = np.zeros(bp.size, dtype=bool)
        has_dep[d_dst] = True
        simple = (inst < 0) & (bp >= 0) & (bp == sp) & ~has_dep
        root = _jump(np.where(simple, bp, np.arange(bp.size)))
        chain = _jump(np.where(sp >= 0, sp, np.arange(bp.size)))
        p2p = n["op"].is_in(P2P_OPS).fill_null(False).to_numpy() if "op" in n.columns else np.zeros(bp.size, bool)
        gate = _apart(np.where(p2p, inst, -1), col("gate_node"), col("a_start_ns"), col("a_end_ns"),
                      g.instances.height) if eager else col("gate_node")
        groups, also, parent = _gate_groups(inst, gate, g.instances.height)
        joined = np.concatenate([groups[groups >= 0], also[also >= 0]])
        # a kernel that waited for nobody arrives with no wait (a collective's last arriver has none anyway)
        wait = np.where(gate == np.arange(gate.size), 0, col("wait_ns", 0))
        return cls(rank=col("rank"), end=col("end_ns"), dur=col("dur_ns"), bind_pred=bp, stream_pred=sp,
                   slack=col("slack_ns", 0), inst=groups, wait=wait,
                   n_inst=np.bincount(joined, minlength=parent.size).astype(np.int64),
                   n_instances=parent.size, parent=parent, n_graph_instances=g.instances.height, also=also,
                   simple=simple, root=root, lead=np.flatnonzero(~simple), chain=chain, dep_src=d_src, dep_dst=d_dst,
                   dep_slack=deps["slack_ns"].to_numpy().astype(np.float64))


def _jump(root: np.ndarray) -> np.ndarray:
    """Follow each pointer to the end of its chain (pointer jumping: log(chain length) rounds)."""
    while root.size:
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    return root


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


@dataclass(frozen=True)
class Schedule:
    """Every operation in wave order, runs of one chain contiguous (structure only; shared by all scenarios).

    Rows of the replay's arrays (``de``) are node ids; row n reads 0 (the job's start), row n+1 -inf (none)."""

    n_waves: int
    forced: int  # kernel ends processed before all participants arrived (inconsistent matches)
    s_off: np.ndarray  # (waves+1) slice of each wave's operations in ``x``
    x: np.ndarray  # operations, wave by wave, in chain order within a wave
    head: np.ndarray  # the operation starts a run (its stream predecessor is in an earlier wave, or none)
    run_first: np.ndarray  # position (in x) of the first operation of its run
    run_id: np.ndarray  # its run's number (ascending along x)
    brow: np.ndarray  # row of its binding term's source when that is on another chain (n: start, n+1: none)
    srow: np.ndarray  # row of its stream predecessor for a run's head (n+1: none)
    bind_is_stream: np.ndarray  # its binding predecessor is its stream predecessor (the gap is on the chain)
    d_off: np.ndarray  # (waves+1) slice of further dependencies, by their operation's position in x
    d_src: np.ndarray
    d_slack: np.ndarray
    d_first: np.ndarray  # per operation with dependencies in a wave: its first, relative to the wave's first
    d_pos: np.ndarray  # ... and its position in x (relative to the wave's first operation)
    dg_off: np.ndarray  # (waves+1) slice of those operations
    v_off: np.ndarray  # (waves+1) slice of the group views that end after each wave
    v_arr_off: np.ndarray  # (views+1) slice of each view's arrivals
    v_arr: np.ndarray  # arrival nodes
    v_wait: np.ndarray  # their measured waits in the view (float)
    v_dtr: np.ndarray  # the graph instance whose transfer change each view takes
    e_off: np.ndarray  # (views+1) slice of each view's end nodes
    e_node: np.ndarray
    e_view: np.ndarray  # each end's view, relative to its wave's first view
    h_off: np.ndarray  # (waves+1) slice of each wave's run heads in ``h_pos``
    h_pos: np.ndarray  # their positions in x
    scan: np.ndarray  # (waves) the wave has a run of more than one operation (else no scan is needed)
    # spans already replayed on this schedule, by (segments' token, scenario key): see replay.Keyed
    memo: dict = field(default_factory=dict, compare=False, repr=False)
