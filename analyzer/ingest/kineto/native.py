"""The native path: the document's structure found in C (``_kscan.c``), the events a table reads decoded by msgspec.

One pass in C validates the whole document (strictly: stricter than msgspec, never looser) and lists each event
some table may read, with where its text starts and ends: events with a table's category or a name a table reads
(and any event whose ``cat``, ``name`` or keys it cannot judge from their raw text), and each event's
``args.correlation``. msgspec decodes the hits; the runtime calls whose correlation is on a decoded GPU event are
decoded next. The same ``_Selection.feed`` applies the same rule as on every other path, to a superset of what it
keeps, so the tables are the same (tested against the exact path on every real capture and odd layouts).

Where the extension is not built (an install without a C compiler), or the document is anything the scanner
does not accept (invalid, too deep, unusual), this path declines (None) and ``reader`` takes the others, which
word every error as before. Any layout works: events need not open lines, and the header is decoded from the
document with its event array cut out, so msgspec does not validate the 500 MB again.
"""

from __future__ import annotations

import mmap
import os

import msgspec
import numpy as np

from ...comm_catalogue import launcher_prefixes
from ...rules import HOST_SYNC_PREFIXES, STEP_PREFIX
from ..options import ReadOptions
from .events import _CHUNK_EVENTS, _HEADER, Buffer, _Event, _Selection
from .links import _linked, _numbers
from .scan import _SCAN_CATS, _Resident
from .tables import _CPU_CATS, _GPU_CATS

try:
    from . import _kscan
except ImportError:  # pragma: no cover - an install without a C compiler: the Python paths
    _kscan = None

_HIT, _CORR, _UNSURE = 1, 2, 4  # the scanner's flags (_kscan.c)
_NAMES = (b"record_param_comms",)
# step ranges, the runtime calls that block the host (their correlation is on no GPU event) and the comm
# catalogue's launcher ops: the names the other paths find by text (``scan._SCAN_NAMES``)
_PREFIXES = (STEP_PREFIX.encode(), *HOST_SYNC_PREFIXES, *launcher_prefixes())
# a custom --step-marker can match any annotation's name: every event of the categories steps come from is offered
_STEP_CATS = ("gpu_user_annotation", "user_annotation", "cpu_op")
_PART = 32 << 20  # the runtime calls are decoded a span of the file this long at a time


def available() -> bool:
    """Whether the compiled scanner is there (``COMMSCOPE_NO_NATIVE=1`` turns it off, to test the other paths)."""
    return _kscan is not None and not os.environ.get("COMMSCOPE_NO_NATIVE")


def _cats(options: ReadOptions, cpu_ops: bool) -> tuple[bytes, ...]:
    cats = set(_SCAN_CATS)
    if cpu_ops:
        cats |= {c for c, kind in _CPU_CATS.items() if kind == "op"}
    if options.step_marker:
        cats |= set(_STEP_CATS)
    return tuple(sorted(c.encode() for c in cats))


def native_select(data: Buffer, options: ReadOptions, cpu_ops: bool) -> _Selection | None:
    """The selection (its ``header`` decoded too); None: not built, or not a document this path takes."""
    if not available():
        return None
    got = _kscan.scan(data, options.limits.max_json_depth, _cats(options, cpu_ops), _NAMES, _PREFIXES,
                      isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"))
    if got is None:
        return None
    lo, hi, starts, ends, flags, corrs = got
    try:
        header = _HEADER.decode(b"".join((data[:lo], b"[]", data[hi + 1 :])))
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
        return None
    s, e = np.frombuffer(starts, dtype=np.int64), np.frombuffer(ends, dtype=np.int64)
    f = np.frombuffer(flags, dtype=np.uint8)
    hit = (f & _HIT) != 0
    pages = _Resident(data)
    found = _decode_parts(data, s, e, np.flatnonzero(hit), pages)
    if found is None:
        return None
    linked = _numbers([ev.args.correlation for ev in found if ev.cat in _GPU_CATS and ev.args is not None])
    corr = np.frombuffer(corrs, dtype=np.int64)
    offer = ((f & _UNSURE) != 0) | (((f & _CORR) != 0) & _linked(corr, linked))
    want = np.flatnonzero(offer & ~hit)
    more = _decode_parts(data, s, e, want, pages)
    if more is None:
        return None
    events = found + more
    order = np.argsort(np.r_[np.flatnonzero(hit), want], kind="stable")
    sel = _Selection(header, options, cpu_ops)
    sel.feed([events[i] for i in order])
    return sel


def _decode_parts(data: Buffer, s: np.ndarray, e: np.ndarray, idx: np.ndarray, pages: _Resident
                  ) -> list[_Event] | None:
    """``_decode`` a span of the file ``_PART`` long at a time, front to back, dropping the pages behind: the
    decoded events of one part and its text are what a worker holds beside them."""
    parts = int(e[idx[-1]] - s[idx[0]]) // _PART if idx.size else 1
    return pages.in_parts(idx, e, parts, lambda part: _decode(data, s, e, part))


def _decode(data: Buffer, s: np.ndarray, e: np.ndarray, idx: np.ndarray) -> list[_Event] | None:
    """The events at ``idx`` (ascending), in one msgspec call over their text copied once in C; None: a span
    did not decode into one event."""
    if idx.size == 0:
        return []
    try:
        events = _CHUNK_EVENTS.decode(_kscan.gather(data, s[idx], e[idx]))
    except (msgspec.MsgspecError, UnicodeDecodeError):
        return None
    return events if len(events) == idx.size else None


__all__ = ["available", "native_select"]
