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

Ranks: a communicator's ``rank`` is the rank within it. A process (hostname + pid) is one global rank,
numbered by its rank in the largest communicator every process belongs to (the world communicator);
without one, by hostname and pid order, with a warning. Decoding: ``msgspec`` decodes a batch of lines as one
JSON array into small Structs (the repeated ``header`` / ``metadata`` objects stay raw bytes and are decoded
once per distinct value), then the batch becomes Polars columns; a batch that fails is decoded line by line so
a bad line costs only itself (counted, with the first line number, in a warning).
"""

from __future__ import annotations

import gc
import gzip
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import polars as pl
from msgspec import Raw, Struct

from ..errors import TraceError, UsageError
from ..model import (
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
from .source import GZIP_MAGIC, head

FORMAT = "nccl_inspector"
KNOWN_VERSIONS = ("v4.0",)
_BATCH_BYTES = 4 << 20  # lines decoded at once: a few MB keeps the transient Structs small
# the plugin's operation names (``ncclFuncToString``) -> commscope's
OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "AllGatherV": "all_gather",
       "ReduceScatter": "reduce_scatter", "Broadcast": "broadcast", "Reduce": "reduce", "All2All": "all_to_all",
       "Send": "send", "Recv": "recv", "SendRecv": "send_recv"}
_SNIFF = re.compile(rb'^\s*\{\s*"header"\s*:\s*\{[^\n]*"(?:coll_perf|p2p_perf)"\s*:')


def sniff(start: bytes) -> bool:
    """A file's first bytes are an Inspector record (checked before the profiler formats)."""
    if start[:2] == GZIP_MAGIC:
        try:
            start = zlib.decompressobj(wbits=47).decompress(start, 1 << 16)
        except zlib.error:
            return False
    return _SNIFF.match(start) is not None


class _Kernel(Struct, gc=False):
    kernel_start_ts: int = 0
    kernel_stop_ts: int = 0


class _Trace(Struct, gc=False):
    kernel_events: list[_Kernel] = []


class _Coll(Struct, gc=False):
    coll: str = ""
    coll_sn: int = -1
    coll_msg_size_bytes: int = 0
    coll_exec_time_us: int = 0
    coll_timing_source: str = "unknown"
    coll_busbw_gbs: float | None = None
    coll_algo: str | None = None
    coll_proto: str | None = None
    event_trace_ts: _Trace | None = None


class _P2p(Struct, gc=False):
    p2p: str = ""
    p2p_sn: int = -1
    p2p_peer: int = -1
    p2p_msg_size_bytes: int = 0
    p2p_exec_time_us: int = 0
    p2p_timing_source: str = "unknown"
    p2p_busbw_gbs: float | None = None
    event_trace_ts: _Trace | None = None


class _Line(Struct, gc=False):
    header: Raw = Raw(b"")
    metadata: Raw = Raw(b"")
    coll_perf: _Coll | None = None
    p2p_perf: _P2p | None = None


class _Header(Struct):
    id: str
    rank: int
    n_ranks: int
    nnodes: int = 0
    comm_name: str | None = None


class _Meta(Struct):
    hostname: str = ""
    pid: int = -1
    inspector_output_format_version: str = ""


_BATCH = msgspec.json.Decoder(list[_Line])
_ONE = msgspec.json.Decoder(_Line)
_HEADER = msgspec.json.Decoder(_Header)
_META = msgspec.json.Decoder(_Meta)


@dataclass
class _File:
    """One log file's records, before ranks are known."""

    path: Path
    records: pl.DataFrame  # hdr, meta (indices into headers/metas) + the per-record columns
    headers: list[_Header] = field(default_factory=list)
    metas: list[_Meta] = field(default_factory=list)
    lines: int = 0
    bad: int = 0
    first_bad: int | None = None
    unknown: int = 0
    no_header: int = 0
    truncated_tail: bool = False


def _blocks(path: Path) -> Iterator[tuple[bytes, bool]]:
    """The file in blocks of whole lines (the last block may end without a newline: ``(block, last)``)."""
    raw = head(path, 2)
    try:
        fh = gzip.open(path, "rb") if raw == GZIP_MAGIC else open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise TraceError(path, f"cannot be read: {exc.strerror or exc}", "check the path and permissions") from None
    with fh:
        rest = b""
        while True:
            try:
                chunk = fh.read(_BATCH_BYTES)
            except (EOFError, OSError, zlib.error) as exc:
                raise TraceError(path, f"is a truncated or corrupt gzip file ({exc})",
                                 "copy the file again") from None
            if not chunk:
                if rest:
                    yield rest, True
                return
            data = rest + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                rest = data
                continue
            rest = data[cut + 1:]
            yield data[:cut + 1], False


class _Columns:
    """Per-record columns of one file, appended batch by batch (Python lists only per batch)."""

    def __init__(self) -> None:
        self.frames: list[pl.DataFrame] = []
        self.pending: dict[str, list] = {c: [] for c in _RAW_SCHEMA}
        self.n_pending = 0
        self.hdr_index: dict[bytes, int] = {}
        self.meta_index: dict[bytes, int] = {}
        self.headers: list[_Header] = []
        self.metas: list[_Meta] = []
        self.unknown = 0
        self.no_header = 0

    def _new_header(self, key: bytes) -> int:
        try:
            h = _HEADER.decode(key)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return -1
        self.headers.append(h)
        return len(self.headers) - 1

    def _new_meta(self, key: bytes) -> int:
        try:
            m = _META.decode(key) if key else _Meta()
        except (msgspec.DecodeError, msgspec.ValidationError):
            m = _Meta()
        self.metas.append(m)
        return len(self.metas) - 1

    def _meta_index_of(self, raw: Raw) -> int:
        key = bytes(raw)
        i = self.meta_index.get(key)
        if i is None:
            i = self.meta_index[key] = self._new_meta(key)
        return i

    def _metas(self, rows: list[_Line]) -> list[int]:
        """Each record's metadata index. The plugin writes one file per process, so a batch is normally one
        process: then (checked on 17 records spread over the batch) every record takes the first one's
        metadata and no per-record work is done; else each record's own."""
        n = len(rows)
        probe = [self._meta_index_of(r.metadata) for r in rows[::max(1, n // 16)]]
        probe.append(self._meta_index_of(rows[-1].metadata))
        procs = {(self.metas[i].hostname, self.metas[i].pid) for i in probe}
        if len(procs) == 1:
            return [probe[0]] * n
        return [self._meta_index_of(r.metadata) for r in rows]

    def add(self, lines: list[_Line]) -> None:
        colls = [r for r in lines if r.coll_perf is not None]
        p2ps = [r for r in lines if r.coll_perf is None and r.p2p_perf is not None]
        self.unknown += len(lines) - len(colls) - len(p2ps)
        if colls:
            c = [r.coll_perf for r in colls]
            self._frame(colls, False, {
                "op": [x.coll for x in c], "seq": [x.coll_sn for x in c], "bytes": [x.coll_msg_size_bytes for x in c],
                "exec_us": [x.coll_exec_time_us for x in c], "timing_source": [x.coll_timing_source for x in c],
                "busbw_gbps": [x.coll_busbw_gbs for x in c], "algo": [x.coll_algo for x in c],
                "proto": [x.coll_proto for x in c]}, [x.event_trace_ts for x in c])
        if p2ps:
            p = [r.p2p_perf for r in p2ps]
            self._frame(p2ps, True, {
                "op": [x.p2p for x in p], "seq": [x.p2p_sn for x in p], "bytes": [x.p2p_msg_size_bytes for x in p],
                "exec_us": [x.p2p_exec_time_us for x in p], "timing_source": [x.p2p_timing_source for x in p],
                "busbw_gbps": [x.p2p_busbw_gbs for x in p], "peer_comm_rank": [x.p2p_peer for x in p]},
                [x.event_trace_ts for x in p])

    def _frame(self, rows: list[_Line], p2p: bool, cols: dict[str, list], traces: list[_Trace | None]) -> None:
        # header / metadata repeat on every line: each distinct one is decoded once
        hkeys = [bytes(r.header) for r in rows]
        hidx = self.hdr_index
        for k in set(hkeys).difference(hidx):
            hidx[k] = self._new_header(k)
        hdr = [hidx[k] for k in hkeys]
        self.no_header += hdr.count(-1)
        n = len(rows)
        data = {"hdr": hdr, "meta": self._metas(rows), "p2p": [p2p] * n, **cols}
        if any(t is not None for t in traces):  # verbose: first channel's start to last channel's stop
            spans = [_span(t) for t in traces]
            data["kstart_us"] = [a for a, _ in spans]
            data["kstop_us"] = [b for _, b in spans]
        none = [None] * n
        for c, values in self.pending.items():
            values.extend(data.get(c, none))
        self.n_pending += n
        if self.n_pending >= _FRAME_ROWS:
            self.flush()

    def flush(self) -> None:
        """Pending lists -> one DataFrame (a frame per ~``_FRAME_ROWS`` records: Polars' cost per frame is
        paid rarely, and the Python lists never hold more than that)."""
        if self.n_pending:
            df = pl.DataFrame(self.pending, schema=_RAW_SCHEMA)
            # columns the log never fills (timestamps without verbose mode, algo/proto, peer) stay out: they
            # come back as one null scalar, not 8 bytes a record (76 -> 48 bytes a record without timestamps)
            self.frames.append(df.select(c for c in df.columns if df[c].null_count() < df.height))
            self.pending = {c: [] for c in _RAW_SCHEMA}
            self.n_pending = 0


def _span(t: _Trace | None) -> tuple[int | None, int | None]:
    ks = t.kernel_events if t is not None else None
    if not ks:
        return None, None
    s = [k.kernel_start_ts for k in ks if k.kernel_start_ts]
    e = [k.kernel_stop_ts for k in ks if k.kernel_stop_ts]
    return (min(s) if s else None), (max(e) if e else None)


_FRAME_ROWS = 1 << 18
_RAW_SCHEMA = {"hdr": pl.Int32, "meta": pl.Int32, "p2p": pl.Boolean, "op": pl.Utf8, "seq": pl.Int64,
               "bytes": pl.Int64, "exec_us": pl.Int64, "timing_source": pl.Categorical, "busbw_gbps": pl.Float32,
               "algo": pl.Categorical, "proto": pl.Categorical, "peer_comm_rank": pl.Int32, "kstart_us": pl.Int64,
               "kstop_us": pl.Int64}


def read_file(path: Path) -> _File:
    """Every record of one log file, batch by batch; bad lines are counted, never raised."""
    # a batch allocates ~10 objects a record that all live until its columns are built: the cyclic GC would
    # scan them over and over (Structs are declared gc=False for the same reason) and finds no cycle here
    was = gc.isenabled()
    gc.disable()
    try:
        return _read_file(path)
    finally:
        if was:
            gc.enable()


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Frames that may lack the columns their records never filled; the missing ones are null scalars."""
    if not frames:
        return pl.DataFrame(schema=_RAW_SCHEMA)
    have = set().union(*(f.columns for f in frames))
    order = [c for c in _RAW_SCHEMA if c in have] + sorted(have - set(_RAW_SCHEMA))  # + the reader's "file"
    frames = [f.with_columns(pl.lit(None, dtype=_RAW_SCHEMA[c]).alias(c) for c in have - set(f.columns))
              for f in frames]
    return pl.concat([f.select(order) for f in frames]).with_columns(
        pl.lit(None, dtype=t).alias(c) for c, t in _RAW_SCHEMA.items() if c not in have)


_NL_TO_COMMA = bytes.maketrans(b"\n", b",")
_BAD = (msgspec.DecodeError, msgspec.ValidationError)


def _read_file(path: Path) -> _File:
    cols = _Columns()
    lines = bad = 0
    first_bad: int | None = None
    truncated = False
    for block, last in _blocks(path):
        # the lines as one JSON array: one translate and one join, no per-line work
        t = block.translate(_NL_TO_COMMA)
        try:
            recs = _BATCH.decode(b"".join((b"[", memoryview(t)[:len(t) - t.endswith(b",")], b"]")))
            lines += len(recs)
        except _BAD:  # a bad line, a blank one, CRLF endings: line by line, so a bad line costs only itself
            recs = []
            split = block.split(b"\n")
            if split[-1] == b"":
                split.pop()
            for i, line in enumerate(split):
                if not line.strip():
                    continue
                try:
                    recs.append(_ONE.decode(line))
                except _BAD:
                    if last and i == len(split) - 1 and not block.endswith(b"\n"):
                        truncated = True  # the writer stopped mid-line (job killed): only that line is lost
                    else:
                        bad += 1
                        first_bad = first_bad or lines + i + 1
            lines += len(split)
        cols.add(recs)
    cols.flush()
    records = _concat(cols.frames)
    return _File(path, records, cols.headers, cols.metas, lines, bad, first_bad, cols.unknown, cols.no_header,
                 truncated)


def read(files: list[Path], jobs: int | None = None) -> TraceSet:
    """All logs of one job -> a TraceSet (verbose logs fill ``gpu`` and ``collectives``) with ``inspector`` set.
    Files are decoded in ``jobs`` worker processes (default: the cores), each file's columns sent back."""
    jobs = min(jobs or os.cpu_count() or 1, len(files))
    if jobs <= 1:
        return assemble([read_file(p) for p in files])
    from concurrent.futures import ProcessPoolExecutor

    from ..workers import no_main_reimport, worker_context

    with no_main_reimport(), ProcessPoolExecutor(max_workers=jobs, mp_context=worker_context()) as pool:
        parsed = list(pool.map(read_file, files, chunksize=max(1, len(files) // (4 * jobs))))
    return assemble(parsed)


def assemble(parsed: list[_File]) -> TraceSet:
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
        recs.append(f.records.filter(pl.col("hdr") >= 0).with_columns(pl.lit(fi, dtype=pl.Int32).alias("file")))
    recs = [_concat(recs)]
    hdr_df = pl.DataFrame(hdrs, schema={"file": pl.Int32, "hdr": pl.Int32, "id": pl.Utf8, "name": pl.Utf8,
                                        "comm_rank": pl.Int32, "n_ranks": pl.Int32, "nnodes": pl.Int32})
    meta_df = pl.DataFrame(metas, schema={"file": pl.Int32, "meta": pl.Int32, "hostname": pl.Utf8, "pid": pl.Int64,
                                          "version": pl.Utf8})
    versions = sorted(set(meta_df["version"].drop_nulls().to_list()) - set(KNOWN_VERSIONS) - {""})
    if versions:
        warnings.append(f"NCCL Inspector output format {', '.join(versions)} is newer than the {KNOWN_VERSIONS[-1]} "
                        "this reader knows: its fields were read by name")
    from .inspector_ranks import map_ranks  # the cross-file part: which process is which global rank

    names = [str(f.path) for f in usable]
    all_recs = pl.concat(recs)
    used = all_recs.select("file", "hdr", "meta").unique()
    ranks = map_ranks(hdr_df, meta_df, used, names)
    warnings.extend(ranks.warnings)
    records = all_recs.join(ranks.process_of, on=["file", "meta"], how="left").join(
        ranks.comm_of, on=["file", "hdr"], how="left")
    records = records.with_columns(
        pl.col("op").replace_strict(OPS, default=pl.col("op").str.to_lowercase()).cast(pl.Categorical),
        (pl.col("exec_us") * 1000).alias("exec_ns"),
        (pl.col("kstart_us") * 1000).alias("start_ns"),
        (pl.col("kstop_us") * 1000).alias("end_ns"),
    ).join(ranks.peer_of, on=["comm", "peer_comm_rank"], how="left")
    table = conform(records, INSPECTOR_SCHEMA)
    verbose = table.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null() & pl.col("rank")
                           .is_not_null())
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


def _file_warnings(f: _File) -> list[str]:
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
    members = verbose.group_by("comm").agg(pl.col("rank").n_unique().alias("_m"))
    seen = verbose.group_by("comm", "p2p", "seq").agg(pl.col("rank").n_unique().alias("_n"))
    keep = seen.join(members, on="comm").filter(pl.col("_n") == pl.col("_m")).select("comm", "p2p", "seq")
    rows = verbose.join(keep, on=["comm", "p2p", "seq"], how="semi")
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
