"""The graph's member table: who took part in each matched instance, whom each kernel waited for, and in which
order each rank ran its matched comm kernels.

Built once with the graph (``graph.build`` -> ``Graph.members``) from the comm-kernel table (``waits.per_row``);
blame reads it and builds no instance table or comm-kernel order of its own. Clock-free: it keeps only
durations and each rank's own order.

A **unit** is what one kernel waited in: its matched instance, or, in a ring's hop whose kernels waited for
different ranks (``waits.per_row``'s ``last_rank``), the hop split per rank waited for (``"instance@rank"``), whose
last arriver is that rank. Elsewhere a unit is its instance.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .match import ring_hop

UNIT_SCHEMA = {
    "unit": pl.Utf8, "instance": pl.Utf8, "step": pl.Int64, "pg": pl.Utf8, "group_ranks": pl.Utf8,
    "n_ranks": pl.UInt32, "last_rank": pl.Int32, "caused_ns": pl.Float64,
}
KERNEL_SCHEMA = {
    "k": pl.UInt32, "rank": pl.Int32, "unit": pl.Utf8, "instance": pl.Utf8, "ring": pl.Boolean, "start_ns": pl.Int64,
    "g": pl.Int64, "w": pl.Float64, "x": pl.Float64, "ord": pl.Int64,
}


@dataclass(frozen=True)
class Members:
    """``kernels``: one row per matched comm kernel, ordered by rank then start: k (its row in the comm-kernel
    table, ``Graph.kernels``), rank, unit, instance, ring (a ring's hop), start_ns, g (its group's id), w (wait),
    x (transfer: duration − wait, >= 0), ord (its place among its rank's matched comm kernels).
    ``units``: one row per unit (see the module doc): unit, instance, step (the earliest of its kernels'), pg,
    group_ranks (as recorded, null where none), n_ranks (its participants, the rank waited for included),
    last_rank (the rank its kernels waited for), caused_ns (the wait they suffered).
    ``groups``: g, member: each group's member list (a kernel without one: its instance's participants)."""

    kernels: pl.DataFrame
    units: pl.DataFrame
    groups: pl.DataFrame

    @property
    def ring_hops(self) -> int:
        """How many matched instances are ring hops."""
        return self.kernels.filter(pl.col("ring")).select(pl.col("instance").n_unique()).item()


def members(rows: pl.DataFrame) -> Members:
    """``rows``: comm kernels (rank, instance, start_ns, end_ns, wait_ns, last_rank, step, pg, group_ranks; a ring's
    hop also match_rule, send_peer, recv_peer; ``k``, each row's id, where the caller numbered them: else its
    place in ``rows``); unmatched ones (null instance) are left out."""
    if rows.height == 0 or "instance" not in rows.columns:
        rows = pl.DataFrame(schema={"k": pl.UInt32, "instance": pl.Utf8})
    rows = (rows if "k" in rows.columns else rows.with_row_index("k")).filter(pl.col("instance").is_not_null())
    # a hand-built kernel table may leave out what it does not know
    rows = rows.with_columns(pl.lit(None, dtype=t).alias(c) for c, t in
                             (("step", pl.Int64), ("pg", pl.Utf8), ("group_ranks", pl.Utf8)) if c not in rows.columns)
    if rows.height == 0:
        return Members(pl.DataFrame(schema=KERNEL_SCHEMA), pl.DataFrame(schema=UNIT_SCHEMA),
                       pl.DataFrame(schema={"g": pl.Int64, "member": pl.Int32}))
    # a ring's hop, where rows waited for different ranks, splits into one unit per rank waited for
    hop = ring_hop(rows)
    rows = rows.with_columns((pl.lit(False) if hop is None else hop).alias("ring"))
    unit = pl.col("instance")
    if hop is not None:
        split = pl.col("last_rank").n_unique().over("instance") > 1
        unit = pl.when(split).then(pl.format("{}@{}", "instance", "last_rank")).otherwise(pl.col("instance"))
    rows = rows.with_columns(unit.alias("unit"))
    waited = pl.col("rank") != pl.col("last_rank")
    units = (
        rows.group_by("unit")
        .agg(
            pl.col("instance").first(), pl.col("step").min(), pl.col("pg").first(), pl.col("group_ranks").first(),
            # the rank waited for counts as a participant even where its own row waited for another
            (pl.len() + waited.all().cast(pl.UInt32)).alias("n_ranks"),
            pl.col("last_rank").first().cast(pl.Int32),
            pl.col("wait_ns").sum().cast(pl.Float64).alias("caused_ns"),
        )
        .select(list(UNIT_SCHEMA))
    )
    # a kernel without a group's member list (Nsight's p2p, a group never described) was shared by its
    # instance's participants: "both in the same group" then reads them
    if rows["group_ranks"].null_count():
        parts = rows.filter(pl.col("group_ranks").is_null()).group_by("unit").agg(
            pl.col("rank").sort().cast(pl.Utf8).str.join(",").alias("_parts"))
        rows = rows.join(parts, on="unit", how="left").with_columns(
            pl.coalesce("group_ranks", "_parts").alias("group_ranks"))
    # groups by an integer id: member lists run to thousands of ranks (kilobytes of text), and every join and
    # as-of search downstream keys on the group
    gid = pl.col("group_ranks").cast(pl.Categorical).to_physical().cast(pl.Int64).alias("g")
    groups = (rows.select(gid, "group_ranks").unique("g")
              .with_columns(pl.col("group_ranks").str.split(",").cast(pl.List(pl.Int32)).alias("member"))
              .select("g", "member").explode("member"))
    kernels = (
        rows.select("k", "rank", "unit", "instance", "ring", "start_ns", gid,
                    pl.col("wait_ns").cast(pl.Float64).alias("w"),
                    (pl.col("end_ns") - pl.col("start_ns") - pl.col("wait_ns")).cast(pl.Float64).clip(0.0).alias("x"))
        .sort("rank", "start_ns")
        .with_columns(pl.int_range(pl.len()).over("rank").alias("ord"))
    )
    return Members(kernels=kernels, units=units, groups=groups)
