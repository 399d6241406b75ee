"""The history page over HTTP (Flask test client): the plot's points carry run IDs, a click shows the run and
links /run/<RUN>, which serves the run's full analysis while its traces are unchanged and its stored summary
after; malformed callback inputs and unknown runs are answered, never with a 500."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest

from analyzer.analysis.units import ms_tables
from analyzer.cli.compose import history_app as create_app  # as served: /run/<RUN> opens the full report
from analyzer.history.record import add
from tests.helpers import ROOT, run

SAMPLE = ROOT / "sample_traces" / "gpu_h200" / "compute_straggler"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hist")
    traces = tmp / "traces"
    shutil.copytree(SAMPLE, traces)  # a copy the test can later remove
    target = str(tmp / "h.sqlite")
    a = run(traces)
    add(target, a, "r1", {"branch": "main"})
    add(target, run(SAMPLE), "r2")
    return target, traces, a


def _post(client, output: str, prop: str, input_id: str, input_prop: str, value):
    body = {"output": f"{output}.{prop}", "outputs": {"id": output, "property": prop},
            "inputs": [{"id": input_id, "property": input_prop, "value": value}],
            "changedPropIds": [f"{input_id}.{input_prop}"]}
    return client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")


def test_plot_points_are_the_stored_runs(store):
    target, _, a = store
    client = create_app(target).server.test_client()
    assert client.get("/").status_code == 200
    resp = _post(client, "history-graph", "figure", "history-metric", "value", "step_time_ms")
    assert resp.status_code == 200
    fig = resp.get_json()["response"]["history-graph"]["figure"]
    line = [d for d in fig["data"] if d["name"] == "run"][0]
    assert line["customdata"] == ["r1", "r2"] and line["x"] == [1, 2]
    per_step: dict[int, list[float]] = {}
    for r in ms_tables(a).steps.to_dicts():
        per_step.setdefault(r["step"], []).append(r["span_ms"])
    assert line["y"][0] == pytest.approx(statistics.median(statistics.fmean(v) for v in per_step.values()))


def test_click_shows_the_run_and_links_its_analysis(store):
    target, _, a = store
    client = create_app(target).server.test_client()
    resp = _post(client, "run-details", "children", "history-graph", "clickData",
                 {"points": [{"x": 1, "y": 0, "customdata": "r1"}]})
    assert resp.status_code == 200
    text = json.dumps(resp.get_json())
    assert "run r1" in text and "branch=main" in text and "/run/r1" in text
    assert f"rank {a.verdict.rank} ({a.verdict.kind})" in text
    page = client.get("/run/r1")
    assert page.status_code == 200
    body = page.get_data(as_text=True)
    assert "<h1>commscope: kineto, 4 rank(s)" in body and "plotly" in body  # the full report of a new analysis


@pytest.mark.parametrize("value", [None, "nope", 3, {"x": 1}, [1, 2]])
def test_bad_metric_values_answer_with_an_empty_plot(store, value):
    client = create_app(store[0]).server.test_client()
    resp = _post(client, "history-graph", "figure", "history-metric", "value", value)
    assert resp.status_code == 200


@pytest.mark.parametrize("click", [None, {}, {"points": []}, {"points": [{"customdata": 5}]}, "x",
                                   {"points": [{"customdata": "no-such-run"}]},
                                   {"points": [{"customdata": "../../etc/passwd"}]}])
def test_malformed_clicks_are_answered(store, click):
    client = create_app(store[0]).server.test_client()
    resp = _post(client, "run-details", "children", "history-graph", "clickData", click)
    assert resp.status_code == 200


def test_run_page_falls_back_to_the_stored_summary_when_traces_are_gone(store):
    target, traces, _ = store
    client = create_app(target).server.test_client()
    assert client.get("/run/no-such-run").status_code == 404
    assert client.get("/run/%20bad").status_code == 400
    shutil.rmtree(traces)
    page = client.get("/run/r1")
    body = page.get_data(as_text=True)
    assert page.status_code == 200
    assert "stored summary" in body and "gone or changed" in body and "step_time_ms" in body
