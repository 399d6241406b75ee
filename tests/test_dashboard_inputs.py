"""Malformed requests to the real Dash server: every callback answers 200 (with an in-page message) or a 4xx,
never a 500 and never a traceback; a body over the limit gets 413 before it is read."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
from pathlib import Path

import pytest

from analyzer.analysis import analyze
from analyzer.cli.compose import dashboard_app
from analyzer.ingest.loader import LoadOptions, load
from analyzer.views import summary
from dashboards.app import DEFAULT_MAX_REQUEST_BYTES, create_app

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_h200" / "hybrid_tp_dp"
HUGE = 1e308

# values a client can send in place of any input: wrong types, unknown ids, huge, NaN and infinite numbers
BAD_VALUES: list = [
    None, 0, -1, 7, 10**30, HUGE, -HUGE, float("nan"), float("inf"), "x", "NaN", "", True, [], [None], [1, "a"], {},
    {"row_id": 999}, {"row_id": {"a": 1}}, {"row_id": "0/x"}, {"row_id": "nope/3"}, {"row_id": [1]},
    {"points": []}, {"points": None}, {"points": "x"}, {"points": [None]}, {"points": [{}]},
    {"points": [{"x": HUGE, "y": -HUGE, "curveNumber": "z"}]}, {"points": [{"x": "NaN", "y": float("nan")}]},
    {"points": [{"y": HUGE}]}, {"points": [{"customdata": None}]}, {"points": [{"customdata": [1, 2]}]},
    {"points": [{"customdata": [{"a": 1}, [], 3, "s"]}]}, {"points": [{"customdata": ["0", HUGE, 1, -HUGE]}]},
    {"rank": "0", "step": [], "collective": "x"}, {"rank": HUGE, "step": float("nan"), "collective": {"pg": None}},
    {"rank": 1, "step": None, "collective": {"pg": "0", "seq": "x"}},
    {"rank": 1, "step": None, "collective": {"pg": [1], "seq": HUGE}},
    {"rank": 1, "step": None, "collective": {"pg": "0", "seq": 10**30}},
    {"xaxis.range[0]": -HUGE, "xaxis.range[1]": HUGE}, {"xaxis.range[0]": 0, "xaxis.range[1]": HUGE},
    {"xaxis.range[0]": "NaN", "xaxis.range[1]": "inf"}, {"xaxis.range": [-HUGE, HUGE]}, {"xaxis.range": [0]},
    {"xaxis.range": "x"}, {"xaxis.range[0]": [], "xaxis.range[1]": {}}, {"xaxis.range[0]": 5, "xaxis.range[1]": 5},
    {"xaxis.range[0]": float("-inf"), "xaxis.range[1]": float("nan")}, {"xaxis.autorange": "x"},
    [{"column_id": "rank", "direction": "desc"}], [{"column_id": {"a": 1}}], [{}], [[1]], "streams", ["streams", 1],
    {"nested": [[[[[]]]]]}, list(range(5000)),
]


@pytest.fixture(scope="module")
def analysis():
    return analyze(load([SAMPLE], LoadOptions(cache=False)))


def _outputs(key: str) -> list[dict]:
    parts = key.strip(".").split("...") if key.startswith("..") else [key]
    return [dict(zip(("id", "property"), p.rsplit(".", 1))) for p in parts]


def _body(key: str, spec: dict, trigger: int, value) -> dict:
    inputs = [{**i, "value": None} for i in spec["inputs"]]
    inputs[trigger]["value"] = value
    outs = _outputs(key)
    return {"output": key, "outputs": outs if key.startswith("..") else outs[0], "inputs": inputs,
            "state": [{**s, "value": None} for s in spec.get("state", [])],
            "changedPropIds": [f"{inputs[trigger]['id']}.{inputs[trigger]['property']}"]}


def _check(resp) -> None:
    text = resp.get_data(as_text=True)
    assert resp.status_code < 500, text[:500]
    assert resp.status_code in (200, 204) or 400 <= resp.status_code < 500
    assert "Traceback" not in text and 'File "' not in text, text[:500]


def _apps(analysis, monkeypatch):
    yield dashboard_app(analysis)  # as served: with the export panel's callbacks
    monkeypatch.setattr(summary, "MANY_RANKS", 2)  # the many-ranks views and their paging callback
    yield dashboard_app(analysis)


def test_every_callback_survives_malformed_inputs(analysis, monkeypatch) -> None:
    seen: set[str] = set()
    statuses: dict[int, int] = {}
    for app in _apps(analysis, monkeypatch):
        client = app.server.test_client()
        for key, spec in app.callback_map.items():
            seen.add(key)
            states = [s for s in spec.get("state", [])]
            for trigger, value in itertools.product(range(len(spec["inputs"])), BAD_VALUES):
                body = _body(key, spec, trigger, value)
                resp = client.post("/_dash-update-component", data=json.dumps(body),
                                   content_type="application/json")
                _check(resp)
                statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
                for s in range(len(states)):  # the same value as state (the selection store, the lanes)
                    body["state"][s]["value"] = value
                    resp = client.post("/_dash-update-component", data=json.dumps(body),
                                       content_type="application/json")
                    _check(resp)
    assert "..kpi-table.data...kpi-table.page_current.." in seen and len(seen) == 8
    assert statuses.get(200, 0) > 1000  # the bad values are answered, not refused wholesale


def test_a_raising_callback_answers_in_the_page(analysis, monkeypatch) -> None:
    """Whatever a check missed: the page says the request was ignored, with no traceback and no 500."""
    from analyzer.views import figures

    def boom(*_a, **_k):
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(figures, "heatmap_figure", boom)
    app = create_app(analysis)
    client = app.server.test_client()
    spec = app.callback_map["heatmap.figure"]
    resp = client.post("/_dash-update-component", data=json.dumps(_body("heatmap.figure", spec, 0, "idle_ms")),
                       content_type="application/json")
    _check(resp)
    assert resp.status_code == 200
    doc = resp.get_json()
    msg = doc["sideUpdate"]["input-message"]["children"]
    assert msg.startswith("Ignored a request the dashboard could not use") and "OverflowError" in msg
    assert "heatmap" not in json.dumps(doc.get("response", {}))  # the figure is left as it was


@pytest.mark.parametrize("body", [
    "", "not json", "[]", "null", "{}", '{"output": "nope.children"}',
    '{"output": "heatmap.figure", "outputs": {"id": "heatmap", "property": "figure"}}',
    '{"output": "heatmap.figure", "outputs": {"id": "heatmap", "property": "figure"}, "inputs": "x"}',
    '{"output": "heatmap.figure", "outputs": {"id": "heatmap", "property": "figure"}, "inputs": [1, 2]}',
    '{"output": "heatmap.figure", "outputs": [], "inputs": [], "changedPropIds": 5}',
    '{"output": "..selection.data...step-select.value..", "outputs": [], "inputs": [], "state": []}',
    '{"output": "' + "x" * 100_000 + '"}', "[" * 100_000 + "]" * 100_000,
])
def test_malformed_requests_are_4xx_without_traceback(analysis, body: str) -> None:
    client = create_app(analysis).server.test_client()
    resp = client.post("/_dash-update-component", data=body, content_type="application/json")
    _check(resp)
    assert resp.status_code != 200 or resp.get_json() is not None


def test_request_limit_on_a_real_server(analysis) -> None:
    """50 MB to the real server on 127.0.0.1: 413, answered from the header without reading the body."""
    from werkzeug.serving import make_server

    app = create_app(analysis)
    assert app.server.config["MAX_CONTENT_LENGTH"] == DEFAULT_MAX_REQUEST_BYTES == 1 << 20
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_port
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.putrequest("POST", "/_dash-update-component")
        conn.putheader("Content-Type", "application/json")
        size = 50 * 1024 * 1024
        conn.putheader("Content-Length", str(size))
        conn.endheaders()
        chunk = b" " * (1 << 20)
        try:  # the server may answer and close before all of it is sent
            for _ in range(size // len(chunk)):
                conn.send(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        assert resp.status == 413, text[:300]
        assert "Traceback" not in text
        conn.close()
        # a normal request still works, and one just under the limit is read
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/")
        assert conn.getresponse().status == 200
        conn.close()
        small = create_app(analysis, max_request_bytes=1000).server.test_client()
        assert small.post("/_dash-update-component", data="x" * 1001, content_type="application/json"
                          ).status_code == 413
    finally:
        server.shutdown()
        thread.join(timeout=10)
