"""The figures both the dashboard and the static HTML report draw: Analysis -> plotly figures.

No Dash, no metric computation. Every number drawn comes from the Analysis tables the JSON report
serializes (``ranks``, ``steps``, ``collectives``, ``bandwidth``); the timeline draws the GPU table on
the aligned clock, downsampled. The HTML report imports this module too, so it must not import Dash.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from ..analysis import Analysis
from ..rules import NS_PER_MS
from . import summary
from . import timeline as tl
from .axis import window as axis_window
from .units import ms_tables

COLORS = {
    "compute": "#4C78A8", "overlapped": "#B279A2", "exposed_wait": "#E45756", "exposed_transfer": "#F58518",
    "memcpy": "#54A24B", "idle": "#D5D0CC", "comm": "#F58518", "other": "#9D755D",
}
# (ranks column, legend name, colour key): the six parts that add up to the captured window per rank
BREAKDOWN_PARTS = (
    ("compute_only_ms", "compute only", "compute"),
    ("overlapped_comm_ms", "overlapped comm", "overlapped"),
    ("exposed_wait_ms", "exposed wait", "exposed_wait"),
    ("exposed_transfer_ms", "exposed transfer", "exposed_transfer"),
    ("memcpy_ms", "memcpy/memset", "memcpy"),
    ("idle_ms", "idle", "idle"),
)
HEATMAP_METRICS = {
    "span_ms": "step time (ms)", "exposed_comm_ms": "exposed comm (ms)", "caused_wait_ms": "wait caused (ms)",
    "wait_ms": "wait (ms)",
}
TIMELINE_BUDGET = 60_000  # segments in one timeline figure, all lanes and kinds together
HOVER_LIMIT = 4_000  # segments up to which the timeline carries per-segment hover text
# The page ships plotly.js's cartesian bundle (assets/), which has no WebGL traces: every figure is SVG, so a
# marker figure draws at most this many points (a line is one SVG path whatever its length).
MARKER_LIMIT = 20_000
_MARGIN = {"l": 60, "r": 20, "t": 40, "b": 40}


def _empty(title: str, note: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, margin=_MARGIN, xaxis_visible=False, yaxis_visible=False,
                      annotations=[{"text": note, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5,
                                    "y": 0.5}])
    return fig


def breakdown_figure(a: Analysis, selected_rank: int | None = None) -> go.Figure:
    """Stacked per-rank breakdown of the captured window (the six parts sum to ``span_ms``)."""
    r = ms_tables(a).ranks
    if r.height == 0:
        return _empty("Time breakdown per rank", "no ranks")
    if summary.many(a):  # one heatmap and six distributions, not six traces of a thousand bars
        fig = summary.breakdown_summary_figure(a, BREAKDOWN_PARTS, COLORS)
        fig.update_layout(shapes=summary.rank_marker(selected_rank))
        return fig
    ranks = r["rank"].to_list()
    x = [str(k) for k in ranks]
    line = [2 if k == selected_rank else 0 for k in ranks]
    fig = go.Figure()
    for col, name, color in BREAKDOWN_PARTS:
        fig.add_bar(x=x, y=r[col].fill_null(0).to_list(), name=name, marker_color=COLORS[color],
                    marker_line_width=line, marker_line_color="black", customdata=ranks,
                    hovertemplate=f"rank %{{x}}<br>{name}: %{{y:,.3f}} ms<extra></extra>")
    fig.update_layout(barmode="stack", title="Time breakdown per rank (whole captured window)", margin=_MARGIN,
                      xaxis={"title": "rank", "type": "category"}, yaxis_title="ms", legend_orientation="h",
                      legend_y=-0.2, clickmode="event")
    return fig


def heatmap_figure(a: Analysis, metric: str = "span_ms", selected_rank: int | None = None) -> go.Figure:
    """Rank × step heatmap of a ``steps`` column: a straggler is a bright row (or a dark one for waits)."""
    if metric not in HEATMAP_METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(HEATMAP_METRICS)}")
    s = ms_tables(a).steps
    title = f"{HEATMAP_METRICS[metric]} per rank and step"
    if s.height == 0:
        return _empty(title, "no step markers in the traces")
    # (rank, step) is unique in a healthy Analysis; "first" keeps a view up rather than failing on a bad table
    wide = s.pivot(on="step", index="rank", values=metric, aggregate_function="first", sort_columns=True).sort("rank")
    steps = [c for c in wide.columns if c != "rank"]
    ranks = wide["rank"].to_list()
    z = wide.select(steps).to_numpy().astype(float)
    fig = go.Figure(go.Heatmap(
        z=z, x=[int(c) for c in steps], y=ranks, colorscale="Viridis", colorbar_title="ms",
        hovertemplate="rank %{y}, step %{x}<br>" + HEATMAP_METRICS[metric] + ": %{z:,.3f}<extra></extra>",
    ))
    if selected_rank is not None and selected_rank in ranks:
        fig.add_hrect(y0=selected_rank - 0.5, y1=selected_rank + 0.5, line_color="red", line_width=2)
    fig.update_layout(title=title, margin=_MARGIN, xaxis={"title": "step", "type": "category"},
                      yaxis={"title": "rank", "autorange": "reversed", "type": "category" if len(ranks) < 40 else "-"})
    return fig


def _lines(starts: np.ndarray, ends: np.ndarray, y: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Segments as one polyline with NaN breaks: three points per segment, one trace per colour."""
    n = len(starts)
    xs = np.full(3 * n, np.nan)
    xs[0::3], xs[1::3] = starts, ends
    ys = np.full(3 * n, np.nan)
    ys[0::3] = y
    ys[1::3] = y
    return xs, ys


def timeline_figure(a: Analysis, ranks: Sequence[int] | None = None, window_ms: tuple[float, float] | None = None,
                    by_stream: bool = False, max_shapes: int = 600, selected_rank: int | None = None,
                    expand_rank: int | None = None, note: str | None = None) -> go.Figure:
    """Multi-rank GPU timeline on the aligned clock, downsampled to ``max_shapes`` segments per lane and kind.

    x is ms from the earliest aligned GPU event; one lane per rank (compute above, comm below, memcpy and
    other in the middle, idle as the grey band) or, with ``by_stream``, one lane per (rank, stream);
    ``expand_rank`` splits just that rank into stream lanes (the dashboard does it for the selected rank).
    """
    prep = tl.prepare(a)
    gpu = prep.gpu
    if ranks:
        gpu = gpu.filter(pl.col("rank").is_in(list(ranks)))
    if gpu.height == 0:
        return _empty("GPU timeline", "no GPU activity for this selection")
    if window_ms is not None:  # a client's zoom: finite and within int64 ns once converted
        window_ms = axis_window(*window_ms)  # None (the whole window) when empty or not numbers
    window = None if window_ms is None else (int(window_ms[0] * NS_PER_MS), int(window_ms[1] * NS_PER_MS))
    lane_cols = ["rank", "stream"] if by_stream or expand_rank is not None else ["rank"]
    if not by_stream and expand_rank is not None:
        # stream -1 is the whole-rank lane; only the expanded rank keeps its real streams
        gpu = gpu.with_columns(pl.when(pl.col("rank") == expand_rank).then(pl.col("stream")).otherwise(-1)
                               .alias("stream"))
    extent = tl.lane_extent(gpu, lane_cols, window)
    if extent.height == 0:
        return _empty("GPU timeline", "no GPU activity in this window")
    lanes = [tuple(row) for row in extent.select(lane_cols).iter_rows()]
    index = {lane: i for i, lane in enumerate(lanes)}
    per_lane = max(20, min(max_shapes, TIMELINE_BUDGET // (len(lanes) * len(tl.KIND_ORDER))))
    segs = tl.segments(gpu, lane_cols, window, per_lane)
    lane_idx = np.array([index[tuple(r)] for r in segs.select(lane_cols).iter_rows()], dtype=float)
    lane_px = 18 if by_stream else 26
    width = 10 if by_stream else 7
    # whole-rank lanes stack compute above comm so overlap shows; stream lanes hold one kernel at a time
    shift = {"compute": -0.22, "comm": 0.22}
    whole = np.array([not by_stream and (len(ln) == 1 or ln[1] == -1) for ln in lanes], dtype=bool)

    fig = go.Figure()
    ext_idx = np.arange(len(lanes), dtype=float)
    xs, ys = _lines(extent["start_ns"].to_numpy() / NS_PER_MS, extent["end_ns"].to_numpy() / NS_PER_MS, ext_idx)
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="idle", hoverinfo="skip",
                             line={"color": COLORS["idle"], "width": lane_px - 6}))
    groups = segs["group"].to_numpy()
    hover = segs.height <= HOVER_LIMIT  # hover text dominates the payload; big views show time and kind only
    for kind in tl.KIND_ORDER:
        mask = groups == kind
        if not mask.any():
            continue
        part = segs.filter(pl.Series(mask))
        xs, ys = _lines(part["start_ns"].to_numpy() / NS_PER_MS, part["end_ns"].to_numpy() / NS_PER_MS,
                        lane_idx[mask] + shift.get(kind, 0.0) * whole[lane_idx[mask].astype(int)])
        trace = go.Scatter(x=xs, y=ys, mode="lines", name=kind, line={"color": COLORS[kind], "width": width},
                           connectgaps=False, hoverinfo="x+name")
        if hover:
            text = np.full(3 * part.height, "", dtype=object)
            text[0::3] = [
                (f"{n} ({(e - s) / NS_PER_MS:,.3f} ms)" if c == 1 else
                 f"{c} {kind} kernels, {b / NS_PER_MS:,.3f} ms busy (condensed)")
                for n, s, e, c, b in part.select("name", "start_ns", "end_ns", "count", "busy_ns").iter_rows()
            ]
            text[1::3] = text[0::3]
            trace.update(text=text.tolist(), hoverinfo="text+x")
        fig.add_trace(trace)
    labels = [f"rank {ln[0]}" if len(ln) == 1 or ln[1] == -1 else f"r{ln[0]} stream {ln[1]}" for ln in lanes]
    if selected_rank is not None:
        sel = [i for i, ln in enumerate(lanes) if ln[0] == selected_rank]
        if sel:
            fig.add_hrect(y0=min(sel) - 0.5, y1=max(sel) + 0.5, fillcolor="gold", opacity=0.25, line_width=0)
    title = "GPU timeline (aligned clock" + (f", {window_ms[0]:,.1f}–{window_ms[1]:,.1f} ms)" if window_ms else ")")
    if note:
        title += f"<br><sup>{note}</sup>"
    fig.update_layout(
        title=title, margin=_MARGIN, height=max(260, 90 + lane_px * len(lanes)),
        legend={"orientation": "h", "y": 1.0, "x": 1.0, "yanchor": "bottom", "xanchor": "right"},
        xaxis={"title": "ms from the first GPU event", "range": list(window_ms) if window_ms else None},
        yaxis={"tickvals": list(range(len(lanes))), "ticktext": labels, "autorange": "reversed", "zeroline": False,
               "showgrid": False},
        meta={"lanes": [list(ln) for ln in lanes], "segments": segs.height, "per_lane": per_lane},
        dragmode="zoom",
    )
    return fig


def wait_figure(a: Analysis, ranks: Sequence[int] | None = None) -> go.Figure:
    """Per matched collective instance: the longest wait it imposed and the arrival skew, over time."""
    c = ms_tables(a).collectives
    if ranks:
        c = c.filter(pl.col("ranks").list.eval(pl.element().is_in(list(ranks))).list.any())
    if c.height == 0:
        return _empty("Waits per collective", "no matched collectives")
    total = c.height
    if total > MARKER_LIMIT:  # the instances that waited longest are the ones worth a point
        c = c.sort("max_wait_ms", "arrival_skew_ms", descending=True, nulls_last=True).head(MARKER_LIMIT)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("longest wait per instance (ms)", "arrival skew (ms, aligned clocks)"))
    c = c.with_columns((pl.col("start_ms") - tl.prepare(a).origin_ns / NS_PER_MS).alias("_x"))
    palette = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D"]
    for i, op in enumerate(sorted(c["op"].unique().to_list())):
        part = c.filter(pl.col("op") == op)
        custom = part.select("pg", "seq", "last_rank", "step").to_numpy().tolist()
        hover = ("%{customdata[0]}/%{customdata[1]} " + op + "<br>last rank %{customdata[2]}, step %{customdata[3]}"
                 "<br>%{y:,.3f} ms<extra></extra>")
        color = palette[i % len(palette)]
        fig.add_trace(go.Scatter(x=part["_x"].to_list(), y=part["max_wait_ms"].to_list(), mode="markers", name=op,
                                 legendgroup=op, marker_color=color, customdata=custom, hovertemplate=hover),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=part["_x"].to_list(), y=part["arrival_skew_ms"].to_list(), mode="markers",
                                 name=op, legendgroup=op, showlegend=False, marker={"color": color, "symbol": "x"},
                                 customdata=custom, hovertemplate=hover), row=2, col=1)
    suffix = f" (ranks {', '.join(map(str, ranks))})" if ranks else ""
    if total > c.height:
        suffix += f": the {c.height:,} longest waits of {total:,}"
    fig.update_layout(title="Waits per collective instance" + suffix, margin=_MARGIN, height=480, clickmode="event")
    fig.update_xaxes(title_text="ms from the first GPU event", row=2, col=1)
    return fig


def busbw_figure(a: Analysis, ranks: Sequence[int] | None = None) -> go.Figure:
    """Bus bandwidth against message size per operation (nccl-tests busbw); lines are the bucket medians."""
    c = ms_tables(a).collectives.filter(pl.col("bytes").is_not_null() & pl.col("busbw_gbps").is_not_null())
    if ranks:
        c = c.filter(pl.col("ranks").list.eval(pl.element().is_in(list(ranks))).list.any())
    if c.height == 0:
        return _empty("Bus bandwidth", "no collectives with message sizes")
    total, note = c.height, ""
    if total > MARKER_LIMIT:  # an even sample in time: the lines stay the medians of every instance
        every = -(-total // MARKER_LIMIT)
        c = c.sort("start_ms", maintain_order=True).gather_every(every)
        note = f" (1 in {every} of {total:,} instances; lines: medians of all)"
    palette = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D"]
    fig = go.Figure()
    for i, op in enumerate(sorted(c["op"].unique().to_list())):
        part = c.filter(pl.col("op") == op)
        color = palette[i % len(palette)]
        fig.add_trace(go.Scatter(
            x=part["bytes"].to_list(), y=part["busbw_gbps"].to_list(), mode="markers", name=op, legendgroup=op,
            marker={"color": color, "opacity": 0.6}, customdata=part.select("pg", "seq").to_numpy().tolist(),
            hovertemplate="%{customdata[0]}/%{customdata[1]} " + op + "<br>%{x:,} B: %{y:,.2f} GB/s<extra></extra>"))
        med = ms_tables(a).bandwidth.filter(pl.col("op") == op)
        if not ranks and med.height:
            fig.add_trace(go.Scatter(x=med["size_bucket"].to_list(), y=med["busbw_gbps_p50"].to_list(),
                                     mode="lines+markers", name=f"{op} p50", legendgroup=op, showlegend=False,
                                     line={"color": color}, hovertemplate="≥%{x:,} B: p50 %{y:,.2f} GB/s<extra></extra>"))
    fig.update_layout(title="Bus bandwidth vs message size" + note, margin=_MARGIN, xaxis={"type": "log", "title": "bytes"},
                      yaxis_title="busbw (GB/s)", height=420)
    return fig
