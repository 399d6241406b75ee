"""Paths -> TraceSet: discover files, read each rank (in worker processes), assemble the canonical tables.

A rank that fails to load becomes a ``Skipped`` entry, never an exception, as long as one rank loads.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from . import collectives
from .errors import CommscopeError, TraceError, UsageError
from .ingest import ReadOptions, reader_for
from .ingest.discover import TraceFile, discover
from .model import (
    COMM_CALL_SCHEMA,
    CPU_SCHEMA,
    GPU_SCHEMA,
    STEP_SCHEMA,
    RankTrace,
    Skipped,
    TraceSet,
    conform,
)
from .timeline import gpu_step_windows


@dataclass(frozen=True)
class LoadOptions:
    rank_map: dict[str, int] | None = None
    step_marker: str | None = None
    jobs: int | None = None  # None: the cores
    ranks: tuple[int, ...] | None = None  # keep only these ranks
    cache: bool = True
    progress: Callable[[str], None] | None = None


def read_one(tf: TraceFile, opts: ReadOptions, use_cache: bool = True) -> list[RankTrace] | Skipped:
    """Read one file; a user-fixable problem becomes a Skipped entry (picklable for workers)."""
    try:
        if use_cache:
            from .ingest.cache import cached_read

            return cached_read(tf, opts)
        return reader_for(tf.format)(tf.path, opts)
    except CommscopeError as exc:
        return Skipped(str(tf.path), str(exc))
    except Exception as exc:  # noqa: BLE001 - a broken rank must never sink the others
        return Skipped(str(tf.path), f"{tf.path}: unexpected error while reading ({type(exc).__name__}: {exc})")


def load(paths: list[Path], options: LoadOptions | None = None) -> TraceSet:
    options = options or LoadOptions()
    files = discover(paths)
    results = _read_all(files, options)
    traces: list[RankTrace] = []
    skipped: list[Skipped] = []
    for res in results:
        if isinstance(res, Skipped):
            skipped.append(res)
        else:
            traces.extend(res)
    if not traces:
        if len(skipped) == 1:
            raise TraceError(skipped[0].path, skipped[0].reason.split(": ", 1)[-1])
        raise UsageError("no rank could be read: " + "; ".join(s.reason for s in skipped))
    traces, warnings = _settle_ranks(traces)
    if options.ranks is not None:
        traces = [t for t in traces if t.meta.rank in options.ranks]
        if not traces:
            raise UsageError(f"none of the requested ranks {list(options.ranks)} is in the traces")
    warnings += [f"skipped {s.path}: {s.reason}" for s in skipped]
    return assemble(traces, skipped, warnings)


def _read_all(files: list[TraceFile], options: LoadOptions) -> list[list[RankTrace] | Skipped]:
    jobs = options.jobs or os.cpu_count() or 1
    opts = [ReadOptions(rank_hint=tf.rank_hint, rank_map=dict(options.rank_map or {}),
                        step_marker=options.step_marker) for tf in files]
    if jobs <= 1 or len(files) <= 1:
        out = []
        for tf, o in zip(files, opts):
            out.append(read_one(tf, o, options.cache))
            if options.progress:
                options.progress(tf.path.name)
        return out
    # spawn, not fork: forking after polars has run threads deadlocks the workers
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(files)), mp_context=ctx) as pool:
        futures = [pool.submit(read_one, tf, o, options.cache) for tf, o in zip(files, opts)]
        out = []
        for tf, f in zip(files, futures):
            out.append(f.result())
            if options.progress:
                options.progress(tf.path.name)
        return out


def _settle_ranks(traces: list[RankTrace]) -> tuple[list[RankTrace], list[str]]:
    """Give rank-less traces the free rank numbers in file order; duplicate ranks are an error."""
    warnings: list[str] = [w for t in traces for w in t.meta.warnings]
    seen: dict[int, str] = {}
    for t in traces:
        if t.meta.rank >= 0:
            if t.meta.rank in seen:
                raise UsageError(
                    f"rank {t.meta.rank} appears twice: {seen[t.meta.rank]} and {t.meta.source} "
                    "(pass each rank once, or fix ranks with --rank-map FILE=RANK)"
                )
            seen[t.meta.rank] = t.meta.source
    free = (r for r in range(10**9) if r not in seen)
    settled = []
    for t in traces:
        if t.meta.rank < 0:
            r = next(free)
            warnings.append(f"{Path(t.meta.source).name}: no rank in the trace or file name; assumed rank {r} "
                            "(use --rank-map to set it)")
            t = _with_rank(t, r, "assumed")
        settled.append(t)
    return sorted(settled, key=lambda t: t.meta.rank), warnings


def _with_rank(t: RankTrace, rank: int, source: str) -> RankTrace:
    def fix(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank")) if "rank" in df.columns else df

    return RankTrace(
        meta=replace(t.meta, rank=rank, rank_source=source),
        gpu=fix(t.gpu), cpu=fix(t.cpu), comm_calls=fix(t.comm_calls), steps=fix(t.steps),
        steps_on_gpu=t.steps_on_gpu,
    )


def assemble(traces: list[RankTrace], skipped: list[Skipped], warnings: list[str]) -> TraceSet:
    gpu = pl.concat([conform(t.gpu, GPU_SCHEMA) for t in traces])
    cpu = pl.concat([conform(t.cpu, CPU_SCHEMA) for t in traces])
    calls = pl.concat([conform(t.comm_calls, COMM_CALL_SCHEMA) for t in traces])
    host_steps = [conform(t.steps, STEP_SCHEMA) for t in traces if not t.steps_on_gpu]
    gpu_steps = [conform(t.steps, STEP_SCHEMA) for t in traces if t.steps_on_gpu]
    steps = pl.concat([*gpu_steps, conform(pl.DataFrame(), STEP_SCHEMA)])
    if host_steps:
        steps = pl.concat([steps, gpu_step_windows(pl.concat(host_steps), gpu, cpu)])
    steps = steps.sort("rank", "start_ns")
    no_steps = [t.meta.rank for t in traces if t.steps.height == 0]
    if no_steps:
        warnings.append(f"no step markers on rank(s) {_ranks_text(no_steps)}: analyzed as one window")
    groups = {t.meta.rank: t.meta.process_groups for t in traces}
    table = collectives.build_table(gpu, cpu, calls, steps, groups)
    missing = table.filter(~pl.col("has_meta"))
    if missing.height:
        warnings.append(
            f"{missing.height} of {table.height} communication kernels have no collective metadata "
            "(launched before the profiling window, or no record_param_comms): operation guessed from the kernel name"
        )
    return TraceSet(
        ranks=tuple(t.meta for t in traces), gpu=gpu, cpu=cpu, collectives=table, steps=steps,
        skipped=tuple(skipped), warnings=tuple(warnings),
    )


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))
