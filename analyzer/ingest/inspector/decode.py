"""NCCL Inspector logs, one file at a time: lines -> Polars columns (the format is in ``nccl_inspector``).

``msgspec`` decodes a 4 MB block of lines as one JSON array into small Structs (the repeated ``header`` /
``metadata`` objects stay raw bytes and are decoded once per distinct value), then the batch becomes
Polars columns; a block that fails is decoded line by line so a bad line costs only itself (counted, with
the first line number). Nothing here knows about ranks: ``nccl_inspector.assemble`` joins the files.
"""

from __future__ import annotations

import gc
import gzip
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import polars as pl
from msgspec import Raw, Struct

from ...errors import TraceError
from ..source import GZIP_MAGIC, head

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
_HEADER_DEC = msgspec.json.Decoder(_Header)
_META_DEC = msgspec.json.Decoder(_Meta)


@dataclass
class LogFile:
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


def _blocks(path: Path, size: int = _BATCH_BYTES) -> Iterator[tuple[bytes, bool]]:
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
                chunk = fh.read(size)
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
            # nothing of the block stays referenced here while the consumer holds it (a streamed job keeps
            # every file's reader suspended at once: 64 files x 3 block copies was 3/4 of its memory)
            out = [data[:cut + 1]]
            del data, chunk
            yield out.pop(), False


class _Columns:
    """Per-record columns of one file, appended batch by batch (Python lists only per batch)."""

    def __init__(self) -> None:
        self.frames: list[pl.DataFrame] = []
        self.pending: dict[str, list] = {c: [] for c in RAW_SCHEMA}
        self.n_pending = 0
        self.hdr_index: dict[bytes, int] = {}
        self.meta_index: dict[bytes, int] = {}
        self.headers: list[_Header] = []
        self.metas: list[_Meta] = []
        self.unknown = 0
        self.no_header = 0

    def _new_header(self, key: bytes) -> int:
        try:
            h = _HEADER_DEC.decode(key)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return -1
        self.headers.append(h)
        return len(self.headers) - 1

    def _new_meta(self, key: bytes) -> int:
        try:
            m = _META_DEC.decode(key) if key else _Meta()
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
            df = pl.DataFrame(self.pending, schema=RAW_SCHEMA)
            # columns the log never fills (timestamps without verbose mode, algo/proto, peer) stay out: they
            # come back as one null scalar, not 8 bytes a record (76 -> 48 bytes a record without timestamps)
            self.frames.append(df.select(c for c in df.columns if df[c].null_count() < df.height))
            self.pending = {c: [] for c in RAW_SCHEMA}
            self.n_pending = 0


def _span(t: _Trace | None) -> tuple[int | None, int | None]:
    ks = t.kernel_events if t is not None else None
    if not ks:
        return None, None
    s = [k.kernel_start_ts for k in ks if k.kernel_start_ts]
    e = [k.kernel_stop_ts for k in ks if k.kernel_stop_ts]
    return (min(s) if s else None), (max(e) if e else None)


_FRAME_ROWS = 1 << 16
RAW_SCHEMA = {"hdr": pl.Int32, "meta": pl.Int32, "p2p": pl.Boolean, "op": pl.Utf8, "seq": pl.Int64,
               "bytes": pl.Int64, "exec_us": pl.Int64, "timing_source": pl.Categorical, "busbw_gbps": pl.Float32,
               "algo": pl.Categorical, "proto": pl.Categorical, "peer_comm_rank": pl.Int32, "kstart_us": pl.Int64,
               "kstop_us": pl.Int64}


def read_file(path: Path) -> LogFile:
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


def concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Frames that may lack the columns their records never filled; the missing ones are null scalars."""
    if not frames:
        return pl.DataFrame(schema=RAW_SCHEMA)
    have = set().union(*(f.columns for f in frames))
    order = [c for c in RAW_SCHEMA if c in have] + sorted(have - set(RAW_SCHEMA))  # + the reader's "file"
    frames = [f.with_columns(pl.lit(None, dtype=RAW_SCHEMA[c]).alias(c) for c in have - set(f.columns))
              for f in frames]
    return pl.concat([f.select(order) for f in frames]).with_columns(
        pl.lit(None, dtype=t).alias(c) for c, t in RAW_SCHEMA.items() if c not in have)


_NL_TO_COMMA = bytes.maketrans(b"\n", b",")
_BAD = (msgspec.DecodeError, msgspec.ValidationError)


def _read_file(path: Path) -> LogFile:
    reading = Reading(path)
    frames = [f for f in reading.batches()]
    return reading.log_file(concat(frames))


class Reading:
    """One file read block by block: ``batches()`` yields its records' raw columns (a frame per ~``_FRAME_ROWS``
    records, or per block of ``block_bytes``); headers, metadata and the counters grow as it goes."""

    def __init__(self, path: Path, block_bytes: int | None = None) -> None:
        self.path = path
        self.cols = _Columns()
        self.block_bytes = block_bytes  # set: a frame per block of this size (streaming), else per _FRAME_ROWS
        self.lines = self.bad = 0
        self.first_bad: int | None = None
        self.truncated = False

    def batches(self) -> Iterator[pl.DataFrame]:
        cols = self.cols
        for block, last in _blocks(self.path, self.block_bytes or _BATCH_BYTES):
            recs = self._decode(block, last)
            del block
            cols.add(recs)
            del recs
            if self.block_bytes:
                cols.flush()
            while cols.frames:
                yield cols.frames.pop(0)
        cols.flush()
        yield from cols.frames
        cols.frames = []

    def _decode(self, block: bytes, last: bool) -> list[_Line]:
        # the lines as one JSON array: one translate and one join, no per-line work
        t = block.translate(_NL_TO_COMMA)
        try:
            recs = _BATCH.decode(b"".join((b"[", memoryview(t)[:len(t) - t.endswith(b",")], b"]")))
            self.lines += len(recs)
            return recs
        except _BAD:  # a bad line, a blank one, CRLF endings: line by line, so a bad line costs only itself
            pass
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
                    self.truncated = True  # the writer stopped mid-line (job killed): only that line is lost
                else:
                    self.bad += 1
                    self.first_bad = self.first_bad or self.lines + i + 1
        self.lines += len(split)
        return recs

    def log_file(self, records: pl.DataFrame) -> LogFile:
        c = self.cols
        return LogFile(self.path, records, c.headers, c.metas, self.lines, self.bad, self.first_bad, c.unknown,
                       c.no_header, self.truncated)


def header_frames(hdrs: list[dict], metas: list[dict], warnings: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The job's communicator headers and process metadata as tables (one row per file and header / metadata
    record); a format version newer than this reader knows is said in ``warnings``."""
    hdr_df = pl.DataFrame(hdrs, schema={"file": pl.Int32, "hdr": pl.Int32, "id": pl.Utf8, "name": pl.Utf8,
                                        "comm_rank": pl.Int32, "n_ranks": pl.Int32, "nnodes": pl.Int32})
    meta_df = pl.DataFrame(metas, schema={"file": pl.Int32, "meta": pl.Int32, "hostname": pl.Utf8, "pid": pl.Int64,
                                          "version": pl.Utf8})
    versions = sorted(set(meta_df["version"].drop_nulls().to_list()) - set(KNOWN_VERSIONS) - {""})
    if versions:
        warnings.append(f"NCCL Inspector output format {', '.join(versions)} is newer than the {KNOWN_VERSIONS[-1]} "
                        "this reader knows: its fields were read by name")
    return hdr_df, meta_df
