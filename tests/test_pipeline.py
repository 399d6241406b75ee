"""Pipeline parallelism on generated TP x PP x DP 1F1B jobs with exact bubbles, waits and stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sample_traces.generate import write_kineto
from sample_traces.pipeline_job import PipelineScenario, build_pipeline
from tests.helpers import cli, report

SLOW_STAGE = 2


def _job(tmp_path: Path, **kw) -> tuple[Path, object, PipelineScenario]:
    ps = PipelineScenario(**{"tp": 2, "dp": 2, "pp": 4, "microbatches": 6,
                             "forward_ns": (200_000, 200_000, 320_000, 200_000), **kw})
    wl, truth = build_pipeline(ps)
    write_kineto(wl, tmp_path)
    return tmp_path, truth, ps


def _truth_by_stage(truth, ps: PipelineScenario) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for s in range(ps.pp):
        ranks = [r for r, st in truth.stage_of.items() if st == s]
        keys = [(r, k) for r in ranks for k in range(1, ps.steps + 1)]
        n = len(keys)
        out[s] = {
            "ranks": sorted(ranks),
            "bubble_ms": sum(truth.bubble_ns[k] for k in keys) / n / 1e6,
            "bubble_pct": 100 * sum(truth.bubble_ns[k] for k in keys) / sum(truth.span_ns[k] for k in keys),
            "warmup_bubble_ms": sum(truth.phase_bubble_ns[k][0] for k in keys) / n / 1e6,
            "steady_bubble_ms": sum(truth.phase_bubble_ns[k][1] for k in keys) / n / 1e6,
            "cooldown_bubble_ms": sum(truth.phase_bubble_ns[k][2] for k in keys) / n / 1e6,
            "recv_wait_ms": sum(truth.recv_wait_ns[r] for r in ranks) / n / 1e6,
        }
    return out


def _check(rep: dict, truth, ps: PipelineScenario) -> None:
    pipe = rep["pipeline"]
    assert pipe is not None and pipe["steps"] == ps.steps and pipe["chains"] == ps.tp * ps.dp
    want = _truth_by_stage(truth, ps)
    assert [s["stage"] for s in pipe["stages"]] == list(range(ps.pp))
    for s in pipe["stages"]:
        w = want[s["stage"]]
        assert s["ranks"] == w["ranks"]
        for key in ("bubble_ms", "warmup_bubble_ms", "steady_bubble_ms", "cooldown_bubble_ms", "recv_wait_ms"):
            assert s[key] == pytest.approx(w[key], rel=0.01, abs=1e-6), key
        assert s["bubble_pct"] == pytest.approx(w["bubble_pct"], rel=0.01)
    assert pipe["bottleneck_stage"] == SLOW_STAGE


def test_bubbles_waits_and_stages_from_p2p_topology(tmp_path: Path) -> None:
    folder, truth, ps = _job(tmp_path)
    rep = report(folder)
    assert rep["matching"]["p2p_pairs"] == truth.pairs and rep["matching"]["p2p_unmatched_kernels"] == 0
    assert rep["pipeline"]["stage_source"] == "p2p"
    _check(rep, truth, ps)
    # pp groups carry only send/recv: named pp even by geometry
    pp_groups = [g for g in rep["process_groups"] if g["size"] == ps.pp and g["dimension"] == "pp"]
    assert len(pp_groups) == ps.tp * ps.dp and all(g["guess"] for g in pp_groups)


def test_layout_gives_the_stages_and_names_every_group(tmp_path: Path) -> None:
    folder, truth, ps = _job(tmp_path, microbatches=4, steps=3)
    res = cli("analyze", folder, "--layout", "tp=2,dp=2,pp=4", "--layout-order", "tp-dp-pp", "--format", "json",
              "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["pipeline"]["stage_source"] == "layout"
    _check(rep, truth, ps)
    sizes = {g["dimension"]: g["size"] for g in rep["process_groups"]}
    assert sizes == {"world": 16, "tp": 2, "dp": 2, "pp": 4}
    assert all(g["dimension_source"] == "layout" for g in rep["process_groups"])
    assert {d["dimension"] for d in rep["dimensions"]} == {"tp", "dp", "pp"}


def test_megatron_descriptions_name_the_groups(tmp_path: Path) -> None:
    descs = {"tp": "TENSOR_MODEL_PARALLEL_GROUP", "dp": "DATA_PARALLEL_GROUP", "pp": "PIPELINE_MODEL_PARALLEL_GROUP"}
    folder, _, _ = _job(tmp_path, pp=2, microbatches=3, descs=descs, forward_ns=(200_000,))
    rep = report(folder)
    got = {(g["dimension"], g["dimension_source"]) for g in rep["process_groups"]}
    assert got == {("world", "desc"), ("tp", "desc"), ("dp", "desc"), ("pp", "desc")}


def test_no_pipeline_without_send_recv(tmp_path: Path) -> None:
    from sample_traces.generate import Scenario, build

    write_kineto(build(Scenario(ranks=4, steps=2, tp=2)), tmp_path)
    assert report(tmp_path)["pipeline"] is None


def test_balanced_pipeline_names_no_bottleneck(tmp_path: Path) -> None:
    folder, truth, ps = _job(tmp_path, forward_ns=(200_000,), pp=3, microbatches=4, tp=1, dp=2)
    rep = report(folder)
    assert rep["pipeline"]["bottleneck_stage"] is None
    want = _truth_by_stage(truth, ps)
    for s in rep["pipeline"]["stages"]:
        assert s["bubble_ms"] == pytest.approx(want[s["stage"]]["bubble_ms"], rel=0.01)


def test_schedule_view_colours_micro_batches_in_1f1b_order(tmp_path: Path) -> None:
    import polars as pl

    from dashboards import pipeline as view
    from dashboards.layout import build_layout
    from sample_traces.pipeline_job import _schedule
    from tests.helpers import run

    folder, _, ps = _job(tmp_path, microbatches=6)
    a = run(folder)
    comp, transfers, step = view.schedule_rows(a)
    assert step in (1, 2)
    for s in range(ps.pp):
        assert comp.filter(pl.col("stage") == s)["mb"].to_list() == [mb for _, mb in _schedule(ps, s)]
    assert transfers.height == 2 * ps.microbatches * 2 * (ps.pp - 1)  # one rank per stage, sends and recvs
    fig = view.schedule_figure(a)
    assert {t.name for t in fig.data} >= {f"micro-batch {m}" for m in range(ps.microbatches)}
    assert "section-pipeline" in str(build_layout(a))


def test_nsight_export_of_the_job_matches_pairs_by_ncclsend_peer(tmp_path: Path) -> None:
    """NCCL's NVTX payloads (--include-json): "Peer rank" on ncclSend/ncclRecv, "Rank" on ncclCommInitRank."""
    from sample_traces.nsys_writer import kineto_to_nsys

    folder, truth, ps = _job(tmp_path / "kineto", microbatches=4, tp=1, dp=2)
    sqlite = kineto_to_nsys(sorted(folder.glob("rank*.json")), tmp_path / "job.sqlite", nccl_payload=True)[0]
    rep = report(sqlite)
    assert rep["source"]["format"] == "nsys"
    assert rep["matching"]["p2p_pairs"] == truth.pairs and rep["matching"]["p2p_unmatched_kernels"] == 0
    pipe = rep["pipeline"]
    want = _truth_by_stage(truth, ps)
    assert [s["ranks"] for s in pipe["stages"]] == [want[s]["ranks"] for s in range(ps.pp)]
    for s in pipe["stages"]:  # recv waits do not depend on the step windows (Nsight's come from host ranges)
        assert s["recv_wait_ms"] * pipe["steps"] == pytest.approx(want[s["stage"]]["recv_wait_ms"] * ps.steps, rel=0.01)
    # communicator members from the init payloads: the pp groups are named pp (only send/recv); the dp pairs
    # {0,1} look like tp to geometry (contiguous, one host), which is why it is labelled a guess
    groups = {tuple(g["ranks"]): g for g in rep["process_groups"]}
    assert groups[(0, 2, 4, 6)]["dimension"] == "pp" and groups[(1, 3, 5, 7)]["dimension"] == "pp"
    assert groups[(0, 1)]["guess"] and groups[(0, 1)]["size"] == 2


def test_nsight_export_without_payloads_keeps_pairs_unmatched_not_wrong(tmp_path: Path) -> None:
    from sample_traces.nsys_writer import kineto_to_nsys

    folder, truth, _ = _job(tmp_path / "kineto", microbatches=3, tp=1, dp=1, pp=2, forward_ns=(200_000,))
    sqlite = kineto_to_nsys(sorted(folder.glob("rank*.json")), tmp_path / "job.sqlite", nccl_payload=False)[0]
    rep = report(sqlite)
    # two ranks: the only other rank is the peer; directions from ncclSend/ncclRecv
    assert rep["matching"]["p2p_pairs"] == truth.pairs and rep["matching"]["p2p_unmatched_kernels"] == 0
