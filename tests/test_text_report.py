"""The default text report fits a 100-column terminal with whole headers; --wide has every column."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT, SAMPLES

HYBRID = SAMPLES / "gpu_h200" / "hybrid_tp_dp"


def _analyze(*extra: str, columns: int = 100) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    res = subprocess.run([sys.executable, "-m", "analyzer.cli", "analyze", str(HYBRID), *extra], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _header(out: str, title: str) -> str:
    lines = out.splitlines()
    return lines[lines.index(next(ln for ln in lines if ln.startswith(title))) + 1]


def test_default_report_fits_100_columns_with_whole_headers() -> None:
    out = _analyze("--steps")
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "…" not in out  # rich marks every cut header or cell with an ellipsis
    assert _header(out, "Per rank, ms").split() == ["rank", "step", "compute", "comm", "overlap", "%", "exposed",
                                                    "exposed", "wait", "idle", "caused", "wait"]
    assert "exposed wait" in _header(out, "Per step, ms") and "caused wait" in _header(out, "Per step, ms")
    # (the max above covers the headline too: wrapped at 140 its first line had 139 characters)
    lines = out.splitlines()
    assert any(ln.startswith("Straggler: rank 3") for ln in lines)
    import json

    caused = next(r for r in json.loads(_analyze("--format", "json"))["ranks"] if r["rank"] == 3)["caused_wait_ms"]
    assert caused > 900  # rank 3 is the straggler: the others waited for it about 60 ms per collective
    rank3 = next(ln for ln in lines if ln.split()[:1] == ["3"] and f"{caused:,.1f}" in ln)
    assert rank3.split()[-1] == f"{caused:,.1f}"


def test_wide_report_has_every_column_uncut() -> None:
    out = _analyze("--wide")
    header = _header(out, "Per rank, ms")
    for label in ("steps", "exposed transfer", "last arrival %", "wait"):
        assert label in header
    assert "…" not in out
    # the prose still wraps at the terminal; only the tables are wider
    prose = [ln for ln in out.splitlines() if ln.startswith(("Straggler", "Communication", "warning"))]
    assert prose and max(len(ln) for ln in prose) <= 100


def test_numbers_fit_their_columns_by_switching_units() -> None:
    # op tables of long steps carry per-rank totals of millions of ms: a column whose values need more than five
    # digits before the point reads in seconds, and no number is ever cut (before: "1,994,83..." at 100 columns)
    import io

    from rich.console import Console

    from analyzer.report.text import RANK_COLUMNS, _table

    rows = [{"rank": r, "step_time_mean_ms": 46_649.2, "compute_ms": 1_994_834.5 - r, "comm_ms": 49_540.7,
             "overlap_pct": 0.1, "exposed_comm_ms": 1_204_412.1, "exposed_wait_ms": 1_168_610.0, "idle_ms": 8_181.3,
             "caused_wait_ms": 2_465_312.9} for r in range(4)]
    buf = io.StringIO()
    Console(file=buf, width=100, no_color=True).print(_table("Per rank, ms", RANK_COLUMNS, rows))
    out = buf.getvalue()
    assert "…" not in out and "..." not in out
    assert "1,994.8" in out and "2,465.3" in out and "46,649.2" in out  # s where needed, ms where they fit
    assert "(s)" in out
