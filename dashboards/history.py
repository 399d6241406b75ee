"""The history page: a metric over the stored runs (change points marked); a click on a run shows its stored
summary with a link to ``/run/<RUN>``, which opens that run's full analysis.

``/run/<RUN>`` re-analyzes the run's stored source paths when every file is still there with the stored
size and head (fingerprint), and serves the static HTML report of that analysis; otherwise it serves
the stored summary and says why. Loading, analyzing and rendering a report is not a presenter's to do:
``open_run`` (paths -> the report page; ``analyzer.cli.compose.full_report``) is handed in. The store is read
per request: CI jobs keep adding runs. Inputs are checked (an unknown metric or run, a malformed click) and
answered, never with a server error.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Callable
from pathlib import Path

import dash
import plotly.graph_objects as go
from dash import Input, Output, dcc, html

from analyzer.errors import CommscopeError
from analyzer.history import fingerprint
from analyzer.history.store import Store
from analyzer.history.trend import Trend, build
from analyzer.redact import redact
from analyzer.views.trend import figure
from analyzer.views.units import num

from . import guard

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+@/-]{0,199}$")
OpenRun = Callable[[list[Path]], str]  # a run's trace files -> its full HTML report
SUMMARY_METRICS = ("step_time_ms", "exposed_comm_ms", "exposed_wait_ms", "exposed_transfer_ms", "overlap_pct",
                   "idle_ms", "wait_ms", "root_caused_wait_ms")


def _trend(target: str, metric: str | None = None) -> Trend:
    with Store.open(target, create=False) as store:
        return build(store, metrics=[metric] if metric else None)


def metric_figure(target: str, metric: object) -> go.Figure | dict:
    """The metric over runs; anything that is not a stored metric gets an empty plot that says so."""
    try:
        t = _trend(target, metric if isinstance(metric, str) and metric else None)
    except CommscopeError as exc:
        return _empty(str(exc))
    series = [s for s in t.series if s.metric == metric]
    if not series:
        return _empty(f"no metric {metric!r} in the store")
    return figure(t, metric, series)


def _empty(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(height=320, template="plotly_white", xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def clicked_run(click: object) -> str | None:
    """The run ID a plot click carries (its point's customdata), or None for anything else."""
    try:
        run_id = click["points"][0]["customdata"]  # type: ignore[index]
    except (TypeError, KeyError, IndexError):
        return None
    return run_id if isinstance(run_id, str) and RUN_ID.match(run_id) else None


def run_summary(target: str, run_id: str) -> tuple[dict, dict[str, float]]:
    """The run's record and its run-level values of the summary metrics."""
    with Store.open(target, create=False) as store:
        rec = store.run(run_id)
        rows = store.metrics(run_id=run_id, metrics=list(SUMMARY_METRICS), scopes="trend")
    values = {m: v for m, k, v in rows.select("metric", "dimension", "value").iter_rows() if k is None}
    return rec, values


def details(target: str, click: object) -> html.Div:
    run_id = clicked_run(click)
    if run_id is None:
        return html.Div("Click a run in the plot to see its summary and open its analysis.", className="muted")
    try:
        rec, values = run_summary(target, run_id)
    except CommscopeError as exc:
        return html.Div(str(exc), className="warn")
    v = rec["verdict"]
    verdict = f"straggler: rank {v['rank']} ({v['kind']})" if v else "no straggler"
    labels = redact(", ".join(f"{k}={val}" for k, val in rec["labels"].items())) or "no labels"
    return html.Div([
        html.H3(f"run {run_id}"),
        html.P(f"added {rec['added_at']}; {labels}; {verdict}"),
        html.Table([html.Tr([html.Th(m), html.Td(num(values.get(m)))]) for m in SUMMARY_METRICS if m in values]),
        html.P(html.A("open this run's analysis", href=f"/run/{run_id}", id="open-run", target="_blank")),
    ], id="run-summary")


def run_page(target: str, run_id: str, open_run: OpenRun | None = None) -> tuple[str, int]:
    """(HTML, status) for /run/<RUN>: the full report when the traces are unchanged, else the stored summary."""
    if not RUN_ID.match(run_id):
        return _page("commscope", "<p>not a run ID</p>"), 400
    try:
        rec, values = run_summary(target, run_id)
    except CommscopeError as exc:
        return _page("commscope", f"<p>{html_lib.escape(str(exc))}</p>"), 404
    fps = rec["fingerprints"]
    if open_run is None:
        why = "this page was started without the analysis (commscope history dashboard opens full reports)"
    elif fps and all(fingerprint.unchanged(f) for f in fps):
        try:
            return open_run([Path(f["path"]) for f in fps]), 200
        except CommscopeError as exc:
            why = f"the traces could not be analyzed again: {exc}"
    else:
        gone = [f["path"] for f in fps if not fingerprint.unchanged(f)]
        why = ("no source fingerprints were stored" if not fps else
               f"{len(gone)} of {len(fps)} trace files are gone or changed since (e.g. {gone[0]})")
    rows = "".join(f"<tr><th>{html_lib.escape(m)}</th><td>{num(values.get(m))}</td></tr>" for m in SUMMARY_METRICS
                   if m in values)
    body = (f"<h1>run {html_lib.escape(run_id)}</h1><p>Showing the stored summary: {html_lib.escape(why)}.</p>"
            f"<table>{rows}</table>")
    return _page(f"commscope run {run_id}", body), 200


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html_lib.escape(title)}</title>'
            f"</head><body>{body}</body></html>")


def create_app(target: str, open_run: OpenRun | None = None,
               max_request_bytes: int = guard.DEFAULT_MAX_REQUEST_BYTES) -> dash.Dash:
    """The page, guarded as every commscope app is (``guard.py``: size limit, 4xx, 404, redaction)."""
    app = dash.Dash(__name__, title="commscope history", **guard.DASH_OPTIONS)
    t = _trend(target)
    metrics = list(dict.fromkeys(s.metric for s in t.series))
    first = metrics[0] if metrics else None
    app.layout = html.Div([
        guard.message_area(),
        html.H1(redact(f"commscope history: {t.runs.height} run(s) in {t.store}")),
        dcc.Dropdown(id="history-metric", options=[{"label": m, "value": m} for m in metrics], value=first,
                     clearable=False),
        dcc.Graph(id="history-graph", figure=metric_figure(target, first)),
        html.Div(id="run-details", children=details(target, None)),
    ], style={"fontFamily": "system-ui, sans-serif", "margin": "1.5rem"})

    # the layout already holds the first metric's figure: no redraw on load (it would race a first click)
    @app.callback(Output("history-graph", "figure"), Input("history-metric", "value"), prevent_initial_call=True)
    def _metric(value: object) -> go.Figure:
        return metric_figure(target, value)

    @app.callback(Output("run-details", "children"), Input("history-graph", "clickData"))
    def _click(click: object) -> html.Div:
        return details(target, click)

    @app.server.route("/run/<path:run_id>")
    def _run(run_id: str):  # noqa: ANN202 (a Flask view)
        text, status = run_page(target, run_id, open_run)
        return text, status, {"Content-Type": "text/html; charset=utf-8"}

    guard.install(app, max_request_bytes)
    return app


def serve(target: str, host: str = "127.0.0.1", port: int = 8050, open_run: OpenRun | None = None) -> None:
    create_app(target, open_run).run(host=host, port=port, debug=False, use_reloader=False, dev_tools_ui=False)
