"""Pair the same collective instance across ranks.

Key: process group (and its member list) plus the instance's ordinal. Ranks' profiling windows can
start at different iterations, so ordinals are counted inside each step (``ProfilerStep`` numbers are
global iteration counts, the same on every rank); outside steps, by a shift of the (op, size)
sequence against the reference rank. Kernels without metadata are matched by operation and order,
counted back from the first kernel that has metadata (the launches that fell before the window).
Point-to-point kernels are not matched: their peer is not in the traces.
"""

from __future__ import annotations

import polars as pl

P2P_OPS = ("send", "recv", "send_recv")


def instances(coll: pl.DataFrame) -> pl.DataFrame:
    """``coll`` plus ``instance`` (a cross-rank key, null when unmatched) and ``n_ranks`` found."""
    if coll.height == 0:
        return coll.with_columns(pl.lit(None, dtype=pl.Utf8).alias("instance"), pl.lit(0, dtype=pl.UInt32).alias("n_ranks"))
    df = coll.sort("rank", "start_ns").with_columns(
        pl.col("op").is_in(P2P_OPS).alias("_p2p"),
        pl.coalesce(pl.max_horizontal("in_bytes", "out_bytes"), pl.lit(-1)).alias("_bytes"),
    )
    meta = df.filter(pl.col("has_meta") & ~pl.col("_p2p"))
    nometa = df.filter(~pl.col("has_meta") & ~pl.col("_p2p"))
    p2p = df.filter(pl.col("_p2p"))

    in_step = meta.filter(pl.col("step").is_not_null()).with_columns(
        pl.int_range(pl.len()).over("rank", "pg", "step").alias("_k")
    ).with_columns(pl.format("pg{}|{}|s{}|k{}", "pg", "group_ranks", "step", "_k").alias("instance"))
    out_step = _shift_aligned(meta.filter(pl.col("step").is_null()))
    nm = nometa.with_columns(
        (pl.len() - 1 - pl.int_range(pl.len())).over("rank", "op", "step").alias("_k")
    ).with_columns(
        pl.format("nometa|{}|s{}|r{}", "op", pl.col("step").fill_null(-1), "_k").alias("instance")
    )
    p2p = p2p.with_columns(pl.lit(None, dtype=pl.Utf8).alias("instance"))
    cols = [*coll.columns, "instance"]
    allrows = pl.concat([x.select(cols) for x in (in_step, out_step, nm, p2p)])
    counts = allrows.filter(pl.col("instance").is_not_null()).group_by("instance").agg(
        pl.col("rank").n_unique().alias("n_ranks"), pl.len().alias("_rows")
    )
    out = allrows.join(counts, on="instance", how="left")
    # an instance seen on one rank only, or twice on a rank, is not a usable match
    out = out.with_columns(
        pl.when((pl.col("n_ranks") >= 2) & (pl.col("_rows") == pl.col("n_ranks")))
        .then(pl.col("instance"))
        .otherwise(None)
        .alias("instance"),
        pl.col("n_ranks").fill_null(1),
    ).drop("_rows")
    return out.sort("rank", "start_ns")


def _shift_aligned(meta: pl.DataFrame) -> pl.DataFrame:
    """Ordinals within a group, shifted per rank so its (op, size) sequence lines up with the reference
    (the group's smallest rank): all groups and ranks in one query."""
    if meta.height == 0:
        return meta.with_columns(pl.lit(None, dtype=pl.Utf8).alias("instance"))
    g = ["pg", "group_ranks"]
    df = meta.with_row_index("_i").with_columns(
        pl.int_range(pl.len()).over([*g, "rank"]).alias("_k"),
        pl.col("rank").min().over(g).alias("_ref"),
    )
    shifts = _best_shifts(df, g)
    out = (
        df.join(shifts, on=[*g, "rank"], how="left", nulls_equal=True)
        .with_columns(
            pl.format("pg{}|{}|n{}", "pg", "group_ranks", pl.col("_k") + pl.col("_shift").fill_null(0)).alias("instance")
        )
        .sort(pl.col("_i").min().over(g), "_i")  # groups in order of appearance, as before
    )
    return out.drop("_i", "_ref", "_shift")


def _best_shifts(df: pl.DataFrame, g: list[str], max_shift: int = 64) -> pl.DataFrame:
    """Per (group, rank): the shift s maximizing matches of rank[j] == ref[j + s] (ties: smallest |s|,
    then the negative one; no match at all: 0). A rank whose every kernel matches at s = 0 cannot do
    better, so only the others are tried at every shift."""
    sig = ["op", "_bytes"]
    ref = df.filter(pl.col("rank") == pl.col("_ref")).select(*g, "_k", *[pl.col(c).alias(f"_r{c}") for c in sig])
    ref_len = ref.group_by(g).agg(pl.len().cast(pl.Int64).alias("_nref"))
    other = df.filter(pl.col("rank") != pl.col("_ref")).select(*g, "rank", "_k", *sig)
    same = [pl.col(c) == pl.col(f"_r{c}") for c in sig]
    at0 = (
        other.join(ref, on=[*g, "_k"], how="left", nulls_equal=True)
        .group_by([*g, "rank"])
        .agg(pl.all_horizontal(same).fill_null(False).sum().alias("_score"), pl.len().cast(pl.Int64).alias("_n"))
    )
    todo = (
        at0.filter(pl.col("_score") < pl.col("_n"))
        .join(ref_len, on=g, nulls_equal=True)
        .select(*g, "rank", "_n", "_nref")
    )
    schema = {**{c: df.schema[c] for c in g}, "rank": df.schema["rank"], "_shift": pl.Int64}
    if todo.height == 0:
        return pl.DataFrame(schema=schema)
    cand = (
        other.join(todo, on=[*g, "rank"], nulls_equal=True)
        .join(pl.DataFrame({"_shift": range(-max_shift, max_shift + 1)}, schema={"_shift": pl.Int64}), how="cross")
        .filter((pl.col("_shift") >= -pl.min_horizontal(pl.lit(max_shift), "_n"))
                & (pl.col("_shift") <= pl.min_horizontal(pl.lit(max_shift), "_nref")))
        .with_columns((pl.col("_k") + pl.col("_shift")).alias("_k"))
        .join(ref, on=[*g, "_k"], nulls_equal=True)
        .filter(pl.all_horizontal(same))
        .group_by([*g, "rank", "_shift"])
        .agg(pl.len().alias("_score"))
        .sort([*g, "rank", "_score", pl.col("_shift").abs(), "_shift"], descending=[False] * 3 + [True, False, False])
        .group_by([*g, "rank"], maintain_order=True)
        .agg(pl.col("_shift").first())
    )
    return cand.select(list(schema)).cast(schema)
