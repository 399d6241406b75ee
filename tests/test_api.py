"""The Python API: ``analyzer.analyze(path)`` is the Analysis the CLI renders, with Polars tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import analyzer
from analyzer.errors import CommscopeError
from analyzer.report.json import render as render_json
from tests.conftest import ROOT, SAMPLES
from tests.helpers import cli

HYBRID = SAMPLES / "gpu_h200" / "hybrid_tp_dp"


def test_analyze_is_what_the_cli_renders() -> None:
    a = analyzer.analyze(str(HYBRID), jobs=1, cache=False)
    for table in (a.ranks, a.steps, a.collectives, a.bandwidth, a.ranking):
        assert isinstance(table, pl.DataFrame)
    assert a.ranks["rank"].to_list() == [0, 1, 2, 3]
    assert a.verdict is not None and a.verdict.rank == 3 and a.verdict.kind == "host"
    res = cli("analyze", HYBRID, "--format", "json", "--no-cache")
    assert res.returncode == 0, res.stderr
    assert json.loads(render_json(a)) == json.loads(res.stdout)


def test_keyword_options() -> None:
    a = analyzer.analyze(HYBRID, ranks=[0, 3], step_marker=r"^ProfilerStep#[23]$", jobs=1, cache=False)
    assert a.source["ranks"] == [0, 3]
    assert sorted(set(a.steps["step"].to_list())) == [2, 3]
    assert a.ranks["steps"].to_list() == [2, 2]


def test_bad_input_raises_the_library_error(tmp_path) -> None:
    with pytest.raises(CommscopeError, match="does not exist"):
        analyzer.analyze(tmp_path / "nope")
    with pytest.raises(CommscopeError, match="step_marker"):
        analyzer.analyze(HYBRID, step_marker="(")


def test_import_is_cheap() -> None:
    # parse workers import the package: it must not pull polars & co. in before they are needed
    code = "import sys, analyzer; print(sorted(m for m in ('polars', 'numpy', 'msgspec', 'rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def _unguarded_script(tmp_path: Path, setup: str = "") -> subprocess.CompletedProcess[str]:
    """Run a script with no ``if __name__ == "__main__":`` guard that analyzes a real 8-rank set in 2 workers."""
    folder = SAMPLES / "real_parallel" / "tp_dp_mps_slow"
    script = tmp_path / "job.py"
    script.write_text(
        "import analyzer, analyzer.ingest.loader\n" + setup +
        f"a = analyzer.analyze({str(folder)!r}, jobs=2, cache=False)\n"
        "print('ranks', a.ranks.height, 'verdict', a.verdict.rank)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines() == ["ranks 8 verdict 5"]
    return out


def test_a_script_without_a_main_guard_can_use_worker_processes(tmp_path: Path) -> None:
    # workers must not re-run the caller's script (they would start workers of their own and fail)
    _unguarded_script(tmp_path)


def test_a_script_without_a_main_guard_with_recycled_workers(tmp_path: Path) -> None:
    # every task in a fresh worker (as for big files): a worker replaced while the pool shuts down must not
    # re-run the script either (it did: tracebacks on stderr from a late replacement, the result still right)
    out = _unguarded_script(tmp_path, "analyzer.ingest.loader._RECYCLE_BYTES = 0\nanalyzer.ingest.loader._CHUNK_FILES = 1\n")
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
