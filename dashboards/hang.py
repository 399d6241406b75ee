"""Hang triage page (Flight Recorder input): the answer, and the process group x seq grid.

Each cell is one collective of one group: green when every member completed it, orange when members
entered it and wait (none missing), red when some member never entered it or left no dump. Clicking a
cell says who is in which state. The figure is ``analyzer.views.hang_grid``'s, which the HTML report draws too.
"""

from __future__ import annotations

from analyzer.hangs.analysis import HangAnalysis
from analyzer.views.hang import headline, ranks_text
from analyzer.views.hang_grid import grid_cells, grid_figure


def cell_details(a: HangAnalysis, label: str, seq: int) -> str:
    """What the click on a cell shows: counts, and for a hang's cell who waits and who is absent."""
    for c in grid_cells(a):
        if c["label"] == label and c["seq"] == seq:
            out = (f"pg {label} #{seq} {c['op']}: {c['completed']} completed, {c['waiting']} waiting, "
                   f"{c['missing']} never entered, {c['no_dump']} without a dump (of {c['size']})"
                   + (f", {c['mismatched']} with another op, size or dtype." if c.get("mismatched") else "."))
            for m in a.result.mismatches:
                if m["group"] == label and m["seq"] == seq and m["ranks"]:
                    out += " Mismatched: " + "; ".join(f"rank {e['rank']}: {e['op']} {e['in_sizes']} {e['dtype']}"
                                                        for e in m["entries"][:4] if e["kind"] != "state") + "."
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

    from . import guard

    app = dash.Dash(__name__, title="commscope hang", **guard.DASH_OPTIONS)
    app.layout = html.Div([
        guard.message_area(),
        html.H2("commscope: hang triage (Flight Recorder)"),
        html.Div([html.P(line) for line in headline(a)], id="hang-headline"),
        dcc.Graph(id="hang-grid", figure=grid_figure(a)),
        html.Div("Click a cell for its members.", id="hang-cell"),
    ], style={"fontFamily": "system-ui, sans-serif", "margin": "1.5rem"})

    @app.callback(Output("hang-cell", "children"), Input("hang-grid", "clickData"))
    def show_cell(click):  # noqa: ANN001 - Dash passes the plotly event dict
        return on_click(a, click)

    guard.install(app)  # the same guard as every commscope app: size limit, 4xx, 404, redaction
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
