"""The Dash app without a browser: layout numbers, callbacks over HTTP, the CLI command's safe defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.analysis import analyze
from analyzer.cli.app import main
from analyzer.ingest.loader import LoadOptions, load
from analyzer.report.json import to_dict
from dashboards.app import create_app
from dashboards.callbacks import collective_rows
from dashboards.layout import kpi_rows

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_h200" / "hybrid_tp_dp"


@pytest.fixture(scope="module")
def analysis():
    return analyze(load([SAMPLE], LoadOptions(cache=False)))


def test_kpi_rows_are_the_json_ranks(analysis):
    report = {r["rank"]: r for r in to_dict(analysis)["ranks"]}
    rows = kpi_rows(analysis)
    assert [r["rank"] for r in rows] == sorted(report)
    for row in rows:
        rec = report[row["rank"]]
        for key in ("compute_ms", "exposed_comm_ms", "exposed_wait_ms", "exposed_transfer_ms", "overlap_pct", "idle_ms"):
            assert row[key] == pytest.approx(rec[key], abs=1e-6)
        assert row["step_time_mean_ms"] == pytest.approx(rec["step_time_ms"]["mean"], abs=1e-6)


def test_collective_rows_filter_by_rank_and_step(analysis):
    rows = collective_rows(analysis, 3, None)
    assert rows and all("3" in r["ranks_text"].split(",") for r in rows)
    step = rows[0]["step"]
    assert all(r["step"] == step for r in collective_rows(analysis, None, step))
    waits = [r["max_wait_ms"] for r in collective_rows(analysis, None, None)]
    assert waits == sorted(waits, reverse=True)



def test_selection_callback_drops_unknown_ranks(analysis):
    client = create_app(analysis).server.test_client()
    assert client.get("/").status_code == 200
    inputs = [{"id": "kpi-table", "property": "active_cell", "value": {"row_id": 999, "row": 0, "column": 0}}]
    inputs += [{"id": i, "property": p, "value": None} for i, p in (
        ("breakdown", "clickData"), ("heatmap", "clickData"), ("timeline", "clickData"), ("waits", "clickData"),
        ("coll-table", "active_cell"), ("step-select", "value"), ("clear-selection", "n_clicks"))]
    state = [{"id": "selection", "property": "data", "value": {"rank": None, "step": None, "collective": None}},
             {"id": "timeline-lanes", "property": "data", "value": [0, 1, 2, 3]}]
    body = {"output": "..selection.data...step-select.value..",
            "outputs": [{"id": "selection", "property": "data"}, {"id": "step-select", "property": "value"}],
            "inputs": inputs, "state": state, "changedPropIds": ["kpi-table.active_cell"]}
    resp = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert resp.status_code == 200
    out = resp.get_json()["response"]
    assert out["selection"]["data"]["rank"] is None


def test_timeline_callback_answers_under_a_second(analysis):
    import time

    client = create_app(analysis).server.test_client()
    body = {"output": "..timeline.figure...timeline-lanes.data..",
            "outputs": [{"id": "timeline", "property": "figure"}, {"id": "timeline-lanes", "property": "data"}],
            "inputs": [{"id": "selection", "property": "data", "value": {"rank": 3, "step": None, "collective": None}},
                       {"id": "timeline-opts", "property": "value", "value": []},
                       {"id": "timeline", "property": "relayoutData", "value": None}],
            "changedPropIds": ["selection.data"]}
    t = time.perf_counter()
    resp = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    elapsed = time.perf_counter() - t
    assert resp.status_code == 200
    lanes = resp.get_json()["response"]["timeline-lanes"]["data"]
    assert lanes.count(3) > 1  # the selected rank opened into its streams
    assert elapsed < 1.0, elapsed


def test_cli_dashboard_defaults_are_local_and_not_debug():
    result = CliRunner().invoke(main, ["dashboard", "--help"])
    assert result.exit_code == 0
    assert "127.0.0.1" in result.output and "8050" in result.output and "--debug" in result.output


def test_cli_dashboard_bad_path_is_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["dashboard", str(tmp_path / "absent")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
