"""``commscope export`` at 16 and 256 ranks: time, peak memory, and what the writing itself adds.

    python -m benchmarks.export_bench [--ranks 16,256] [--steps 5] [--tp 8] [--runs 1]

Workloads come from ``sample_traces.generate`` (same per-rank content at every rank count) into
benchmarks/data/ (git-ignored). Each row runs ``python -m analyzer.cli export`` from the cache (filled
by one run first) and, beside it, ``analyze`` on the same input: wall time is the median of ``--runs``,
peak memory the largest sum of RSS over the process tree (``bench.measure``). The last column is the
write phase alone, measured in one process: the RSS peak while ``write_trace`` runs (sampled every
5 ms) above the RSS once the analysis is built. That is the number that must not grow with ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench import DATA, ROOT, measure

_PHASE = """
import json, sys, threading, time
import psutil
from pathlib import Path
from analyzer.analysis import analyze
from analyzer.export import Selection, write_trace
from analyzer.ingest.loader import LoadOptions, load
a = analyze(load([Path(sys.argv[1])], LoadOptions()))
proc = psutil.Process()
base = proc.memory_info().rss
peak = [base]
stop = threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], proc.memory_info().rss)
        time.sleep(0.005)
t = threading.Thread(target=sample); t.start()
t0 = time.perf_counter()
with open(sys.argv[2], "wb") as f:
    counts = write_trace(a, Selection(), f, sys.argv[3])
wall = time.perf_counter() - t0
stop.set(); t.join()
print(json.dumps({"write_s": wall, "analysis_mb": base / 2**20, "write_extra_mb": (peak[0] - base) / 2**20,
                  **counts}))
"""


def workload(ranks: int, steps: int, tp: int) -> Path:
    out = DATA / f"export_r{ranks}_s{steps}_tp{tp}"
    if len(list(out.glob("rank*.json"))) != ranks:
        subprocess.run([sys.executable, "-m", "sample_traces.generate", str(out), "--ranks", str(ranks),
                        "--steps", str(steps), "--tp", str(tp), "--no-truth"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    return out


def row(path: Path, runs: int, fmt: str) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="commscope-bench-"))
    env = {**os.environ, "COMMSCOPE_CACHE_DIR": str(cache)}
    out = Path(tempfile.mkdtemp(prefix="commscope-export-")) / f"job.{fmt}"
    export = [sys.executable, "-m", "analyzer.cli", "export", str(path), "-o", str(out), "--format", fmt]
    analyze = [sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json", "-o", os.devnull]
    measure(export, env)  # fill the cache
    ex = [measure(export, env) for _ in range(runs)]
    an = [measure(analyze, env) for _ in range(runs)]
    phase = subprocess.run([sys.executable, "-c", _PHASE, str(path), str(out), fmt], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=True)
    ph = json.loads(phase.stdout.strip().splitlines()[-1])
    return {
        "export_s": statistics.median(w for w, _ in ex), "export_peak_mb": max(m for _, m in ex),
        "analyze_s": statistics.median(w for w, _ in an), "analyze_peak_mb": max(m for _, m in an),
        "trace_mb": out.stat().st_size / 1e6, **ph,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="16,256")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--format", default="pftrace", choices=("pftrace", "json"))
    args = ap.parse_args()
    print(f"\ncpu cores: {os.cpu_count()}, runs: {args.runs} (median), from the cache, format {args.format}\n")
    print(f"| ranks (generated, --steps {args.steps} --tp {args.tp}) | export | analyze alone | trace "
          "| write phase alone |")
    print("|---|---|---|---|---|")
    for n in (int(x) for x in args.ranks.split(",")):
        r = row(workload(n, args.steps, args.tp), args.runs, args.format)
        print(f"| {n} | {r['export_s']:.1f} s, peak {r['export_peak_mb']:.0f} MB | {r['analyze_s']:.1f} s, "
              f"peak {r['analyze_peak_mb']:.0f} MB | {r['trace_mb']:.1f} MB, {r['slices']} slices | "
              f"{r['write_s']:.1f} s, +{r['write_extra_mb']:.1f} MB over the analysis ({r['analysis_mb']:.0f} MB) |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
