"""Hang triage at scale: ``commscope analyze DUMPS/`` on generated Flight Recorder dumps of 512 to 4,096 ranks.

    python -m benchmarks.flight_recorder [--ranks 512 4096] [--runs 3] [--scenario never_joined]

Each input is a generated hung job (``sample_traces/flight_recorder_gen.py``: tp 8 x dp, four healthy
steps, NCCL-format pickles with stacks and a pg_config that lists the whole world, as torch 2.13 writes),
written once into ``benchmarks/data/flight_recorder/`` (git-ignored). The CLI runs in a subprocess: median
wall time of ``--runs`` with its spread, CPU seconds (user + system) and peak memory of the process, as
``bench.measure`` takes them; the load average is printed beside (wall follows it on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from benchmarks import bench
from sample_traces.flight_recorder_gen import SCENARIOS, Job, write

DATA = Path(__file__).resolve().parent / "data" / "flight_recorder"


def workload(ranks: int, scenario: str) -> tuple[Path, int]:
    out = DATA / f"{scenario}_{ranks}"
    if not (out / "rank0.pkl").exists():
        write(Job(ranks, scenario, steps=4), out)
    files = list(out.iterdir())
    return out, sum(f.stat().st_size for f in files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scenario", choices=SCENARIOS, default="never_joined")
    args = ap.parse_args()
    print("| dumps | size | wall (median, min-max) | CPU s (median) | peak memory | load |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in args.ranks:
        path, size = workload(n, args.scenario)
        walls, peaks, cpus = [], [], []
        for _ in range(args.runs):
            w, p = bench.measure(bench.analyze_cmd(path), dict(os.environ))
            walls.append(w)
            peaks.append(p)
            cpus.append(bench.CPU_SECONDS[-1])
        print(f"| {n:,} | {size / 2**20:,.0f} MB | {statistics.median(walls):.2f} s ({min(walls):.2f}-{max(walls):.2f}) "
              f"| {statistics.median(cpus):.2f} | {max(peaks):,.0f} MB | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
