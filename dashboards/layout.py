"""Static page structure: verdict first, then per-rank KPIs, heatmaps, timeline, collectives.

Table cells hold the Analysis numbers unchanged (the JSON report's numbers); only the display format
rounds them, so sorting is numeric and a cell reads the same as the JSON value formatted with ``.3f``.
"""

from __future__ import annotations

from dash import dash_table, dcc, html
from dash.dash_table.Format import Format, Scheme

from analyzer.analysis import Analysis
from analyzer.rules import NS_PER_US
from analyzer.views import communication as comm_view
from analyzer.views import figures, summary
from analyzer.views.units import ms_tables
from analyzer.views.verdict import headline

from . import critical, dimensions, export, pipeline

# (id, header, ranks column): the KPI table; ids double as the JSON ``ranks[]`` keys except step time
KPI_COLUMNS = (
    ("rank", "rank", "rank"),
    ("steps", "steps", "steps"),
    ("step_time_mean_ms", "step time mean (ms)", "step_time_mean_ms"),
    ("step_time_p50_ms", "step time p50 (ms)", "step_time_p50_ms"),
    ("step_time_max_ms", "step time max (ms)", "step_time_max_ms"),
    ("compute_ms", "compute (ms)", "compute_ms"),
    ("comm_ms", "comm (ms)", "comm_ms"),
    ("exposed_comm_ms", "exposed comm (ms)", "exposed_comm_ms"),
    ("exposed_wait_ms", "exposed wait (ms)", "exposed_wait_ms"),
    ("exposed_transfer_ms", "exposed transfer (ms)", "exposed_transfer_ms"),
    ("overlap_pct", "overlap %", "overlap_pct"),
    ("idle_ms", "idle (ms)", "idle_ms"),
    ("memcpy_ms", "memcpy (ms)", "memcpy_ms"),
    ("wait_ms", "wait (ms)", "wait_ms"),
    ("caused_wait_ms", "wait caused (ms)", "caused_wait_ms"),
    ("last_arrival_pct", "last arrival %", "last_arrival_pct"),
)
INT_COLUMNS = {"rank", "steps"}
NUMBER_FORMAT = Format(precision=3, scheme=Scheme.fixed, nully="n/a")
COLLECTIVE_COLUMNS = (
    ("pg", "pg"), ("seq", "seq"), ("op", "op"), ("step", "step"), ("bytes", "bytes"), ("ranks_text", "ranks"),
    ("transfer_ms", "transfer (ms)"), ("max_wait_ms", "max wait (ms)"), ("arrival_skew_ms", "arrival skew (ms)"),
    ("last_rank", "last rank"), ("busbw_gbps", "busbw (GB/s)"),
)
TABLE_STYLE = {"overflowX": "auto", "maxHeight": "420px", "overflowY": "auto"}
CELL_STYLE = {"fontFamily": "system-ui, sans-serif", "fontSize": "13px", "padding": "3px 8px", "minWidth": "64px"}


def kpi_rows(a: Analysis) -> list[dict]:
    """One row per rank from ``a.ranks`` in ms (NaN -> None so the cell reads n/a like JSON null)."""
    cols = [c for _, _, c in KPI_COLUMNS]
    rows = []
    for rec in ms_tables(a).ranks.select(cols).to_dicts():
        row = {k: (None if isinstance(v, float) and v != v else v) for k, v in rec.items()}
        row["id"] = row["rank"]  # DataTable row_id: a click names the rank even after sorting
        rows.append(row)
    return rows


def _kpi_paging(a: Analysis) -> dict:
    """Few ranks: every row, sorted in the browser. Many: one page at a time from the server (callbacks.py),
    so the page does not carry and render thousands of rows it does not show."""
    rows, size = kpi_rows(a), summary.kpi_page_size(a)
    if size is None:
        return {"data": rows, "sort_action": "native", "page_action": "none"}
    return {"data": rows[:size], "sort_action": "custom", "sort_mode": "single", "sort_by": [],
            "page_action": "custom", "page_current": 0, "page_size": size, "page_count": -(-len(rows) // size)}


def process_group_rows(a: Analysis) -> list[dict]:
    """Process groups as the traces declared them, with how many matched instances each had."""
    seen: dict[str, dict] = {}
    for meta in a.rank_meta:
        for pg in meta.process_groups:
            seen.setdefault(pg.name, {"pg": pg.name, "desc": pg.desc, "ranks": summary.members_text(pg.ranks)})
    counts = {pg: n for pg, n in a.collectives.group_by("pg").len().iter_rows()}
    ops = {pg: ", ".join(sorted(o)) for pg, o in a.collectives.group_by("pg").agg("op").iter_rows()}
    for name in counts:
        seen.setdefault(name, {"pg": name, "desc": "", "ranks": ""})
    rows = []
    for name, row in seen.items():
        rows.append({**row, "instances": counts.get(name, 0), "ops": ", ".join(sorted(set(ops.get(name, "").split(
            ", ")) - {""}))})
    return sorted(rows, key=lambda r: (len(r["pg"]), r["pg"]))


def _communication_section(a: Analysis) -> html.Section | None:
    """Communication by library and engine: the report's table (analyzer.views.communication), unchanged."""
    split = comm_view.summary(a)
    if split is None:
        return None
    cols = [{"id": k, "name": h, "type": "numeric", "format": Format(precision=d, scheme=Scheme.fixed)}
            if d else {"id": k, "name": h} for k, h, d in comm_view.COLUMNS]
    return _section(comm_view.TITLE, dash_table.DataTable(id="communication-table", columns=cols,
                                                          data=split.to_dicts(), style_table=TABLE_STYLE,
                                                          style_cell=CELL_STYLE),
                    html.P(comm_view.NOTE, style={"color": "#777"}))


def _section(title: str, *children, id_: str | None = None) -> html.Section:
    return html.Section([html.H2(title, style={"fontSize": "18px", "margin": "18px 0 6px"}), *children],
                        id=id_ or f"section-{title.lower().replace(' ', '-')}")


def build_layout(a: Analysis, download: bool = False) -> html.Div:
    """``download``: the export panel (the app registers its callbacks only with a trace writer)."""
    src = a.source
    steps = sorted(set(a.steps["step"].to_list())) if a.steps.height else []
    fit = a.clock
    clock = (f"clock: {fit.method}, reference rank {fit.reference}"
             + (f", uncertainty {fit.uncertainty_ns / NS_PER_US:,.1f} us" if fit.uncertainty_ns is not None else ""))
    kpi_columns = [
        {"id": cid, "name": name, "type": "numeric",
         **({} if cid in INT_COLUMNS else {"format": NUMBER_FORMAT})}
        for cid, name, _ in KPI_COLUMNS
    ]
    return html.Div(style={"fontFamily": "system-ui, sans-serif", "margin": "12px 24px", "maxWidth": "1500px"}, children=[
        dcc.Store(id="selection", data={"rank": None, "step": None, "collective": None}),
        dcc.Store(id="timeline-lanes", data=[]),
        html.H1("commscope", style={"fontSize": "24px", "marginBottom": "2px"}),
        html.Div(f"{len(src['ranks'])} ranks ({src['format']}, world size {src['world_size']}) · "
                 f"{a.collectives.height} matched collective instances · {clock}",
                 id="source-line", style={"color": "#555"}),
        _section("Verdict", html.Ul([html.Li(s) for s in headline(a)], id="verdict"),
                 html.Details([html.Summary(f"{len(a.warnings)} warnings"),
                               html.Ul([html.Li(w) for w in a.warnings])], id="warnings") if a.warnings else None),
        html.Div(id="selection-bar", style={"position": "sticky", "top": 0, "zIndex": 10, "background": "#fffbe6",
                                            "padding": "6px 10px", "border": "1px solid #eee", "marginTop": "8px"},
                 children=[html.Span("No selection: click a rank, step or collective.", id="selection-text"),
                           html.Button("clear selection", id="clear-selection", n_clicks=0,
                                       style={"marginLeft": "16px"}),
                           *([export.section(a)] if download else [])]),
        _section("Ranks", dash_table.DataTable(
            id="kpi-table", columns=kpi_columns, **_kpi_paging(a),
            style_table=TABLE_STYLE, style_cell=CELL_STYLE, fixed_rows={"headers": True},
            style_header={"fontWeight": "bold", "whiteSpace": "normal", "height": "auto"},
        ), dcc.Graph(id="breakdown", figure=figures.breakdown_figure(a), config={"displaylogo": False})),
        _section("Rank × step", html.Div([
            dcc.Dropdown(id="heatmap-metric", value="caused_wait_ms", clearable=False, style={"width": "280px"},
                         options=[{"label": v, "value": k} for k, v in figures.HEATMAP_METRICS.items()]),
        ]), dcc.Graph(id="heatmap", config={"displaylogo": False})),
        critical.section(a),
        _section("Timeline", html.Div(style={"display": "flex", "gap": "16px", "alignItems": "center"}, children=[
            html.Label("zoom to step"),
            dcc.Dropdown(id="step-select", options=[{"label": f"step {s}", "value": s} for s in steps],
                         placeholder="whole window", style={"width": "200px"}),
            dcc.Checklist(id="timeline-opts", options=[{"label": " one lane per stream", "value": "streams"}],
                          value=[]),
            html.Span("Drag to zoom: the view re-samples at the new resolution.", style={"color": "#777"}),
        ]), dcc.Loading(dcc.Graph(id="timeline", config={"displaylogo": False}), delay_show=400)),
        _communication_section(a),
        dimensions.section(a),
        pipeline.section(a),
        _section("Collectives", html.Div(style={"display": "grid", "gridTemplateColumns": "3fr 2fr", "gap": "12px"},
                                         children=[dcc.Graph(id="waits", config={"displaylogo": False}),
                                                   dcc.Graph(id="busbw", config={"displaylogo": False})]),
                 html.H3("Slowest instances (by longest wait)", style={"fontSize": "15px"}),
                 dash_table.DataTable(
                     id="coll-table", page_size=15, sort_action="native", style_table=TABLE_STYLE,
                     style_cell=CELL_STYLE, style_header={"fontWeight": "bold"},
                     columns=[{"id": c, "name": n, "type": "numeric" if c not in ("pg", "op", "ranks_text") else "text",
                               **({"format": NUMBER_FORMAT} if c.endswith(("_ms", "_gbps")) else {})}
                              for c, n in COLLECTIVE_COLUMNS]),
                 html.H3("Process groups", style={"fontSize": "15px"}),
                 dash_table.DataTable(id="pg-table", data=process_group_rows(a), style_cell=CELL_STYLE,
                                      page_size=summary.PG_PAGE_SIZE,
                                      style_header={"fontWeight": "bold"}, style_table=TABLE_STYLE,
                                      columns=[{"id": c, "name": c} for c in ("pg", "desc", "ranks", "instances", "ops")])),
    ])
