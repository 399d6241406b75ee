"""Synthetic op tables (the What-if artifact's schema) of a dp x pp Megatron job whose answers are known exactly.

Each rank runs its program in order: Megatron's GPipe or 1F1B pipeline schedule (its batched send/recv
pairs included), around it a params all-gather at the step's start and, after the last backward, the
layernorm, embedding (first and last stage) and clip all-reduces, the grads reduce-scatter and the optimizer.
Every communication op is a rendezvous: the ops of one exchange (a collective's members, a send and its recv,
a batched pair and its partner) start when their rank reaches them and all end at (last start + transfer).
A compute op lasts its duration; a rank waits ``gap_ns`` of host time before each op. Times are integer
nanoseconds from each step's start (every step starts at 0 on every rank, as in the artifact); the file holds
them as float64 seconds (exact back to the nanosecond) or, ``--dialect canonical``, as ``start_ns``/``dur_ns``.

Truth: every op's (rank, optype, seq_id, start_ns, end_ns, mb_id), each p2p op's partner, the step times, and
who is slow (a slow worker: one (dp rank, stage) computes ``factor`` times longer; a slow stage: every dp rank
of that stage does).

    python -m sample_traces.optable_gen OUT_DIR --dp 2 --pp 4 --microbatches 8 --schedule 1f1b --slow-worker 1:2:1.5
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

FWD_NS, BWD_NS = 2_000_000, 4_000_000  # per micro-batch, per stage
P2P_NS, AG_NS, RS_NS, AR_NS, OPT_NS = 100_000, 1_500_000, 2_500_000, 200_000, 1_000_000
GAP_NS = 10_000  # host time before each op


@dataclass(frozen=True)
class Job:
    dp: int = 2
    pp: int = 4
    tp: int = 1
    microbatches: int = 4
    steps: int = 3
    schedule: str = "1f1b"  # or "gpipe"; with vpp > 1 always interleaved GPipe (chunk by chunk)
    vpp: int = 1  # virtual stages (model chunks) per stage
    record_noops: bool = False  # also record the send/recv a profiler logs where nothing moves (vpp > 1)
    slow_worker: tuple[int, int, float] | None = None  # (dp_rank, stage, factor)
    slow_stage: tuple[int, float] | None = None  # (stage, factor)
    first_step: int = 10
    gap_ns: int = GAP_NS

    def rank(self, d: int, s: int) -> int:
        return self.tp * (d + self.dp * s)

    def factor(self, d: int, s: int) -> float:
        f = 1.0
        if self.slow_worker and (d, s) == self.slow_worker[:2]:
            f *= self.slow_worker[2]
        if self.slow_stage and s == self.slow_stage[0]:
            f *= self.slow_stage[1]
        return f


@dataclass
class Op:
    optype: str
    dur: int = 0  # compute: duration; comm: transfer
    key: tuple | None = None  # rendezvous: every op with this key ends together (None: compute)
    mb: int = -1
    mc: int = -1
    gmc: int = -1
    data_mb: int = -1  # p2p: the micro-batch whose activation or gradient it carries (the table says -1)
    partner: tuple | None = None  # p2p: (rank, optype, micro-batch) of the op it pairs with
    start: int = 0
    end: int = 0
    seq: int = 0


@dataclass
class Truth:
    ops: dict[int, list[Op]] = field(default_factory=dict)  # rank -> ops of one step, in program order
    step_ns: dict[int, int] = field(default_factory=dict)


_PEER = {"forward-send": "forward-recv", "forward-recv": "forward-send",
         "backward-send": "backward-recv", "backward-recv": "backward-send"}


class _Channel:
    """A rank's exchanges with each neighbour, numbered in program order: Megatron's schedule lines them up one
    to one with the neighbour's (a single send with a single recv, a batched pair with a batched pair), so the
    k-th exchange of stage s with s+1 is the k-th of s+1 with s: one rendezvous key."""

    def __init__(self, job: Job, d: int, s: int) -> None:
        self.job, self.d, self.s = job, d, s
        self.count: dict[int, int] = {}

    def ops(self, *sides: tuple[str, int]) -> list[Op]:
        """One exchange: (optype, micro-batch) of each op in it (two for a batched pair)."""
        out = []
        peer = self.s + (1 if sides[0][0] in ("forward-send", "backward-recv") else -1)
        k = self.count.get(peer, 0)
        self.count[peer] = k + 1
        for kind, mb in sides:
            out.append(Op(kind, P2P_NS, key=("p2p", self.d, min(self.s, peer), k), data_mb=mb,
                          partner=(self.job.rank(self.d, peer), _PEER[kind], mb)))
        return out


def _pipeline(job: Job, d: int, s: int) -> list[Op]:
    """Megatron's schedule for one (dp rank, stage): compute with its sends and recvs (batched in 1F1B's steady
    state: a forward's send with the next backward's recv, a backward's send with the next forward's recv)."""
    m, last = job.microbatches, job.pp - 1
    f = job.factor(d, s)
    fwd = [Op("forward-compute", round(FWD_NS * f), mb=i, mc=0, gmc=s) for i in range(m)]
    bwd = [Op("backward-compute", round(BWD_NS * f), mb=i, mc=0, gmc=s) for i in range(m)]
    ch = _Channel(job, d, s)
    out: list[Op] = []
    warm = m if job.schedule == "gpipe" else min(job.pp - s - 1, m)
    steady = m - warm
    for i in range(warm):
        if s > 0:
            out += ch.ops(("forward-recv", i))
        out.append(fwd[i])
        if s < last:
            out += ch.ops(("forward-send", i))
    if steady and s > 0:
        out += ch.ops(("forward-recv", warm))
    for i in range(steady):
        out.append(fwd[warm + i])
        if s < last:  # send this forward's output, receive the gradient for backward i (one batch with s+1)
            out += ch.ops(("forward-send", warm + i), ("backward-recv", i))
        out.append(bwd[i])
        if s > 0:
            if i == steady - 1:
                out += ch.ops(("backward-send", i))
            else:  # send backward i's gradient, receive the next forward's input (one batch with s-1)
                out += ch.ops(("backward-send", i), ("forward-recv", warm + i + 1))
    for i in range(steady, m):
        if s < last:
            out += ch.ops(("backward-recv", i))
        out.append(bwd[i])
        if s > 0:
            out += ch.ops(("backward-send", i))
    return out


def _pipeline_vpp(job: Job, d: int, s: int) -> list[Op]:
    """Interleaved GPipe: stage s holds model chunks (virtual stages) gmc = c * pp + s; every micro-batch goes
    forward through chunk 0 of every stage, then chunk 1 (the last stage's output wraps to stage 0), and back.
    A send or recv pairs with the op carrying the same (direction, sending chunk, micro-batch). With
    ``record_noops`` the first chunk's forward-recv, the last chunk's forward-send and their backward twins are
    recorded too, moving nothing (the What-if artifact's profiler does). Rendezvous is safe for m < pp."""
    m, pp, total = job.microbatches, job.pp, job.pp * job.vpp
    f = job.factor(d, s)
    nxt, prv = job.rank(d, (s + 1) % pp), job.rank(d, (s - 1) % pp)

    def p2p(kind: str, g_src: int, mb: int, peer: int, g_peer: int) -> Op:
        if not 0 <= g_peer < total:  # no such chunk: a no-op the profiler may log
            return Op(kind, 1_000, mb=-1, data_mb=mb)
        return Op(kind, P2P_NS, key=("v", d, kind.split("-")[0], g_src, mb), data_mb=mb,
                  partner=(peer, _PEER[kind], mb))

    out: list[Op] = []
    for c in range(job.vpp):
        g = c * pp + s
        for i in range(m):
            if g > 0 or job.record_noops:
                out.append(p2p("forward-recv", g - 1, i, prv, g - 1))
            out.append(Op("forward-compute", round(FWD_NS * f), mb=i, mc=c, gmc=g))
            if g < total - 1 or job.record_noops:
                out.append(p2p("forward-send", g, i, nxt, g + 1))
    for c in reversed(range(job.vpp)):
        g = c * pp + s
        for i in range(m):
            if g < total - 1 or job.record_noops:
                out.append(p2p("backward-recv", g + 1, i, nxt, g + 1))
            out.append(Op("backward-compute", round(BWD_NS * f), mb=i, mc=c, gmc=g))
            if g > 0 or job.record_noops:
                out.append(p2p("backward-send", g, i, prv, g - 1))
    return [op for op in out if op.key or op.optype.endswith("compute") or job.record_noops]


def program(job: Job, d: int, s: int) -> list[Op]:
    last = job.pp - 1
    chunks = range(job.vpp)
    ops = [Op("params-all-gather", AG_NS, key=("ag", s, c), mc=c) for c in chunks]
    ops += _pipeline(job, d, s) if job.vpp == 1 else _pipeline_vpp(job, d, s)
    ops.append(Op("gc", 0, mb=0))
    ops.append(Op("layernorm-grads-all-reduce", AR_NS, key=("ln", d, s)))
    if s in (0, last):
        ops.append(Op("embedding-grads-all-reduce", AR_NS, key=("emb", d)))
    ops += [Op("grads-reduce-scatter", RS_NS, key=("rs", s, c), mc=c) for c in reversed(chunks)]
    ops.append(Op("optimizer-clip-main-grad", AR_NS, key=("clip",)))
    ops.append(Op("optimizer", round(OPT_NS * job.factor(d, s))))
    seen: dict[str, int] = {}
    for op in ops:
        op.seq = seen.get(op.optype, 0)
        seen[op.optype] = op.seq + 1
    return ops


def simulate(job: Job) -> Truth:
    """One step of every rank: programs in order, rendezvous for communication (deterministic: every step
    is the same, so the truth is one step's times)."""
    progs = {job.rank(d, s): program(job, d, s) for d in range(job.dp) for s in range(job.pp)}
    members: dict[tuple, int] = {}
    for ops in progs.values():
        for op in ops:
            if op.key:
                members[op.key] = members.get(op.key, 0) + 1
    pc = dict.fromkeys(progs, 0)
    clock = dict.fromkeys(progs, 0)
    posted: dict[tuple, list[tuple[int, Op]]] = {}
    while any(pc[r] < len(progs[r]) for r in progs):
        moved = False
        for r, ops in progs.items():
            while pc[r] < len(ops):
                op = ops[pc[r]]
                if op.key is None:
                    op.start = clock[r] + job.gap_ns
                    op.end = op.start + op.dur
                    clock[r] = op.end
                    pc[r] += 1
                    moved = True
                    continue
                here = posted.setdefault(op.key, [])
                if not any(o is op for _, o in here):
                    # a batch's second op starts with its first (one launch)
                    prev = ops[pc[r] - 1] if pc[r] else None
                    op.start = prev.start if prev is not None and prev.key == op.key else clock[r] + job.gap_ns
                    here.append((r, op))
                    moved = True
                if len(here) < members[op.key]:
                    # post the rest of the batch before blocking
                    nxt = ops[pc[r] + 1] if pc[r] + 1 < len(ops) else None
                    if nxt is not None and nxt.key == op.key:
                        pc[r] += 1
                        continue
                    break
                end = max(o.start for _, o in here) + op.dur
                for rr, o in here:
                    o.end = end
                    clock[rr] = max(clock[rr], end)
                for rr in {rr for rr, _ in here} - {r}:
                    pc[rr] += 1  # blocked on its exchange's last op: past it now
                pc[r] += 1
        if not moved:
            raise RuntimeError("schedule deadlocked (a generator bug)")
    truth = Truth(ops=progs)
    span = max(op.end for ops in progs.values() for op in ops) - min(op.start for ops in progs.values() for op in ops)
    truth.step_ns = {job.first_step + k: span for k in range(job.steps)}
    return truth


def rows(job: Job, truth: Truth) -> list[dict]:
    out = []
    for k in range(job.steps):
        step = job.first_step + k
        for d in range(job.dp):
            for s in range(job.pp):
                r = job.rank(d, s)
                for op in truth.ops[r]:
                    out.append({"dp_rank": d, "stage": s, "rank": r, "step": step, "optype": op.optype,
                                "start_ns": op.start, "dur_ns": op.end - op.start, "seq_id": op.seq, "mc": op.mc,
                                "gmc": op.gmc, "mb_id": op.mb})
    return out


def write(job: Job, out: Path, name: str = "gen", dialect: str = "whatif", fmt: str = "parquet") -> Path:
    """``trace-<name>.<fmt>`` and ``meta-<name>.yaml`` (and ``truth-<name>.json``) in ``out``."""
    import polars as pl

    truth = simulate(job)
    df = pl.DataFrame(rows(job, truth))
    if dialect == "whatif":
        df = df.with_columns((pl.col("start_ns") / 1e9).alias("start_ts"), (pl.col("dur_ns") / 1e9).alias("duration"))
        df = df.select("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "gmc",
                       "mb_id")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"trace-{name}.{ {'parquet': 'parquet', 'arrow': 'arrow', 'csv': 'csv'}[fmt] }"
    {"parquet": df.write_parquet, "arrow": df.write_ipc, "csv": df.write_csv}[fmt](path)
    (out / f"meta-{name}.yaml").write_text(
        f"trial_name: {name}\nrun_id: 0\ndp_size: {job.dp}\ndsp_size: 1\npp_size: {job.pp}\ntp_size: {job.tp}\n"
        f"vpp_size: {job.vpp}\nworld_size: {job.dp * job.pp * job.tp}\n")
    (out / f"truth-{name}.json").write_text(json.dumps({
        "job": {"dp": job.dp, "pp": job.pp, "tp": job.tp, "vpp": job.vpp, "microbatches": job.microbatches,
                "schedule": job.schedule if job.vpp == 1 else "interleaved-gpipe"},
        "slow_worker": list(job.slow_worker) if job.slow_worker else None,
        "slow_stage": list(job.slow_stage) if job.slow_stage else None,
        "step_time_ns": {str(k): v for k, v in truth.step_ns.items()},
    }, indent=1))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--name", default="gen")
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b")
    ap.add_argument("--vpp", type=int, default=1, help="virtual stages per stage (interleaved GPipe; m < pp)")
    ap.add_argument("--record-noops", action="store_true", help="also log the send/recv that move nothing")
    ap.add_argument("--slow-worker", metavar="DP:STAGE:FACTOR")
    ap.add_argument("--slow-stage", metavar="STAGE:FACTOR")
    ap.add_argument("--dialect", choices=("whatif", "canonical"), default="whatif")
    ap.add_argument("--format", choices=("parquet", "arrow", "csv"), default="parquet")
    a = ap.parse_args()
    sw = a.slow_worker.split(":") if a.slow_worker else None
    ss = a.slow_stage.split(":") if a.slow_stage else None
    job = Job(dp=a.dp, pp=a.pp, tp=a.tp, microbatches=a.microbatches, steps=a.steps, schedule=a.schedule,
              vpp=a.vpp, record_noops=a.record_noops,
              slow_worker=(int(sw[0]), int(sw[1]), float(sw[2])) if sw else None,
              slow_stage=(int(ss[0]), float(ss[1])) if ss else None)
    print(write(job, a.out, a.name, a.dialect, a.format))


if __name__ == "__main__":
    main()
