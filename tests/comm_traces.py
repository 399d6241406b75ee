"""Kineto traces of communication that is not NCCL, written by the project's own writer
(``sample_traces/kineto_writer.kineto_text``): GPU work with its real kernel names, each launched from the host
(a runtime call sharing its correlation), optionally inside a host op (a catalogue launcher such as
``symm_mem::multimem_all_reduce_``), so every reader path sees what a real profile holds.

Times are ns on the rank's clock, whole microseconds (what brute-force bitmaps in the tests count).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sample_traces.job import Scenario, Workload, _Rank
from sample_traces.kineto_writer import kineto_text
from sample_traces.model import Event

COMPUTE_STREAM = 7


@dataclass
class Gpu:
    """One GPU activity: a kernel, or a copy (``cat="gpu_memcpy"``, ``nbytes``)."""

    name: str
    stream: int
    start: int
    dur: int
    cat: str = "kernel"
    nbytes: int | None = None


@dataclass
class Call:
    """A host op (cpu_op) that launches ``work`` from inside it, on the main thread."""

    name: str
    work: list[Gpu] = field(default_factory=list)


def _host_events(rk: _Rank, items: list[Gpu | Call], corr0: int = 5000) -> list[Event]:
    """Launches in GPU start order, each 20 us before its work; a Call spans its launches."""
    out: list[Event] = []
    corr = corr0
    flat: list[tuple[Gpu, str | None]] = []
    for it in items:
        if isinstance(it, Call):
            flat += [(g, it.name) for g in it.work]
        else:
            flat.append((it, None))
    t_host = min(g.start for g, _ in flat) - 60_000
    calls: dict[int, list[Event]] = {}
    for it in items:
        work = it.work if isinstance(it, Call) else [it]
        launches = []
        for g in work:
            corr += 2
            t_host = max(t_host + 3_000, g.start - 40_000)
            runtime = "cudaMemcpyAsync" if g.cat == "gpu_memcpy" else "cudaLaunchKernel"
            launches.append(Event("X", "cuda_runtime", runtime, rk.pid, rk.main_tid, t_host, 1_000,
                                  {"correlation": corr, "cbid": 211}))
            args = {"device": rk.device, "stream": g.stream, "correlation": corr}
            if g.nbytes is not None:
                args["bytes"] = g.nbytes
                args["memory bandwidth (GB/s)"] = g.nbytes / g.dur
            out.append(Event("X", g.cat, g.name, rk.device, g.stream, g.start, g.dur, args))
        out += launches
        if isinstance(it, Call) and launches:
            lo = launches[0].ts - 1_000
            hi = launches[-1].ts + launches[-1].dur + 1_000
            calls[id(it)] = [Event("X", "cpu_op", it.name, rk.pid, rk.main_tid, lo, hi - lo, {"Sequence number": 1})]
            out += calls[id(it)]
    return out


def write(out: Path, ranks: dict[int, list[Gpu | Call]], world: int | None = None, gzip: bool = False) -> list[Path]:
    """One Kineto file per rank (``rank<N>.pt.trace.json``); ``world`` the declared world size."""
    n = max(ranks) + 1
    sc = Scenario(ranks=world or n, distributed_info=True)
    out.mkdir(parents=True, exist_ok=True)
    events = {r: _host_events(_Rank(sc, r), items) for r, items in ranks.items()}
    wl = Workload(scenario=sc, events=events, truth=None)  # type: ignore[arg-type]
    paths = []
    for r in sorted(ranks):
        p = out / f"rank{r}.pt.trace.json"
        p.write_text(kineto_text(wl, r))
        paths.append(p)
    return paths


def union_us(intervals: list[tuple[int, int]], lo: int, hi: int) -> np.ndarray:
    """Brute force: a boolean per microsecond of [lo, hi) covered by any interval (start, end) in ns."""
    m = np.zeros((hi - lo) // 1000, dtype=bool)
    for s, e in intervals:
        m[(s - lo) // 1000:(e - lo) // 1000] = True
    return m


def flat(items: list[Gpu | Call]) -> list[Gpu]:
    return [g for it in items for g in (it.work if isinstance(it, Call) else [it])]
