"""Synthetic TP x PP x DP training jobs with a 1F1B pipeline schedule, with exact answers.

Ranks follow Megatron's order (tp fastest, then dp, then pp). Every pipeline (one per (tp, dp)
coordinate) runs M micro-batches per step in 1F1B order on each stage: warm-up forwards, steady
(forward, backward) pairs, cool-down backwards. A forward on stage s > 0 first receives the activation
from s - 1; a backward on stage s < P - 1 first receives the gradient from s + 1; each forward
(backward) then sends to the next (previous) stage. A send and its recv are a rendezvous: both kernels
end at max(arrival) + transfer (sends on their own stream, posted when the compute before them ends;
recvs on another, and compute waits for them). Each forward and backward ends with a TP all-reduce
in lockstep; each step ends with a DP all-reduce of the gradients.

Truth per (rank, step): the bubble = step span - |compute, collectives, memcpy and the transfer part
of every send/recv|, i.e. the GPU idle or waiting on a peer, split into warm-up (before the last stage
starts its first forward), steady and cool-down (after the last stage ends its last backward).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .job import (
    _NCCL_SUFFIX,
    _OP_INFO,
    NCCL_STREAM_BASE,
    Collective,
    InstanceTruth,
    ProcessGroup,
    Scenario,
    Workload,
    _comm_meta,
    _emit_cpu_step,
    _finish,
    _kernel_args,
    _Launch,
    _Rank,
    _truth,
)
from .model import T0_FLOAT_NS, Event


@dataclass(frozen=True)
class PipelineScenario:
    tp: int = 1
    dp: int = 1
    pp: int = 4
    microbatches: int = 8
    steps: int = 2
    forward_ns: tuple[int, ...] = (200_000,)  # per stage (the last value repeats): a slow stage is longer
    backward_ns: tuple[int, ...] = (400_000,)
    p2p_transfer_ns: int = 30_000
    p2p_bytes: int = 4 << 20
    tp_transfer_ns: int = 20_000  # TP all-reduce after every forward and backward (0: none)
    dp_transfer_ns: int = 300_000  # DP all-reduce at the end of each step (0: none)
    descs: dict[str, str] = field(default_factory=dict)  # dimension -> group description ("mesh_tp")
    step_gap_ns: int = 200_000

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    def coord(self, rank: int) -> tuple[int, int, int]:
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def rank_of(self, t: int, d: int, s: int) -> int:
        return t + self.tp * (d + self.dp * s)

    def fwd(self, stage: int) -> int:
        return self.forward_ns[min(stage, len(self.forward_ns) - 1)]

    def bwd(self, stage: int) -> int:
        return self.backward_ns[min(stage, len(self.backward_ns) - 1)]


@dataclass(frozen=True)
class PipelineTruth:
    bubble_ns: dict[tuple[int, int], int]  # (rank, step) -> bubble
    phase_bubble_ns: dict[tuple[int, int], tuple[int, int, int]]  # (rank, step) -> warm-up, steady, cool-down
    span_ns: dict[tuple[int, int], int]
    recv_wait_ns: dict[int, int]  # per rank, over the whole run
    stage_of: dict[int, int]
    pairs: int  # matched send/recv pairs in the run


def groups(ps: PipelineScenario) -> tuple[ProcessGroup, ...]:
    """World, then TP, DP and PP groups (named in that order, like successive new_group calls)."""
    out = [ProcessGroup("0", tuple(range(ps.world)), "default_pg")]
    axes = {"tp": [], "dp": [], "pp": []}
    for r in range(ps.world):
        t, d, s = ps.coord(r)
        axes["tp"].append(tuple(ps.rank_of(x, d, s) for x in range(ps.tp)))
        axes["dp"].append(tuple(ps.rank_of(t, x, s) for x in range(ps.dp)))
        axes["pp"].append(tuple(ps.rank_of(t, d, x) for x in range(ps.pp)))
    for name in ("tp", "dp", "pp"):
        for members in dict.fromkeys(axes[name]):
            if len(members) > 1:
                out.append(ProcessGroup(str(len(out)), members, ps.descs.get(name, "undefined")))
    return tuple(out)


def _schedule(ps: PipelineScenario, stage: int) -> list[tuple[str, int]]:
    """1F1B order on one stage: ("F"|"B", micro-batch)."""
    m = ps.microbatches
    warm = min(ps.pp - stage - 1, m)
    ops = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", i) for i in range(m - warm, m)]


def build_pipeline(ps: PipelineScenario) -> tuple[Workload, PipelineTruth]:
    pgs = groups(ps)
    by_ranks = {frozenset(g.ranks): g for g in pgs}
    stream = {g.name: NCCL_STREAM_BASE + 4 * i for i, g in enumerate(pgs)}
    sc = Scenario(ranks=ps.world, steps=ps.steps, process_groups=pgs, compute_ns=(ps.fwd(0),),
                  collectives=(Collective("all_reduce", 1 << 20, 1000),), step_gap_ns=ps.step_gap_ns,
                  memcpy_ns=0, memset_ns=0, jitter_ns=0)
    ranks = [_Rank(sc, r) for r in range(ps.world)]
    pp_group = {r: by_ranks[frozenset(ps.rank_of(*ps.coord(r)[:2], x) for x in range(ps.pp))] for r in range(ps.world)}
    tp_group = {r: by_ranks.get(frozenset(ps.rank_of(x, *ps.coord(r)[1:]) for x in range(ps.tp))) for r in range(ps.world)}
    dp_group = {r: by_ranks.get(frozenset(ps.rank_of(ps.coord(r)[0], x, ps.coord(r)[2]) for x in range(ps.dp)))
                for r in range(ps.world)}
    instances: list[InstanceTruth] = []
    truth = PipelineTruth({}, {}, {}, dict.fromkeys(range(ps.world), 0), {r: ps.coord(r)[2] for r in range(ps.world)}, 0)
    t_step = T0_FLOAT_NS
    pairs = 0
    for si in range(ps.steps):
        step = si + 1
        for rk in ranks:
            rk.cursor, rk.launches, rk.step_gpu = t_step, [], []
        useful: dict[int, list[tuple[int, int]]] = {r: [] for r in range(ps.world)}
        sends: dict[tuple[int, int, str, int], int] = {}  # (src, dst, kind, mb) -> arrival
        send_free: dict[tuple[int, str], int] = {}  # (rank, F|B): when that send stream is free again
        sched = {r: _schedule(ps, ps.coord(r)[2]) for r in range(ps.world)}
        pos = dict.fromkeys(range(ps.world), 0)
        first_f_last, last_b_last = {}, {}
        # event loop: advance any rank whose next op's inputs are ready (a recv needs its send posted)
        while any(pos[r] < len(sched[r]) for r in pos):
            progressed = False
            for r in range(ps.world):
                while pos[r] < len(sched[r]):
                    kind, mb = sched[r][pos[r]]
                    t, d, s = ps.coord(r)
                    src_stage = s - 1 if kind == "F" else s + 1
                    rk = ranks[r]
                    if 0 <= src_stage < ps.pp:
                        src = ps.rank_of(t, d, src_stage)
                        key = (src, r, kind, mb)
                        if key not in sends:
                            break
                        # a send waits for the previous one on its stream (sends of one direction resolve in order)
                        a_send, a_recv = max(sends.pop(key), send_free.get((src, kind), 0)), rk.cursor
                        end = max(a_send, a_recv) + ps.p2p_transfer_ns
                        send_free[(src, kind)] = end
                        _p2p_pair(ps, ranks, pp_group[r], stream, src, r, kind, a_send, a_recv, end, instances, step)
                        useful[src].append((end - ps.p2p_transfer_ns, end))
                        useful[r].append((end - ps.p2p_transfer_ns, end))
                        truth.recv_wait_ns[r] += end - a_recv - min(end - a_send, end - a_recv)
                        pairs += 1
                        rk.cursor = end
                    dur = ps.fwd(s) if kind == "F" else ps.bwd(s)
                    ev = rk.kernel(0 if kind == "F" else 1, dur)
                    rk.cursor = ev.ts + dur
                    useful[r].append((ev.ts, rk.cursor))
                    if s == ps.pp - 1:
                        if kind == "F":
                            first_f_last.setdefault((t, d), ev.ts)
                        else:
                            last_b_last[(t, d)] = rk.cursor
                    if ps.tp > 1 and ps.tp_transfer_ns:
                        g = tp_group[r]
                        _collective(ranks, r, g, stream[g.name], rk.cursor, rk.cursor + ps.tp_transfer_ns, "all_reduce",
                                    ps.p2p_bytes, instances, step, len(instances))
                        useful[r].append((rk.cursor, rk.cursor + ps.tp_transfer_ns))
                        rk.cursor += ps.tp_transfer_ns
                    dst_stage = s + 1 if kind == "F" else s - 1
                    if 0 <= dst_stage < ps.pp:
                        sends[(r, ps.rank_of(t, d, dst_stage), kind, mb)] = rk.cursor
                    pos[r] += 1
                    progressed = True
            if not progressed:
                raise RuntimeError("pipeline schedule deadlocked")  # a bug in _schedule, never the input
        if ps.dp > 1 and ps.dp_transfer_ns:  # gradient all-reduce: all members of a DP group end together
            for g in pgs:
                if g in dp_group.values():
                    a = {r: ranks[r].cursor for r in g.ranks}
                    end = max(a.values()) + ps.dp_transfer_ns
                    for r in g.ranks:
                        _collective(ranks, r, g, stream[g.name], a[r], end, "all_reduce", 8 * ps.p2p_bytes, instances,
                                    step, len(instances))
                        useful[r].append((end - ps.dp_transfer_ns, end))
                        ranks[r].cursor = end
        for rk in ranks:
            r = rk.rank
            gpu0 = min(e.ts for e in rk.step_gpu)
            gpu1 = max(e.ts + e.dur for e in rk.step_gpu)
            rk.cpu_start = gpu0 - (len(rk.launches) * 20_000 + 20_000)
            t, d, _ = ps.coord(r)
            bounds = (gpu0, first_f_last[(t, d)], last_b_last[(t, d)], gpu1)
            phases = tuple(_idle(useful[r], bounds[i], bounds[i + 1]) for i in range(3))
            truth.bubble_ns[(r, step)] = sum(phases)
            truth.phase_bubble_ns[(r, step)] = phases
            truth.span_ns[(r, step)] = gpu1 - gpu0
            _emit_cpu_step(rk, sc, step)
        t_step = max(rk.cursor for rk in ranks) + ps.step_gap_ns + max(len(rk.launches) for rk in ranks) * 20_000
    for rk in ranks:
        _finish(rk, sc, t_step)
    truth = PipelineTruth(truth.bubble_ns, truth.phase_bubble_ns, truth.span_ns, truth.recv_wait_ns, truth.stage_of, pairs)
    wl = Workload(sc, {rk.rank: rk.events for rk in ranks}, _truth(sc, ranks, instances))
    return wl, truth


def _idle(useful: list[tuple[int, int]], a: int, b: int) -> int:
    """Length of [a, b) not covered by ``useful`` (exact, by sweeping the merged intervals)."""
    covered, cur = 0, a
    for s, e in sorted(useful):
        s, e = max(s, cur), min(e, b)
        if e > s:
            covered += e - s
            cur = e
    return (b - a) - covered


def _comm_kernel(rk: _Rank, op: str, meta: dict, start: int, end: int, stream: int) -> Event:
    corr, ext = rk.next_ids(4)
    args = _kernel_args(ext + 1, rk.device, stream, corr, comm=True)
    ev = rk.gpu("kernel", _OP_INFO[op][3] + _NCCL_SUFFIX, start, end - start, stream, args)
    rk.launches.append(_Launch("comm", ev, op, meta, ext))
    return ev


def _p2p_pair(ps: PipelineScenario, ranks: list[_Rank], pg: ProcessGroup, stream: dict[str, int], src: int, dst: int,
              kind: str, a_send: int, a_recv: int, end: int, instances: list[InstanceTruth], step: int) -> None:
    """Forward sends on stream +1, backward sends on +2, recvs on +3 of the pp group's streams."""
    col = Collective("send", ps.p2p_bytes, ps.p2p_transfer_ns, (pg.name,), peers=(src, dst))
    base = stream[pg.name]
    _comm_kernel(ranks[src], "send", _comm_meta(col, "send", pg, src, dst), a_send, end, base + (1 if kind == "F" else 2))
    _comm_kernel(ranks[dst], "recv", _comm_meta(col, "recv", pg, dst, src), a_recv, end, base + 3)
    latest = max(a_send, a_recv)
    last = [r for r, a in ((src, a_send), (dst, a_recv)) if a == latest]
    instances.append(InstanceTruth(
        index=len(instances), step=step, pg=pg.name, op="send", bytes=ps.p2p_bytes, ranks=(src, dst),
        transfer_ns=ps.p2p_transfer_ns, start_ns={src: a_send, dst: a_recv}, end_ns=end,
        wait_ns={src: latest - a_send, dst: latest - a_recv}, last_rank=last[0] if len(last) == 1 else None,
        seq={}, has_meta={src: True, dst: True},
    ))  # fmt: skip


def _collective(ranks: list[_Rank], r: int, pg: ProcessGroup, stream: int, start: int, end: int, op: str, nbytes: int,
                instances: list[InstanceTruth], step: int, index: int) -> None:
    col = Collective(op, nbytes, end - start, (pg.name,))
    _comm_kernel(ranks[r], op, _comm_meta(col, op, pg, r, None), start, end, stream)


def write_pipeline_truth(ps: PipelineScenario, truth: PipelineTruth, path: Path) -> Path:
    """The scenario and its per-rank, per-step bubbles as JSON next to the traces."""
    doc = {
        "generator": "sample_traces.pipeline_job",
        "scenario": asdict(ps),
        "pairs": truth.pairs,
        "stage_of": {str(r): s for r, s in truth.stage_of.items()},
        "recv_wait_ns": {str(r): w for r, w in truth.recv_wait_ns.items()},
        "rank_steps": [{"rank": r, "step": k, "span_ns": truth.span_ns[(r, k)], "bubble_ns": b,
                        "warmup_bubble_ns": truth.phase_bubble_ns[(r, k)][0],
                        "steady_bubble_ns": truth.phase_bubble_ns[(r, k)][1],
                        "cooldown_bubble_ns": truth.phase_bubble_ns[(r, k)][2]}
                       for (r, k), b in sorted(truth.bubble_ns.items())],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
