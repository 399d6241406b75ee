"""Run history: what ``history add`` adds to a 1,024-rank analysis, and how fast a trend of 1,000 runs renders.

    python -m benchmarks.history_bench [--runs 5] [--data /tmp/commscope-ranks] [--pg postgresql://...]

Rows (median of ``--runs`` with the min-max spread):
- add, in process: summary rows + source fingerprints + one store transaction, for the generated 1,024-rank
  x 5-step job (``benchmarks.ranks.generate``, --tp 8), into a fresh SQLite file (and PostgreSQL with --pg).
- add, the command: ``analyze DIR --format json`` against ``analyze DIR --format json --history STORE`` in
  subprocesses on a warm cache (the difference is what --history costs a user; the analysis itself
  varies by more than that on a shared machine, so the in-process row is the precise one).
- trend of 1,000 runs: a store of 1,000 runs, each the real summary of the hybrid_tp_dp sample (4 ranks,
  ~650 rows) with 1.5% noise (650 k metric rows), then ``history trend`` built and rendered in process
  (load + change points + text / Markdown / JSON / HTML), and the whole command in a subprocess.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]


def _stat(xs: list[float], cpu: list[float] | None = None) -> str:
    out = f"**{statistics.median(xs):.3f} s** ({min(xs):.3f}-{max(xs):.3f}), {len(xs)} runs"
    if cpu:
        out += f"; CPU {statistics.median(cpu):.3f} s ({min(cpu):.3f}-{max(cpu):.3f})"
    return out


CHILD_CPU: list[float] = []  # CPU seconds (user + sys) of each _wall command and the children it waited for


def _wall(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CHILD_CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall


def add_rows(data: Path, runs: int, pg: str | None) -> list[str]:
    from analyzer.analysis import analyze
    from analyzer.history.record import add
    from analyzer.history.summary import metric_rows
    from analyzer.ingest.loader import LoadOptions, load
    from benchmarks.ranks import generate

    path = generate(data / "r1024", 1024, 5)
    t = time.perf_counter()
    a = analyze(load([path], LoadOptions()))
    analysis_s = time.perf_counter() - t
    n_rows = metric_rows(a).height
    out = []
    tmp = Path(tempfile.mkdtemp(prefix="commscope-hist-bench-"))
    targets = [("SQLite file", lambda i: str(tmp / f"h{i}.sqlite"))]
    if pg:
        targets.append(("PostgreSQL", lambda i: pg))
    for name, target in targets:
        times, cpu = [], []
        for i in range(runs):
            t, c = time.perf_counter(), time.process_time()
            add(target(i), a, f"bench-{os.getpid()}-{time.time_ns()}")
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        out.append(f"| history add, 1,024 ranks x 5 steps ({n_rows:,} metric rows), {name}, in process "
                   f"(the analysis itself: {analysis_s:.1f} s) | {_stat(times, cpu)} | <= 1 s |")
    env_cmd = [sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json", "-o", os.devnull]
    _wall(env_cmd)  # warm the cache
    plain, hist, plain_cpu, hist_cpu = [], [], [], []
    for i in range(runs):
        plain.append(_wall(env_cmd))
        plain_cpu.append(CHILD_CPU[-1])
        hist.append(_wall([*env_cmd, "--history", str(tmp / f"cli{i}.sqlite")]))
        hist_cpu.append(CHILD_CPU[-1])
    diff = [h - p for h, p in zip(hist, plain)]
    diff_cpu = [h - p for h, p in zip(hist_cpu, plain_cpu)]
    out.append(f"| analyze 1,024 ranks (cached), without / with --history | {statistics.median(plain):.2f} s / "
               f"{statistics.median(hist):.2f} s (CPU {statistics.median(plain_cpu):.2f} / "
               f"{statistics.median(hist_cpu):.2f} s); difference per pair {_stat(diff, diff_cpu)} | <= 1 s |")
    return out


def trend_store(target: str, n: int) -> None:
    from analyzer.analysis import analyze
    from analyzer.history.store import Store
    from analyzer.history.summary import metric_rows
    from analyzer.ingest.loader import LoadOptions, load

    a = analyze(load([ROOT / "sample_traces" / "gpu_h200" / "hybrid_tp_dp"], LoadOptions()))
    base = metric_rows(a)
    rng = np.random.default_rng(0)
    with Store.open(target) as store:
        for i in range(n):
            noise = 1.0 + 0.015 * rng.standard_normal(base.height)
            rows = base.with_columns(pl.col("value") * pl.Series(noise))
            store.add_run(rows, a.source, run_id=f"run-{i:04d}", labels={"branch": "main"})


def trend_rows(n: int, runs: int) -> list[str]:
    from analyzer.history.record import trend
    from analyzer.report import trend_formats

    tmp = Path(tempfile.mkdtemp(prefix="commscope-trend-bench-"))
    target = str(tmp / "trend.sqlite")
    t = time.perf_counter()
    trend_store(target, n)
    fill = time.perf_counter() - t
    out = []
    for fmt in ("text", "markdown", "json", "html"):
        times, cpu = [], []
        for _ in range(runs):
            t, c = time.perf_counter(), time.process_time()
            tr = trend(target, [], None, {}, False)
            trend_formats.render(tr, fmt)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        out.append(f"| trend of {n:,} runs ({len(tr.series)} series), {fmt}, in process | {_stat(times, cpu)} "
                   "| <= 1 s |")
    cmd = [sys.executable, "-m", "analyzer.cli", "history", "trend", "--store", target]
    times = [_wall(cmd) for _ in range(runs)]
    cpu = CHILD_CPU[-runs:]
    out.append(f"| `commscope history trend` of {n:,} runs, text, the whole command (Python, imports: ruptures "
               f"brings scipy.stats) | {_stat(times, cpu)} | |")
    print(f"(filled {n} runs in {fill:.1f} s: {fill / n * 1e3:.1f} ms a run)", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "commscope-ranks")
    ap.add_argument("--pg", metavar="URL", help="Also time adds into this PostgreSQL database.")
    ap.add_argument("--trend-runs", type=int, default=1000)
    ap.add_argument("--skip-add", action="store_true")
    args = ap.parse_args()
    rows = ["| what | median (min-max) | target |", "|---|---:|---:|"]
    if not args.skip_add:
        rows += add_rows(args.data, args.runs, args.pg)
    rows += trend_rows(args.trend_runs, args.runs)
    print(f"load average {os.getloadavg()[0]:.1f} (wall time on a shared machine follows the load; CPU is the "
          "process's own)")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
