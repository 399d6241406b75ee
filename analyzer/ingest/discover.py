"""Find trace files under the user's paths, tell their format by content, and guess ranks from names."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceError, UsageError
from .source import GZIP_MAGIC, SQLITE_MAGIC, head, refuse_special, strip_bom

_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".gz")
_OPTABLE_SUFFIXES = (".parquet", ".arrow", ".feather", ".ipc", ".csv")  # op tables (ingest/optable_frame.py)
_RANK_PATTERNS = (
    re.compile(r"(?i)rank[-_]?(\d+)"),
    re.compile(r"(?i)[-_.](\d+)\.(?:pt\.trace\.)?json(?:\.gz)?$"),
    re.compile(r"(?i)[-_.](\d+)\.sqlite$"),
)


@dataclass(frozen=True)
class TraceFile:
    path: Path
    format: str  # "kineto" | "nsys"
    rank_hint: int | None


def _candidate(name: str) -> bool:
    return name.endswith(_TRACE_SUFFIXES) or name.lower().endswith(_OPTABLE_SUFFIXES)


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
        from .optable_frame import is_op_table

        return "optable" if is_op_table(path) else None
    # 4 KiB first: a Kineto file names its keys at the top (16k small ranks: 64 MB read, not 1 GB)
    for size in (1 << 12, 1 << 16):
        start = head(path, size)
        if start.startswith(SQLITE_MAGIC):
            return "nsys"
        text = strip_bom(_as_text(start))
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


def discover(paths: list[Path]) -> list[TraceFile]:
    """Expand folders; explicit files are always taken (and fail loudly), folder members only if they sniff."""
    found: list[TraceFile] = []
    for p in paths:
        if not p.exists():
            raise TraceError(p, "does not exist", "check the path")
        refuse_special(p)  # a FIFO named x.json would block the first read forever
        if p.is_dir():
            # is_file(): FIFOs, sockets and devices in a folder are not trace files and are never opened
            for child in sorted(c for c in p.rglob("*") if c.is_file() and _candidate(c.name)):
                fmt = sniff(child)
                if fmt:
                    found.append(TraceFile(child, fmt, rank_from_name(child.name)))
        else:
            # the reader then says precisely what is wrong with it
            fmt = sniff(p) or ("optable" if p.name.lower().endswith(_OPTABLE_SUFFIXES) else "kineto")
            found.append(TraceFile(p, fmt, rank_from_name(p.name)))
    if not found:
        raise UsageError(f"no trace files found in {', '.join(str(p) for p in paths)} "
                         "(expected *.pt.trace.json[.gz], *.json[.gz], *.sqlite or an op table *.parquet/*.arrow/*.csv)")
    return found
