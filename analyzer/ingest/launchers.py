"""What a kernel's name cannot say: the host op that launched it, and the user's rules.

A launch (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) that sits inside a known communication op on the host
(the catalogue's launchers: ``symm_mem::*``, ``_C_custom_ar::all_reduce``, ``vllm::all_reduce``, ``nccl:*``,
Megatron's ``FusedDispatch``, ...; ``comm_catalogue.toml``) is that op's communication, whatever its kernel is
called: where none of the kernels launched inside one call is recognized by name, they all are the call's
communication ("comm" launchers), or only its device and peer copies are ("fused" launchers: async tensor
parallel's matmuls stay compute). A call whose kernels are recognized keeps its other kernels as they are
(flatten copies and the like). The user's rules (``--comm-kernel REGEX=OP``, the config file) come first.
"""

from __future__ import annotations

import polars as pl

from ..comm_catalogue import COMPUTE, UserRules, launcher_of
from ..timeline import launches

# device-to-device and peer copies (Kineto's and Nsight's spellings): the copies a communication op can make
_DEVICE_COPY = r"^Memcpy (?:DtoD|PtoP)"
_COPY = "^Memcpy"
_MAX_NESTING = 4  # launcher ops inside launcher ops (vllm::all_reduce > symm_mem::...): at most this deep


def is_copy(name: pl.Expr) -> pl.Expr:
    """GPU rows that are copies, not kernels (both readers name them ``Memcpy ...``)."""
    return name.str.contains(_COPY).fill_null(False)


def calls_of(cpu: pl.DataFrame, comm_calls: pl.DataFrame) -> pl.DataFrame:
    """(rank, correlation, launcher, l_op, l_call) of each launch inside a catalogue launcher call on the same
    thread: the innermost enclosing one (``l_call`` numbers the calls)."""
    empty = pl.DataFrame(schema={"rank": pl.Int32, "correlation": pl.Int64, "launcher": pl.Utf8, "l_op": pl.Utf8,
                                 "l_call": pl.Int64, "l_path": pl.List(pl.Int64)})
    if "launcher" not in comm_calls.columns:
        return empty
    calls = comm_calls.filter(pl.col("launcher").is_not_null())
    if calls.height == 0:
        return empty
    calls = (calls.select("rank", "tid", pl.col("start_ns").alias("c_start"), pl.col("end_ns").alias("c_end"),
                          "launcher", pl.col("op").alias("l_op"))
             .sort("rank", "tid", "c_start", pl.col("c_end"), descending=[False, False, False, True])
             .with_row_index("l_call").with_columns(pl.col("l_call").cast(pl.Int64)))
    calls = calls.with_columns(_parents(calls).alias("_a1"))
    # each call's enclosing calls (a1 its parent, a2 the parent's, ...) and where each ends
    chain = calls.select(pl.col("l_call").alias("_a0"), pl.col("c_end").alias("_e0"), "_a1")
    for d in range(1, _MAX_NESTING):
        up = calls.select(pl.col("l_call").alias(f"_a{d}"), pl.col("c_end").alias(f"_e{d}"),
                          pl.col("_a1").alias(f"_a{d + 1}"))
        chain = chain.join(up, on=f"_a{d}", how="left")
    got = launches(cpu).sort("launch_ns").join_asof(
        # on a tie the inner call (shorter, sorted later) is the one the backward search finds
        calls.select("rank", "tid", "c_start", "c_end", pl.col("l_call").alias("_a0"))
        .sort("c_start", "c_end", descending=[False, True], maintain_order=True).drop("c_end"), left_on="launch_ns",
        right_on="c_start", by=["rank", "tid"], strategy="backward", check_sortedness=False,
    ).filter(pl.col("_a0").is_not_null()).join(chain, on="_a0", how="left")
    # the latest call that started before the launch may have ended: the innermost one still open encloses it
    inner: pl.Expr = pl.lit(None, dtype=pl.Int64)
    for d in reversed(range(_MAX_NESTING)):
        inner = pl.when(pl.col(f"_e{d}").is_not_null() & (pl.col("launch_ns") <= pl.col(f"_e{d}"))).then(
            pl.col(f"_a{d}")).otherwise(inner)
    # every call open at the launch, innermost first: a call's communication is known where any of them
    # launched a kernel the catalogue names
    path = pl.concat_list([pl.when(pl.col(f"_e{d}").is_not_null() & (pl.col("launch_ns") <= pl.col(f"_e{d}")))
                           .then(pl.col(f"_a{d}")) for d in range(_MAX_NESTING)]).list.drop_nulls()
    names = calls.select("l_call", "launcher", "l_op")
    return (got.select("rank", "correlation", inner.alias("l_call"), path.alias("l_path"))
            .filter(pl.col("l_call").is_not_null())
            .join(names, on="l_call", how="left").unique(["rank", "correlation"], keep="first").select(empty.columns))


def _parents(calls: pl.DataFrame) -> pl.Series:
    """Each call's enclosing call on its thread (calls nest on a thread; the stack walk over the few launcher
    calls of a job is cheaper than any join)."""
    out: list[int | None] = []
    stack: list[tuple[int, int]] = []  # (l_call, c_end)
    key = None
    for rank, tid, start, end, i in calls.select("rank", "tid", "c_start", "c_end", "l_call").iter_rows():
        if (rank, tid) != key:
            key, stack = (rank, tid), []
        while stack and stack[-1][1] < start:
            stack.pop()
        out.append(stack[-1][0] if stack else None)
        stack.append((i, end if end is not None else start))
    return pl.Series(out, dtype=pl.Int64)


def classify(gpu: pl.DataFrame, cpu: pl.DataFrame, comm_calls: pl.DataFrame, rules: UserRules) -> pl.DataFrame:
    """``gpu`` with its ``kind`` after the user's rules and the launchers (names were classified by the readers)."""
    kind = pl.col("kind")
    if rules:
        op = rules.op(pl.col("name"))
        copy = is_copy(pl.col("name"))
        eligible = kind.is_in(["compute", "comm"]) | (kind == "memcpy")
        gpu = gpu.with_columns(
            pl.when(eligible & (op == COMPUTE)).then(pl.when(copy).then(pl.lit("memcpy")).otherwise(pl.lit("compute")))
            .when(eligible & op.is_not_null()).then(pl.lit("comm"))
            .otherwise(kind).alias("kind"))
    links = calls_of(cpu, comm_calls)
    if links.height == 0:
        return gpu
    modes = {n: la.mode for n in links["launcher"].unique().to_list() if (la := launcher_of(n)) is not None}
    rows = (
        gpu.with_row_index("_i").filter(pl.col("correlation").is_not_null())
        .join(links.select("rank", "correlation", "l_call", "l_path", "launcher"), on=["rank", "correlation"])
        .with_columns(pl.col("launcher").replace_strict(modes, default=None, return_dtype=pl.Utf8).alias("_mode"))
    )
    # a call is known when a kernel launched inside it, or inside a call within it, is communication already
    known = (rows.select(pl.col("l_path").alias("l_call"), (pl.col("kind") == "comm").alias("_known"))
             .explode("l_call").group_by("l_call").agg(pl.col("_known").any()))
    if rules:  # a kernel the user named keeps the user's word
        rows = rows.filter(rules.op(pl.col("name")).is_null())
    copy = pl.col("name").str.contains(_DEVICE_COPY).fill_null(False) & (pl.col("kind") == "memcpy")
    promote = rows.join(known, on="l_call").filter(
        ~pl.col("_known") & (copy | ((pl.col("_mode") == "comm") & (pl.col("kind") == "compute"))))
    if promote.height == 0:
        return gpu
    hit = pl.Series("_hit", [False] * gpu.height).scatter(promote["_i"], True)
    return gpu.with_columns(pl.when(hit).then(pl.lit("comm")).otherwise(kind).alias("kind"))


def launcher_columns(comm: pl.DataFrame, cpu: pl.DataFrame, comm_calls: pl.DataFrame) -> pl.DataFrame:
    """``comm`` (comm rows of the GPU table) with ``launcher`` and ``l_op``: the innermost catalogue launcher
    call around each row's launch (null where none)."""
    links = calls_of(cpu, comm_calls)
    return comm.join(links.select("rank", "correlation", "launcher", "l_op"), on=["rank", "correlation"], how="left")
