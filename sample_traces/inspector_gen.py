"""Synthetic NCCL Inspector logs (NVIDIA/nccl ``plugins/profiler/inspector``, JSON mode) with exact truth.

The job: ``nodes x gpus_per_node`` ranks, one process per GPU, three kinds of communicator as a
TP x DP job has them: one world communicator, one TP communicator per node (intra-node) and one DP
communicator per local GPU index (a "rail": one GPU per node, inter-node). Each iteration every rank
computes, then runs TP all-reduces, a DP reduce-scatter and all-gather, and a small world all-reduce.

Time is integer microseconds on one true clock. An instance ends on every member at
``E = max(arrivals) + transfer``, so a member's kernel lasts ``E - a_r`` (what the plugin logs as
``coll_exec_time_us``): the last arriver's kernel lasts exactly ``transfer``. ``transfer`` is an integer
number of microseconds derived from the communicator's true bus bandwidth, so the bandwidth the logs
imply is known exactly (``ground_truth.json``: ``busbw_gbs`` per communicator and operation).

- a **slow rank** computes ``slow_delay_us`` longer before each iteration's first collective, so the
  others wait for it;
- a **slow link**: the DP communicator of one rail runs at ``slow_link_factor`` of the normal inter-node
  bus bandwidth.

``schedule="tp_fsdp"`` is a 2-D TP + FSDP2 job instead: per layer, forward a DP all-gather (the parameters) and a
TP all-reduce, backward a TP all-reduce and a DP reduce-scatter (the gradients); no pipeline. Two things a real
such job's logs carry that the analysis must not misread: ``comm_names=False`` names every communicator
"unknown" (as NCCL logs them when the job names none), and ``small_p2p_bytes`` adds a ring of small send/recv
per iteration between consecutive ranks of each TP group, each pair on a 2-rank communicator of its own (as
PyTorch creates one per pair for send/recv), whose time is latency (``p2p_latency_us``: a uniform draw per
exchange), not bandwidth.

Records follow ``inspector_json.cc``: one line per completed operation,
``{"header": {id, comm_name, rank, n_ranks, nnodes}, "metadata": {inspector_output_format_version,
git_rev, rec_mechanism, dump_timestamp_us, hostname, pid}, "coll_perf": {coll, coll_sn,
coll_msg_size_bytes, coll_exec_time_us, coll_timing_source, coll_algobw_gbs, coll_busbw_gbs
[, event_trace_sn, event_trace_ts]}}`` (or ``p2p_perf``), in one ``<hostname>-pid<pid>.log`` per
process, written in dump batches (each communicator's drained ring in turn). Each node's host clock
is off the true clock by ``clock_offsets_us[node]`` in the verbose timestamps.

    python -m sample_traces.inspector_gen OUT_DIR --nodes 2 --gpus 4 --iterations 40 --slow-rank 5 --slow-link 2
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

T0_US = 1_764_230_400_000_000  # 2025-11-27 08:00 UTC, host wall clock as gettimeofday gives it
PLUGIN_OPS = {"all_reduce": "AllReduce", "reduce_scatter": "ReduceScatter", "all_gather": "AllGather",
              "send": "Send", "recv": "Recv"}


@dataclass
class Spec:
    nodes: int = 2
    gpus_per_node: int = 4
    iterations: int = 40
    verbose: bool = True
    slow_rank: int | None = None
    slow_delay_us: int = 5000
    slow_link: int | None = None  # the rail (local GPU index) whose DP communicator is slow
    slow_link_factor: float = 0.5
    intra_busbw_gbs: float = 300.0
    inter_busbw_gbs: float = 40.0
    compute_us: int = 20_000
    jitter_us: int = 40
    tp_bytes: int = 32 << 20
    dp_bytes: int = 16 << 20  # per rank (the plugin's msg size for reduce-scatter / all-gather)
    world_bytes: int = 64 << 10
    p2p_bytes: int = 8 << 20  # per iteration, rank 0 sends to the first rank of the next node (0: none)
    channels: int = 2
    dump_every: int = 8  # iterations per dump batch
    seed: int = 0
    clock_offsets_us: dict[int, int] = field(default_factory=dict)  # node -> host clock offset
    schedule: str = "tp_dp"  # or "tp_fsdp" (module doc)
    layers: int = 4  # tp_fsdp: layers per iteration
    comm_names: bool = True  # False: every communicator is "unknown"
    small_p2p_bytes: int = 0  # > 0: a ring of send/recv this small per iteration in each TP group
    p2p_latency_us: tuple[int, int] = (20, 600)  # a small exchange's time, drawn uniformly


def bus_factor(op: str, n: int) -> float:
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n}.get(op, 1.0)


def traffic(op: str, msg: int, n: int) -> int:
    """Bytes the plugin divides by time for algbw (``inspectorComputeOpBw``)."""
    return msg * n if op in ("reduce_scatter", "all_gather") else msg


def _comm_id(rng: random.Random) -> str:
    return f"0x{rng.getrandbits(56):x}"


def communicators(spec: Spec, rng: random.Random) -> list[dict]:
    g, n = spec.gpus_per_node, spec.nodes
    world = n * g
    comms = [{"id": _comm_id(rng), "name": "default_pg", "kind": "world", "ranks": list(range(world)), "nnodes": n}]
    for node in range(n):
        comms.append({"id": _comm_id(rng), "name": f"tp_{node}", "kind": "tp",
                      "ranks": list(range(node * g, node * g + g)), "nnodes": 1})
    for k in range(g):
        comms.append({"id": _comm_id(rng), "name": f"dp_{k}", "kind": "dp", "rail": k,
                      "ranks": [node * g + k for node in range(n)], "nnodes": n})
    if spec.p2p_bytes and n > 1:
        comms.append({"id": _comm_id(rng), "name": "pp_0_1", "kind": "pp", "ranks": [0, g], "nnodes": 2})
    if spec.small_p2p_bytes and g > 1:
        for node in range(n):
            for k in range(g if g > 2 else 1):
                a, b = node * g + k, node * g + (k + 1) % g
                comms.append({"id": _comm_id(rng), "name": f"p2p_{min(a, b)}_{max(a, b)}", "kind": "p2p",
                              "ranks": sorted((a, b)), "nnodes": 1, "ring": (a, b)})
    for c in comms:
        c["busbw"] = spec.intra_busbw_gbs if c["nnodes"] == 1 else spec.inter_busbw_gbs
        if c["kind"] == "dp" and c.get("rail") == spec.slow_link:
            c["busbw"] = spec.inter_busbw_gbs * spec.slow_link_factor
        c["sn"] = 0
        c["done"] = {r: [] for r in c["ranks"]}  # completed records per member, drained at each dump
        if not spec.comm_names:
            c["name"] = "unknown"
    return comms


def transfer_us(op: str, msg: int, n: int, busbw: float) -> int:
    """Integer microseconds of a transfer at ``busbw`` GB/s (at least 1)."""
    return max(1, round(traffic(op, msg, n) * bus_factor(op, n) / (busbw * 1e3)))


def implied_busbw(op: str, msg: int, n: int, t_us: int) -> float:
    return traffic(op, msg, n) / (t_us * 1e3) * bus_factor(op, n)


def generate(spec: Spec, sink: Callable[[str, list[str]], None] | None = None) -> tuple[dict[str, list[str]], dict]:
    """File name -> lines, and the truth. With ``sink``, each dump's lines go to ``sink(file name, lines)``
    instead (large logs in bounded memory) and the files come back empty."""
    rng = random.Random(spec.seed)
    comms = communicators(spec, rng)
    world = spec.nodes * spec.gpus_per_node
    host = [f"node-{r // spec.gpus_per_node:02d}" for r in range(world)]
    pids = rng.sample(range(10_000, 99_999), world)  # not in rank order: ranks must come from the world comm
    clock = [0] * world  # true time each rank is free
    cursor = {r: T0_US + rng.randrange(0, 50) for r in range(world)}
    lines: dict[int, list[str]] = {r: [] for r in range(world)}
    names = {r: f"{host[r]}-pid{pids[r]}.log" for r in range(world)}
    written = 0
    truth_t: dict[tuple[str, str, int], int] = {}
    caused: dict[int, int] = {r: 0 for r in range(world)}
    del clock

    def run(c: dict, op: str, msg: int, gap: dict[int, int]) -> None:
        members = c["ranks"]
        n = len(members)
        arrive = {r: cursor[r] + gap.get(r, 0) for r in members}
        t = transfer_us(op, msg, n, c["busbw"])
        truth_t[(c["id"], op, msg)] = t
        end = max(arrive.values()) + t
        lasts = [r for r in members if arrive[r] == end - t]  # ranks tied for last share what they caused
        for r in lasts:
            caused[r] += sum(end - t - arrive[m] for m in members) / len(lasts)
        for r in members:
            cursor[r] = end
            c["done"][r].append((op, c["sn"], msg, arrive[r], end))
        c["sn"] += 1

    def p2p(c: dict, msg: int, latency: tuple[int, int] | None = None) -> None:
        src, dst = c.get("ring", c["ranks"])
        t = transfer_us("send", msg, 2, c["busbw"]) + (rng.randint(*latency) if latency else 0)
        truth_t[(c["id"], "send", msg)] = t
        a_s, a_d = cursor[src], cursor[dst]
        start = max(a_s, a_d)
        end = start + t
        # p2p_sn counts each process's own p2p operations on the communicator, from 1 (inspector_plugin.cc)
        c["done"][src].append(("send", c["sn"] + 1, msg, a_s, end))
        c["done"][dst].append(("recv", c["sn"] + 1, msg, a_d, end))
        cursor[src] = cursor[dst] = end
        c["sn"] += 1

    by_kind = {k: [c for c in comms if c["kind"] == k] for k in ("world", "tp", "dp", "pp", "p2p")}
    for it in range(spec.iterations):
        gap = {r: spec.compute_us + rng.randrange(0, spec.jitter_us + 1) for r in range(world)}
        if spec.slow_rank is not None:
            gap[spec.slow_rank] += spec.slow_delay_us
        if spec.schedule == "tp_fsdp":
            _fsdp_iteration(spec, by_kind, run, gap, rng)
            for c in by_kind["p2p"]:
                p2p(c, spec.small_p2p_bytes, spec.p2p_latency_us)
            if (it + 1) % spec.dump_every == 0 or it == spec.iterations - 1:
                _dump(spec, comms, lines, host, pids, max(cursor.values()) + 100)
                if sink is not None:
                    for r, ls in lines.items():
                        written += len(ls)
                        sink(names[r], ls)
                        lines[r] = []
            continue
        for c in by_kind["tp"]:
            run(c, "all_reduce", spec.tp_bytes, gap)
        small = {r: rng.randrange(0, spec.jitter_us + 1) for r in range(world)}
        for c in by_kind["tp"]:
            run(c, "all_reduce", spec.tp_bytes, small)
        for c in by_kind["dp"]:
            run(c, "reduce_scatter", spec.dp_bytes, {})
        for c in by_kind["dp"]:
            run(c, "all_gather", spec.dp_bytes, {})
        for c in by_kind["pp"]:
            p2p(c, spec.p2p_bytes)
        run(by_kind["world"][0], "all_reduce", spec.world_bytes, {})
        if (it + 1) % spec.dump_every == 0 or it == spec.iterations - 1:
            _dump(spec, comms, lines, host, pids, max(cursor.values()) + 100)
            if sink is not None:
                for r, ls in lines.items():
                    written += len(ls)
                    sink(names[r], ls)
                    lines[r] = []

    files = {names[r]: lines[r] for r in range(world)}
    truth = _truth(spec, comms, truth_t, host, pids, caused, written + sum(len(v) for v in lines.values()))
    return files, truth


def _fsdp_iteration(spec: Spec, by_kind: dict[str, list[dict]], run: Callable, gap: dict[int, int],
                    rng: random.Random) -> None:
    """One step of TP + FSDP2: forward per layer a DP all-gather then a TP all-reduce, backward per layer a TP
    all-reduce then a DP reduce-scatter; the step's compute (``gap``, the slow rank's delay in it) comes before the
    first collective, a little compute (jitter) between the others."""
    first = True
    for phase in ("forward", "backward"):
        for _ in range(spec.layers):
            for kind, op, msg in ((("dp", "all_gather", spec.dp_bytes), ("tp", "all_reduce", spec.tp_bytes))
                                  if phase == "forward" else
                                  (("tp", "all_reduce", spec.tp_bytes), ("dp", "reduce_scatter", spec.dp_bytes))):
                small = gap if first else {r: rng.randrange(0, spec.jitter_us + 1) for r in gap}
                first = False
                for c in by_kind[kind]:
                    run(c, op, msg, small)


def _dump(spec: Spec, comms: list[dict], lines: dict[int, list[str]], host: list[str], pids: list[int],
          now: int) -> None:
    for r in lines:
        node = r // spec.gpus_per_node
        off = spec.clock_offsets_us.get(node, 0)
        for c in comms:
            if r not in c["done"]:
                continue
            header = {"id": c["id"], "comm_name": c["name"], "rank": c["ranks"].index(r), "n_ranks": len(c["ranks"]),
                      "nnodes": c["nnodes"]}
            meta = {"inspector_output_format_version": "v4.0", "git_rev": "5067397c", "rec_mechanism":
                    "nccl_profiler_interface", "dump_timestamp_us": now + off, "hostname": host[r], "pid": pids[r]}
            for op, sn, msg, a, e in c["done"][r]:
                lines[r].append(json.dumps(_record(spec, c, r, header, meta, op, sn, msg, a + off, e + off),
                                           separators=(",", ":")))
            c["done"][r] = []


def _record(spec: Spec, c: dict, r: int, header: dict, meta: dict, op: str, sn: int, msg: int, a: int,
            e: int) -> dict:
    n = len(c["ranks"])
    exec_us = e - a
    algbw = traffic(op, msg, n) / 1e9 / (exec_us / 1e6)
    p2p = op in ("send", "recv")
    pre = "p2p" if p2p else "coll"
    perf: dict = {pre: PLUGIN_OPS[op], f"{pre}_sn": sn}
    if p2p:
        peer = c["ranks"][1 - c["ranks"].index(r)]
        perf["p2p_peer"] = c["ranks"].index(peer)
    perf.update({f"{pre}_msg_size_bytes": msg, f"{pre}_exec_time_us": exec_us, f"{pre}_timing_source": "kernel_gpu",
                 f"{pre}_algobw_gbs": round(algbw, 6), f"{pre}_busbw_gbs": round(algbw * bus_factor(op, n), 6)})
    if spec.verbose:
        ch = range(spec.channels)
        perf["event_trace_sn"] = {f"{pre}_start_sn": 1, f"{pre}_stop_sn": 2, "kernel_events": [
            {"channel_id": i, "kernel_start_sn": 3 + 3 * i, "kernel_stop_sn": 5 + 3 * i, "kernel_record_sn": 4 + 3 * i}
            for i in ch]}
        # channel 0 starts at the arrival and stops at the end; the others a microsecond inside
        perf["event_trace_ts"] = {f"{pre}_start_ts": a - 12, f"{pre}_stop_ts": a - 9, "kernel_events": [
            {"channel_id": i, "kernel_start_ts": a + min(i, 1), "kernel_stop_ts": e - min(i, 1),
             "kernel_record_ts": e - min(i, 1)} for i in ch]}
    return {"header": header, "metadata": meta, f"{pre}_perf": perf}


def _truth(spec: Spec, comms: list[dict], truth_t: dict, host: list[str], pids: list[int], caused: dict[int, int],
           records: int) -> dict:
    out_comms = []
    for c in comms:
        n = len(c["ranks"])
        ops = [{"op": op, "msg_size_bytes": msg, "transfer_us": t, "busbw_gbs": implied_busbw(op, msg, n, t)}
               for (cid, op, msg), t in sorted(truth_t.items()) if cid == c["id"]]
        out_comms.append({"id": c["id"], "name": c["name"], "kind": c["kind"], "ranks": c["ranks"],
                          "nnodes": c["nnodes"], "intra_node": c["nnodes"] == 1, "ops": ops})
    slow = next((c for c in comms if c["kind"] == "dp" and c.get("rail") == spec.slow_link), None)
    return {
        "generator": "sample_traces/inspector_gen.py", "spec": {k: v for k, v in asdict(spec).items()},
        "world_size": spec.nodes * spec.gpus_per_node, "records": records,
        "processes": [{"rank": r, "hostname": host[r], "pid": pids[r]} for r in range(len(pids))],
        "slow_rank": spec.slow_rank, "caused_wait_us": {str(r): v for r, v in sorted(caused.items())},
        "slow_link": None if slow is None else {"id": slow["id"], "name": slow["name"], "ranks": slow["ranks"]},
        "communicators": out_comms,
    }


def write(spec: Spec, out: Path) -> dict:
    """The logs and ``ground_truth.json`` under ``out``, written dump by dump (memory bounded by one dump)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.log"):
        old.unlink()

    def sink(name: str, lines: list[str]) -> None:
        with open(out / name, "a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))

    _, truth = generate(spec, sink)
    (out / "ground_truth.json").write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")
    return truth


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--slow-rank", type=int)
    ap.add_argument("--slow-link", type=int, help="the rail (local GPU index) whose DP communicator is slow")
    ap.add_argument("--quiet", action="store_true", help="non-verbose logs (no event_trace_* timestamps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--schedule", choices=("tp_dp", "tp_fsdp"), default="tp_dp")
    ap.add_argument("--unnamed", action="store_true", help="every communicator \"unknown\" (no names given)")
    ap.add_argument("--small-p2p", type=int, default=0, help="bytes of a latency-bound send/recv ring per step")
    a = ap.parse_args(argv)
    spec = Spec(nodes=a.nodes, gpus_per_node=a.gpus, iterations=a.iterations, slow_rank=a.slow_rank,
                slow_link=a.slow_link, verbose=not a.quiet, seed=a.seed, clock_offsets_us={1: 137},
                schedule=a.schedule, comm_names=not a.unnamed, small_p2p_bytes=a.small_p2p,
                p2p_bytes=0 if a.schedule == "tp_fsdp" else Spec.p2p_bytes)
    t = write(spec, a.out)
    print(f"wrote {t['records']} records of {t['world_size']} ranks to {a.out}")


if __name__ == "__main__":
    main()
