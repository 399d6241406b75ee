"""The ``collectives`` table: one row per communication kernel, with the host's metadata joined in.

A collective call on the host (Kineto ``record_param_comms``, an NCCL NVTX range) encloses the
launch of its kernel on the same thread; the launch and the kernel share a correlation id. Kernels
whose launch fell before the profiling window have no metadata: they are kept, with ``has_meta``
false and the operation guessed from the kernel name.
"""

from __future__ import annotations

import polars as pl

from ..comm_catalogue import COMPUTE, USER_FAMILY, UserRules, catalogue, describe, launcher_of
from ..model import COLLECTIVE_SCHEMA, ProcessGroup, conform
from ..rules import DIRECTED_P2P_OPS
from ..timeline import launches
from .launchers import is_copy, launcher_columns


def build_table(
    gpu: pl.DataFrame,
    cpu: pl.DataFrame,
    comm_calls: pl.DataFrame,
    steps: pl.DataFrame,
    groups: dict[int, tuple[ProcessGroup, ...]] | None = None,
    host_steps: pl.DataFrame | None = None,
    rules: UserRules | None = None,
) -> pl.DataFrame:
    """Link comm kernels to their host call and step; number them within each process group; name each one's
    family, engine and role (the catalogue, the launcher around its launch, the user's rules).

    A kernel's step is the host step its launch fell in (``host_steps``) where that is known: a
    kernel delayed past the start of the next step window still belongs to the step that launched it,
    so an instance never splits across steps. Otherwise the step window its start falls in.
    """
    kernels = gpu.filter(pl.col("kind") == "comm").select(
        "rank", "stream", "start_ns", "end_ns", "name", "correlation",
        *([pl.col("bytes").alias("_copied")] if "bytes" in gpu.columns else [])
    )
    if kernels.height == 0:
        return conform(pl.DataFrame(), COLLECTIVE_SCHEMA)
    calls = launches(cpu)  # once: linking and the launch steps both read it
    linked = _link(calls, comm_calls.filter(pl.col("launcher").is_null()) if "launcher" in comm_calls.columns
                   else comm_calls)
    df = kernels.join(linked, on=["rank", "correlation"], how="left")
    df = _catalogued(launcher_columns(df, cpu, comm_calls), rules or UserRules())
    if groups:
        df = _fill_group_ranks(df, groups)
    df = _resolve_peer(df)
    df = df.sort("rank", "start_ns").with_columns(
        pl.when(pl.col("pg").is_not_null())
        .then(pl.int_range(pl.len()).over("rank", "pg"))
        .otherwise(None)
        .alias("seq")
    )
    df = assign_steps(df, steps)
    if host_steps is not None and host_steps.height:
        df = _launch_steps(df, calls, host_steps)
    return conform(df, COLLECTIVE_SCHEMA)


def _catalogued(df: pl.DataFrame, rules: UserRules) -> pl.DataFrame:
    """``has_meta``, ``op``, ``family``, ``engine`` and ``role`` of each comm row.

    The op: the host's record (``record_param_comms``, an NCCL range), else the user's rule, else the launcher
    op's, else the one the catalogue reads from the name. The family and engine: the user's rule ("user"), else
    the catalogue's pattern for the name, else the launcher's family (a copy: on the copy engine). A peer copy's
    size is its bytes."""
    names = df.get_column("name")
    copy = is_copy(pl.col("name"))
    desc = pl.concat([describe(names.filter(~names.str.contains("^Memcpy").fill_null(False)), "kernel"),
                      describe(names.filter(names.str.contains("^Memcpy").fill_null(False)), "memcpy")])
    fam = catalogue().by_id
    engines = {f: x.engine for f, x in fam.items()}
    user = rules.op(pl.col("name")) if rules else pl.lit(None, dtype=pl.Utf8)
    user = pl.when(user != COMPUTE).then(user)
    df = df.join(desc.rename({"op": "_nop", "family": "_fam", "engine": "_eng", "role": "_role"}), on="name",
                 how="left").with_columns(user.alias("_uop"))
    l_family = pl.col("launcher").replace_strict(_launcher_families(df), default=None, return_dtype=pl.Utf8)
    family = pl.when(pl.col("_uop").is_not_null()).then(pl.lit(USER_FAMILY)).otherwise(pl.coalesce("_fam", l_family))
    engine = (pl.when(copy).then(pl.lit("copy_engine"))
              .when(pl.col("_uop").is_not_null() | pl.col("_fam").is_null())
              .then(family.replace_strict(engines, default="sm", return_dtype=pl.Utf8))
              .otherwise(pl.col("_eng")))
    # a family whose calls PyTorch records (NCCL) keeps the op its kernel's name spells where the record is
    # missing: its ranges (nccl:all_to_all around SendRecv kernels) name the API call, not the kernel's pattern
    recorded = [f for f, x in fam.items() if x.host_metadata]
    name_first = pl.when(pl.col("_fam").is_in(recorded)).then(pl.col("_nop"))
    out = df.with_columns(
        pl.col("op").is_not_null().alias("has_meta"),
        pl.coalesce("op", "_uop", name_first, "l_op", "_nop").alias("op"),
        family.alias("family"), engine.alias("engine"), pl.coalesce("_role", pl.lit("payload")).alias("role"),
    )
    if "_copied" in out.columns:  # a copy's own size where the host recorded none
        out = out.with_columns(pl.coalesce("in_bytes", "_copied").alias("in_bytes"),
                               pl.coalesce("out_bytes", "_copied").alias("out_bytes"))
    return out.drop([c for c in ("_nop", "_fam", "_eng", "_role", "_uop", "launcher", "l_op", "_copied")
                     if c in out.columns])


def _launcher_families(df: pl.DataFrame) -> dict[str, str]:
    return {n: la.family for n in df.get_column("launcher").drop_nulls().unique().to_list()
            if (la := launcher_of(n)) is not None}


def _link(calls: pl.DataFrame, comm_calls: pl.DataFrame) -> pl.DataFrame:
    """(rank, correlation) of each launch (``timeline.launches``) inside a collective call, with that call's
    metadata."""
    meta = [c for c in comm_calls.columns if c not in ("rank", "tid", "start_ns", "end_ns", "launcher")]
    empty = pl.DataFrame(schema={"rank": pl.Int32, "correlation": pl.Int64, **{c: comm_calls.schema[c] for c in meta}})
    if comm_calls.height == 0:
        return empty
    linked = calls.sort("launch_ns")
    calls = comm_calls.rename({"start_ns": "c_start", "end_ns": "c_end"}).sort("c_start")
    # innermost enclosing call: the latest one that started before the launch on the same thread
    joined = linked.join_asof(calls, left_on="launch_ns", right_on="c_start", by=["rank", "tid"],
                                strategy="backward", check_sortedness=False)
    inside = joined.filter(pl.col("c_end").is_not_null() & (pl.col("launch_ns") <= pl.col("c_end")))
    inside = inside.select("rank", "correlation", *meta).unique(["rank", "correlation"], keep="first")
    inside = inside.with_columns(pl.lit(None, dtype=pl.Int32).alias("send_peer"),
                                 pl.lit(None, dtype=pl.Int32).alias("recv_peer"))
    return pl.concat([inside, _coalesced_p2p(linked, calls, inside, meta)], how="vertical_relaxed")


_BATCH_GAP_NS = 5_000_000  # a batch's send/recv records and its one kernel launch are microseconds apart


def _coalesced_p2p(linked: pl.DataFrame, calls: pl.DataFrame, inside: pl.DataFrame, meta: list[str]) -> pl.DataFrame:
    """Launches of a ``batch_isend_irecv`` batch (PyTorch >= 2.x): each send/recv is recorded with its
    group but launches nothing; the batch's one SendRecv kernel is launched after them, outside every
    record (inside an ``nccl:coalesced`` annotation). It takes the group of the records just before it;
    the op is the batch's (``send_recv``), its sizes and peers those records' (``_batch_peers``)."""
    p2p_calls = calls.filter(pl.col("op").is_in(DIRECTED_P2P_OPS) & pl.col("pg").is_not_null()).sort("c_end")
    if p2p_calls.height == 0:
        return inside.head(0)
    rest = linked.join(inside.select("rank", "correlation"), on=["rank", "correlation"], how="anti")
    got = (
        rest.sort("launch_ns")
        .join_asof(p2p_calls, left_on="launch_ns", right_on="c_end", by=["rank", "tid"], strategy="backward",
                   check_sortedness=False)
        .filter(pl.col("c_end").is_not_null() & (pl.col("launch_ns") - pl.col("c_end") <= _BATCH_GAP_NS))
    )
    from_batch = ("in_bytes", "out_bytes", "dtype")  # summed over the batch's records (_batch_peers)
    blank = [c for c in meta if c not in ("pg", "pg_desc", "group_ranks", "group_size", "op", *from_batch)]
    return got.select("rank", "correlation", *[c for c in meta if c not in from_batch]).with_columns(
        pl.lit("send_recv").alias("op"), *[pl.lit(None, dtype=got.schema[c]).alias(c) for c in blank]
    ).join(_batch_peers(linked, p2p_calls), on=["rank", "correlation"], how="left").select(inside.columns)


def _batch_peers(linked: pl.DataFrame, p2p_calls: pl.DataFrame) -> pl.DataFrame:
    """(rank, correlation, send_peer, recv_peer, in_bytes, out_bytes, dtype) of each batch's launch: the global
    ranks its send and recv records name (a ring's hop: send to the next, receive from the previous), null where
    none or several; the bytes its send records carry (in_bytes) and its recv records (out_bytes), each record's
    ``In msg nelems`` x its dtype's size, 0 where the batch has none of that direction (null: a size unknown);
    the dtype where all its records share one.

    A batch's records are the send/recv records on the launching thread that end before its launch and
    after the thread's previous launch; a record that encloses a launch is a plain send/recv, no batch's.
    """
    ls = linked.select("rank", "tid", "launch_ns", "correlation").sort("launch_ns")
    members = pl.col("group_ranks").str.split(",")
    local = pl.col("peer_group_rank")
    peer = pl.coalesce(
        "peer",
        pl.when(local.is_not_null() & (local >= 0) & (local < members.list.len()))
        .then(members.list.get(local.cast(pl.Int64), null_on_oob=True).cast(pl.Int32, strict=False)),
    )
    rec = (
        p2p_calls.select("rank", "tid", "c_start", "c_end", "op", peer.cast(pl.Int32).alias("_peer"), "dtype",
                         pl.coalesce("in_bytes", "out_bytes").alias("_bytes"))
        .sort("c_end")
        .join_asof(ls.select("rank", "tid", pl.col("launch_ns").alias("_before")), left_on="c_end",
                   right_on="_before", by=["rank", "tid"], strategy="backward", check_sortedness=False)
        .filter(pl.col("_before").is_null() | (pl.col("_before") < pl.col("c_start")))
        .join_asof(ls, left_on="c_end", right_on="launch_ns", by=["rank", "tid"], strategy="forward",
                   check_sortedness=False)
        .filter(pl.col("launch_ns").is_not_null() & (pl.col("launch_ns") - pl.col("c_end") <= _BATCH_GAP_NS))
    )

    def one(op: str) -> pl.Expr:
        got = pl.col("_peer").filter((pl.col("op") == op) & pl.col("_peer").is_not_null()).unique()
        return pl.when(got.len() == 1).then(got.first()).otherwise(None).cast(pl.Int32).alias(f"{op}_peer")

    def size(op: str, name: str) -> pl.Expr:
        b = pl.col("_bytes").filter(pl.col("op") == op)
        return pl.when(b.null_count() > 0).then(None).otherwise(b.sum()).cast(pl.Int64).alias(name)

    dtype = pl.col("dtype").drop_nulls().unique()
    return rec.group_by("rank", "correlation").agg(
        one("send"), one("recv"), size("send", "in_bytes"), size("recv", "out_bytes"),
        pl.when(dtype.len() == 1).then(dtype.first()).otherwise(None).cast(pl.Utf8).alias("dtype"))


def _fill_group_ranks(df: pl.DataFrame, groups: dict[int, tuple[ProcessGroup, ...]]) -> pl.DataFrame:
    # each distinct member list spelled once and held once: a (rank, group) row names its text, which the
    # join gathers as views into one buffer (16k ranks listing a 16k-member world group: 1.5 GB otherwise).
    # By identity: ranks read from the cache share one object per group (hashing 16k-member tuples costs more)
    index: dict[int, int] = {}
    texts: list[str] = []
    sizes: list[int] = []
    rank_col: list[int] = []
    pg_col: list[str] = []
    gid_col: list[int] = []
    for r, gs in groups.items():
        for g in gs:
            if not g.ranks:
                continue
            i = index.get(id(g.ranks))
            if i is None:
                i = index[id(g.ranks)] = len(texts)
                texts.append(",".join(map(str, g.ranks)))
                sizes.append(len(g.ranks))
            rank_col.append(r)
            pg_col.append(g.name)
            gid_col.append(i)
    if not rank_col:
        return df
    spelled = pl.DataFrame({"_gid": range(len(texts)), "_ranks": texts, "_size": sizes},
                           schema={"_gid": pl.Int64, "_ranks": pl.Utf8, "_size": pl.Int32})
    table = pl.DataFrame({"rank": rank_col, "pg": pg_col, "_gid": gid_col},
                         schema={"rank": pl.Int32, "pg": pl.Utf8, "_gid": pl.Int64}).join(
        spelled, on="_gid", how="left", maintain_order="left").drop("_gid")
    return (
        df.join(table, on=["rank", "pg"], how="left")
        .with_columns(
            pl.coalesce("group_ranks", "_ranks").alias("group_ranks"),
            pl.coalesce("group_size", "_size").alias("group_size"),
        )
        .drop("_ranks", "_size")
    )


def _resolve_peer(df: pl.DataFrame) -> pl.DataFrame:
    """A p2p peer's global rank: recorded, else its group rank looked up in the group's member list."""
    if "peer_group_rank" not in df.columns:
        return df
    members = pl.col("group_ranks").str.split(",")
    local = pl.col("peer_group_rank")
    looked_up = (
        pl.when(local.is_not_null() & (local >= 0) & (local < members.list.len()))
        .then(members.list.get(local.cast(pl.Int64), null_on_oob=True).cast(pl.Int32, strict=False))
        .otherwise(None)
    )
    # only rows that need it split their member list (every collective of a 16k-rank job: 1 GB of lists)
    need = df.select(pl.col("peer").is_null() & local.is_not_null()).to_series()
    if not need.any():
        return df
    rows = df.with_row_index("_i").filter(need).select("_i", looked_up.alias("_p"))
    full = pl.Series("_p", [None] * df.height, dtype=pl.Int32).scatter(rows["_i"], rows["_p"])
    return df.with_columns(pl.coalesce(pl.col("peer"), pl.lit(full)).alias("peer"))


def _launch_steps(df: pl.DataFrame, calls: pl.DataFrame, host_steps: pl.DataFrame) -> pl.DataFrame:
    windows = host_steps.select("rank", pl.col("step").alias("h_step"), pl.col("start_ns").alias("h_start"),
                                pl.col("end_ns").alias("h_end")).sort("h_start")
    tagged = (
        df.select("rank", "correlation").unique().join(calls, on=["rank", "correlation"])
        .sort("launch_ns")
        .join_asof(windows, left_on="launch_ns", right_on="h_start", by="rank", strategy="backward",
                   check_sortedness=False)
        .filter(pl.col("launch_ns") <= pl.col("h_end"))
        .select("rank", "correlation", "h_step")
    )
    return (
        df.join(tagged, on=["rank", "correlation"], how="left")
        .with_columns(pl.coalesce("h_step", "step").alias("step"))
        .drop("h_step")
        .sort("rank", "start_ns")
    )


def assign_steps(df: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Step number of each row by its start time (null outside every step window)."""
    if steps.height == 0:
        return df.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    windows = steps.select("rank", "step", pl.col("start_ns").alias("s_start"), pl.col("end_ns").alias("s_end"))
    out = (
        df.sort("start_ns")
        .join_asof(windows.sort("s_start"), left_on="start_ns", right_on="s_start", by="rank",
                   strategy="backward", check_sortedness=False)
        .with_columns(pl.when(pl.col("start_ns") < pl.col("s_end")).then(pl.col("step")).otherwise(None).alias("step"))
        .drop("s_start", "s_end")
    )
    return out.sort("rank", "start_ns")
