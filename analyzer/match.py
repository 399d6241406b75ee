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
    """Ordinals within a group, shifted per rank so its (op, size) sequence lines up with the reference."""
    if meta.height == 0:
        return meta.with_columns(pl.lit(None, dtype=pl.Utf8).alias("instance"))
    parts = []
    for _, grp in meta.partition_by("pg", "group_ranks", as_dict=True, maintain_order=True).items():
        grp = grp.with_columns(pl.int_range(pl.len()).over("rank").alias("_k"))
        ranks = sorted(grp["rank"].unique().to_list())
        ref = grp.filter(pl.col("rank") == ranks[0])
        ref_sig = list(zip(ref["op"].to_list(), ref["_bytes"].to_list()))
        shifts = {ranks[0]: 0}
        for r in ranks[1:]:
            sub = grp.filter(pl.col("rank") == r)
            shifts[r] = _best_shift(ref_sig, list(zip(sub["op"].to_list(), sub["_bytes"].to_list())))
        shift = pl.DataFrame({"rank": list(shifts), "_shift": list(shifts.values())},
                             schema={"rank": pl.Int32, "_shift": pl.Int64})
        grp = grp.join(shift, on="rank").with_columns(
            pl.format("pg{}|{}|n{}", "pg", "group_ranks", pl.col("_k") + pl.col("_shift")).alias("instance")
        )
        parts.append(grp.drop("_shift"))
    return pl.concat(parts)


def _best_shift(ref: list[tuple], other: list[tuple], max_shift: int = 64) -> int:
    """Shift s maximizing matches of other[j] == ref[j + s] (ties: smallest |s|)."""
    best, best_score = 0, -1
    for s in sorted(range(-min(max_shift, len(other)), min(max_shift, len(ref)) + 1), key=abs):
        score = sum(1 for j, sig in enumerate(other) if 0 <= j + s < len(ref) and ref[j + s] == sig)
        if score > best_score:
            best, best_score = s, score
    return best
