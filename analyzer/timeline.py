"""Kernel classification, interval unions and step windows over GPU timelines.

Classification lives here and only here: every reader calls :func:`gpu_kind` so that "is this a
communication kernel" is decided once (HTA decides it twice and one copy went stale).
"""

from __future__ import annotations

import re

import polars as pl

from .rules import STEP_MARKER

# Collective / point-to-point kernels of every library seen in real traces:
# NCCL old (ncclKernel_*) and new (ncclDevKernel_*), RCCL (ncclDevKernel_Generic, rccl*), MSCCL(++),
# Habana HCCL, oneCCL, NVSHMEM, DeepEP, TransformerEngine userbuffers, vLLM custom all-reduce and
# PyTorch symmetric-memory kernels (multimem_all_reduce_kernel, one_shot_all_reduce_kernel, ...).
COMM_KERNEL_PATTERN = (
    r"(?i)nccl|rccl|msccl|hccl|oneccl|xccl|nvshmem|deep_ep|userbuffers|cross_device_reduce"
    r"|multimem_all_|one_shot_all_reduce|two_shot_all_reduce|all_?reduce_kernel|all_?gather_kernel"
    r"|reduce_?scatter_kernel|all_?to_?all_kernel"
)
_COMM_RE = re.compile(COMM_KERNEL_PATTERN)

# Raw event categories (Kineto ``cat``; readers of other formats map to these) -> GPU kind.
_CATEGORY_KIND = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
}

# Operation names: from a kernel name (NCCL/RCCL naming) and from PyTorch's "Collective name".
_KERNEL_OP_RULES: tuple[tuple[str, str], ...] = (
    (r"(?i)all_?reduce", "all_reduce"),
    (r"(?i)all_?gather", "all_gather"),
    (r"(?i)reduce_?scatter", "reduce_scatter"),
    (r"(?i)all_?to_?all", "all_to_all"),
    (r"(?i)broadcast", "broadcast"),
    (r"(?i)sendrecv|send_recv", "send_recv"),
    (r"(?i)_send|send_", "send"),
    (r"(?i)_recv|recv_", "recv"),
    (r"(?i)_reduce", "reduce"),
)

_COLLECTIVE_NAME_OP = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "_allreduce_base": "all_reduce",
    "allgather": "all_gather",
    "all_gather": "all_gather",
    "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "allgather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "reduce": "reduce",
    "send": "send",
    "recv": "recv",
    "recvanysource": "recv",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "coalesced": "coalesced",
}


def is_comm_kernel(name: str) -> bool:
    return _COMM_RE.search(name) is not None


def gpu_kind(category: pl.Expr, name: pl.Expr) -> pl.Expr:
    """Vectorized GPU kind from a raw category and kernel name (the one rule)."""
    base = category.replace_strict(_CATEGORY_KIND, default="other", return_dtype=pl.Utf8)
    return (
        pl.when(base == "kernel")
        # a kernel without a name is neither compute nor comm: counted and said (``sanity``), never guessed
        .then(pl.when(name.is_null()).then(pl.lit("other"))
              .when(name.str.contains(COMM_KERNEL_PATTERN)).then(pl.lit("comm")).otherwise(pl.lit("compute")))
        .otherwise(base)
    )


def op_from_kernel_name(name: pl.Expr) -> pl.Expr:
    """Collective operation guessed from an NCCL/RCCL kernel name (used when metadata is missing)."""
    expr: pl.Expr = pl.lit(None, dtype=pl.Utf8)
    for pattern, op in reversed(_KERNEL_OP_RULES):
        expr = pl.when(name.str.contains(pattern)).then(pl.lit(op)).otherwise(expr)
    return expr


def op_from_collective_name(name: str | None) -> str | None:
    """PyTorch ``record_param_comms`` "Collective name" (or NVTX ``ncclAllReduce``) -> canonical op."""
    if not name:
        return None
    key = name.strip().lower()
    if key.startswith("nccl"):
        key = key[4:]
    key = key.replace("-", "_")
    if key in _COLLECTIVE_NAME_OP:
        return _COLLECTIVE_NAME_OP[key]
    squashed = key.replace("_", "")
    for k, v in _COLLECTIVE_NAME_OP.items():
        if k.replace("_", "") == squashed:
            return v
    return key


BUSY_KINDS = ("compute", "comm", "memcpy", "memset", "other")


# ----------------------------------------------------------------------------- interval algebra


def union(df: pl.DataFrame, by: list[str], start: str = "start_ns", end: str = "end_ns") -> pl.DataFrame:
    """Merge overlapping intervals within each group; returns disjoint sorted segments."""
    if df.height == 0:
        return df.select([*by, start, end]).clear()
    return (
        df.lazy()
        .select([*by, start, end])
        .filter(pl.col(end) > pl.col(start))
        .sort([*by, start])
        .with_columns(pl.col(end).cum_max().shift(1).over(by).alias("_prev"))
        .with_columns(
            (pl.col("_prev").is_null() | (pl.col(start) > pl.col("_prev"))).cum_sum().over(by).alias("_seg")
        )
        .group_by([*by, "_seg"])
        .agg(pl.col(start).min(), pl.col(end).max())
        .sort([*by, start])
        .drop("_seg")
        .collect()
    )


# ----------------------------------------------------------------------------- step windows


def launches(cpu: pl.DataFrame) -> pl.DataFrame:
    """The host launch of each GPU operation (rank, correlation, tid, launch_ns): one row per correlation.

    A runtime call (``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaMemcpyAsync``, ...) shares its
    correlation id with the GPU operation it launched; this is the one place that link is made.
    """
    calls = cpu.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
    # the first call of each (rank, correlation), in order: a filter, 2.3x faster than an order-keeping unique
    return calls.filter(pl.struct("rank", "correlation").is_first_distinct()).select(
        "rank", "correlation", "tid", pl.col("start_ns").alias("launch_ns"))


def gpu_step_windows(steps: pl.DataFrame, gpu: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """Move host-side step windows onto the GPU timeline.

    A host step (``ProfilerStep#N`` on the CPU) ends long before its kernels do. Each kernel belongs
    to the step whose host window contains its launch (linked by correlation); a step's GPU window
    runs from its first kernel's start to the next step's first kernel start (the last step ends at
    its last kernel's end), so windows tile the GPU timeline and idle between steps is counted.
    Ranks without launch links keep their host windows.
    """
    if steps.height == 0:
        return steps
    work = gpu.filter(pl.col("correlation").is_not_null()).join(
        launches(cpu).select("rank", "correlation", "launch_ns"), on=["rank", "correlation"], how="inner"
    )
    if work.height == 0:
        return steps
    host = steps.sort("start_ns").select(
        "rank", "step", pl.col("start_ns").alias("h_start"), pl.col("end_ns").alias("h_end")
    )
    tagged = (
        work.sort("launch_ns")
        .join_asof(host, left_on="launch_ns", right_on="h_start", by="rank", strategy="backward", check_sortedness=False)
        .filter(pl.col("launch_ns") <= pl.col("h_end"))
    )
    per_step = tagged.group_by("rank", "step").agg(
        pl.col("start_ns").min().alias("g_start"), pl.col("end_ns").max().alias("g_end")
    )
    moved = (
        per_step.sort("rank", "g_start")
        .with_columns(pl.col("g_start").shift(-1).over("rank").alias("next_start"))
        .select(
            "rank",
            "step",
            pl.col("g_start").alias("start_ns"),
            pl.coalesce("next_start", "g_end").alias("end_ns"),
        )
    )
    linked_ranks = moved["rank"].unique()
    kept = steps.filter(~pl.col("rank").is_in(linked_ranks.implode()))
    return pl.concat([moved.select(steps.columns).cast(dict(steps.schema)), kept]).sort("rank", "start_ns")


MIN_STEP_COVERAGE = 1.0  # any GPU work outside the step windows (other threads, between steps): tile
DEFAULT_STEP_MARKER = STEP_MARKER


def step_coverage(steps: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Per rank: the share of its GPU time (from its first step on) that falls inside its step windows.

    Kernels launched from other threads than the annotating one (autograd engine, FSDP hooks, side
    streams) fall outside Kineto's GPU-side ``ProfilerStep#N``; this measures how much did.
    """
    work = gpu.filter(pl.col("kind").is_in(BUSY_KINDS) & (pl.col("end_ns") > pl.col("start_ns"))).select(
        "rank", "start_ns", "end_ns"
    )
    windows = steps.select("rank", pl.col("start_ns").alias("w_start"), pl.col("end_ns").alias("w_end")).sort("w_start")
    first = steps.group_by("rank").agg(pl.col("start_ns").min().alias("first"))
    inside = (
        work.join(first, on="rank").filter(pl.col("start_ns") >= pl.col("first")).sort("start_ns")
        .join_asof(windows, left_on="start_ns", right_on="w_start", by="rank", strategy="backward",
                   check_sortedness=False)
        .with_columns((pl.min_horizontal("end_ns", "w_end") - pl.col("start_ns")).clip(0).fill_null(0).alias("_in"))
    )
    return inside.group_by("rank").agg(
        (pl.col("_in").sum() / (pl.col("end_ns") - pl.col("start_ns")).sum()).alias("coverage")
    ).sort("rank")


def tile_steps(steps: pl.DataFrame, gpu: pl.DataFrame, ranks: pl.Series | list[int]) -> pl.DataFrame:
    """Step N of each listed rank runs from its start to the start of step N+1; the last to the rank's last GPU event."""
    last = gpu.group_by("rank").agg(pl.col("end_ns").max().alias("_last"))
    tiled = (
        steps.filter(pl.col("rank").is_in(list(ranks)))
        .sort("rank", "start_ns")
        .join(last, on="rank", how="left")
        .with_columns(
            pl.coalesce(pl.col("start_ns").shift(-1).over("rank"),
                        pl.max_horizontal("end_ns", "_last")).alias("end_ns")
        )
        .drop("_last")
    )
    kept = steps.filter(~pl.col("rank").is_in(list(ranks)))
    return pl.concat([kept, tiled.select(steps.columns)]).sort("rank", "start_ns")


def host_step_windows(cpu: pl.DataFrame, marker: str | None = None) -> pl.DataFrame:
    """Host-side step windows (rank, step, start_ns, end_ns) from annotations named like the step marker."""
    pattern = marker or DEFAULT_STEP_MARKER
    ann = cpu.filter((pl.col("kind") == "annotation") & pl.col("name").str.contains(pattern))
    if ann.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
    number = pl.col("name").str.extract(r"(\d+)", 1).cast(pl.Int64, strict=False)
    return (
        ann.sort("rank", "start_ns")
        .with_columns(pl.coalesce(number, pl.int_range(pl.len()).over("rank").cast(pl.Int64)).alias("step"))
        .group_by("rank", "step").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort("rank", "start_ns")
    )
