"""metrics.inspector on hand-built records: every expected number worked out by hand below."""

from __future__ import annotations

import polars as pl
import pytest

from analyzer.metrics import inspector as im
from analyzer.model import INSPECTOR_COMM_SCHEMA, INSPECTOR_SCHEMA, InspectorLog, conform


def _log(rows: list[tuple], comms: list[tuple]) -> InspectorLog:
    """rows: (rank, comm, seq, op, bytes, exec_us); comms: (comm, id, name, n_ranks, nnodes, ranks)."""
    rec = pl.DataFrame(
        [{"rank": r, "comm": c, "comm_rank": 0, "p2p": False, "op": op, "seq": s, "bytes": b, "exec_ns": x * 1000,
          "timing_source": "kernel_gpu", "busbw_gbps": 1.0} for r, c, s, op, b, x in rows])
    cm = pl.DataFrame([dict(zip(("comm", "id", "name", "n_ranks", "nnodes", "ranks"), c)) for c in comms])
    return InspectorLog(conform(rec, INSPECTOR_SCHEMA), conform(cm, INSPECTOR_COMM_SCHEMA), False, {})


def test_transfer_wait_and_caused_wait_by_hand() -> None:
    # one all_reduce of 3 ranks: kernel times 500, 300, 100 us -> rank 2 arrived last, transfer 100 us,
    # waits 400 and 200 (caused by rank 2: 600 us); a second instance where ranks 0 and 1 tie for last
    # (times 50, 50, 250): transfer 50, rank 2 waits 200, which ranks 0 and 1 caused half each
    log = _log([(0, 0, 7, "all_reduce", 1 << 20, 500), (1, 0, 7, "all_reduce", 1 << 20, 300),
                (2, 0, 7, "all_reduce", 1 << 20, 100),
                (0, 0, 8, "all_reduce", 1 << 20, 50), (1, 0, 8, "all_reduce", 1 << 20, 50),
                (2, 0, 8, "all_reduce", 1 << 20, 250)],
               [(0, "0xa", "tp_0", 3, 1, "0,1,2")])
    s = im.analyze(log)
    r = {row["rank"]: row for row in s.ranks.to_dicts()}
    # the summary holds ns (ms only in the presenters)
    assert r[2]["caused_wait_ns"] == pytest.approx(600e3) and r[2]["instances_last"] == 1
    assert r[0]["caused_wait_ns"] == pytest.approx(100e3) and r[1]["caused_wait_ns"] == pytest.approx(100e3)
    assert r[0]["instances_last"] == 0.5 and r[1]["instances_last"] == 0.5
    assert r[0]["wait_ns"] == 400_000 and r[1]["wait_ns"] == 200_000
    assert r[2]["wait_ns"] == 200_000
    # busbw: all_reduce of 1 MiB over 3 ranks, transfer 100 us and 50 us: 2 (n-1)/n x bytes / t
    bw = s.busbw.row(0, named=True)
    expect = sorted([(1 << 20) / 100e3 * 4 / 3, (1 << 20) / 50e3 * 4 / 3])
    assert bw["count"] == 2 and bw["busbw_gbps_min"] == pytest.approx(expect[0])
    assert bw["busbw_gbps_max"] == pytest.approx(expect[1]) and bw["intra_node"] is True
    out = s.outliers.row(0, named=True)
    assert (out["seq"], out["last_rank"]) == (7, 2)
    assert out["max_wait_ns"] == 400_000 and out["total_wait_ns"] == 600_000


def test_incomplete_instances_do_not_count() -> None:
    # rank 2's record of seq 1 is missing: its shortest kernel is unknown, so no wait is computed for it
    log = _log([(0, 0, 1, "all_gather", 4096, 900), (1, 0, 1, "all_gather", 4096, 100)],
               [(0, "0xa", "dp_0", 3, 2, "0,1,2")])
    s = im.analyze(log)
    assert s.counts["instances"] == 1 and s.counts["complete_instances"] == 0
    assert s.ranks["caused_wait_ns"].sum() == 0 and s.verdict is None and s.busbw.height == 0


def test_slow_link_against_peers() -> None:
    # four 2-rank inter-node communicators doing the same all_gather; one takes 4x as long
    rows = []
    for c, t in enumerate((100, 100, 400, 100)):
        rows += [(c, c, 0, "all_gather", 1 << 20, t), (c + 4, c, 0, "all_gather", 1 << 20, t + 10)]
    comms = [(c, f"0x{c}", f"dp_{c}", 2, 2, f"{c},{c + 4}") for c in range(4)]
    s = im.analyze(_log(rows, comms))
    assert s.slow_links["name"].to_list() == ["dp_2"]
    row = s.slow_links.row(0, named=True)
    # all_gather traffic = 1 MiB x 2 ranks, factor (n-1)/n = 1/2
    assert row["busbw_gbps_p50"] == pytest.approx((1 << 20) * 2 / 400e3 / 2)
    assert row["peer_busbw_gbps_p50"] == pytest.approx((1 << 20) * 2 / 100e3 / 2) and row["ratio"] == 0.25


def test_family_names() -> None:
    names = pl.Series(["tp_3", "dp-12", "default_pg", "pp_0_1", None, "expert 4"])
    assert pl.select(im.family(pl.lit(names))).to_series().to_list() == ["tp", "dp", "world", "pp", "unknown",
                                                                          "expert"]
