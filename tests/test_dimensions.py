"""Process group -> parallelism dimension (layout, description, geometry), intra/inter node, per-dimension metrics."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from analyzer.crossrank import groups as dm
from analyzer.errors import UsageError
from sample_traces.generate import Scenario, build, default_groups, write_kineto
from tests.helpers import cli, report, run

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


@pytest.mark.parametrize(("desc", "dim"), [
    # torch DeviceMesh (group_desc = "mesh_" + dim name; torchtitan's names)
    ("mesh_tp", "tp"), ("mesh_dp_shard", "fsdp"), ("mesh_dp_replicate", "dp"), ("mesh_cp", "cp"),
    ("mesh_pp", "pp"), ("mesh_ep", "ep"), ("mesh_dp_shard_cp", "fsdp"), ("mesh_dp_cp", "dp"), ("mesh_etp", "tp"),
    # Megatron-core parallel_state group_desc
    ("TENSOR_MODEL_PARALLEL_GROUP", "tp"), ("PIPELINE_MODEL_PARALLEL_GROUP", "pp"), ("DATA_PARALLEL_GROUP", "dp"),
    ("DATA_PARALLEL_GROUP_WITH_CP", "dp"), ("CONTEXT_PARALLEL_GROUP", "cp"), ("EXPERT_MODEL_PARALLEL_GROUP", "ep"),
    ("EXPERT_TENSOR_PARALLEL_GROUP", "tp"), ("EXPERT_DATA_PARALLEL_GROUP", "dp"), ("EMBEDDING_GROUP", "pp"),
    ("TENSOR_AND_DATA_PARALLEL_GROUP", "unknown"), ("MODEL_PARALLEL_GROUP", "unknown"),
    # DeepSpeed
    ("_DATA_PARALLEL_GROUP", "dp"), ("ep_size_4", "ep"), ("_SEQUENCE_PARALLEL_GROUP", "cp"),
    ("default_pg", "world"), ("undefined", None), (None, None),
])
def test_description_names(desc: str | None, dim: str | None) -> None:
    assert dm.from_description(desc) == dim


def _megatron_groups(tp: int, dp: int, pp: int) -> pl.DataFrame:
    """Megatron's rank order (tp fastest, then dp, then pp): every group, computed by brute force."""
    world = tp * dp * pp
    coord = {r: (r % tp, (r // tp) % dp, r // (tp * dp)) for r in range(world)}
    groups: dict[tuple[int, ...], str] = {}
    for axis, name in enumerate(("tp", "dp", "pp")):
        for r in range(world):
            members = tuple(q for q in range(world) if all(coord[q][a] == coord[r][a] for a in range(3) if a != axis))
            groups[members] = name
    rows = [{"pg": str(i + 1), "desc": "undefined", "ranks": list(k), "truth": v} for i, (k, v) in enumerate(groups.items())]
    return pl.DataFrame(rows, schema={"pg": pl.Utf8, "desc": pl.Utf8, "ranks": pl.List(pl.Int32), "truth": pl.Utf8})


def _no_rows() -> pl.DataFrame:
    return pl.DataFrame(schema={"pg": pl.Utf8, "group_ranks": pl.Utf8, "pg_desc": pl.Utf8, "rank": pl.Int32,
                                "op": pl.Utf8, "instance": pl.Utf8, "comm": pl.Utf8})


def test_layout_names_every_megatron_group() -> None:
    truth = _megatron_groups(tp=4, dp=2, pp=2)
    lay = dm.parse_layout("tp=4,dp=2,pp=2")
    g = dm.groups(truth.drop("truth"), _no_rows(), 16, None, dm.Options(layout=lay))
    got = g.join(truth.select("pg", "truth"), on="pg")
    assert got.height == truth.height == 4 + 8 + 8
    assert (got["dimension"] == got["truth"]).all() and (got["dimension_source"] == "layout").all()
    assert not got["guess"].any()
    # another rank order changes the answer: read as tp-pp-dp, the Megatron dp groups are pp groups
    other = dm.groups(truth.drop("truth"), _no_rows(), 16, None,
                      dm.Options(layout=dm.parse_layout("tp=4,dp=2,pp=2", "tp-pp-dp")))
    flipped = other.join(truth.select("pg", "truth"), on="pg")
    assert (flipped.filter(pl.col("truth") == "dp")["dimension"] == "pp").all()


def test_geometry_is_a_labelled_guess_and_hosts_split_groups() -> None:
    truth = _megatron_groups(tp=4, dp=2, pp=2)
    g = dm.groups(truth.drop("truth"), _no_rows(), 16, None, dm.Options(gpus_per_host=8)).join(
        truth.select("pg", "truth"), on="pg")
    assert (g["dimension_source"] == "geometry").all() and g["guess"].all()
    assert (g.filter(pl.col("truth") == "tp")["dimension"] == "tp").all()  # stride 1 inside a host
    assert (g.filter(pl.col("truth") != "tp")["dimension"] == "dp").all()  # strided: dp-like (pp indistinguishable)
    # 8 GPUs per host: tp (stride 1, 4 ranks) and dp (stride 4) stay inside a host, pp (stride 8) crosses
    intra = dict(zip(g["truth"], g["intra_node"], strict=True))
    assert intra == {"tp": True, "dp": True, "pp": False}


@pytest.mark.parametrize(("text", "order"), [("tp=8,xp=2", None), ("tp=0", None), ("tp", None),
                                              ("tp=2,pp=2", "tp-dp"), ("tp=2", "tp-tp")])
def test_bad_layout_is_a_usage_error(text: str, order: str | None) -> None:
    with pytest.raises(UsageError):
        dm.parse_layout(text, order)


def test_cli_bad_layout_exits_2_with_one_line(tmp_path: Path) -> None:
    write_kineto(build(Scenario(ranks=2, steps=1)), tmp_path)
    res = cli("analyze", tmp_path, "--layout", "tq=2", "--no-cache", "-j", "1")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "--layout" in res.stderr


def _mesh_scenario(**kw) -> Scenario:
    """8 ranks, tp=2 x dp=4 with DeviceMesh descriptions; TP and DP all-reduces every step."""
    names = {2: "mesh_tp", 4: "mesh_dp_replicate", 8: "default_pg"}
    pgs = tuple(replace(pg, desc=names[len(pg.ranks)]) for pg in default_groups(8, 2))
    return Scenario(ranks=8, steps=3, tp=2, process_groups=pgs, late_ranks={5: (300_000, "host")}, **kw)


def test_description_classification_and_per_dimension_truth(tmp_path: Path) -> None:
    sc = _mesh_scenario(gpus_per_host=4)
    wl = build(sc)
    write_kineto(wl, tmp_path)
    rep = report(tmp_path)
    pgs = {g["pg"]: g for g in rep["process_groups"]}
    assert {g["dimension"] for g in pgs.values()} == {"world", "tp", "dp"}
    for g in pgs.values():
        assert g["dimension_source"] == "desc" and g["guess"] is False
        # the traces name no hosts: --gpus-per-host (default 8) puts all 8 ranks on one host
        assert g["intra_node"] is True
    tp_of = {pg.name: ("tp" if len(pg.ranks) == 2 else "dp") for pg in sc.process_groups if len(pg.ranks) < 8}
    # per rank and dimension: comm = sum of kernel durations, wait = sum of waits (generator truth)
    want: dict[tuple[int, str], list[int]] = {}
    for inst in wl.truth.instances:
        for r in inst.ranks:
            acc = want.setdefault((r, tp_of[inst.pg]), [0, 0])
            acc[0] += inst.end_ns - inst.start_ns[r]
            acc[1] += inst.wait_ns[r]
    got = {(d["rank"], d["dimension"]): d for d in rep["dimensions"]}
    assert set(got) == set(want)
    for key, (comm, wait) in want.items():
        assert got[key]["comm_ms"] == pytest.approx(comm / 1e6, abs=1e-6)
        assert got[key]["wait_ms"] == pytest.approx(wait / 1e6, abs=1e-6)
        d = got[key]
        assert d["exposed_wait_ms"] + d["exposed_transfer_ms"] == pytest.approx(d["exposed_comm_ms"], abs=1e-6)
        assert d["root_caused_wait_ms"] is not None
    # the per-dimension exposed parts add up to the rank's exposed comm (TP and DP kernels never overlap),
    # and its root-caused wait splits over the dimensions where that wait was suffered
    for r in rep["ranks"]:
        mine = [d for d in rep["dimensions"] if d["rank"] == r["rank"]]
        assert sum(d["exposed_comm_ms"] for d in mine) == pytest.approx(r["exposed_comm_ms"], abs=1e-6)
        assert sum(d["root_caused_wait_ms"] for d in mine) == pytest.approx(r["root_caused_wait_ms"], abs=1e-6)
    assert max(r["root_caused_wait_ms"] for r in rep["ranks"]) > 0.1  # rank 5 is 300 us late every step


def test_gpus_per_host_splits_bandwidth_by_intra_node(tmp_path: Path) -> None:
    write_kineto(build(_mesh_scenario()), tmp_path)
    a = run(tmp_path)
    assert set(a.bandwidth["intra_node"].to_list()) == {True}
    from analyzer.analysis import analyze
    from analyzer.ingest.loader import LoadOptions, load

    b = analyze(load([tmp_path], LoadOptions(jobs=1, cache=False)), dm.Options(gpus_per_host=2))
    intra = dict(zip(b.process_groups["dimension"], b.process_groups["intra_node"], strict=False))
    assert intra["tp"] is True and intra["dp"] is False and intra["world"] is False
    assert set(b.bandwidth["intra_node"].to_list()) == {True, False}


def test_layout_beats_description(tmp_path: Path) -> None:
    write_kineto(build(_mesh_scenario()), tmp_path)
    res = cli("analyze", tmp_path, "--layout", "tp=2,dp=4", "--format", "json", "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    import json

    rep = json.loads(res.stdout)
    got = {g["pg"]: (g["dimension"], g["dimension_source"]) for g in rep["process_groups"]}
    assert set(got.values()) == {("world", "layout"), ("tp", "layout"), ("dp", "layout")}


@pytest.mark.skipif(not (SHARED / "gpu_h200" / "hybrid_tp_dp").exists(), reason="shared traces absent")
def test_shared_hybrid_mesh_gets_sensible_dimensions() -> None:
    rep = report(SHARED / "gpu_h200" / "hybrid_tp_dp")
    got = {tuple(g["ranks"]): (g["dimension"], g["dimension_source"]) for g in rep["process_groups"]}
    assert got == {(0, 1, 2, 3): ("world", "desc"), (0, 1): ("tp", "geometry"), (2, 3): ("tp", "geometry"),
                   (0, 2): ("dp", "geometry"), (1, 3): ("dp", "geometry")}
    # its send/recv between 0<->2 and 1<->3 are matched pairs inside the dp groups: no pipeline, so dp, not pp
    # (issue #40: send/recv is pp only between pipeline stages)
    assert rep["matching"]["p2p_pairs"] == 16 and rep["matching"]["p2p_unmatched_kernels"] == 0
    assert {d["dimension"] for d in rep["dimensions"]} == {"tp", "dp", "world"}


def test_dashboard_dimension_section_shows_the_report_numbers(tmp_path: Path) -> None:
    from dashboards import dimensions as view
    from dashboards.layout import build_layout

    write_kineto(build(_mesh_scenario()), tmp_path)
    a = run(tmp_path)
    section = view.section(a)
    assert section is not None and "section-dimensions" in str(build_layout(a))
    table = next(c for c in section.children if getattr(c, "id", None) == "dimension-table")
    got = {r["dimension"]: r for r in table.data}
    assert set(got) == {"tp", "dp"}
    for dim in ("tp", "dp"):
        per_rank = a.dimensions.filter(pl.col("dimension") == dim)
        assert got[dim]["comm_ms"] == pytest.approx(per_rank["comm_ns"].mean() / 1e6)
        assert got[dim]["source"] == "desc" and got[dim]["groups"] == (4 if dim == "tp" else 2)
    assert {r["dimension"] for r in view.group_rows(a)} == {"world", "tp", "dp"}
