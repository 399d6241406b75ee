"""The ideal run of the counterfactual verdict (analyzer/whatif/counterfactual.py): roles, and the changes that take the
measured run to its ideal, in commscope's model (:func:`ideal`) and in the published What-if study's
(:func:`ideal_study`, with :func:`steps_apart`: every step replayed on its own from its measured start).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..crossrank.graph import Graph
from . import replay

WORK_KINDS = ("compute", "memcpy", "memset", "other")
SPMD_DIMS = {"world", "dp", "fsdp", "ep"}  # groups of ranks that run the same program


@dataclass(frozen=True)
class Roles:
    """Per rank: its role (ranks of one role run the same program part), DP replica and pipeline stage."""

    role: dict[int, int]
    replicated: bool  # roles are DP groups: an operation a peer does not run counts as zero there
    replica: dict[int, int]  # rank -> its position in its DP group
    stage: dict[int, int]  # rank -> pipeline stage (empty without a pipeline)


def roles(groups: pl.DataFrame | None, ranks: list[int], stages: pl.DataFrame | None = None) -> Roles:
    """``groups``: crossrank.groups.groups (pg, ranks, size, dimension); ``stages``: rank, stage (pipeline)."""
    role: dict[int, int] = {}
    replica: dict[int, int] = {}
    if groups is not None and groups.height:
        dp = groups.filter(pl.col("dimension").is_in(["dp", "fsdp"]) & (pl.col("size") >= 2))
        members = sorted({tuple(sorted(int(r) for r in m)) for m in dp["ranks"].to_list()})
        for i, m in enumerate(members):
            for pos, r in enumerate(m):
                role.setdefault(r, i)
                replica.setdefault(r, pos)
    replicated = bool(role) and all(r in role for r in ranks)
    if not replicated:
        # no DP groups: a job whose every group spans the world (plain DDP, FSDP, experts) is one role of
        # replicas; one with tensor, pipeline or context groups is one role of different program parts
        dims = set(groups["dimension"].to_list()) if groups is not None and groups.height else set()
        replicated = bool(dims) and dims <= SPMD_DIMS
        role = {r: 0 for r in ranks}
        replica = {r: i for i, r in enumerate(sorted(ranks))} if replicated else {}
    stage = {}
    if stages is not None and stages.height:
        stage = {int(r): int(s) for r, s in stages.select("rank", "stage").unique("rank").iter_rows()}
    return Roles(role=role, replicated=replicated, replica=replica, stage=stage)


@dataclass(frozen=True)
class Ideal:
    """Changes that take the measured run to the ideal one (all <= 0, ns), per node and per instance."""

    ddur: np.ndarray
    dgap: np.ndarray
    dtr: np.ndarray
    gap: np.ndarray  # measured gaps (the no-host mode removes them)
    token: int = field(default_factory=lambda: next(replay.TOKENS), compare=False)  # names it in scenario keys

    def whole(self, host: bool = True) -> replay.Keyed:
        """The ideal run (``host`` False: every host gap removed as well)."""
        return replay.Keyed(lambda m, i: self.fill(m, i, host=host), ("ideal", self.token, host))

    def put_back(self, nodes: np.ndarray, insts: np.ndarray | None = None, host: bool = True) -> replay.Keyed:
        """The ideal run with ``nodes`` (and ``insts``' transfers) as measured: the ideal run itself where they
        are ideal already (written as the same bits: x − x = +0.0 and 0.0 + x where x is ±0.0)."""
        same = not (self.ddur[nodes].any() or (host and self.dgap[nodes].any())
                    or (insts is not None and self.dtr[insts].any()))
        key = ("ideal", self.token, host) if same else \
            ("put_back", self.token, host, replay.digest(nodes), replay.digest(insts))
        return replay.Keyed(lambda m, i: self.fill(m, i, nodes, insts, keep=True, host=host), key)

    def remove(self, nodes: np.ndarray, host: bool = True) -> replay.Keyed:
        """The measured run with ``nodes`` made ideal: the measured run itself (with host gaps) where they are
        ideal already."""
        same = host and not (self.ddur[nodes].any() or self.dgap[nodes].any())
        key = ("measured",) if same else ("remove", self.token, host, replay.digest(nodes))
        return replay.Keyed(lambda m, i: self.fill(m, i, nodes, host=host), key)

    def fill(self, m: replay.Mods, i: int, nodes: np.ndarray | None = None, insts: np.ndarray | None = None,
             keep: bool = False, host: bool = True) -> None:
        """Row i of ``m``: the ideal everywhere (``keep``: everywhere but ``nodes``/``insts``, put back as
        measured), or only on ``nodes``/``insts`` (the measured run with them made ideal). ``host`` False:
        every host gap removed as well."""
        # written into the row in place (no copies of whole columns: dozens of put-backs per analysis)
        some = nodes is not None or insts is not None
        if not some or keep:  # the ideal everywhere, then ``nodes``/``insts`` back as measured
            m.ddur[i] += self.ddur
            m.dtr[i] += self.dtr
            if host:
                m.dgap[i] += self.dgap
            if nodes is not None:
                m.ddur[i, nodes] -= self.ddur[nodes]
                if host:
                    m.dgap[i, nodes] -= self.dgap[nodes]
            if insts is not None:
                m.dtr[i, insts] -= self.dtr[insts]
        else:  # the measured run with ``nodes``/``insts`` made ideal
            # (no np.unique: ``a[idx] += b[idx]`` gathers before it scatters, so a repeated index is written once
            # with the same value; sorting a million node ids cost 0.5 s a put-back on the 484 MB Nsight export)
            if nodes is not None:
                m.ddur[i, nodes] += self.ddur[nodes]
                if host:
                    m.dgap[i, nodes] += self.dgap[nodes]
            if insts is not None:
                m.dtr[i, insts] += self.dtr[insts]
        if not host:
            m.dgap[i] -= self.gap


def ideal(g: Graph, rl: Roles) -> Ideal:
    """The ideal run's changes to durations, gaps and transfers (see the module doc)."""
    # a rank's first operation is its own role: its gap is measured from the job's start, not from a predecessor;
    # (role, step, name, occurrence, first) is one int64 key per operation: an operation's peers are the ranks of its
    # role in the same step (steps that differ by design, variable sequence lengths, stay different), and each
    # (rank, key) holds one operation (numpy: polars' group-by over the columns and the join back cost 1.5 s of CPU
    # on the 484 MB Nsight export's million operations)
    n = g.events.select(
        "rank", pl.col("kind").is_in(WORK_KINDS).fill_null(False).alias("_work"),
        pl.col("name").cast(pl.Categorical).to_physical(), "step", "occurrence",
        pl.col("bind_pred").is_null().alias("_first"), pl.col("dur_ns").cast(pl.Float64),
        pl.col("gap_ns").cast(pl.Float64).clip(lower_bound=0),
        pl.col("rank").replace_strict(rl.role, default=-1, return_dtype=pl.Int64).alias("_role"))
    key = _key([n[c] for c in ("_role", "step", "name", "occurrence", "_first")])
    dur, gap = n["dur_ns"].to_numpy(), n["gap_ns"].to_numpy()  # null: NaN (the columns come from integers)
    role = n["_role"].to_numpy()
    rk = np.sort(_key([n["rank"], pl.Series(key)]))
    # (a sort: numpy 2's np.unique hashes distinct values, 10x slower here: 0.2 s on 471 k events)
    if not (rk[1:] == rk[:-1]).any():
        # an occurrence numbers a name's operations within the rank's step, so every (rank, key) holds one
        # operation: its value is its rank's
        typ_d, typ_g, group_of = _typical(key, role, dur, gap, rl, n["rank"])
    else:  # (a graph whose names or occurrences repeat within a rank's step: each rank's median first)
        per_rank = pl.DataFrame({"rank": n["rank"], "_k": key, "_role": role, "_d": n["dur_ns"], "_g": n["gap_ns"]}
                                ).group_by("rank", "_k").agg(pl.col("_role").first(), pl.col("_d").median(),
                                                             pl.col("_g").median())
        pk = per_rank["_k"].to_numpy()
        typ_d, typ_g, group_p = _typical(pk, per_rank["_role"].to_numpy(), per_rank["_d"].to_numpy(),
                                         per_rank["_g"].to_numpy(), rl, n["rank"])
        groups = np.empty(typ_d.size, dtype=np.int64)
        groups[group_p] = pk  # each group's key, ascending (group_p: each per-rank row's group)
        group_of = np.searchsorted(groups, key)
    td, tg = typ_d[group_of], typ_g[group_of]
    with np.errstate(invalid="ignore"):  # NaN where a value is null: 0.0 below, as polars' fill_null
        dd = np.where(n["_work"].to_numpy(), np.minimum(np.where(np.isnan(td), dur, td), dur) - dur, 0.0)
        dg = np.minimum(np.where(np.isnan(tg), gap, tg), gap) - gap
    inst = g.instances.sort("inst").select(
        (pl.min_horizontal(pl.col("transfer_ns").cast(pl.Float64).median().over("op", "bytes", "group_n"),
                           "transfer_ns") - pl.col("transfer_ns")).fill_null(0.0).alias("dt"))
    return Ideal(_zero_null(dd), _zero_null(dg), inst["dt"].to_numpy().astype(np.float64), _zero_null(gap))


def _zero_null(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), 0.0, x)


def _key(cols: list[pl.Series]) -> np.ndarray:
    """One int64 per row, equal where every column is (nulls equal): mixed radix over each column's range, the
    partial key made dense (a sort) where the next column would overflow it."""
    k = np.zeros(len(cols[0]) if cols else 0, dtype=np.int64)
    span = 1
    for s in cols:
        if not k.size:
            break
        x = s.cast(pl.Int64).fill_null(0).to_numpy()
        lo = int(x.min())
        radix = int(x.max()) - lo + 2  # the last value: null
        c = np.where(s.is_null().to_numpy(), radix - 1, x - lo) if s.null_count() else x - lo
        if span * radix >= 2**62:
            u, k = np.unique(k, return_inverse=True)
            span = u.size
        k = k * radix + c
        span *= radix
    return k


def _typical(key: np.ndarray, role: np.ndarray, dur: np.ndarray, gap: np.ndarray, rl: Roles, ranks: pl.Series
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group of rows with one ``key`` (sorted by key): the typical duration and gap, the lower median of the
    rows' values (null: NaN, sorted first as polars sorts nulls; with replicas, peers that do not run it count as
    zero); and each row's group. The picked value is one of the values, so its bits are theirs."""
    order_d = np.lexsort((np.where(np.isnan(dur), -np.inf, dur), key))
    order_g = np.lexsort((np.where(np.isnan(gap), -np.inf, gap), key))
    ks = key[order_d]
    new = np.r_[True, ks[1:] != ks[:-1]] if ks.size else np.zeros(0, dtype=bool)
    start = np.flatnonzero(new)
    count = np.diff(np.r_[start, ks.size])
    if rl.replicated:  # of the role's ranks that ran anything: the lower median of all of them
        size: dict[int, int] = {}
        for r in ranks.unique().to_list():
            if r in rl.role:
                size[rl.role[r]] = size.get(rl.role[r], 0) + 1
        g_role = role[order_d[start]]
        u, inv = np.unique(g_role, return_inverse=True)
        n_role = np.array([size.get(int(x), -1) for x in u], dtype=np.int64)[inv]
        at = np.where(n_role >= 0, (n_role - 1) // 2 - (n_role - count), -1)
    else:  # its own structure: the lower median of the ranks that run it
        at = (count - 1) // 2
    pick = start + np.maximum(at, 0)

    def typical(values: np.ndarray, order: np.ndarray) -> np.ndarray:
        return np.where(at >= 0, values[order[pick]], 0.0) if values.size else values

    group = np.empty(key.size, dtype=np.int64)
    group[order_d] = np.cumsum(new) - 1
    return typical(dur, order_d), typical(gap, order_g), group


def ideal_study(g: Graph) -> Ideal:
    """The published study's ideal (What-if, OSDI'25): every operation of an op type at the mean duration of
    that type over all ranks, stages and steps (communication: the median transfer), host gaps removed; not
    bounded by the measured values."""
    n = g.events.select("kind", "name", pl.col("dur_ns").cast(pl.Float64), pl.col("gap_ns").cast(pl.Float64)
                       .clip(lower_bound=0), pl.col("inst").is_not_null().alias("_m"))
    dd = n.select(pl.when(~pl.col("_m")).then(
        pl.when(pl.col("kind") == "comm").then(pl.col("dur_ns").median().over("name", "_m"))
        .otherwise(pl.col("dur_ns").mean().over("name", "_m")) - pl.col("dur_ns")).otherwise(0.0).alias("d"))["d"]
    names = g.nodes.select("node", "name")
    inst = g.instances.sort("inst").join(names, left_on="last_node", right_on="node", how="left", maintain_order="left")
    dt = inst.select((pl.col("transfer_ns").cast(pl.Float64).median().over("name") - pl.col("transfer_ns"))
                     .fill_null(0.0).alias("dt"))["dt"]
    gap = n["gap_ns"].fill_null(0.0).to_numpy()
    return Ideal(dd.fill_null(0.0).to_numpy(), -gap, dt.to_numpy().astype(np.float64), gap)


def declared(g: Graph) -> Graph:
    """The graph where the trace says what each op waits for (op tables), as the What-if study models it and as
    commscope's replay reads it too (the op tables' own dependency record, as the host chains are Kineto's): an
    op's binding predecessor is the one of its declared dependencies that ended last (the gap after it is the
    study's launch delay), and the others are dependencies the replay waits for (``Graph.deps``). Ops with
    none declared keep theirs."""
    if g.declared is None or g.declared.height == 0:
        return g
    d = g.declared.join(g.nodes.select(pl.col("node").alias("dst"), "start_ns", "stream_pred"), on="dst")
    bind = d.sort("src_end_ns", "src").group_by("dst").agg(pl.col("src").last().alias("_b"),
                                                           pl.col("src_end_ns").last().alias("_be"))
    n = g.nodes.join(bind, left_on="node", right_on="dst", how="left", maintain_order="left").with_columns(
        pl.coalesce("_b", "bind_pred").alias("bind_pred"),
        pl.when(pl.col("_b").is_not_null()).then(pl.col("start_ns") - pl.col("_be")).otherwise(pl.col("gap_ns"))
        .alias("gap_ns")).drop("_b", "_be")
    extra = d.join(bind, on="dst").filter((pl.col("src") != pl.col("_b"))
                                          & (pl.col("src") != pl.col("stream_pred")).fill_null(True))
    deps = extra.select("src", "dst", pl.max_horizontal(pl.col("start_ns") - pl.col("src_end_ns"), pl.lit(0))
                        .alias("slack_ns")).sort("dst", "src")
    return dataclasses.replace(g, nodes=n, deps=deps)


def steps_apart(g: Graph) -> Graph:
    """The graph with every step on its own, as the study simulates them: no operation depends on one of an
    earlier step (binding or stream predecessor), and an operation whose binding predecessor was in an earlier
    step has its gap measured from its step's start (the earliest start of the step on any rank), so removing
    host gaps starts every rank at the step's measured start, and a faster step does not move the next one."""
    step = g.nodes["step"]
    pred_step = {c: step.gather(g.nodes[c].fill_null(0)).zip_with(g.nodes[c].is_not_null(), pl.Series([None]))
                 for c in ("bind_pred", "stream_pred")}
    n = g.nodes.with_columns(pl.col("a_start_ns").min().over("step").alias("_s0"),
                             *[(pl.Series(v) != pl.col("step")).fill_null(False).alias(f"_x_{c}")
                               for c, v in pred_step.items()])
    inside = pl.col("step").is_not_null()
    cut_b = inside & (pl.col("_x_bind_pred") | pl.col("bind_pred").is_null())
    n = n.with_columns(
        pl.when(inside & pl.col("_x_bind_pred")).then(None).otherwise(pl.col("bind_pred")).alias("bind_pred"),
        pl.when(inside & pl.col("_x_stream_pred")).then(None).otherwise(pl.col("stream_pred")).alias("stream_pred"),
        pl.when(cut_b).then(pl.col("a_start_ns") - pl.col("_s0")).otherwise(pl.col("gap_ns")).alias("gap_ns"),
    ).drop("_s0", "_x_bind_pred", "_x_stream_pred")
    deps = g.deps
    if deps is not None:  # a dependency on an op of an earlier step is cut like the predecessors
        deps = deps.filter(pl.Series(step.gather(deps["src"]) == step.gather(deps["dst"])).fill_null(False))
    return dataclasses.replace(g, nodes=n, deps=deps)


def study_steps(g: Graph) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Per replayed run (rows of ds, de), each step's time as the study counts it: from the step's measured
    start (its earliest operation on any rank) to its last operation's replayed end on any rank."""
    st = g.nodes["step"].fill_null(-1).to_numpy()
    keep = st >= 0
    keys, inv = np.unique(st[keep], return_inverse=True)
    idx = np.flatnonzero(keep)
    s0 = g.nodes["a_start_ns"].to_numpy()[idx].astype(np.float64)
    e0 = g.nodes["a_end_ns"].to_numpy()[idx].astype(np.float64)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(keys.size))
    start = np.minimum.reduceat(s0[order], bounds)

    def measure(ds: np.ndarray, de: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat((e0 + de[:, idx])[:, order], bounds, axis=1) - start

    return measure
