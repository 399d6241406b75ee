"""The export panel: the current selection as a Perfetto (or Chrome JSON) trace download.

A rank selected exports that rank, a step that step on every rank, a collective its participants over
its step. The trace is written in memory from the app's Analysis (nothing is read from disk per
request) and the equivalent ``commscope export`` command is shown beside the button.

The writer is handed in (``TraceWriter``: ``analyzer.export.write_trace``, wired by ``analyzer.cli.compose``):
presenters never import each other, and the dashboard needs only "write this selection of this run".
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import IO

import dash
import polars as pl
from dash import Input, Output, State, dcc, html, no_update

from analyzer.analysis import Analysis
from analyzer.errors import CommscopeError
from analyzer.views.selection import Selection, command_line

from . import inputs

SUFFIX = {"pftrace": "pftrace", "json": "json"}
# (analysis, selection, binary file, format) -> counts: analyzer.export.write_trace
TraceWriter = Callable[[Analysis, Selection, IO[bytes], str], dict]


def selection_of(a: Analysis, sel: dict | None) -> Selection:
    """The dashboard's selection store -> what to export (unknown ranks/steps/collectives are ignored)."""
    clean = inputs.Known(a).selection(sel)  # a client's store: only known ranks, steps, collectives
    ranks, steps = {int(r) for r in a.source["ranks"]}, set(a.steps["step"].to_list()) if a.steps.height else set()
    rank, step, coll = clean["rank"], clean["step"], clean["collective"]
    out_ranks = (rank,) if rank is not None else None
    out_steps = (step,) if step is not None else None
    if coll is not None:
        row = a.collectives.filter((pl.col("pg") == coll["pg"]) & (pl.col("seq") == coll["seq"]))
        if row.height:
            out_ranks = tuple(sorted(int(r) for r in row["ranks"][0] if int(r) in ranks)) or out_ranks
            out_steps = (row["step"][0],) if row["step"][0] in steps else out_steps
    return Selection(ranks=out_ranks, steps=out_steps)


def filename(sel: Selection, fmt: str) -> str:
    parts = ["commscope"]
    if sel.ranks is not None:
        parts.append("ranks" + "-".join(map(str, sel.ranks)) if len(sel.ranks) <= 8 else f"{len(sel.ranks)}ranks")
    if sel.steps is not None:
        parts.append("step" + "-".join(map(str, sel.steps)))
    return "_".join(parts) + "." + SUFFIX[fmt]


def section(a: Analysis) -> html.Span:
    return html.Span(style={"marginLeft": "16px"}, children=[
        html.Button("download Perfetto trace", id="export-button", n_clicks=0),
        dcc.RadioItems(id="export-format", value="pftrace", inline=True, style={"display": "inline-block"},
                       options=[{"label": " .pftrace ", "value": "pftrace"}, {"label": " JSON", "value": "json"}]),
        html.Code(command_line(a), id="export-command", style={"marginLeft": "12px", "fontSize": "12px"}),
        dcc.Download(id="export-download"),
    ])


def trace_bytes(a: Analysis, sel: Selection, fmt: str, write: TraceWriter) -> bytes:
    buf = io.BytesIO()
    write(a, sel, buf, fmt)
    return buf.getvalue()


def register(app: dash.Dash, a: Analysis, write: TraceWriter) -> None:
    @app.callback(Output("export-command", "children"), Input("selection", "data"), Input("export-format", "value"))
    def command(sel, fmt):
        fmt = inputs.choice(fmt, SUFFIX, "pftrace")
        s = selection_of(a, sel)
        return command_line(a, s, filename(s, fmt)) + ("" if fmt == "pftrace" else " --format json")

    @app.callback(Output("export-download", "data"), Input("export-button", "n_clicks"),
                  State("selection", "data"), State("export-format", "value"), prevent_initial_call=True)
    def download(_n, sel, fmt):
        fmt = inputs.choice(fmt, SUFFIX, "pftrace")
        s = selection_of(a, sel)
        try:
            data = trace_bytes(a, s, fmt, write)
        except CommscopeError:
            return no_update
        return dcc.send_bytes(data, filename(s, fmt))
