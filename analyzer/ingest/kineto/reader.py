"""PyTorch profiler (Kineto) JSON -> canonical tables.

Profiler JSON is huge and mostly noise, so events are decoded with msgspec into small typed
structs that keep only the fields the analysis reads, and converted to int64 nanoseconds exactly.

Four paths, fastest first, each falling back to the next (see benchmarks/README.md):

1. Blocks (``kineto_blocks``): msgspec validates the whole document; where every event opens a line (as
   PyTorch writes them), each event's text is one row of an Arrow column over the mapped file, Polars
   marks the rows some table reads and pulls out their correlations, and only those rows are decoded.
2. Scan (``kineto_scan``): the same selection by a byte scan in Python, for any layout: the events with
   a table's ``"cat"`` value, or ``record_param_comms``/``ProfilerStep#`` in the text, and the launches
   linked to them. Noise events (python_function, cpu_op: ~90% of a trace) never become objects.
3. Chunks: the event array is decoded in chunks into small structs and selected in Python.
4. Exact: the whole document with timestamps kept as raw JSON text (``us_text_to_ns``).

Paths 1-3 decode ``ts``/``dur`` as numbers (exact below 2^43 µs, which covers PyTorch >= 2.4's relative
float µs and integer epoch µs); a float past that, a chunk or event that does not split cleanly, or a
type surprise sends the file down the exact path, so all paths give the same tables (tested).
"""

from __future__ import annotations

import gc
import mmap
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ...errors import TraceError
from ...model import ProcessGroup, RankMeta, RankTrace
from ..limits import DEFAULT, Limits, rank_problem
from ..options import ReadOptions
from ..source import GZIP_MAGIC, UTF8_BOM, inflate, nonfinite_as_null, read_bytes, strip_bom
from . import json_depth
from .events import _CHUNK_EVENTS, _DECODER, _EMPTY, _HEADER, Buffer, TooManyEvents, _Header, _Selection, _Trace
from .native import native_select
from .scan import scan_select
from .tables import _as_int, _number_times, _text_times
from .tables import dtype_size as dtype_size  # re-exported: callers import it from here

# below this the block path's fixed cost (Polars and numpy calls per chunk) outweighs what it saves: an 86 KB
# rank 12.9-14.7 ms CPU against 9.3-11.7 ms scanned, 1.4-2.9 MB ranks 22.4-23.9 against 24.5-24.6 ms
_BLOCKS_FROM = 1 << 20
_CHUNK_BYTES = 32 << 20  # bounds the live decoded events to ~one chunk's worth
_SPLIT = re.compile(rb"\}\s*,\s*\{")


def decode(path: Path, limits: Limits = DEFAULT) -> _Trace:
    """The whole document, timestamps as raw text (the exact, slower path; also the error reporter)."""
    return _decode_with(_DECODER, read_bytes(path, limits), path)


def _decode_with(decoder: msgspec.json.Decoder, data: Buffer, path: Path) -> Any:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        if "traceEvents" in str(exc) and "missing required field" in str(exc):
            raise TraceError(
                path, "is JSON but not a profiler trace (no traceEvents)", "pass PyTorch profiler trace files"
            ) from None
        raise TraceError(path, f"is not a valid Kineto trace ({exc})", "re-export the trace") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        fixed = nonfinite_as_null(data) if isinstance(exc, msgspec.DecodeError) else None
        if fixed is not None:  # NaN/Infinity timestamps (Python-written traces): read as null, dropped and counted
            return _decode_with(decoder, fixed, path)
        raise TraceError(
            path, f"is not valid JSON, possibly truncated ({exc})", "copy the file again or re-export it"
        ) from None


def _file_bytes(path: Path, limits: Limits = DEFAULT) -> Buffer:
    """The document: plain files are memory-mapped (no copy: the scan reads the page cache directly),
    gzip is inflated (igzip when available) within ``limits``. Any trouble: ``source.read_bytes`` reads it
    and words the error."""
    try:
        with open(path, "rb") as fh:
            first = fh.read(3)
            if first == UTF8_BOM:
                return read_bytes(path, limits)  # rare: a copy without the mark
            if first[:2] != GZIP_MAGIC:
                return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            fh.seek(0)
            data = inflate(path, fh.read(), limits)
            if data:
                return strip_bom(data)
    except TraceError:
        raise  # a limit: already worded
    except Exception:  # noqa: BLE001 - any trouble (empty file: mmap refuses): read_bytes words the error
        pass
    return read_bytes(path, limits)


def read_meta(path: Path, options: ReadOptions) -> RankMeta:
    """Only the rank's metadata (rank, process groups, devices, versions): the header decoded, the events left
    as raw text. What an input beside the trace needs from it (NCCL Inspector logs: the process groups that name
    their communicators)."""
    data = _file_bytes(path, options.limits)
    json_depth.check(data, options.limits.max_json_depth)
    try:
        header = _HEADER.decode(data)
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
        header = _decode_with(_DECODER, data, path)  # words the error precisely (or reads an odd document)
    return _rank_meta(path, header, options)


def read(path: Path, options: ReadOptions) -> list[RankTrace]:
    return read_tables(path, options)


def read_tables(path: Path, options: ReadOptions, cpu_ops: bool = True) -> list[RankTrace]:
    """``read``; ``cpu_ops=False`` leaves ``cpu_op`` rows out of the ``cpu`` table (the loader drops them anyway)."""
    try:
        return _read_tables(path, options, cpu_ops)
    except TooManyEvents as exc:
        raise TraceError(path, f"has more than {options.limits.max_events:,} events for the tables ({exc.args[0]:,} "
                         "read so far; the events-per-rank limit)", "raise --max-events if the trace is real") from None
    except json_depth.TooDeep as exc:
        raise TraceError(path, f"nests JSON {exc.args[0]:,} levels deep, past the limit of "
                         f"{options.limits.max_json_depth} (a profiler writes ~7)",
                         "raise --max-json-depth if the trace is real") from None
    except RecursionError:
        raise TraceError(path, "nests JSON deeper than the parser can follow", "lower --max-json-depth or "
                         "re-export the trace") from None


def _read_tables(path: Path, options: ReadOptions, cpu_ops: bool) -> list[RankTrace]:
    data = _file_bytes(path, options.limits)
    limit = options.limits.max_json_depth
    sel = native_select(data, options, cpu_ops)  # validates every byte once, in C
    header = sel.header if sel is not None else None
    if sel is None:
        try:
            header = _HEADER.decode(data)  # validates every byte once, for both number paths
        except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
            header = None  # the exact path words the error
    if header is not None and sel is None:
        sel = None
        if len(data) >= _BLOCKS_FROM:
            from .blocks import block_select  # pyarrow (~0.15 s to import): only where the native path declined

            sel = block_select(data, header, options, cpu_ops)  # checks depth
        if sel is None:
            json_depth.check(data, limit)
            sel = scan_select(data, header, options, cpu_ops)
        if sel is None:
            sel = _fast_select(header, options, cpu_ops)
        header.traceEvents = _EMPTY  # drop the view into ``data``
    if sel is None:  # exact text path: same selection over raw-timestamp events
        if header is None:
            json_depth.check(data, limit)
        trace = _decode_with(_DECODER, data, path)
        del data
        sel = _Selection(trace, options, cpu_ops)
        sel.feed(trace.traceEvents)
        trace.traceEvents = []
        return _traces(path, sel, options, _text_times)  # type: ignore[return-value]
    del data
    got = _traces(path, sel, options, _number_times)
    if got is None:  # a float timestamp past 2^43 µs: needs the raw text
        return read_tables_exact(path, options, cpu_ops)
    return got


def _traces(path: Path, sel: _Selection, options: ReadOptions, times: Any) -> list[RankTrace] | None:
    """The selection's rank, or each rank of a merged multi-rank file (every event carries ``args.rank``, as
    TraceLens' trace fusion writes them): one rank per merged rank, never one rank summing several GPUs. None: a
    timestamp needs the text path."""
    meta = _rank_meta(path, sel.header, options, sel.not_complete)
    merged = sel.merged_ranks()
    if not merged:
        tables = sel.tables(times, meta.rank)
        if tables is None:
            return None
        many = _processes(sel)
        if many:  # several processes' GPUs and no per-event rank to split them by: said, never silently summed
            meta = replace(meta, warnings=(*meta.warnings, f"{path.name}: holds the GPU work of {many[0]} processes "
                                           f"on {many[1]} devices but names no rank per event (TraceLens' fusion writes "
                                           "args.rank); read as one rank: pass each rank's own file instead"))
        return [_rank_trace(path, meta, tables)]
    out = []
    for r, part in sel.split(merged).items():
        tables = part.tables(times, r)
        if tables is None:
            return None
        part = replace(meta, rank=r, rank_source="merged file (args.rank)", world_size=meta.world_size or len(merged),
                       warnings=meta.warnings if r == merged[0] else ())
        out.append(_rank_trace(path, part, tables))
    out[0] = replace(out[0], meta=replace(out[0].meta, warnings=(*out[0].meta.warnings, (
        f"{path.name}: one file holds {len(merged)} ranks' work (a merged trace: each event names its rank); "
        f"read as ranks {merged[0]}-{merged[-1]}, one per rank"))))
    return out


def _processes(sel: _Selection) -> tuple[int, int] | None:
    """(processes, devices) where a file's launches come from several processes onto several devices; else None."""
    devices = {(e.args.device if e.args is not None and e.args.device is not None else e.pid) for e in sel.gpu}
    if len(devices) < 2:
        return None
    pids = {e.pid for e in sel.cpu if e.cat in ("cuda_runtime", "cuda_driver", "Runtime")}
    return (len(pids), len(devices)) if len(pids) > 1 else None


def read_tables_exact(path: Path, options: ReadOptions, cpu_ops: bool = True) -> list[RankTrace]:
    """The text-timestamp path only (reference for tests and the fallback)."""
    data = read_bytes(path, options.limits)
    json_depth.check(data, options.limits.max_json_depth)
    trace = _decode_with(_DECODER, data, path)
    sel = _Selection(trace, options, cpu_ops)
    sel.feed(trace.traceEvents)
    return _traces(path, sel, options, _text_times)  # type: ignore[return-value]


def _rank_trace(path: Path, meta: RankMeta, tables: Any) -> RankTrace:
    """The tables with ``meta.rank`` in their ``rank`` column (the readers build them so; unknown ranks: the
    loader assigns one)."""
    gpu, cpu, comm_calls, (steps, on_gpu) = tables
    if gpu.height == 0:
        raise TraceError(path, "has no GPU activity (no kernels, memcpy or memset)", "profile with CUDA activities on")
    if gpu["rank"][0] != meta.rank:  # tables built for another rank (``_Selection.tables``' default)
        rank = pl.lit(meta.rank, dtype=pl.Int32).alias("rank")
        gpu, cpu, comm_calls, steps = (df.with_columns(rank) for df in (gpu, cpu, comm_calls, steps))
    return RankTrace(meta=meta, gpu=gpu, cpu=cpu, comm_calls=comm_calls, steps=steps, steps_on_gpu=on_gpu)


def _fast_select(header: _Header, options: ReadOptions, cpu_ops: bool) -> _Selection | None:
    """Decode the event array in chunks split at event boundaries; None: use the exact path.

    A split inside a string or a nested object leaves a chunk that is not valid JSON, so a wrong
    split can only fail (and fall back), never decode into wrong events.
    """
    body = memoryview(header.traceEvents)  # a view into ``data``: no copy of the array
    if body[:1] != b"[" or body[-1:] != b"]":
        return None
    sel = _Selection(header, options, cpu_ops)
    pos, end = 1, len(body) - 1
    was_enabled = gc.isenabled()
    gc.disable()  # no cycles are created here; a GC pass per few thousand structs would dominate
    try:
        while pos < end:
            cut, nxt = end, end
            if end - pos > _CHUNK_BYTES:
                m = _SPLIT.search(body, pos + _CHUNK_BYTES)  # type: ignore[call-overload]
                if m is not None:
                    cut, nxt = m.start() + 1, m.end() - 1
            sel.feed(_CHUNK_EVENTS.decode(b"[" + body[pos:cut] + b"]"))
            pos = nxt
    except (msgspec.MsgspecError, UnicodeDecodeError):
        return None
    finally:
        if was_enabled:
            gc.enable()
    return sel


# ----------------------------------------------------------------------------- metadata


def _members(raw: Any) -> tuple[int, ...]:
    """A process group's member ranks: a list of plain ints checked in C (16k-rank jobs list 16k members in
    every rank's file), anything else element by element."""
    try:
        return msgspec.convert(raw, tuple[int, ...])
    except (msgspec.ValidationError, TypeError):
        return tuple(int(r) for r in raw if _as_int(r) is not None)


def _rank_meta(path: Path, trace: _Header, options: ReadOptions, not_complete: int = 0) -> RankMeta:
    info = trace.distributedInfo if isinstance(trace.distributedInfo, dict) else {}
    warnings: list[str] = []
    if not_complete:
        warnings.append(f"{path.name}: {not_complete} GPU events are not complete events (ph is not \"X\"): "
                        "not counted")
    mapped = options.rank_map.get(path.name, options.rank_map.get(str(path)))
    declared = _as_int(info.get("rank"))
    if mapped is not None:
        rank, source = mapped, "rank-map"
    elif declared is not None and declared < 0:
        raise TraceError(path, f"distributedInfo.rank is {declared}: a rank is never negative",
                         f"set this file's rank with --rank-map {path.name}=RANK")
    elif declared is not None and (problem := rank_problem(declared, options.limits.max_ranks)):
        raise TraceError(path, f"distributedInfo.{problem}", f"or set this file's rank with --rank-map {path.name}=RANK")
    elif declared is not None:
        rank, source = int(info["rank"]), "distributedInfo"
    elif options.rank_hint is not None:
        rank, source = options.rank_hint, "filename"
        warnings.append(f"{path.name}: no rank in distributedInfo; rank {rank} taken from the file name")
    else:
        rank, source = -1, "unknown"  # discover.py assigns one and says so
    groups = []
    pg_config = info.get("pg_config")
    if isinstance(pg_config, dict):
        pg_config = list(pg_config.values())
    for pg in pg_config or []:
        if isinstance(pg, dict):
            ranks = _members(pg.get("ranks", []))
            groups.append(ProcessGroup(str(pg.get("pg_name", "")), str(pg.get("pg_desc", "")), ranks))
    devices = tuple(
        str(d.get("name", "")) for d in (trace.deviceProperties or []) if isinstance(d, dict)
    )
    versions = tuple(
        (k, str(v))
        for k, v in (
            ("nccl", info.get("nccl_version")),
            ("backend", info.get("backend")),
            ("cuda_runtime", trace.cuda_runtime_version),
            ("cuda_driver", trace.cuda_driver_version),
            ("hip_runtime", trace.hip_runtime_version),
            ("schema", trace.schemaVersion),
        )
        if v is not None
    )
    return RankMeta(
        rank=rank,
        source=str(path),
        format="kineto",
        world_size=_as_int(info.get("world_size")),
        rank_source=source,
        host=str(trace.host_name) if trace.host_name else None,
        devices=devices,
        process_groups=tuple(groups),
        versions=versions,
        clock_base_ns=_as_int(trace.baseTimeNanoseconds),
        warnings=tuple(warnings),
    )
