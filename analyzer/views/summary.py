"""Views for many ranks: summaries instead of one trace (or one timeline lane) per rank.

Above ``MANY_RANKS`` ranks the per-rank breakdown becomes one heatmap (rank × part, clickable like
the bars) beside the distribution of each part over ranks, and the timeline draws only a few focus
ranks: the selected one and those that caused the most wait. Pure: Analysis in, figures out.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import Analysis
from .units import ms_tables

MANY_RANKS = 128  # above this, per-rank traces and lanes give way to summaries
FOCUS_LANES = 12  # timeline lanes drawn when the ranks are many
PG_PAGE_SIZE = 25  # process-group table rows per page (a 1,024-rank job has ~150 groups)
MEMBERS_SHOWN = 16  # member ranks spelled out in a table cell; longer lists are shortened


def many(a: Analysis) -> bool:
    return a.ranks.height > MANY_RANKS


def focus_ranks(a: Analysis, selected: int | None = None, limit: int = FOCUS_LANES) -> list[int] | None:
    """The ranks the timeline draws: all of them when few; else the selected rank and the ranks that
    caused the most wait (then the slowest steps), ``limit`` in all, in rank order."""
    if not many(a):
        return None
    order = ms_tables(a).ranks.sort(["caused_wait_ms", "step_time_max_ms", "rank"], descending=[True, True, False],
                         nulls_last=True)["rank"].to_list()
    chosen = ([selected] if selected in set(order) else []) + [r for r in order if r != selected]
    return sorted(chosen[:limit])


def breakdown_summary_figure(a: Analysis, parts: tuple[tuple[str, str, str], ...], colors: dict[str, str]) -> go.Figure:
    """Rank × part heatmap of the whole-window breakdown (a click names the rank) and, beside it, each
    part's distribution over ranks. Values are the JSON ``ranks[]`` numbers."""
    r = ms_tables(a).ranks.sort("rank")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], horizontal_spacing=0.08,
                        subplot_titles=("per rank (ms)", "distribution over ranks (ms)"))
    names = [name for _, name, _ in parts]
    z = [r[col].fill_null(0).to_list() for col, _, _ in parts]
    fig.add_trace(go.Heatmap(z=z, x=r["rank"].to_list(), y=names, colorscale="Viridis", colorbar={"x": 0.66},
                             hovertemplate="rank %{x}<br>%{y}: %{z:,.3f} ms<extra></extra>"), row=1, col=1)
    for col, name, key in parts:
        fig.add_trace(go.Box(x=r[col].fill_null(0).to_list(), name=name, marker_color=colors[key], boxpoints=False,
                             orientation="h", showlegend=False, hoverinfo="x+name"), row=1, col=2)
    fig.update_layout(title=f"Time breakdown of {r.height} ranks (whole captured window)", margin={"l": 120, "r": 20,
                      "t": 60, "b": 40}, height=360, clickmode="event")
    fig.update_xaxes(title_text="rank", row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=2)
    return fig


def rank_marker(rank: int | None, axis: str = "x") -> list[dict]:
    """The selection mark of a summary figure: a red band at ``rank`` (layout shapes, sent as a patch)."""
    if rank is None:
        return []
    lo, hi = rank - 0.5, rank + 0.5
    span = {"x0": lo, "x1": hi, "y0": 0, "y1": 1, "yref": "paper", "xref": "x"} if axis == "x" else \
        {"y0": lo, "y1": hi, "x0": 0, "x1": 1, "xref": "paper", "yref": "y"}
    return [{"type": "rect", **span, "line": {"color": "red", "width": 2}, "fillcolor": "rgba(0,0,0,0)"}]


def members_text(ranks: tuple[int, ...]) -> str:
    """A group's member ranks for a table cell: all of them when few, else the first and last few and
    the count (a world group of thousands of ranks would be a cell of kilobytes)."""
    if len(ranks) <= MEMBERS_SHOWN:
        return ",".join(map(str, ranks))
    head, tail = ranks[: MEMBERS_SHOWN - 2], ranks[-2:]
    return f"{','.join(map(str, head))},…,{','.join(map(str, tail))} ({len(ranks)} ranks)"


def kpi_page_size(a: Analysis) -> int | None:
    """Rows per KPI table page: all of them when few (no paging), 50 when many."""
    return 50 if many(a) else None


def sort_rows(rows: list[dict], sort_by: list[dict] | None) -> list[dict]:
    """The KPI rows in the table's order: by the sorted column (n/a last either way), ties by rank; as given
    when unsorted. Many ranks are paged on the server, so the server sorts them as the table would."""
    if not sort_by:
        return rows
    col, desc = sort_by[0].get("column_id"), sort_by[0].get("direction") == "desc"
    if not rows or col not in rows[0]:
        return rows
    known = sorted((r for r in rows if r[col] is not None), key=lambda r: r["rank"])
    known.sort(key=lambda r: r[col], reverse=desc)  # stable: equal values stay in rank order
    return known + [r for r in rows if r[col] is None]


def ranks_label(a: Analysis, lanes: list[int]) -> str:
    return f"{len(lanes)} of {a.ranks.height} ranks: the selected one and those that caused the most wait"
