"""commscope benchmarks: cold/cached ``analyze``, msgspec floor, HTA, rank scaling -> a Markdown table.

    python -m benchmarks.bench                 # everything (~10 min on 2 cores, first run generates ~3 GB)
    python -m benchmarks.bench --skip-scale --skip-hta --runs 1

Workloads are generated into benchmarks/data/ (git-ignored) by benchmarks/gen.py and reused.
Wall time is the median of ``--runs`` runs of ``python -m analyzer.cli analyze`` in a subprocess; peak
memory is the largest sum of RSS over the process tree (workers included), sampled every 20 ms.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import psutil

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"


def workload(name: str, ranks: int, mb: float, real_share: float = 0.15) -> Path:
    from benchmarks.gen import write_workload

    out = DATA / name
    meta = DATA / f"{name}.json"
    if not meta.exists() or len(list(out.glob("*.json"))) != ranks:
        shutil.rmtree(out, ignore_errors=True)
        t = time.perf_counter()
        write_workload(out, ranks, mb, real_share=real_share)
        print(f"generated {name} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return out


def measure(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float]:
    """(wall s, peak MB of the whole process tree)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t
    if proc.returncode:
        raise RuntimeError(f"{cmd} failed: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
    return wall, peak / 2**20


def analyze_cmd(path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json", "-o", os.devnull, *extra]


def runs(path: Path, n: int, cached: bool, extra: tuple[str, ...] = ()) -> tuple[float, float]:
    walls, peaks = [], []
    cache = Path(tempfile.mkdtemp(prefix="commscope-bench-"))
    env = {**os.environ, "COMMSCOPE_CACHE_DIR": str(cache)}
    try:
        if cached:
            measure(analyze_cmd(path, *extra), env)  # fill
        for _ in range(n):
            if not cached:
                shutil.rmtree(cache, ignore_errors=True)
            w, p = measure(analyze_cmd(path, *extra), env)
            walls.append(w)
            peaks.append(p)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return statistics.median(walls), max(peaks)


class _Floor(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0


class _FloorTrace(msgspec.Struct, gc=False):
    traceEvents: list[_Floor]  # noqa: N815


def floor(path: Path, n: int) -> tuple[float, float, int]:
    """(commscope parse s, msgspec floor s, events) for one file, medians of n."""
    from analyzer.ingest.options import ReadOptions
    from analyzer.loader import read_lean

    data = path.read_bytes()
    dec = msgspec.json.Decoder(_FloorTrace)
    fl, ours = [], []
    events = 0
    for _ in range(n):
        gc.collect()
        t = time.perf_counter()
        events = len(dec.decode(data).traceEvents)
        fl.append(time.perf_counter() - t)
        gc.collect()
        t = time.perf_counter()
        read_lean(path, ReadOptions())
        ours.append(time.perf_counter() - t)
    return statistics.median(ours), statistics.median(fl), events


_HTA = """
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_comm_comp_overlap(visualize=False)
a.get_temporal_breakdown(visualize=False)
"""


def hta(path: Path, python: str) -> tuple[float, float] | str:
    """(wall s, peak MB) of HTA in a subprocess, timed exactly as commscope's runs are."""
    try:
        return measure([python, "-c", _HTA, str(path)], dict(os.environ), cwd=Path(tempfile.gettempdir()))
    except RuntimeError as exc:
        return f"failed: {str(exc)[-200:]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-hta", action="store_true")
    # HTA 0.5.0 fails under pandas 3; point this at an environment with pandas<3 (see README)
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", sys.executable))
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--scale-ranks", type=int, default=256)
    ap.add_argument("--scale-mb", type=float, default=20)
    args = ap.parse_args()

    rows: list[tuple[str, str]] = []
    big = workload("r4x500", 4, 500)
    small = workload("r4x50", 4, 50)
    size = sum(p.stat().st_size for p in big.glob("*.json")) / 1e6
    ours, fl, events = floor(next(big.glob("rank0*")), args.runs)
    rows.append(("parse 1 rank (545 MB), commscope / msgspec floor",
                 f"{ours:.2f} s / {fl:.2f} s = {ours / fl:.2f}x the floor ({events / ours / 1e6:.2f} M events/s)"))
    cold, cold_mb = runs(big, args.runs, cached=False)
    rows.append((f"4 ranks x 500 MB ({size:.0f} MB, {4 * events / 1e6:.1f} M events) cold analyze",
                 f"{cold:.2f} s, peak {cold_mb:.0f} MB, {4 * events / cold / 1e6:.2f} M events/s"))
    warm, warm_mb = runs(big, args.runs, cached=True)
    rows.append(("same, from the cache", f"{warm:.2f} s, peak {warm_mb:.0f} MB"))
    s_cold, s_mb = runs(small, args.runs, cached=False)
    rows.append(("4 ranks x 50 MB cold analyze", f"{s_cold:.2f} s, peak {s_mb:.0f} MB"))
    if not args.skip_hta:
        h = hta(small, args.hta_python)
        rows.append(("HTA parse + overlap + temporal breakdown, 4 x 50 MB (one run)",
                     f"{h[0]:.2f} s, peak {h[1]:.0f} MB -> commscope is {h[0] / s_cold:.1f}x faster"
                     if isinstance(h, tuple) else h))
    if not args.skip_scale:
        # the same per-rank size at 1/16 of the ranks: peak memory must not grow with the rank count
        for ranks in (max(2, args.scale_ranks // 16), args.scale_ranks):
            scale = workload(f"r{ranks}x{args.scale_mb:g}", ranks, args.scale_mb, real_share=0.05)
            w, mb = runs(scale, 1, cached=False)
            rows.append((f"{ranks} ranks x {args.scale_mb:g} MB cold analyze", f"{w:.1f} s, peak {mb:.0f} MB"))
            w, mb = runs(scale, 1, cached=True)
            rows.append((f"{ranks} ranks x {args.scale_mb:g} MB from the cache", f"{w:.1f} s, peak {mb:.0f} MB"))
    print(f"\ncpu cores: {os.cpu_count()}, runs: {args.runs} (median)\n")
    print("| measurement | result |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    print(json.dumps(dict(rows)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
