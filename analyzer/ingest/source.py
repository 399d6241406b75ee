"""Bytes from a trace file: decompression by content, not by extension, with errors that name the file."""

from __future__ import annotations

import re
import stat
import zlib
from pathlib import Path
from typing import Any

from ..errors import TraceError
from .limits import DEFAULT, RATIO_FLOOR, Limits, size_text

try:  # igzip inflates ~2-3x faster than zlib; optional
    from isal import isal_zlib as _fast_zlib
except ImportError:  # pragma: no cover - depends on the environment
    _fast_zlib = None

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


def read_bytes(path: Path, limits: Limits = DEFAULT) -> bytes:
    """Whole file, gunzipped when it is gzip (by magic number, within ``limits``), without a UTF-8 byte-order mark."""
    refuse_special(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot be read: {exc.strerror or exc}", "check the path and permissions") from None
    if not data:
        raise TraceError(path, "is empty", "re-export the trace from the profiler")
    if data[:2] == GZIP_MAGIC:
        try:
            data = inflate(path, data, limits)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(
                path, f"is a truncated or corrupt gzip file ({exc})", "copy the file again or re-export it"
            ) from None
        if not data:
            raise TraceError(path, "is an empty gzip file", "re-export the trace from the profiler")
    return strip_bom(data)


_PIECE = 16 << 20  # inflated per call: the limits are checked this often


def inflate(path: Path, data: bytes, limits: Limits = DEFAULT) -> bytes:
    """gzip -> bytes, member after member (gzip tolerates trailing garbage after a complete member, so do we),
    refused with one line as soon as the output passes ``limits`` (never inflated to the end first).

    Raises EOFError for a stream that ends early and zlib.error (or isal's) for a corrupt one: callers word them.
    """
    try:
        return _inflate(path, data, limits, _fast_zlib or zlib)
    except _ZLIB_ERRORS as exc:
        raise zlib.error(str(exc)) from None


_ZLIB_ERRORS = (zlib.error,) + ((_fast_zlib.error,) if _fast_zlib is not None else ())


def _inflate(path: Path, data: bytes, limits: Limits, zl: Any) -> bytes:
    cap = limits.max_inflated_bytes
    ratio_cap = max(RATIO_FLOOR, limits.max_inflate_ratio * len(data))
    out: list[bytes] = []
    total = 0
    rest = data
    while rest:
        d = zl.decompressobj(wbits=31)
        piece = d.decompress(rest, _PIECE)
        while True:
            total += len(piece)
            out.append(piece)
            if total > cap:
                raise TraceError(path, f"inflates to more than {size_text(cap)} (the inflated-size limit)",
                                 "raise --max-inflated-size if the trace is really this big")
            if total > ratio_cap:
                raise TraceError(
                    path, f"inflates more than {limits.max_inflate_ratio}x its compressed {size_text(len(data))} "
                    f"(over {size_text(total)} so far): refused as a likely gzip bomb",
                    "raise --max-inflate-ratio if the trace is real")
            if d.eof or not d.unconsumed_tail and len(piece) < _PIECE:
                break
            piece = d.decompress(d.unconsumed_tail, _PIECE)
        if not d.eof:
            raise EOFError("compressed stream ended before the end-of-stream marker")
        rest = d.unused_data
        if rest[:2] != GZIP_MAGIC:
            break
    return b"".join(out)


__all__ = ["GZIP_MAGIC", "SQLITE_MAGIC", "UTF8_BOM", "head", "inflate", "nonfinite_as_null", "read_bytes", "refuse_special",
           "special_kind", "strip_bom"]
