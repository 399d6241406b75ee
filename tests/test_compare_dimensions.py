"""compare names a per-dimension regression: "TP exposed comm"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sample_traces.generate import Collective, Scenario, build, default_groups, write_kineto
from tests.helpers import cli


def _run(folder: Path, tp_transfer_ns: int) -> Path:
    names = {2: "mesh_tp", 4: "mesh_dp_replicate", 8: "default_pg"}
    pgs = tuple(replace(pg, desc=names[len(pg.ranks)]) for pg in default_groups(8, 2))
    tp = tuple(pg.name for pg in pgs if len(pg.ranks) == 2)
    dp = tuple(pg.name for pg in pgs if len(pg.ranks) == 4)
    cols = (Collective("all_reduce", 4 << 20, tp_transfer_ns, tp), Collective("all_reduce", 32 << 20, 150_000, dp))
    write_kineto(build(Scenario(ranks=8, steps=4, tp=2, process_groups=pgs, collectives=cols, overlap=0.0)), folder)
    return folder


def test_tp_exposed_comm_regression_is_named(tmp_path: Path) -> None:
    base = _run(tmp_path / "base", 60_000)
    new = _run(tmp_path / "new", 400_000)
    res = cli("compare", base, new, "--no-cache", "-j", "1")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "TP exposed comm [exposed_comm_ms] (TP)" in res.stdout
    assert "DP exposed comm" not in res.stdout.split("Per parallelism dimension")[0]  # DP did not regress
    md = cli("compare", base, new, "--format", "markdown", "--no-cache", "-j", "1").stdout
    assert "### Per parallelism dimension" in md and "| TP exposed comm | TP |" in md
    import json

    doc = json.loads(cli("compare", base, new, "--format", "json", "--no-cache", "-j", "1").stdout)
    tp = [d for d in doc["dimensions"] if d["scope"] == "TP" and d["metric"] == "exposed_comm_ms"]
    assert tp and tp[0]["regressed"] and tp[0]["after"] > tp[0]["before"]
    dp = [d for d in doc["dimensions"] if d["scope"] == "DP" and d["metric"] == "exposed_comm_ms"]
    assert dp and not dp[0]["regressed"]
