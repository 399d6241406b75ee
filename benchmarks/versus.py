"""This checkout against another (e.g. ``main``), run by run in turn so both see the same load.

    git archive main | tar -x -C /tmp/base
    python -m benchmarks.versus /tmp/base INPUT... [--runs 3] [--cached] [--extra "--jobs 1"]

For each input, ``python -m analyzer.cli analyze INPUT --format json`` from each tree (its own ``analyzer`` package
first on the path), alternately (base, this, base, this, ...), each cold on an empty cache or, with ``--cached``,
from a cache each tree filled once before; a first run of each tree before the timed ones compiles what it compiles
(bytecode, numba's cache). Prints one Markdown row per input and tree: median wall (min-max), median CPU seconds of
the process tree (min-max), peak RSS (``bench.measure``), the load average after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.bench import CPU_SECONDS, measure

ROOT = Path(__file__).resolve().parents[1]


def _cmd(path: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json", "-o", os.devnull, *extra]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("base", type=Path)
    ap.add_argument("inputs", nargs="+", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cached", action="store_true")
    ap.add_argument("--extra", default="", help="more analyze options, one string")
    a = ap.parse_args()
    extra = a.extra.split()
    trees = {"base": a.base.resolve(), "this": ROOT}
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {'cached' if a.cached else 'cold'}; "
          f"{a.runs} runs each, alternating\n")
    print("| input | tree | wall | CPU | peak | load after |\n|---|---|---|---|---|---|")
    for path in a.inputs:
        caches = {k: Path(tempfile.mkdtemp(prefix=f"commscope-versus-{k}-")) for k in trees}
        got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in trees}
        try:
            for k, tree in trees.items():  # warm-up: compiles, and fills the cache where it is kept
                measure(_cmd(path, extra), {**os.environ, "COMMSCOPE_CACHE_DIR": str(caches[k])}, cwd=tree)
            for _ in range(a.runs):
                for k, tree in trees.items():
                    if not a.cached:
                        shutil.rmtree(caches[k], ignore_errors=True)
                    w, p = measure(_cmd(path, extra), {**os.environ, "COMMSCOPE_CACHE_DIR": str(caches[k])}, cwd=tree)
                    got[k].append((w, CPU_SECONDS[-1], p))
        finally:
            for c in caches.values():
                shutil.rmtree(c, ignore_errors=True)
        for k in trees:
            ws, cs = [r[0] for r in got[k]], [r[1] for r in got[k]]
            print(f"| {path.name} | {k} | {statistics.median(ws):.2f} s ({min(ws):.2f}-{max(ws):.2f}) | "
                  f"{statistics.median(cs):.2f} s ({min(cs):.2f}-{max(cs):.2f}) | {max(r[2] for r in got[k]):.0f} MB | "
                  f"{os.getloadavg()[0]:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
