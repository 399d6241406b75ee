"""Send/recv of an op table: which recorded ones moved data, and with whom.

A send or recv pairs with the adjacent stage of the same dp rank and tp/cp index (forward-send and backward-recv
with the next stage, the other two with the previous); with virtual stages (vpp > 1) the pipeline wraps
around, the last stage feeding the first stage's next model chunk. The What-if artifact's profiler also
records send/recv ops that launched nothing (its ``dependency_model.get_peer_op_and_match_compute``): a recv
that starts after the last compute of its direction started, a send that ends before the first one ended
("type 1" no-ops at a step's start or end), and, without virtual stages, a first stage's forward-recv or a last
stage's forward-send, which have no peer stage. Those become other work (they moved nothing, and left in they
would shift every later pair's ordinal); both are counted in ``warnings``.
"""

from __future__ import annotations

import polars as pl

from .layout import Layout
from .ops import UNKNOWN_KIND, op_rules

NOOP_SLACK_NS = 50_000  # the artifact's EPS (5e-5 s) for "after the last compute started / before the first ended"


def _peer_stage(lay: Layout) -> pl.Expr:
    s = pl.col("stage") + pl.col("peer_delta")
    return s % lay.pp if lay.vpp > 1 else s


def mark_noops(df: pl.DataFrame, lay: Layout) -> tuple[pl.DataFrame, list[str]]:
    """``df`` with the send/recv ops that moved nothing turned into other work, and the warnings saying so."""
    rules = op_rules().filter(pl.col("peer_delta").is_not_null()).select("optype", "peer_delta")
    p2p = df.filter(pl.col("kind") == "comm").select("rank", "step", "optype", "start_ns", "end_ns").join(
        rules, on="optype")
    if p2p.height == 0:
        return df, []
    direction = pl.col("optype").str.split("-").list.first()
    computes = df.filter(pl.col("optype").is_in(["forward-compute", "backward-compute"])).group_by(
        "rank", "step", direction.alias("_dir")).agg(pl.col("start_ns").max().alias("_last_start"),
                                                     pl.col("end_ns").min().alias("_first_end"))
    p2p = p2p.with_columns(direction.alias("_dir")).join(computes, on=["rank", "step", "_dir"], how="left").join(
        df.select("rank", "stage").unique(), on="rank")
    recv = pl.col("optype").str.ends_with("recv")
    late = recv & (pl.col("start_ns") > pl.col("_last_start") + NOOP_SLACK_NS)
    early = ~recv & (pl.col("end_ns") < pl.col("_first_end") - NOOP_SLACK_NS)
    stage = _peer_stage(lay)
    flags = p2p.select("rank", "step", "start_ns", "optype", "_dir", "peer_delta",
                       (late | early).fill_null(True).alias("_idle"), ((stage < 0) | (stage >= lay.pp)).alias("_nopeer"))
    if lay.vpp > 1:
        flags = _chunk_noops(df, flags, lay)
    bad = flags.filter(pl.col("_idle") | pl.col("_nopeer"))
    if bad.height == 0:
        return df, []
    warnings = []
    n_idle, n_nopeer = int(bad["_idle"].sum()), int((bad["_nopeer"] & ~bad["_idle"]).sum())
    if n_idle:
        warnings.append(f"{n_idle} send/recv ops recorded outside the computes they serve (a recv after the last "
                        "compute of its direction started, a send before the first ended: profiler no-ops) "
                        "count as other work")
    if n_nopeer:
        warnings.append(f"{n_nopeer} send/recv ops have no peer (the model's first chunk's forward-recv, its last "
                        "chunk's forward-send, or their backward twins: profiler no-ops) count as other work")
    df = df.join(bad.select("rank", "start_ns", "optype", pl.lit(True).alias("_noop")),
                 on=["rank", "start_ns", "optype"], how="left")
    return df.with_columns(pl.when(pl.col("_noop")).then(pl.lit(UNKNOWN_KIND)).otherwise(pl.col("kind"))
                           .alias("kind")).drop("_noop"), warnings


def _chunk_noops(df: pl.DataFrame, flags: pl.DataFrame, lay: Layout) -> pl.DataFrame:
    """With virtual stages, the artifact's "type 2" no-ops: the k-th send/recv of a direction (the no-ops of
    type 1 left out) serves the k-th compute of that direction on the rank in the step (a recv list one short
    serves from the second: a first stage may not log its first forward-recv); it has no peer when that
    compute's model chunk is the model's first (forward-recv, backward-send) or last (forward-send,
    backward-recv)."""
    direction = pl.col("optype").str.split("-").list.first()
    comp = df.filter(pl.col("optype").is_in(["forward-compute", "backward-compute"])).sort("start_ns").select(
        "rank", "step", direction.alias("_dir"), "gmc").with_columns(
        pl.int_range(pl.len()).over("rank", "step", "_dir").alias("_k"),
        pl.len().over("rank", "step", "_dir").alias("_nc"))
    live = flags.filter(~pl.col("_idle")).sort("start_ns").with_columns(
        pl.int_range(pl.len()).over("rank", "step", "optype").alias("_k"),
        pl.len().over("rank", "step", "optype").alias("_n"))
    n_comp = comp.group_by("rank", "step", "_dir").agg(pl.len().alias("_nc"))
    live = live.join(n_comp, on=["rank", "step", "_dir"], how="left").with_columns(
        (pl.col("_k") + (pl.col("optype").str.ends_with("recv") & (pl.col("_n") + 1 == pl.col("_nc")))
         .cast(pl.Int64)).alias("_k"))
    live = live.drop("_nc").join(comp.drop("_nc"), on=["rank", "step", "_dir", "_k"], how="left")
    peer_g = pl.col("gmc") + pl.col("peer_delta")
    total = lay.pp * lay.vpp
    live = live.select("rank", "start_ns", "optype", (pl.col("gmc").is_null() | (peer_g < 0) | (peer_g >= total))
                       .alias("_chunkless"))
    return flags.join(live, on=["rank", "start_ns", "optype"], how="left").with_columns(
        pl.col("_chunkless").fill_null(False).alias("_nopeer")).drop("_chunkless")


def peers(comm: pl.DataFrame, lay: Layout) -> pl.DataFrame:
    """``comm`` with ``peer``: the global rank of each send/recv's partner (null for collectives)."""
    stage = _peer_stage(lay)
    mp_index = pl.col("rank") - lay.mp * (pl.col("dp_rank") + lay.dp * pl.col("stage"))
    peer = mp_index + lay.mp * (pl.col("dp_rank") + lay.dp * stage)
    return comm.with_columns(pl.when(pl.col("peer_delta").is_not_null()).then(peer).otherwise(None)
                             .cast(pl.Int32).alias("peer"))


def pair_warnings(comm: pl.DataFrame) -> list[str]:
    """Sends and recvs pair by their ordinal per (step, direction); where a step's sends from one rank to
    another and that peer's recvs from it differ in number, the ordinals after the gap pair the wrong ops."""
    p2p = comm.filter(pl.col("peer").is_not_null())
    if p2p.height == 0:
        return []
    send = pl.col("op") == "send"
    src = pl.when(send).then(pl.col("rank")).otherwise(pl.col("peer")).alias("_src")
    dst = pl.when(send).then(pl.col("peer")).otherwise(pl.col("rank")).alias("_dst")
    n = p2p.group_by("step", src, dst).agg(send.sum().alias("_s"), (~send).sum().alias("_r"))
    bad = n.filter(pl.col("_s") != pl.col("_r"))
    if bad.height == 0:
        return []
    step, a, b, ns, nr = bad.sort("step", "_src", "_dst").row(0)
    return [f"{bad.height} (step, sender, receiver) channels have unequal numbers of sends and recvs (first: step "
            f"{step}, rank {a} -> {b}: {ns} sends, {nr} recvs): pairs after the first missing op are unreliable"]
