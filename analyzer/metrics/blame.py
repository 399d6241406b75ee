"""Root cause: pass the wait a rank caused only because it was itself waiting back to whoever delayed it.

Per matched instance i with last arriver L and waits w_q, L caused C_i = Σ_q w_q. Each participant
was released from its previous collective (its latest matched kernel that ended before it arrived);
say L was held there h_L, in instance j, and peer q was held h_q. Without its hold L would have
arrived earlier by what set it apart from each peer: d_q = 0 if q was in j too (released with L), else
max(0, h_L − h_q); so P_i = Σ_q min(w_q, d_q) of the wait is *propagated* (L was the messenger) and goes
to whoever caused j, in the proportions j's own wait was root-caused; the rest, C_i − P_i, is L's
*own* (its compute or host time). Instances form a forest (each has at most one parent j), so the
whole attribution is a few vectorized passes over its levels: with f_c = P_c / C_a for a child c
of a, the wait that traces back to a's own part is own_a × T_a with T_a = 1 + Σ_c f_c T_c.
Clock-free: only durations and per-rank order are used.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

_MAX_LEVELS = 10_000  # a chain can never be longer than the instances in it; guards a cycle bug


@dataclass(frozen=True)
class Blame:
    instances: pl.DataFrame  # instance, step, pg, group_ranks, n_ranks, last_rank, caused/own/propagated_ns, parent
    ranks: pl.DataFrame  # rank, root_caused_wait_ns, propagated_wait_ns
    steps: pl.DataFrame  # rank, step, root_caused_wait_ns (wait suffered in that step, traced to this rank)
    # root rank, root instance, instance where the wait was suffered, its step and the amount
    flows: pl.DataFrame


_INSTANCE_SCHEMA = {
    "instance": pl.Utf8, "step": pl.Int64, "pg": pl.Utf8, "group_ranks": pl.Utf8, "n_ranks": pl.UInt32,
    "last_rank": pl.Int32,
    "caused_ns": pl.Float64, "own_ns": pl.Float64, "propagated_ns": pl.Float64, "parent": pl.Utf8,
}


def root_cause(rows: pl.DataFrame, ranks: list[int]) -> Blame:
    """``rows``: matched comm kernels (rank, instance, start_ns, end_ns, wait_ns, last_rank, step, pg, group_ranks)."""
    inst = _instances(rows)
    flows = _flows(inst)
    base = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32})
    root = flows.group_by("root_rank").agg(pl.col("amount_ns").sum().alias("root_caused_wait_ns"))
    prop = inst.group_by("last_rank").agg(pl.col("propagated_ns").sum().alias("propagated_wait_ns"))
    rank_df = (
        base.join(root.rename({"root_rank": "rank"}), on="rank", how="left")
        .join(prop.rename({"last_rank": "rank"}), on="rank", how="left")
        .with_columns(pl.col("root_caused_wait_ns", "propagated_wait_ns").fill_null(0.0))
    )
    step_df = (
        flows.filter(pl.col("step").is_not_null())
        .group_by("root_rank", "step").agg(pl.col("amount_ns").sum().alias("root_caused_wait_ns"))
        .rename({"root_rank": "rank"}).sort("rank", "step")
    )
    return Blame(instances=inst, ranks=rank_df, steps=step_df, flows=flows)


def _instances(rows: pl.DataFrame) -> pl.DataFrame:
    """Per instance: caused, own and propagated wait, and the parent instance that held the last arriver."""
    if rows.height == 0:
        return pl.DataFrame(schema=_INSTANCE_SCHEMA)
    inst = (
        rows.group_by("instance")
        .agg(
            pl.col("step").min(), pl.col("pg").first(), pl.col("group_ranks").first(), pl.len().alias("n_ranks"),
            pl.col("last_rank").first().cast(pl.Int32),
            pl.col("wait_ns").sum().cast(pl.Float64).alias("caused_ns"),
        )
    )
    # each participant's previous matched kernel (its own clock): the latest that ended before it arrived,
    # and how long it was held there
    prev = rows.select(
        "rank", pl.col("instance").alias("parent"), pl.col("end_ns").alias("p_end"),
        pl.col("wait_ns").cast(pl.Float64).alias("held"),
    ).sort("p_end")
    part = rows.select("instance", "rank", "start_ns", pl.col("wait_ns").cast(pl.Float64).alias("w")).sort("start_ns")
    part = part.join_asof(prev, left_on="start_ns", right_on="p_end", by="rank", strategy="backward",
                          check_sortedness=False).with_columns(pl.col("held").fill_null(0.0))
    last = part.join(inst.select("instance", pl.col("last_rank").alias("rank")), on=["instance", "rank"], how="semi")
    inst = inst.join(last.select("instance", "parent", pl.col("held").alias("l_held")), on="instance", how="left")
    # a peer that was in j itself was released as late as L; one held elsewhere as long as L was is
    # no earlier either: only the hold L had beyond the peer's sets L apart
    rel = (
        part.join(inst.select("instance", pl.col("parent").alias("l_parent"), "l_held", "last_rank"), on="instance")
        .filter(pl.col("rank") != pl.col("last_rank"))
        .with_columns(
            pl.when(pl.col("parent") == pl.col("l_parent")).then(0.0)
            .otherwise((pl.col("l_held").fill_null(0.0) - pl.col("held")).clip(0.0)).alias("delta")
        )
    )
    prop = rel.group_by("instance").agg(pl.min_horizontal("w", "delta").clip(0.0).sum().alias("propagated_ns"))
    inst = inst.join(prop, on="instance", how="left").with_columns(pl.col("propagated_ns").fill_null(0.0))
    inst = inst.with_columns(
        pl.when(pl.col("propagated_ns") > 0).then(pl.col("parent")).otherwise(None).alias("parent"),
        (pl.col("caused_ns") - pl.col("propagated_ns")).alias("own_ns"),
    )
    return inst.select(list(_INSTANCE_SCHEMA)).sort("instance")


def _flows(inst: pl.DataFrame) -> pl.DataFrame:
    """Every (root instance, instance where wait was suffered) pair with the wait that flows between them.

    An instance's own wait stays with it; its propagated part is split over its parent's flows in
    proportion, level by level from the roots down (a loop over chain depth, not over instances).
    """
    schema = {"root": pl.Utf8, "root_rank": pl.Int32, "instance": pl.Utf8, "step": pl.Int64, "amount_ns": pl.Float64}
    if inst.height == 0:
        return pl.DataFrame(schema=schema)
    # share of each root in an instance's caused wait: start with the instance's own part
    share = inst.select(
        pl.col("instance").alias("root"), pl.col("last_rank").alias("root_rank"), "instance",
        pl.when(pl.col("caused_ns") > 0).then(pl.col("own_ns") / pl.col("caused_ns")).otherwise(0.0).alias("frac"),
    ).filter(pl.col("frac") > 0)
    children = inst.filter(pl.col("parent").is_not_null()).select(
        "instance", "parent", (pl.col("propagated_ns") / pl.col("caused_ns")).alias("f")
    )
    resolved = inst.filter(pl.col("parent").is_null()).select("instance")
    done = share.join(resolved, on="instance", how="semi")
    pending = children
    parts = [done]
    for _ in range(_MAX_LEVELS):
        ready = pending.join(resolved, left_on="parent", right_on="instance", how="semi")
        if ready.height == 0:
            break
        inherited = (
            ready.join(done.rename({"instance": "parent"}), on="parent")
            .select("root", "root_rank", "instance", (pl.col("f") * pl.col("frac")).alias("frac"))
        )
        own = share.join(ready.select("instance"), on="instance", how="semi")
        done = pl.concat([own, inherited]).group_by("root", "root_rank", "instance").agg(pl.col("frac").sum())
        parts.append(done)
        resolved = ready.select("instance")
        pending = pending.join(resolved, on="instance", how="anti")
    fr = pl.concat(parts)
    return (
        fr.join(inst.select("instance", "step", "caused_ns"), on="instance")
        .select("root", "root_rank", "instance", "step", (pl.col("frac") * pl.col("caused_ns")).alias("amount_ns"))
        .filter(pl.col("amount_ns") > 0)
        .cast(schema)
        .sort("root", "instance")
    )
