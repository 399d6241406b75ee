"""NCCL Inspector logs: bandwidth per communicator, slow links, per-rank waits and a straggler verdict.

Pure functions over ``InspectorLog`` (no timeline needed, so they work on non-verbose logs too).

Each collective instance is ``(communicator, coll_sn)``; each member logs its kernel time ``x_r``
(GPU clock). A blocking collective ends together on every member, so a member's kernel lasts its wait
plus the transfer, and the last to arrive waits least: ``transfer = min_r x_r``, ``wait_r = x_r - transfer``
and the rank with the shortest kernel arrived last (DESIGN's duration-based split, which needs no clocks).
Only instances every member logged count for waits (one rank missing would shorten no kernel).

Bandwidth: the plugin's own ``coll_busbw_gbs`` divides by each rank's kernel time, waits included, so
it reads low on every rank that waited. Here busbw is computed from the instance's transfer time with the
plugin's traffic (message size x n for all-gather / reduce-scatter) and nccl-tests factors, like
``Analysis.bandwidth``; the logged median is kept beside it (``logged_busbw_gbps_p50``).

A **slow link** is a communicator whose median busbw stands below the communicators that do the same
work (same op, size bucket, member count, node count, algorithm and protocol): under
``SLOW_LINK_RATIO`` x their median, and only for messages of at least ``BANDWIDTH_BOUND_BYTES`` (1 MiB). Below
that an operation's time is mostly fixed cost (kernel launch, protocol handshakes, a network round trip: ~5-50 us
on NVLink or InfiniBand, hundreds over sockets) rather than bytes over the link: nccl-tests' curves reach half their
peak bus bandwidth between ~1 and 8 MiB and stay under a few percent of it below 64 KiB, so a 4 KiB send/recv at
0.01 GB/s says how long a round trip takes, nothing about a link's bandwidth.

The **verdict** names the rank that caused the most wait when that wait stands out against chance (each member
last with probability ``1/n`` per instance, each instance weighing by its wait): a z-score of at least ``MIN_Z``,
and at least ``MIN_SHARE`` of all the wait ranks caused. It is the verdict of logs without kernel timestamps;
with them the trace machinery decides (``analysis``: it keeps this one only where both name the same rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..crossrank.groups import family  # a communicator's dimension is named in the cross-rank stage
from ..model import InspectorLog
from ..rules import bus_factor_expr

SLOW_LINK_RATIO = 0.7
BANDWIDTH_BOUND_BYTES = 1 << 20  # smaller messages are latency-bound: never a slow link (module doc)
MIN_Z = 3.5
MIN_SHARE = 0.1
TOP_OUTLIERS = 20


@dataclass(frozen=True)
class InspectorSummary:
    verbose: bool
    counts: dict[str, int]
    communicators: pl.DataFrame  # one row per communicator: members, node count, records, instances
    busbw: pl.DataFrame  # per communicator x op x size bucket x algo x proto
    bandwidth: pl.DataFrame  # per op x size bucket x intra/inter node, over all communicators
    slow_links: pl.DataFrame  # communicators whose busbw stands below their peers'
    ranks: pl.DataFrame  # per rank: kernel time, wait, caused wait, last arrivals
    dimensions: pl.DataFrame  # per rank x communicator name family (tp, dp, ...): the same
    outliers: pl.DataFrame  # instances with the largest arrival gaps (max wait), and who was last
    verdict: dict | None


def instances(records: pl.DataFrame, comms: pl.DataFrame) -> pl.DataFrame:
    """One row per logged collective instance (communicator, seq): members seen, transfer, last rank."""
    # only the columns used: a filter copies every column it keeps (millions of records)
    coll = records.select("comm", "seq", "rank", "p2p", "op", "bytes", "exec_ns", "algo", "proto", "busbw_gbps").filter(
        ~pl.col("p2p") & pl.col("rank").is_not_null())
    return (
        coll.group_by("comm", "seq")
        .agg(
            pl.col("op").first().cast(pl.Utf8), pl.col("bytes").first(), pl.len().alias("seen"),
            pl.col("exec_ns").min().alias("transfer_ns"), pl.col("exec_ns").max().alias("max_exec_ns"),
            pl.col("exec_ns").sum().alias("sum_exec_ns"),
            pl.col("rank").sort_by("exec_ns").first().alias("last_rank"),
            (pl.col("exec_ns") == pl.col("exec_ns").min()).sum().alias("n_last"),
            pl.col("algo").first().cast(pl.Utf8), pl.col("proto").first().cast(pl.Utf8),
            pl.col("busbw_gbps").median().alias("logged_busbw_gbps"),
        )
        .join(comms.select("comm", "n_ranks", "nnodes"), on="comm", how="left")
        .with_columns(
            (pl.col("seen") == pl.col("n_ranks")).alias("complete"),
            (pl.col("max_exec_ns") - pl.col("transfer_ns")).alias("max_wait_ns"),
            (pl.col("sum_exec_ns") - pl.col("seen") * pl.col("transfer_ns")).alias("caused_wait_ns"),
        )
        .with_columns(_busbw(pl.col("transfer_ns")).alias("busbw_gbps"))
    )


def _traffic() -> pl.Expr:
    op, n = pl.col("op"), pl.col("n_ranks").cast(pl.Int64)
    return pl.when(op.is_in(["all_gather", "reduce_scatter"])).then(pl.col("bytes") * n).otherwise(pl.col("bytes"))


def _busbw(t_ns: pl.Expr) -> pl.Expr:
    return pl.when(t_ns > 0).then(_traffic() / t_ns * bus_factor_expr(pl.col("op"), pl.col("n_ranks")))


def _size_bucket() -> pl.Expr:
    return (2 ** pl.col("bytes").cast(pl.Float64).log(2).floor()).cast(pl.Int64).alias("size_bucket")


def dimension_of(dims: dict[str, str] | None) -> pl.Expr:
    """A communicator's dimension: from its membership where the cross-rank stage named it (``dims``: id ->
    dimension), else from the family of its name ('tp_3' -> 'tp')."""
    by_name = family(pl.col("name"))
    if not dims:
        return by_name
    return pl.col("id").replace_strict(dims, default=None, return_dtype=pl.Utf8).fill_null(by_name)


def analyze(log: InspectorLog, dims: dict[str, str] | None = None) -> InspectorSummary:
    """The summary of logs read whole; streamed logs (``log.folded``) are ``inspector_folded.analyze``'s.
    ``dims``: communicator id -> dimension (membership); without it, each communicator's name family."""
    comms = log.comms.with_columns((pl.col("nnodes") <= 1).alias("intra_node"))
    inst = instances(log.records, comms).with_columns(_size_bucket())
    complete = inst.filter(pl.col("complete"))
    # p2p: each record alone (its transfer is its kernel time: a send waits for its recv only at the start)
    p2p = log.records.filter(pl.col("p2p") & pl.col("rank").is_not_null()).select(
        "comm", "op", "bytes", "exec_ns", "algo", "proto", "busbw_gbps").join(
        comms.select("comm", "n_ranks"), on="comm", how="left").with_columns(
        pl.col("op").cast(pl.Utf8), pl.col("exec_ns").alias("transfer_ns"), _size_bucket(),
        pl.col("algo").cast(pl.Utf8), pl.col("proto").cast(pl.Utf8),
        pl.col("busbw_gbps").alias("logged_busbw_gbps")).with_columns(_busbw(pl.col("transfer_ns")).alias("busbw_gbps"))
    cols = ["comm", "op", "size_bucket", "bytes", "algo", "proto", "transfer_ns", "busbw_gbps", "logged_busbw_gbps"]
    bw_rows = pl.concat([complete.select(cols), p2p.select(cols)])
    busbw = _busbw_table(bw_rows, comms)
    rank_df = _ranks(log.records, complete)
    return InspectorSummary(
        verbose=log.verbose, counts={**log.counts, "instances": inst.height, "complete_instances": complete.height},
        communicators=_communicators(log.records, comms, inst),
        busbw=busbw,
        bandwidth=_bandwidth(bw_rows, comms),
        slow_links=slow_links(busbw),
        ranks=rank_df,
        dimensions=_dimensions(log.records, complete, comms, dims),
        outliers=_outliers(complete, comms),
        verdict=verdict(rank_df),
    )


def _communicators(records: pl.DataFrame, comms: pl.DataFrame, inst: pl.DataFrame) -> pl.DataFrame:
    per = records.group_by("comm").agg(pl.len().alias("records"), pl.col("rank").n_unique().alias("ranks_logged"))
    ins = inst.group_by("comm").agg(pl.len().alias("instances"), pl.col("complete").sum().alias("complete_instances"))
    return (comms.join(per, on="comm", how="left").join(ins, on="comm", how="left")
            .with_columns(pl.col("instances", "complete_instances").fill_null(0)).sort("comm"))


_BW_AGG = (
    pl.len().alias("count"),
    pl.col("bytes").median().alias("bytes_p50"),
    pl.col("transfer_ns").median().alias("transfer_ns_p50"),
    pl.col("busbw_gbps").median().alias("busbw_gbps_p50"),
    pl.col("busbw_gbps").min().alias("busbw_gbps_min"),
    pl.col("busbw_gbps").max().alias("busbw_gbps_max"),
    pl.col("logged_busbw_gbps").median().cast(pl.Float64).alias("logged_busbw_gbps_p50"),
)


def _busbw_table(rows: pl.DataFrame, comms: pl.DataFrame) -> pl.DataFrame:
    by = ["comm", "op", "size_bucket", "algo", "proto"]
    return (rows.group_by(by).agg(*_BW_AGG)
            .join(comms.select("comm", "id", "name", "n_ranks", "nnodes", "intra_node", "ranks"), on="comm")
            .select("id", "name", "op", "size_bucket", "algo", "proto", "n_ranks", "nnodes", "intra_node", "ranks",
                    *[a.meta.output_name() for a in _BW_AGG], "comm")
            .sort("op", "size_bucket", "intra_node", "busbw_gbps_p50", "id", nulls_last=True))


def _bandwidth(rows: pl.DataFrame, comms: pl.DataFrame) -> pl.DataFrame:
    """Per op x size bucket x intra/inter node over every communicator (what the run history stores)."""
    by = ["op", "size_bucket", "intra_node"]
    return (rows.join(comms.select("comm", "intra_node"), on="comm").group_by(by).agg(*_BW_AGG)
            .sort(by, nulls_last=True))


def slow_links(busbw: pl.DataFrame, ratio: float = SLOW_LINK_RATIO) -> pl.DataFrame:
    """Communicators under ``ratio`` x the median busbw of the communicators doing the same work."""
    peers = ["op", "size_bucket", "n_ranks", "nnodes", "algo", "proto"]
    df = busbw.with_columns(
        pl.col("busbw_gbps_p50").median().over(peers, mapping_strategy="group_to_rows").alias("peer_busbw_gbps_p50"),
        pl.len().over(peers).alias("peers"),
    ).with_columns((pl.col("busbw_gbps_p50") / pl.col("peer_busbw_gbps_p50")).alias("ratio"))
    return (df.filter((pl.col("peers") >= 2) & (pl.col("ratio") < ratio)
                      & (pl.col("size_bucket") >= BANDWIDTH_BOUND_BYTES))
            .select("id", "name", "ranks", "op", "size_bucket", "intra_node", "n_ranks", "nnodes", "count",
                    "busbw_gbps_p50", "peer_busbw_gbps_p50", "ratio", "peers")
            .sort("ratio", "id"))


def _ranks(records: pl.DataFrame, complete: pl.DataFrame) -> pl.DataFrame:
    """Per rank. Ranks tied for the shortest kernel share the instance's caused wait and last arrival. Under
    no straggler each member is last with chance 1/n: ``caused_wait_z`` is the rank's caused wait against
    that expectation, in standard deviations (an instance's wait weighs by its size)."""
    mine = records.select("rank", "comm", "seq", "p2p", "exec_ns").filter(pl.col("rank").is_not_null())
    rows = mine.filter(~pl.col("p2p")).join(
        complete.select("comm", "seq", "transfer_ns", "n_ranks", "n_last", "caused_wait_ns"), on=["comm", "seq"])
    p = 1.0 / pl.col("n_ranks")
    share = pl.when(pl.col("exec_ns") == pl.col("transfer_ns")).then(1.0 / pl.col("n_last")).otherwise(0.0)
    caused = pl.col("caused_wait_ns").cast(pl.Float64)
    per = rows.group_by("rank").agg(
        pl.len().alias("instances"),
        (pl.col("exec_ns") - pl.col("transfer_ns")).sum().alias("wait_ns"),
        share.sum().alias("instances_last"),
        (share * caused).sum().alias("caused_wait_ns"),
        (caused * p).sum().alias("_expected"),
        (caused ** 2 * p * (1 - p)).sum().alias("_var"),
    )
    total = mine.group_by("rank").agg(pl.len().alias("records"), pl.col("exec_ns").sum().alias("comm_ns"))
    df = (total.join(per, on="rank", how="left")
          .with_columns(pl.col("instances").fill_null(0),
                        pl.col("instances_last", "caused_wait_ns").fill_null(0.0), pl.col("wait_ns").fill_null(0)))
    return rank_columns(df)


def rank_columns(df: pl.DataFrame) -> pl.DataFrame:
    """The per-rank table's columns from its sums (``_expected``, ``_var``: the caused wait's mean and variance
    if who arrives last were chance, in ns and ns squared), whole-table or streamed alike. ns throughout: the
    z-score is the same number in any unit; presenters show ms (``units.ms_frame``)."""
    return df.select(
        "rank", "records", "comm_ns", "wait_ns", "caused_wait_ns", "instances", "instances_last",
        pl.when(pl.col("instances") > 0).then(100.0 * pl.col("instances_last") / pl.col("instances"))
        .alias("last_arrival_pct"),
        pl.when(pl.col("_var") > 0).then((pl.col("caused_wait_ns") - pl.col("_expected")) / pl.col("_var").sqrt())
        .alias("caused_wait_z"),
    ).sort("rank")


def verdict(ranks: pl.DataFrame) -> dict | None:
    total = float(ranks["caused_wait_ns"].sum()) if ranks.height else 0.0
    if total <= 0:
        return None
    cand = ranks.filter((pl.col("caused_wait_z") >= MIN_Z) & (pl.col("caused_wait_ns") >= MIN_SHARE * total))
    if cand.height == 0:
        return None
    top = cand.sort("caused_wait_ns", "rank", descending=[True, False]).row(0, named=True)
    return {"rank": top["rank"], "caused_wait_ns": top["caused_wait_ns"], "share_pct": 100 * top["caused_wait_ns"] / total,
            "last_arrival_pct": top["last_arrival_pct"], "instances_last": top["instances_last"],
            "instances": top["instances"], "z": top["caused_wait_z"],
            "basis": "kernel times (the rank that arrives last has the shortest kernel)"}


def _dimensions(records: pl.DataFrame, complete: pl.DataFrame, comms: pl.DataFrame,
                dims: dict[str, str] | None = None) -> pl.DataFrame:
    """Per rank and dimension (membership where known, else the communicators' name families)."""
    rows = records.select("rank", "comm", "seq", "exec_ns").filter(pl.col("rank").is_not_null()).join(
        comms.select("comm", "id", "name", "intra_node").with_columns(dimension_of(dims).alias("dimension")),
        on="comm")
    rows = rows.join(complete.select("comm", "seq", "transfer_ns"), on=["comm", "seq"], how="left")
    return rows.group_by("rank", "dimension").agg(
        pl.col("comm").n_unique().alias("groups"), pl.col("intra_node").all().alias("intra_node"),
        pl.col("exec_ns").sum().alias("comm_ns"),
        (pl.col("exec_ns") - pl.col("transfer_ns")).sum().alias("wait_ns"),
    ).sort("rank", "dimension")


def _outliers(complete: pl.DataFrame, comms: pl.DataFrame, top: int = TOP_OUTLIERS) -> pl.DataFrame:
    return (complete.join(comms.select("comm", "id", "name"), on="comm")
            .sort("max_wait_ns", "comm", "seq", descending=[True, False, False]).head(top)
            .select("id", "name", "seq", "op", "bytes", "n_ranks", "last_rank",
                    "transfer_ns", "max_wait_ns", pl.col("caused_wait_ns").alias("total_wait_ns"), "busbw_gbps"))

