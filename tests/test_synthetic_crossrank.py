"""Cross-rank analysis on generated traces with exactly known answers (waits, stragglers, clocks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sample_traces.generate import Scenario, build, write_kineto
from tests import oracle
from tests.helpers import report


def _write(tmp_path: Path, sc: Scenario, gz: bool = False) -> tuple[Path, object]:
    wl = build(sc)
    write_kineto(wl, tmp_path, gzip=gz)
    return tmp_path, wl.truth


def test_exposed_and_comm_match_brute_force_per_rank_and_step(tmp_path: Path) -> None:
    folder, _ = _write(tmp_path, Scenario(ranks=4, steps=3, overlap=0.4, late_ranks={2: (300_000, "host")}))
    rep = report(folder)
    files = sorted(folder.glob("rank*.json"))
    assert len(files) == 4
    common = oracle.common_step_windows({oracle.rank_of(oracle.load(f), f): f for f in files})  # one clock
    for f in files:
        ref = oracle.analyze_file(f)
        events = oracle.gpu_events(oracle.load(f))
        row = next(r for r in rep["ranks"] if r["rank"] == ref.rank)
        assert row["comm_ms"] == pytest.approx(ref.whole.comm_ns / 1e6, abs=1e-6)
        assert row["exposed_comm_ms"] == pytest.approx(ref.whole.exposed_ns / 1e6, abs=1e-6)
        assert row["compute_ms"] == pytest.approx(ref.whole.compute_ns / 1e6, abs=1e-6)
        assert row["idle_ms"] == pytest.approx(ref.whole.idle_ns / 1e6, abs=1e-6)
        steps = {s["step"]: s for s in rep["steps"] if s["rank"] == ref.rank}
        assert set(steps) == set(ref.steps)
        for n in ref.steps:  # each step is one interval on every rank (analyzer/crossrank/step_sync.py)
            b = oracle.breakdown(events, common[ref.rank][n])
            assert steps[n]["exposed_comm_ms"] == pytest.approx(b.exposed_ns / 1e6, abs=1e-6)
            assert steps[n]["span_ms"] == pytest.approx(b.span_ns / 1e6, abs=1e-6)


@pytest.mark.parametrize("kind", ["host", "compute"])
def test_injected_late_rank_is_the_straggler_with_its_kind(tmp_path: Path, kind: str) -> None:
    folder, truth = _write(tmp_path, Scenario(ranks=4, steps=4, late_ranks={3: (2_000_000, kind)}))
    rep = report(folder)
    v = rep["stragglers"]["verdict"]
    assert v is not None and v["rank"] == 3 and v["kind"] == kind
    # wait totals to 1% of the generator's truth
    for r in rep["ranks"]:
        t = truth.ranks[r["rank"]]
        assert r["wait_ms"] == pytest.approx(t.wait_ns / 1e6, rel=0.01, abs=1e-3)
    assert v["caused_wait_ms"] == pytest.approx(truth.ranks[3].caused_wait_ns / 1e6, rel=0.01)
    # exposed comm splits exactly into wait and transfer
    for r in rep["ranks"]:
        assert r["exposed_wait_ms"] + r["exposed_transfer_ms"] == pytest.approx(r["exposed_comm_ms"], abs=1e-6)


def test_balanced_run_gets_no_verdict(tmp_path: Path) -> None:
    folder, _ = _write(tmp_path, Scenario(ranks=4, steps=5, seed=3))
    rep = report(folder)
    assert rep["stragglers"]["verdict"] is None
    assert len(rep["stragglers"]["ranking"]) == 4


def test_clock_offsets_recovered_to_microseconds(tmp_path: Path) -> None:
    offsets = {0: 0, 1: 0, 2: 7_300_000, 3: 7_300_000}  # two hosts, 7.3 ms apart
    sc = Scenario(ranks=4, steps=4, clock_offsets_ns=offsets, late_ranks={1: (400_000, "host")})
    folder, truth = _write(tmp_path, sc)
    rep = report(folder)
    expected = truth.offsets_us(0)
    got = rep["clock"]["offsets_us"]
    for r, want in expected.items():
        assert got[str(r)] == pytest.approx(want, abs=3.0)
    # after alignment the arrival skew of each instance equals the true one
    skews = sorted(c["arrival_skew_ms"] for c in rep["collectives"])
    true_skews = sorted((max(i.start_ns.values()) - min(i.start_ns.values())) / 1e6 for i in truth.instances)
    assert skews == pytest.approx(true_skews, abs=0.005)


def test_missing_metadata_is_kept_flagged_and_still_matched(tmp_path: Path) -> None:
    sc = Scenario(ranks=4, steps=3, missing_meta_first=2, late_ranks={0: (500_000, "host")})
    folder, truth = _write(tmp_path, sc)
    rep = report(folder)
    assert rep["matching"]["kernels_without_metadata"] == sum(t.missing_meta for t in truth.ranks.values())
    assert rep["matching"]["unmatched_kernels"] == 0
    assert any("no collective metadata" in w for w in rep["warnings"])
    for r in rep["ranks"]:
        assert r["wait_ms"] == pytest.approx(truth.ranks[r["rank"]].wait_ns / 1e6, rel=0.01, abs=1e-3)


def test_int_microsecond_timestamps_and_no_distributed_info(tmp_path: Path) -> None:
    sc = Scenario(ranks=2, steps=2, ts_style="int", distributed_info=False)
    folder, _ = _write(tmp_path, sc, gz=True)
    rep = report(folder)
    assert rep["source"]["ranks"] == [0, 1]
    files = sorted(folder.glob("rank*.json.gz"))
    assert len(files) == 2
    for f in files:
        ref = oracle.analyze_file(f)
        row = next(r for r in rep["ranks"] if r["rank"] == ref.rank)
        assert row["exposed_comm_ms"] == pytest.approx(ref.whole.exposed_ns / 1e6, abs=1e-6)
    assert any("taken from the file name" in w for w in rep["warnings"])


def test_bandwidth_uses_nccl_tests_factors(tmp_path: Path) -> None:
    folder, truth = _write(tmp_path, Scenario(ranks=4, steps=2))
    rep = report(folder)
    for c in rep["collectives"]:
        inst = next(i for i in truth.instances if i.op == c["op"] and i.bytes == c["bytes"])
        algbw = inst.bytes / inst.transfer_ns
        assert c["algbw_gbps"] == pytest.approx(algbw, rel=0.02)
        assert c["busbw_gbps"] == pytest.approx(algbw * 2 * 3 / 4, rel=0.02)
