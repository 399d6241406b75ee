"""The What-if artifact's shipped traces (sample_traces/whatif, Apache-2.0): rows, ranks, steps and groups
as their meta files and the artifact's published step times say."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from analyzer.crossrank import match
from analyzer.ingest.loader import LoadOptions, load
from tests.conftest import SAMPLES
from tests.helpers import cli

WHATIF = SAMPLES / "whatif"

# name -> (ops, recorded ranks, steps, world, dp, pp, tp*dsp): counted by hand from the Parquet and meta files
EXPECT = {
    "AR": (117_216, list(range(0, 64, 4)), 44, 64, 4, 4, 4),
    "SE": (107_328, [s * 64 + d * 2 for s in range(2) for d in range(32)], 43, 128, 32, 2, 2),
    "ST": (6_784, list(range(8)), 32, 8, 2, 4, 1),
}


@pytest.fixture(scope="module", params=sorted(EXPECT))
def trace(request):
    name = request.param
    return name, load([WHATIF / name / f"trace-{name}.parquet"], LoadOptions(jobs=1, cache=False))


def test_rows_ranks_steps_world(trace) -> None:
    name, ts = trace
    ops, ranks, steps, world, *_ = EXPECT[name]
    assert ts.gpu.height == ops
    assert ts.rank_ids == ranks
    assert ts.world_size == world
    assert ts.steps.height == len(ranks) * steps
    assert ts.steps["step"].n_unique() == steps


def test_step_windows_are_the_published_step_times(trace) -> None:
    """result-*.json's step_t_base (seconds, the artifact's float32 arithmetic): within 10 us."""
    name, ts = trace
    base = json.loads((WHATIF / name / f"result-{name}.json").read_text())["step_t_base"]
    spans = dict(ts.steps.group_by("step").agg((pl.col("end_ns") - pl.col("start_ns")).first()).rows())
    assert sorted(spans) == sorted(int(k) for k in base)
    assert max(abs(spans[int(k)] - v * 1e9) for k, v in base.items()) < 10_000


def test_groups_follow_the_meta_file(trace) -> None:
    name, ts = trace
    _, ranks, _, world, dp, pp, mp = EXPECT[name]
    by_rank = {m.rank: {g.desc: g.ranks for g in m.process_groups} for m in ts.ranks}
    for r in ranks:
        d, s = (r // mp) % dp, r // (mp * dp)
        g = by_rank[r]
        assert g["data_parallel"] == tuple(mp * (x + dp * s) for x in range(dp))
        assert g["pipeline_parallel"] == tuple(mp * (d + dp * x) for x in range(pp))
        assert g["world"] == tuple(range(world))
        assert ("embedding" in g) == (s in (0, pp - 1))
        # one recorded rank per tp/sequence-parallel group: its other members are listed, not recorded
        assert len(g.get("tensor_parallel", g.get("sequence_parallel", (r,)))) == mp


def test_every_collective_and_pair_matches(trace) -> None:
    name, ts = trace
    inst = match.instances(ts.collectives)
    counts, _ = match.summary(inst)
    p2p = ts.gpu.filter(pl.col("name").str.contains("send|recv")).height
    assert counts["p2p_kernels"] == p2p and counts["p2p_pairs"] * 2 == p2p
    # only the layernorm all-reduce is unmatched, where its tp / sequence-parallel peers were not recorded (AR, SE)
    unmatched = inst.filter(pl.col("instance").is_null())
    assert set(unmatched["name"].unique().to_list()) <= {"layernorm-grads-all-reduce"}
    assert unmatched.height == (ts.steps.height if EXPECT[name][-1] > 1 else 0)
    coll = inst.filter(pl.col("instance").is_not_null() & ~pl.col("op").is_in(["send", "recv"]))
    assert (coll.group_by("instance").agg(pl.col("name").n_unique())["name"] == 1).all()


def test_cli_reads_a_folder_holding_the_trace() -> None:
    res = cli("analyze", WHATIF / "ST", "--format", "json", "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["source"]["format"] == "optable"
    assert doc["source"]["ranks"] == list(range(8)) and doc["source"]["world_size"] == 8
    assert any("sizes from meta meta-ST.yaml" in w for w in doc["warnings"])


def test_export_dashboard_and_compare_run_on_op_tables(tmp_path: Path) -> None:
    from analyzer.analysis import analyze
    from dashboards.app import create_app

    out = tmp_path / "st.pftrace"
    res = cli("export", WHATIF / "ST" / "trace-ST.parquet", "-o", out, "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size > 100_000
    res = cli("compare", WHATIF / "ST", WHATIF / "ST", "--no-cache", "-j", "1", "--format", "json")
    assert res.returncode == 0, res.stderr
    a = analyze(load([WHATIF / "ST"], LoadOptions(jobs=1, cache=False)))
    client = create_app(a).server.test_client()
    assert client.get("/").status_code == 200
    sel = {"id": "selection", "property": "data", "value": {"rank": 7, "step": 23, "collective": None}}
    for outputs, inputs in (
        ([("timeline", "figure"), ("timeline-lanes", "data")],
         [sel, {"id": "timeline-opts", "property": "value", "value": []},
          {"id": "timeline", "property": "relayoutData", "value": None}]),
        ([("selection-text", "children"), ("kpi-table", "style_data_conditional"), ("breakdown", "figure")], [sel]),
        ([("waits", "figure"), ("busbw", "figure"), ("coll-table", "data")], [sel]),
    ):
        body = {"output": ".." + "...".join(f"{i}.{p}" for i, p in outputs) + "..",
                "outputs": [{"id": i, "property": p} for i, p in outputs], "inputs": inputs,
                "changedPropIds": ["selection.data"]}
        resp = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
        assert resp.status_code == 200, outputs
        assert set(resp.get_json()["response"]) == {i for i, _ in outputs}
