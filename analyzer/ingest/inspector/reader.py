"""NCCL Inspector logs (NVIDIA/nccl ``plugins/profiler/inspector``, JSON mode) -> one TraceSet.

The plugin writes one ``<hostname>-pid<pid>.log`` per process (``inspector.cc``), one JSON object per
line per completed operation (``inspector_json.cc``, format ``v4.0``)::

    {"header": {"id", "comm_name", "rank", "n_ranks", "nnodes"},          # the communicator; rank within it
     "metadata": {"inspector_output_format_version", "git_rev", "rec_mechanism", "dump_timestamp_us",
                  "hostname", "pid"},
     "coll_perf": {"coll", "coll_sn", "coll_msg_size_bytes", "coll_exec_time_us", "coll_timing_source",
                   "coll_algobw_gbs", "coll_busbw_gbs",
                   # NCCL_INSPECTOR_DUMP_VERBOSE=1 only (host gettimeofday microseconds):
                   "event_trace_sn": {...}, "event_trace_ts": {"coll_start_ts", "coll_stop_ts",
                       "kernel_events": [{"channel_id", "kernel_start_ts", "kernel_stop_ts", "kernel_record_ts"}]}}}
    (or "p2p_perf": {"p2p", "p2p_sn", "p2p_peer", "p2p_msg_size_bytes", "p2p_exec_time_us", ...})

``coll_exec_time_us`` is the longest channel's kernel time on the GPU clock; ``coll_sn`` is NCCL's
sequence number within the communicator, the same on every member, so ``(id, coll_sn)`` names one
instance across ranks. The JSON has no algorithm or protocol (only the Prometheus mode labels them);
``coll_algo`` / ``coll_proto`` are read where a writer adds them.

Reading one file is ``inspector_decode``; this module joins a job's files. Ranks: a communicator's ``rank``
is the rank within it; a process (hostname + pid) is one global rank, numbered by its rank in the largest
communicator every process belongs to (``inspector_ranks``). With kernel timestamps (verbose mode) each
operation also becomes a communication kernel and a ``collectives`` row, so the trace analysis runs on it.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from ...errors import TraceError, UsageError
from ...model import (
    COLLECTIVE_SCHEMA,
    CPU_SCHEMA,
    GPU_SCHEMA,
    INSPECTOR_COMM_SCHEMA,
    INSPECTOR_SCHEMA,
    STEP_SCHEMA,
    InspectorLog,
    RankMeta,
    TraceSet,
    conform,
    empty,
)
from .decode import FORMAT, OPS, LogFile, concat, header_frames, read_file, sniff
from .ranks import Ranks, map_ranks

# operations with timestamps put on the timeline at most (the latest ones): the trace analysis took 967 MB at
# peak for 64 ranks x 5 k operations (benchmarks/inspector_bench.py --verbose)
TIMELINE_MAX_RECORDS = 200_000
# logs larger than this (bytes on disk) are streamed (``inspector_stream``): memory flat in the record count
STREAM_MIN_BYTES = int(os.environ.get("COMMSCOPE_INSPECTOR_STREAM_BYTES", 256 << 20))


def read(files: list[Path], jobs: int | None = None) -> TraceSet:
    """All logs of one job -> a TraceSet (verbose logs fill ``gpu`` and ``collectives``) with ``inspector`` set.
    Files are decoded in ``jobs`` worker processes (default: the cores), each file's columns sent back."""
    jobs = min(jobs or os.cpu_count() or 1, len(files))
    if sum(_size(p) for p in files) >= STREAM_MIN_BYTES:
        return _streamed(files, jobs)
    if jobs <= 1:
        return assemble([read_file(p) for p in files])
    from concurrent.futures import ProcessPoolExecutor

    from ..workers import no_main_reimport, worker_context

    with no_main_reimport(), ProcessPoolExecutor(max_workers=jobs, mp_context=worker_context()) as pool:
        parsed = list(pool.map(read_file, files, chunksize=max(1, len(files) // (4 * jobs))))
    return assemble(parsed)


def assemble(parsed: list[LogFile]) -> TraceSet:
    warnings: list[str] = []
    for f in parsed:
        warnings.extend(_file_warnings(f))
    usable = [f for f in parsed if f.records.filter(pl.col("hdr") >= 0).height]
    if not usable:
        first = parsed[0]
        raise TraceError(first.path, "has no NCCL Inspector record that could be read",
                         "check that the files are the plugin's JSON logs (NCCL_INSPECTOR_PROM_DUMP=0)")
    # one table of (file, header) and (file, metadata) for every record
    hdrs, metas, recs = [], [], []
    for fi, f in enumerate(usable):
        hdrs.extend({"file": fi, "hdr": i, "id": h.id, "name": h.comm_name, "comm_rank": h.rank, "n_ranks": h.n_ranks,
                     "nnodes": h.nnodes} for i, h in enumerate(f.headers))
        metas.extend({"file": fi, "meta": i, "hostname": m.hostname or None, "pid": m.pid if m.pid >= 0 else None,
                      "version": m.inspector_output_format_version} for i, m in enumerate(f.metas))
        recs.append(concat([f.records.filter(pl.col("hdr") >= 0)]).with_columns(
            pl.lit(fi, dtype=pl.Int32).alias("file")))
        f.records = f.records.clear()  # the job's table is built from ``recs``: the file's copy is not needed again
    hdr_df, meta_df = header_frames(hdrs, metas, warnings)
    names = [str(f.path) for f in usable]
    used = pl.concat([r.select("file", "hdr", "meta").unique() for r in recs])
    colls = pl.concat([r.filter(~pl.col("p2p")).select("file", "hdr").unique() for r in recs])
    ranks = map_ranks(hdr_df, meta_df, used, names, set(colls.join(hdr_df, on=["file", "hdr"])["id"].to_list()))
    warnings.extend(ranks.warnings)
    op_names = {o: OPS.get(o, o.lower()) for r in recs for o in r["op"].unique().drop_nulls().to_list()}
    # file by file (peak memory: the raw and the mapped table, not several copies of the job's), then chunks
    # put together without a copy
    for i in range(len(recs)):
        recs[i] = _mapped(recs[i], ranks, op_names)
    table = conform(pl.concat(recs, rechunk=False), INSPECTOR_SCHEMA)
    del recs
    verbose = table.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null() & pl.col("rank")
                           .is_not_null())
    if verbose.height > TIMELINE_MAX_RECORDS:
        verbose, since = _latest(verbose, TIMELINE_MAX_RECORDS)
        warnings.append(f"{table.height:,} records have kernel timestamps: the timeline (the trace analysis) covers "
                        f"the {verbose.height:,} operations from {since} on, the Inspector tables all of them")
    if 0 < verbose.height < table.height:
        warnings.append(f"{table.height - verbose.height} of {table.height} records have no kernel timestamps "
                        "(NCCL_INSPECTOR_DUMP_VERBOSE=0 for part of the job): only the others are on the timeline")
    gpu, coll, dropped = _timeline(verbose, ranks.comms)
    if dropped:
        warnings.append(f"{dropped} logged operations are absent from some members' logs (a ring buffer overflowed, "
                        "or a log ends early): left out of the timeline, kept in the Inspector tables")
    if verbose.height:
        warnings.append("NCCL Inspector logs hold communication kernels only: the time between them counts as idle, "
                        "so a straggler called host-bound was late outside NCCL (its compute or its host; a "
                        "profiler trace tells which)")
    if verbose.height == 0:
        warnings.append("no kernel timestamps (NCCL_INSPECTOR_DUMP_VERBOSE=0): per-communicator bandwidth and "
                        "rank outliers come from kernel times only; set NCCL_INSPECTOR_DUMP_VERBOSE=1 for the "
                        "timeline, arrival skew and the full straggler analysis")
    counts = {"files": len(parsed), "lines": sum(f.lines for f in parsed), "records": table.height,
              "bad_lines": sum(f.bad for f in parsed), "unknown_records": sum(f.unknown for f in parsed),
              "truncated_files": sum(f.truncated_tail for f in parsed), "unmapped_records":
              table.filter(pl.col("rank").is_null()).height, "timeline_records": coll.height}
    metas_out = tuple(
        RankMeta(rank=r, source=src, format=FORMAT, world_size=ranks.world_size, rank_source=ranks.rank_source,
                 host=host, process_groups=ranks.groups_of(r))
        for r, src, host in ranks.processes)
    return TraceSet(ranks=metas_out, gpu=gpu, cpu=empty(CPU_SCHEMA), collectives=coll, steps=empty(STEP_SCHEMA),
                    warnings=tuple(warnings),
                    inspector=InspectorLog(table, conform(ranks.comms, INSPECTOR_COMM_SCHEMA), verbose.height > 0,
                                           counts))


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _streamed(files: list[Path], jobs: int) -> TraceSet:
    from .stream import read_streaming

    log, warnings, verbose, ranks = read_streaming(files, TIMELINE_MAX_RECORDS, jobs, _mapped, _file_warnings)
    n = log.counts["verbose_records"]
    if verbose.height:
        verbose, since = _latest(verbose, TIMELINE_MAX_RECORDS)
        if n > verbose.height:
            warnings.append(f"{n:,} records have kernel timestamps: the timeline (the trace analysis) covers the "
                            f"{verbose.height:,} operations from {since} on, the Inspector tables all of them")
    gpu, coll, dropped = _timeline(verbose, ranks.comms)
    if dropped:
        warnings.append(f"{dropped} logged operations are absent from some members' logs (or fall at the edge of "
                        "the timeline's window): left out of the timeline, kept in the Inspector tables")
    if n:
        warnings.append("NCCL Inspector logs hold communication kernels only: the time between them counts as idle, "
                        "so a straggler called host-bound was late outside NCCL (its compute or its host; a "
                        "profiler trace tells which)")
    else:
        warnings.append("no kernel timestamps (NCCL_INSPECTOR_DUMP_VERBOSE=0): per-communicator bandwidth and "
                        "rank outliers come from kernel times only; set NCCL_INSPECTOR_DUMP_VERBOSE=1 for the "
                        "timeline, arrival skew and the full straggler analysis")
    log.counts["timeline_records"] = coll.height
    metas_out = tuple(
        RankMeta(rank=r, source=src, format=FORMAT, world_size=ranks.world_size, rank_source=ranks.rank_source,
                 host=host, process_groups=ranks.groups_of(r))
        for r, src, host in ranks.processes)
    return TraceSet(ranks=metas_out, gpu=gpu, cpu=empty(CPU_SCHEMA), collectives=coll, steps=empty(STEP_SCHEMA),
                    warnings=tuple(warnings), inspector=log)


def _mapped(raw: pl.DataFrame, ranks: Ranks, op_names: dict[str, str]) -> pl.DataFrame:
    """One file's raw columns with global ranks, communicators and peers: small lookup tables mapped by integer
    keys (a join would copy every column)."""
    wide = 1 << 31
    meta_key = pl.col("file").cast(pl.Int64) * wide + pl.col("meta")
    hdr_key = pl.col("file").cast(pl.Int64) * wide + pl.col("hdr")
    p_of = ranks.process_of.select(meta_key.alias("k"), "rank")
    c_of = ranks.comm_of.select(hdr_key.alias("k"), "comm", "comm_rank")
    peer = ranks.peer_of.select((pl.col("comm").cast(pl.Int64) * wide + pl.col("peer_comm_rank")).alias("k"), "peer")
    records = raw.select(
        meta_key.replace_strict(p_of["k"], p_of["rank"], default=None, return_dtype=pl.Int32).alias("rank"),
        hdr_key.replace_strict(c_of["k"], c_of["comm"], default=None, return_dtype=pl.Int32).alias("comm"),
        hdr_key.replace_strict(c_of["k"], c_of["comm_rank"], default=None, return_dtype=pl.Int32).alias("comm_rank"),
        "p2p", pl.col("op").replace_strict(op_names, return_dtype=pl.Categorical).alias("op"), "seq", "bytes",
        (pl.col("exec_us") * 1000).alias("exec_ns"), "timing_source", "busbw_gbps", "algo", "proto",
        "peer_comm_rank", (pl.col("kstart_us") * 1000).alias("start_ns"), (pl.col("kstop_us") * 1000).alias("end_ns"),
    )
    return records.with_columns(
        (pl.col("comm").cast(pl.Int64) * wide + pl.col("peer_comm_rank"))
        .replace_strict(peer["k"], peer["peer"], default=None, return_dtype=pl.Int32).alias("peer")
    ).drop("peer_comm_rank")


def _latest(verbose: pl.DataFrame, n: int) -> tuple[pl.DataFrame, str]:
    """The whole instances that start in the last ``n`` records' time (the trace analysis holds every kernel
    in memory, about 3 kB each: a day of always-on logs does not fit, its latest part does)."""
    cutoff = verbose["start_ns"].top_k(n).min()
    first = verbose.group_by("comm", "p2p", "seq").agg(pl.col("start_ns").min().alias("_first"))
    keep = first.filter(pl.col("_first") >= cutoff).select("comm", "p2p", "seq")
    since = datetime.fromtimestamp(cutoff / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return verbose.join(keep, on=["comm", "p2p", "seq"], how="semi"), since


def _file_warnings(f: LogFile) -> list[str]:
    out = []
    if f.bad:
        out.append(f"{f.path}: {f.bad} of {f.lines} lines are not NCCL Inspector records (first: line "
                   f"{f.first_bad}): skipped")
    if f.truncated_tail:
        out.append(f"{f.path}: the last line is cut short (the job stopped while the plugin was writing): skipped")
    if f.unknown:
        out.append(f"{f.path}: {f.unknown} records are neither coll_perf nor p2p_perf: skipped")
    if f.no_header:
        out.append(f"{f.path}: {f.no_header} records have no usable header (communicator id, rank): skipped")
    return out


def _timeline(verbose: pl.DataFrame, comms: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Verbose records -> comm kernels (``gpu``) and ``collectives`` rows. Only operations logged by every member
    with a log are kept, so each communicator's ordinals line up across ranks (``match`` pairs by ordinal)."""
    if verbose.height == 0:
        return empty(GPU_SCHEMA), empty(COLLECTIVE_SCHEMA), 0
    # p2p_sn counts each process's own sends and receives, so it names no cross-rank instance: p2p records are
    # all kept (``match`` pairs them by peer and order); collectives only where every member logged them
    coll = verbose.filter(~pl.col("p2p"))
    members = coll.group_by("comm").agg(pl.col("rank").n_unique().alias("_m"))
    seen = coll.group_by("comm", "seq").agg(pl.col("rank").n_unique().alias("_n"))
    keep = seen.join(members, on="comm").filter(pl.col("_n") == pl.col("_m")).select("comm", "seq")
    rows = pl.concat([coll.join(keep, on=["comm", "seq"], how="semi"), verbose.filter(pl.col("p2p"))])
    dropped = verbose.height - rows.height
    op = pl.col("op").cast(pl.Utf8)
    n = pl.col("n_ranks")
    gathered = pl.col("bytes") * n  # all_gather output / reduce_scatter input (the plugin logs the per-rank part)
    rows = rows.join(comms.select("comm", "id", "name", "n_ranks", "ranks"), on="comm", how="left").with_columns(
        (pl.col("comm") + 1).cast(pl.Int64).alias("stream"),  # one NCCL stream per communicator
        pl.format("ncclDevKernel_{}", op).alias("name_k"),
    ).sort("rank", "start_ns")
    rows = rows.with_row_index("correlation")
    gpu = rows.select("rank", pl.lit(0, dtype=pl.Int32).alias("device"), "stream", "start_ns", "end_ns",
                      pl.col("name_k").alias("name"), pl.lit("comm").alias("kind"),
                      pl.col("correlation").cast(pl.Int64))
    coll = rows.select(
        "rank", pl.col("id").alias("pg"), pl.col("name").alias("pg_desc"), "seq", op.alias("op"),
        pl.when(op == "reduce_scatter").then(gathered).otherwise(pl.col("bytes")).alias("in_bytes"),
        pl.when(op == "all_gather").then(gathered).otherwise(pl.col("bytes")).alias("out_bytes"),
        pl.col("n_ranks").alias("group_size"), pl.col("ranks").alias("group_ranks"), "stream", "start_ns", "end_ns",
        pl.lit(True).alias("has_meta"), pl.col("name_k").alias("name"), "peer",
    )
    return conform(gpu, GPU_SCHEMA), conform(coll, COLLECTIVE_SCHEMA), dropped


def load_logs(files: list, ranks: tuple[int, ...] | None = None, jobs: int | None = None) -> TraceSet:
    """The loader's entry for discovered files (``TraceFile``): every file must be an Inspector log."""
    other = [f for f in files if f.format != FORMAT]
    if other:
        raise UsageError(f"{other[0].path} is a {other[0].format} trace among NCCL Inspector logs: analyze "
                         "profiler traces and Inspector logs separately")
    ts = read([f.path for f in files], jobs)
    if ranks is not None:
        from dataclasses import replace

        ts = replace(ts, warnings=(*ts.warnings, "--ranks does not apply to NCCL Inspector logs (a communicator's "
                                   "numbers need all its members): every rank was analyzed"))
    return ts


__all__ = ["FORMAT", "OPS", "assemble", "load_logs", "read", "read_file", "sniff"]
