"""Issue #41's table as benchmark rows: cold and cached ``analyze``, the HTA ratio A B A B, Nsight, many ranks, op tables.

    python -m benchmarks.issue41 [--runs 5] [--hta-python /work/venvs/hta/bin/python] [--only ROW ...]
        [--data benchmarks/data]

Rows (``--only`` takes their names): ``cold500`` the heavy FSDP mix 4 x ~513 MB cold (empty cache);
``cached500`` the same from the cache (the kept report; and ``--format text``, which reads the kept analysis and
renders it); ``hta50`` 4 x ~51 MB cold against HTA 0.5.0, run alternately in one loop (commscope, HTA,
commscope, HTA, ...) for the heavy mix and for ``fsdp_balanced`` in PyTorch's indented layout; ``nsys`` the Nsight
export x200 cold; ``ranks`` 1,024 generated ranks cold and cached; ``optable`` the What-if study's AR op table cold.

Each row runs ``python -m analyzer.cli analyze PATH --format json`` in a fresh process (``bench.measure``): median
wall time of ``--runs`` with its spread (min-max), the CPU seconds of the whole process tree (user + system,
workers included: median and min-max), the largest peak RSS of the tree, the input's event mix, and the load
average before and after (on a shared machine wall time follows the load; CPU seconds are the steadier number).
Inputs are written once under ``--data`` (git-ignored ``benchmarks/data`` by default) with the project's
generators: ``replicate.py --heavy`` (fsdp_balanced one compact event per line, 1/3 of its unread cpu_op kept),
``replicate.py`` (fsdp_balanced as PyTorch indents it), ``replicate_nsys.py`` and ``ranks.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks import bench
from benchmarks.bench import CPU_SECONDS, analyze_cmd, measure

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"cold500": "<= 6 s, <= 2 GB", "cached500": "<= 0.5 s", "hta50": ">= 15x", "nsys": "<= 5 s, <= 1 GB",
           "ranks_cold": "<= 8 s", "ranks_cached": "<= 1 s", "optable": "<= 2 s"}
AR = ROOT / "sample_traces" / "whatif" / "AR"


def stats(walls: list[float], cpus: list[float], peaks: list[float]) -> str:
    w, c = statistics.median(walls), statistics.median(cpus)
    return (f"{w:.2f} s ({min(walls):.2f}-{max(walls):.2f}), CPU {c:.2f} s ({min(cpus):.2f}-{max(cpus):.2f}), "
            f"peak {max(peaks):.0f} MB")


def timed(cmd: list[str], runs: int, cached: bool, fill: list[str] | None = None) -> tuple[list, list, list]:
    """``runs`` runs of ``cmd``: each on an empty cache dir, or (``cached``) on one filled once by ``fill`` (or
    ``cmd``)."""
    walls, cpus, peaks = [], [], []
    cache = Path(tempfile.mkdtemp(prefix="commscope-bench-"))
    env = {**os.environ, "COMMSCOPE_CACHE_DIR": str(cache)}
    try:
        if cached:
            measure(fill or cmd, env)
        for _ in range(runs):
            if not cached:
                shutil.rmtree(cache, ignore_errors=True)
            w, p = measure(cmd, env)
            walls.append(w)
            cpus.append(CPU_SECONDS[-1])
            peaks.append(p)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return walls, cpus, peaks


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} / {five:.1f}"


def hta_ab(path: Path, runs: int, python: str) -> str:
    """commscope cold and HTA alternately, ``runs`` times each (A B A B ...): both see the same load."""
    ours: list[tuple[float, float, float]] = []
    theirs: list[tuple[float, float, float]] = []
    for _ in range(runs):
        w, c, p = timed(analyze_cmd(path), 1, cached=False)
        ours.append((w[0], c[0], p[0]))
        h = bench.hta(path, python)
        if isinstance(h, str):
            return f"commscope {stats(*map(list, zip(*ours)))}; HTA {h}"
        theirs.append((h[0], CPU_SECONDS[-1], h[1]))
    ow, oc, op = map(list, zip(*ours))
    hw, hc, hp = map(list, zip(*theirs))
    pairs = sorted(h / o for h, o in zip(hw, ow))
    ratio = statistics.median(hw) / statistics.median(ow)
    return (f"commscope {stats(ow, oc, op)}; HTA {stats(hw, hc, hp)}; **{ratio:.1f}x** wall (pairs "
            f"{pairs[0]:.1f}-{pairs[-1]:.1f}x), {statistics.median(hc) / statistics.median(oc):.1f}x CPU")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", "/work/venvs/hta/bin/python"))
    ap.add_argument("--data", type=Path, default=bench.DATA)
    ap.add_argument("--shared", type=Path, default=bench.SHARED, help="the shared traces (default ../shared/traces)")
    a = ap.parse_args()
    bench.DATA = a.data
    if a.shared != bench.SHARED:  # the real sets' sources, where the shared traces are elsewhere
        bench.REAL = {k: (Path(str(src).replace(str(bench.SHARED), str(a.shared))), *rest)
                      for k, (src, *rest) in bench.REAL.items()}
        bench.NSYS_SRC = a.shared / "nsys" / bench.NSYS_SRC.name
    want = set(a.only or ("cold500", "cached500", "hta50", "nsys", "ranks", "optable"))
    rows: list[tuple[str, str, str, str, str]] = []

    def emit(what: str, mix: str, result: str, target: str) -> None:
        rows.append((what, mix, result, target, load()))
        print(f"| {what} | {mix} | {result} | {target} | {rows[-1][-1]} |", file=sys.stderr, flush=True)

    print(f"start, load {load()} on {os.cpu_count()} cores", file=sys.stderr)
    if want & {"cold500", "cached500"}:
        heavy = bench.real_workload("fsdp_heavy", 500)
        mix = bench.describe(heavy)
        if "cold500" in want:
            emit("heavy FSDP mix 4 x 500 MB, cold", mix, stats(*timed(analyze_cmd(heavy), a.runs, False)),
                 TARGETS["cold500"])
        if "cached500" in want:
            emit("same, from the cache (the kept report)", mix, stats(*timed(analyze_cmd(heavy), a.runs, True)),
                 TARGETS["cached500"])
            text = [*analyze_cmd(heavy)[:-4], "--format", "text", "-o", os.devnull]
            emit("same, from the kept analysis (`--format text`: never a kept report)", mix,
                 stats(*timed(text, a.runs, True)), "")
    if "hta50" in want:
        for name in ("fsdp_heavy", "fsdp_balanced"):
            path = bench.real_workload(name, 50)
            emit(f"{name} 4 x 50 MB cold, against HTA 0.5.0 (A B A B)", bench.describe(path),
                 hta_ab(path, a.runs, a.hta_python), TARGETS["hta50"])
    if "nsys" in want:
        db = bench.nsys_workload()
        mix = f"1 x {db.stat().st_size / 1e6:.0f} MB SQLite, 2 ranks; {bench._nsys_mix(db)}"
        emit("Nsight export x200, cold", mix, stats(*timed(analyze_cmd(db), a.runs, False)), TARGETS["nsys"])
    if "ranks" in want:
        from benchmarks.ranks import event_mix, generate

        job = generate(a.data / "ranks-1024x5", 1024, 5)
        mix = event_mix(job)
        emit("1,024 generated ranks, cold", mix, stats(*timed(analyze_cmd(job), a.runs, False)),
             TARGETS["ranks_cold"])
        emit("same, from the cache", mix, stats(*timed(analyze_cmd(job), a.runs, True)), TARGETS["ranks_cached"])
    if "optable" in want:
        from benchmarks.optable_bench import mix as optable_mix

        table = next(AR.glob("*.parquet"))
        emit("What-if AR op table, cold (`--no-cache`)", optable_mix(table),
             stats(*timed(analyze_cmd(table, "--no-cache"), a.runs, False)), TARGETS["optable"])
    print(f"end, load {load()}", file=sys.stderr)
    print(f"\n{a.runs} runs each; median (min-max); load average 1 / 5 min at each row's end; {os.cpu_count()} cores\n")
    print("| workload | input, event mix | commscope | target | load |\n|---|---|---|---|---|")
    for what, mix, result, target, after in rows:
        print(f"| {what} | {mix} | {result} | {target} | {after} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
