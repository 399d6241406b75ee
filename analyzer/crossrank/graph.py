"""The cross-rank dependency graph: every GPU operation of every rank, and what it waited for.

Built once per analysis (:func:`build`); blame, the critical path and the replay read it, none rebuilds
it. It is columnar and vectorized over ranks (sorts, shifts and as-of joins; no loop per rank).

Per rank the operations (kernels, memcpy, memset) are ordered by start. Each has
- a **stream predecessor**: the previous operation on its stream (it cannot start before that ends);
- a **binding predecessor**: the operation on the rank, any stream, with the latest end at or before
  its start: what finished last before it could start. The **gap** (start − that end) is host/launch
  time or idle. A rank's first operation has no predecessor; its gap is measured from the earliest
  first operation of any rank on the aligned clock (a host that starts late shows as a gap there too).
Communication kernels of one matched instance (a collective, or a matched send/recv pair that arrives
as a 2-participant instance in the same column) are joined by that instance. The last arriver (the
shortest kernel) gates the instance: every participant's kernel ends at (last arrival + transfer). In a
ring's hop each kernel is gated by its own peer instead (``waits.per_row``'s ``last_rank``, the one place
that rule lives): ``gate_node`` is the kernel each one waited for.

The host is in the graph too (crossrank/host.py, ``Graph.host``/``host_deps``/``events``): each rank's threads as
chains of the runtime calls that launched GPU work or blocked on it, with what ties them to the GPU (a launch, a
synchronize's return, a cross-stream wait). The replay (whatif/replay.py) places launched operations from those,
not from the binding predecessor's gap; the rest of the analysis reads the GPU nodes as before.

The graph is also the one place clock offsets are applied (DESIGN: "graph ... the only place offsets are
applied"): :class:`Clock` holds each rank's rounded offset and puts any table on the reference clock;
the graph carries it (``Graph.clock``) with the step windows on both clocks (``Graph.steps``), and every
consumer (step sync, critical path, pipeline, export, dashboard timelines) reads those instead of
subtracting offsets itself.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import polars as pl

from ..ingest.collectives import assign_steps
from . import host
from .align import ClockFit
from .groups import DIMENSIONS, Layout, pg_dimensions, row_dimensions
from .members import Members, members

NODE_KINDS = ("compute", "comm", "memcpy", "memset", "other")
EDGE_KINDS = ("stream", "binding", "collective")
TIME_COLS = ("start_ns", "end_ns")


@dataclass(frozen=True)
class Clock:
    """Each rank's clock correction: ``by_rank[r]`` (align's offset, rounded to whole ns) is subtracted from rank
    r's times to put them on the reference rank's clock; a rank without one keeps its times. ``method`` is the
    fit's ("collective-end" | "none": no fit, every offset 0)."""

    by_rank: dict[int, int]
    method: str = "none"

    @classmethod
    def of(cls, fit: ClockFit | None) -> Clock:
        if fit is None:
            return cls({})
        return cls.from_offsets(fit.offsets_ns, fit.method)

    @classmethod
    def from_offsets(cls, offsets_ns: dict[int, float] | None, method: str = "collective-end") -> Clock:
        return cls({int(r): round(v) for r, v in (offsets_ns or {}).items()}, method)

    def offset(self, rank: pl.Expr | None = None) -> pl.Expr:
        """The ns to subtract from each row's times (Int64), looked up by its rank."""
        rank = pl.col("rank") if rank is None else rank
        if not any(self.by_rank.values()):
            return pl.lit(0, dtype=pl.Int64)
        return rank.replace_strict(list(self.by_rank), list(self.by_rank.values()), default=0, return_dtype=pl.Int64)

    def to_reference(self, df: pl.DataFrame, cols: tuple[str, ...] = TIME_COLS, prefix: str = "") -> pl.DataFrame:
        """``df`` (a rank column and ``cols`` on each rank's own clock) with ``cols`` on the reference clock:
        replaced, or added as ``prefix + col`` when a prefix is given. Row order is kept."""
        off = self.offset()
        return df.with_columns((pl.col(c) - off).alias(prefix + c) for c in cols)

    def to_rank_clock(self, df: pl.DataFrame, cols: tuple[str, ...] = TIME_COLS) -> pl.DataFrame:
        """The inverse: ``cols`` from the reference clock onto each row's rank's own clock."""
        off = self.offset()
        return df.with_columns((pl.col(c) + off).alias(c) for c in cols)


@dataclass(frozen=True)
class Graph:
    """Columnar dependency graph. Times are ns on each rank's own clock unless prefixed ``a_`` (aligned).

    ``nodes`` (one row per GPU operation, ``node`` = row index, ordered by rank then start):
      node, rank, stream, kind, name, start_ns, end_ns (at least start + 1), dur_ns, a_start_ns, a_end_ns,
      step (null outside step windows), ordinal (per rank), occurrence (k-th op of this name in the rank's
      step: the key that lines the same operation up across ranks), stream_pred, slack_ns (start − stream
      predecessor's end, >= 0), bind_pred, gap_ns (start − binding predecessor's end; first op: see module
      doc), inst (matched instance id or null), gate_node (the kernel it waited for: its instance's last
      arriver's, itself when unmatched), wait_ns, transfer_ns, op, pg, bytes, group_n, k (its row in ``kernels``;
      null for a kernel that is no communication), dimension and intra_node (its process group's, named by
      ``groups.row_dimensions`` before the graph; null for no communication or a graph built without groups).
    ``instances``: inst, instance (the match key), n (participants), last_node, last_rank, transfer_ns,
      op, pg, bytes, group_n, ranks (its participants, ascending); from its kernels' rows, what the collectives
      report says of it: seq (smallest), collective_op (a send/recv pair reads ``send_recv``), collective_step
      (the earliest step a kernel of it was recorded in), group_size, max_wait_ns, total_wait_ns, arrival_skew_ns
      and end_skew_ns (aligned clock), first_start_ns (aligned), has_meta (all kernels), match_rule and partial
      (where matched so), dimension and intra_node (its first kernel's, where the graph was built with groups).
      The one instance table: every consumer reads it or ``members`` (its participants and units, as blame
      reads them).
    ``edges``: src, dst, kind ∈ EDGE_KINDS: stream / binding predecessor -> node; collective: the gate's
      node -> every other participant's node (they waited for it).
    """

    nodes: pl.DataFrame
    instances: pl.DataFrame
    edges: pl.DataFrame
    # what each op waits for on its rank where the trace says (op tables' program order, ingest/optable_deps.py):
    # src, dst, src_end_ns; both models replay them (whatif/ideal.declared, applied in analysis/): the op tables'
    # own dependency record, as the host chains are Kineto's
    declared: pl.DataFrame | None = None
    # further dependencies a replay waits for beyond the stream and binding predecessors (src, dst, slack_ns =
    # dst start − src end, >= 0); None: nothing more
    deps: pl.DataFrame | None = None
    clock: Clock = Clock({})  # the offsets the ``a_`` times used; consumers align other tables with it
    # the step windows the graph was built with (rank, step, start_ns, end_ns, ...) plus a_start_ns, a_end_ns
    steps: pl.DataFrame | None = None
    # every comm kernel (waits.per_row, its order) with k (row id), inst (its instance in ``instances``, null when
    # unmatched) and node (its node; null for the rare duplicate the nodes keep once): what the export writes
    kernels: pl.DataFrame | None = None
    members: Members | None = None  # the matched kernels as members of their instances (crossrank/members.py)
    # every GPU and CPU event as ingested (rank clock): the timelines and the export draw them, placed with
    # ``clock``, so no presenter reads the TraceSet
    gpu: pl.DataFrame | None = None
    cpu: pl.DataFrame | None = None
    # one row per process group with its parallelism dimension (crossrank/groups.py ``groups``); None: not named
    groups: pl.DataFrame | None = None
    # process group name -> dimension for names that denote one group (groups.pg_dimensions): the replay's
    # per-dimension scenarios and the verdict's by_dimension attribution
    pg_dimensions: dict[str, str] = dataclasses.field(default_factory=dict)
    # the host chains (crossrank/host.py): every runtime call that launched GPU work or blocked on it, as replay
    # events numbered after the nodes (``n_nodes + hnode``), and the dependencies that tie them to the GPU (launch,
    # blocking sync, a thread woken by another) and GPU operations across streams (src, dst, slack_ns); None: no host.
    # Their names (and ``events``' where there is a host) are categorical: grouped by, never parsed
    host: pl.DataFrame | None = None
    host_deps: pl.DataFrame | None = None

    @property
    def n_nodes(self) -> int:
        return self.nodes.height

    @functools.cached_property
    def events(self) -> pl.DataFrame:
        """What the replay places: the nodes, then the host events (host.events); built once per graph."""
        return host.events(self.nodes, self.host, self.host_deps)

    @property
    def replay_deps(self) -> pl.DataFrame | None:
        """Every dependency of ``events`` beyond the binding and stream predecessors: ``deps`` and the host's."""
        parts = [d for d in (self.deps, self.host_deps) if d is not None and d.height]
        return pl.concat([d.select("src", "dst", "slack_ns").cast(host.DEP_SCHEMA) for d in parts]) if parts else None


def build(gpu: pl.DataFrame, rows: pl.DataFrame, steps: pl.DataFrame, clock: Clock | None = None,
          cpu: pl.DataFrame | None = None, groups: pl.DataFrame | None = None, layout: Layout | None = None) -> Graph:
    """``gpu``: the TraceSet's gpu table; ``rows``: waits.per_row (every comm kernel with instance,
    wait_ns, transfer_ns); ``steps``: step windows; ``clock``: the fitted offsets (none: every rank's own);
    ``cpu``: the TraceSet's cpu table, carried for the timelines; ``groups``: the process groups with their
    dimensions (``groups.groups``) and ``layout`` (--layout): each comm kernel gets its dimension from them."""
    clock = clock or Clock({})
    if groups is not None and "instance" in rows.columns:
        rows = row_dimensions(rows, groups, layout)
    # an operation is (rank, stream, start, end, name); the name is keyed by its 64-bit hash, which
    # hashes a million kernel names' text once instead of in every unique and join (0.2 s each)
    declared = "after" in gpu.columns and "op_key" in gpu.columns
    ops = (
        gpu.filter(pl.col("kind").is_in(NODE_KINDS))
        .select("rank", "stream", "kind", "name", "start_ns", "correlation", *(["op_key", "after"] if declared else []),
                pl.max_horizontal("end_ns", pl.col("start_ns") + 1).alias("end_ns"), pl.col("end_ns").alias("_raw_end"),
                _name_key())
        .unique(["rank", "stream", "start_ns", "_raw_end", "_nh"], keep="first", maintain_order=True)
    )
    rows = rows.with_row_index("k")
    comm = _comm_rows(rows).with_columns(_name_key()).drop("name")
    ops = ops.join(comm, left_on=["rank", "stream", "start_ns", "_raw_end", "_nh"],
                   right_on=["rank", "stream", "start_ns", "end_ns", "_nh"], how="left").drop("_raw_end")
    # wide frames are joined and sorted as few times as possible: each such step copies every column (a
    # million operations: ~150 MB a copy); new columns come from narrow frames or expressions
    off = clock.offset()
    ops = assign_steps(ops, steps) if steps.height else ops.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    nodes = (
        ops.sort("rank", "start_ns", "end_ns", "stream", "name")
        .with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).alias("node"),
            (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
            (pl.col("start_ns") - off).alias("a_start_ns"),
            (pl.col("end_ns") - off).alias("a_end_ns"),
        )
        .with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).over("rank").alias("ordinal"),
            # by the name's hash: grouping by the text row-encoded every name (+116 MB on 435 k operations)
            pl.int_range(pl.len(), dtype=pl.Int64).over("rank", "step", "_nh").alias("occurrence"),
            pl.col("node").shift(1).over("rank", "stream").alias("stream_pred"),
            pl.col("end_ns").shift(1).over("rank", "stream").alias("_sp_end"),
        )
        .drop("_nh")
    )
    # binding predecessor: the latest end at or before this start on the rank (any stream)
    ends = nodes.select("rank", pl.col("end_ns").alias("_bp_end"), pl.col("node").alias("bind_pred"))
    ends = ends.sort("_bp_end", "bind_pred")
    bound = nodes.select("node", "rank", "start_ns").join_asof(
        ends, left_on="start_ns", right_on="_bp_end", by="rank", strategy="backward", check_sortedness=False
    ).sort("node")
    nodes = nodes.with_columns(bound["_bp_end"], bound["bind_pred"])
    said = _declared(nodes) if declared else None
    if declared:
        nodes = nodes.drop("op_key", "after")
    origin = nodes["a_start_ns"].min() if nodes.height else 0
    nodes = nodes.with_columns(
        pl.max_horizontal(pl.col("start_ns") - pl.col("_sp_end"), pl.lit(0)).alias("slack_ns"),
        pl.when(pl.col("bind_pred").is_not_null()).then(pl.col("start_ns") - pl.col("_bp_end"))
        .otherwise(pl.col("a_start_ns") - origin).alias("gap_ns"),
    ).drop("_sp_end", "_bp_end")
    instances = _instances(nodes)
    inst = nodes.select("node", "instance").join(instances.select("instance", "inst"), on="instance", how="left")
    nodes = nodes.with_columns(inst.sort("node")["inst"])
    nodes = nodes.with_columns(_gate_nodes(nodes, instances))
    hosts, host_deps = host.chains(nodes, cpu, off)
    cols = ["node", "rank", "stream", "kind", "name", "start_ns", "end_ns", "dur_ns", "a_start_ns", "a_end_ns", "step",
            "ordinal", "occurrence", "stream_pred", "slack_ns", "bind_pred", "gap_ns", "inst", "gate_node", "wait_ns",
            "transfer_ns", "op", "pg", "bytes", "group_n", "k", "dimension", "intra_node"]
    nodes = nodes.select(cols)
    kernels = _kernels(rows, nodes, instances)
    return Graph(nodes=nodes, instances=_reported(instances, kernels), edges=_edges(nodes), declared=said,
                 clock=clock, steps=clock.to_reference(steps, prefix="a_"), kernels=kernels, members=members(rows),
                 gpu=gpu, cpu=cpu, groups=groups, pg_dimensions=pg_dimensions(groups) if groups is not None else {},
                 host=hosts, host_deps=host_deps)


def _kernels(rows: pl.DataFrame, nodes: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    """The comm-kernel table in its order, with its instance id and node (see ``Graph.kernels``)."""
    if "instance" not in rows.columns:  # a hand-built graph without communication
        return rows
    node = nodes.select("k", "node").drop_nulls("k")
    return (rows.join(instances.select("instance", "inst"), on="instance", how="left", maintain_order="left")
            .join(node, on="k", how="left", maintain_order="left"))


def _reported(instances: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """``instances`` with what the collectives report says of each (see ``Graph``), from its kernels' rows."""
    if "inst" not in kernels.columns or not {"seq", "has_meta", "a_start_ns"} <= set(kernels.columns):
        return instances  # a hand-built graph: no report
    report = (
        kernels.filter(pl.col("inst").is_not_null())
        .group_by("inst")
        .agg(
            pl.col("seq").min(),
            # a send/recv pair reads as one point-to-point transfer
            pl.when(pl.col("op").n_unique() > 1).then(pl.lit("send_recv")).otherwise(pl.col("op").first())
            .alias("collective_op"),
            pl.col("step").min().alias("collective_step"),
            pl.col("group_size").max(),
            pl.col("wait_ns").max().alias("max_wait_ns"),
            pl.col("wait_ns").sum().alias("total_wait_ns"),
            (pl.col("a_start_ns").max() - pl.col("a_start_ns").min()).alias("arrival_skew_ns"),
            (pl.col("a_end_ns").max() - pl.col("a_end_ns").min()).alias("end_skew_ns"),
            pl.col("a_start_ns").min().alias("first_start_ns"),
            pl.col("has_meta").all(),
            *[pl.col(c).first() for c in ("match_rule", "partial", "dimension", "intra_node") if c in kernels.columns],
        )
    )
    return instances.join(report, on="inst", how="left", maintain_order="left")


def _declared(nodes: pl.DataFrame) -> pl.DataFrame:
    """The trace's ``after`` (op keys on the rank) as node pairs: src, dst, src_end_ns. Only ops that started
    before it count (so a replay on them stays acyclic whatever the table says)."""
    key = nodes.select("rank", pl.col("op_key").alias("after"), pl.col("node").alias("src"),
                       pl.col("end_ns").alias("src_end_ns"))
    return (nodes.select(pl.col("node").alias("dst"), "rank", "after").explode("after").drop_nulls("after")
            .join(key, on=["rank", "after"]).filter(pl.col("src") < pl.col("dst"))
            .select("src", "dst", "src_end_ns").unique().sort("dst", "src"))


def _name_key() -> pl.Expr:
    """The name as a join key: its hash, null for no name (a null name matches nothing, as in a join on text)."""
    return pl.when(pl.col("name").is_not_null()).then(pl.col("name").hash()).alias("_nh")


def _comm_rows(rows: pl.DataFrame) -> pl.DataFrame:
    schema = {"rank": pl.Int32, "stream": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "name": pl.Utf8,
              "instance": pl.Utf8, "wait_ns": pl.Int64, "transfer_ns": pl.Int64, "op": pl.Utf8, "pg": pl.Utf8,
              "bytes": pl.Int64, "group_n": pl.Int64, "last_rank": pl.Int32, "inst_last": pl.Int32, "k": pl.UInt32,
              # a small code per node, not text: a million operations' text views would hold 16 MB, mostly null
              "dimension": pl.Enum(DIMENSIONS), "intra_node": pl.Boolean}
    if rows.height == 0:
        return pl.DataFrame(schema=schema)
    n = pl.coalesce(pl.col("group_size").cast(pl.Int64), pl.col("n_ranks").cast(pl.Int64)) if "n_ranks" in rows.columns \
        else pl.col("group_size").cast(pl.Int64)
    return rows.select(
        "rank", "stream", "start_ns", "end_ns", "name", "instance",
        pl.col("wait_ns").cast(pl.Int64), pl.col("transfer_ns").cast(pl.Int64), "op", "pg",
        pl.max_horizontal("in_bytes", "out_bytes").cast(pl.Int64).alias("bytes"), n.alias("group_n"),
        "last_rank", "inst_last", "k",
        *[pl.col(c) if c in rows.columns else pl.lit(None).alias(c) for c in ("dimension", "intra_node")],
    ).unique(["rank", "stream", "start_ns", "end_ns", "name"], keep="first").cast(schema)


def _instances(nodes: pl.DataFrame) -> pl.DataFrame:
    m = nodes.filter(pl.col("instance").is_not_null())
    return (
        m.group_by("instance")
        .agg(
            pl.len().alias("n"),
            pl.col("node").sort_by(pl.col("rank") != pl.col("inst_last"), "rank").first().alias("last_node"),
            pl.col("inst_last").first().alias("last_rank"),
            pl.col("transfer_ns").min(),
            pl.col("op").first(), pl.col("pg").first(), pl.col("bytes").max(),
            pl.coalesce(pl.col("group_n").max(), pl.len().cast(pl.Int64)).alias("group_n"),
            pl.col("rank").sort().alias("ranks"),
            pl.col("a_start_ns").min().alias("_first"),
        )
        .sort("_first", "instance")
        .drop("_first")
        .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("inst"))
    )


def _gate_nodes(nodes: pl.DataFrame, instances: pl.DataFrame) -> pl.Series:
    """Per node, the node of the rank it waited for in its instance (itself where none): the instance's last
    arriver's, looked up by instance id; only a ring hop's rows, which waited for their own peers, by join."""
    last = instances.sort("inst")["last_node"].to_numpy()
    inst = nodes["inst"].fill_null(-1).to_numpy()
    node = nodes["node"].to_numpy()
    gate = np.where(inst >= 0, last[np.maximum(inst, 0)] if last.size else 0, node)
    own = nodes.select((pl.col("last_rank") != pl.col("inst_last")).fill_null(False)).to_series()
    if own.any():
        rows = nodes.filter(own).select("node", "instance", "last_rank")
        hops = nodes.join(rows.select("instance").unique(), on="instance", how="semi")
        found = rows.join(hops.select("instance", pl.col("rank").alias("last_rank"), pl.col("node").alias("_gate")),
                          on=["instance", "last_rank"])
        gate[found["node"].to_numpy()] = found["_gate"].to_numpy()
    return pl.Series("gate_node", gate, dtype=pl.Int64)


def _edges(nodes: pl.DataFrame) -> pl.DataFrame:
    # ordered by (dst, kind, src); the kind sorts by a small code (its names' alphabetical order), not its text
    order = {k: i for i, k in enumerate(sorted(EDGE_KINDS))}
    # select, then filter: filtering the wide node frame first copied all its columns (~200 MB here)
    stream = nodes.select(
        pl.col("stream_pred").alias("src"), pl.col("node").alias("dst"), pl.lit(order["stream"], pl.Int8).alias("_k")
    ).filter(pl.col("src").is_not_null())
    binding = nodes.select(
        pl.col("bind_pred").alias("src"), pl.col("node").alias("dst"), pl.lit(order["binding"], pl.Int8).alias("_k")
    ).filter(pl.col("src").is_not_null())
    coll = nodes.select(pl.col("gate_node").alias("src"), pl.col("node").alias("dst"),
                        pl.lit(order["collective"], pl.Int8).alias("_k")).filter(pl.col("src") != pl.col("dst"))
    names = pl.Series(sorted(EDGE_KINDS))
    return (pl.concat([stream, binding, coll.cast({"src": pl.Int64, "dst": pl.Int64})]).sort("dst", "_k", "src")
            .select("src", "dst", pl.col("_k").replace_strict(list(range(names.len())), names).alias("kind")))
