"""Callbacks: they only filter and present the one Analysis the app was built with (no I/O, no metrics).

Selection lives in the ``selection`` store ({rank, step, collective}); every click writes it, every view
reads it. No request value ever reaches the file system: inputs are ranks, steps and axis ranges.
"""

from __future__ import annotations

import json
from typing import Any

import dash
import plotly.graph_objects as go
import polars as pl
from dash import Input, Output, Patch, State, ctx, no_update

from analyzer.analysis import Analysis
from analyzer.views import figures, summary
from analyzer.views import timeline as tl
from analyzer.views.units import ms_tables

from . import inputs
from .layout import kpi_rows

MAX_COLLECTIVE_ROWS = 200
EMPTY = {"rank": None, "step": None, "collective": None}


def _int(value: Any) -> int | None:
    return inputs.as_int(value)


def collective_rows(a: Analysis, rank: int | None, step: int | None) -> list[dict]:
    """The slowest instances (by longest wait), for the selected rank and step; values as in the JSON."""
    c = ms_tables(a).collectives
    if rank is not None:
        c = c.filter(pl.col("ranks").list.contains(rank))
    if step is not None:
        c = c.filter(pl.col("step") == step)
    c = c.sort("max_wait_ms", descending=True, nulls_last=True).head(MAX_COLLECTIVE_ROWS)
    rows = []
    for r in c.select("pg", "seq", "op", "step", "bytes", "ranks", "transfer_ms", "max_wait_ms", "arrival_skew_ms",
                      "last_rank", "busbw_gbps").to_dicts():
        r["ranks_text"] = ",".join(map(str, r.pop("ranks") or []))
        r["id"] = f"{r['pg']}/{r['seq']}"
        rows.append(r)
    return rows


def _collective_window(a: Analysis, pg: str, seq: int) -> tuple[tuple[float, float], list[int]] | None:
    row = ms_tables(a).collectives.filter((pl.col("pg") == pg) & (pl.col("seq") == seq))
    if row.height == 0:
        return None
    r = row.row(0, named=True)
    x0 = tl.to_axis_ms(a, r["start_ms"])
    dur = (r["arrival_skew_ms"] or 0.0) + (r["transfer_ms"] or 0.0) + (r["max_wait_ms"] or 0.0)
    pad = max(0.2, dur)  # show what ran around the instance, not only the kernel itself
    return (x0 - pad, x0 + dur + pad), list(r["ranks"] or [])


def _relayout_window(relayout: dict | None) -> tuple[float, float] | None | str:
    """The zoomed x range, "reset" on autorange, None when the relayout was not an x zoom (inputs.zoom)."""
    return inputs.zoom(relayout)


def register(app: dash.Dash, a: Analysis) -> None:
    known = inputs.Known(a)  # every client value is checked against it before use (inputs.py)
    many = summary.many(a)  # summary views: a selection only moves their marker (sent as a patch)

    @app.callback(
        Output("selection", "data"), Output("step-select", "value"),
        Input("kpi-table", "active_cell"), Input("breakdown", "clickData"), Input("heatmap", "clickData"),
        Input("timeline", "clickData"), Input("waits", "clickData"), Input("coll-table", "active_cell"),
        Input("step-select", "value"), Input("clear-selection", "n_clicks"),
        State("selection", "data"), State("timeline-lanes", "data"),
        prevent_initial_call=True,
    )
    def select(kpi_cell, bar_click, heat_click, tl_click, wait_click, coll_cell, step_value, _clear, sel, lanes):
        sel = known.selection(sel)
        trig = ctx.triggered_id
        if trig == "clear-selection":
            return dict(EMPTY), None
        cell = inputs.as_dict(kpi_cell)
        if trig == "kpi-table" and cell:
            sel["rank"] = known.rank(cell.get("row_id"))
        elif trig == "breakdown" and (p := inputs.first_point(bar_click)):
            if not many or p.get("curveNumber", 0) == 0:  # many ranks: only the heatmap names a rank
                sel["rank"] = known.rank(p.get("x"))
        elif trig == "heatmap" and (p := inputs.first_point(heat_click)):
            sel["rank"], sel["step"] = known.rank(p.get("y")), known.step(p.get("x"))
        elif trig == "timeline" and (p := inputs.first_point(tl_click)):
            lanes = inputs.int_list(lanes)
            y = inputs.as_float(p.get("y"))
            lane = None if y is None or abs(y) > len(lanes) + 1 else round(y)
            if lane is not None and 0 <= lane < len(lanes):
                sel["rank"] = known.rank(lanes[lane])
        elif trig == "waits" and (p := inputs.first_point(wait_click)):
            data = p.get("customdata")
            if isinstance(data, list) and len(data) == 4:
                found = inputs.collective(a, {"pg": data[0], "seq": data[1]})
                if found:
                    sel["collective"], sel["step"] = found, known.step(data[3])
        elif trig == "coll-table" and isinstance((rid := inputs.as_dict(coll_cell).get("row_id")), str):
            pg, _, seq = rid.rpartition("/")
            found = inputs.collective(a, {"pg": pg, "seq": seq})
            if found:
                row = a.collectives.filter((pl.col("pg") == found["pg"]) & (pl.col("seq") == found["seq"]))
                sel["collective"], sel["step"] = found, known.step(row["step"][0])
        elif trig == "step-select":
            sel["step"] = known.step(step_value)
            sel["collective"] = None
        return sel, sel["step"]

    if many:
        rows_all, size = kpi_rows(a), summary.kpi_page_size(a) or 1

        # Not driven by the selection: a callback with the table as output re-renders it on every click
        # (measured at 1,024 ranks: a click took 1.5-2.2 s instead of 1.2 s), so the table does not turn
        # to a rank selected elsewhere; the selection bar names it and the table marks it where shown.
        @app.callback(Output("kpi-table", "data"), Output("kpi-table", "page_current"),
                      Input("kpi-table", "page_current"), Input("kpi-table", "sort_by"), prevent_initial_call=True)
        def kpi_page(page, sort_by):
            """Many ranks: the server sorts and pages the KPI rows; a new order starts at its first page."""
            ordered = summary.sort_rows(rows_all, inputs.sort_by(sort_by))
            page = 0 if ctx.triggered_id == "kpi-table" and "kpi-table.sort_by" in ctx.triggered_prop_ids else page
            page = max(0, min(_int(page) or 0, (len(ordered) - 1) // size))
            return ordered[page * size:(page + 1) * size], page

    @app.callback(Output("selection-text", "children"), Output("kpi-table", "style_data_conditional"),
                  Output("breakdown", "figure"), Input("selection", "data"))
    def overview(sel):
        sel = known.selection(sel)
        parts = []
        if sel.get("rank") is not None:
            parts.append(f"rank {sel['rank']}")
        if sel.get("step") is not None:
            parts.append(f"step {sel['step']}")
        if sel.get("collective"):
            parts.append(f"collective {sel['collective']['pg']}/{sel['collective']['seq']}")
        text = "Selected: " + " · ".join(parts) if parts else "No selection: click a rank, step or collective."
        style = ([{"if": {"filter_query": f"{{rank}} = {sel['rank']}"}, "backgroundColor": "#fff3b0"}]
                 if sel.get("rank") is not None else [])
        if many:
            marker = Patch()
            marker["layout"]["shapes"] = summary.rank_marker(sel.get("rank"))
            return text, style, marker
        return text, style, figures.breakdown_figure(a, selected_rank=sel.get("rank"))

    @app.callback(Output("heatmap", "figure"), Input("heatmap-metric", "value"), Input("selection", "data"))
    def heatmap(metric, sel):
        metric = inputs.choice(metric, figures.HEATMAP_METRICS, "caused_wait_ms")
        sel = known.selection(sel)
        if many and ctx.triggered_id == "selection":
            marker = Patch()
            marker["layout"]["shapes"] = summary.rank_marker((sel or EMPTY).get("rank"), axis="y")
            return marker
        return figures.heatmap_figure(a, metric, selected_rank=(sel or EMPTY).get("rank"))

    @app.callback(Output("waits", "figure"), Output("busbw", "figure"), Output("coll-table", "data"),
                  Input("selection", "data"))
    def collectives(sel):
        sel = known.selection(sel)
        ranks = [sel["rank"]] if sel.get("rank") is not None else None
        return (figures.wait_figure(a, ranks), figures.busbw_figure(a, ranks),
                collective_rows(a, sel.get("rank"), sel.get("step")))

    @app.callback(Output("timeline", "figure"), Output("timeline-lanes", "data"),
                  Input("selection", "data"), Input("timeline-opts", "value"), Input("timeline", "relayoutData"))
    def timeline(sel, opts, relayout):
        sel = known.selection(sel)
        by_stream = "streams" in inputs.str_list(opts)
        window: tuple[float, float] | None = None
        # a click can fire a relayout (the page reflows) together with the selection: only a relayout alone
        # is the user zooming; ctx.triggered_id names just one of several triggers
        only_relayout = set(ctx.triggered_prop_ids) == {"timeline.relayoutData"}
        zoom = _relayout_window(relayout) if only_relayout else None
        if only_relayout and zoom is None:
            return no_update, no_update  # a relayout that is not an x zoom (legend, autosize, y pan)
        if isinstance(zoom, tuple):
            window = zoom
        elif zoom != "reset" and sel.get("collective"):
            found = _collective_window(a, sel["collective"]["pg"], sel["collective"]["seq"])
            window = found[0] if found else None
        elif zoom != "reset" and sel.get("step") is not None:
            window = tl.step_window_ms(a, sel["step"])
        focus = summary.focus_ranks(a, sel.get("rank"))  # many ranks: draw a few, not one lane each
        fig = figures.timeline_figure(a, ranks=focus, window_ms=window, by_stream=by_stream,
                                      selected_rank=sel.get("rank"), expand_rank=None if by_stream else sel.get("rank"),
                                      note=summary.ranks_label(a, focus) if focus else None)
        # same revision while only zooming, so plotly keeps the user's view; a new selection resets it
        fig.update_layout(uirevision=json.dumps([sel, by_stream], sort_keys=True))
        lanes = [ln[0] for ln in (fig.layout.meta or {}).get("lanes", [])] if isinstance(fig, go.Figure) else []
        return fig, lanes
