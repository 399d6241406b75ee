"""A metric over stored runs as a plotly figure: the trend page of the HTML report and the history dashboard."""

from __future__ import annotations

import html

from ..history.trend import Series, Trend

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
                     "hovertemplate": "run #%{x} %{customdata}<br>%{y:.4g}<extra>" + html.escape(s.scope, quote=True)
                     + "</extra>"})
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
