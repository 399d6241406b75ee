"""Mutation testing of the metric and cross-rank modules with mutmut; reports surviving mutants per module.

    pip install -e '.[mutation]'
    python benchmarks/mutation.py [--modules analyzer/metrics/waits.py ...] [--minutes 20] [--jobs 2]

Each module is mutated on its own in a scratch copy of the project (nothing is written to the worktree),
against a fast, targeted test subset (``TESTS``: generated traces with exact truth plus the shipped real
traces), each module time-boxed. Not part of the test suite: it takes minutes per module. Prints, per
module: mutants, killed, survived, timed out, not checked, then every survivor's diff.

mutmut runs the mutants cheapest first: by the summed duration of the tests that reach their function,
ties in file order. Most functions of a module are reached by the same tests, so a time box cuts off
whole functions at the end of the file (``waits.rank_table``'s mutants were never run for that reason,
not for want of tests). With ``--keep DIR`` a second run over the same DIR resumes: mutants with a result
keep it, and ``--mutants 'analyzer.metrics.waits.x_rank_table*'`` runs a chosen function first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = (
    "analyzer/metrics/overlap.py",
    "analyzer/metrics/waits.py",
    "analyzer/metrics/stragglers.py",
    "analyzer/metrics/blame.py",
    "analyzer/crossrank/match.py",
    "analyzer/crossrank/align.py",
    "analyzer/crossrank/graph.py",
    "analyzer/whatif/replay.py",
)
# fast, and every number they check has an independent truth (generator, brute force)
TESTS = (
    "tests/test_pinned_fields.py",
    "tests/test_synthetic_crossrank.py",
    "tests/test_blame.py",
    "tests/test_verdict_rules.py",
    "tests/test_pinned_real.py::test_whole_window_fields_match_brute_force[gpu_h200/fsdp_balanced]",
    "tests/test_pinned_real.py::test_whole_window_fields_match_brute_force[gpu_h200/hybrid_tp_dp]",
)
COPY = ("analyzer", "sample_traces", "tests", "dashboards", "pyproject.toml")
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", 37: "killed", None: "not checked"}


def _scratch(base: Path) -> Path:
    """A copy of the project (sources, tests, shipped traces) with ../shared pointing at the real one.

    An existing copy (``--keep`` of an earlier run) is reused as it is, so mutmut resumes where it stopped."""
    proj = base / "commscope"
    if (proj / "mutants").is_dir():
        return proj
    proj.mkdir(parents=True)
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, proj / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, proj / name)
    shared = ROOT.parent / "shared"
    if shared.exists():
        # tests look for ../shared/traces beside their project root, which mutmut makes commscope/mutants
        (proj / "shared").symlink_to(shared)
    return proj


def _config(proj: Path, module: str, tests: tuple[str, ...]) -> None:
    """mutmut reads [tool.mutmut] from pyproject.toml first, so the copy's table is replaced by setup.cfg's."""
    py = proj / "pyproject.toml"
    py.write_text(re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[|\Z)", "", py.read_text()))
    lines = "\n    ".join(tests)
    (proj / "setup.cfg").write_text(
        "[mutmut]\nsource_paths=analyzer/\n"
        f"only_mutate={module}\n"
        "also_copy=\n    sample_traces/\n    dashboards/\n"
        f"pytest_add_cli_args_test_selection=\n    {lines}\n"
        "pytest_add_cli_args=\n    -p\n    no:cacheprovider\n    -x\n    -q\n"
        "process_isolation=forkserver\n"
    )


def _results(proj: Path, module: str) -> dict[str, int | None]:
    meta = proj / "mutants" / (module + ".meta")
    if not meta.exists():
        return {}
    return json.loads(meta.read_text()).get("exit_code_by_key", {})


def _functions(path: Path) -> dict[str, str]:
    """Source of every function in mutmut's mutated copy of a module, by name."""
    import ast

    text = path.read_text()
    lines = text.splitlines()
    return {n.name: "\n".join(lines[n.lineno - 1:n.end_lineno]) for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _show(proj: Path, name: str, module: str = "", funcs: dict[str, str] | None = None) -> str:
    """The mutant's diff: read from the mutated module (fast); ``mutmut show`` (a process per mutant) otherwise."""
    short = name.rsplit(".", 1)[-1]
    orig = short.split("__mutmut_")[0] + "__mutmut_orig"
    if funcs and short in funcs and orig in funcs:
        import difflib

        diff = difflib.unified_diff(funcs[orig].splitlines()[1:], funcs[short].splitlines()[1:], lineterm="", n=0)
        body = [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        return f"# {name}: survived\n--- {module}\n+++ {module}\n" + "\n".join(body)
    out = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=proj, capture_output=True, text=True)
    return out.stdout.strip()


def run_module(base: Path, module: str, minutes: float, jobs: int, tests: tuple[str, ...],
               only: tuple[str, ...] = ()) -> dict:
    proj = _scratch(base / Path(module).stem)
    _config(proj, module, tests)
    if only and (proj / "mutants" / (module + ".meta")).exists():
        # resuming: mutmut reruns every mutant named on its command line, so name only those without a result
        only = tuple(k for k, c in _results(proj, module).items() if c is None and any(fnmatch(k, p) for p in only))
        if not only:
            return _summary(proj, module, 0, False, "")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *only]
    proc = subprocess.Popen(cmd, cwd=proj, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=minutes * 60)
        boxed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # the session mutmut and its workers run in, nothing else
        try:
            log, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            log, _ = proc.communicate()
        boxed = True
    return _summary(proj, module, round(time.monotonic() - start), boxed, log)


def _summary(proj: Path, module: str, seconds: int, boxed: bool, log: str) -> dict:
    codes = _results(proj, module)
    counts: dict[str, int] = {}
    for code in codes.values():
        status = STATUS.get(code, "suspicious")
        counts[status] = counts.get(status, 0) + 1
    survivors = sorted((k for k, c in codes.items() if STATUS.get(c) == "survived"),
                       key=lambda k: (k.split("__mutmut_")[0], int(k.rsplit("_", 1)[-1])))
    mutated = proj / "mutants" / module
    funcs = _functions(mutated) if survivors and mutated.exists() else None
    return {
        "module": module,
        "seconds": seconds,
        "time_boxed": boxed,
        "mutants": len(codes),
        **counts,
        "survivors": {k: _show(proj, k, module, funcs) for k in survivors},
        "log_tail": (log or "")[-1500:] if not codes else "",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modules", nargs="*", default=[m for m in MODULES if (ROOT / m).exists()])
    p.add_argument("--tests", nargs="*", default=list(TESTS))
    p.add_argument("-k", dest="select", help="pytest -k expression narrowing the tests (fewer tests per survivor)")
    p.add_argument("--minutes", type=float, default=20.0, help="time box per module")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--mutants", nargs="*", default=[],
                   help="only these mutants (fnmatch patterns, e.g. 'analyzer.metrics.waits.x_exposed_split*')")
    p.add_argument("--keep", type=Path, help="scratch folder to use and keep (default: a temporary one)")
    p.add_argument("--json", type=Path, help="write the results here too")
    a = p.parse_args(argv)
    if shutil.which("mutmut") is None and subprocess.run([sys.executable, "-m", "mutmut", "--version"],
                                                         capture_output=True).returncode:
        print("error: mutmut is not installed; pip install -e '.[mutation]'", file=sys.stderr)
        return 2
    base = a.keep or Path(tempfile.mkdtemp(prefix="commscope-mutation-"))
    results = []
    for module in a.modules:
        tests = (*a.tests, "-k", a.select) if a.select else tuple(a.tests)
        r = run_module(base, module, a.minutes, a.jobs, tests, tuple(a.mutants))
        results.append(r)
        counts = ", ".join(f"{k} {r.get(k, 0)}" for k in ("killed", "survived", "timeout", "no tests", "not checked"))
        boxed = " (time box reached)" if r["time_boxed"] else ""
        print(f"{module}: {r['mutants']} mutants: {counts}; {r['seconds']} s{boxed}", flush=True)
        for name, diff in r["survivors"].items():
            print(f"  survived: {name}\n" + "\n".join("    " + line for line in diff.splitlines()), flush=True)
        if r["log_tail"]:
            print("  mutmut produced no results:\n" + r["log_tail"], flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=2) + "\n")
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
