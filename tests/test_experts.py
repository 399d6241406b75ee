"""Expert-parallel all-to-all(v) with uneven splits: bytes per peer, imbalance and the top receiver."""

from __future__ import annotations

from pathlib import Path

import pytest

from sample_traces.generate import SPLIT_ROW_ELEMS, Collective, Scenario, build, write_kineto
from tests.helpers import report

# rows group rank i sends to group rank j: rank 2 receives most (a hot expert)
SPLITS = ((1, 2, 9, 0), (3, 1, 8, 2), (2, 2, 12, 1), (0, 4, 7, 3))


def test_uneven_all_to_all_bytes_imbalance_and_top_receiver(tmp_path: Path) -> None:
    cols = (Collective("all_reduce", 8 << 20, 80_000), Collective("all_to_all", 1, 60_000, splits=SPLITS))
    write_kineto(build(Scenario(ranks=4, steps=3, collectives=cols)), tmp_path)
    rep = report(tmp_path)
    ex = rep["experts"]
    row = 4 * SPLIT_ROW_ELEMS
    recv = [sum(SPLITS[i][j] for i in range(4)) * row for j in range(4)]  # per rank, brute force
    mean = sum(recv) / 4
    assert ex["instances"] == 3
    assert ex["top_receiver"] == 2
    assert ex["imbalance_max"] == pytest.approx(max(recv) / mean) and ex["imbalance_p50"] == pytest.approx(max(recv) / mean)
    for inst in ex["per_instance"]:
        assert inst["top_rank"] == 2 and inst["recv_bytes_max"] == pytest.approx(max(recv))
        assert inst["recv_bytes_mean"] == pytest.approx(mean) and inst["ranks"] == 4
    peers = {(p["src"], p["dst"]): p["bytes"] for p in ex["peers"]}
    want = {(i, j): 3 * SPLITS[i][j] * row for i in range(4) for j in range(4) if SPLITS[i][j]}
    assert peers == pytest.approx(want)
    per_rank = {r["rank"]: r for r in ex["ranks"]}
    assert per_rank[2]["recv_bytes"] == pytest.approx(3 * recv[2]) and per_rank[2]["instances_top"] == 3
    assert per_rank[0]["sent_bytes"] == pytest.approx(3 * sum(SPLITS[0]) * row)
    # the all-to-all's waits are matched like any collective's
    assert any(c["op"] == "all_to_all" and c["ranks"] == [0, 1, 2, 3] for c in rep["collectives"])


def test_no_experts_without_split_sizes(tmp_path: Path) -> None:
    write_kineto(build(Scenario(ranks=2, steps=2)), tmp_path)
    assert report(tmp_path)["experts"] is None


def test_groups_carrying_only_all_to_all_are_guessed_expert_parallel(tmp_path: Path) -> None:
    from sample_traces.generate import ProcessGroup

    pgs = (ProcessGroup("0", tuple(range(8)), "default_pg"), ProcessGroup("1", (0, 1, 2, 3)),
           ProcessGroup("2", (4, 5, 6, 7)))
    cols = (Collective("all_reduce", 8 << 20, 80_000), Collective("all_to_all", 1, 60_000, ("1", "2"), splits=SPLITS))
    write_kineto(build(Scenario(ranks=8, steps=2, process_groups=pgs, collectives=cols)), tmp_path)
    rep = report(tmp_path)
    got = {g["pg"]: (g["dimension"], g["guess"]) for g in rep["process_groups"]}
    assert got == {"0": ("world", False), "1": ("ep", True), "2": ("ep", True)}
    assert rep["experts"]["instances"] == 4 and {i["top_rank"] for i in rep["experts"]["per_instance"]} == {2, 6}


def test_layout_that_does_not_fit_the_job_is_warned(tmp_path: Path) -> None:
    write_kineto(build(Scenario(ranks=4, steps=1)), tmp_path)
    from analyzer.analysis import analyze
    from analyzer.crossrank import groups as dm
    from analyzer.ingest.loader import LoadOptions, load

    a = analyze(load([tmp_path], LoadOptions(jobs=1, cache=False)), dm.Options(layout=dm.parse_layout("tp=8")))
    assert any("describes 8 ranks but the job has 4" in w for w in a.warnings)
