"""The Inspector summary from streamed aggregates (``ingest.inspector_fold.Folded``), shaped exactly as
``metrics.inspector.analyze`` shapes it from the whole record table. Pure: frames in, frames out."""

from __future__ import annotations

import polars as pl

from ..ingest.inspector.fold import BUSBW, BYTES, LOGGED, TRANSFER, Folded, median_of
from ..model import InspectorLog
from . import inspector as im


def summarize(log: InspectorLog, dims: dict[str, str] | None = None) -> im.InspectorSummary:
    """The summary of any Inspector input: streamed aggregates here, a whole record table ``metrics.inspector``'s.
    ``dims``: communicator id -> dimension from its membership (the cross-rank stage's)."""
    return analyze(log, dims) if log.folded is not None else im.analyze(log, dims)


def analyze(log: InspectorLog, dims: dict[str, str] | None = None) -> im.InspectorSummary:
    f: Folded = log.folded  # type: ignore[assignment]
    comms = log.comms.with_columns((pl.col("nnodes") <= 1).alias("intra_node"))
    busbw = _table(f, comms, ["comm", "op", "size_bucket", "algo", "proto"]).join(
        comms.select("comm", "id", "name", "n_ranks", "nnodes", "intra_node", "ranks"), on="comm").select(
        "id", "name", "op", "size_bucket", "algo", "proto", "n_ranks", "nnodes", "intra_node", "ranks", *_COLS,
        "comm").sort("op", "size_bucket", "intra_node", "busbw_gbps_p50", "id", nulls_last=True)
    by = ["op", "size_bucket", "intra_node"]
    bandwidth = _table(f, comms, by).select(*by, *_COLS).sort(by, nulls_last=True)
    pp = f.per_proc
    ranks = _ranks(pp)
    per_comm = f.per_comm.group_by("comm").agg(pl.all().sum())
    communicators = (comms.join(pp.group_by("comm").agg(pl.col("records").sum().cast(pl.UInt32),
                                                        pl.col("rank").n_unique().cast(pl.UInt32).alias("ranks_logged")),
                                on="comm", how="left")
                     .join(per_comm, on="comm", how="left")
                     .with_columns(pl.col("instances", "complete_instances").fill_null(0)).sort("comm"))
    per_dim = pp.filter(pl.col("rank").is_not_null()).join(
        comms.select("comm", "intra_node", im.dimension_of(dims).alias("dimension")), on="comm").group_by(
        "rank", "dimension").agg(
        pl.col("comm").n_unique().alias("groups"), pl.col("intra_node").all(),
        pl.col("exec_ns").sum().alias("comm_ns"), pl.col("wait_ns").sum()).sort("rank", "dimension")
    outliers = (f.outliers.join(comms.select("comm", "id", "name"), on="comm")
                .sort("max_wait_ns", "comm", "seq", descending=[True, False, False]).head(im.TOP_OUTLIERS)
                .select("id", "name", "seq", "op", "bytes", "n_ranks", "last_rank",
                        "transfer_ns", "max_wait_ns", pl.col("caused_wait_ns").alias("total_wait_ns"), "busbw_gbps"))
    n_inst = int(per_comm["instances"].sum()) if per_comm.height else 0
    n_complete = int(per_comm["complete_instances"].sum()) if per_comm.height else 0
    return im.InspectorSummary(
        verbose=log.verbose, counts={**log.counts, "instances": n_inst, "complete_instances": n_complete},
        communicators=communicators, busbw=busbw, bandwidth=bandwidth, slow_links=im.slow_links(busbw),
        ranks=ranks, dimensions=per_dim, outliers=outliers, verdict=im.verdict(ranks))


_COLS = ["count", "bytes_p50", "transfer_ns_p50", "busbw_gbps_p50", "busbw_gbps_min", "busbw_gbps_max",
         "logged_busbw_gbps_p50"]


def _table(f: Folded, comms: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Count, min, max and the sketched medians per ``by`` (``intra_node`` comes from the communicator)."""
    side = comms.select("comm", "intra_node")
    stats = f.bw_stats.join(side, on="comm", how="left").group_by(by).agg(
        pl.col("count").sum().cast(pl.UInt32), pl.col("busbw_min").min().alias("busbw_gbps_min"),
        pl.col("busbw_max").max().alias("busbw_gbps_max"))
    med = median_of(f.sketch.join(side, on="comm", how="left"), by)

    def m(i: int, name: str) -> pl.DataFrame:
        return med.filter(pl.col("m") == i).select(*by, pl.col("median").alias(name))

    out = stats
    for i, name in ((BYTES, "bytes_p50"), (TRANSFER, "transfer_ns_p50"), (BUSBW, "busbw_gbps_p50"),
                    (LOGGED, "logged_busbw_gbps_p50")):
        out = out.join(m(i, name), on=by, how="left", nulls_equal=True)
    return out


def _ranks(pp: pl.DataFrame) -> pl.DataFrame:
    """As ``metrics.inspector._ranks``, from the per communicator x rank sums."""
    df = pp.filter(pl.col("rank").is_not_null()).group_by("rank").agg(
        pl.col("records").sum().cast(pl.UInt32), pl.col("exec_ns").sum().alias("comm_ns"), pl.col("wait_ns").sum(),
        pl.col("caused_ns").sum().alias("caused_wait_ns"),
        pl.col("instances").sum().cast(pl.UInt32), pl.col("share").sum().alias("instances_last"),
        pl.col("expected_ns").sum().alias("_expected"), pl.col("var").sum().alias("_var"))
    return im.rank_columns(df)
