"""The per-dimension summary every presenter shows: one row per parallelism dimension, over ranks."""

from __future__ import annotations

import polars as pl

from ..analysis import Analysis
from ..metrics.dimensions import DIMENSIONS
from .units import ms_tables

# (summary column, header, digits)
COLUMNS = (
    ("dimension", "dimension", 0), ("groups", "groups", 0), ("intra_node", "intra-node", 0),
    ("source", "decided by", 0), ("comm_ms", "comm ms", 2), ("exposed_comm_ms", "exposed ms", 2),
    ("exposed_wait_ms", "  of it wait", 2), ("wait_ms", "wait ms", 2),
    ("root_caused_wait_ms", "root-caused ms (all ranks)", 2), ("busbw_gbps_p50", "busbw GB/s p50", 2),
)


def summary(a: Analysis) -> list[dict]:
    """Per dimension: its groups, where they run, how they were named, and the mean per participating rank."""
    if a.dimensions is None or a.dimensions.height == 0:
        return []
    g = a.process_groups if a.process_groups is not None else pl.DataFrame()
    per = ms_tables(a).dimensions.group_by("dimension").agg(
        pl.col("comm_ms").mean(), pl.col("exposed_comm_ms").mean(), pl.col("exposed_wait_ms").mean(),
        pl.col("wait_ms").mean(),
        pl.when(pl.col("root_caused_wait_ms").is_not_null().any()).then(pl.col("root_caused_wait_ms").sum())
        .alias("root_caused_wait_ms"),
        pl.col("busbw_gbps_p50").median(),
    )
    if g.height:
        info = g.group_by("dimension").agg(
            pl.len().alias("groups"),
            pl.when(pl.col("intra_node").is_null().any()).then(pl.lit("?"))
            .when(pl.col("intra_node").all()).then(pl.lit("yes"))
            .when(~pl.col("intra_node").any()).then(pl.lit("no")).otherwise(pl.lit("mixed")).alias("intra_node"),
            pl.col("dimension_source").unique().sort().str.join("+").alias("source"),
        )
        per = per.join(info, on="dimension", how="left")
    order = {d: i for i, d in enumerate(DIMENSIONS)}
    rows = per.to_dicts()
    for r in rows:
        if r.get("source") == "geometry":
            r["source"] = "geometry (guess)"
        r.setdefault("groups", None)
        r.setdefault("source", None)
        r.setdefault("intra_node", None)
        if r.get("groups") is None and r["dimension"] == "pp":
            r["source"] = "send/recv pairs"
    return sorted(rows, key=lambda r: order.get(r["dimension"], len(order)))
