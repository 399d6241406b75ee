"""Trend as one self-contained HTML page: a plot per metric (a line per scope, change points marked)."""

from __future__ import annotations

from ..history.trend import Series, Trend
from ..views.trend import figure
from .html import esc, html_table, page
from .trend_text import HEADERS, _row, change_lines, drift_lines, header, method_line


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
