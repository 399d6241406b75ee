"""What the host-aware replay costs: in-process analysis with the compiled loops, with the numpy paths, and (``--base``)
another checkout's, run by run in turn so all see the same machine load; and the op tables cold, whole process.

    python -m benchmarks.replay_cost [--base DIR] [--runs 5] [--input PATH ...] [--skip-cold]

Inputs (default): ``benchmarks.ranks``' 1,024-rank generated job (tp 8, 5 steps), ``benchmarks.replicate``'s heavy mix
of the shared ``fsdp_balanced`` at 4 x 200 MB (issue #33's mix, 471 k replay events), the What-if study's AR op table
(117 k ops). Each configuration runs in its own process: the tables are read from a cache filled beforehand (the
parse is not measured), then ``_analyze`` runs ``--runs`` + 1 times; the first is a warm-up (imports inside functions,
first-touch allocations). Printed: CPU seconds (user + system, all threads) per analysis, median (min-max), and the
process's peak RSS. ``--skip-cold`` leaves out the op tables' cold ``commscope analyze --no-cache`` rows (wall, CPU of
the process tree, peak; median of ``--runs``). The load average is printed: on a shared machine, CPU seconds are the
steadier number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench import CPU_SECONDS, analyze_cmd, measure

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
SHARED = Path(os.environ["COMMSCOPE_SHARED_TRACES"]) if os.environ.get("COMMSCOPE_SHARED_TRACES") else next(
    (p / "shared" / "traces" for p in ROOT.parents[:2] if (p / "shared" / "traces").is_dir()),
    ROOT.parent / "shared" / "traces")
AR = ROOT / "sample_traces" / "whatif" / "AR" / "trace-AR.parquet"

# run in the measured tree (its code on PYTHONPATH): the tables from the cache, then the analysis timed in-process
_WORKER = r'''
import json, resource, sys, time
from pathlib import Path
from analyzer.ingest.loader import LoadOptions, load
from analyzer.analysis import _analyze
ts = load([Path(sys.argv[1])], LoadOptions(cache=True))
cpu = []
for _ in range(int(sys.argv[2]) + 1):
    t = time.process_time()
    _analyze(ts, None, None)
    cpu.append(time.process_time() - t)
print(json.dumps({"cpu": cpu[1:], "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def inputs() -> list[tuple[str, Path]]:
    from benchmarks.ranks import generate
    from benchmarks.replicate import replicate_dir

    heavy = DATA / "fsdp_heavy200"
    if len(list(heavy.glob("*.json"))) != 4:
        shutil.rmtree(heavy, ignore_errors=True)
        replicate_dir(SHARED / "gpu_h200" / "fsdp_balanced", heavy, 200, heavy=True)
    return [("1,024 ranks (generated, tp 8, 5 steps)", generate(DATA / "ranks1024", 1024, steps=5)),
            ("fsdp_balanced heavy 4 x 200 MB", heavy), ("What-if AR op table (117 k ops)", AR)]


def trees(base: Path | None) -> dict[str, tuple[Path, dict[str, str]]]:
    out = {"this (compiled)": (ROOT, {}), "this (numpy)": (ROOT, {"COMMSCOPE_NO_NATIVE": "1"})}
    if base is not None:
        out[f"base ({base})"] = (base.resolve(), {})
    return out


def in_process(path: Path, tree: Path, extra: dict[str, str], cache: Path, runs: int) -> dict:
    env = {**os.environ, **extra, "PYTHONPATH": str(tree), "COMMSCOPE_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", _WORKER, str(path), str(runs)], cwd=tree, env=env, capture_output=True,
                       text=True, check=False)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, help="another checkout (its repository root) to compare with")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--input", type=Path, action="append", default=[], help="traces to analyze instead")
    ap.add_argument("--skip-cold", action="store_true")
    a = ap.parse_args()
    sets = [(str(p), p) for p in a.input] or inputs()
    ts = trees(a.base)
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", file=sys.stderr)
    print("| input | code | in-process analysis, CPU s (median, min-max) | peak RSS |\n|---|---|---:|---:|")
    for what, path in sets:
        got: dict[str, list[dict]] = {k: [] for k in ts}
        caches = {}
        try:
            for name, (tree, extra) in ts.items():  # fill each tree's cache (its parser version)
                caches[name] = Path(tempfile.mkdtemp(prefix="commscope-replay-cost-"))
                in_process(path, tree, extra, caches[name], 0)
            for _ in range(2):  # in turn: each tree sees the same load
                for name, (tree, extra) in ts.items():
                    got[name].append(in_process(path, tree, extra, caches[name], max(1, a.runs // 2)))
        finally:
            for c in caches.values():
                shutil.rmtree(c, ignore_errors=True)
        for name, rs in got.items():
            cpu = [c for r in rs for c in r["cpu"]]
            print(f"| {what} | {name} | {statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f}) "
                  f"| {max(r['peak_mb'] for r in rs):,.0f} MB |", flush=True)
    if not a.skip_cold:
        print("\n| op table, cold `analyze --no-cache` | code | wall s (median, min-max) | CPU s | peak |\n"
              "|---|---|---:|---:|---:|")
        for path in (AR, AR.parents[1] / "SE" / "trace-SE.parquet", AR.parents[1] / "ST" / "trace-ST.parquet"):
            got2: dict[str, tuple[list[float], list[float], list[float]]] = {k: ([], [], []) for k in ts}
            for _ in range(a.runs):
                for name, (tree, extra) in ts.items():
                    env = {**os.environ, **extra, "PYTHONPATH": str(tree)}
                    w, p = measure(analyze_cmd(path, "--no-cache"), env, cwd=tree)
                    got2[name][0].append(w)
                    got2[name][1].append(CPU_SECONDS[-1])
                    got2[name][2].append(p)
            for name, (w, c, p) in got2.items():
                print(f"| {path.parent.name} | {name} | {statistics.median(w):.2f} ({min(w):.2f}-{max(w):.2f}) "
                      f"| {statistics.median(c):.2f} | {max(p):,.0f} MB |", flush=True)
    print(f"load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
