"""The gate refuses what it cannot compare: a skipped rank, another job (world size, layout, step count) -> exit 2."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from analyzer.compare.diff import compare
from analyzer.compare.gate import mismatches
from analyzer.errors import IncomparableRuns
from sample_traces.generate import Scenario, build, default_groups, write_kineto
from tests.helpers import cli, run

STEPS = 8


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate")
    scenarios = {
        "four": Scenario(ranks=4, steps=STEPS),
        "four_again": Scenario(ranks=4, steps=STEPS, seed=3),
        "eight": Scenario(ranks=8, steps=STEPS, compute_ns=(300_000,) * 8),
        "four_few_steps": Scenario(ranks=4, steps=2),
    }
    out = {name: root / name for name in scenarios}
    for name, sc in scenarios.items():
        write_kineto(build(sc), out[name])
    corrupt = root / "four_corrupt"
    shutil.copytree(out["four"], corrupt)
    victim = sorted(corrupt.iterdir())[2]  # rank 2: cut in the middle of its events
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    out["four_corrupt"] = corrupt
    return out


def _refused(res, *words: str) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr
    first = res.stderr.splitlines()[0]
    assert first.startswith("commscope: error: cannot compare: ") and "--allow-mismatch" in first, first
    for w in words:
        assert w in first, first
    return first


def test_identical_runs_pass(runs: dict[str, Path]) -> None:
    res = cli("compare", runs["four"], runs["four"], "--format", "json", "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["passed"] and doc["mismatches"] == [] and "warning" not in res.stderr


def test_a_rerun_of_the_same_job_is_comparable(runs: dict[str, Path]) -> None:
    assert mismatches(run(runs["four"]), run(runs["four_again"])) == []


def test_skipped_rank_is_refused_either_side(runs: dict[str, Path]) -> None:
    name = sorted(runs["four_corrupt"].iterdir())[2].name
    first = _refused(cli("compare", runs["four"], runs["four_corrupt"], "--no-cache", "-j", "1"),
                     "NEW skipped 1 input(s)", name)
    assert "BASE" not in first.split("cannot compare: ")[1].split(":")[0]
    _refused(cli("compare", runs["four_corrupt"], runs["four"], "--no-cache", "-j", "1"), "BASE skipped 1 input(s)")


def test_other_job_is_refused_with_the_reason(runs: dict[str, Path]) -> None:
    first = _refused(cli("compare", runs["four"], runs["eight"], "--no-cache", "-j", "1"),
                     "different world sizes: BASE 4 ranks, NEW 8 ranks")
    assert "regress" not in first


def test_allow_mismatch_compares_with_a_warning(runs: dict[str, Path]) -> None:
    res = cli("compare", runs["four"], runs["eight"], "--allow-mismatch", "--format", "json", "--no-cache", "-j", "1")
    assert res.returncode in (0, 1), res.stderr
    assert res.stderr.splitlines()[0] == ("commscope: warning: the runs have different world sizes: BASE 4 ranks, "
                                          "NEW 8 ranks (compared anyway: --allow-mismatch)")
    doc = json.loads(res.stdout)
    assert doc["mismatches"] == ["the runs have different world sizes: BASE 4 ranks, NEW 8 ranks"]
    assert {d["scope"] for d in doc["ranks"]} == {f"rank {r}" for r in range(4)}  # per-rank rows: common ranks only
    assert doc["notes"][0].startswith("compared despite a mismatch")


def test_step_count_tolerance(runs: dict[str, Path]) -> None:
    first = _refused(cli("compare", runs["four"], runs["four_few_steps"], "--no-cache", "-j", "1"),
                     "step counts differ by more than 50%", f"BASE {STEPS} steps, NEW 2 steps")
    assert "world size" not in first
    # within the tolerance: 8 against 5 steps compares
    a = run(runs["four"])
    five = replace(a, steps=a.steps.filter(a.steps["step"] < a.steps["step"].min() + 5))
    assert mismatches(a, five) == []
    assert mismatches(a, five, step_tolerance_pct=30) == [
        "the runs' step counts differ by more than 30%: BASE 8 steps, NEW 5 steps"]


def test_declared_world_size_and_layout() -> None:
    a = run_from(Scenario(ranks=8, steps=4, tp=2, process_groups=default_groups(8, 2)))
    b = run_from(Scenario(ranks=8, steps=4, tp=4, process_groups=default_groups(8, 4)))
    why = mismatches(a, b)
    assert len(why) == 1 and why[0].startswith("the runs have different layouts"), why
    with pytest.raises(IncomparableRuns, match="different layouts"):
        compare(a, b)
    # a rank missing without a skipped file (not given): analyzed 3 of 4 declared
    c = run(sorted(_folder(Scenario(ranks=4, steps=4)).iterdir())[:3])
    d = run(sorted(_folder(Scenario(ranks=4, steps=4)).iterdir())[:3])
    why = mismatches(c, d)
    assert why[:2] == ["BASE analyzed 3 of 4 declared ranks (missing rank(s) 3)",
                       "NEW analyzed 3 of 4 declared ranks (missing rank(s) 3)"]
    assert mismatches(c, d, selected=(0, 1, 2)) == []  # left out on purpose (--ranks 0-2)


_TMP: list[Path] = []


def _folder(sc: Scenario) -> Path:
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="gate_"))
    _TMP.append(d)
    write_kineto(build(sc), d)
    return d


def run_from(sc: Scenario):
    return run(_folder(sc))


def teardown_module() -> None:
    for d in _TMP:
        shutil.rmtree(d, ignore_errors=True)
