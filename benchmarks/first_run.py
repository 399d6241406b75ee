"""The first ``analyze`` after ``pip install`` against the runs after it, in a fresh virtual environment.

    python -m benchmarks.first_run INPUT... [--runs 3] [--venv /tmp/commscope-first-run] [--keep]

A copy of this checkout (no VCS data, no build output, no compiled extension, no numba cache, no bytecode) is
installed with ``pip install`` (not editable, as a user or a CI job installs it) into a new virtual environment.
Then, for each input, the installed ``commscope analyze INPUT --format json`` runs ``--runs`` + 1 times, each on
an empty cache directory (so every run parses and analyzes): the first run is the one a user gets right after
installing (anything compiled on first use is compiled there), the others are later runs. Each run is timed with
``bench.measure`` (wall, CPU seconds of the process tree, peak RSS). The issue's bar: the first run within 10% of
the later ones' median. Issue #41 measures it on the 1,024-rank generated job and the 4 x 500 MB heavy set.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench import CPU_SECONDS, measure

ROOT = Path(__file__).resolve().parents[1]
_JUNK = {".git", ".venv", "venv", "build", "dist", "out", "test-artifacts", ".commscope-cache", ".whl", ".gl",
         ".pytest_cache", ".ruff_cache", "__pycache__", "data"}


def _copy(dest: Path) -> Path:
    """This checkout as a fresh clone has it: nothing built, compiled or cached."""
    def ignore(_folder: str, entries: list[str]) -> set[str]:
        return {e for e in entries if e in _JUNK or e.endswith((".egg-info", ".so", ".pyd", ".nbi", ".nbc", ".pyc"))}

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    return dest


def install(venv: Path) -> float:
    """A new virtual environment with this checkout installed; the seconds the install took."""
    shutil.rmtree(venv, ignore_errors=True)
    src = _copy(Path(tempfile.mkdtemp(prefix="commscope-src-")) / "commscope")
    base = getattr(sys, "_base_executable", sys.executable)
    t = time.perf_counter()
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(src)], check=True, env=env)
    shutil.rmtree(src.parent, ignore_errors=True)
    return time.perf_counter() - t


def runs(venv: Path, path: Path, n: int) -> list[tuple[float, float, float]]:
    """(wall, CPU, peak MB) of n + 1 runs, the first right after the install, each on an empty cache."""
    out = []
    cmd = [str(venv / "bin" / "commscope"), "analyze", str(path), "--format", "json", "-o", os.devnull]
    for _ in range(n + 1):
        cache = Path(tempfile.mkdtemp(prefix="commscope-first-run-cache-"))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["COMMSCOPE_CACHE_DIR"] = str(cache)
        try:
            wall, peak = measure(cmd, env, cwd=Path(tempfile.gettempdir()))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        out.append((wall, CPU_SECONDS[-1], peak))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("inputs", nargs="+", type=Path)
    ap.add_argument("--runs", type=int, default=3, help="runs after the first")
    ap.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "commscope-first-run")
    ap.add_argument("--keep", action="store_true", help="keep the environment")
    a = ap.parse_args()
    took = install(a.venv)
    print(f"installed into {a.venv} in {took:.0f} s; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
          file=sys.stderr)
    print("| input | first run after install | later runs (median, min-max) | first / later |\n|---|---|---|---|")
    try:
        for path in a.inputs:
            (w0, c0, p0), *later = runs(a.venv, path, a.runs)
            lw, lc = [r[0] for r in later], [r[1] for r in later]
            print(f"| {path} | {w0:.2f} s, CPU {c0:.2f} s, peak {p0:.0f} MB | {statistics.median(lw):.2f} s "
                  f"({min(lw):.2f}-{max(lw):.2f}), CPU {statistics.median(lc):.2f} s ({min(lc):.2f}-{max(lc):.2f}), "
                  f"peak {max(r[2] for r in later):.0f} MB | {w0 / statistics.median(lw):.2f}x wall, "
                  f"{c0 / statistics.median(lc):.2f}x CPU |", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(a.venv, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
