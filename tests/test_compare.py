"""commscope compare: significance, thresholds, straggler changes, exit codes, JUnit — on generated and real traces."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from analyzer.analysis import analyze
from analyzer.compare import thresholds
from analyzer.compare.diff import compare, mann_whitney_p
from analyzer.errors import UsageError
from analyzer.ingest.loader import LoadOptions, load
from sample_traces.generate import Scenario, build, write_kineto
from tests.helpers import cli

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
STEPS = 8  # enough repeated measurements for the exact test to reach 95% (4 per side is the minimum)
COMPUTE = (300_000, 250_000, 200_000, 150_000)
LATE_NS = 300_000


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Generated 4-rank Kineto runs whose differences are known exactly."""
    root = tmp_path_factory.mktemp("runs")
    scenarios = {
        "balanced": Scenario(ranks=4, steps=STEPS, compute_ns=COMPUTE),
        "balanced_rerun": Scenario(ranks=4, steps=STEPS, compute_ns=COMPUTE, seed=7),  # other jitter only
        "late": Scenario(ranks=4, steps=STEPS, compute_ns=COMPUTE, late_ranks={2: (LATE_NS, "host")}),
        "slow_compute": Scenario(ranks=4, steps=STEPS, compute_ns=tuple(c * 6 // 5 for c in COMPUTE)),
        "two_ranks": Scenario(ranks=2, steps=STEPS, compute_ns=COMPUTE),
    }
    out = {}
    for name, sc in scenarios.items():
        write_kineto(build(sc), root / name)
        out[name] = root / name
    return out


def compare_json(base: Path, new: Path, *extra: str | Path) -> tuple[int, dict]:
    res = cli("compare", base, new, "--format", "json", *extra)
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, json.loads(res.stdout)


def find(deltas: list[dict], metric: str, scope: str = "overall") -> dict:
    return next(d for d in deltas if d["metric"] == metric and d["scope"] == scope)


# ------------------------------------------------------------------------------------------ statistics


def test_mann_whitney_exact_and_ties() -> None:
    assert mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)  # complete separation, exact
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)  # 3 vs 3 can never reach 95%
    assert mann_whitney_p([1.0] * 5, [1.0] * 5) == 1.0
    assert mann_whitney_p([1.0], [2.0, 3.0]) is None
    p = mann_whitney_p(list(range(30)), [x + 15 for x in range(30)])  # large: normal approximation
    assert 0 < p < 1e-3


# ------------------------------------------------------------------------------------------ thresholds


def test_threshold_specs() -> None:
    metric, rule = thresholds.parse_fail_on("exposed_comm_ms=+5%")
    assert metric == "exposed_comm_ms" and rule.relative and rule.worse == 1 and rule.amount == 5
    assert rule.exceeded(100.0, 105.1) and not rule.exceeded(100.0, 104.9) and not rule.exceeded(100.0, 50.0)
    _, pts = thresholds.parse_fail_on("overlap_pct=-5")
    assert not pts.relative and pts.exceeded(60.0, 54.0) and not pts.exceeded(60.0, 56.0)
    assert thresholds.parse_fail_on("idle_ms=off") == ("idle_ms", None)
    for bad in ("nope=+5%", "exposed_comm_ms", "exposed_comm_ms=5%", "exposed_comm_ms=+x"):
        with pytest.raises(UsageError):
            thresholds.parse_fail_on(bad)


def test_threshold_toml(tmp_path: Path) -> None:
    f = tmp_path / "gate.toml"
    f.write_text('confidence = 0.99\nstraggler = false\n[fail_on]\nstep_time_ms = "+2%"\nbusbw_gbps = "off"\n'
                 "overlap_pct = -3\n")
    th = thresholds.build(["step_time_ms=+3%"], f)  # options override the file
    assert th.confidence == 0.99 and not th.straggler
    assert th.rule("step_time_ms").spec() == "+3%" and th.rule("busbw_gbps") is None
    assert th.rule("overlap_pct").spec() == "-3" and th.rule("exposed_wait_ms").spec() == "+10%"  # default kept
    (tmp_path / "bad.toml").write_text("[fail_on\n")
    with pytest.raises(UsageError, match="bad.toml"):
        thresholds.load_toml(tmp_path / "bad.toml")


# ------------------------------------------------------------------------------------------ end to end


def test_run_against_itself_passes(runs: dict[str, Path]) -> None:
    rc, doc = compare_json(runs["balanced"], runs["balanced"])
    assert rc == 0 and doc["passed"] and doc["regressions"] == []
    assert not any(d["exceeded"] for d in doc["overall"] + doc["ranks"] + doc["bandwidth"])
    assert find(doc["overall"], "step_time_ms")["delta"] == 0
    assert {d["scope"] for d in doc["ranks"]} == {f"rank {r}" for r in range(4)}


def test_rerun_with_other_jitter_passes(runs: dict[str, Path]) -> None:
    rc, doc = compare_json(runs["balanced"], runs["balanced_rerun"])
    assert rc == 0, doc["regressions"]


def test_straggler_fails_and_is_named(runs: dict[str, Path], tmp_path: Path) -> None:
    junit = tmp_path / "compare.xml"
    res = cli("compare", runs["balanced"], runs["late"], "--junit", junit)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "rank 2" in res.stdout and "exposed_wait_ms" in res.stdout and "REGRESSED" in res.stdout

    rc, doc = compare_json(runs["balanced"], runs["late"])
    assert rc == 1
    s = doc["straggler"]
    assert s["base"] is None and s["new"]["rank"] == 2 and s["appeared"] and s["regressed"]
    wait = find(doc["overall"], "exposed_wait_ms")
    assert wait["regressed"] and wait["confidence"] >= 0.95
    # the three on-time ranks wait for the late one every step: +3/4 of the delay per step on average
    assert wait["delta"] == pytest.approx(0.75 * LATE_NS / 1e6, rel=0.25)
    assert find(doc["ranks"], "exposed_wait_ms", "rank 0")["regressed"]
    assert not find(doc["ranks"], "exposed_wait_ms", "rank 2")["regressed"]  # the late rank does not wait

    root = ET.parse(junit).getroot()
    cases = root.findall(".//testcase")
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == len(doc["regressions"]) and int(root.find("testsuite").get("failures")) == len(failed)
    names = {c.get("name") for c in failed}
    assert "exposed_wait_ms (overall)" in names and "straggler" in names
    assert all(c.find("failure").text for c in failed)


def test_known_compute_regression_is_measured(runs: dict[str, Path]) -> None:
    rc, doc = compare_json(runs["balanced"], runs["slow_compute"])
    assert rc == 1
    step = find(doc["overall"], "step_time_ms")
    injected_ms = sum(COMPUTE) * 0.2 / 1e6  # every compute kernel 20% longer, all on the critical path
    assert step["regressed"] and step["delta"] == pytest.approx(injected_ms, rel=0.2)
    assert find(doc["overall"], "compute_ms")["delta"] == pytest.approx(injected_ms, rel=0.1)
    assert not find(doc["overall"], "exposed_wait_ms")["regressed"]
    # the same change within a looser threshold passes
    rc, doc = compare_json(runs["balanced"], runs["slow_compute"], "--fail-on", "step_time_ms=+50%")
    assert rc == 0, doc["regressions"]


def test_one_noisy_step_does_not_fail(runs: dict[str, Path]) -> None:
    a = analyze(load([runs["balanced"]], LoadOptions()))
    first = a.steps["step"].min()
    # one step three times as long (a GC pause, a checkpoint): real numbers, one outlier
    noisy = a.steps.with_columns([
        pl.when(pl.col("step") == first).then(pl.col(c) * 3).otherwise(pl.col(c)).alias(c)
        for c in ("span_ns", "exposed_comm_ns", "exposed_wait_ns", "idle_ns")
    ])
    c = compare(a, replace(a, steps=noisy))
    assert c.passed, [d.metric for d in c.regressions]
    # ... while the same slowdown in every step is a regression
    slow = a.steps.with_columns(pl.col("span_ns") * 1.3)
    c = compare(a, replace(a, steps=slow))
    assert [(d.metric, d.scope) for d in c.regressions][0] == ("step_time_ms", "overall")


def test_different_rank_counts(runs: dict[str, Path]) -> None:
    _, doc = compare_json(runs["balanced"], runs["two_ranks"], "--allow-mismatch")  # refused without (compare_gate)
    assert {d["scope"] for d in doc["ranks"]} == {"rank 0", "rank 1"}
    assert any("rank sets differ" in n for n in doc["notes"])
    assert find(doc["overall"], "step_time_ms")["n_after"] == STEPS


@pytest.mark.parametrize("fmt, marker", [("markdown", "| metric |"), ("html", "<table>"), ("text", "Overall")])
def test_formats_name_regressions(runs: dict[str, Path], tmp_path: Path, fmt: str, marker: str) -> None:
    out = tmp_path / f"report.{fmt}"
    res = cli("compare", runs["balanced"], runs["late"], "--format", fmt, "-o", out)
    assert res.returncode == 1
    text = out.read_text()
    assert marker in text and "exposed wait" in text and "rank 2" in text


def test_missing_path_is_one_line_exit_2(runs: dict[str, Path], tmp_path: Path) -> None:
    res = cli("compare", runs["balanced"], tmp_path / "absent")
    assert res.returncode == 2
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1 and "absent" in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_threshold_is_exit_2(runs: dict[str, Path], tmp_path: Path) -> None:
    res = cli("compare", runs["balanced"], runs["balanced"], "--fail-on", "step_time=+5%")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "step_time_ms" in res.stderr
    bad = tmp_path / "t.toml"
    bad.write_text("nonsense = 1\n")
    res = cli("compare", runs["balanced"], runs["balanced"], "--thresholds", bad)
    assert res.returncode == 2 and "nonsense" in res.stderr


@pytest.mark.shared
def test_real_nsys_against_a_copy_of_itself(tmp_path: Path) -> None:
    src = SHARED / "nsys" / "mfu_2gpu_before.sqlite"
    if not src.exists():
        pytest.skip(f"{src} is absent (shared traces not available)")
    probe = cli("analyze", src, "--format", "json")
    if probe.returncode != 0:
        pytest.skip(f"the Nsight reader cannot read {src.name} yet: {probe.stderr.strip()}")
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(src, copy)
    res = cli("compare", src, copy, "--format", "json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["passed"] and doc["base"]["format"] == "nsys"
