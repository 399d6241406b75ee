"""The pipeline schedule view: stages down, time across, micro-batches coloured, bubbles as gaps.

One rank per stage (the first pipeline's), one profiled step, on the aligned clock. A compute kernel
belongs to the micro-batch of the transfer that fed it (the first compute after a recv takes the recv's
micro-batch) or, otherwise, of the send it produced (the next send). Waiting inside a send/recv is drawn
light, its transfer dark; what is neither is the bubble. Pure: Analysis -> figure (plus a Dash section).
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from analyzer.analysis import Analysis
from analyzer.rules import NS_PER_MS

PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#EECA3B", "#72B7B2", "#FF9DA6", "#9D755D", "#BAB0AC",
           "#E45756")


def schedule_rows(a: Analysis, step: int | None = None) -> tuple[pl.DataFrame, pl.DataFrame, int | None]:
    """(compute kernels with stage and micro-batch, transfers with stage, the step drawn), times in ms."""
    p = a.pipeline
    empty = pl.DataFrame()
    if p is None:
        return empty, empty, None
    rs = p["rank_steps"]
    steps = sorted(rs["step"].unique().to_list())
    step = step if step in steps else steps[len(steps) // 2]
    first_chain = rs["chain"].min()
    win = rs.filter((pl.col("step") == step) & (pl.col("chain") == first_chain))
    win = win.select("rank", "stage", "start_ns", "end_ns")
    clock = a.graph.clock  # the one place offsets are applied
    t0 = clock.to_reference(win)["start_ns"].min()

    def clip(df: pl.DataFrame) -> pl.DataFrame:
        kept = df.join(win, on="rank", suffix="_w").filter((pl.col("start_ns") < pl.col("end_ns_w"))
                                                           & (pl.col("end_ns") > pl.col("start_ns_w")))
        return clock.to_reference(kept, prefix="a_").with_columns(
            *[((pl.col("a_" + c) - t0) / NS_PER_MS).alias(c.replace("_ns", "_ms")) for c in ("start_ns", "end_ns")])

    tr = clip(p["transfers"].with_columns(
        pl.col("instance").str.extract(r"\|k(\d+)$", 1).cast(pl.Int64).alias("mb")))
    comp = clip(a.graph.gpu.filter(pl.col("kind") == "compute").select("rank", "start_ns", "end_ns"))
    comp = comp.sort("rank", "start_ns")
    recv = tr.filter(pl.col("op") == "recv").select("rank", pl.col("end_ns").alias("_r_end"),
                                                    pl.col("mb").alias("_mb_r"))
    send = tr.filter(pl.col("op") == "send").select("rank", pl.col("start_ns").alias("_s_start"),
                                                    pl.col("mb").alias("_mb_s"))
    comp = comp.with_columns(pl.col("end_ns").shift(1).over("rank").alias("_prev_end")).sort("start_ns")
    comp = comp.join_asof(recv.sort("_r_end"), left_on="start_ns", right_on="_r_end", by="rank", strategy="backward",
                          check_sortedness=False).sort("end_ns")
    comp = comp.join_asof(send.sort("_s_start"), left_on="end_ns", right_on="_s_start", by="rank", strategy="forward",
                          check_sortedness=False)
    first_after_recv = pl.col("_r_end").is_not_null() & (
        pl.col("_prev_end").is_null() | (pl.col("_prev_end") < pl.col("_r_end")))
    comp = comp.with_columns(pl.when(first_after_recv).then(pl.col("_mb_r")).otherwise(
        pl.coalesce("_mb_s", "_mb_r")).alias("mb"))
    return comp.select("rank", "stage", "start_ms", "end_ms", "mb"), tr.select(
        "rank", "stage", "op", "start_ms", "end_ms", (pl.col("transfer_ns") / NS_PER_MS).alias("transfer_ms"), "mb"), step


def schedule_figure(a: Analysis, step: int | None = None) -> go.Figure:
    comp, tr, step = schedule_rows(a, step)
    fig = go.Figure()
    if step is None:
        fig.update_layout(title="No pipeline: no matched send/recv chains", height=160)
        return fig
    stages = a.pipeline["stages"]
    label = {s: f"stage {s} (bubble {pct:.0f}%)" for s, pct in stages.select("stage", "bubble_pct").iter_rows()}
    # transfers first: compute drawn over a send still pending on its own stream
    if tr.height:
        wait = tr.with_columns((pl.col("end_ms") - pl.col("transfer_ms")).alias("t_ms"))
        fig.add_bar(y=[label[s] for s in wait["stage"]], x=(wait["t_ms"] - wait["start_ms"]).to_list(),
                    base=wait["start_ms"].to_list(), orientation="h", name="waiting in send/recv",
                    marker_color="#DDDDDD")
        fig.add_bar(y=[label[s] for s in wait["stage"]], x=wait["transfer_ms"].to_list(), base=wait["t_ms"].to_list(),
                    orientation="h", name="transfer", marker_color="#333333")
    for i, part in enumerate(comp.partition_by("mb", maintain_order=True, as_dict=False)):
        mb = part["mb"][0]
        fig.add_bar(y=[label[s] for s in part["stage"]], x=(part["end_ms"] - part["start_ms"]).to_list(),
                    base=part["start_ms"].to_list(), orientation="h", name=f"micro-batch {mb}",
                    marker_color=PALETTE[(mb if mb is not None else i) % len(PALETTE)],
                    hovertemplate="%{base:.3f} ms +%{x:.3f} ms<extra>micro-batch " + str(mb) + "</extra>")
    order = [label[s] for s in sorted(label)]
    fig.update_layout(barmode="overlay", height=190 + 40 * len(order), title=f"Pipeline schedule, step {step} "
                      "(one rank per stage; gaps are bubbles)", xaxis_title="ms from the step start (aligned clock)",
                      yaxis={"categoryorder": "array", "categoryarray": order[::-1]}, legend={"orientation": "h", "y": -0.3},
                      margin={"l": 160, "r": 20, "t": 50, "b": 90})
    return fig


def section(a: Analysis):  # -> html.Section | None (Dash imported lazily: the HTML report imports figures only)
    """The dashboard section, or None without a pipeline."""
    if a.pipeline is None:
        return None
    from dash import dcc, html

    return html.Section([html.H2("Pipeline", style={"fontSize": "18px", "margin": "18px 0 6px"}),
                         dcc.Graph(id="pipeline-schedule", figure=schedule_figure(a), config={"displaylogo": False})],
                        id="section-pipeline")
