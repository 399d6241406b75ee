"""Find trace files under the user's paths, tell their format by content, and guess ranks from names."""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceError, UsageError
from ..model import Skipped
from .flight_recorder.reader import is_pickle, looks_like_dump
from .inspector.reader import sniff as inspector_sniff
from .source import GZIP_MAGIC, SQLITE_MAGIC, head, refuse_special, special_kind, strip_bom

_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".gz", ".pkl", ".pickle")
_FR_NAME = re.compile(r"(?i)rank[-_]?\d+$")  # Flight Recorder's own dump files have no suffix: nccl_trace_rank_3
_OPTABLE_SUFFIXES = (".parquet", ".arrow", ".feather", ".ipc", ".csv")  # op tables (ingest/optable_frame.py)
_RANK_PATTERNS = (
    re.compile(r"(?i)rank[-_]?(\d+)"),
    re.compile(r"(?i)[-_.](\d+)\.(?:pt\.trace\.)?json(?:\.gz)?$"),
    re.compile(r"(?i)[-_.](\d+)\.sqlite$"),
)
_TRACE_SUFFIXES += (".log", ".jsonl")  # NCCL Inspector: <hostname>-pid<pid>.log, JSON lines (sniffed by content)


@dataclass(frozen=True)
class TraceFile:
    path: Path
    format: str  # "kineto" | "nsys" | "optable" | "flight_recorder" | "nccl_inspector"
    rank_hint: int | None


def rank_from_name(name: str) -> int | None:
    for pattern in _RANK_PATTERNS:
        m = pattern.search(name)
        if m:
            return int(m.group(1))
    return None


def sniff(path: Path) -> str | None:
    """Format by content: SQLite -> nsys, JSON (plain or gzip) with trace keys -> kineto."""
    if path.suffix == ".nsys-rep":
        return "nsys"
    if path.name.lower().endswith(_OPTABLE_SUFFIXES):
        from .optable.frame import is_op_table

        return "optable" if is_op_table(path) else None
    # 4 KiB first: a Kineto file names its keys at the top (16k small ranks: 64 MB read, not 1 GB)
    for size in (1 << 12, 1 << 16):
        start = head(path, size)
        if start.startswith(SQLITE_MAGIC):
            return "nsys"
        if inspector_sniff(start):
            return "nccl_inspector"
        text = strip_bom(_as_text(start))
        if looks_like_dump(text):
            return "flight_recorder"
        if text.lstrip()[:1] == b"{" and any(k in text for k in (b'"traceEvents"', b'"schemaVersion"', b'"ph"')):
            return "kineto"
        if len(start) < size:
            return None  # the whole file was seen
    return None


def _as_text(raw: bytes) -> bytes:
    if raw[:2] == GZIP_MAGIC:
        try:
            return zlib.decompressobj(wbits=47).decompress(raw, 1 << 16)
        except zlib.error:
            return b"{"  # corrupt gzip: let the reader report it precisely
    return raw


def explicit_format(path: Path) -> str:
    """A file the user named is always read: any pickle by the Flight Recorder reader (whose restricted
    unpickler says what is wrong with it), anything else unknown by the Kineto reader."""
    fmt = sniff(path)
    if fmt is None and is_pickle(head(path, 2)):
        return "flight_recorder"
    if fmt is None and path.name.lower().endswith(_OPTABLE_SUFFIXES):
        return "optable"
    return fmt or "kineto"  # the reader then says precisely what is wrong with it


def _candidate(name: str) -> bool:
    return name.endswith(_TRACE_SUFFIXES) or name.lower().endswith(_OPTABLE_SUFFIXES) or bool(_FR_NAME.search(name))


def flight_recorder_files(paths: list[Path]) -> list[TraceFile] | None:
    """The Flight Recorder dumps among the paths, or None when they are traces (decided by the first file
    that sniffs: a trace folder costs one extra small read). A mix of dumps and traces is refused."""
    for p in paths:
        if p.is_dir():
            first = next((c for c in sorted(p.rglob("*")) if c.is_file() and _candidate(c.name) and sniff(c)), None)
            if first is None:
                continue
            if sniff(first) != "flight_recorder":
                return None
        elif p.is_file() and explicit_format(p) != "flight_recorder":
            return None
    found = discover(paths)
    others = [f for f in found if f.format != "flight_recorder"]
    if others and len(others) < len(found):
        raise UsageError(f"{others[0].path} is a {others[0].format} trace among Flight Recorder dumps: "
                         "analyze dumps and traces separately")
    return found if not others else None


def looks_like_rank(name: str) -> bool:
    """A name a profiler gives a rank's trace: such a file in a folder is read (and named when it fails), never
    passed over like a ``ground_truth.json`` beside the ranks."""
    return rank_from_name(name) is not None or name.endswith((".pt.trace.json", ".pt.trace.json.gz"))


def discover(paths: list[Path]) -> list[TraceFile]:
    """``discover_all`` without the files it set aside (each of them named there)."""
    return discover_all(paths)[0]


def discover_all(paths: list[Path]) -> tuple[list[TraceFile], list[Skipped]]:
    """Expand folders; explicit files are always taken (and fail loudly), folder members if they sniff as a trace
    or are named like a rank (the reader then says what is wrong with them). A member that is no regular file (a
    FIFO, a link to /dev/zero, a dangling link) and named like a trace is never opened: it is set aside, with why."""
    found: list[TraceFile] = []
    skipped: list[Skipped] = []
    for p in paths:
        if not p.exists():
            raise TraceError(p, "does not exist", "check the path")
        refuse_special(p)  # a FIFO named x.json would block the first read forever
        if p.is_dir():
            for child in sorted(c for c in p.rglob("*") if _candidate(c.name)):
                why = _not_a_file(child)
                if why == "folder":
                    continue
                if why:
                    skipped.append(Skipped(str(child), f"{child}: {why} (pass regular trace files)"))
                    continue
                try:
                    fmt = sniff(child)
                except TraceError as exc:
                    skipped.append(Skipped(str(child), str(exc)))
                    continue
                if fmt or looks_like_rank(child.name) or child.stat().st_size == 0:
                    found.append(TraceFile(child, fmt or "kineto", rank_from_name(child.name)))
        else:
            fmt = explicit_format(p)
            found.append(TraceFile(p, fmt, rank_from_name(p.name)))
    if not found:
        where = ", ".join(str(p) for p in paths)
        if skipped:
            raise UsageError(f"no trace files found in {where}; set aside: " + "; ".join(s.reason for s in skipped))
        raise UsageError(f"no trace files found in {where} "
                         "(expected *.pt.trace.json[.gz], *.json[.gz], *.sqlite or an op table *.parquet/*.arrow/*.csv)")
    return found, skipped


def _not_a_file(path: Path) -> str | None:
    """Why a folder member is not read at all: "folder", or what it is; None for a regular file."""
    if path.is_dir():
        return "folder"
    if path.is_symlink() and not path.exists():
        return f"is a dangling link (to {os.readlink(path)})"
    kind = special_kind(path)
    if kind:
        return f"is {kind}" + (f" (a link to {os.readlink(path)})" if path.is_symlink() else "") + ", not a trace file"
    return None
