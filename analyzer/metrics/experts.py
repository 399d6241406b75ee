"""Expert parallelism: all-to-all(v) traffic per peer from the recorded split sizes, and its imbalance.

PyTorch records ``In split size``/``Out split size`` (dim-0 rows per peer, in group-rank order) on
all_to_all_single; a rank's bytes to peer j = in_bytes x split[j] / sum(split), and likewise for what it
receives. Per matched instance: each rank's received bytes, their max/mean (the imbalance: the
dispatch is as slow as its busiest receiver) and the rank that received most.
"""

from __future__ import annotations

import polars as pl


def _per_peer(rows: pl.DataFrame, splits: str, nbytes: str, direction: str) -> pl.DataFrame:
    """rank, instance, peer (global), bytes for one side (sent: in, received: out)."""
    sizes = pl.col(splits).str.split(",").list.eval(pl.element().cast(pl.Int64, strict=False))
    members = pl.col("group_ranks").str.split(",").list.eval(pl.element().cast(pl.Int32, strict=False))
    df = rows.filter(pl.col(splits).is_not_null() & pl.col(nbytes).is_not_null()).select(
        "rank", "instance", sizes.alias("_s"), members.alias("_m"), pl.col(nbytes).alias("_b")
    ).filter(pl.col("_s").list.len() == pl.col("_m").list.len())
    df = df.with_columns(pl.col("_s").list.sum().alias("_tot")).explode("_s", "_m")
    return df.select(
        "rank", "instance", pl.col("_m").alias("peer"),
        pl.when(pl.col("_tot") > 0).then(pl.col("_b") * pl.col("_s") / pl.col("_tot")).otherwise(0.0).alias(direction),
    )


def analyze(rows: pl.DataFrame) -> dict | None:
    """The ``experts`` report; None when no matched all-to-all recorded its split sizes.

    ``rows``: comm kernels after matching (``instance``, ``op``, ``in_splits``, ``out_splits``, bytes, wait).
    """
    a2a = rows.filter((pl.col("op") == "all_to_all") & pl.col("instance").is_not_null())
    if a2a.height == 0 or "in_splits" not in a2a.columns:
        return None
    sent = _per_peer(a2a, "in_splits", "in_bytes", "bytes")
    recv = _per_peer(a2a, "out_splits", "out_bytes", "bytes")
    if sent.height == 0 and recv.height == 0:
        return None
    # received per rank: from the out-splits; only when no rank recorded any, from what the others sent it
    # (mixing the two would compare ranks measured two ways; a rank missing its own stays unknown)
    got = recv.group_by("instance", "rank").agg(pl.col("bytes").sum())
    if got.height == 0:
        got = sent.group_by("instance", pl.col("peer").alias("rank")).agg(pl.col("bytes").sum())
    per_inst = (
        got.sort("bytes", "rank", descending=[True, False])
        .group_by("instance")
        .agg(pl.col("bytes").max().alias("recv_bytes_max"), pl.col("bytes").mean().alias("recv_bytes_mean"),
             pl.col("rank").first().alias("top_rank"), pl.len().alias("ranks"))
        .with_columns(pl.when(pl.col("recv_bytes_mean") > 0)
                      .then(pl.col("recv_bytes_max") / pl.col("recv_bytes_mean")).alias("imbalance"))
    )
    info = a2a.group_by("instance").agg(
        pl.col("pg").first(), pl.col("step").min(), pl.col("start_ns").min(),
        pl.col("wait_ns").max().alias("max_wait_ns") if "wait_ns" in a2a.columns
        else pl.lit(None, dtype=pl.Float64).alias("max_wait_ns"),
    )
    per_inst = per_inst.join(info, on="instance").sort("start_ns", "instance")
    pairs = (
        sent.group_by(pl.col("rank").alias("src"), pl.col("peer").alias("dst")).agg(pl.col("bytes").sum())
        .filter(pl.col("bytes") > 0).sort("src", "dst")
    )
    tops = per_inst.group_by("top_rank").agg(pl.len().alias("instances_top")).rename({"top_rank": "rank"})
    per_rank = (
        got.group_by("rank").agg(pl.col("bytes").sum().alias("recv_bytes"))
        .join(sent.group_by("rank").agg(pl.col("bytes").sum().alias("sent_bytes")), on="rank", how="full", coalesce=True)
        .join(tops, on="rank", how="left").with_columns(pl.col("instances_top").fill_null(0)).sort("rank")
    )
    top = per_rank.sort("recv_bytes", "rank", descending=[True, False], nulls_last=True)
    return {
        "instances": per_inst.height,
        "imbalance_p50": per_inst["imbalance"].median(),
        "imbalance_max": per_inst["imbalance"].max(),
        "top_receiver": int(top["rank"][0]) if top.height else None,
        "per_instance": per_inst.select("pg", "step", "ranks", "recv_bytes_max", "recv_bytes_mean", "imbalance",
                                        "top_rank", "max_wait_ns"),
        "ranks": per_rank,
        "peers": pairs,
    }


def balance(rows: pl.DataFrame) -> dict[str, pl.DataFrame] | None:
    """What the ``balanced_experts`` what-if needs: each rank's received all-to-all bytes (its tokens) and
    expert-parallel group, and per instance the mean bytes a rank moves over the busiest rank's (its transfer
    at balanced loads): the busiest sender or receiver sets the pace (the combine all-to-all sends a hot
    expert's tokens back, so there it is the busiest sender). What is sent adds up to what is received, so
    one mean serves both.

    Returns {"ranks": rank, group (the all-to-all group's member list), recv_bytes; "instances": instance,
    scale} or None when no all-to-all recorded split sizes.
    """
    a2a = rows.filter((pl.col("op") == "all_to_all") & pl.col("instance").is_not_null())
    if a2a.height == 0 or "out_splits" not in a2a.columns:
        return None
    got = _per_peer(a2a, "out_splits", "out_bytes", "bytes").group_by("instance", "rank").agg(pl.col("bytes").sum())
    if got.height == 0:
        return None
    sent = _per_peer(a2a, "in_splits", "in_bytes", "bytes").group_by("instance", "rank").agg(pl.col("bytes").sum())
    busiest = pl.concat([got, sent]).group_by("instance").agg(pl.col("bytes").max().alias("_max"))
    scale = got.group_by("instance").agg(pl.col("bytes").mean().alias("_mean")).join(busiest, on="instance").select(
        "instance", pl.when(pl.col("_max") > 0).then(pl.col("_mean") / pl.col("_max")).otherwise(1.0).alias("scale"))
    group = (a2a.filter(pl.col("out_splits").is_not_null()).group_by("rank", "group_ranks").agg(pl.len().alias("_n"))
             .sort("rank", "_n", "group_ranks", descending=[False, True, False])
             .group_by("rank", maintain_order=True).agg(pl.col("group_ranks").first().alias("group")))
    ranks = group.join(got.group_by("rank").agg(pl.col("bytes").sum().alias("recv_bytes")), on="rank", how="inner")
    return {"ranks": ranks.sort("rank"), "instances": scale}
