"""Issue #40: NCCL Inspector logs through the same verdict machinery as traces. The held-out class: a 2-D TP + FSDP2
job (8 ranks, tp and dp communicators, every communicator "unknown" as PyTorch leaves them, no world communicator,
a latency-bound 4 KiB send/recv ring on 2-rank communicators) with one host-late rank, and its balanced twin
(``sample_traces/inspector_gen.py``, exact truth); the shared real DDP pair; Kineto traces beside the logs."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from analyzer.crossrank import groups as pgroups
from analyzer.metrics.inspector import BANDWIDTH_BOUND_BYTES, slow_links
from sample_traces.inspector_gen import Spec, write
from tests.conftest import shared
from tests.helpers import cli


def _json(*args: object) -> dict:
    res = cli("analyze", *args, "--format", "json", "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _spec(slow: int | None, seed: int, **kw: object) -> Spec:
    return Spec(nodes=2, gpus_per_node=4, iterations=30, schedule="tp_fsdp", comm_names=False, small_p2p_bytes=4096,
                p2p_bytes=0, slow_rank=slow, slow_delay_us=5000, jitter_us=200, seed=seed, clock_offsets_us={1: 137},
                **kw)


@pytest.mark.parametrize("slow, seed", [(5, 1), (2, 2), (7, 3), (None, 1), (None, 4)])
def test_tp_fsdp_host_late_rank(tmp_path: Path, slow: int | None, seed: int) -> None:
    truth = write(_spec(slow, seed), tmp_path / "logs")
    doc = _json(tmp_path / "logs")
    v, iv = doc["stragglers"]["verdict"], doc["inspector"]["verdict"]
    if slow is None:  # the balanced twin: no verdict from either
        assert v is None and iv is None
    else:  # ranks numbered exactly without a world communicator (the tp x dp mesh of communicators)
        assert v["rank"] == truth["slow_rank"] and iv in (None, {**iv, "rank": truth["slow_rank"]})
        assert v["kind"] == "host"  # late outside NCCL: its GPU idle before the late collective
    # 4 KiB send/recv is latency-bound: never a slow link; every bandwidth-bound communicator runs at its peers'
    assert doc["inspector"]["slow_links"] == []
    p2p = {c["id"] for c in truth["communicators"] if c["kind"] == "p2p"}
    rows = [r for r in doc["inspector"]["busbw"] if r["id"] in p2p]
    assert rows and all(r["size_bucket"] < BANDWIDTH_BOUND_BYTES for r in rows)
    # dimensions from membership: tp (4 consecutive ranks on one node) and dp; the send/recv ring is no pipeline
    dims = {g["dimension"] for g in doc["process_groups"]}
    assert dims == {"tp", "dp"} and doc["pipeline"] is None
    kinds = {c["id"]: c["kind"] for c in truth["communicators"]}
    for g in doc["process_groups"]:
        want = {"tp": "tp", "dp": "dp", "p2p": "tp"}[kinds[g["pg"]]]  # a ring pair lies inside its tp group
        assert g["dimension"] == want, g
    assert {d["dimension"] for d in doc["dimensions"]} == {"tp", "dp"}


def test_the_kineto_traces_beside_name_the_communicators(tmp_path: Path) -> None:
    """Kineto traces of the same job list its process groups (DeviceMesh names): the communicators with their
    members take those names, and the dimensions come from them (desc), not from geometry."""
    truth = write(_spec(5, 1), tmp_path / "job")
    tp = [c["ranks"] for c in truth["communicators"] if c["kind"] == "tp"]
    dp = [c["ranks"] for c in truth["communicators"] if c["kind"] == "dp"]
    for r in range(8):
        pgs = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": list(range(8))}]
        pgs += [{"pg_name": str(1 + i), "pg_desc": "mesh_tp", "ranks": m} for i, m in enumerate(tp)]
        pgs += [{"pg_name": str(3 + i), "pg_desc": "mesh_dp_shard", "ranks": m} for i, m in enumerate(dp)]
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": r, "world_size": 8,
                                                       "pg_config": pgs}, "traceEvents": []}
        (tmp_path / "job" / f"rank{r}.pt.trace.json").write_text(json.dumps(doc))
    doc = _json(tmp_path / "job")
    by = {g["pg"]: g for g in doc["process_groups"]}
    for c in truth["communicators"]:
        if c["kind"] in ("tp", "dp"):
            g = by[c["id"]]
            assert (g["desc"], g["dimension"], g["dimension_source"]) == (
                ("mesh_tp", "tp", "desc") if c["kind"] == "tp" else ("mesh_dp_shard", "fsdp", "desc"))
    assert doc["stragglers"]["verdict"]["rank"] == truth["slow_rank"]
    assert any("named after the process groups" in w for w in doc["warnings"])


@pytest.mark.shared
@pytest.mark.parametrize("case, rank", [("ddp_straggler_cpu", 2), ("ddp_balanced", None)])
@pytest.mark.parametrize("with_traces", [False, True])
def test_shared_ddp_pair(case: str, rank: int | None, with_traces: bool) -> None:
    folder = shared("nccl_real", "inspector", case)
    doc = _json(folder) if with_traces else _json(*sorted(folder.glob("*.log")))
    v = doc["stragglers"]["verdict"]
    assert (v["rank"] if v else None) == rank
    iv = doc["inspector"]["verdict"]
    assert (iv["rank"] if iv else None) in (rank, None) and (iv is None) == (rank is None)
    assert doc["inspector"]["slow_links"] == []
    (g,) = doc["process_groups"]
    assert g["dimension"] == "world" and g["dimension_source"] == ("desc" if with_traces else "geometry")


def test_slow_link_only_where_bandwidth_bound() -> None:
    """Hand-built busbw table: four communicators per size; one runs at a third of the others' busbw. At 4 KiB and
    512 KiB (latency-bound) that is no slow link; at 1 MiB and 16 MiB it is."""
    rows = []
    for size in (4 << 10, 512 << 10, 1 << 20, 16 << 20):
        for i in range(4):
            rows.append({"id": f"c{i}", "name": "unknown", "ranks": "0,1", "op": "send", "size_bucket": size,
                         "intra_node": True, "n_ranks": 2, "nnodes": 1, "algo": None, "proto": None, "count": 10,
                         "busbw_gbps_p50": 10.0 if i else 3.0})
    got = slow_links(pl.DataFrame(rows))
    assert sorted(zip(got["id"], got["size_bucket"])) == [("c0", 1 << 20), ("c0", 16 << 20)]


def test_send_recv_is_pp_only_between_stages() -> None:
    """Stages: the ranks a job's collective groups join. tp x dp: one stage, a 2-rank send/recv group inside a tp
    group is tp, one joining ranks of two tp groups but no common group is unknown. tp x pp (tp groups only): a
    send/recv group between the two tp groups is pp. A pure pipeline (no other group) is pp."""
    def table(groups: list[tuple[str, list[int], str | None]]) -> pl.DataFrame:
        rows = []
        for pg, ranks, traffic in groups:
            for r in ranks:
                op = "send" if traffic == "p2p" else "all_reduce"
                rows.append({"pg": pg, "group_ranks": ",".join(map(str, ranks)), "pg_desc": None, "rank": r, "op": op,
                             "instance": 0, "comm": pg})
        return pgroups.groups(pl.DataFrame(schema={"pg": pl.Utf8, "desc": pl.Utf8, "ranks": pl.List(pl.Int32)}),
                              pl.DataFrame(rows), 8, None, pgroups.Options(gpus_per_host=4))

    tp_dp = table([("tp0", [0, 1, 2, 3], None), ("tp1", [4, 5, 6, 7], None), ("dp0", [0, 4], None),
                   ("dp1", [1, 5], None), ("dp2", [2, 6], None), ("dp3", [3, 7], None),
                   ("s01", [0, 1], "p2p"), ("s05", [0, 5], "p2p")])
    dim = dict(tp_dp.select("pg", "dimension").iter_rows())
    assert (dim["s01"], dim["s05"], dim["tp0"], dim["dp0"]) == ("tp", "unknown", "tp", "dp")
    tp_pp = table([("tp0", [0, 1, 2, 3], None), ("tp1", [4, 5, 6, 7], None), ("s04", [0, 4], "p2p")])
    assert dict(tp_pp.select("pg", "dimension").iter_rows())["s04"] == "pp"
    pure = table([("s01", [0, 1], "p2p"), ("s12", [1, 2], "p2p")])
    assert set(pure["dimension"]) == {"pp"}


def test_matched_pairs_take_their_stages() -> None:
    """Pairs of matched send/recv kernels (not a group of their own): a 4-stage pipeline on the world group (every
    pair between stages, ranks 2 -> 1 as well as 0 -> 1) is pp; inside a tp x dp job a pair of dp peers is dp."""
    def rows(pairs: list[tuple[int, int]]) -> pl.DataFrame:
        out = []
        for i, (a, b) in enumerate(pairs):
            for r in (a, b):
                out.append({"rank": r, "pg": "0", "group_ranks": "0,1,2,3", "comm": "0", "instance": i,
                            "match_rule": "p2p_peer"})
        return pl.DataFrame(out)

    world = pl.DataFrame({"pg": ["0"], "ranks": [[0, 1, 2, 3]], "size": [4], "dimension": ["world"],
                          "dimension_source": ["desc"], "intra_node": [True]})
    got = pgroups.row_dimensions(rows([(0, 1), (2, 1), (2, 3)]), world, None)
    assert set(got["dimension"]) == {"pp"}
    tp_dp = pl.concat([world, pl.DataFrame({
        "pg": ["1", "2", "3", "4"], "ranks": [[0, 1], [2, 3], [0, 2], [1, 3]], "size": [2] * 4,
        "dimension": ["tp", "tp", "dp", "dp"], "dimension_source": ["geometry"] * 4, "intra_node": [True] * 4})])
    got = pgroups.row_dimensions(rows([(1, 3), (0, 1)]), tp_dp, None)
    assert got.sort("instance", "rank")["dimension"].to_list() == ["dp", "dp", "tp", "tp"]
