"""Op tables: the What-if artifact's AR, SE and ST traces analyzed cold, and where the time goes.

    python -m benchmarks.optable_bench [--runs 5] [--only AR SE] [--no-stages]

Rows: ``commscope analyze <trace> --format json --no-cache`` in a fresh process (imports included), median
wall of ``--runs`` with the spread (min-max), CPU seconds of the process, peak RSS (``bench.measure``). The
load average is printed before and after: on the shared 2-core machine wall time follows the load, CPU
seconds are the steadier number. Then, in one process after a warm-up run, the CPU seconds of each stage
(the op-table reader, the loader's assembly, and the analysis stages it feeds), medians of the runs.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "sample_traces" / "whatif"
TARGETS = {"AR": 2.0, "SE": 3.0, "ST": None}  # seconds, cold (issue #29)

# (module, function) timed in-process; nested calls are counted in their caller too
STAGES = [
    ("analyzer.ingest.optable.reader", "read"),
    ("analyzer.ingest.loader", "assemble"),
    ("analyzer.metrics.overlap", "coverages"),
    ("analyzer.crossrank.match", "instances"),
    ("analyzer.metrics.waits", "per_row"),
    ("analyzer.metrics.blame", "root_cause"),
    ("analyzer.metrics.stragglers", "ranking"),
    ("analyzer.metrics.stragglers", "roots"),
    ("analyzer.metrics.dimensions", "per_rank"),
    ("analyzer.metrics.pipeline", "analyze"),
    ("analyzer.crossrank.graph", "build"),
    ("analyzer.metrics.critical_path", "critical_path"),
    ("analyzer.whatif.scenarios", "analyze"),
    ("analyzer.whatif.counterfactual", "analyze"),  # both models on op tables (commscope's, then the study's)
    ("analyzer.ingest.optable.deps", "dependencies"),
]


def mix(path: Path) -> str:
    """The table's op mix (the input beside its time): ops, ranks, steps, and shares of compute, p2p, collectives."""
    import polars as pl

    df = pl.read_parquet(path, columns=["rank", "step", "optype"]).with_columns(pl.col("optype").cast(pl.Utf8))
    p2p = df["optype"].str.contains("send|recv").mean()
    comp = df["optype"].str.contains("compute").mean()
    return (f"{df.height / 1e3:.0f} k ops, {df['rank'].n_unique()} ranks, {df['step'].n_unique()} steps: "
            f"{100 * comp:.0f}% fwd/bwd compute, {100 * p2p:.0f}% send/recv, {100 * (1 - comp - p2p):.0f}% other")


def cold_rows(names: list[str], runs: int) -> None:
    from benchmarks.bench import CPU_SECONDS, measure

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in names:
        path = TRACES / name / f"trace-{name}.parquet"
        walls, peaks = [], []
        for _ in range(runs):
            w, p = measure([sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json", "-o",
                            os.devnull, "--no-cache"], env)
            walls.append(w)
            peaks.append(p)
        cpu = statistics.median(CPU_SECONDS[-runs:])
        target = TARGETS.get(name)
        met = "met" if statistics.median(walls) <= (target or 0) else "MISSED"
        verdict = "" if target is None else f"  target <= {target:.0f} s: {met}"
        print(f"{name:3} cold  {statistics.median(walls):.2f} s ({min(walls):.2f}-{max(walls):.2f}), "
              f"CPU {cpu:.2f} s, peak {max(peaks):.0f} MB{verdict}  [{mix(path)}]", flush=True)


def stage_rows(names: list[str], runs: int) -> None:
    import importlib

    spent: dict[str, list[float]] = {}

    def timed(label, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent.setdefault(label, []).append(time.process_time() - t)
        return wrapper

    for mod, fn in STAGES:
        m = importlib.import_module(mod)
        setattr(m, fn, timed(f"{mod.removeprefix('analyzer.')}.{fn}", getattr(m, fn)))
    # callers that imported the function by name hold the unwrapped one: the loader's reader registry and the
    # analysis module bind modules, not functions, so the patches above are what they call
    from analyzer.analysis import analyze
    from analyzer.ingest.loader import LoadOptions, load
    from analyzer.report.json import to_dict

    for name in names:
        path = TRACES / name / f"trace-{name}.parquet"
        totals = []
        for i in range(runs + 1):
            spent.clear()
            t = time.process_time()
            to_dict(analyze(load([path], LoadOptions(jobs=1, cache=False))))
            if i:  # the first run imports
                totals.append(time.process_time() - t)
                for k, v in spent.items():
                    runs_of.setdefault((name, k), []).append(sum(v))
        total = statistics.median(totals)
        parts = sorted(((statistics.median(runs_of[(name, k)]), k) for _, k in
                        {(n, k) for n, k in runs_of if n == name}), reverse=True)
        print(f"{name:3} in-process CPU {total:.2f} s (load + analyze + JSON, imports excluded); stages:")
        for sec, k in parts:
            print(f"      {k:38} {sec:6.3f} s  {100 * sec / total:4.0f}%")


runs_of: dict[tuple[str, str], list[float]] = {}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", nargs="*", default=sorted(TARGETS))
    ap.add_argument("--no-stages", action="store_true")
    a = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    cold_rows(a.only, a.runs)
    if not a.no_stages:
        stage_rows(a.only, a.runs)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
