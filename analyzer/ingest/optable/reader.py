"""Reader for op tables: one row per forward / backward / communication operation of a rank (Parquet, Arrow IPC
or CSV), the per-op timers production fleets log always-on. The What-if artifact's traces (OSDI'25,
``ByteDance-Seed/StragglerAnalysis``) are one dialect: ``start_ts``/``duration`` in seconds from each step's
start, a ``meta-<name>.yaml`` of parallel sizes beside ``trace-<name>.parquet``. The README's "Op tables"
section documents the schema; :mod:`.optable_ops` maps op types to kinds, groups and streams;
:mod:`.optable_layout` the sizes and groups.

Every operation becomes a ``gpu`` row; communication operations also get a ``collectives`` row whose
process group, ordinal and peer come from the layout (no host metadata to link, so the reader hands the
table over whole: ``RankTrace.collectives``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl

from ...errors import TraceError
from ...model import (
    COLLECTIVE_SCHEMA,
    COMM_CALL_SCHEMA,
    CPU_SCHEMA,
    GPU_OPTIONAL,
    GPU_SCHEMA,
    STEP_SCHEMA,
    RankMeta,
    RankTrace,
    conform,
    empty,
)
from ..limits import world_problem
from ..options import ReadOptions
from . import deps as optable_deps
from . import layout as lay_mod
from . import p2p as optable_p2p
from .frame import Table, read_table
from .ops import STREAM_COMPUTE, UNKNOWN_KIND, op_rules

FORMAT = "optable"


def read(path: Path, opts: ReadOptions) -> list[RankTrace]:
    table = read_table(path)
    lay = _layout(path, table, opts)
    df = _coords(path, table, lay)
    df, warnings = optable_p2p.mark_noops(_relaid(_local_ops(df, lay)), lay)
    df = optable_deps.dependencies(df, dp_sync=lay.dp * lay.cp > 1)
    warnings = table.warnings + warnings
    ranks = df.select("rank", "dp_rank", "stage").unique().sort("rank").rows()
    groups = lay_mod.all_groups(lay, ranks)
    gpu = _gpu(df)
    coll, coll_warnings = _collectives(df, groups, lay)
    warnings += coll_warnings
    steps = _steps(df)
    traces = []
    by_rank = {k[0]: v for k, v in gpu.partition_by("rank", as_dict=True).items()}
    coll_by = {k[0]: v for k, v in coll.partition_by("rank", as_dict=True).items()}
    steps_by = {k[0]: v for k, v in steps.partition_by("rank", as_dict=True).items()}
    note = (f"{path.name}: op table of {len(ranks)} recorded ranks of {lay.world} ({lay.text()}, "
            f"sizes from {lay.source})")
    no_cpu, no_calls, no_steps, no_coll = (empty(CPU_SCHEMA), empty(COMM_CALL_SCHEMA), empty(STEP_SCHEMA),
                                           empty(COLLECTIVE_SCHEMA))  # shared by every rank (never mutated)
    for i, (r, _, _) in enumerate(ranks):
        # a group of one rank carries no communication (its ops became local work: _local_ops)
        pgs = tuple(sorted({g.name: g for g in groups[r].values() if len(g.ranks) > 1}.values(), key=lambda g: g.name))
        meta = RankMeta(rank=r, source=str(path), format=FORMAT, world_size=lay.world, rank_source="column",
                        process_groups=pgs, warnings=tuple([note, *warnings]) if i == 0 else ())
        traces.append(RankTrace(meta=meta, gpu=by_rank[r], cpu=no_cpu, comm_calls=no_calls,
                                steps=steps_by.get(r, no_steps), steps_on_gpu=True, collectives=coll_by.get(r, no_coll)))
    return traces


def _layout(path: Path, table: Table, opts: ReadOptions) -> lay_mod.Layout:
    """Sizes: a given layout, else the meta file beside the table, else inferred from its ranks; virtual stages
    also from the table's model chunks (``mc``), which ``--layout`` cannot name (its axes are the rank order's)."""
    lay = _sizes(path, table, opts)
    chunks = table.df["mc"].max() if "mc" in table.df.columns else None
    if chunks is not None and int(chunks) + 1 > lay.vpp:
        return replace(lay, vpp=int(chunks) + 1, source=f"{lay.source}; vpp from the mc column")
    return lay


def _sizes(path: Path, table: Table, opts: ReadOptions) -> lay_mod.Layout:
    if opts.layout:
        return lay_mod.parse_layout_text(opts.layout, opts.limits.max_ranks)
    meta = lay_mod.meta_path(path)
    if meta is not None:
        return lay_mod.read_meta(meta, path, opts.limits.max_ranks)
    df = table.df
    if "dp_rank" in df.columns and "stage" in df.columns:
        got = lay_mod.infer(df.select("rank", "dp_rank", "stage").unique().rows())
        if got is None:
            raise TraceError(path, "has ranks that do not follow a tp-cp-dp-pp order and no meta file",
                             "put meta-<name>.yaml (dp_size, pp_size, tp_size, dsp_size) beside it")
    else:  # no coordinates at all: a pure data-parallel job of the recorded ranks
        got = lay_mod.Layout(dp=int(df["rank"].max()) + 1, source="no dp_rank/stage columns: pure data parallel")
    if problem := world_problem(got.world, opts.limits.max_ranks):  # a world group lists every rank
        raise TraceError(path, f"its rank numbers make {problem}")
    return got


def _coords(path: Path, table: Table, lay: lay_mod.Layout) -> pl.DataFrame:
    """dp_rank and stage of every row (from the layout where the table has none), checked against the layout."""
    df = table.df
    base = pl.col("rank") // lay.mp
    if "dp_rank" not in df.columns:
        df = df.with_columns((base % lay.dp).cast(pl.Int32).alias("dp_rank"))
    if "stage" not in df.columns:
        df = df.with_columns((base // lay.dp).cast(pl.Int32).alias("stage"))
    ranks = df.select("rank", "dp_rank", "stage").unique().sort("rank")
    bad = ranks.filter((pl.col("dp_rank") >= lay.dp) | (pl.col("stage") >= lay.pp) | (pl.col("dp_rank") < 0)
                       | (pl.col("stage") < 0) | (pl.col("rank") >= lay.world)
                       | ((pl.col("rank") - lay.mp * (pl.col("dp_rank") + lay.dp * pl.col("stage"))) >= lay.mp)
                       | ((pl.col("rank") - lay.mp * (pl.col("dp_rank") + lay.dp * pl.col("stage"))) < 0))
    if bad.height:
        r, d, s = bad.row(0)
        raise TraceError(path, f"rank {r} at dp_rank {d}, stage {s} does not fit the layout {lay.text()} "
                         f"(from {lay.source}; {bad.height} ranks do not)",
                         "check the meta file's sizes, or the table's rank numbering")
    twice = ranks.group_by("rank").len().filter(pl.col("len") > 1)
    if twice.height:
        raise TraceError(path, f"rank {twice['rank'][0]} has more than one (dp_rank, stage)", "fix the table")
    return df


def _local_ops(df: pl.DataFrame, lay: lay_mod.Layout) -> pl.DataFrame:
    """A collective on a group of one rank (the layernorm all-reduce without tensor parallelism, the embedding
    all-reduce without a pipeline) moves nothing and waits for nobody: other work, not communication."""
    sizes = {"dp": lay.dp, "pp": lay.pp, "emb": min(lay.pp, 2), "mp": lay.mp, "world": lay.world}
    alone = [t for t, g in op_rules().select("optype", "group").rows() if g and sizes[g] == 1]
    if not alone:
        return df
    return df.with_columns(pl.when(pl.col("optype").is_in(alone)).then(pl.lit(UNKNOWN_KIND))
                           .otherwise(pl.col("kind")).alias("kind"))


def _relaid(df: pl.DataFrame) -> pl.DataFrame:
    """Steps back to back on one clock when the table times each step from its own start (What-if: every
    step starts at 0 on every rank; then every step's window holds one common instant); a table on one running
    clock keeps its times, even where a step's last ops spill into the next one."""
    spans = df.group_by("step").agg(pl.col("start_ns").min().alias("_s0"), pl.col("end_ns").max().alias("_s1")).sort("step")
    if spans.height < 2 or spans["_s0"].max() >= spans["_s1"].min():
        return df
    spans = spans.with_columns((pl.col("_s1") - pl.col("_s0")).cum_sum().shift(1, fill_value=0).alias("_off"))
    df = df.join(spans.select("step", "_s0", "_off"), on="step", how="left")
    shift = pl.col("_off") - pl.col("_s0")
    return df.with_columns((pl.col("start_ns") + shift).alias("start_ns"),
                           (pl.col("end_ns") + shift).alias("end_ns")).drop("_s0", "_off")


def _gpu(df: pl.DataFrame) -> pl.DataFrame:
    out = df.select(
        "rank", pl.lit(0, dtype=pl.Int32).alias("device"), "stream", "start_ns", "end_ns",
        pl.col("optype").alias("name"), "kind", pl.lit(None, dtype=pl.Int64).alias("correlation"),
        "stage", "dp_rank", pl.col("mb_id").alias("micro_batch"), pl.col("mc").alias("chunk"),
        pl.col("gmc").alias("global_chunk"), pl.col("seq_id").alias("op_seq"), "op_key", "after",
    ).sort("rank", "start_ns", "stream")
    return conform(out, GPU_SCHEMA, GPU_OPTIONAL)


def _steps(df: pl.DataFrame) -> pl.DataFrame:
    """Each step spans the same window on every rank (a synchronous job): first start to last end of any rank."""
    win = df.group_by("step").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    ranks = df.select("rank").unique()
    return conform(ranks.join(win, how="cross").sort("rank", "start_ns"), STEP_SCHEMA)


def _collectives(df: pl.DataFrame, groups: dict[int, dict[str, lay_mod.ProcessGroup]],
                 lay: lay_mod.Layout) -> tuple[pl.DataFrame, list[str]]:
    """Communication rows: the group from the layout, the ordinal within it, the peer of a send/recv."""
    rules = op_rules()
    comm = df.filter(pl.col("kind") == "comm").join(rules.select("optype", "op", "group", "peer_delta"),
                                                    on="optype", how="left")
    if comm.height == 0:
        return empty(COLLECTIVE_SCHEMA), []
    # each distinct group spelled once; (rank, kind) rows name it and the join gathers views of its text
    distinct = {g.name: g for gs in groups.values() for g in gs.values()}
    spelled = pl.DataFrame([(g.name, g.desc, ",".join(map(str, g.ranks)), len(g.ranks)) for g in distinct.values()],
                           schema={"pg": pl.Utf8, "pg_desc": pl.Utf8, "group_ranks": pl.Utf8, "group_size": pl.Int32},
                           orient="row")
    member = pl.DataFrame([(r, kind, g.name) for r, gs in groups.items() for kind, g in gs.items()],
                          schema={"rank": pl.Int32, "group": pl.Utf8, "pg": pl.Utf8}, orient="row")
    comm = comm.join(member.join(spelled, on="pg"), on=["rank", "group"], how="left")
    warnings: list[str] = []
    stray = comm.filter(pl.col("pg").is_null())
    if stray.height:
        kinds = ", ".join(sorted(stray["optype"].unique().to_list()))
        warnings.append(f"{stray.height} communication ops ran on ranks outside their group ({kinds} on a middle "
                        "stage): kept, unmatched")
    comm = optable_p2p.peers(comm, lay)
    comm = comm.sort("rank", "start_ns", "stream").with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over("rank", "pg").alias("seq"),
        pl.lit(True).alias("has_meta"), pl.col("optype").alias("name"),
    )
    warnings += _order_warnings(comm) + optable_p2p.pair_warnings(comm)
    return conform(comm, COLLECTIVE_SCHEMA), warnings


def _order_warnings(comm: pl.DataFrame) -> list[str]:
    """Collectives are matched by their ordinal within the group in each step; say where the ranks of a group
    ran different op types at the same ordinal (then the ordinals do not line up)."""
    coll = comm.filter(pl.col("peer_delta").is_null()).with_columns(
        pl.int_range(pl.len()).over("rank", "pg", "step").alias("_k"))
    bad = coll.group_by("pg", "group_ranks", "step", "_k").agg(
        (pl.col("optype").n_unique() > 1).alias("_mixed")).filter(pl.col("_mixed"))
    if bad.height == 0:
        return []
    return [f"{bad.height} collective instances mix op types across ranks at the same ordinal of their group "
            "(ranks ran their group's collectives in different orders): their matches are unreliable"]


__all__ = ["FORMAT", "read", "STREAM_COMPUTE"]
