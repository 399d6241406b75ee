"""Many small ranks: cold and cached ``analyze`` at 1,024, 4,096 and 16,384 ranks, and on a Dask cluster.

    python -m benchmarks.ranks [--runs 3] [--skip-4k] [--skip-16k] [--skip-dask] [--data /tmp/commscope-ranks]

Inputs come from the synthetic generator (``--tp 8``; 1,024 ranks x 5 steps, 4,096 and 16,384 ranks x 2 steps),
written once under ``--data`` by a pool of forked writers (the per-rank files are independent once the
job is built) and reused. Each row is ``python -m analyzer.cli analyze DIR --format json`` in a
subprocess: cold (empty ``COMMSCOPE_CACHE_DIR``) and cached, the median wall time of ``--runs`` with
the min-max spread, the CPU seconds (user + system, whole process tree: median and min-max) and the
peak memory (largest sum of RSS over the process tree, workers included; ``benchmarks.bench.measure``).
Each row also gives the 1-minute load average after it: on a shared machine wall time follows the
load. The Dask row starts a ``distributed.LocalCluster`` of worker processes here and passes
``--scheduler`` (cold cache: the workers parse). The event mix of each input is printed beside it.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import msgspec

from benchmarks import bench
from benchmarks.bench import analyze_cmd, measure

_WORKLOAD = None  # the built job, shared with forked writers


def _write(ranks: list[int], out: str) -> None:
    from sample_traces.kineto_writer import kineto_text

    for r in ranks:
        (Path(out) / f"rank{r}.pt.trace.json").write_bytes(kineto_text(_WORKLOAD, r).encode())


def generate(out: Path, ranks: int, steps: int, tp: int = 8, jobs: int | None = None) -> Path:
    """Write ``ranks`` generated rank files into ``out`` unless they are already there."""
    global _WORKLOAD
    if out.is_dir() and len(list(out.glob("rank*.pt.trace.json"))) == ranks:
        return out
    from sample_traces.generate import Scenario, build

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t = time.perf_counter()
    _WORKLOAD = build(Scenario(ranks=ranks, steps=steps, tp=tp))
    jobs = jobs or os.cpu_count() or 1
    chunks = [list(range(i, ranks, jobs)) for i in range(jobs)]
    with mp.get_context("fork").Pool(jobs) as pool:
        pool.starmap(_write, [(c, str(out)) for c in chunks])
    _WORKLOAD = None
    print(f"generated {ranks} ranks in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return out


class _Ev(msgspec.Struct):
    cat: str = ""


class _Doc(msgspec.Struct):
    traceEvents: list[_Ev]  # noqa: N815


def event_mix(path: Path, sample: int = 16) -> str:
    """Share of each event category over a sample of the rank files, and the input's size."""
    files = sorted(path.glob("rank*.pt.trace.json"))
    dec = msgspec.json.Decoder(_Doc)
    counts: Counter[str] = Counter()
    for f in files[:: max(1, len(files) // sample)]:
        counts.update(e.cat or "(none)" for e in dec.decode(f.read_bytes()).traceEvents)
    total = sum(counts.values()) or 1
    mb = sum(f.stat().st_size for f in files) / 2**20
    mix = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in counts.most_common(5))
    return f"{len(files)} ranks, {mb:,.0f} MB; {mix}"


def _stats(walls: list[float], peaks: list[float], cpus: list[float]) -> dict:
    return {"median": statistics.median(walls), "lo": min(walls), "hi": max(walls), "peak": max(peaks),
            "n": len(walls), "cpu": statistics.median(cpus), "cpu_lo": min(cpus), "cpu_hi": max(cpus),
            "load": os.getloadavg()[0]}


def timed(path: Path, n: int, cached_runs: int | None = None, extra: tuple[str, ...] = (),
          cache: Path | None = None) -> tuple[dict, dict | None]:
    """``n`` cold runs (each with an empty cache), then ``cached_runs`` (default ``n``) on the cache the
    last cold run filled; (cold, cached) statistics."""
    cache = cache or Path(tempfile.mkdtemp(prefix="commscope-ranks-"))
    env = {**os.environ, "COMMSCOPE_CACHE_DIR": str(cache)}
    cold: tuple[list[float], list[float], list[float]] = ([], [], [])
    warm: tuple[list[float], list[float], list[float]] = ([], [], [])
    try:
        for _ in range(n):
            shutil.rmtree(cache, ignore_errors=True)
            w, p = measure(analyze_cmd(path, *extra), env)
            cold[0].append(w)
            cold[1].append(p)
            cold[2].append(bench.CPU_SECONDS[-1])
        for _ in range(n if cached_runs is None else cached_runs):
            w, p = measure(analyze_cmd(path, *extra), env)
            warm[0].append(w)
            warm[1].append(p)
            warm[2].append(bench.CPU_SECONDS[-1])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return _stats(*cold), (_stats(*warm) if warm[0] else None)


def dask_row(path: Path, n: int, workers: int) -> dict:
    from distributed import LocalCluster

    root = str(Path(__file__).resolve().parents[1])
    cache = Path(tempfile.mkdtemp(prefix="commscope-ranks-dask-"))
    # the workers import this checkout and write where the CLI reads (a shared cache dir, as on a cluster)
    os.environ.update(PYTHONPATH=root, COMMSCOPE_CACHE_DIR=str(cache))
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        return timed(path, n, cached_runs=0, extra=("--scheduler", cluster.scheduler_address), cache=cache)[0]


def _row(name: str, mix: str, r: dict) -> str:
    spread = f"{r['lo']:.1f}-{r['hi']:.1f}" if r["n"] > 1 else "1 run"
    cpu = f"{r['cpu']:.1f} s ({r['cpu_lo']:.1f}-{r['cpu_hi']:.1f})" if r["n"] > 1 else f"{r['cpu']:.1f} s"
    return f"| {name} | {r['median']:.1f} s ({spread}) | {cpu} | {r['peak']:,.0f} MB | {r['load']:.1f} | {mix} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "commscope-ranks")
    ap.add_argument("--skip-4k", action="store_true")
    ap.add_argument("--skip-16k", action="store_true")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--dask-workers", type=int, default=2)
    args = ap.parse_args()
    rows = ["| input | wall (median, min-max) | CPU (median, min-max) | peak memory | load | event mix |",
            "|---|---|---|---|---|---|"]
    small = generate(args.data / "r1024", 1024, steps=5)
    mix = event_mix(small)
    cold, warm = timed(small, args.runs)
    rows.append(_row("1,024 ranks, cold", mix, cold))
    rows.append(_row("1,024 ranks, cached", mix, warm))
    if not args.skip_dask:
        rows.append(_row(f"1,024 ranks, Dask LocalCluster ({args.dask_workers} worker processes), cold", mix,
                         dask_row(small, args.runs, args.dask_workers)))
    if not args.skip_4k:
        mid = generate(args.data / "r4096", 4096, steps=2)
        mix = event_mix(mid)
        cold, warm = timed(mid, args.runs)
        rows.append(_row("4,096 ranks, cold", mix, cold))
        rows.append(_row("4,096 ranks, cached", mix, warm))
    if not args.skip_16k:
        big = generate(args.data / "r16384", 16384, steps=2)
        mix = event_mix(big)
        cold, warm = timed(big, 1)
        rows.append(_row("16,384 ranks, cold", mix, cold))
        rows.append(_row("16,384 ranks, cached", mix, warm))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
