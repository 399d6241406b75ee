"""The Kineto scan path: find the few events any table reads by a byte scan, decode only those.

``kineto.py`` first decodes the header, which validates every byte of the document; then one regex pass
finds the ``"cat"`` keys of the GPU and annotation categories and every ``"correlation"`` key, two
``bytes.find`` passes (``record_param_comms``, ``ProfilerStep#``) add hits, and the innermost JSON object
around each category or name hit is decoded. Runtime calls are found by their correlation instead:
only those whose number is on a decoded GPU event (launches of kernels, copies, syncs: ~10% of the
runtime calls in real captures) are decoded. The rest -- other runtime calls, ac2g flows, cpu_op,
python_function -- never becomes a Python object. None means "could not place an event": ``kineto.py``
then takes the chunked path.
"""

from __future__ import annotations

import mmap
import re
from array import array
from collections.abc import Callable

import msgspec
import numpy as np

from ...comm_catalogue import launcher_literals
from ...rules import HOST_SYNC_NAME, STEP_PREFIX
from ..options import ReadOptions
from .events import _EVENT, Buffer, _Event, _Header, _Selection
from .tables import _CPU_CATS, _GPU_CATS

# Categories some table reads by category; runtime calls are found by correlation (``_scan_pattern``),
# after the GPU events. GPU-side annotations are read only as step markers, so the ``ProfilerStep#``
# name finds them: by category they are ~2% of a real capture's events, nearly all other ranges.
_SCAN_CATS = (*_GPU_CATS, *(c for c, kind in _CPU_CATS.items() if kind == "annotation"))
# events some table reads, found by name: cpu_op ``record_param_comms``, step ranges, the runtime calls that
# block the host (``rules.HOST_SYNC_CALL``: their correlation is on no GPU event, so the launch pass skips them)
# and the comm catalogue's launcher ops
_SCAN_NAMES = (b"record_param_comms", STEP_PREFIX.encode(), HOST_SYNC_NAME, *launcher_literals())
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*')
# an event's end: '}' then the next event's '{' or the array's ']' (a '}, ' inside a kernel name such as
# ``{lambda(float)#1}, std::array`` is not followed by '{', so it rarely sends a hit to ``_object_around``)
_EVENT_END = re.compile(rb"\}\s*(?:,\s*\{|\])")


def _scan_pattern(cats: tuple[str, ...]) -> re.Pattern[bytes]:
    """One pass for both kinds of hit: a ``"cat"`` key with one of ``cats`` (group 1 None), or a
    ``"correlation"`` key with its number's digits (group 1; a runtime call written ``5801.0`` is still
    offered: a superset is safe). One pass over a 500 MB rank costs ~0.4 s here, two cost ~0.77 s.

    ``"c`` is a literal prefix, so re skips ahead with a fast search; a '"' inside a JSON string is
    escaped, so ``"cat"`` or ``"correlation"`` followed by ':' is always a key, never string content.
    """
    alts = "|".join(re.escape(c) for c in sorted(set(cats), key=len, reverse=True))
    return re.compile(rf'"c(?:at"\s*:\s*"(?:{alts})"|orrelation"\s*:\s*(-?\d+))'.encode())


_SCAN = _scan_pattern(_SCAN_CATS)
_SCAN_WITH_OPS = _scan_pattern((*_SCAN_CATS, *(c for c, kind in _CPU_CATS.items() if kind == "op")))
_WINDOW = 1 << 20  # the scan's window: its three searches read it while it is in the CPU cache
_BEHIND = 8 << 20  # pages further than this behind a pass are dropped from this process (``_Resident``)


class _Resident:
    """Keeps the passes over a mapped file from holding the whole file in this process's memory.

    The scan's two passes (the windows with their decodes, then the launches) read the file front to
    back; pages a pass has left behind are dropped from this process (``MADV_DONTNEED``: the page cache
    keeps them and a later read maps them again, so results cannot change). msgspec's validation before
    them still maps the whole file: that is a worker's peak. Two parse workers each holding a 500 MB
    rank's pages were half of the 2 GB peak of a 4-rank run. Inflated gzip (bytes) is left alone.
    """

    def __init__(self, data: Buffer) -> None:
        self.data = data if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED") else None
        self.done = 0  # pages below this offset are dropped

    def behind(self, pos: int) -> None:
        """The pass is at ``pos``: drop what lies more than ``_BEHIND`` before it."""
        if self.data is not None and pos - self.done >= 2 * _BEHIND:
            end = (pos - _BEHIND) // mmap.PAGESIZE * mmap.PAGESIZE
            if end > self.done:
                self.data.madvise(mmap.MADV_DONTNEED, self.done, end - self.done)
                self.done = end

    def restart(self) -> None:
        """A pass ended (or a new one begins at the front): drop every page."""
        if self.data is not None:
            self.data.madvise(mmap.MADV_DONTNEED, 0, len(self.data))
            self.done = 0

    def in_parts(self, idx: np.ndarray, ends: np.ndarray, parts: int,
                 decode: Callable[[np.ndarray], list | None]) -> list | None:
        """One pass: ``decode`` of ``idx`` (ascending) cut into ``parts`` pieces in file order, dropping the pages
        behind each (``ends``: each index's end offset); None where a piece did not decode."""
        out: list = []
        for part in np.array_split(idx, max(1, parts)):
            got = decode(part)
            if got is None:
                return None
            out += got
            if part.size:
                self.behind(int(ends[part[-1]]))
        self.restart()
        return out


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
    pages = _Resident(data)
    # correlation hits and their numbers, for after the GPU events are known: int64 arrays, not ~1 M
    # Python objects each (64 MB less at the scan's peak on a 500 MB rank)
    corr_at, corr_num = array("q"), array("q")
    found: dict[int, _Event] = {}  # by start: an event hit by its category and its name is kept once
    ends: dict[int, int] = {}  # by start: where that event's text ends
    pattern = _SCAN_WITH_OPS if cpu_ops else _SCAN
    pos = lo
    while pos < hi:
        # windows end at a '}', which no hit contains, so no hit spans two windows
        cut = data.find(b"}", pos + _WINDOW, hi)
        cut = hi if cut < 0 else cut
        hits: list[int] = []  # category and name hits, decoded while the window is in the cache
        for m in pattern.finditer(data, pos, cut):
            digits = m[1]
            if digits is None:
                hits.append(m.start())
            else:
                corr_at.append(m.start())
                corr_num.append(int(digits) if len(digits) < 19 else _UNSURE)
        for name in _SCAN_NAMES:
            at = data.find(name, pos, cut)
            while at >= 0:
                hits.append(at)
                at = data.find(name, at + len(name), cut)
        for at in hits:
            if not _decode_at(data, at, lo, hi, found, ends, False):
                return None
        pos = cut
        pages.behind(pos)
    pages.restart()
    # runtime calls: only those whose correlation is on a GPU event (the rule of ``launches_of_gpu_work``)
    linked = {_number(e.args.correlation) for e in found.values() if e.cat in _GPU_CATS and e.args is not None}
    linked.add(_UNSURE)
    starts = sorted(found)  # events do not nest, so their spans are disjoint and ordered
    j, n = 0, len(starts)
    for at, num in zip(corr_at, corr_num):
        if num not in linked:
            continue
        while j < n and ends[starts[j]] <= at:
            j += 1
        if j < n and starts[j] <= at:
            continue  # a GPU event's own correlation: decoded already (a '{' in its name would mislead rfind)
        if not _decode_at(data, at, lo, hi, found, ends, True):
            return None
        pages.behind(at)
    pages.restart()
    sel = _Selection(header, options, cpu_ops)
    sel.feed([found[s] for s in sorted(found)])  # file order, as the other paths
    return sel


_UNSURE = -(2**63)  # a correlation too long for int64: offered to feed (a superset is safe)


def _number(value: object) -> int | None:
    """A GPU event's correlation as the number ``_scan_pattern``'s digits give (an integral float too)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) < 2**63:
        return int(value)
    return None


def _decode_at(data: Buffer, at: int, lo: int, hi: int, found: dict[int, _Event], ends: dict[int, int],
               inner: bool) -> bool:
    """Decode the event around ``at`` into ``found`` and its end into ``ends`` (by start); False: it could
    not be placed.

    ``inner``: the hit is a key inside the event's ``args``, so the event is the object around that
    object's '{'. The usual case inline: the event starts at the nearest '{' before and ends at the first
    ``_EVENT_END``; a slice that decodes is one whole object spanning ``at``. Anything else
    goes to ``_object_around``.
    """
    if inner:
        at = data.rfind(b"{", lo, at)
        if at < 0:
            return False
    start = data.rfind(b"{", lo, at)
    if start in found:
        return True  # a GPU event's own correlation, or an event hit twice
    m = _EVENT_END.search(data, at, hi + 1)
    if start >= 0 and m is not None:
        try:
            found[start] = _EVENT.decode(data[start : m.start() + 1])
            ends[start] = m.start() + 1
            return True
        except (msgspec.MsgspecError, UnicodeDecodeError):
            pass
    got = _object_around(data, at, lo, hi + 1)
    if got is None:
        return False
    found[got[0]], ends[got[0]] = got[2], got[1]
    return True


def _object_around(data: Buffer, at: int, lo: int, stop: int, tries: int = 64) -> tuple[int, int, _Event] | None:
    """(start, end, decoded) of the innermost JSON object enclosing position ``at``; None: not found in ``tries``.

    Candidates start at a '{' before ``at`` (nearest first) and end at an ``_EVENT_END`` after it. A
    slice that decodes is exactly one complete object that spans ``at``: a '{' inside a string, or one
    whose object closes before ``at``, leaves invalid or trailing text, and an end inside a string or a
    nested object leaves the input truncated. So a wrong guess can only fail, never decode into the wrong
    event. A name holding '}, {' makes a first end early; a key order with ``args`` before ``cat``, or a
    '{' in a name before the hit, makes a first start wrong.
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
                return start, m.start() + 1, _EVENT.decode(data[start : m.start() + 1])
            except (msgspec.MsgspecError, UnicodeDecodeError) as exc:
                if "truncated" not in str(exc):  # this start is wrong: try the '{' before it
                    break
                pos = m.start() + 1  # this end is early: try the next one
    return None
