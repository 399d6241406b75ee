"""The history commands end to end on the real sample traces: history add, analyze --history, baselines,
compare --baseline (exit codes as compare's), trend formats, the job summary, and bad stores (exit 2, one line)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.analysis.units import ms_tables
from analyzer.compare.diff import compare
from analyzer.history.record import add, baseline_analysis
from analyzer.history.store import Store
from analyzer.history.summary import metric_rows
from tests import pg_server
from tests.helpers import ROOT, run

SAMPLES = ROOT / "sample_traces" / "gpu_h200"
BALANCED, HOST, COMPUTE = SAMPLES / "ddp_balanced", SAMPLES / "host_straggler", SAMPLES / "compute_straggler"


def cli(*args: str | Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analyzer.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def _listing() -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in SAMPLES.rglob("*")}


@pytest.fixture(scope="module")
def balanced():
    return run(BALANCED)


@pytest.fixture(scope="module")
def host():
    return run(HOST)


@pytest.fixture(scope="module")
def computed():
    return run(COMPUTE)


def test_add_baseline_and_compare_end_to_end(tmp_path):
    store = tmp_path / "h.sqlite"
    before = _listing()
    r = cli("history", "add", BALANCED, "--store", store, "--run", "base1", "--label", "branch=main", "--jobs", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"added run base1 to {store}"
    r = cli("analyze", HOST, "--history", store, "--run", "new1", "--label", "branch=pr", "--format", "json",
            "--jobs", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"] == "commscope.analysis/1"
    assert f"added run new1 to {store}" in r.stderr
    assert _listing() == before  # nothing written next to the traces
    r = cli("history", "baseline", "set", "main", "base1", "--store", store)
    assert (r.returncode, r.stdout.strip()) == (0, "baseline main: run base1")
    r = cli("history", "baseline", "list", "--store", store)
    assert r.stdout.split("\t")[:2] == ["main", "base1"]
    summary = tmp_path / "summary.md"
    # the same traces as the baseline: pass; another run with a host straggler: regression, as plain compare says
    same = cli("compare", "--baseline", "main", BALANCED, "--store", store, "--jobs", "1",
               env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert same.returncode == 0, same.stdout + same.stderr
    assert "baseline main: run base1" in same.stderr
    worse = cli("compare", "--baseline", "main", HOST, "--store", store, "--jobs", "1", "--junit", tmp_path / "j.xml",
                env={"GITHUB_STEP_SUMMARY": str(summary)})
    plain = cli("compare", BALANCED, HOST, "--jobs", "1")
    assert (worse.returncode, plain.returncode) == (1, 1), worse.stderr
    assert "<testsuite" in (tmp_path / "j.xml").read_text()
    md = summary.read_text()
    assert md.count("## commscope compare") == 2 and ":x:" in md and ":white_check_mark:" in md
    r = cli("history", "trend", "--store", store, "--format", "json", env={"GITHUB_STEP_SUMMARY": str(summary)})
    doc = json.loads(r.stdout)
    assert doc["schema"] == "commscope.trend/1"
    assert [x["run_id"] for x in doc["runs"]] == ["base1", "new1"]
    assert doc["runs"][0]["labels"] == {"branch": "main"}
    assert "## commscope trend" in summary.read_text()
    r = cli("history", "trend", "--store", store, "--label", "branch=pr", "--metric", "step_time_ms")
    assert r.returncode == 0 and "1 run(s)" in r.stdout and "step_time_ms" in r.stdout
    r = cli("history", "trend", "--store", store, "--format", "html", "-o", tmp_path / "t.html")
    html = (tmp_path / "t.html").read_text()
    assert r.returncode == 0 and "plotly" in html and "<script" in html and "step_time_ms" in html


@pytest.mark.parametrize("pair", ["compute-host", "balanced-host"])
def test_compare_from_the_store_is_compare_from_the_traces(tmp_path, balanced, host, computed, pair):
    """Every delta, p-value and verdict of compare --baseline equals the live compare of the same runs
    (compute vs host straggler: bus bandwidth per size and the no_straggler prediction are compared too)."""
    if pair == "compute-host":
        balanced = computed
    store = str(tmp_path / "h.sqlite")
    rid = add(store, balanced, "b")
    with Store.open(store) as s:
        s.set_baseline("main", rid)
    stored, got = baseline_analysis(store, "main")
    assert got == "b"
    live, from_store = compare(balanced, host), compare(stored, host)
    fields = ("metric", "scope", "before", "after", "n_before", "n_after", "p_value", "regressed")
    for a, b in zip(live.deltas, from_store.deltas, strict=True):
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert len(live.dimensions) > 0
    if pair == "compute-host":
        assert len(live.bandwidth) == 1 and live.straggler.prediction is not None
    assert dataclasses.astuple(live.straggler) == dataclasses.astuple(from_store.straggler)
    assert live.passed == from_store.passed is False
    # the other direction: the stored run as NEW
    assert [d.p_value for d in compare(host, stored).deltas] == [d.p_value for d in compare(host, balanced).deltas]


def test_summary_rows_are_the_analysis_numbers(balanced):
    rows = metric_rows(balanced)
    def one(metric, **keys):
        sel = rows.filter(rows["metric"] == metric)
        for k in ("rank", "step", "dimension", "op", "size_bucket", "intra_node", "item"):
            sel = sel.filter(sel[k] == keys[k]) if k in keys else sel.filter(sel[k].is_null())
        assert sel.height == 1, (metric, keys, sel)
        return sel["value"][0]
    t = ms_tables(balanced)  # the stored values are the JSON's ms
    r1 = t.ranks.filter(t.ranks["rank"] == 1).row(0, named=True)
    assert one("exposed_comm_ms", rank=1) == r1["exposed_comm_ms"]
    assert one("step_time_ms", rank=1) == r1["step_time_mean_ms"]
    st = t.steps.row(0, named=True)
    assert one("exposed_wait_ms", rank=st["rank"], step=st["step"]) == st["exposed_wait_ms"]
    # run level: median over steps of the per-step mean across ranks, by brute force
    import statistics
    per_step = {}
    for s in t.steps.to_dicts():
        per_step.setdefault(s["step"], []).append(s["span_ms"])
    assert one("step_time_ms") == pytest.approx(statistics.median(statistics.fmean(v) for v in per_step.values()))
    bw = t.bandwidth.row(0, named=True)
    assert one("busbw_gbps_p50", op=bw["op"], size_bucket=bw["size_bucket"], intra_node=int(bw["intra_node"])) == \
        bw["busbw_gbps_p50"]
    n_sized = balanced.collectives.filter(balanced.collectives["busbw_gbps"].is_not_null()).height
    assert rows.filter(rows["metric"] == "instance_busbw_gbps").height == n_sized
    sc = balanced.whatif.scenarios.row(0, named=True)
    assert one("whatif_step_time_ms", item=sc["name"]) == sc["step_time_ns"] / 1e6


@pytest.mark.parametrize("content", [b"plain text, not a store\n", b"SQLite format 3\x00" + b"\x00\xff" * 3000])
def test_bad_store_is_one_line_and_exit_2(tmp_path, content):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(content)
    for args in (("history", "trend", "--store", bad), ("history", "add", BALANCED, "--store", bad),
                 ("analyze", BALANCED, "--history", bad), ("compare", "--baseline", "main", BALANCED, "--store", bad),
                 ("history", "baseline", "list", "--store", bad)):
        r = cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert str(bad) in r.stderr
    assert bad.read_bytes() == content


def test_usage_errors_exit_2(tmp_path):
    store = tmp_path / "h.sqlite"
    r = cli("history", "trend", "--store", store)
    assert r.returncode == 2 and "no history store here" in r.stderr and not store.exists()
    r = cli("history", "add", BALANCED, "--store", store, "--label", "nokey")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    r = cli("compare", "--baseline", "main", BALANCED, HOST)
    assert r.returncode == 2 and "one path" in r.stderr
    assert cli("history", "add", BALANCED, "--store", store, "--run", "x", "--jobs", "1").returncode == 0
    r = cli("history", "add", BALANCED, "--store", store, "--run", "x", "--jobs", "1")
    assert r.returncode == 2 and "already stored" in r.stderr
    r = cli("compare", "--baseline", "nope", BALANCED, "--store", store)
    assert r.returncode == 2 and "no baseline 'nope'" in r.stderr
    r = cli("history", "trend", "--store", store, "--metric", "no_such_metric")
    assert r.returncode == 2 and "no_such_metric" in r.stderr
    r = cli("history", "trend", "--store", store, "--since", "yesterday")
    assert r.returncode == 2 and "--since" in r.stderr


def test_default_store_is_the_environment_variable(tmp_path):
    store = tmp_path / "env.sqlite"
    r = cli("history", "add", BALANCED, "--run", "e1", "--jobs", "1", env={"COMMSCOPE_HISTORY": str(store)})
    assert r.returncode == 0, r.stderr
    with Store.open(str(store), create=False) as s:
        assert s.runs()["run_id"].to_list() == ["e1"]


@pytest.fixture(scope="module")
def pg_cluster():
    yield from pg_server.cluster()


def test_postgres_end_to_end(pg_cluster):
    url = pg_server.fresh_database(pg_cluster)
    assert cli("history", "add", BALANCED, "--store", url, "--run", "p1", "--jobs", "1").returncode == 0
    assert cli("history", "baseline", "set", "main", "p1", "--store", url).returncode == 0
    r = cli("compare", "--baseline", "main", BALANCED, "--store", url, "--jobs", "1")
    assert r.returncode == 0, r.stderr
    r = cli("compare", "--baseline", "main", HOST, "--store", url, "--jobs", "1")
    assert r.returncode == 1, r.stderr


def test_history_dashboard_command_defaults_and_bad_store(tmp_path):
    r = cli("history", "dashboard", "--help")
    assert r.returncode == 0 and "127.0.0.1" in r.stdout and "8050" in r.stdout
    r = cli("history", "dashboard", "--store", tmp_path / "absent.sqlite")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no history store here" in r.stderr
