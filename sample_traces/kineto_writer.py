"""Kineto JSON writer: a built workload's events as one PyTorch profiler trace file per rank."""

from __future__ import annotations

import gzip as gzip_lib
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from .job import _Rank
from .model import BASE_TIME_NS, Event

if TYPE_CHECKING:
    from .job import Scenario, Workload

_H200 = {"name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "computeMinor": 0,
         "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
         "sharedMemPerBlock": 49152, "numSms": 132}  # fmt: skip


def _fmt(ns: int, style: str) -> str:
    """Exact text for a ns value: '123.456' us (float style) or '123' us (int style, must be whole us)."""
    if style == "int":
        if ns % 1000:
            raise ValueError(f"{ns} ns is not a whole microsecond")
        return str(ns // 1000)
    sign = "-" if ns < 0 else ""
    a = abs(ns)
    return f"{sign}{a // 1000}.{a % 1000:03d}"


def _event_text(e: Event, offset: int, style: str) -> str:
    parts = [f'"ph": "{e.ph}"']
    if e.ph in ("s", "f"):
        parts.append(f'"id": {e.id}')
    parts += [
        f'"cat": {json.dumps(e.cat)}',
        f'"name": {json.dumps(e.name)}',
        f'"pid": {json.dumps(e.pid)}',
        f'"tid": {json.dumps(e.tid)}',
        f'"ts": {_fmt(e.ts + offset, style)}',
    ]
    if e.ph == "X":
        parts.append(f'"dur": {_fmt(e.dur, style)}')
    if e.ph == "f":
        parts.append('"bp": "e"')
    if e.args is not None:
        parts.append(f'"args": {json.dumps(e.args)}')
    return "{" + ", ".join(parts) + "}"


def _meta_events(sc: Scenario, rank: int, events: list[Event]) -> list[Event]:
    """``M`` events naming the host process, every local GPU, used streams and threads (as Kineto does)."""
    rk = _Rank(sc, rank)
    ts = min(e.ts for e in events)
    out: list[Event] = []
    for pid, label, sort in [(rk.pid, "CPU", rk.pid)] + [(d, f"GPU {d}", 5_000_000 + d) for d in range(sc.gpus_per_host)]:
        out += [
            Event("M", "", "process_name", pid, 0, ts, args={"name": "python3"}),
            Event("M", "", "process_labels", pid, 0, ts, args={"labels": label}),
            Event("M", "", "process_sort_index", pid, 0, ts, args={"sort_index": sort}),
        ]
    streams = sorted({e.tid for e in events if e.pid == rk.device and isinstance(e.tid, int)})
    for s in streams:
        out += [
            Event("M", "", "thread_name", rk.device, s, ts, args={"name": f"stream {s} "}),
            Event("M", "", "thread_sort_index", rk.device, s, ts, args={"sort_index": s}),
        ]
    for tid, name in ((rk.main_tid, "python3"), (rk.comm_tid, "pt_autograd_0")):
        out += [
            Event("M", "", "thread_name", rk.pid, tid, ts, args={"name": f"thread {tid} ({name})"}),
            Event("M", "", "thread_sort_index", rk.pid, tid, ts, args={"sort_index": tid}),
        ]
    return out


def _meta_text(e: Event, offset: int, style: str) -> str:
    return (
        f'{{"name": {json.dumps(e.name)}, "ph": "M", "ts": {_fmt(e.ts + offset, style)}, '
        f'"pid": {json.dumps(e.pid)}, "tid": {e.tid}, "args": {json.dumps(e.args)}}}'
    )


def kineto_text(wl: Workload, rank: int) -> str:
    """The whole Kineto JSON document of one rank."""
    sc = wl.scenario
    style = sc.ts_style
    off = sc.clock_offsets_ns.get(rank, 0)
    events = wl.events[rank]
    dev = rank % sc.gpus_per_host
    cpu = sorted((e for e in events if e.pid != dev), key=lambda e: (e.ts, -e.dur))
    gpu = sorted(
        (e for e in events if e.pid == dev and not e.name.startswith("ProfilerStep#")),
        key=lambda e: (e.ts, -e.dur),
    )
    # Real files list GPU-side ProfilerStep annotations out of order; readers must not rely on it.
    gsteps = [e for e in events if e.pid == dev and e.name.startswith("ProfilerStep#")]
    gsteps = gsteps[1:] + gsteps[:1]
    lines = [_event_text(e, off, style) for e in cpu + gpu + gsteps]
    lines += [_meta_text(e, off, style) for e in _meta_events(sc, rank, events)]
    t0, t1 = min(e.ts for e in events), max(e.ts + e.dur for e in events)
    span = Event(
        "X",
        "Trace",
        "PyTorch Profiler (0)",
        "Spans",
        "PyTorch Profiler",
        t0 - 100_000,
        t1 - t0 + 200_000,
        {"Op count": 0},
    )
    lines.append(_event_text(span, off, style))
    lines.append(
        f'{{"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", '
        f'"tid": "Trace PyTorch Profiler", "ts": {_fmt(t0 - 100_000 + off, style)}}}'
    )
    head = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": d, **_H200} for d in range(sc.gpus_per_host)],
        "trace_id": f"{0x87F08225 + rank:08X}0A1246A883DC1BA769420D9F",
        "record_shapes": 1,
    }
    if sc.distributed_info:
        head["distributedInfo"] = {
            "backend": "nccl",
            "rank": rank,
            "world_size": sc.ranks,
            "pg_count": len(sc.process_groups),
            # Each rank lists only the groups it belongs to (pg_count counts them all), like real traces.
            "pg_config": [
                {
                    "pg_name": pg.name,
                    "pg_desc": pg.desc,
                    "backend_config": "cuda:nccl",
                    "pg_size": len(pg.ranks),
                    "ranks": list(pg.ranks),
                }
                for pg in sc.process_groups
                if rank in pg.ranks
            ],
            "nccl_version": "2.28.9",
        }
    head.update({"cuda_driver_version": 13000, "cuda_runtime_version": 13000, "cupti_version": 130001})
    head["displayTimeUnit"] = "ms"
    if style == "float":
        head["baseTimeNanoseconds"] = BASE_TIME_NS
    body = json.dumps(head)[:-1]
    return body + ', "traceEvents": [\n' + ",\n".join(lines) + f'\n], "traceName": "/tmp/rank{rank}.json"}}\n'


def write_kineto(workload: Workload, out_dir: str | Path, gzip: bool = False) -> list[Path]:
    """Write ``rank{r}.pt.trace.json[.gz]`` for every rank; returns the paths in rank order."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in sorted(workload.events):
        data = kineto_text(workload, r).encode()
        path = out / f"rank{r}.pt.trace.json{'.gz' if gzip else ''}"
        if gzip:
            with open(path, "wb") as fh, gzip_lib.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
                gz.write(data)  # mtime=0: identical bytes for identical scenarios
        else:
            path.write_bytes(data)
        paths.append(path)
    return paths


def write_truth(workload: Workload, path: str | Path) -> Path:
    """The scenario and its exact answers as JSON (next to the traces, like the real ground_truth.json)."""
    doc = {
        "generator": "sample_traces.generate",
        "scenario": asdict(workload.scenario),
        "truth": workload.truth.to_dict(),
        "offsets_us": workload.truth.offsets_us(),
    }
    p = Path(path)
    p.write_text(json.dumps(doc, indent=1) + "\n")
    return p
