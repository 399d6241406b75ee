"""commscope benchmarks on real event composition and on generated traces -> a Markdown table.

    python -m benchmarks.bench --hta-python /tmp/htaenv/bin/python    # everything (~30 min on 2 cores)
    python -m benchmarks.bench --only fsdp_balanced --skip-hta --runs 1

Inputs (written once into benchmarks/data/, git-ignored):
- every real Kineto set -- the shared H200 captures (ddp_balanced, fsdp_balanced, hybrid_tp_dp), the
  project's own H200 stragglers (compute_straggler, host_straggler), TraceLens' B200 and MI300 single
  ranks, HTA's two sampled ranks of a 128-rank job -- scaled to the target size by replicating their
  steps in time (``benchmarks/replicate.py``: exact timestamp shifts, ids kept unique and linked);
- the generated workload (``benchmarks/gen.py``: generator steps plus python_function/cpu_op noise),
  one row among the others;
- the shared 2-GPU Nsight export replicated 200x in time (``benchmarks/replicate_nsys.py``);
- long captures as they were written, where someone has put them in ``benchmarks/data/captured/<name>/``
  (gunzipped rank files): big ones get cold and cached rows, the others run against HTA, beside a
  replicated copy of their short twin of the same size where ``TWINS`` names one.
Each row gives the input's event mix (share of cuda_runtime, ac2g, cpu_op, kernel, python_function,
other). Wall time is the median of ``--runs`` runs of ``python -m analyzer.cli analyze`` in a subprocess,
with the spread (min-max); peak memory is the largest sum of RSS over the process tree (workers
included), sampled every 20 ms. The machine's load average is printed before and after.
"""

from __future__ import annotations

import argparse
import gc
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

from benchmarks.replicate import event_mix, mix_text, replicate_dir, trace_files

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


CPU_SECONDS: list[float] = []  # CPU time (user + sys) of each measured command's process tree


_COMPILED: set[Path] = set()


def _compiled(tree: Path) -> None:
    """Byte-compile the measured tree once, as pip does on install: with PYTHONDONTWRITEBYTECODE set (as on this
    machine) every run would otherwise compile commscope's modules again (~0.2 s of CPU)."""
    if tree not in _COMPILED:
        _COMPILED.add(tree)
        subprocess.run([sys.executable, "-m", "compileall", "-q", "analyzer", "dashboards"], cwd=tree,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, check=False,
                       stdout=subprocess.DEVNULL)


def measure(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float]:
    """(wall s, peak MB of the whole process tree); its CPU seconds are appended to ``CPU_SECONDS``.

    CPU time is each process's last sampled user + system time, summed over every process seen in
    the tree (parse workers are grandchildren that ``getrusage`` would not count).
    """
    _compiled(Path(cwd))
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = psutil.Process(proc.pid)
    peak = 0
    cpu: dict[int, float] = {}
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        rss = 0
        for p in procs:
            try:
                with p.oneshot():
                    rss += p.memory_info().rss
                    c = p.cpu_times()
                    cpu[p.pid] = c.user + c.system
            except psutil.Error:
                pass
        peak = max(peak, rss)
        time.sleep(0.02)
    wall = time.perf_counter() - t
    CPU_SECONDS.append(sum(cpu.values()))
    if proc.returncode:
        raise RuntimeError(f"{cmd} failed: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
    return wall, peak / 2**20


def analyze_cmd(path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json", "-o", os.devnull, *extra]


def runs(path: Path, n: int, cached: bool, extra: tuple[str, ...] = ()) -> tuple[list[float], list[float]]:
    """(wall s of each run, peak MB of each run)."""
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
    return walls, peaks


def spread(walls: list[float], peaks: list[float]) -> str:
    """Median wall (min-max), median CPU seconds of the process tree, largest peak."""
    med = statistics.median(walls)
    rng = f" ({min(walls):.2f}-{max(walls):.2f})" if len(walls) > 1 else ""
    cpu = statistics.median(CPU_SECONDS[-len(walls):])
    return f"{med:.2f} s{rng}, CPU {cpu:.1f} s, peak {max(peaks):.0f} MB"


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
    from analyzer.ingest.loader import read_lean
    from analyzer.ingest.options import ReadOptions

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


SHARED = ROOT.parent / "shared" / "traces"
# name -> (source folder or file, MB per rank of the big rows, MB per rank of the HTA rows)
REAL = {
    "fsdp_balanced": (SHARED / "gpu_h200" / "fsdp_balanced", 500, 50),
    "ddp_balanced": (SHARED / "gpu_h200" / "ddp_balanced", 500, 50),
    "hybrid_tp_dp": (SHARED / "gpu_h200" / "hybrid_tp_dp", 500, 50),
    "compute_straggler": (ROOT / "sample_traces" / "gpu_h200" / "compute_straggler", None, 50),
    "host_straggler": (ROOT / "sample_traces" / "gpu_h200" / "host_straggler", None, 50),
    "tracelens_b200": (SHARED / "tracelens" / "b200_eager_trace.json.gz", 500, None),
    "tracelens_mi300": (SHARED / "tracelens" / "mi300_resnet_act_checkpoint.json.gz", 500, None),
    "hta_sampled": (SHARED / "hta" / "trace_filter", 500, None),
    # the project's own H100 captures: FSDP2 with kernels from three threads, and TP x DP with Python stacks
    "fsdp_threads": (ROOT / "sample_traces" / "real_parallel" / "fsdp_threads_balanced", None, 50),
    "tp_dp_stack": (ROOT / "sample_traces" / "real_parallel" / "tp_dp_stack_balanced", None, 50),
    # issue #33's heavier mix (its H200 FSDP capture: 40% cuda_runtime, 43% ac2g, 11% cpu_op, 2% kernels, one
    # event per line): fsdp_balanced re-encoded one compact event per line with 1/3 of its unread cpu_op kept
    "fsdp_heavy": (SHARED / "gpu_h200" / "fsdp_balanced", 500, 50),
}
HEAVY = {"fsdp_heavy"}  # sets written with ``replicate_dir(..., heavy=True)``
# Long captures kept as they were written (no replication), when someone has made one on a GPU, e.g.
#   capture_parallel.py OUT --scenarios fsdp_threads --variants balanced --steps 64 --tag _long
# with the rank files gunzipped into benchmarks/data/captured/<name>/. Ranks of CAPTURED_BIG_MB and more get
# cold and cached rows; smaller ones run against HTA beside a replicated copy of their short twin (same
# size), to show whether replication flatters the parse.
CAPTURED = DATA / "captured"
CAPTURED_BIG_MB = 100
TWINS = {"fsdp_threads_long_balanced": "fsdp_threads"}


def captured(names: list[str] | None) -> list[tuple[Path, float]]:
    """(folder, MB per rank) of every long capture present; with ``names``, those whose twin is named."""
    out = []
    for folder in sorted(CAPTURED.iterdir()) if CAPTURED.is_dir() else []:
        files = trace_files(folder)
        if files and (names is None or TWINS.get(folder.name) in names):
            out.append((folder, sum(p.stat().st_size for p in files) / len(files) / 1e6))
    return out


NSYS_SRC = SHARED / "nsys" / "mfu_2gpu_before.sqlite"


def real_workload(name: str, mb: float) -> Path:
    src = REAL[name][0]
    out = DATA / "real" / f"{name}-{mb:g}mb"
    want = len(trace_files(src)) if src.is_dir() else 1
    if len(list(out.glob("*.json"))) != want:
        shutil.rmtree(out, ignore_errors=True)
        t = time.perf_counter()
        replicate_dir(src, out, mb, heavy=name in HEAVY)
        print(f"replicated {name} to {mb:g} MB per rank in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return out


def nsys_workload(copies: int = 200) -> Path:
    from benchmarks.replicate_nsys import replicate

    out = DATA / "real" / f"nsys_mfu_x{copies}.sqlite"
    if not out.exists():
        replicate(NSYS_SRC, out, copies)
    return out


def describe(path: Path) -> str:
    """'4 x 513 MB, 1.9 M events/rank; rt 29% ac2g 34% ...' for a folder of Kineto files."""
    files = trace_files(path)
    size = sum(p.stat().st_size for p in files) / len(files) / 1e6
    # the whole first rank: a capture's head can differ (one with Python stacks: 83% python_function in
    # its first 64 MB, 86% over all of it, and no kernels or launches there)
    return f"{len(files)} x {size:.0f} MB; {mix_text(event_mix(files[0], sample_mb=size + 1))}"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None, help="real sets to run (default: all)")
    ap.add_argument("--skip-hta", action="store_true")
    # HTA 0.5.0 fails under pandas 3; point this at an environment with pandas<3 (see README)
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", sys.executable))
    ap.add_argument("--skip-generated", action="store_true")
    ap.add_argument("--skip-nsys", action="store_true")
    ap.add_argument("--skip-floor", action="store_true")
    ap.add_argument("--skip-big", action="store_true", help="no 500 MB-per-rank rows")
    ap.add_argument("--skip-generated-big", action="store_true", help="no generated 4 x 500 MB rows (~5 min to write)")
    args = ap.parse_args()
    names = args.only if args.only is not None else list(REAL)
    rows: list[tuple[str, str, str]] = []
    print(f"start: {load()}", file=sys.stderr)

    def emit(what: str, mix: str, result: str) -> None:
        rows.append((what, mix, result))
        print(f"| {what} | {mix} | {result} |", file=sys.stderr, flush=True)

    big_sets = [n for n in names if REAL[n][1] and not args.skip_big]
    for name in big_sets:
        path = real_workload(name, REAL[name][1])
        mix = describe(path)
        emit(f"{name}, cold", mix, spread(*runs(path, args.runs, cached=False)))
        emit(f"{name}, from the cache", mix, spread(*runs(path, args.runs, cached=True)))
    if not args.skip_generated and not args.skip_big and not args.skip_generated_big:
        big = workload("r4x500", 4, 500)
        mix = describe(big)
        emit("generated (python noise), cold", mix, spread(*runs(big, args.runs, cached=False)))
        emit("generated (python noise), from the cache", mix, spread(*runs(big, args.runs, cached=True)))
    hta_sets = [(n, real_workload(n, REAL[n][2])) for n in names if REAL[n][2]]
    for folder, mb in captured(names if args.only is not None else None):
        if mb >= CAPTURED_BIG_MB:  # a big rank: cold and cached rows (HTA would need many GB)
            if not args.skip_big:
                emit(f"{folder.name} (as captured), cold", describe(folder),
                     spread(*runs(folder, args.runs, cached=False)))
                emit(f"{folder.name} (as captured), from the cache", describe(folder),
                     spread(*runs(folder, args.runs, cached=True)))
            continue
        hta_sets.append((f"{folder.name} (as captured)", folder))
        if folder.name in TWINS:
            hta_sets.append((f"{TWINS[folder.name]} replicated to the same size",
                             real_workload(TWINS[folder.name], round(mb, 1))))
    if not args.skip_generated:
        hta_sets.append(("generated (python noise)", workload("r4x50", 4, 50)))
    for name, path in hta_sets:
        mix = describe(path)
        walls, peaks = runs(path, args.runs, cached=False)
        ours = statistics.median(walls)
        result = spread(walls, peaks)
        if not args.skip_hta:
            h = hta(path, args.hta_python)
            ours_cpu = statistics.median(CPU_SECONDS[-1 - len(walls):-1]) if isinstance(h, tuple) else 0.0
            result += (f"; HTA {h[0]:.1f} s, CPU {CPU_SECONDS[-1]:.1f} s, peak {h[1]:.0f} MB: **{h[0] / ours:.1f}x** "
                       f"wall, {CPU_SECONDS[-1] / ours_cpu:.1f}x CPU" if isinstance(h, tuple) else f"; HTA {h}")
        emit(f"{name}, cold vs HTA 0.5.0 (parse + overlap + temporal breakdown, one run)", mix, result)
    if not args.skip_nsys:
        db = nsys_workload()
        mix = f"1 x {db.stat().st_size / 1e6:.0f} MB SQLite, 2 ranks; {_nsys_mix(db)}"
        emit("Nsight export (mfu_2gpu_before x200), cold", mix, spread(*runs(db, args.runs, cached=False)))
        emit("same, from the cache", mix, spread(*runs(db, args.runs, cached=True)))
    if not args.skip_floor and "fsdp_balanced" in big_sets:
        rank = next(real_workload("fsdp_balanced", 500).glob("rank0*"))
        ours, fl, events = floor(rank, args.runs)
        emit("parse of one fsdp_balanced rank (in-process) vs msgspec into 5-field structs",
             describe(rank.parent).split("; ")[1],
             f"{ours:.2f} s vs {fl:.2f} s = {ours / fl:.2f}x the floor ({events / 1e6:.2f} M events)")
    print(f"end: {load()}", file=sys.stderr)
    print(f"\n{load()}; runs: {args.runs} (median, min-max)\n")
    print("| workload | input, event mix | commscope |\n|---|---|---|")
    for what, mix, result in rows:
        print(f"| {what} | {mix} | {result} |")
    return 0


def _nsys_mix(db: Path) -> str:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        counts = {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")}
    finally:
        conn.close()
    k, r, n = (counts[t] / 1e6 for t in counts)
    return f"{k:.2f} M kernels, {r:.2f} M runtime calls, {n:.2f} M NVTX ranges"


if __name__ == "__main__":
    sys.exit(main())
