"""What the counterfactual verdict costs: cached ``analyze`` of 1,024 generated ranks, this checkout against
another (``--base``, e.g. a checkout of main), runs interleaved so both see the same machine load.

    python -m benchmarks.verdict_cost --base /work/main [--runs 3] [--data /tmp/commscope-ranks]

The input is ``benchmarks.ranks``' 1,024-rank job (tp 8, 5 steps), written once under ``--data``. Each run is
``python -m analyzer.cli analyze DIR --format json`` in a subprocess on a cache filled beforehand; the code comes
from ``PYTHONPATH``. Prints the median wall time, its min-max spread and the peak memory of each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks import bench
from benchmarks.bench import analyze_cmd, measure
from benchmarks.ranks import event_mix, generate

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the checkout to compare with (its repository root)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "commscope-ranks")
    args = ap.parse_args()
    path = generate(args.data / "r1024", 1024, steps=5)
    print(event_mix(path))
    cache = Path(tempfile.mkdtemp(prefix="commscope-verdict-cost-"))
    env = {**os.environ, "COMMSCOPE_CACHE_DIR": str(cache)}
    trees = {"base": args.base.resolve(), "this": ROOT}
    got: dict[str, tuple[list[float], list[float], list[float]]] = {k: ([], [], []) for k in trees}
    try:
        for tree in trees.values():  # fills the cache for each tree's parser version
            measure(analyze_cmd(path), {**env, "PYTHONPATH": str(tree)}, cwd=tree)
        for _ in range(args.runs):
            for name, tree in trees.items():
                w, p = measure(analyze_cmd(path), {**env, "PYTHONPATH": str(tree)}, cwd=tree)
                got[name][0].append(w)
                got[name][1].append(p)
                got[name][2].append(bench.CPU_SECONDS[-1])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print("| code | cached analyze, 1,024 ranks (wall) | CPU | peak memory | load |\n|---|---:|---:|---:|---:|")
    for name, (walls, peaks, cpus) in got.items():
        print(f"| {name} ({trees[name]}) | {statistics.median(walls):.2f} s ({min(walls):.2f}-{max(walls):.2f}) "
              f"| {statistics.median(cpus):.2f} s ({min(cpus):.2f}-{max(cpus):.2f}) | {max(peaks):,.0f} MB "
              f"| {os.getloadavg()[0]:.1f} |")
    for i, what in ((0, "wall"), (2, "CPU")):
        base, this = (statistics.median(got[k][i]) for k in ("base", "this"))
        print(f"this / base: {this / base:.3f} (median {what}; {args.runs} runs each, interleaved)")


if __name__ == "__main__":
    main()
