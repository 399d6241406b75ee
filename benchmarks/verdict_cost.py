"""What the counterfactual verdict costs: cached ``analyze`` of 1,024 generated ranks, this checkout against
another (``--base``, e.g. a checkout of main), runs interleaved so both see the same machine load.

    python -m benchmarks.verdict_cost --base /work/main [--runs 3] [--data /tmp/commscope-ranks]
    python -m benchmarks.verdict_cost --base /work/main --input /tmp/nsys200.sqlite --input /tmp/heavy200

``--input`` (repeatable): these traces instead (e.g. benchmarks/replicate_nsys.py's Nsight export, or
benchmarks/replicate.py's ``--heavy`` Kineto ranks), one table row per input and tree.

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
    ap.add_argument("--input", type=Path, action="append", default=[], help="traces to analyze instead")
    args = ap.parse_args()
    if args.input:
        for path in args.input:
            compare(path, args.base, args.runs, path.name)
        return
    path = generate(args.data / "r1024", 1024, steps=5)
    print(event_mix(path))
    compare(path, args.base, args.runs, "1,024 ranks")


def compare(path: Path, base: Path, n: int, what: str) -> None:
    cache = Path(tempfile.mkdtemp(prefix="commscope-verdict-cost-"))
    env = {**os.environ, "COMMSCOPE_CACHE_DIR": str(cache)}
    trees = {"base": base.resolve(), "this": ROOT}
    got: dict[str, tuple[list[float], list[float], list[float]]] = {k: ([], [], []) for k in trees}
    try:
        for tree in trees.values():  # fills the cache for each tree's parser version
            measure(analyze_cmd(path), {**env, "PYTHONPATH": str(tree)}, cwd=tree)
        for _ in range(n):
            for name, tree in trees.items():
                w, p = measure(analyze_cmd(path), {**env, "PYTHONPATH": str(tree)}, cwd=tree)
                got[name][0].append(w)
                got[name][1].append(p)
                got[name][2].append(bench.CPU_SECONDS[-1])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"| code | cached analyze, {what} (wall) | CPU | peak memory | load |\n|---|---:|---:|---:|---:|")
    for name, (walls, peaks, cpus) in got.items():
        print(f"| {name} ({trees[name]}) | {statistics.median(walls):.2f} s ({min(walls):.2f}-{max(walls):.2f}) "
              f"| {statistics.median(cpus):.2f} s ({min(cpus):.2f}-{max(cpus):.2f}) | {max(peaks):,.0f} MB "
              f"| {os.getloadavg()[0]:.1f} |")
    for i, kind in ((0, "wall"), (2, "CPU")):
        b, t = (statistics.median(got[k][i]) for k in ("base", "this"))
        print(f"this / base: {t / b:.3f} (median {kind}; {n} runs each, interleaved)")


if __name__ == "__main__":
    main()
