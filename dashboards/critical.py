"""Dashboard view of the critical path and the what-if replay (static: one Analysis, no callbacks).

Every number comes from the JSON report's records (views/whatif.py), so the dashboard and JSON agree.
"""

from __future__ import annotations

import plotly.graph_objects as go
from dash import dash_table, dcc, html
from dash.dash_table.Format import Format, Scheme

from analyzer.analysis import Analysis
from analyzer.views.whatif import critical_path_records, sentence, whatif_dict

CATEGORIES = (("compute_ms", "compute", "#4c78a8"), ("exposed_transfer_ms", "exposed transfer", "#f58518"),
              ("wait_ms", "wait", "#e45756"), ("host_idle_ms", "host/idle", "#bab0ac"))


def critical_path_figure(records: list[dict]) -> go.Figure:
    """Per step, the path's split, one bar segment per (rank on the path, category)."""
    fig = go.Figure()
    for key, label, color in CATEGORIES:
        fig.add_bar(x=[f"step {r['step']}" for r in records], y=[r[key] for r in records], name=label,
                    marker_color=color, customdata=[r["rank"] for r in records],
                    hovertemplate=f"{label}: %{{y:.3f}} ms on rank %{{customdata}}<extra></extra>")
    fig.update_layout(barmode="stack", height=320, margin={"t": 30, "l": 50, "r": 10, "b": 40},
                      yaxis_title="ms on the critical path", title="Critical path per step (backwards from its end)")
    return fig


def scenario_figure(w: dict) -> go.Figure:
    names = ["replay"] + [s["name"] for s in w["scenarios"]]
    times = [w["replay_step_time_ms"]] + [s["step_time_ms"] for s in w["scenarios"]]
    fig = go.Figure(go.Bar(x=times, y=names, orientation="h", marker_color="#4c78a8",
                           hovertemplate="%{y}: %{x:.3f} ms per step<extra></extra>"))
    fig.update_layout(height=80 + 28 * len(names), margin={"t": 30, "l": 170, "r": 10, "b": 40},
                      xaxis_title="step time (ms)", title="What if: replayed step time per scenario",
                      yaxis={"autorange": "reversed"})
    return fig


def savings_heatmap(w: dict) -> go.Figure:
    cells = w["rank_steps"]
    ranks = sorted({c["rank"] for c in cells})
    steps = sorted({c["step"] for c in cells})
    grid = {(c["rank"], c["step"]): c["saving_ms"] for c in cells}
    z = [[grid.get((r, s)) for s in steps] for r in ranks]
    fig = go.Figure(go.Heatmap(z=z, x=[str(s) for s in steps], y=[str(r) for r in ranks], colorscale="Blues",
                               colorbar={"title": "ms"},
                               hovertemplate="rank %{y}, step %{x}: %{z:.3f} ms saved<extra></extra>"))
    fig.update_layout(height=max(220, 60 + 18 * len(ranks)), margin={"t": 30, "l": 50, "r": 10, "b": 40},
                      xaxis_title="step", yaxis_title="rank", title="Saving from making one rank ideal")
    return fig


def section(a: Analysis) -> html.Section:
    records = critical_path_records(a)
    w = whatif_dict(a)
    children: list = [html.H2("Critical path and what-if", style={"fontSize": "18px", "margin": "18px 0 6px"})]
    lead = sentence(a)
    if lead:
        children.append(html.P(lead, id="whatif-sentence"))
    if records:
        children.append(dcc.Graph(id="critical-path", figure=critical_path_figure(records), config={"displaylogo": False}))
    if w is not None:
        children.append(html.P(f"Replay of the unchanged run: {w['replay_step_time_ms']:,.3f} ms per step against "
                               f"{w['measured_step_time_ms']:,.3f} ms measured ({w['replay_error_pct']:.1f}% off).",
                               id="replay-accuracy"))
        children += [
            html.Div(style={"display": "grid", "gridTemplateColumns": "1fr 1fr", "gap": "12px"}, children=[
                dcc.Graph(id="whatif-scenarios", figure=scenario_figure(w), config={"displaylogo": False}),
                dcc.Graph(id="whatif-heatmap", figure=savings_heatmap(w), config={"displaylogo": False}),
            ]),
            dash_table.DataTable(
                id="whatif-ranks", data=w["ranks"], sort_action="native", page_size=10,
                columns=[{"id": "rank", "name": "rank", "type": "numeric"},
                         # rounded for people; the JSON keeps full precision
                         {"id": "saving_ms", "name": "saving if ideal (ms)", "type": "numeric",
                          "format": Format(precision=2, scheme=Scheme.fixed)},
                         {"id": "saving_pct", "name": "saving %", "type": "numeric",
                          "format": Format(precision=1, scheme=Scheme.fixed)}],
                style_cell={"fontFamily": "system-ui, sans-serif", "fontSize": "13px", "padding": "3px 8px"},
                style_header={"fontWeight": "bold"}),
        ]
    return html.Section(children, id="section-critical-path")
