"""Pair the same collective instance across ranks, and each send with its recv.

Collectives: key = process group (and its member list) plus the instance's ordinal. Ranks' profiling
windows can start at different iterations, so ordinals are counted inside each step (``ProfilerStep``
numbers are global iteration counts, the same on every rank); outside steps, by a shift of the
(op, size) sequence against the reference rank. Kernels without metadata are matched by operation
and order, counted back from the first kernel that has metadata (the launches that fell before the
window), inside their communicator: the process group of the metadata kernels on the same stream
(PyTorch gives each process group its own NCCL stream), else the stream itself, so a TP and a DP
all-reduce never merge.

Point-to-point: a send and its recv become one 2-participant instance in the same ``instance``
column (key ``p2p|{src}>{dst}|{pg}|s{step}|k{ordinal}``), matched by the peer recorded in the metadata
(or the only other rank of a 2-rank communicator) and the per-pair ordinal. A batch's one SendRecv
kernel (``batch_isend_irecv``) whose records name one peer (a pipeline stage sending to and receiving from
its neighbour) pairs the same way (key ``p2p|{lo}<>{hi}|...``): the k-th batch of a rank with a peer is
the peer's k-th batch with it. SendRecv kernels without a peer (NCCL's grouped send/recv, all-to-all of
older PyTorch) or with two (a ring's hop) are matched as a group exchange by ordinal when every rank of the
communicator runs the same sequence of them.

Added columns: ``comm`` (the communicator key), ``instance`` (null when unmatched), ``n_ranks`` found,
``partial`` (fewer participants than the group's size), ``match_rule`` (metadata, shift, no_metadata,
p2p_peer, p2p_pair, exchange).
"""

from __future__ import annotations

import polars as pl

from ..comm_catalogue import catalogue
from ..rules import DIRECTED_P2P_OPS as _DIRECTED
from ..rules import P2P_OPS


def is_p2p() -> pl.Expr:
    """Point-to-point kernels: a p2p op, or a SendRecv kernel recorded as a "coalesced" batch (batch_isend_irecv)."""
    return pl.col("op").is_in(P2P_OPS) | (
        (pl.col("op") == "coalesced") & pl.col("name").fill_null("").str.contains("(?i)sendrecv"))


def ring_hop(rows: pl.DataFrame) -> pl.Expr | None:
    """Rows of a ring's hop: a group exchange among 3 ranks or more whose kernels name their send or recv
    peer (each kernel waits only for its own two peers: ``metrics/waits.py``); None where no row can be one."""
    if not {"match_rule", "send_peer", "recv_peer"} <= set(rows.columns):
        return None
    named = (pl.col("match_rule").fill_null("") == "exchange") & (
        pl.col("send_peer").is_not_null() | pl.col("recv_peer").is_not_null())
    if not rows.select(named.any()).item():  # the common case: no per-instance count over every row
        return None
    return named & (pl.col("rank").n_unique().over("instance") > 2)


def instances(coll: pl.DataFrame) -> pl.DataFrame:
    """``coll`` plus ``instance``, ``n_ranks``, ``partial`` and ``match_rule`` (see the module doc)."""
    if coll.height == 0:
        return coll.with_columns(
            pl.lit(None, dtype=pl.Utf8).alias("instance"), pl.lit(0, dtype=pl.UInt32).alias("n_ranks"),
            pl.lit(False).alias("partial"), pl.lit(None, dtype=pl.Utf8).alias("match_rule"),
            pl.lit(None, dtype=pl.Utf8).alias("comm"),
        )
    coll = coll.drop([c for c in ("comm", "instance", "n_ranks", "partial", "match_rule") if c in coll.columns])
    if "peer" not in coll.columns:
        coll = coll.with_columns(pl.lit(None, dtype=pl.Int32).alias("peer"))
    df = _communicators(coll.sort("rank", "start_ns")).with_columns(
        is_p2p().alias("_p2p"),
        pl.coalesce(pl.max_horizontal("in_bytes", "out_bytes"), pl.lit(-1)).alias("_bytes"),
        pl.col("step").fill_null(-1).alias("_step"),
        pl.col("_comm").alias("comm"),
    )
    # a copy on the copy engine is one-sided: matched only as part of a recorded collective (NCCL's copy-engine
    # collectives), never by order alone (async TP's peer copies, a pipeline's device-to-device transfers)
    one_sided = _one_sided(df)
    meta = df.filter(pl.col("has_meta") & ~pl.col("_p2p"))
    nometa = df.filter(~pl.col("has_meta") & ~pl.col("_p2p") & ~one_sided)

    in_step = meta.filter(pl.col("step").is_not_null()).with_columns(
        pl.int_range(pl.len()).over("rank", "pg", "step").alias("_k")
    ).with_columns(pl.format("pg{}|{}|s{}|k{}", "pg", "group_ranks", "step", "_k").alias("instance"),
                   pl.lit("metadata").alias("match_rule"))
    out_step = _shift_aligned(meta.filter(pl.col("step").is_null())).with_columns(
        pl.lit("shift").alias("match_rule"))
    nm = nometa.with_columns(
        (pl.len() - 1 - pl.int_range(pl.len())).over("rank", "_comm", "op", "step").alias("_k")
    ).with_columns(
        pl.format("nometa|{}|{}|s{}|r{}", "_comm", "op", "_step", "_k").alias("instance"),
        pl.lit("no_metadata").alias("match_rule"),
    )
    cols = [*coll.columns, "comm", "instance", "match_rule"]
    copies = df.filter(~pl.col("has_meta") & ~pl.col("_p2p") & one_sided).with_columns(
        pl.lit(None, dtype=pl.Utf8).alias("instance"), pl.lit(None, dtype=pl.Utf8).alias("match_rule"))
    parts = [x.select(cols) for x in (in_step, out_step, nm, copies, *_p2p(df.filter(pl.col("_p2p"))))]
    allrows = pl.concat(parts)
    counts = allrows.filter(pl.col("instance").is_not_null()).group_by("instance").agg(
        pl.col("rank").n_unique().alias("n_ranks"), pl.len().alias("_rows"),
        pl.col("group_size").max().alias("_gsize"),
    )
    out = allrows.join(counts, on="instance", how="left")
    # an instance seen on one rank only, or twice on a rank, is not a usable match
    ok = (pl.col("n_ranks") >= 2) & (pl.col("_rows") == pl.col("n_ranks"))
    out = out.with_columns(
        pl.when(ok).then(pl.col("instance")).otherwise(None).alias("instance"),
        pl.when(ok).then(pl.col("match_rule")).otherwise(None).alias("match_rule"),
        pl.col("n_ranks").fill_null(1),
        (ok & ~pl.col("match_rule").is_in(["p2p_peer", "p2p_pair"]) & (pl.col("n_ranks") < pl.col("_gsize")))
        .fill_null(False).alias("partial"),
    ).drop("_rows", "_gsize")
    return out.sort("rank", "start_ns")


def _one_sided(df: pl.DataFrame) -> pl.Expr:
    """Rows that are copies on the copy engine (``engine``; tables without it have none)."""
    if "engine" not in df.columns:
        return pl.lit(False)
    return (pl.col("engine") == "copy_engine").fill_null(False)


def summary(inst: pl.DataFrame) -> tuple[dict[str, int], list[str]]:
    """Counts of what matched how (for ``matching`` in the report) and the warnings they call for."""
    p2p = is_p2p()
    matched = pl.col("instance").is_not_null()
    rule = pl.col("match_rule")
    copies = _one_sided(inst) & ~pl.col("has_meta")
    n_unmatched = inst.filter(~matched & ~p2p & ~copies).height
    n_p2p = inst.filter(p2p).height
    n_p2p_unmatched = inst.filter(~matched & p2p).height
    n_pairs = inst.filter(rule.is_in(["p2p_peer", "p2p_pair"])).select(pl.col("instance").n_unique()).item()
    exch = inst.filter(rule == "exchange")
    n_exch = exch.select(pl.col("instance").n_unique()).item()
    partial = inst.filter(pl.col("partial")).select(pl.col("instance").n_unique()).item()
    warnings = []
    if n_unmatched:
        warnings.append(f"{n_unmatched} communication kernels could not be matched across ranks "
                        "(their peers are absent from the traces or the windows do not overlap)")
    if n_p2p_unmatched:
        warnings.append(f"{n_p2p_unmatched} of {n_p2p} point-to-point kernels (send/recv) are not matched: no peer "
                        "recorded, or the peer's trace is absent, and no group-exchange pattern")
    if n_exch:
        warnings.append(f"{exch.height} SendRecv kernels without a recorded peer matched by ordinal as {n_exch} group "
                        "exchanges (every rank of the communicator ran the same sequence; all-to-all or grouped p2p)")
    if partial:
        warnings.append(f"{partial} matched instances have fewer participants than their group "
                        "(ranks missing from the traces or outside their window): `partial` in the collectives")
    counts = {"p2p_kernels": n_p2p, "p2p_pairs": n_pairs, "p2p_unmatched_kernels": n_p2p_unmatched,
              "exchange_instances": n_exch, "partial_instances": partial, "unmatched_kernels": n_unmatched,
              "one_sided_copies": inst.filter(copies & ~p2p).height}
    return counts, warnings


def _communicators(df: pl.DataFrame) -> pl.DataFrame:
    """``_comm``: the communicator each kernel ran on, comparable across ranks.

    The process group (name and members) where recorded; else the one group whose metadata kernels
    ran on the same stream of that rank (whose pg, members and size the row then takes); else the
    stream's position among that rank's unlabelled communication streams.
    """
    pgk = pl.when(pl.col("pg").is_not_null()).then(pl.format("pg{}|{}", "pg", pl.col("group_ranks").fill_null("")))
    df = df.with_columns(pgk.alias("_pgk"))
    by_stream = (
        df.filter(pl.col("_pgk").is_not_null())
        .group_by("rank", "stream")
        .agg(pl.col("_pgk").unique().alias("_u"), pl.col("pg").first().alias("_pg"),
             pl.col("pg_desc").first().alias("_desc"), pl.col("group_ranks").first().alias("_granks"),
             pl.col("group_size").first().alias("_gsize"))
        .filter(pl.col("_u").list.len() == 1)
        .with_columns(pl.col("_u").list.first().alias("_stream_pg"))
        .drop("_u")
    )
    df = df.join(by_stream, on=["rank", "stream"], how="left")
    # a family whose calls PyTorch never records (DeepEP, symmetric memory, custom all-reduce, ...) is its own
    # communicator: its streams are numbered among that family's streams on the rank
    fam = _unrecorded_family(df)
    df = df.with_columns(fam.alias("_fam"))
    lone = (
        df.filter(pl.col("_pgk").is_null() & pl.col("_stream_pg").is_null())
        .select("rank", "stream", "_fam").unique()
        .with_columns(pl.col("stream").rank("dense").over("rank", "_fam").alias("_sidx"))
    )
    df = df.join(lone, on=["rank", "stream", "_fam"], how="left", nulls_equal=True)
    inherit = pl.col("_pgk").is_null() & pl.col("_stream_pg").is_not_null()
    unlabelled = pl.when(pl.col("_fam").is_null()).then(pl.format("stream#{}", "_sidx")).otherwise(
        pl.format("{}#{}", "_fam", "_sidx"))
    return df.with_columns(
        pl.coalesce("_pgk", "_stream_pg", unlabelled).alias("_comm"),
        pl.when(inherit).then(pl.col("_pg")).otherwise(pl.col("pg")).alias("pg"),
        pl.when(inherit).then(pl.col("_desc")).otherwise(pl.col("pg_desc")).alias("pg_desc"),
        pl.when(inherit).then(pl.col("_granks")).otherwise(pl.col("group_ranks")).alias("group_ranks"),
        pl.when(inherit).then(pl.col("_gsize")).otherwise(pl.col("group_size")).alias("group_size"),
    ).drop("_pgk", "_stream_pg", "_pg", "_desc", "_granks", "_gsize", "_sidx", "_fam")


def _unrecorded_family(df: pl.DataFrame) -> pl.Expr:
    """The row's family where PyTorch never records its calls (null for NCCL-like families and bare tables)."""
    if "family" not in df.columns:
        return pl.lit(None, dtype=pl.Utf8)
    recorded = [f.id for f in catalogue().families if f.host_metadata]
    return pl.when(pl.col("family").is_not_null() & ~pl.col("family").is_in(recorded)).then(pl.col("family"))


def _p2p(p2p: pl.DataFrame) -> list[pl.DataFrame]:
    """Send/recv pairs by peer and per-pair ordinal; SendRecv kernels without a peer as group exchanges."""
    empty = p2p.head(0).with_columns(pl.lit(None, dtype=pl.Utf8).alias("instance"),
                                     pl.lit(None, dtype=pl.Utf8).alias("match_rule"))
    if p2p.height == 0:
        return [empty]
    members = pl.col("group_ranks").str.split(",")
    # a directed kernel in a 2-rank communicator has the other member as its peer
    other_member = (
        pl.when(pl.col("op").is_in(_DIRECTED) & (members.list.len() == 2))
        .then(members.list.eval(pl.element().cast(pl.Int32, strict=False)).list.sum() - pl.col("rank"))
    )
    # or, when only two ranks run p2p kernels on that communicator, the other of them
    seen = p2p.group_by("_comm").agg(pl.col("rank").unique().alias("_seen"))
    other_seen = (
        pl.when(pl.col("op").is_in(_DIRECTED) & (pl.col("_seen").list.len() == 2))
        .then(pl.col("_seen").list.sum() - pl.col("rank"))
    )
    p2p = p2p.join(seen, on="_comm", how="left").with_columns(
        pl.when(pl.col("peer").is_not_null()).then(pl.lit("p2p_peer")).otherwise(pl.lit("p2p_pair")).alias("_rule"),
        pl.coalesce("peer", other_member.cast(pl.Int32), other_seen.cast(pl.Int32)).alias("_peer"),
    )
    directed = p2p.filter(pl.col("op").is_in(_DIRECTED) & pl.col("_peer").is_not_null())
    is_send = pl.col("op") == "send"
    batch_peer = _batch_peer(p2p)
    batches = p2p.filter(batch_peer.is_not_null()).with_columns(batch_peer.alias("_peer")).with_columns(
        pl.int_range(pl.len()).over("rank", "_peer", "_comm", "step").alias("_k"),
    ).with_columns(
        pl.format("p2p|{}<>{}|{}|s{}|k{}", pl.min_horizontal("rank", "_peer"), pl.max_horizontal("rank", "_peer"),
                  pl.col("pg").fill_null("?"), "_step", "_k").alias("instance"),
        pl.lit("p2p_peer").alias("match_rule"),
    )
    pairs = directed.with_columns(
        pl.when(is_send).then(pl.col("rank")).otherwise(pl.col("_peer")).alias("_src"),
        pl.when(is_send).then(pl.col("_peer")).otherwise(pl.col("rank")).alias("_dst"),
        pl.int_range(pl.len()).over("rank", "op", "_peer", "_comm", "step").alias("_k"),
    ).with_columns(
        pl.format("p2p|{}>{}|{}|s{}|k{}", "_src", "_dst", pl.col("pg").fill_null("?"), "_step", "_k").alias("instance"),
        pl.col("_rule").alias("match_rule"),
    )
    rest = p2p.filter(~(pl.col("op").is_in(_DIRECTED) & pl.col("_peer").is_not_null()) & batch_peer.is_null())
    return [pairs, batches, _exchange(rest) if rest.height else empty]


def _batch_peer(p2p: pl.DataFrame) -> pl.Expr:
    """A batch kernel's one peer: the rank its records send to and receive from (either alone), null where
    none is recorded or the batch names two (a ring's hop)."""
    if not {"send_peer", "recv_peer"} <= set(p2p.columns):
        return pl.lit(None, dtype=pl.Int32)
    s, r = pl.col("send_peer"), pl.col("recv_peer")
    return (pl.when(~pl.col("op").is_in(_DIRECTED) & (s.is_null() | r.is_null() | (s == r)))
            .then(pl.coalesce(s, r)).otherwise(None).cast(pl.Int32))


def _exchange(rows: pl.DataFrame) -> pl.DataFrame:
    """Group exchanges: per (communicator, step) every rank runs the same sequence of p2p kernels."""
    seq = rows.group_by("rank", "_comm", "_step", maintain_order=True).agg(
        pl.col("op").str.join("/").alias("_ops"), pl.col("group_size").max().alias("_gsize")
    )
    # every member: the group's size where recorded, else every rank seen on that communicator
    size = seq.group_by("_comm").agg(pl.coalesce(pl.col("_gsize").max(), pl.col("rank").n_unique()).alias("_size"))
    ok = seq.group_by("_comm", "_step").agg(
        (pl.col("_ops").n_unique() == 1).alias("_same"),
        pl.col("rank").n_unique().alias("_n"),
    ).join(size, on="_comm").filter(pl.col("_same") & (pl.col("_n") >= 2) & (pl.col("_n") == pl.col("_size")))
    return rows.join(ok.select("_comm", "_step", pl.lit(True).alias("_ok")), on=["_comm", "_step"], how="left").with_columns(
        pl.int_range(pl.len()).over("rank", "_comm", "_step").alias("_k"),
    ).with_columns(
        pl.when(pl.col("_ok")).then(pl.format("x|{}|s{}|k{}", "_comm", "_step", "_k")).alias("instance"),
        pl.when(pl.col("_ok")).then(pl.lit("exchange")).alias("match_rule"),
    )


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
