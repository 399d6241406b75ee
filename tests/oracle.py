"""Brute-force reference numbers from a Kineto JSON file, independent of ``analyzer``.

Deliberately simple and different from the analyzer's interval algebra: timestamps are parsed exactly
(``parse_float=Decimal``, so float microseconds become exact integer nanoseconds) and lengths come from
one sweep over sorted boundary points with per-class active counters (no cumulative-max union).
Definitions follow DESIGN.md: only ``kernel`` events are compute or comm (comm = name contains
nccl/rccl, case-insensitive, unless the caller passes another rule); memcpy/memset are busy but neither.
Very old traces capitalise the categories (``Kernel``, ``Memcpy``, ``Memset``). :func:`nsys_events`
reads the same intervals from an Nsight Systems SQLite export with plain SQL.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_OLD_CATS = {"memcpy": "gpu_memcpy", "memset": "gpu_memset"}  # lower-cased capitalised categories
_COMM = re.compile(r"nccl|rccl", re.IGNORECASE)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def load(path: str | Path) -> dict:
    """The whole trace, with every float kept as an exact Decimal."""
    p = Path(path)
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)


def to_ns(us: int | Decimal) -> int:
    """Microseconds (int or exact Decimal) -> integer nanoseconds; refuses sub-ns values."""
    ns = Decimal(us) * 1000
    if ns != ns.to_integral_value():
        raise ValueError(f"{us} us is not a whole number of ns")
    return int(ns)


@dataclass(frozen=True)
class Interval:
    start_ns: int
    end_ns: int
    cat: str
    name: str
    stream: int | None
    args: dict
    comm_re: re.Pattern = _COMM

    @property
    def kind(self) -> str:
        """compute | comm | memcpy | memset."""
        if self.cat == "kernel":
            return "comm" if self.comm_re.search(self.name) else "compute"
        return self.cat.removeprefix("gpu_")


@dataclass(frozen=True)
class Breakdown:
    compute_ns: int
    comm_ns: int
    overlapped_ns: int
    exposed_ns: int
    busy_ns: int
    span_ns: int
    idle_ns: int
    compute_only_ns: int = 0  # compute and no comm
    memcpy_ns: int = 0  # memcpy/memset and neither compute nor comm


def gpu_events(trace: dict, comm: re.Pattern = _COMM) -> list[Interval]:
    """All kernel / memcpy / memset events, in file order."""
    out = []
    for e in trace.get("traceEvents", []):
        cat = str(e.get("cat", "")).lower()
        cat = _OLD_CATS.get(cat, cat)
        if e.get("ph") == "X" and cat in GPU_CATS:
            start = to_ns(e["ts"])
            args = e.get("args") or {}
            out.append(Interval(start, start + to_ns(e["dur"]), cat, e["name"], args.get("stream"), args, comm))
    return out


def nsys_events(path: str | Path, comm: re.Pattern = _COMM) -> dict[int, list[Interval]]:
    """Kernel / memcpy / memset intervals of an Nsight Systems SQLite export, per CUDA device."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        names = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
        out: dict[int, list[Interval]] = {}
        sources = [("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "gpu_memcpy"),
                   ("CUPTI_ACTIVITY_KIND_MEMSET", "gpu_memset")]
        for table, cat in sources:
            if table not in tables:
                continue
            cols = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
            name = "demangledName" if cat == "kernel" and "demangledName" in cols else "NULL"
            rows = con.execute(f"SELECT start, end, deviceId, streamId, {name} FROM {table}")
            for start, end, dev, stream, name_id in rows:
                label = str(names.get(name_id, name_id)) if cat == "kernel" else cat
                out.setdefault(int(dev), []).append(Interval(int(start), int(end), cat, label, stream, {}, comm))
        return dict(sorted(out.items()))
    finally:
        con.close()


def comm_kernels(trace: dict) -> list[Interval]:
    """Communication kernels sorted by start."""
    return sorted((i for i in gpu_events(trace) if i.kind == "comm"), key=lambda i: (i.start_ns, i.end_ns))


def step_windows(trace: dict) -> dict[int, tuple[int, int]]:
    """ProfilerStep#N windows: GPU-side gpu_user_annotation when present, else the CPU user_annotation."""
    found: dict[str, dict[int, tuple[int, int]]] = {"gpu_user_annotation": {}, "user_annotation": {}}
    for e in trace.get("traceEvents", []):
        m = _STEP.match(str(e.get("name", "")))
        if m and e.get("ph") == "X" and e.get("cat") in found:
            start = to_ns(e["ts"])
            found[e["cat"]][int(m.group(1))] = (start, start + to_ns(e["dur"]))
    return dict(sorted((found["gpu_user_annotation"] or found["user_annotation"]).items()))


def common_step_windows(files: dict[int, str | Path], offsets_ns: dict[int, int] | None = None
                        ) -> dict[int, dict[int, tuple[int, int]]]:
    """Step N of a synchronous job on every rank (analyzer/crossrank/step_sync.py), by brute force: on the true clock
    (file time minus the rank's offset), from the earliest start of any rank's ProfilerStep#N annotation to the
    earliest start of step N+1 (the last step: the latest end); back on each rank's file clock."""
    own = {r: step_windows(load(p)) for r, p in files.items()}
    off = {r: (offsets_ns or {}).get(r, 0) for r in own}
    steps = sorted({n for w in own.values() for n in w})
    start = {n: min(w[n][0] - off[r] for r, w in own.items() if n in w) for n in steps}
    last = max(w[steps[-1]][1] - off[r] for r, w in own.items() if steps[-1] in w)
    end = {n: start[steps[i + 1]] if i + 1 < len(steps) else last for i, n in enumerate(steps)}
    return {r: {n: (start[n] + off[r], end[n] + off[r]) for n in w} for r, w in own.items()}


def breakdown(events: list[Interval], window: tuple[int, int] | None = None) -> Breakdown:
    """Lengths by sweeping boundary points; ``window`` clips, else the span is first GPU start..last end."""
    if window is None:
        if not events:
            return Breakdown(0, 0, 0, 0, 0, 0, 0, 0, 0)
        window = (min(i.start_ns for i in events), max(i.end_ns for i in events))
    lo, hi = window
    points: list[tuple[int, int, str]] = []
    for i in events:
        s, e = max(i.start_ns, lo), min(i.end_ns, hi)
        if e > s:
            points += [(s, +1, i.kind), (e, -1, i.kind)]
    points.sort()
    active = {"compute": 0, "comm": 0, "memcpy": 0, "memset": 0}
    totals = {"compute": 0, "comm": 0, "overlapped": 0, "exposed": 0, "busy": 0, "compute_only": 0, "memcpy": 0}
    prev = lo
    for t, delta, kind in points:
        length = t - prev
        if length:
            comp, comm = active["compute"] > 0, active["comm"] > 0
            totals["compute"] += length * comp
            totals["comm"] += length * comm
            totals["overlapped"] += length * (comp and comm)
            totals["exposed"] += length * (comm and not comp)
            busy = sum(active.values()) > 0
            totals["busy"] += length * busy
            totals["compute_only"] += length * (comp and not comm)
            totals["memcpy"] += length * (busy and not comp and not comm)
        active[kind] += delta
        prev = t
    span = hi - lo
    return Breakdown(
        totals["compute"],
        totals["comm"],
        totals["overlapped"],
        totals["exposed"],
        totals["busy"],
        span,
        span - totals["busy"],
        totals["compute_only"],
        totals["memcpy"],
    )


@dataclass(frozen=True)
class RankOracle:
    rank: int | None
    whole: Breakdown
    steps: dict[int, Breakdown]
    comm: list[Interval]


def rank_of(trace: dict, path: str | Path) -> int | None:
    info = trace.get("distributedInfo") or {}
    if "rank" in info:
        return int(info["rank"])
    m = re.search(r"rank[-_]?(\d+)", Path(path).name)
    return int(m.group(1)) if m else None


def analyze_file(path: str | Path, comm: re.Pattern = _COMM) -> RankOracle:
    """Whole-window and per-step breakdowns plus the comm kernels of one rank's file."""
    trace = load(path)
    events = gpu_events(trace, comm)
    steps = {n: breakdown(events, w) for n, w in step_windows(trace).items()}
    kernels = sorted((i for i in events if i.kind == "comm"), key=lambda i: (i.start_ns, i.end_ns))
    return RankOracle(rank_of(trace, path), breakdown(events), steps, kernels)
