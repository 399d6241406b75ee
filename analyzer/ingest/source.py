"""Bytes from a trace file: decompression by content, not by extension, with errors that name the file."""

from __future__ import annotations

import zlib
from pathlib import Path

from ..errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def head(path: Path, n: int = 16) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as exc:
        raise TraceError(path, f"cannot be read: {exc.strerror or exc}", "check the path and permissions") from None


def read_bytes(path: Path) -> bytes:
    """Whole file, gunzipped when it is gzip (by magic number)."""
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
    return data


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


__all__ = ["GZIP_MAGIC", "SQLITE_MAGIC", "head", "read_bytes"]
