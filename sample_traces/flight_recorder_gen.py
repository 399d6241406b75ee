"""Synthetic Flight Recorder dumps of a hung job whose answer is known exactly.

The job: ``ranks`` ranks in a DeviceMesh ("dp", "tp") with tp = min(8, ranks / 2) (tensor-parallel groups
of consecutive ranks, data-parallel groups of stride tp), and for send/recv a ("pp") pairing of rank r with
r + ranks/2. Each healthy step is, on every rank: tp all_reduce (64 MiB bf16), tp all_gather, dp
reduce_scatter (and a pp send / recv). Then step ``steps`` goes wrong in one of the ways below, with the
cascade a real job shows: the culprit's tp peers wait in the broken tp all_reduce, so their dp peers,
who finished their own tp all_reduce, go on to the dp reduce_scatter and wait there for them.

- ``never_joined``: the culprit never calls the tp all_reduce (its last entry is the step before's).
- ``wrong_size``: the culprit's all_reduce has half the elements; every member entered, none finishes.
- ``wrong_op``: the culprit calls all_gather where its peers call all_reduce.
- ``missing_dump``: as never_joined, and the culprit's dump is absent from the set.
- ``healthy``: nothing goes wrong (the answer is "no hang").
- ``p2p``: the pp stage pair (culprit - ranks/2, culprit): the sender posts its send, the culprit never
  posts the recv (no collective hangs).

Dumps follow torch 2.13's NCCL format (version "2.10", pg_config with member lists as strings, states
scheduled / started / completed, stacks as frame dicts), as pickle (``rank<N>.pkl``, protocol 2, as
torch writes) or JSON (``rank<N>.json``). ``truth`` is what the first line of the report must say.

    python -m sample_traces.flight_recorder_gen OUT_DIR --ranks 64 --scenario wrong_size [--json]
"""

from __future__ import annotations

import argparse
import json
import pickle
from dataclasses import dataclass
from pathlib import Path

SCENARIOS = ("never_joined", "wrong_size", "wrong_op", "missing_dump", "p2p", "healthy")
T0_NS = 1_795_000_000_000_000_000  # a wall-clock epoch time (2026-11-18)
STEP_NS = 50_000_000
AR_NUMEL = 32 * 1024 * 1024  # 64 MiB of bf16
AG_NUMEL = 4 * 1024 * 1024
RS_NUMEL = 8 * 1024 * 1024
P2P_NUMEL = 1024 * 1024
FILE = "/workspace/train.py"


@dataclass(frozen=True)
class Job:
    ranks: int
    scenario: str
    steps: int = 3  # healthy steps before the broken one
    culprit: int | None = None  # default: the last rank

    @property
    def tp(self) -> int:
        return min(8, max(1, self.ranks // 2))

    @property
    def bad(self) -> int:
        return self.ranks - 1 if self.culprit is None else self.culprit


def groups(job: Job) -> dict[str, tuple[str, tuple[int, ...]]]:
    """pg name -> (desc, members), named in creation order as torch names them ("0" is the world)."""
    n, tp = job.ranks, job.tp
    out = {"0": ("default_pg", tuple(range(n)))}
    for i in range(n // tp):
        out[str(len(out))] = ("mesh_tp", tuple(range(i * tp, (i + 1) * tp)))
    for j in range(tp):
        out[str(len(out))] = ("mesh_dp", tuple(range(j, n, tp)))
    if job.scenario == "p2p":
        for r in range(n // 2):
            out[str(len(out))] = ("mesh_pp", (r, r + n // 2))
    return out


def _mine(job: Job, rank: int) -> dict[str, str]:
    """desc -> the pg name of this rank's group of that kind."""
    return {d: name for name, (d, members) in groups(job).items() if rank in members and d != "default_pg"}


def truth(job: Job) -> dict:
    g = groups(job)
    bad = job.bad
    mine = _mine(job, bad)
    if job.scenario == "healthy":
        return {"group": None, "hang": None}
    if job.scenario == "p2p":
        sender = bad - job.ranks // 2
        return {"group": mine["mesh_pp"], "dimension": "pp", "seq": job.steps + 1, "op": "send",
                "waiting": [sender], "missing": [bad], "mismatched": [], "no_dump": [], "culprit": bad}
    tp_members = g[mine["mesh_tp"]][1]
    out = {"group": mine["mesh_tp"], "dimension": "tp", "seq": 2 * job.steps + 1, "op": "all_reduce",
           "bytes": AR_NUMEL * 2, "dtype": "BFloat16", "culprit": bad, "mismatched": [], "no_dump": []}
    others = [r for r in tp_members if r != bad]
    if job.scenario in ("never_joined", "missing_dump"):
        out.update(waiting=others, missing=[bad] if job.scenario == "never_joined" else [])
        if job.scenario == "missing_dump":
            out["no_dump"] = [bad]
    elif job.scenario == "wrong_size":
        out.update(waiting=list(tp_members), missing=[],
                   mismatched=[{"rank": bad, "op": "all_reduce", "bytes": AR_NUMEL, "dtype": "BFloat16"}])
    else:
        out.update(waiting=list(tp_members), missing=[],
                   mismatched=[{"rank": bad, "op": "all_gather", "bytes": AG_NUMEL * 2, "dtype": "BFloat16"}])
    return out


def _frames(fn: str, line: int) -> list[dict]:
    return [{"name": fn, "filename": "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py",
             "line": 2500}, {"name": "forward", "filename": FILE, "line": line},
            {"name": "train_step", "filename": FILE, "line": 120}, {"name": "<module>", "filename": FILE, "line": 200}]


class _Rank:
    def __init__(self, job: Job, rank: int) -> None:
        self.job, self.rank = job, rank
        self.entries: list[dict] = []
        self.seq: dict[str, int] = {}
        self.p2p: dict[str, int] = {}
        self.t = T0_NS + rank * 1000  # hosts start a few us apart

    def op(self, pg: str, desc: str, name: str, numel_in: int, numel_out: int, state: str, line: int,
           peer: tuple[int, int] | None = None) -> None:
        p2p = peer is not None
        if p2p:
            self.p2p[pg] = self.p2p.get(pg, 0) + 1
        else:
            self.seq[pg] = self.seq.get(pg, 0) + 1
        self.t += 1_000_000
        created = self.t
        profiling = f"nccl:{name}" + (f" {peer[0]}->{peer[1]}" if name == "send" else
                                      f" {peer[1]}<-{peer[0]}" if name == "recv" else "")
        self.entries.append({
            "frames": _frames(name, line), "record_id": len(self.entries), "pg_id": int(pg),
            "process_group": (pg, desc), "collective_seq_id": 0 if p2p else self.seq[pg],
            "p2p_seq_id": self.p2p.get(pg, 0) if p2p else 0, "op_id": len(self.entries) + 1,
            "profiling_name": profiling, "time_created_ns": created,
            "input_sizes": [[numel_in]], "input_dtypes": ["BFloat16"], "output_sizes": [[numel_out]],
            "output_dtypes": ["BFloat16"], "state": state,
            "time_discovered_started_ns": created + 200_000 if state != "scheduled" else None,
            "time_discovered_completed_ns": created + 800_000 if state == "completed" else None,
            "retired": state == "completed", "timeout_ms": 600_000, "is_p2p": p2p,
            "duration_ms": 0.6 if state == "completed" else None,
            "thread_id": "140000000000000", "thread_name": "pt_main_thread",
        })


def build(job: Job) -> dict[int, dict]:
    """rank -> dump (as torch would pickle it)."""
    g = groups(job)
    n, bad, half = job.ranks, job.bad, job.ranks // 2
    bad_tp = _mine(job, bad)["mesh_tp"]
    stuck_tp = set(g[bad_tp][1]) if job.scenario not in ("p2p", "healthy") else set()
    dumps = {}
    for rank in range(n):
        st = _Rank(job, rank)
        mine = _mine(job, rank)
        tp, dp = mine["mesh_tp"], mine["mesh_dp"]
        for step in range(job.steps + 1):
            last = step == job.steps
            stage0 = rank < half
            if job.scenario == "p2p" and not last:
                pp = mine["mesh_pp"]
                if stage0:
                    st.op(pp, "mesh_pp", "send", P2P_NUMEL, P2P_NUMEL, "completed", 80, (0, 1))
                else:
                    st.op(pp, "mesh_pp", "recv", P2P_NUMEL, P2P_NUMEL, "completed", 81, (0, 1))
            if job.scenario == "p2p" and last:
                pp = mine["mesh_pp"]
                if stage0 and rank + half == bad:
                    st.op(pp, "mesh_pp", "send", P2P_NUMEL, P2P_NUMEL, "started", 80, (0, 1))
                elif not stage0 and rank != bad:
                    st.op(pp, "mesh_pp", "recv", P2P_NUMEL, P2P_NUMEL, "completed", 81, (0, 1))
                elif stage0:
                    st.op(pp, "mesh_pp", "send", P2P_NUMEL, P2P_NUMEL, "completed", 80, (0, 1))
                continue
            if not last or rank not in stuck_tp:
                st.op(tp, "mesh_tp", "all_reduce", AR_NUMEL, AR_NUMEL, "completed", 90)
                st.op(tp, "mesh_tp", "all_gather", AG_NUMEL, AG_NUMEL * job.tp, "completed", 91)
                # the dp reduce_scatter of the last step waits for the dp peers stuck in their tp group
                dp_stuck = last and any(r in stuck_tp for r in g[dp][1])
                st.op(dp, "mesh_dp", "reduce_scatter", RS_NUMEL, RS_NUMEL // len(g[dp][1]),
                      "started" if dp_stuck else "completed", 95)
                continue
            # the broken tp all_reduce, on the culprit's tp group
            if rank != bad:
                st.op(tp, "mesh_tp", "all_reduce", AR_NUMEL, AR_NUMEL, "started", 90)
            elif job.scenario == "wrong_size":
                st.op(tp, "mesh_tp", "all_reduce", AR_NUMEL // 2, AR_NUMEL // 2, "started", 90)
            elif job.scenario == "wrong_op":
                st.op(tp, "mesh_tp", "all_gather", AG_NUMEL, AG_NUMEL * job.tp, "started", 93)
        pg_config = {name: {"name": name, "desc": d, "ranks": str(list(m))} for name, (d, m) in g.items()
                     if rank in m}
        status = {name: {"last_enqueued_collective": st.seq.get(name, 0), "last_started_collective": -1,
                         "last_completed_collective": -1} for name in pg_config}
        dumps[rank] = {"version": "2.10", "pg_config": pg_config, "pg_status": status, "entries": st.entries}
    if job.scenario == "missing_dump":
        del dumps[bad]
    return dumps


def write(job: Job, out: Path, fmt: str = "pickle") -> dict:
    """Write every rank's dump and ``ground_truth.json`` into ``out``; returns the truth."""
    out.mkdir(parents=True, exist_ok=True)
    for rank, dump in build(job).items():
        if fmt == "json":
            (out / f"rank{rank}.json").write_text(json.dumps(dump, separators=(",", ":"), sort_keys=True))
        else:
            (out / f"rank{rank}.pkl").write_bytes(pickle.dumps(dump, protocol=2))
    t = truth(job)
    (out.parent / f"{out.name}.truth.json").write_text(json.dumps(t, indent=2) + "\n")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--scenario", choices=SCENARIOS, default="never_joined")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="JSON dumps (default: pickle, as the watchdog writes)")
    args = ap.parse_args()
    t = write(Job(args.ranks, args.scenario, args.steps), args.out, "json" if args.json else "pickle")
    print(json.dumps(t))


if __name__ == "__main__":
    main()
