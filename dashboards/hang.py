"""Hang triage page (Flight Recorder input): the answer, and the process group x seq grid.

Each cell is one collective of one group: green when every member completed it, orange when members
entered it and wait (none missing), red when some member never entered it or left no dump. Clicking a
cell says who is in which state. ``grid_figure`` imports no Dash (the static HTML report uses it).
"""

from __future__ import annotations

import plotly.graph_objects as go

from analyzer.hang_analysis import HangAnalysis
from analyzer.report.hang import headline, ranks_text

STATES = ("all completed", "entered, waiting", "never entered / no dump")
COLORS = ("#54A24B", "#F58518", "#E45756")


def cell_state(completed: int, waiting: int, missing: int, no_dump: int) -> int:
    """0: all completed; 1: some wait in it, nobody absent; 2: some member never entered it or has no dump."""
    if missing or (no_dump and waiting):
        return 2
    return 1 if waiting else 0


def grid_cells(a: HangAnalysis) -> list[dict]:
    """One dict per drawn cell (the grid of the JSON report, plus the state drawn)."""
    out = []
    for c in a.result.grid.iter_rows(named=True):
        out.append({**c, "state": cell_state(c["completed"], c["waiting"], c["missing"], c["no_dump"])})
    return out


def grid_figure(a: HangAnalysis) -> go.Figure:
    cells = grid_cells(a)
    dims = {g["label"]: g["dimension"] for g in a.result.groups.iter_rows(named=True)}
    labels = sorted({c["label"] for c in cells}, key=lambda s: (len(s), s))
    seqs = sorted({c["seq"] for c in cells})
    pos = {s: i for i, s in enumerate(seqs)}
    row = {lab: i for i, lab in enumerate(labels)}
    z = [[None] * len(seqs) for _ in labels]
    text = [[""] * len(seqs) for _ in labels]
    for c in cells:
        i, j = row[c["label"]], pos[c["seq"]]
        z[i][j] = c["state"]
        text[i][j] = (f"pg {c['label']} #{c['seq']} {c['op']}<br>{c['completed']} completed, {c['waiting']} waiting, "
                      f"{c['missing']} never entered, {c['no_dump']} no dump (of {c['size']})")
    scale = [[0.0, COLORS[0]], [0.33, COLORS[0]], [0.34, COLORS[1]], [0.66, COLORS[1]], [0.67, COLORS[2]],
             [1.0, COLORS[2]]]
    fig = go.Figure(go.Heatmap(
        z=z, x=[str(s) for s in seqs], y=[f"{lab} ({dims.get(lab) or '?'})" for lab in labels], text=text,
        hovertemplate="%{text}<extra></extra>", zmin=0, zmax=2, colorscale=scale, xgap=2, ygap=2,
        colorbar={"tickvals": [0.33, 1, 1.67], "ticktext": list(STATES), "title": ""},
    ))
    fig.update_layout(title="Process group x collective seq (last seqs up to each group's hang)",
                      xaxis_title="collective seq", yaxis_title="process group", height=max(260, 40 * len(labels) + 140),
                      margin={"l": 140, "r": 40, "t": 60, "b": 50}, xaxis={"type": "category"})
    return fig


def cell_details(a: HangAnalysis, label: str, seq: int) -> str:
    """What the click on a cell shows: counts, and for a hang's cell who waits and who is absent."""
    for c in grid_cells(a):
        if c["label"] == label and c["seq"] == seq:
            out = (f"pg {label} #{seq} {c['op']}: {c['completed']} completed, {c['waiting']} waiting, "
                   f"{c['missing']} never entered, {c['no_dump']} without a dump (of {c['size']}).")
            for h in a.result.stuck:
                if h["group"] == label and h["seq"] == seq:
                    out += (f" Waiting: {ranks_text(h['waiting'])}. Never entered: {ranks_text(h['missing'])}."
                            + (f" Mismatched: {ranks_text([m['rank'] for m in h['mismatched']])}."
                               if h["mismatched"] else ""))
            return out
    return f"pg {label} #{seq}: no collective recorded"


def create_hang_app(a: HangAnalysis):
    import dash
    from dash import Input, Output, dcc, html

    app = dash.Dash(__name__, title="commscope hang", serve_locally=True, update_title=None)
    app.layout = html.Div([
        html.H2("commscope: hang triage (Flight Recorder)"),
        html.Div([html.P(line) for line in headline(a)], id="hang-headline"),
        dcc.Graph(id="hang-grid", figure=grid_figure(a)),
        html.Div("Click a cell for its members.", id="hang-cell"),
    ], style={"fontFamily": "system-ui, sans-serif", "margin": "1.5rem"})

    @app.callback(Output("hang-cell", "children"), Input("hang-grid", "clickData"))
    def show_cell(click):  # noqa: ANN001 - Dash passes the plotly event dict
        return on_click(a, click)

    return app


def on_click(a: HangAnalysis, click: dict | None) -> str:
    if not click or not click.get("points"):
        return "Click a cell for its members."
    p = click["points"][0]
    label = str(p["y"]).rsplit(" (", 1)[0]
    return cell_details(a, label, int(p["x"]))


def serve_hang(a: HangAnalysis, host: str = "127.0.0.1", port: int = 8050, debug: bool = False) -> None:
    app = create_hang_app(a)
    app.run(host=host, port=port, debug=debug, use_reloader=False, dev_tools_ui=debug, dev_tools_props_check=debug)
