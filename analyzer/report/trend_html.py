"""Trend as one self-contained HTML page: a plot per metric (a line per scope, change points marked)."""

from __future__ import annotations

from ..history.trend import Series, Trend
from .html import esc, html_table, page
from .trend_text import HEADERS, _row, change_lines, drift_lines, header, method_line

MAX_LINES = 24  # scopes drawn per metric plot (the table lists them all)


def figure(t: Trend, metric: str, series: list[Series]):
    """One metric over runs: x is the run's position (#), hover names the run; shifts as red diamonds."""
    import plotly.graph_objects as go

    pos = t.positions
    fig = go.Figure()
    for s in series[:MAX_LINES]:
        x = [pos.get(r) for r in s.run_ids]
        fig.add_trace(go.Scatter(x=x, y=list(s.values), mode="lines+markers", name=s.scope, customdata=list(s.run_ids),
                                   hovertemplate="run #%{x} %{customdata}<br>%{y:.4g}<extra>" + esc(s.scope)
                                   + "</extra>", marker={"size": 4}))
        if s.shifts:
            fig.add_trace(go.Scatter(
                x=[pos.get(s.run_ids[sh.index]) for sh in s.shifts], y=[s.values[sh.index] for sh in s.shifts],
                mode="markers", name=f"{s.scope}: shift", marker={"symbol": "diamond", "size": 12, "color": "#c62828"},
                customdata=[s.run_ids[sh.index] for sh in s.shifts],
                hovertext=[f"{sh.delta_pct:+.1f}%" if sh.delta_pct is not None else f"{sh.delta:+.3g}"
                           for sh in s.shifts],
                hovertemplate="shift at run #%{x} %{customdata}: %{hovertext}<extra></extra>"))
    fig.update_layout(title=metric, height=320, margin={"l": 50, "r": 20, "t": 40, "b": 40},
                      xaxis_title="run #", template="plotly_white", legend={"font": {"size": 10}})
    return fig


def render(t: Trend) -> str:
    parts = [f"<h1>{esc(header(t))}</h1>"]
    ch, dr = change_lines(t), drift_lines(t)
    parts.append('<div class="headline"><p><b>Change points</b></p>'
                 + ("".join(f'<p class="bad">{esc(x)}</p>' for x in ch) or "<p>none</p>")
                 + "<p><b>Drifts</b></p>" + ("".join(f"<p>{esc(x)}</p>" for x in dr) or "<p>none</p>") + "</div>")
    by_metric: dict[str, list[Series]] = {}
    for s in t.series:
        by_metric.setdefault(s.metric, []).append(s)
    config = {"displaylogo": False, "responsive": True}
    for i, (metric, series) in enumerate(by_metric.items()):
        fig = figure(t, metric, series)
        parts.append(f'<div class="figure">{fig.to_html(full_html=False, include_plotlyjs=(i == 0), config=config)}'
                     "</div>")
    if t.series:
        parts.append("<h2>Every series</h2>")
        parts.append(html_table(HEADERS, [[str(c) for c in _row(s)] for s in t.series]))
    parts.append(f'<p class="muted">{esc(method_line(t))}</p>')
    return page("commscope trend", "\n".join(parts))
