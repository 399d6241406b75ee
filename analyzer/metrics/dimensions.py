"""Every per-rank communication metric split by parallelism dimension (DESIGN: "every per-rank metric also
exists per dimension").

Each comm kernel's dimension is the graph's (``Graph.kernels``' ``dimension``, named in the cross-rank stage
by ``crossrank/groups.py``); nothing here decides a group's dimension.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..crossrank.groups import DIMENSIONS
from ..rules import bus_factor_expr
from ..timeline import union
from .flat import FlatAxis

__all__ = ["DIMENSIONS", "per_rank"]


def per_rank(rows: pl.DataFrame, gpu: pl.DataFrame, ranks: list[int],
             flows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per (rank, dimension): comm, exposed (split into wait and transfer), wait, root-caused wait, busbw p50.

    ``flows`` (blame: root_rank, instance, amount_ns): wait suffered in an instance that traces back to
    a rank's own time; it counts under the dimension of the instance where it was suffered.

    ``rows``: comm kernels with ``dimension``, ``dur_ns``, ``wait_ns``, ``transfer_ns`` (waits.per_row).
    Unions are per rank and dimension; exposed = not under any compute kernel of the rank. Ranks are
    laid end to end on one axis so a single interval union serves all of them.
    """
    schema = {"rank": pl.Int32, "dimension": pl.Utf8, "comm_ns": pl.Float64, "exposed_comm_ns": pl.Float64,
              "exposed_wait_ns": pl.Float64, "exposed_transfer_ns": pl.Float64, "wait_ns": pl.Float64,
              "root_caused_wait_ns": pl.Float64, "busbw_gbps_p50": pl.Float64}
    if rows.height == 0:
        return pl.DataFrame(schema=schema)
    axis = FlatAxis.of(gpu)
    compute = axis.coverage(gpu.filter(pl.col("kind") == "compute"))
    segs = union(rows.select("rank", "dimension", "start_ns", "end_ns"), by=["rank", "dimension"])
    a, b = axis.map(segs)
    segs = segs.with_columns(pl.Series("_len", b - a), pl.Series("_exp", (b - a) - compute.within(a, b)))
    a, b = axis.map(rows)
    dur = (b - a).astype(np.float64)
    kexp = dur - compute.within(a, b)
    wait = rows["wait_ns"].fill_null(0).to_numpy().astype(np.float64)
    frac = np.minimum(wait, dur) / np.maximum(dur, 1.0)  # durations are whole ns: a 0 ns kernel gives 0
    n = pl.coalesce("group_size", "n_ranks")
    kern = rows.select(
        "rank", "dimension", pl.Series("_kexp", kexp), pl.Series("_kwait", kexp * frac), pl.col("wait_ns").fill_null(0),
        pl.when(pl.col("instance").is_not_null() & (pl.col("transfer_ns") > 0))
        .then(pl.max_horizontal("in_bytes", "out_bytes").max().over("instance") / pl.col("transfer_ns")
              * bus_factor_expr(pl.col("op"), n)).alias("_busbw"),
    )
    per = kern.group_by("rank", "dimension").agg(
        pl.col("_kexp").sum(), pl.col("_kwait").sum(), pl.col("wait_ns").sum(), pl.col("_busbw").median()
    )
    tot = segs.group_by("rank", "dimension").agg(pl.col("_len").sum(), pl.col("_exp").sum())
    out = tot.join(per, on=["rank", "dimension"], how="left").with_columns(
        pl.when(pl.col("_kexp") > 0).then(pl.col("_exp") / pl.col("_kexp")).otherwise(0.0).alias("_scale")
    )
    if flows is not None and flows.height:
        dim_of = rows.filter(pl.col("instance").is_not_null()).group_by("instance").agg(pl.col("dimension").first())
        root = (flows.join(dim_of, on="instance")
                .group_by(pl.col("root_rank").cast(pl.Int32).alias("rank"), "dimension")
                .agg(pl.col("amount_ns").sum().alias("_root")))
        out = out.join(root, on=["rank", "dimension"], how="full", coalesce=True)
    else:
        out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias("_root"))
    return out.select(
        pl.col("rank").cast(pl.Int32), "dimension",
        pl.col("_len").alias("comm_ns"), pl.col("_exp").alias("exposed_comm_ns"),
        (pl.col("_kwait") * pl.col("_scale")).alias("exposed_wait_ns"),
        (pl.col("_exp") - pl.col("_kwait") * pl.col("_scale")).alias("exposed_transfer_ns"),
        pl.col("wait_ns"),
        (pl.col("_root").fill_null(0.0) if flows is not None else pl.lit(None, dtype=pl.Float64))
        .alias("root_caused_wait_ns"),
        pl.col("_busbw").alias("busbw_gbps_p50"),
    ).filter(pl.col("rank").is_in(ranks)).sort("rank", pl.col("dimension").replace_strict(
        {d: i for i, d in enumerate(DIMENSIONS)}, default=len(DIMENSIONS), return_dtype=pl.Int32))
