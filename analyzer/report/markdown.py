"""Markdown report for a pull-request comment: verdict, per-rank key table, top collectives by wait."""

from __future__ import annotations

from ..analysis import Analysis
from ..views import communication as comm_view
from ..views.dimensions import COLUMNS as DIM_COLUMNS
from ..views.dimensions import summary as dim_summary
from ..views.inspector import tables as inspector_tables
from ..views.units import ms_tables
from ..views.verdict import headline
from ..views.whatif import sentence as whatif_sentence
from .md import cell, table

# (ranks column, header): the key numbers a reviewer needs, in the text report's order
RANK_COLUMNS = (
    ("rank", "rank"), ("steps", "steps"), ("step_time_mean_ms", "step ms"), ("compute_ms", "compute ms"),
    ("comm_ms", "comm ms"), ("overlap_pct", "overlap %"), ("exposed_comm_ms", "exposed ms"),
    ("exposed_wait_ms", "exposed wait ms"), ("exposed_transfer_ms", "exposed transfer ms"), ("idle_ms", "idle ms"),
    ("caused_wait_ms", "caused wait ms"), ("last_arrival_pct", "last %"),
)
COLLECTIVE_COLUMNS = (
    ("pg", "pg", 0), ("seq", "seq", 0), ("op", "op", 0), ("step", "step", 0), ("bytes", "bytes", 0),
    ("transfer_ms", "transfer ms", 3), ("max_wait_ms", "max wait ms", 3), ("total_wait_ms", "total wait ms", 3),
    ("last_rank", "last rank", 0), ("busbw_gbps", "busbw GB/s", 2),
)
TOP_COLLECTIVES = 10


def render(a: Analysis) -> str:
    src = a.source
    declared = src.get("declared_world_size", src.get("world_size"))
    world = f" of {declared}" if declared else ""
    lines = [f"## commscope: {src['format']}, {len(src['ranks'])} rank(s){world}", ""]
    lines += [f"**{h}**" if i == 0 else h for i, h in enumerate(headline(a))]
    lines += [s for s in [whatif_sentence(a)] if s]
    lines.append("")
    if a.ranks.height:
        lines += ["### Per rank", "", "_Whole captured window; step time is the mean over profiled steps._", ""]
        rows = [[cell(r.get(k)) for k, _ in RANK_COLUMNS] for r in ms_tables(a).ranks.to_dicts()]
        lines += table([h for _, h in RANK_COLUMNS], rows) + [""]
    split = comm_view.summary(a)
    if split is not None:
        lines += [f"### {comm_view.TITLE}", "", f"_{comm_view.NOTE}._", ""]
        lines += table([h for _, h, _ in comm_view.COLUMNS],
                       [[cell(r.get(k), d) for k, _, d in comm_view.COLUMNS] for r in split.to_dicts()]) + [""]
    dims = dim_summary(a)
    if dims:
        lines += ["### Per parallelism dimension", "", "_Mean per participating rank._", ""]
        lines += table([h for _, h, _ in DIM_COLUMNS], [[cell(r.get(k), d) for k, _, d in DIM_COLUMNS] for r in dims])
        lines.append("")
    if a.collectives.height:
        top = ms_tables(a).collectives.sort("total_wait_ms", descending=True, nulls_last=True).head(TOP_COLLECTIVES)
        lines += [f"### Top {top.height} collectives by wait", ""]
        rows = [[cell(r.get(k), d) for k, _, d in COLLECTIVE_COLUMNS] for r in top.to_dicts()]
        lines += table([h for _, h, _ in COLLECTIVE_COLUMNS], rows) + [""]
    if a.bandwidth.height:
        lines += ["<details><summary>Bandwidth by operation and size</summary>", ""]
        rows = [[cell(r["op"]), cell(r["size_bucket"]), cell(r.get("intra_node")), cell(r["count"]),
                 cell(r["transfer_ms_p50"], 3), cell(r["algbw_gbps_p50"], 2), cell(r["busbw_gbps_p50"], 2)]
                for r in ms_tables(a).bandwidth.to_dicts()]
        lines += table(["op", "size (bytes)", "intra-node", "count", "transfer ms p50", "algbw GB/s p50",
                        "busbw GB/s p50"], rows)
        lines += ["", "</details>", ""]
    for title, cols, rows in inspector_tables(a):
        lines += [f"### {title}", ""]
        lines += table([h for _, h, _ in cols], [[cell(r.get(k), d) for k, _, d in cols] for r in rows]) + [""]
    if a.warnings:
        lines += ["### Warnings", ""] + [f"- {w}" for w in a.warnings] + [""]
    return "\n".join(lines).rstrip() + "\n"
