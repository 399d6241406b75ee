"""Trend as one self-contained HTML page: a plot per metric (a line per scope, change points marked)."""

from __future__ import annotations

from ..history.trend import Series, Trend
from .html import esc, html_table, page
from .trend_text import HEADERS, _row, change_lines, drift_lines, header, method_line

MAX_LINES = 24  # scopes drawn per metric plot (the table lists them all)


def figure(t: Trend, metric: str, series: list[Series]) -> dict:
    """One metric over runs as a plotly figure dict (no per-trace validation: 14 plots of 1,000 runs each
    build in milliseconds): x is the run's position (#), hover and customdata name the run; shifts are
    red diamonds."""
    pos = t.positions
    data = []
    for s in series[:MAX_LINES]:
        data.append({"type": "scatter", "mode": "lines+markers", "name": s.scope, "marker": {"size": 4},
                     "x": [pos.get(r) for r in s.run_ids], "y": list(s.values), "customdata": list(s.run_ids),
                     "hovertemplate": "run #%{x} %{customdata}<br>%{y:.4g}<extra>" + esc(s.scope) + "</extra>"})
        if s.shifts:
            data.append({
                "type": "scatter", "mode": "markers", "name": f"{s.scope}: shift",
                "marker": {"symbol": "diamond", "size": 12, "color": "#c62828"},
                "x": [pos.get(s.run_ids[sh.index]) for sh in s.shifts], "y": [s.values[sh.index] for sh in s.shifts],
                "customdata": [s.run_ids[sh.index] for sh in s.shifts],
                "hovertext": [f"{sh.delta_pct:+.1f}%" if sh.delta_pct is not None else f"{sh.delta:+.3g}"
                              for sh in s.shifts],
                "hovertemplate": "shift at run #%{x} %{customdata}: %{hovertext}<extra></extra>"})
    layout = {"title": {"text": metric}, "height": 320, "margin": {"l": 50, "r": 20, "t": 40, "b": 40},
              "xaxis": {"title": {"text": "run #"}, "gridcolor": "#eee"}, "yaxis": {"gridcolor": "#eee"},
              "plot_bgcolor": "white", "legend": {"font": {"size": 10}}}
    return {"data": data, "layout": layout}


def render(t: Trend) -> str:
    import plotly.io as pio

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
        div = pio.to_html(figure(t, metric, series), full_html=False, include_plotlyjs=(i == 0), config=config,
                          validate=False)
        parts.append(f'<div class="figure">{div}</div>')
    if t.series:
        parts.append("<h2>Every series</h2>")
        parts.append(html_table(HEADERS, [[str(c) for c in _row(s)] for s in t.series]))
    parts.append(f'<p class="muted">{esc(method_line(t))}</p>')
    return page("commscope trend", "\n".join(parts))
