"""Cross-rank matching of point-to-point pairs, group exchanges and kernels without metadata."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analyzer.crossrank import match
from analyzer.ingest.loader import LoadOptions, load
from analyzer.metrics import waits
from sample_traces.generate import Collective, ProcessGroup, Scenario, build, write_kineto

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def _inst(tmp_path: Path, sc: Scenario):
    wl = build(sc)
    write_kineto(wl, tmp_path)
    ts = load([tmp_path], LoadOptions(jobs=1, cache=False))
    return match.instances(ts.collectives), wl.truth


def _pp_scenario(**kw) -> Scenario:
    pgs = (ProcessGroup("0", (0, 1, 2, 3), "default_pg"),)
    cols = (
        Collective("all_reduce", 8 << 20, 80_000),
        Collective("send", 2 << 20, 30_000, peers=(0, 2)),
        Collective("send", 2 << 20, 40_000, peers=(1, 3)),
        Collective("send", 2 << 20, 50_000, peers=(2, 0)),
    )
    return Scenario(ranks=4, steps=3, process_groups=pgs, collectives=cols, late_ranks={2: (200_000, "host")}, **kw)


def test_send_recv_pairs_match_by_recorded_peer_with_truth_waits(tmp_path: Path) -> None:
    inst, truth = _inst(tmp_path, _pp_scenario())
    rows = waits.per_row(inst, inst["start_ns"], inst["end_ns"])
    pairs = rows.filter(pl.col("match_rule") == "p2p_peer")
    p2p_truth = [i for i in truth.instances if i.op == "send"]
    assert pairs.select(pl.col("instance").n_unique()).item() == len(p2p_truth) == 9
    assert rows.filter(pl.col("op").is_in(match.P2P_OPS) & pl.col("instance").is_null()).height == 0
    # each truth pair: the same two ranks, transfer = the generator's, the recv side's wait = its truth wait
    got = pairs.group_by("instance").agg(pl.col("rank").sort().alias("ranks"), pl.col("transfer_ns").first())
    for t in p2p_truth:
        src, dst = t.ranks  # (sender, receiver)
        cand = got.filter(pl.col("instance").str.starts_with(f"p2p|{src}>{dst}|"))
        assert cand.height == 3 and cand["ranks"].to_list() == [sorted(t.ranks)] * 3  # one per step
        assert set(cand["transfer_ns"].to_list()) == {t.transfer_ns}
    total_wait = pairs["wait_ns"].sum()
    assert total_wait == sum(sum(t.wait_ns.values()) for t in p2p_truth)
    assert not inst["partial"].any()


def test_pairs_without_recorded_peer_in_a_two_rank_group_match_per_pair(tmp_path: Path) -> None:
    pgs = (ProcessGroup("0", (0, 1), "default_pg"),)
    cols = (Collective("send", 1 << 20, 30_000, peers=(0, 1)), Collective("send", 1 << 20, 30_000, peers=(1, 0)))
    sc = Scenario(ranks=2, steps=2, process_groups=pgs, collectives=cols)
    wl = build(sc)
    write_kineto(wl, tmp_path)
    ts = load([tmp_path], LoadOptions(jobs=1, cache=False))
    coll = ts.collectives.with_columns(pl.lit(None, dtype=pl.Int32).alias("peer"))  # as if not recorded
    inst = match.instances(coll)
    assert inst.filter(pl.col("match_rule") == "p2p_pair").select(pl.col("instance").n_unique()).item() == 4
    assert inst["instance"].null_count() == 0
    # direction is right: the first send of each step goes 0 -> 1
    assert inst.filter((pl.col("rank") == 1) & (pl.col("op") == "recv"))["instance"].str.contains(r"^p2p\|0>1").all()


@pytest.mark.parametrize("old_file", [False, True])
def test_legacy_all_to_all_sendrecv_kernels_match_as_group_exchange(tmp_path: Path, old_file: bool) -> None:
    cols = (Collective("all_reduce", 8 << 20, 80_000), Collective("all_to_all", 4 << 20, 60_000))
    # old_file: integer-microsecond timestamps and no distributedInfo (rank from the file name), as old PyTorch
    old = {"ts_style": "int", "distributed_info": False, "jitter_ns": 8_000} if old_file else {}
    sc = Scenario(ranks=4, steps=3, collectives=cols, legacy_comms=True, late_ranks={1: (150_000, "host")}, **old)
    inst, truth = _inst(tmp_path, sc)
    assert not inst["has_meta"].any()  # no "Collective name", record on another thread: nothing linked
    x = inst.filter(pl.col("match_rule") == "exchange")
    a2a = [t for t in truth.instances if t.op == "all_to_all"]
    assert x.select(pl.col("instance").n_unique()).item() == len(a2a) == 3
    assert x.height == 12 and (x["n_ranks"] == 4).all()
    rows = waits.per_row(x, x["start_ns"], x["end_ns"])
    assert rows["wait_ns"].sum() == sum(sum(t.wait_ns.values()) for t in a2a)
    last = rows.group_by("instance").agg(pl.col("last_rank").first(), pl.col("start_ns").min()).sort("start_ns")
    assert last["last_rank"].to_list() == [t.last_rank for t in a2a]
    counts, warns = match.summary(inst)
    assert counts["exchange_instances"] == 3 and counts["p2p_unmatched_kernels"] == 0
    assert any("group exchanges" in w for w in warns)


def test_exchange_refused_when_ranks_run_different_sequences(tmp_path: Path) -> None:
    cols = (Collective("all_to_all", 4 << 20, 60_000),)
    sc = Scenario(ranks=4, steps=2, collectives=cols, legacy_comms=True)
    wl = build(sc)
    write_kineto(wl, tmp_path)
    coll = load([tmp_path], LoadOptions(jobs=1, cache=False)).collectives
    # drop rank 3's second kernel: that step's sequences differ, the other step still matches
    drop = coll.filter(pl.col("rank") == 3).sort("start_ns")["start_ns"][1]
    inst = match.instances(coll.filter(~((pl.col("rank") == 3) & (pl.col("start_ns") == drop))))
    assert inst.filter(pl.col("match_rule") == "exchange").select(pl.col("instance").n_unique()).item() == 1
    assert inst["instance"].null_count() == 3


def test_kernels_without_metadata_stay_in_their_group(tmp_path: Path) -> None:
    # TP and DP all-reduces of the same size and op; each rank's first three launches fell before the
    # window: they take the group of the metadata kernels on their stream and must not merge
    sc = Scenario(ranks=4, steps=3, tp=2, missing_meta_first=3,
                  collectives=(Collective("all_reduce", 4 << 20, 60_000, ("1", "2")),
                               Collective("all_reduce", 4 << 20, 60_000, ("3", "4"))))
    inst, truth = _inst(tmp_path, sc)
    assert inst.filter(~pl.col("has_meta")).height == 12
    got = inst.filter(pl.col("instance").is_not_null()).group_by("instance").agg(pl.col("rank").sort())
    assert got.height == len(truth.instances) == 12
    assert sorted(tuple(r) for r in got["rank"].to_list()) == sorted(t.ranks for t in truth.instances)
    nometa = inst.filter(~pl.col("has_meta"))
    assert nometa["instance"].null_count() == 0 and nometa["pg"].null_count() == 0


def test_partial_instances_are_flagged(tmp_path: Path) -> None:
    inst, _ = _inst(tmp_path, Scenario(ranks=4, steps=2))
    cut = match.instances(inst.select(*[c for c in inst.columns if c not in ("instance", "n_ranks", "partial",
                                                                          "match_rule")]).filter(pl.col("rank") != 3))
    assert cut["partial"].all() and (cut["n_ranks"] == 3).all()
    counts, warns = match.summary(cut)
    assert counts["partial_instances"] == 4 and any("fewer participants" in w for w in warns)


@pytest.mark.skipif(not (SHARED / "nsys" / "mfu_2gpu_before.sqlite").exists(), reason="shared traces absent")
def test_shared_nsys_sendrecv_job_matches_every_kernel() -> None:
    ts = load([SHARED / "nsys" / "mfu_2gpu_before.sqlite"], LoadOptions(jobs=1, cache=False))
    inst = match.instances(ts.collectives)
    assert inst.height == 66
    assert inst["instance"].null_count() == 0
    assert inst.select(pl.col("instance").n_unique()).item() == 33


def test_coalesced_sendrecv_batches_are_point_to_point(tmp_path: Path) -> None:
    # batch_isend_irecv: the SendRecv kernel is launched inside a "coalesced" record, no peer on it
    cols = (Collective("all_reduce", 8 << 20, 80_000), Collective("all_to_all", 4 << 20, 60_000))
    wl = build(Scenario(ranks=4, steps=2, collectives=cols))
    write_kineto(wl, tmp_path)
    coll = load([tmp_path], LoadOptions(jobs=1, cache=False)).collectives
    coll = coll.with_columns(pl.when(pl.col("op") == "all_to_all").then(pl.lit("coalesced")).otherwise(pl.col("op"))
                             .alias("op"))
    inst = match.instances(coll)
    x = inst.filter(pl.col("op") == "coalesced")
    assert (x["match_rule"] == "exchange").all() and x.select(pl.col("instance").n_unique()).item() == 2
    counts, _ = match.summary(inst)
    assert counts["p2p_kernels"] == 8 and counts["unmatched_kernels"] == 0
