"""Canonical tables: the one shape every reader produces and every metric consumes.

Times are int64 nanoseconds on the rank's own clock (``*_ns`` columns). Each table has one
declared schema here; readers call :func:`conform` once, and downstream code trusts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

GPU_KINDS = ("compute", "comm", "memcpy", "memset", "sync", "other")
CPU_KINDS = ("op", "annotation", "runtime", "python")

GPU_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "device": pl.Int32,
    "stream": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "name": pl.Utf8,
    "kind": pl.Utf8,
    "correlation": pl.Int64,
}

# Kept where a reader provides them (op tables): the rank's pipeline stage and dp rank, the op's micro-batch,
# virtual stage (model chunk) and its global index, and its ordinal among its type's ops in the step.
GPU_OPTIONAL: dict[str, pl.DataType] = {
    "stage": pl.Int32,
    "dp_rank": pl.Int32,
    "micro_batch": pl.Int32,
    "chunk": pl.Int32,
    "global_chunk": pl.Int32,
    "op_seq": pl.Int32,
    # what the op waits for on its rank (op tables: the program order, optable_deps.py): a per-rank id, and
    # the ids of the ops it waits for; the graph binds it to the last of them to end
    "op_key": pl.Int64,
    "after": pl.List(pl.Int64),
    # bytes a copy moved, where the rank has peer copies (communication on the copy engine; Kineto's memcpy
    # "bytes", Nsight's memcpy bytes); kept only then, so a job without them carries no column
    "bytes": pl.Int64,
}

CPU_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "tid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "name": pl.Utf8,
    "kind": pl.Utf8,
    "correlation": pl.Int64,
    "external_id": pl.Int64,
}

# Communication metadata as the host saw it: one row per collective call (Kineto
# ``record_param_comms``, an NCCL NVTX range). ``collectives.build`` links each row to the kernel it
# launched through a runtime launch on the same thread inside the range.
COMM_CALL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "tid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "op": pl.Utf8,
    "pg": pl.Utf8,
    "pg_desc": pl.Utf8,
    "dtype": pl.Utf8,
    "in_bytes": pl.Int64,
    "out_bytes": pl.Int64,
    "group_size": pl.Int32,
    "group_ranks": pl.Utf8,  # comma-separated global ranks, e.g. "0,2"
    "peer": pl.Int32,  # send/recv: the peer's global rank, where recorded
    "peer_group_rank": pl.Int32,  # send/recv: the peer's rank within the group (resolved via group_ranks)
    "in_splits": pl.Utf8,  # all_to_all(v) split sizes per peer, comma-separated (dim-0 rows)
    "out_splits": pl.Utf8,
    # a catalogue launcher (comm_catalogue.toml: symm_mem::*, vllm::all_reduce, nccl:*, ...): the host op's name;
    # null for a call that records its metadata (record_param_comms, an NCCL NVTX range)
    "launcher": pl.Utf8,
}

COLLECTIVE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "pg": pl.Utf8,
    "pg_desc": pl.Utf8,
    "seq": pl.Int64,
    "op": pl.Utf8,
    "dtype": pl.Utf8,
    "in_bytes": pl.Int64,
    "out_bytes": pl.Int64,
    "group_size": pl.Int32,
    "group_ranks": pl.Utf8,
    "stream": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "step": pl.Int64,
    "has_meta": pl.Boolean,
    "name": pl.Utf8,
    "peer": pl.Int32,  # send/recv: the peer's global rank, null when unknown
    # a batched SendRecv kernel (batch_isend_irecv): the one rank its batch sends to / receives from (null: none
    # recorded, or several)
    "send_peer": pl.Int32,
    "recv_peer": pl.Int32,
    "in_splits": pl.Utf8,
    "out_splits": pl.Utf8,
    # the communication catalogue's word on the row (comm_catalogue.toml): family (nccl, deepep, symm_mem,
    # copy_engine, user, ...), engine (sm, rdma, copy_engine) and role (payload, metadata, sync)
    "family": pl.Utf8,
    "engine": pl.Utf8,
    "role": pl.Utf8,
}

STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "step": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}


# NCCL Inspector (always-on per-collective logs): one row per logged operation per rank. Durations are the
# plugin's GPU-clock kernel times; ``start_ns``/``end_ns`` only with verbose logs (host clock). ``comm`` indexes
# ``INSPECTOR_COMM_SCHEMA`` rows; ``rank`` is the global rank (null when it could not be mapped).
INSPECTOR_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "comm": pl.Int32,
    "comm_rank": pl.Int32,
    "p2p": pl.Boolean,
    "op": pl.Categorical,
    "seq": pl.Int64,
    "bytes": pl.Int64,  # the plugin's message size (per rank for all_gather / reduce_scatter)
    "exec_ns": pl.Int64,
    "timing_source": pl.Categorical,
    "busbw_gbps": pl.Float32,  # as logged: from this rank's own kernel time, its waits included
    "algo": pl.Categorical,
    "proto": pl.Categorical,
    "peer": pl.Int32,  # p2p: the peer's global rank
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}

INSPECTOR_COMM_SCHEMA: dict[str, pl.DataType] = {
    "comm": pl.Int32,
    "id": pl.Utf8,  # the communicator hash the plugin logs
    "name": pl.Utf8,
    "n_ranks": pl.Int32,
    "nnodes": pl.Int32,
    "ranks": pl.Utf8,  # global ranks in communicator-rank order, comma-separated ("?" where no log names one)
}


@dataclass(frozen=True)
class InspectorLog:
    """What the NCCL Inspector reader keeps beside the canonical tables (``metrics.inspector`` reads it)."""

    records: pl.DataFrame  # INSPECTOR_SCHEMA
    comms: pl.DataFrame  # INSPECTOR_COMM_SCHEMA
    verbose: bool  # kernel timestamps were logged: the canonical gpu/collectives tables hold the operations
    counts: dict[str, int] = field(default_factory=dict)  # lines read, skipped by reason
    folded: object | None = None  # large logs: ``ingest.inspector_fold.Folded`` aggregates instead of ``records``


def empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def conform(df: pl.DataFrame, schema: dict[str, pl.DataType],
            optional: dict[str, pl.DataType] | None = None) -> pl.DataFrame:
    """Select and cast ``df`` to ``schema`` (missing columns become null), in schema order; the ``optional``
    columns that ``df`` has follow, cast."""
    if df.width == 0 or df.height == 0 and not set(schema) <= set(df.columns):
        return empty(schema)
    extra = {n: t for n, t in (optional or {}).items() if n in df.columns}
    if list(df.schema.items()) == list(schema.items()) + list(extra.items()):
        return df  # already canonical (cache entries are): nothing to do, for each of many ranks
    cols = []
    for name, dtype in schema.items():
        if name in df.columns:
            cols.append(pl.col(name).cast(dtype, strict=False))
        else:
            cols.append(pl.lit(None, dtype=dtype).alias(name))
    return df.select(cols + [pl.col(n).cast(t, strict=False) for n, t in extra.items()])


@dataclass(frozen=True)
class ProcessGroup:
    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class RankMeta:
    rank: int
    source: str
    format: str  # "kineto" | "nsys" | "nccl_inspector"
    world_size: int | None = None
    rank_source: str = "distributedInfo"  # where the rank number came from
    host: str | None = None
    devices: tuple[str, ...] = ()
    process_groups: tuple[ProcessGroup, ...] = ()
    versions: tuple[tuple[str, str], ...] = ()
    clock_base_ns: int | None = None  # Kineto baseTimeNanoseconds, nsys utcEpochNs
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankTrace:
    """What one reader returns for one rank: its canonical tables and metadata."""

    meta: RankMeta
    gpu: pl.DataFrame
    cpu: pl.DataFrame
    comm_calls: pl.DataFrame
    steps: pl.DataFrame
    steps_on_gpu: bool = False  # step windows already on the GPU timeline (GPU-side annotations)
    # the rank's collectives table where the reader knows it whole (op tables: groups from the layout, no host
    # calls to link); None: built from comm_calls and the kernels (collectives.build_table)
    collectives: pl.DataFrame | None = None


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True)
class TraceSet:
    """All ranks of one run, in canonical tables (see DESIGN.md)."""

    ranks: tuple[RankMeta, ...]
    gpu: pl.DataFrame
    cpu: pl.DataFrame
    collectives: pl.DataFrame
    steps: pl.DataFrame
    skipped: tuple[Skipped, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    inspector: InspectorLog | None = None  # NCCL Inspector input only
    job_key: str | None = None  # the job's entry in the cache (ingest/derived.py); None when not cached

    @property
    def rank_ids(self) -> list[int]:
        return [m.rank for m in self.ranks]

    @property
    def format(self) -> str:
        fmts = sorted({m.format for m in self.ranks})
        return fmts[0] if len(fmts) == 1 else "+".join(fmts)

    @property
    def world_size(self) -> int | None:
        sizes = [m.world_size for m in self.ranks if m.world_size]
        return max(sizes) if sizes else None
