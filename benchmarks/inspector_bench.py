"""Streaming row: NCCL Inspector logs of a 64-rank job through ``commscope analyze``.

    python -m benchmarks.inspector_bench [--nodes 8 --gpus 8] [--records-per-rank 20000] [--verbose]
        [--runs 3] [--jobs 1 2] [--dir DIR] [--mode stream memory]

The logs are generated once (``sample_traces/inspector_gen.py``, written dump by dump) under a temporary
folder, or ``--dir`` (kept for reuse), never in the repository. Each run is the real command
(``python -m analyzer.cli analyze DIR --format json -o /dev/null --no-cache -j J``) in a subprocess, timed
like ``benchmarks/bench.py`` (``measure``): wall time, CPU seconds of the process tree (workers included)
and peak memory as the largest sum of RSS over the tree. Records/s is records / wall; records per CPU
second is the steadier number on a shared machine (the load average is printed). Targets: >= 1 M
records/s, <= 1 GB.

``--mode``: ``stream`` forces the streamed summary (``ingest/inspector_stream.py``, memory flat in the records),
``memory`` the whole-table one, ``auto`` what the size picks (streamed from 256 MB of logs on).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.bench import CPU_SECONDS, measure
from sample_traces.inspector_gen import Spec, write

ROOT = Path(__file__).resolve().parents[1]
PER_ITERATION = 5  # records per rank and iteration in the generator (2 TP, 2 DP, 1 world; +1 on 2 ranks for p2p)

def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--records-per-rank", type=int, default=20_000)
    ap.add_argument("--verbose", action="store_true", help="with kernel timestamps (NCCL_INSPECTOR_DUMP_VERBOSE=1)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--mode", nargs="+", default=["stream"], choices=["stream", "memory", "auto"])
    ap.add_argument("--dir", type=Path, help="where the logs go (kept; reused when its ground truth matches)")
    a = ap.parse_args(argv)
    folder = a.dir or Path(tempfile.mkdtemp(prefix="commscope-inspector-bench-"))
    spec = Spec(nodes=a.nodes, gpus_per_node=a.gpus, iterations=max(1, a.records_per_rank // PER_ITERATION),
                verbose=a.verbose, slow_rank=5, slow_link=2, dump_every=50)
    try:
        truth_file = folder / "ground_truth.json"

        if truth_file.is_file() and json.loads(truth_file.read_text())["spec"] == json.loads(json.dumps(
                {k: v for k, v in vars(spec).items()})):
            truth = json.loads(truth_file.read_text())
        else:
            truth = write(spec, folder)
        size = sum(f.stat().st_size for f in folder.glob("*.log"))
        n = truth["records"]
        print(f"input: {truth['world_size']} ranks, {n:,} records ({'verbose' if a.verbose else 'non-verbose'}), "
              f"{size / 2**20:,.0f} MB in {len(list(folder.glob('*.log')))} files; load {os.getloadavg()[0]:.1f}")
        force = {"stream": "0", "memory": str(1 << 62), "auto": None}
        for mode in a.mode:
            env = dict(os.environ)
            if force[mode] is not None:
                env["COMMSCOPE_INSPECTOR_STREAM_BYTES"] = force[mode]
            for jobs in a.jobs:
                cmd = [sys.executable, "-m", "analyzer.cli", "analyze", str(folder), "--format", "json", "-o",
                       os.devnull, "--no-cache", "-j", str(jobs)]
                walls, peaks, cpus = [], [], []
                for _ in range(a.runs):
                    w, p = measure(cmd, env)
                    walls.append(w)
                    peaks.append(p)
                    cpus.append(CPU_SECONDS[-1])
                med = statistics.median(walls)
                cmed = statistics.median(cpus)
                print(f"{mode} -j {jobs}: {n / med / 1e6:.2f} M records/s (wall median {med:.2f} s, {min(walls):.2f}-"
                      f"{max(walls):.2f} over {a.runs} runs); {n / cmed / 1e6:.2f} M records per CPU-second (CPU "
                      f"{cmed:.1f} s, {min(cpus):.1f}-{max(cpus):.1f}); peak {max(peaks):,.0f} MB (median "
                      f"{statistics.median(peaks):,.0f}); load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if a.dir is None:
            shutil.rmtree(folder, ignore_errors=True)

if __name__ == "__main__":
    main()
