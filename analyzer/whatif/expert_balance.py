"""The ``balanced_experts`` what-if: every rank of an expert-parallel group receives the group's mean tokens.

A hot expert makes two things slow: the all-to-all, which lasts as long as its busiest receiver takes, and
the expert's compute, which grows with the tokens it received. At balanced loads
- each all-to-all instance's transfer is scaled by mean / max received bytes (metrics.experts.balance);
- the compute between two communication kernels (a segment: the k-th of a rank's step; SPMD ranks run the
  same collectives in the same order) is scaled to the group's mean for that segment when it follows the
  tokens: across the group's members, the segment's compute D against their received bytes R, the
  least-squares line D = a + b R rises (b > 0), explains at least ``MIN_R2`` of the spread of D, and D differs
  by more than ``MIN_SPREAD`` of the longest. The line passes through the means, so at R = mean(R) it gives
  mean(D): a cost linear in the tokens (fixed part included) is exact. Segments, not operations, because a
  GEMM's kernel changes with its shape (the hot expert's are named differently). Segments that do not
  follow the tokens (dense layers, the optimizer) stay as measured, so a slow GPU elsewhere is not counted
  as the experts'; every operation of a scaled segment is scaled by the same factor.
No scenario when every group's received bytes are already equal (within ``MIN_SPREAD``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

MIN_R2 = 0.8
MIN_SPREAD = 0.05


def expert_changes(nodes: pl.DataFrame, instances: pl.DataFrame, experts: dict[str, pl.DataFrame] | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(nodes, their duration changes, instances, their transfer changes) in ns, or None (nothing to balance).

    ``nodes``: graph nodes (node, rank, kind, step, dur_ns; ordered by rank and start); ``instances``: graph instances
    (inst, instance, transfer_ns); ``experts``: metrics.experts.balance."""
    if not experts or experts["ranks"].height == 0:
        return None
    ranks = experts["ranks"].with_columns(pl.col("recv_bytes").cast(pl.Float64),
                                          pl.col("group").str.split(",").list.len().alias("_size"))
    spread = ranks.group_by("group").agg(((pl.col("recv_bytes").max() - pl.col("recv_bytes").min())
                                          > MIN_SPREAD * pl.col("recv_bytes").max()).alias("_uneven"))
    if not spread["_uneven"].any():
        return None
    ranks = ranks.join(spread.filter("_uneven"), on="group").select("rank", "group", "_size",
                                                                    pl.col("recv_bytes").alias("_r"))
    tr = (instances.join(experts["instances"], on="instance", how="inner")
          .select("inst", (pl.col("transfer_ns").cast(pl.Float64) * (pl.col("scale") - 1.0)).alias("_dt")))
    seg = pl.col("kind").eq("comm").cast(pl.Int32).cum_sum().over("rank", "step")  # comm kernels so far
    ops = (
        nodes.select("node", pl.col("rank").cast(ranks.schema["rank"]), pl.col("step").fill_null(-1), "kind",
                     pl.col("dur_ns").cast(pl.Float64).alias("_d"))
        .sort("node").with_columns(seg.alias("_seg"))
        .filter(pl.col("kind") == "compute")
        .join(ranks, on="rank", how="inner")
    )
    key = ["group", "step", "_seg"]
    per = ops.group_by("rank", *key, "_size", "_r").agg(pl.col("_d").sum().alias("_D"))
    dm, rm = pl.col("_D").mean().over(key), pl.col("_r").mean().over(key)
    per = per.with_columns(
        pl.len().over(key).alias("_n"), dm.alias("_Dm"),
        ((pl.col("_D") - dm) * (pl.col("_r") - rm)).mean().over(key).alias("_cov"),
        ((pl.col("_D") - dm) ** 2).mean().over(key).alias("_vd"),
        ((pl.col("_r") - rm) ** 2).mean().over(key).alias("_vr"),
        (pl.col("_D").max() - pl.col("_D").min()).over(key).alias("_sd"), pl.col("_D").max().over(key).alias("_dx"),
    ).filter(
        (pl.col("_n") == pl.col("_size")) & (pl.col("_vr") > 0) & (pl.col("_cov") > 0) & (pl.col("_D") > 0)
        & (pl.col("_cov") ** 2 >= MIN_R2 * pl.col("_vr") * pl.col("_vd")) & (pl.col("_sd") > MIN_SPREAD * pl.col("_dx"))
    )
    follows = ops.join(per.select("rank", *key, (pl.col("_Dm") / pl.col("_D")).alias("_f")), on=["rank", *key])
    follows = follows.with_columns((pl.col("_d") * (pl.col("_f") - 1.0)).alias("_dd"))
    return (follows["node"].to_numpy(), follows["_dd"].to_numpy(),
            tr["inst"].to_numpy(), tr["_dt"].to_numpy())
