"""Time and peak memory of hostile inputs (issue #32): padding must cost linear time at parser speed, a gzip bomb
must be refused in seconds with bounded memory, and the JSON depth check must stay cheap.

    python benchmarks/hostile_inputs.py [--runs 3] [--mib 20,100,300]

Each measurement runs in a fresh process (``commscope analyze FILE --no-cache -j 1 --format json``, killed after
``--timeout``; GNU ``time`` measures its peak RSS); prints the median wall time, the spread, the peak RSS and the
exit code per input.
Inputs are built from rank 0 of ``sample_traces/gpu_h200/hybrid_tp_dp`` in a temporary folder
(the 300 MiB ones take a minute to write).
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import hostile_mutations as hm  # noqa: E402


def measure(path: Path, runs: int, timeout: float) -> tuple[float, float, float, int, int]:
    """Median, min and max seconds, peak RSS (MB) and exit code of ``commscope analyze`` on ``path``; a run past
    ``timeout`` is killed (its whole process group) and counts as exit 124."""
    times, peaks, code = [], [], 0
    for _ in range(runs):
        t = time.perf_counter()
        # GNU time reports the command's own peak: a child forked from this process would inherit its RSS
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "analyzer.cli", "analyze", str(path),
                                 "--no-cache", "-j", "1", "--format", "json"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        while True:
            if proc.poll() is not None:
                code = proc.returncode  # GNU time passes the command's exit code on
                break
            if time.perf_counter() - t > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = 124
                break
            time.sleep(0.01)
        times.append(time.perf_counter() - t)
        last = (proc.stderr.read() if proc.stderr else "").strip().splitlines()[-1:]
        peaks.append(int(last[0]) // 1024 if last and last[0].isdigit() else 0)
    return statistics.median(times), min(times), max(times), max(peaks), code


def build(folder: Path, mibs: list[int]) -> list[tuple[str, Path]]:
    """The inputs, written to ``folder``; its big buffers are freed on return (a child forked from a process
    keeps that process's peak RSS as its own ru_maxrss)."""
    raw = gzip.decompress(hm.RANK0.read_bytes())
    cases: list[tuple[str, Path]] = [("real rank (2.7 MB inflated)", hm.RANK0)]
    for mib in mibs:
        padded = raw.replace(b'"traceEvents": [', b'"traceEvents": [' + b" " * (mib << 20), 1)
        for gz in (False, True):
            path = folder / f"pad{mib}{'.gz' if gz else ''}" / (hm.STEM + (".pt.trace.json.gz" if gz else
                                                                            ".pt.trace.json"))
            path.parent.mkdir()
            path.write_bytes(gzip.compress(padded, 6) if gz else padded)
            cases.append((f"{mib} MiB padding after '[', {'gzip' if gz else 'plain'}", path))
    bomb = folder / "bomb"
    bomb.mkdir()
    cases.append(("gzip bomb: 2.3 MB -> 2.24 GiB of whitespace", hm.gz_bomb(2405 << 20)(bomb)))
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", default="20,100,300")
    ap.add_argument("--timeout", type=float, default=120, help="seconds before a run counts as a hang (exit 124)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cs-hostile-") as tmp:
        cases = build(Path(tmp), [int(m) for m in args.mib.split(",")])
        print(f"{'input':48} {'median s':>9} {'min-max s':>13} {'peak MB':>8} {'exit':>5}")
        for name, path in cases:
            med, lo, hi, peak, code = measure(path, args.runs, args.timeout)
            print(f"{name:48} {med:9.2f} {lo:6.2f}-{hi:<6.2f} {peak:8d} {code:5d}", flush=True)
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
