"""Flight Recorder dumps as a real NCCL job writes them, of a 2-D DeviceMesh job that goes wrong: exact truth.

The field layout is copied from the real dumps in ``../shared/traces/nccl_real`` (H100, NCCL 2.28.9, torch 2.11):
files ``rank_<N>`` (no suffix, pickle protocol 2), top-level keys ``version`` ("2.10"), ``pg_config`` (member
lists as text), ``comm_lib_version``, ``pg_status``, ``entries``; each entry's keys in the real order, with
``duration_ms`` only on completed entries, ``time_discovered_*`` None until discovered, ``retired`` only when
completed.

What a real NCCL job does, and these dumps reproduce: every rank **enqueues** its whole program without
blocking (``async_op=False`` returns as soon as the kernel is queued), and a collective's kernel starts on the
GPU only when the one before it on that rank has finished (each waits for its input, the previous collective's
output, through the compute stream). NCCL pairs the m-th call of every member of a communicator, whatever the
op or size (it checks neither): a rank that skips a call shifts every later pairing of that communicator by one
and the job hangs only where the counts run out. So the dump of a waiting rank shows its first unfinished
collective ``started`` and every later one ``scheduled``.

The job: ``dp x tp`` ranks, tensor-parallel groups of consecutive ranks (desc ``mesh_tp``) and data-parallel
groups of stride ``tp`` (``mesh_dp``), created in that order after the world (pg names "0", "1", ...). Each
step on every rank: a tp all_reduce (activations) then a dp all_reduce (gradients). At step ``at`` the culprit:

- ``skipped_tp``: skips its tp all_reduce (goes straight to the dp all_reduce);
- ``wrong_size_tp``: all_reduces half the elements in tp (NCCL runs it: the job goes on, silently wrong);
- ``wrong_op_tp``: all_gathers where its tp peers all_reduce;
- ``healthy``: nothing.

    python -m sample_traces.flight_recorder_nccl OUT_DIR --scenario skipped_tp [--dp 2 --tp 4 --culprit 5]
"""

from __future__ import annotations

import argparse
import json
import pickle
from dataclasses import dataclass
from pathlib import Path

SCENARIOS = ("skipped_tp", "wrong_size_tp", "wrong_op_tp", "healthy")
T0_NS = 1_795_762_211_800_000_000  # wall clock of the real captures (2026-11-28)
TP_NUMEL = 1 << 20  # float32 elements: 4 MiB
DP_NUMEL = 1 << 18  # 1 MiB
TP_US, DP_US = 2_000, 5_000  # transfer times on the GPU
ENQUEUE_NS = 18_000  # host time between two enqueued collectives
TORCH = "/opt/torch/.venv/lib/python3.12/site-packages/torch/distributed"
SCRIPT = "/workspace/train_2d.py"


@dataclass(frozen=True)
class Mesh2D:
    scenario: str = "skipped_tp"
    dp: int = 2
    tp: int = 4
    steps: int = 6
    at: int = 2  # 0-based step at which the culprit goes wrong
    culprit: int = 5

    @property
    def world(self) -> int:
        return self.dp * self.tp


def groups(job: Mesh2D) -> dict[str, tuple[str, tuple[int, ...]]]:
    """pg name -> (desc, members) in creation order: the world, the tp groups, the dp groups."""
    out = {"0": ("default_pg", tuple(range(job.world)))}
    for i in range(job.dp):
        out[str(len(out))] = ("mesh_tp", tuple(range(i * job.tp, (i + 1) * job.tp)))
    for j in range(job.tp):
        out[str(len(out))] = ("mesh_dp", tuple(range(j, job.world, job.tp)))
    return out


def _mine(job: Mesh2D, rank: int) -> dict[str, str]:
    return {d: name for name, (d, m) in groups(job).items() if rank in m and d != "default_pg"}


def program(job: Mesh2D, rank: int) -> list[tuple[str, str, int, int, int]]:
    """The rank's collectives in call order: (pg, op, input numel, output numel, stack line)."""
    mine = _mine(job, rank)
    ops = []
    for step in range(job.steps):
        bad = rank == job.culprit and step == job.at
        if bad and job.scenario == "skipped_tp":
            pass
        elif bad and job.scenario == "wrong_size_tp":
            ops.append((mine["mesh_tp"], "all_reduce", TP_NUMEL // 2, TP_NUMEL // 2, 41))
        elif bad and job.scenario == "wrong_op_tp":
            ops.append((mine["mesh_tp"], "all_gather", TP_NUMEL // job.tp, TP_NUMEL, 43))
        else:
            ops.append((mine["mesh_tp"], "all_reduce", TP_NUMEL, TP_NUMEL, 40))
        ops.append((mine["mesh_dp"], "all_reduce", DP_NUMEL, DP_NUMEL, 47))
    return ops


def simulate(job: Mesh2D) -> dict[int, list[dict]]:
    """Each rank's calls with their times and state: the m-th calls of a group's members run together once each
    has started its own (its previous call finished); the transfer ends ``TP_US``/``DP_US`` after the last start."""
    g = groups(job)
    calls = {r: [{"pg": pg, "op": op, "in": a, "out": b, "line": ln, "created": T0_NS + r * 7_000 + i * ENQUEUE_NS,
                  "start": None, "end": None} for i, (pg, op, a, b, ln) in enumerate(program(job, r))]
             for r in range(job.world)}
    for cs in calls.values():
        count: dict[str, int] = {}
        for c in cs:
            c["m"] = count[c["pg"]] = count.get(c["pg"], 0) + 1  # also collective_seq_id: per rank and group
    by_m = {(r, c["pg"], c["m"]): c for r, cs in calls.items() for c in cs}
    ptr = dict.fromkeys(calls, 0)
    ready = {r: calls[r][0]["created"] if calls[r] else 0 for r in calls}  # when the rank's next call may start
    moved = True
    while moved:
        moved = False
        for r in calls:
            if ptr[r] >= len(calls[r]):
                continue
            c = calls[r][ptr[r]]
            c["start"] = max(c["created"], ready[r])
            members = g[c["pg"]][1]
            peers = [by_m.get((m, c["pg"], c["m"])) for m in members]
            if any(p is None or ptr[m] >= len(calls[m]) or p is not calls[m][ptr[m]] for m, p in zip(members, peers)):
                continue  # a member has not reached its m-th call of this group yet (or never will)
            for m, p in zip(members, peers):
                p["start"] = max(p["created"], ready[m])
            end = max(p["start"] for p in peers) + (TP_US if g[c["pg"]][0] == "mesh_tp" else DP_US) * 1000
            for m, p in zip(members, peers):
                p["end"] = end
                ready[m] = end
                ptr[m] += 1
            moved = True
    for r in calls:  # the first unfinished call has started (its predecessor finished); later ones wait
        if ptr[r] < len(calls[r]):
            calls[r][ptr[r]]["start"] = max(calls[r][ptr[r]]["created"], ready[r])
            for c in calls[r][ptr[r] + 1:]:
                c["start"] = None
    return calls


def _frames(op: str, line: int) -> list[dict]:
    inner = {"all_reduce": 3068, "all_gather": 4079}[op]
    return [{"filename": f"{TORCH}/distributed_c10d.py", "line": inner, "name": op},
            {"filename": f"{TORCH}/c10d_logger.py", "line": 83, "name": "wrapper"},
            {"filename": SCRIPT, "line": line, "name": "train_step"},
            {"filename": SCRIPT, "line": 88, "name": "main"},
            {"filename": SCRIPT, "line": 95, "name": "<module>"}]


def dumps(job: Mesh2D) -> dict[int, dict]:
    """rank -> its dump, in the real dumps' layout."""
    g = groups(job)
    pg_id = {name: i for i, name in enumerate(g)}
    out = {}
    for r, cs in simulate(job).items():
        entries = []
        for i, c in enumerate(cs):
            done, started = c["end"] is not None, c["start"] is not None
            e = {"frames": _frames(c["op"], c["line"]), "record_id": i, "pg_id": pg_id[c["pg"]],
                 "process_group": (c["pg"], g[c["pg"]][0]), "thread_name": "python3",
                 "thread_id": str(140_000_000_000_000 + r), "collective_seq_id": c["m"], "p2p_seq_id": 0,
                 "op_id": c["m"], "profiling_name": f"nccl:{c['op']}", "time_created_ns": c["created"]}
            if done:
                e["duration_ms"] = (c["end"] - c["start"]) / 1e6
            e.update({"input_sizes": [[c["in"]]], "input_dtypes": ["Float"],
                      "output_sizes": [[job.tp, c["in"]]] if c["op"] == "all_gather" else [[c["out"]]],
                      "output_dtypes": ["Float"],
                      "state": "completed" if done else "started" if started else "scheduled",
                      "time_discovered_started_ns": c["start"] if started else None,
                      "time_discovered_completed_ns": c["end"] if done else None,
                      "retired": done, "timeout_ms": 600_000, "is_p2p": False})
            entries.append(e)
        mine = [name for name, (_, m) in g.items() if r in m]
        status = {}
        for name in mine:
            own = [c for c in cs if c["pg"] == name]
            status[name] = {"last_enqueued_collective": len(own),
                            "last_started_collective": max([c["m"] for c in own if c["start"] is not None] or [-1]),
                            "last_completed_collective": max([c["m"] for c in own if c["end"] is not None] or [-1])}
        out[r] = {"version": "2.10",
                  "pg_config": {name: {"name": name, "desc": g[name][0], "ranks": str(list(g[name][1]))}
                                for name in mine},
                  "comm_lib_version": "2.28.9", "pg_status": status, "entries": entries}
    return out


def truth(job: Mesh2D) -> dict:
    """What the report must say: the root group, its seq and op, who waits, who never entered or mismatched;
    ``desync``: the first collective whose members disagree (where the culprit went wrong)."""
    g = groups(job)
    mine = _mine(job, job.culprit)
    tp = g[mine["mesh_tp"]][1]
    peers = [r for r in tp if r != job.culprit]
    base = {"scenario": job.scenario, "world_size": job.world, "culprit": job.culprit, "group": mine["mesh_tp"],
            "group_ranks": list(tp), "dimension": "tp", "op": "all_reduce", "bytes": TP_NUMEL * 4, "dtype": "Float"}
    if job.scenario == "healthy":
        return {"scenario": "healthy", "world_size": job.world, "hang": None}
    if job.scenario == "skipped_tp":
        # the peers' last tp all_reduce never gets its fourth member; the culprit skipped the peers' #at+1
        dp_waiting = sorted(m for name, (d, ms) in g.items() if d == "mesh_dp" and job.culprit not in ms
                            for m in ms if m not in tp)
        return {**base, "seq": job.steps, "waiting": peers, "missing": [job.culprit], "mismatched": [],
                "skipped_seq": job.at + 1, "blocked_dp_waiting": dp_waiting}
    if job.scenario == "wrong_size_tp":
        return {**base, "seq": job.at + 1, "waiting": [], "missing": [], "hang": None,
                "mismatched": [{"rank": job.culprit, "op": "all_reduce", "bytes": TP_NUMEL * 2, "dtype": "Float"}]}
    return {**base, "seq": job.at + 1, "waiting": [], "missing": [],
            "mismatched": [{"rank": job.culprit, "op": "all_gather", "bytes": TP_NUMEL, "dtype": "Float"}]}


def write(job: Mesh2D, out: Path, fmt: str = "pickle") -> dict:
    """Every rank's dump (``rank_<N>``: pickle as the real ones; ``rank_<N>.json`` with ``fmt="json"``) and
    ``ground_truth.json`` in ``out``; returns the truth."""
    out.mkdir(parents=True, exist_ok=True)
    for r, d in dumps(job).items():
        if fmt == "json":
            (out / f"rank_{r}.json").write_text(json.dumps(d, separators=(",", ":")))
        else:
            (out / f"rank_{r}").write_bytes(pickle.dumps(d, protocol=2))
    t = truth(job)
    (out / "ground_truth.json").write_text(json.dumps(t, indent=1) + "\n")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--scenario", choices=SCENARIOS, default="skipped_tp")
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--at", type=int, default=2)
    ap.add_argument("--culprit", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    t = write(Mesh2D(a.scenario, a.dp, a.tp, a.steps, a.at, a.culprit), a.out, "json" if a.json else "pickle")
    print(json.dumps(t))


if __name__ == "__main__":
    main()
