"""Bytes from a trace file: decompression by content, not by extension, with errors that name the file."""

from __future__ import annotations

import re
import stat
import zlib
from pathlib import Path

from ..errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
UTF8_BOM = b"\xef\xbb\xbf"  # some editors and Windows tools put it before the JSON; it is not part of the document

_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def special_kind(path: Path) -> str | None:
    """What a path is when it is not a regular file or folder (opening a FIFO would block forever); else None."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # absent or unreadable: opening it says so
    return next((name for test, name in _SPECIAL if test(mode)), None)


def refuse_special(path: Path) -> None:
    kind = special_kind(path)
    if kind:
        raise TraceError(path, f"is {kind}, not a trace file", "pass a regular trace file or a folder of them")


def strip_bom(data: bytes) -> bytes:
    return data[len(UTF8_BOM):] if data[:3] == UTF8_BOM else data


# NaN / Infinity / -Infinity as values (Python's json writes them; JSON has no such tokens)
_NONFINITE = re.compile(rb"(?<=[:,\[])(\s*)(?:-?Infinity|NaN)(?=\s*[,}\]])")


def nonfinite_as_null(data: bytes | memoryview) -> bytes | None:
    """The document with NaN/Infinity values read as null (the loader then drops and counts the events whose
    times they were); None when it has none, so a document broken otherwise keeps its own error."""
    if _NONFINITE.search(data) is None:
        return None
    return _NONFINITE.sub(rb"\1null", data)


def head(path: Path, n: int = 16) -> bytes:
    refuse_special(path)
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as exc:
        raise TraceError(path, f"cannot be read: {exc.strerror or exc}", "check the path and permissions") from None


def read_bytes(path: Path) -> bytes:
    """Whole file, gunzipped when it is gzip (by magic number), without a UTF-8 byte-order mark."""
    refuse_special(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot be read: {exc.strerror or exc}", "check the path and permissions") from None
    if not data:
        raise TraceError(path, "is empty", "re-export the trace from the profiler")
    if data[:2] == GZIP_MAGIC:
        try:
            data = _gunzip(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(
                path, f"is a truncated or corrupt gzip file ({exc})", "copy the file again or re-export it"
            ) from None
        if not data:
            raise TraceError(path, "is an empty gzip file", "re-export the trace from the profiler")
    return strip_bom(data)


def _gunzip(data: bytes) -> bytes:
    # zlib with wbits=47 handles gzip headers; multi-member gzip files need the loop.
    out = []
    while data:
        d = zlib.decompressobj(wbits=47)
        out.append(d.decompress(data))
        if not d.eof:
            raise EOFError("compressed stream ended before the end-of-stream marker")
        data = d.unused_data
        if data and data[:2] != GZIP_MAGIC:
            break  # trailing garbage after a complete member: gzip tolerates it, so do we
    return b"".join(out)


__all__ = ["GZIP_MAGIC", "SQLITE_MAGIC", "UTF8_BOM", "head", "nonfinite_as_null", "read_bytes", "refuse_special",
           "special_kind", "strip_bom"]
