"""What each operation of an op table waits for on its own rank: the program order of a Megatron-style training
step, the rules of the What-if artifact's dependency model (``analyzer/dependency_model.py``), so that a replay
of the table is the artifact's simulation.

Per rank and step (ops in (start, seq_id, optype) order):
- forward and backward computes run in order; each send/recv op type runs in order on its own;
- the k-th send of a direction that moved data waits for the k-th compute of that direction; the k-th recv
  waits for the (k-1)-th compute of its direction and the k-th compute waits for it (a recv list one short of
  the computes serves from the second: a first stage may not log its first forward-recv); send/recv that moved
  nothing at a step's start or end (the artifact's "type 1" no-ops) wait for nothing but their own order;
- the first backward send and recv wait for the compute two before the first backward compute (the last
  warm-up forward's predecessor: 1F1B sends the first gradient while the steady phase starts);
- with data parallelism the params all-gathers and grads reduce-scatters run in order; a model chunk's first
  forward compute waits for its (last) params all-gather; overlapped (``separate-grads-all-reduce`` present): a
  chunk's first reduce-scatter waits for its last backward compute;
- after the last compute: ``gc``, then layernorm all-reduce, embedding all-reduce (first and last stage), the
  reduce-scatters (not overlapped) or the separate all-reduce (overlapped, after the last reduce-scatter too),
  the clip all-reduce and the optimizer, in that chain.
An operation none of this orders starts with its step: it waits for its rank's previous step's last op.

``after`` holds the ``op_key`` (a per-rank id) of every op it waits for; the graph binds each op to the one of
them that ended last (the gap after it is the artifact's launch delay) and keeps the others as dependencies.
"""

from __future__ import annotations

import polars as pl

from .p2p import NOOP_SLACK_NS

COMPUTES = ("forward-compute", "backward-compute")
P2P = ("forward-send", "forward-recv", "backward-send", "backward-recv")
DP_CHAIN = ("params-all-gather", "grads-reduce-scatter")
KEYS = ["rank", "step"]


def _edges(df: pl.DataFrame, dep: pl.DataFrame, on: list[str], rename: dict[str, str]) -> pl.DataFrame:
    """(rank, op_key, dep_key) rows: ``dep`` (its ``op_key`` as ``dep_key``) joined to ``df`` on ``on``."""
    return df.join(dep.rename(rename).rename({"op_key": "dep_key"}), on=on).select("rank", "op_key", "dep_key")


def _chain(ops: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Each op after the previous one of its (rank, step, *by) in ``_o`` order."""
    return ops.sort("_o").select("rank", "op_key", pl.col("op_key").shift(1).over(*KEYS, *by).alias("dep_key")
                                 ).drop_nulls("dep_key")


def dependencies(df: pl.DataFrame, dp_sync: bool) -> pl.DataFrame:
    """``df`` (rank, step, optype, start_ns, end_ns, seq_id, mc) with ``op_key`` and ``after`` (List[Int64]).
    ``dp_sync``: the job has data-parallel collectives (dp x sequence-parallel size > 1)."""
    df = df.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("rank").alias("op_key"))
    o = df.select("rank", "step", "op_key", "optype", "start_ns", "end_ns", pl.col("seq_id").fill_null(0),
                  "mc").sort("rank", "step", "start_ns", "seq_id", "optype").with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_o"))
    direction = pl.col("optype").str.split("-").list.first().alias("_dir")
    comp = o.filter(pl.col("optype").is_in(COMPUTES)).with_columns(direction).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over(*KEYS).alias("_ci"),
        pl.int_range(pl.len(), dtype=pl.Int64).over(*KEYS, "_dir").alias("_k"),
        pl.len().over(*KEYS, "_dir").alias("_nc"))
    edges = [_chain(comp, []), _chain(o.filter(pl.col("optype").is_in(P2P)), ["optype"])]

    # send/recv <-> the compute it serves
    bounds = comp.group_by(*KEYS, "_dir").agg(pl.col("start_ns").max().alias("_last_start"),
                                              pl.col("end_ns").min().alias("_first_end"))
    p2p = o.filter(pl.col("optype").is_in(P2P)).with_columns(direction).join(bounds, on=[*KEYS, "_dir"], how="left")
    recv = pl.col("optype").str.ends_with("recv")
    live = p2p.filter(pl.when(recv).then(pl.col("start_ns") <= pl.col("_last_start") + NOOP_SLACK_NS)
                      .otherwise(pl.col("end_ns") >= pl.col("_first_end") - NOOP_SLACK_NS).fill_null(False))
    live = live.sort("_o").with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over(*KEYS, "optype").alias("_k"),
                                        pl.len().over(*KEYS, "optype").alias("_n"))
    nc = comp.group_by(*KEYS, "_dir").agg(pl.len().alias("_nc"))
    live = live.join(nc, on=[*KEYS, "_dir"], how="left").with_columns(
        (pl.col("_k") + (recv & (pl.col("_n") + 1 == pl.col("_nc"))).cast(pl.Int64)).alias("_k"))
    ck = comp.select(*KEYS, "_dir", "_k", pl.col("op_key").alias("_c"))
    live = live.join(ck, on=[*KEYS, "_dir", "_k"], how="left").join(
        ck.with_columns(pl.col("_k") + 1).rename({"_c": "_cprev"}), on=[*KEYS, "_dir", "_k"], how="left")
    sends, recvs = live.filter(~recv), live.filter(recv)
    edges += [sends.select("rank", "op_key", pl.col("_c").alias("dep_key")),
              recvs.select("rank", pl.col("_c").alias("op_key"), pl.col("op_key").alias("dep_key")),
              recvs.select("rank", "op_key", pl.col("_cprev").alias("dep_key"))]

    # the first backward send/recv after the compute two before the first backward compute
    first_b = comp.filter(pl.col("_dir") == "backward").group_by(*KEYS).agg(pl.col("_ci").min().alias("_fb"))
    warm = comp.join(first_b, on=KEYS).filter((pl.col("_fb") >= 2) & (pl.col("_ci") == pl.col("_fb") - 2))
    first_bp = o.filter(pl.col("optype").is_in(["backward-send", "backward-recv"]) & (pl.col("seq_id") == 0))
    edges.append(_edges(first_bp, warm.select(*KEYS, "op_key"), KEYS, {}))

    ovlp = bool(df["optype"].eq("separate-grads-all-reduce").any())
    if dp_sync:
        dpc = o.filter(pl.col("optype").is_in(DP_CHAIN))
        edges.append(_chain(dpc, []))
        ag = dpc.filter(pl.col("optype") == "params-all-gather").sort("seq_id").group_by(*KEYS, "mc").agg(
            pl.col("op_key").last())
        first_f = comp.filter(pl.col("_dir") == "forward").sort("start_ns").group_by(*KEYS, "mc").agg(
            pl.col("op_key").first())
        edges.append(_edges(first_f, ag, [*KEYS, "mc"], {}))
        if ovlp:
            rs = dpc.filter(pl.col("optype") == "grads-reduce-scatter").sort("seq_id").group_by(*KEYS, "mc").agg(
                pl.col("op_key").first())
            last_b = comp.filter(pl.col("_dir") == "backward").sort("end_ns").group_by(*KEYS, "mc").agg(
                pl.col("op_key").last())
            edges.append(_edges(rs, last_b, [*KEYS, "mc"], {}))

    # after the last compute: gc, then the post chain
    last_c = comp.sort("end_ns").group_by(*KEYS).agg(pl.col("op_key").last().alias("_lc"))
    gc = o.filter(pl.col("optype") == "gc")
    edges.append(gc.join(last_c, on=KEYS).select("rank", "op_key", pl.col("_lc").alias("dep_key")))
    rank_chain = ["layernorm-grads-all-reduce", "embedding-grads-all-reduce"]
    if dp_sync and ovlp:
        rank_chain += ["separate-grads-all-reduce"]
    elif dp_sync:
        rank_chain += ["grads-reduce-scatter"]
    rank_chain += ["optimizer-clip-main-grad", "optimizer"]
    post = o.filter(pl.col("optype").is_in(["gc", *rank_chain])).with_columns(
        pl.col("optype").replace_strict({"gc": 0, **{t: i + 1 for i, t in enumerate(rank_chain)}},
                                        return_dtype=pl.Int64).alias("_p"))
    edges.append(post.sort("_p", "seq_id", "_o").select(
        "rank", "op_key", pl.col("op_key").shift(1).over(*KEYS).alias("dep_key")).drop_nulls("dep_key"))
    if dp_sync and ovlp:  # the layernorm all-reduce also after the last reduce-scatter
        last_rs = o.filter(pl.col("optype") == "grads-reduce-scatter").sort("seq_id").group_by(*KEYS).agg(
            pl.col("op_key").last().alias("dep_key"))
        ln = o.filter(pl.col("optype") == "layernorm-grads-all-reduce")
        edges.append(ln.join(last_rs, on=KEYS).select("rank", "op_key", "dep_key"))

    e = pl.concat([x.cast({"rank": pl.Int32, "op_key": pl.Int64, "dep_key": pl.Int64}) for x in edges]
                  ).drop_nulls().unique()
    # each list ascending (rows keep their order within a group; a sort per group cost 0.24 s on AR)
    after = e.sort("rank", "op_key", "dep_key").group_by("rank", "op_key").agg(pl.col("dep_key").alias("after"))
    # ops nothing orders start with their step: after the rank's previous step's last op
    prev_last = o.sort("end_ns").group_by("rank", "step").agg(pl.col("op_key").last().alias("_pl")).sort(
        "rank", "step").with_columns(pl.col("_pl").shift(1).over("rank"))
    df = df.cast({"rank": pl.Int32}).join(after, on=["rank", "op_key"], how="left").join(
        prev_last, on=["rank", "step"], how="left")
    return df.with_columns(
        pl.when(pl.col("after").is_null() & pl.col("_pl").is_not_null()).then(pl.concat_list(pl.col("_pl")))
        .otherwise(pl.col("after").fill_null(pl.lit([], dtype=pl.List(pl.Int64)))).alias("after")).drop("_pl")
