"""TraceSet -> Analysis: run align, match and every metric once; the immutable result feeds all presenters."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial

import polars as pl

from ..crossrank import align, graph, match, step_sync
from ..crossrank import groups as pgroups
from ..ingest import background
from ..metrics import (
    blame,
    critical_path,
    dimensions,
    experts,
    inspector_folded,
    overlap,
    pipeline,
    stragglers,
    waits,
)
from ..metrics import inspector as inspector_metrics
from ..model import RankMeta, TraceSet
from ..rules import NS_PER_US, bus_factor_expr
from ..whatif import counterfactual
from ..whatif import scenarios as whatif
from . import cache as analysis_cache
from .communication import comm_warnings


@dataclass(frozen=True)
class Analysis:
    """One job's analysis: what ``analyzer.analyze`` returns and every presenter renders.

    Every table is a Polars DataFrame with the columns of the JSON report, times in ns (``exposed_comm_ns`` where the
    report says ``exposed_comm_ms``); ``analyzer.analysis.units.ms_tables`` converts them as the presenters do.

    Attributes:
        source: What was read (paths, format, ranks, world size, skipped files): the report's ``source``.
        ranks: One row per rank over the whole captured window.
        steps: One row per rank and step window.
        collectives: One row per matched collective instance or send/recv pair.
        bandwidth: Medians per operation, size bucket and intra/inter node.
        ranking: Every rank by root-caused wait.
        verdict: The first of ``roots``: the rank that holds the job back, or None.
        roots: Independent root stragglers, most costly first.
        clock: The clock fit: method, offsets per rank, uncertainty.
        matching: Counts of what matched across ranks and what did not.
        warnings: Everything missing or guessed.
        process_groups: One row per process group with its parallelism dimension.
        dimensions: One row per rank and dimension.
        pipeline: Per pipeline stage: bubbles and recv waits (None without a pipeline).
        experts: All-to-all bytes per peer and imbalance (None without split sizes).
        graph: The cross-rank dependency graph and its clock.
        critical_path: Per step and rank on the path: compute, exposed transfer, wait, host/idle.
        whatif: The replay and its scenarios.
        counterfactual: S, the attribution, M_W and M_S (it decides the verdict).
        inspector: NCCL Inspector input: bandwidth, slow links, waits (None otherwise).
    """

    source: dict
    # times are ns (``*_ns``) in every table; presenters turn them into the JSON's ms at the edge
    # (analyzer.views.units.ms_tables)
    ranks: pl.DataFrame  # one row per rank, whole captured window
    steps: pl.DataFrame  # one row per (rank, step)
    collectives: pl.DataFrame  # one row per matched instance (ns, bytes, GB/s)
    bandwidth: pl.DataFrame  # per operation and size bucket
    ranking: pl.DataFrame  # straggler ranking (by root-caused wait)
    verdict: stragglers.Verdict | None  # the first of ``roots``
    roots: tuple[stragglers.Verdict, ...]  # independent root stragglers, most costly first
    blame: blame.Blame  # root-cause attribution per instance (who delayed whom)
    clock: align.ClockFit
    matching: dict
    warnings: tuple[str, ...]
    traces: TraceSet  # for timelines (dashboard); presenters read tables above for numbers
    process_groups: pl.DataFrame | None = None  # one row per group, with its parallelism dimension
    dimensions: pl.DataFrame | None = None  # per (rank, dimension) (ns)
    pipeline: dict | None = None  # per pipeline stage: bubbles, recv waits (metrics.pipeline.analyze)
    experts: dict | None = None  # all-to-all(v) bytes per peer and imbalance (metrics.experts.analyze)
    graph: graph.Graph | None = None  # cross-rank dependency graph and its clock (critical path, replay, timelines)
    critical_path: pl.DataFrame | None = None  # step, rank, compute/exposed_transfer/wait/host_idle (ns)
    whatif: whatif.WhatIf | None = None  # replay and what-if scenarios
    kernels: pl.DataFrame | None = None  # the graph's comm-kernel table (Graph.kernels: waits.per_row + k, inst, node)
    inspector: inspector_metrics.InspectorSummary | None = None  # NCCL Inspector input: bandwidth, slow links, waits
    counterfactual: counterfactual.Counterfactual | None = None  # S, attribution, M_W, M_S (decides the verdict)
    rank_meta: tuple[RankMeta, ...] = ()  # per rank: source file, host, devices, process groups (presenters' names)
    # per (rank, family, engine): comm, overlapped, exposed (ns), kernels, bytes (metrics.overlap.family_split)
    communication: pl.DataFrame | None = None


# what an analysis takes from its TraceSet as it is, not from the cache (analysis_cache.py)
_FROM_TRACES = ("source", "traces", "rank_meta")


def analyze(ts: TraceSet, dims: pgroups.Options | None = None, busbw: dict[str, float] | None = None
            ) -> Analysis:
    """``dims``: how to name parallelism dimensions (--layout, --gpus-per-host); ``busbw``: what-if bus-bandwidth
    targets {op: GB/s}. A job loaded through the cache keeps its analysis there (``analysis_cache``): the same
    traces and options are analyzed once."""
    dims = dims or pgroups.Options()
    k = analysis_cache.key(ts, [repr(dims), sorted((busbw or {}).items())])
    kept = analysis_cache.load(k, ts, partial(_fields, ts, dims, busbw, k)) if k is not None else None
    if kept is not None:
        try:
            return Analysis(**{**kept, "warnings": (*ts.warnings, *kept["warnings"])}, source=_source(ts),
                            traces=ts, rank_meta=tuple(ts.ranks))
        except (TypeError, KeyError):  # an entry of another shape: analyzed again
            pass
    a = _analyze(ts, dims, busbw)
    if k is not None and a.warnings[:len(ts.warnings)] == ts.warnings:
        # written beside what follows (a report's rendering); a later load waits for it (ingest/background.py)
        background.later(analysis_cache.store, k, _stored(a, ts), ts)
    return a


def _stored(a: Analysis, ts: TraceSet) -> dict[str, object]:
    """What the cache keeps of an analysis: every field but those taken from its TraceSet, warnings of its own."""
    fields = {f.name: getattr(a, f.name) for f in dataclasses.fields(a) if f.name not in _FROM_TRACES}
    return {**fields, "warnings": a.warnings[len(ts.warnings):]}


def _fields(ts: TraceSet, dims: pgroups.Options, busbw: dict[str, float] | None, k: str) -> dict[str, object]:
    """The stored fields analyzed afresh (a cached table found damaged or swapped after its entry was loaded, which
    removed the entry): kept again, so the next run reads them back."""
    a = _analyze(ts, dims, busbw)
    fields = _stored(a, ts)
    if a.warnings[:len(ts.warnings)] == ts.warnings:
        background.later(analysis_cache.store, k, fields, ts)
    return fields


def _source(ts: TraceSet) -> dict:
    return {
        "paths": [m.source for m in ts.ranks],
        "format": ts.format,
        "ranks": ts.rank_ids,
        "world_size": len(ts.ranks),  # what was analyzed; what the traces declare is beside it
        "declared_world_size": ts.world_size,
        "skipped": [{"path": s.path, "reason": s.reason} for s in ts.skipped],
    }


def _inspector(ts: TraceSet, groups: pl.DataFrame | None, verdict: object) -> inspector_metrics.InspectorSummary | None:
    """The Inspector summary with each communicator's dimension from its membership (the groups named above), and
    one verdict: with kernel timestamps the trace machinery decides (waits, the counterfactual), so the Inspector's
    kernel-time test names a rank only where that verdict names the same one (a balanced job's ring positions
    make some rank last more often than chance; the counterfactual counts that as background)."""
    if ts.inspector is None:
        return None
    dims = dict(groups.select("pg", "dimension").iter_rows()) if groups is not None and groups.height else None
    s = inspector_folded.summarize(ts.inspector, dims)
    if s.verbose and s.verdict is not None and (verdict is None or getattr(verdict, "rank", None) != s.verdict["rank"]):
        from dataclasses import replace

        s = replace(s, verdict=None)
    return s


def _analyze(ts: TraceSet, dims: pgroups.Options | None, busbw: dict[str, float] | None) -> Analysis:
    ranks = ts.rank_ids
    warnings = list(ts.warnings)
    covs = overlap.coverages(ts.gpu)
    totals = overlap.rank_totals(ts.gpu, covs)
    by_family = overlap.family_split(ts.collectives, covs)
    warnings.extend(comm_warnings(ts))

    inst = match.instances(ts.collectives)
    fit = align.fit_offsets(inst, ranks)
    # the graph right after the fit (and the per-kernel waits it carries, which need the aligned clock for ring
    # hops): its clock is the one place offsets are applied; everything below that needs aligned times reads it,
    # and every comm kernel or instance below is the graph's (Graph.kernels, Graph.instances, Graph.members)
    clock = graph.Clock.of(fit)
    aligned = clock.to_reference(inst.select("rank", "start_ns", "end_ns"))
    # each process group's dimension is named from metadata before the graph, which puts it on its kernels
    dims = dims or pgroups.Options()
    warnings.extend(pgroups.layout_warnings(dims.layout, ts.world_size or len(ranks)))
    named = pgroups.groups(pgroups.meta_groups(ts.ranks), inst, ts.world_size or len(ranks), pgroups.hosts(ts.ranks),
                           dims)
    dep = graph.build(ts.gpu, waits.per_row(inst, aligned["start_ns"], aligned["end_ns"]), ts.steps, clock, ts.cpu,
                      named, dims.layout)
    linked = inst.filter(pl.col("instance").is_not_null())["rank"].unique().to_list()
    # reported steps: one interval per step on every rank (step_sync); the graph, replay and pipeline keep each
    # rank's own windows, which place its operations in steps by launch
    synced, differed = step_sync.common_windows(dep, linked)
    if differed:
        warnings.append(differed)
    per_step = overlap.step_breakdown(synced, covs)
    own_windows = ts.steps.filter(pl.col("rank").is_in(per_step["rank"].unique().implode())).select(
        "rank", "step", "start_ns", "end_ns")
    matched = waits.matched(dep.kernels)
    hops = dep.members.ring_hops
    if hops:
        warnings.append(
            f"{hops} ring hops (batched send/recv to one rank and from another, as in ring attention): each kernel's "
            "wait is traced to the later of its own two peers by start time on the aligned clock, so across hosts "
            "it is only as good as the clock fit")
    itable = _instance_frame(dep)
    rtable = waits.rank_table(matched, ranks)

    # exposed comm split into wait and transfer: key -1 is the whole window, else the step number
    windows = pl.concat([
        totals.select("rank", pl.lit(-1, dtype=pl.Int64).alias("key"), pl.col("window_start_ns").alias("start_ns"),
                      (pl.col("window_start_ns") + pl.col("span_ns")).alias("end_ns"), "exposed_comm_ns"),
        per_step.select("rank", pl.col("step").alias("key"), "start_ns",
                        (pl.col("start_ns") + pl.col("span_ns")).alias("end_ns"), "exposed_comm_ns"),
    ])
    split = waits.exposed_split(dep.kernels, covs, windows)

    expected = matched.group_by("rank").agg((1.0 / pl.col("n_ranks")).sum().alias("expected"))
    roots_of = blame.root_cause(dep.members, ranks)
    order = stragglers.ranking(rtable, expected, roots_of)
    comm_ns = {r: float(c) for r, c in totals.select("rank", "comm_ns").iter_rows()}
    groups = dep.groups
    replicas = pgroups.replicas(groups, ts.world_size or len(ranks))
    cause_of = partial(waits.lateness_cause, matched, covs)
    drows = dep.kernels  # every comm kernel with its dimension and intra_node (the graph's)
    dim_df = dimensions.per_rank(drows, ts.gpu, ranks, roots_of.flows)

    step_windows = own_windows
    if step_windows.height == 0:  # no step markers: the whole window is one step
        step_windows = totals.select("rank", pl.lit(-1, dtype=pl.Int64).alias("step"), pl.col("window_start_ns").alias(
            "start_ns"), (pl.col("window_start_ns") + pl.col("span_ns")).alias("end_ns"))
    pipe = pipeline.analyze(drows, ts.gpu, step_windows, dep.clock,
                            dims.layout.stage(pl.col("rank")) if dims.layout else None)

    cpath = critical_path.critical_path(dep)
    # the verdict is the counterfactual's (analyzer/whatif/counterfactual.py); the heuristic roots only where
    # nothing can be replayed
    # the replay reads the dependencies the traces record: op tables' declared ones where they say (ideal.declared)
    rep = counterfactual.declared(dep)
    prepared = whatif.prepare(rep, ts.steps)
    stage_of = pipe["rank_steps"].select("rank", "stage").unique() if pipe is not None else None
    cfx = counterfactual.analyze(rep, ts.steps, counterfactual.roles(groups, ranks, stage_of),
                                 dep.pg_dimensions, prepared) if prepared is not None else None
    if cfx is not None and ts.format == "optable":  # the published study's model too, to compare with its numbers
        cfx = dataclasses.replace(cfx, study=counterfactual.analyze(
            rep, ts.steps, counterfactual.roles(groups, ranks, stage_of), dep.pg_dimensions, prepared,
            study=True))
    if cfx is not None:
        decide = counterfactual.deciding(cfx)
        found = [stragglers.from_counterfactual(r.rank, r.kind, r.confidence, order, roots_of, cause_of(r.rank),
                                                r.saving_ns, r.saving_pct, r.added_ns) for r in decide.roots]
        # a straggler is one the others waited for: never "the root of 0 ms of the others' wait", never alone
        found = [v for v in found if len(ranks) > 1 and max(v.root_caused_wait_ns, v.caused_wait_ns) > 0]
        if pipe is not None and decide.bottleneck_stage is not None:
            # a root's stage; without a root the pipeline's own rule stands (a stage slower in every replica
            # is structure the role ideal keeps: the stage with the most compute sets the pace)
            pipe = {**pipe, "bottleneck_stage": decide.bottleneck_stage}
    else:
        found = stragglers.roots(order, roots_of, comm_ns, cause_of, replicas)
    del covs, cause_of  # not read below
    root = (found[0].rank, found[0].kind) if found else None
    replayed = whatif.analyze(rep, ts.steps, root, busbw, dep.pg_dimensions,
                              peers=replicas.get(root[0]) if root else None, experts=experts.balance(drows),
                              ideal=cfx.ideal_changes if cfx is not None else None, prepared=prepared)
    warnings.extend(whatif.warnings(replayed))
    warnings.extend(counterfactual.warnings(cfx))

    rank_df = _rank_frame(totals, per_step, split, order)
    step_df = _step_frame(per_step, split, matched, roots_of.steps)
    coll_df = _collective_frame(itable)
    bw = _bandwidth(coll_df)

    match_counts, match_warnings = match.summary(inst)
    warnings.extend(match_warnings)
    if fit.uncertainty_ns is not None and itable.height:
        skew = float(itable["arrival_skew_ns"].median())
        if fit.uncertainty_ns > skew:
            warnings.append(
                f"clock uncertainty ({fit.uncertainty_ns / NS_PER_US:.1f} us) exceeds the median arrival skew "
                f"({skew / NS_PER_US:.1f} us): start-based skews are not reliable; waits (duration-based) are"
            )
    if ts.collectives.height and coll_df["bytes"].null_count() == coll_df.height and coll_df.height:
        warnings.append("no message sizes in the traces: bandwidth is null")

    source = _source(ts)
    matching = {
        "instances": itable.height,
        "matched_kernels": matched.height,
        **match_counts,
        "kernels_without_metadata": ts.collectives.filter(~pl.col("has_meta")).height,
    }
    return Analysis(
        source=source, ranks=rank_df, steps=step_df, collectives=coll_df, bandwidth=bw, ranking=order,
        verdict=found[0] if found else None, roots=tuple(found), blame=roots_of, clock=fit, matching=matching,
        warnings=tuple(warnings), traces=ts, graph=dep, critical_path=cpath, whatif=replayed, kernels=dep.kernels,
        process_groups=groups, dimensions=dim_df, pipeline=pipe, experts=experts.analyze(drows), counterfactual=cfx,
        inspector=_inspector(ts, groups, found[0] if found else None),
        rank_meta=tuple(ts.ranks), communication=by_family,
    )


def _rank_frame(totals: pl.DataFrame, per_step: pl.DataFrame, split: pl.DataFrame, order: pl.DataFrame) -> pl.DataFrame:
    step_stats = per_step.group_by("rank").agg(
        pl.len().alias("steps"),
        pl.col("span_ns").mean().alias("step_time_mean_ns"),
        pl.col("span_ns").median().alias("step_time_p50_ns"),
        pl.col("span_ns").max().alias("step_time_max_ns"),
    )
    whole = split.filter(pl.col("key") == -1).drop("key")
    df = (
        totals.join(step_stats, on="rank", how="left")
        .join(whole, on="rank", how="left")
        .join(order.select("rank", "wait_ns", "caused_wait_ns", "root_caused_wait_ns", "propagated_wait_ns",
                           "last_arrival_pct"), on="rank", how="left")
        .with_columns(pl.col("steps").fill_null(0))
    )
    return df.select(
        "rank", "steps", "step_time_mean_ns", "step_time_p50_ns", "step_time_max_ns",
        "compute_ns", "comm_ns", "overlapped_comm_ns", "exposed_comm_ns",
        pl.when(pl.col("comm_ns") > 0).then(100.0 * pl.col("overlapped_comm_ns") / pl.col("comm_ns")).alias("overlap_pct"),
        "exposed_wait_ns", "exposed_transfer_ns", "idle_ns", "memcpy_ns", "wait_ns", "caused_wait_ns",
        "root_caused_wait_ns", "propagated_wait_ns",
        "last_arrival_pct",
        "span_ns", "busy_ns", "compute_only_ns",
    ).sort("rank")


def _step_frame(per_step: pl.DataFrame, split: pl.DataFrame, matched: pl.DataFrame, root: pl.DataFrame) -> pl.DataFrame:
    steps = split.filter(pl.col("key") >= 0).rename({"key": "step"})
    wait = matched.filter(pl.col("step").is_not_null()).group_by("rank", "step").agg(pl.col("wait_ns").sum())
    caused = (
        matched.filter(pl.col("step").is_not_null())
        .group_by("instance", "last_rank").agg(pl.col("step").first(), pl.col("wait_ns").sum().alias("caused_wait_ns"))
        .rename({"last_rank": "rank"})
        .group_by("rank", "step").agg(pl.col("caused_wait_ns").sum())
        .with_columns(pl.col("rank").cast(pl.Int32))
    )
    df = (
        per_step.join(steps, on=["rank", "step"], how="left")
        .join(wait, on=["rank", "step"], how="left")
        .join(caused, on=["rank", "step"], how="left")
        .join(root.with_columns(pl.col("rank").cast(pl.Int32)), on=["rank", "step"], how="left")
        .with_columns(pl.col("wait_ns").fill_null(0), pl.col("caused_wait_ns").fill_null(0),
                      pl.col("root_caused_wait_ns").fill_null(0.0))
    )
    return df.select(
        "rank", "step", "start_ns",
        "span_ns", "compute_ns", "comm_ns", "overlapped_comm_ns", "exposed_comm_ns", "exposed_wait_ns",
        "exposed_transfer_ns", "compute_only_ns", "memcpy_ns", "idle_ns", "wait_ns", "caused_wait_ns",
        "root_caused_wait_ns",
        pl.when(pl.col("comm_ns") > 0).then(100.0 * pl.col("overlapped_comm_ns") / pl.col("comm_ns")).alias("overlap_pct"),
    ).sort("rank", "step")


def _instance_frame(g: graph.Graph) -> pl.DataFrame:
    """The graph's instance table as the collectives report reads it: one row per matched instance, first arrival
    first."""
    return g.instances.sort("inst").select(
        "instance", "pg", "seq", pl.col("collective_op").alias("op"), pl.col("collective_step").alias("step"), "bytes",
        "group_size", "ranks", "transfer_ns", "max_wait_ns", "total_wait_ns", "last_rank", "arrival_skew_ns",
        "end_skew_ns", "first_start_ns", "has_meta",
        *[c for c in ("match_rule", "partial", "dimension", "intra_node") if c in g.instances.columns])


def _collective_frame(itable: pl.DataFrame) -> pl.DataFrame:
    n = pl.coalesce("group_size", pl.col("ranks").list.len())
    return itable.select(
        "pg", "seq", "op", "step", "bytes", "ranks", pl.col("group_size"),
        "transfer_ns", "max_wait_ns", "total_wait_ns", "arrival_skew_ns", "end_skew_ns",
        "last_rank",
        pl.when(pl.col("transfer_ns") > 0).then(pl.col("bytes") / pl.col("transfer_ns")).alias("algbw_gbps"),
        pl.when(pl.col("transfer_ns") > 0)
        .then(pl.col("bytes") / pl.col("transfer_ns") * bus_factor_expr(pl.col("op"), n))
        .alias("busbw_gbps"),
        pl.col("first_start_ns").alias("start_ns"),
        "has_meta",
        *[c for c in ("match_rule", "partial", "dimension", "intra_node") if c in itable.columns],
    )


def _bandwidth(coll: pl.DataFrame) -> pl.DataFrame:
    sized = coll.filter(pl.col("bytes").is_not_null() & (pl.col("bytes") > 0))
    by = ["op", "size_bucket", *[c for c in ("intra_node",) if c in coll.columns]]
    return (
        sized.with_columns((2 ** pl.col("bytes").cast(pl.Float64).log(2).floor()).cast(pl.Int64).alias("size_bucket"))
        .group_by(by)
        .agg(
            pl.len().alias("count"),
            pl.col("bytes").sum().alias("total_bytes"),
            pl.col("transfer_ns").median().alias("transfer_ns_p50"),
            pl.col("algbw_gbps").median().alias("algbw_gbps_p50"),
            pl.col("busbw_gbps").median().alias("busbw_gbps_p50"),
            pl.col("busbw_gbps").max().alias("busbw_gbps_max"),
        )
        .sort(by, nulls_last=True)
    )
