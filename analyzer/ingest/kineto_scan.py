"""The Kineto scan path: find the few events any table reads by a byte scan, decode only those.

``kineto.py`` first decodes the header, which validates every byte of the document; then a regex on the
``"cat"`` keys of the kept categories and two ``bytes.find`` passes (``record_param_comms``,
``ProfilerStep#``) give hits, and the innermost JSON object around each hit is decoded. The noise
(python_function, cpu_op: ~90% of a real trace) never becomes a Python object. None means "could not
place an event": ``kineto.py`` then takes the chunked path.
"""

from __future__ import annotations

import re

import msgspec

from .kineto_events import _EVENT, Buffer, _Event, _Header, _Selection
from .kineto_tables import _CPU_CATS, _GPU_CATS
from .options import ReadOptions

# Categories some table reads (plus gpu_user_annotation, which carries GPU-side step markers).
_SCAN_CATS = (*_GPU_CATS, *(c for c, kind in _CPU_CATS.items() if kind != "op"), "gpu_user_annotation")
_SCAN_NAMES = (b"record_param_comms", b"ProfilerStep#")  # cpu_op events some table reads, by name
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*')
_EVENT_END = re.compile(rb"\}\s*[,\]]")


def _cat_pattern(cats: tuple[str, ...]) -> re.Pattern[bytes]:
    # '"cat"' is a literal prefix, so re skips ahead with a fast search; a '"' inside a JSON string is
    # escaped, so '"cat"' followed by ':' is always a key, never string content
    alts = "|".join(re.escape(c) for c in sorted(set(cats), key=len, reverse=True))
    return re.compile(rf'"cat"\s*:\s*"(?:{alts})"'.encode())


_SCAN = _cat_pattern(_SCAN_CATS)
_SCAN_WITH_OPS = _cat_pattern((*_SCAN_CATS, *_CPU_CATS))


def scan_select(data: Buffer, header: _Header, options: ReadOptions, cpu_ops: bool) -> _Selection | None:
    """Find and decode only the events some table reads; None: use the chunked path.

    ``header`` was decoded by msgspec, which validated every byte of the document (a truncated or
    corrupt file fails there and is worded by the exact path). Candidates are a superset of what
    ``_Selection.feed`` keeps, as long as category values and the two names are written literally
    (no \\u escapes), which every profiler does; feed then applies the same rules as the other paths.
    """
    if options.step_marker:  # a custom marker can match any name: no literal to scan for
        return None
    body = memoryview(header.traceEvents)
    key = _EVENTS_KEY.search(data)
    if key is None or len(body) < 2:
        return None
    lo, hi = key.end(), key.end() + len(body) - 1  # the array's '[' and ']'
    if data[lo : lo + 1] != b"[" or data[hi : hi + 1] != b"]" or body[:1] != b"[":
        return None
    hits = [m.start() for m in (_SCAN_WITH_OPS if cpu_ops else _SCAN).finditer(data, lo, hi)]
    for name in _SCAN_NAMES:
        at = data.find(name, lo, hi)
        while at >= 0:
            hits.append(at)
            at = data.find(name, at + len(name), hi)
    found: dict[int, _Event] = {}  # by start: an event hit by its category and its name is kept once
    rfind, end, decode = data.rfind, _EVENT_END.search, _EVENT.decode
    for at in hits:
        # the usual case inline (nearest '{', first end); anything else goes to _object_around
        start, m = rfind(b"{", lo, at), end(data, at, hi + 1)
        if start >= 0 and m is not None:
            try:
                found[start] = decode(data[start : m.start() + 1])
                continue
            except (msgspec.MsgspecError, UnicodeDecodeError):
                pass
        got = _object_around(data, at, lo, hi + 1)
        if got is None:
            return None
        found[got[0]] = got[1]
    sel = _Selection(header, options, cpu_ops)
    sel.feed([found[s] for s in sorted(found)])  # file order, as the other paths
    return sel


def _object_around(data: Buffer, at: int, lo: int, stop: int, tries: int = 64) -> tuple[int, _Event] | None:
    """(start, decoded) of the innermost JSON object enclosing position ``at``; None: not found in ``tries``.

    Candidates start at a '{' before ``at`` (nearest first) and end at a '}' followed by ',' or ']'
    after it. A slice that decodes is exactly one complete object that spans ``at``: a '{' inside a
    string, or one whose object closes before ``at``, leaves invalid or trailing text, and an end
    inside a string or a nested object leaves the input truncated. So a wrong guess can only fail,
    never decode into the wrong event. Kernel names hold '}, ' (``{lambda(float)#1}, std::array``), so
    a first end can be early; a key order with ``args`` before ``cat`` makes a first start wrong.
    """
    start = at
    while tries > 0:
        start = data.rfind(b"{", lo, start)
        if start < 0:
            return None
        pos = at
        while tries > 0:
            tries -= 1
            m = _EVENT_END.search(data, pos, stop)
            if m is None:
                break
            try:
                return start, _EVENT.decode(data[start : m.start() + 1])
            except (msgspec.MsgspecError, UnicodeDecodeError) as exc:
                if "truncated" not in str(exc):  # this start is wrong: try the '{' before it
                    break
                pos = m.start() + 1  # this end is early: try the next one
    return None
