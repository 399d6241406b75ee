"""The cached path alone: ``analyze --format json`` from a filled cache, this checkout against another one.

    python -m benchmarks.cached [--runs 5] [--only fsdp_500 ranks_1024] [--base /path/to/other/checkout]
        [--stages]

Inputs: the shared H200 ``fsdp_balanced`` capture scaled in time (``bench.real_workload``: 4 x 50 MB and
4 x 500 MB; ``hybrid_tp_dp`` at 4 x 500 MB too) and the generated 1,024-rank job of ``benchmarks/ranks.py``
(``--data``). Each input's cache is filled once (cold parse) in ``benchmarks/data/cache/`` and kept, so only
the cached path is timed. The filling run also stores the job's derived tables (``analyzer/ingest/derived.py``:
the checked GPU table, steps, collectives), which every timed run reads, as a user's second ``analyze`` would.
Each row: ``--runs`` runs of the whole command in a subprocess (``bench.measure``): median wall (min-max),
median CPU seconds of the process tree (min-max), the largest peak RSS. With
``--base``, the same runs of another checkout (e.g. ``git worktree add /tmp/base main``), interleaved run by
run with this one so that both see the same load: on a shared machine wall time follows the load, CPU
seconds are the steadier number. ``--stages`` also prints this checkout's CPU seconds per analysis stage, in
process (no profiler).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import bench
from benchmarks.bench import analyze_cmd, measure, real_workload
from benchmarks.ranks import generate

ROOT = Path(__file__).resolve().parents[1]
CACHE = bench.DATA / "cache"


def inputs(data: Path) -> dict[str, Path]:
    return {
        "fsdp_50": lambda: real_workload("fsdp_balanced", 50),
        "fsdp_500": lambda: real_workload("fsdp_balanced", 500),
        "hybrid_500": lambda: real_workload("hybrid_tp_dp", 500),
        "ranks_1024": lambda: generate(data / "r1024", 1024, steps=5),
    }


def _env(tree: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "COMMSCOPE_CACHE_DIR": str(cache), "PYTHONPATH": str(tree)}


def timed(trees: list[Path], path: Path, cache: Path, runs: int) -> list[dict]:
    """Per tree: walls, CPU seconds, peaks of ``runs`` cached runs, interleaved across the trees."""
    out = [{"wall": [], "cpu": [], "peak": []} for _ in trees]
    for _ in range(runs):
        for tree, r in zip(trees, out):
            w, p = measure(analyze_cmd(path), _env(tree, cache), cwd=tree)
            r["wall"].append(w)
            r["cpu"].append(bench.CPU_SECONDS[-1])
            r["peak"].append(p)
    return out


def row(r: dict) -> str:
    w, c = r["wall"], r["cpu"]
    return (f"{statistics.median(w):.2f} s ({min(w):.2f}-{max(w):.2f}), CPU {statistics.median(c):.2f} s "
            f"({min(c):.2f}-{max(c):.2f}), peak {max(r['peak']):.0f} MB")


STAGES = r"""
import os, sys, time, functools, collections
from pathlib import Path
from analyzer.ingest.loader import load, LoadOptions
import analyzer.analysis as A
from analyzer.report import render
T = collections.Counter()
def wrap(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def g(*a, **k):
        c = time.process_time()
        try:
            return f(*a, **k)
        finally:
            T[f"{mod.__name__.replace('analyzer.', '')}.{name}"] += time.process_time() - c
    setattr(mod, name, g)
from analyzer.whatif import replay, counterfactual, scenarios
from analyzer.crossrank import graph
for mod, names in [(replay, ["run", "schedule", "step_spans"]), (scenarios, ["prepare", "analyze"]),
                   (counterfactual, ["analyze"]), (graph, ["build"])]:
    for n in names:
        wrap(mod, n)
c0 = time.process_time()
ts = load([Path(sys.argv[1])], LoadOptions())
c1 = time.process_time()
a = A.analyze(ts)
c2 = time.process_time()
render(a, "json")
c3 = time.process_time()
print(f"    load {c1 - c0:.2f} s, analysis {c2 - c1:.2f} s, JSON {c3 - c2:.2f} s (CPU, after imports); within the "
      "analysis: " + ", ".join(f"{k} {v:.2f} s" for k, v in T.most_common()))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", nargs="*", default=["fsdp_500", "ranks_1024"])
    ap.add_argument("--base", type=Path, help="another checkout, timed the same way, interleaved")
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "commscope-ranks")
    ap.add_argument("--stages", action="store_true")
    args = ap.parse_args()
    made = inputs(args.data)
    trees = [ROOT] + ([args.base.resolve()] if args.base else [])
    print(f"start: {bench.load()}", file=sys.stderr)
    lines = ["| input | this checkout | " + ("base | " if args.base else "") + "load |",
             "|---|---|" + ("---|" if args.base else "") + "---|"]
    for name in args.only:
        path = made[name]()
        cache = CACHE / name
        measure(analyze_cmd(path), _env(ROOT, cache))  # fill (or check) the cache
        res = timed(trees, path, cache, args.runs)
        line = f"| {name} ({bench.describe(path) if name != 'ranks_1024' else '1,024 generated ranks'}) | " + \
            " | ".join(row(r) for r in res) + f" | {os.getloadavg()[0]:.1f} |"
        lines.append(line)
        print(line, file=sys.stderr, flush=True)
        if args.stages:
            for _ in range(2):
                subprocess.run([sys.executable, "-c", STAGES, str(path)], env=_env(ROOT, cache), cwd=ROOT, check=True)
    print(f"end: {bench.load()}", file=sys.stderr)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
