"""Plant the bugs of issue 17 one at a time in a scratch copy and show which fast tests catch each.

    python benchmarks/planted_bugs.py [NAME_PREFIX ...]

Nothing is written to the worktree. Each bug must fail at least one test; the script exits 1 if one does not.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OVERLAP, WAITS = "analyzer/metrics/overlap.py", "analyzer/metrics/waits.py"
END_SKEW = '(pl.col("a_end_ns").max() - pl.col("a_end_ns").min()).alias("end_skew_ns")'
BUGS = {
    "1 exposed = comm (overlap ignored)": (OVERLAP, '"exposed_comm_ns": comm - overlapped', '"exposed_comm_ns": comm'),
    "2 exposed wait and transfer swapped": (WAITS, '"exposed_wait_ns": ew, "exposed_transfer_ns": transfer',
                                            '"exposed_wait_ns": transfer, "exposed_transfer_ns": ew'),
    "3a max_wait as min": (WAITS, 'pl.col("wait_ns").max().alias("max_wait_ns")',
                           'pl.col("wait_ns").min().alias("max_wait_ns")'),
    "3b total_wait as max": (WAITS, 'pl.col("wait_ns").sum().alias("total_wait_ns")',
                             'pl.col("wait_ns").max().alias("total_wait_ns")'),
    "3c end_skew on unaligned ends": (WAITS, END_SKEW, END_SKEW.replace("a_end_ns", "end_ns")),
    "3d end_skew always zero": (WAITS, END_SKEW, END_SKEW.replace(".min()", ".max()")),
    "4 idle = span - |comm u compute|": (OVERLAP, '"idle_ns": span - busy', '"idle_ns": span - cc'),
    "5 compute-only = compute": (OVERLAP, '"compute_only_ns": compute - overlapped', '"compute_only_ns": compute'),
}
TESTS = ["tests/test_pinned_fields.py", "tests/test_pinned_real.py", "-k",
         "not test_whole_window or gpu_h200 or trace_filter or b200 or mi300"]


def main(argv: list[str]) -> int:
    missed = []
    with tempfile.TemporaryDirectory(prefix="commscope-planted-") as tmp:
        base = Path(tmp)
        if (ROOT.parent / "shared").exists():
            (base / "shared").symlink_to(ROOT.parent / "shared")  # tests find ../shared/traces beside the copy
        for name, (path, old, new) in BUGS.items():
            if argv and not any(name.startswith(a) for a in argv):
                continue
            proj = base / "commscope"
            shutil.rmtree(proj, ignore_errors=True)
            shutil.copytree(ROOT, proj, ignore=shutil.ignore_patterns(".git", "__pycache__", "mutants", ".*cache"))
            src = proj / path
            text = src.read_text()
            if text.count(old) != 1:
                print(f"## {name}: the code changed, cannot plant (update BUGS)")
                missed.append(name)
                continue
            src.write_text(text.replace(old, new))
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS], cwd=proj,
                               capture_output=True, text=True)
            failed = [line.split(" - ")[0].removeprefix("FAILED ") for line in r.stdout.splitlines()
                      if line.startswith("FAILED")]
            print(f"## {name}: {len(failed)} tests fail", flush=True)
            for line in failed:
                print("   ", line, flush=True)
            if not failed:
                missed.append(name)
    if missed:
        print("not caught: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
