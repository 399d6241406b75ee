"""The Kineto block path: where every event opens a line, select the events a table reads in Polars.

Kineto writes each event as a block of lines opened by ``{`` at one indentation (``\\n  {\\n`` in PyTorch's
layout; json.dump's ``indent`` and one-event-per-line writers do the same at other depths). Then an
event's text is everything from its opener to the next one, and which events a table reads can be
decided for all of them at once: the blocks become one Arrow string column over the mapped bytes (no
copy), Polars' regex engine marks those with a table's category or name and pulls out each block's
``"correlation"``, and only the marked blocks and the runtime calls linked to a GPU event are decoded,
in one msgspec call per batch. Every event is looked at in Rust; Python only sees the ~15% decoded.

The same candidates as ``kineto_scan`` are offered to the same ``_Selection.feed``, so the tables are
the same (tested on every real capture). None means "not this layout": ``kineto.py`` takes the scan path.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa

from ...comm_catalogue import launcher_literals
from ...rules import HOST_SYNC_NAME, STEP_PREFIX
from ..options import ReadOptions
from . import json_depth
from .events import _CHUNK_EVENTS, _EVENT, Buffer, _Event, _Header, _Selection
from .links import _NONE, _linked, _numbers
from .scan import _EVENTS_KEY, _SCAN_CATS, _Resident
from .tables import _CPU_CATS, _GPU_CATS

_CHUNK = 32 << 20  # blocks are cut into Arrow columns this size (int32 offsets; bounded scratch memory)
_LONG = 19  # digits from which a correlation may not fit int64: such a block is always offered


def _hit_regex(cats: tuple[str, ...]) -> str:
    alts = "|".join(re.escape(c) for c in sorted(set(cats), key=len, reverse=True))
    # the comm catalogue's launcher ops (symm_mem::*, vllm::all_reduce, ...) are found by name, as
    # record_param_comms is: a few literals more in one pass of Polars' multi-literal search (and the runtime
    # calls that block the host, by name: their correlation is on no GPU event)
    launchers = "".join("|" + re.escape(x.decode()) for x in launcher_literals())
    return rf'"cat"\s*:\s*"(?:{alts})"|record_param_comms|{STEP_PREFIX}|{HOST_SYNC_NAME.decode()}{launchers}'


_HITS = _hit_regex(_SCAN_CATS)
_HITS_WITH_OPS = _hit_regex((*_SCAN_CATS, *(c for c, kind in _CPU_CATS.items() if kind == "op")))
_CORR = r'"correlation"\s*:\s*(-?\d+)'
_TWO_RX = r"\}\s*,\s*\{"  # two objects in one block (or such text in a string)


def _opener(data: Buffer, lo: int, hi: int) -> tuple[bytes, int] | None:
    """``\\n`` + the indentation + ``{`` that opens the first event, if it opens a line, and where that line's
    indentation begins (the first block); else None."""
    at = skip_space(data, lo, hi)
    if at >= hi or data[at : at + 1] != b"{":
        return None
    nl = data.rfind(b"\n", lo, at)
    if nl < 0 or data[nl + 1 : at].strip(b" "):
        return None
    return data[nl:at] + b"{", nl + 1


def skip_space(data: Buffer, lo: int, hi: int, piece: int = 1 << 20) -> int:
    """The first offset in [lo, hi) that is not whitespace (hi if none), a MiB at a time in C (~1.7 ms per MiB here,
    msgspec's own validation ~7): a byte-at-a-time loop took ~3 s per 20 MiB of padding, a regex ~5 ms per MiB."""
    at = lo
    while at < hi:
        chunk = data[at : min(hi, at + piece)]
        rest = chunk.lstrip()  # 3x faster than lstrip(b" \t\r\n"); msgspec has refused \v and \f between tokens
        if rest:
            return at + len(chunk) - len(rest)
        at += len(chunk)
    return hi


def _starts(data: Buffer, lo: int, hi: int, opener: bytes) -> np.ndarray:
    """The line starts in [lo, hi) where an ``opener`` (a '\\n', the indentation, '{') ends."""
    ind = len(opener) - 2
    back = min(lo, ind + 1)  # the opener of a block at ``lo`` begins before it
    buf = np.frombuffer(data, dtype=np.uint8, count=hi - lo + back, offset=lo - back)
    p = np.flatnonzero(buf[back + ind :] == ord("{")) + back + ind
    ok = buf[p - ind - 1] == ord("\n")
    for j in range(1, ind + 1):
        ok &= buf[p - j] == ord(" ")
    return p[ok] - ind - back + lo


def block_select(data: Buffer, header: _Header, options: ReadOptions, cpu_ops: bool) -> _Selection | None:
    """Select and decode, block by block; None: the events do not each open a line (take the scan path).

    Two passes front to back, as the scan's: the first marks and decodes each chunk's category and name
    hits while its pages are resident, the second decodes the runtime calls linked to a GPU event; pages a
    pass has left behind are dropped (``_Resident``), so a worker does not hold the whole file.
    """
    if options.step_marker:  # a custom marker can match any name: no pattern to mark blocks by
        return None
    key = _EVENTS_KEY.search(data)
    if key is None:
        return None
    lo = key.end() + 1  # after '['
    hi = lo + len(header.traceEvents) - 2  # the array's ']'
    if data[lo - 1 : lo] != b"[" or data[hi : hi + 1] != b"]":
        return None
    first = _opener(data, lo, hi)
    if first is None:
        return None
    opener, first_block = first
    limit = options.limits.max_json_depth
    json_depth.check(bytes(data[:lo]) + bytes(data[hi:]), limit)  # the header, around the events
    hits_re = _HITS_WITH_OPS if cpu_ops else _HITS
    starts: list[np.ndarray] = []
    tails: list[np.ndarray] = []  # each block's end before its separator
    hits: list[np.ndarray] = []
    nums: list[np.ndarray] = []
    twos: list[np.ndarray] = []  # blocks with '}' ',' '{' (two events on a line, or such a name): decoded alone
    longs: list[np.ndarray] = []
    found: list[_Event] = []
    pages = _Resident(data)
    pos = first_block  # padding before the first event is whitespace (``_opener``): the chunks start after it
    while pos < hi:
        cut = hi
        if hi - pos > _CHUNK:
            nxt = data.find(opener, pos + _CHUNK, hi)
            cut = hi if nxt < 0 else nxt + 1
        s = _starts(data, pos, cut, opener)
        if s.size == 0 or s[0] != pos:
            return None  # a chunk not cut at an opener: not this layout
        tail = _trimmed(data, s, np.r_[s[1:], cut])
        if not _closed(data, tail):
            return None
        col = _column(data, s, cut)
        if col is None:
            return None
        frame = pl.DataFrame({"t": col}).select(
            pl.col("t").str.contains(hits_re).alias("hit"),
            pl.col("t").str.extract(_CORR).alias("c"),
            pl.col("t").str.contains(_TWO_RX).alias("two"),
            pl.col("t").str.count_matches(r"[\[{]", literal=False).alias("open"),
        )
        del col
        # an event nests at most as deep as its count of '[' and '{' (2 levels in: the document, the array);
        # only the rare block whose count passes the limit is measured exactly
        deep = np.flatnonzero(frame["open"].to_numpy() + 2 > limit)
        if deep.size:
            ends = np.r_[s[1:], cut]
            for i in deep.tolist():
                json_depth.check(data[int(s[i]) : int(ends[i])], limit, outer=2)
        c = frame["c"]
        hit, two = frame["hit"].to_numpy(), frame["two"].to_numpy()
        got = _decode(data, s, tail, np.r_[s[1:], cut], np.flatnonzero(hit), two)
        if got is None:
            return None
        found += got
        starts.append(s)
        tails.append(tail)
        hits.append(hit)
        twos.append(two)
        nums.append(c.cast(pl.Int64, strict=False).fill_null(_NONE).to_numpy())
        longs.append((c.str.len_bytes().fill_null(0) >= _LONG).to_numpy())
        del frame, c
        pos = cut
        pages.behind(pos)
    pages.restart()
    s, tail = np.concatenate(starts), np.concatenate(tails)
    nxt = np.r_[s[1:], hi]  # where each block's successor starts (the last chunk's cut is the array's ']')
    hit, two = np.concatenate(hits), np.concatenate(twos)
    linked = _numbers([e.args.correlation for e in found if e.cat in _GPU_CATS and e.args is not None])
    # runtime calls (any event but a hit) whose correlation is on a GPU event. Offered too (a superset is
    # safe: feed applies the rule): a number too long for int64, and a block that may hold a second event
    # (its correlation would not be the one read)
    want = np.flatnonzero((_linked(np.concatenate(nums), linked) | np.concatenate(longs) | two) & ~hit)
    # in file order, a chunk's span at a time
    more = pages.in_parts(want, tail, (hi - lo) // _CHUNK, lambda part: _decode(data, s, tail, nxt, part, two))
    if more is None:
        return None
    order = np.argsort(np.r_[np.flatnonzero(hit), want], kind="stable")
    events = found + more
    sel = _Selection(header, options, cpu_ops)
    sel.feed([events[i] for i in order])
    return sel


def _closed(data: Buffer, tail: np.ndarray) -> bool:
    """Does every block end with '}' (before its separator)? A line opened by '{' at the events'
    indentation inside an event (an array of objects whose first one opens a line) leaves a block that
    ends with '[' or ':' instead. One shape this cannot tell, as the scan path cannot: such an array whose
    first object shares the line of its '[' (blocks that each decode are then nested objects)."""
    return bool((np.frombuffer(data, dtype=np.uint8)[np.maximum(tail - 1, 0)] == ord("}")).all())


def _column(data: Buffer, s: np.ndarray, cut: int) -> pa.Array | None:
    """The blocks [s_i, s_i+1) and [s_last, cut) as one Arrow string column over ``data`` (no copy);
    None where the bytes are not UTF-8 (msgspec's check of the document skips unread strings)."""
    base = int(s[0])
    offsets = np.r_[s - base, cut - base].astype(np.int32)
    buf = pa.py_buffer(memoryview(data)[base:cut])
    col = pa.Array.from_buffers(pa.binary(), len(s), [None, pa.py_buffer(offsets), buf])
    try:
        return col.cast(pa.string())  # validates UTF-8
    except pa.ArrowInvalid:
        return None


def _decode(data: Buffer, s: np.ndarray, tail: np.ndarray, nxt: np.ndarray, idx: np.ndarray,
            two: np.ndarray) -> list[_Event] | None:
    """The events of blocks ``idx`` (ascending indexes into ``s``, ``tail``, ``nxt``, ``two``), in that order;
    None: some block is not exactly one object.

    Blocks ``two`` marks (their text has '}' ',' '{') are decoded one at a time: a slice that decodes alone
    is one object. The others in one msgspec call over their text as the file has it, each block with the
    separator after it (the last one trimmed), gathered by Arrow (``_gather``), which must give one
    object per block: a second object in a block needs the text ``two`` looks for, and a block holding
    only part of an object leaves fewer objects than blocks (or no valid array).
    """
    if idx.size == 0:
        return []
    alone = two[idx]
    batch = idx[~alone]
    rest: list[_Event] = []
    try:
        if batch.size:
            ends = nxt[batch]
            ends[-1] = tail[batch[-1]]
            rest = _CHUNK_EVENTS.decode(b"".join((b"[", _gather(data, s[batch], ends), b"]")))
            if len(rest) != batch.size:
                return None
        if not alone.any():
            return rest
        out: list[Any] = [None] * idx.size
        for i, j in enumerate(np.flatnonzero(~alone).tolist()):
            out[j] = rest[i]
        for j in np.flatnonzero(alone).tolist():
            out[j] = _EVENT.decode(data[int(s[idx[j]]) : int(tail[idx[j]])])
        return out
    except (msgspec.MsgspecError, UnicodeDecodeError):
        return None


def _gather(data: Buffer, a: np.ndarray, b: np.ndarray) -> memoryview:
    """``data[a_i:b_i]`` for every i, concatenated (ascending, disjoint spans): one Arrow ``take`` over the
    spans and the gaps between them, instead of a Python slice per block (~0.3 s of a 500 MB rank)."""
    base = int(a[0])
    bounds = np.empty(2 * a.size, dtype=np.int64)
    bounds[0::2], bounds[1::2] = a, b
    bounds -= base  # the values: span 0, gap 0, span 1, ..., span n-1
    buf = pa.py_buffer(memoryview(data)[base : int(b[-1])])
    pieces = pa.Array.from_buffers(pa.large_binary(), 2 * a.size - 1, [None, pa.py_buffer(bounds), buf])
    got = pieces.take(pa.array(np.arange(0, 2 * a.size - 1, 2)))
    return memoryview(got.buffers()[2])[: int((b - a).sum())]


def _trimmed(data: Buffer, s: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each block's end before its trailing whitespace and one ',' (what separates it from the next)."""
    whole = np.frombuffer(data, dtype=np.uint8)
    e = ends.copy()
    comma = np.zeros(e.size, dtype=bool)
    for _ in range(64):  # a few bytes: '},\n' and the indentation are on the next block's line
        c = whole[np.maximum(e - 1, s)]
        space = (c == 32) | (c == 10) | (c == 13) | (c == 9)
        cut = (space | ((c == ord(",")) & ~comma)) & (e > s)
        if not cut.any():
            return e
        comma |= cut & (c == ord(","))
        e -= cut
    return ends  # odd trailing text: the untrimmed block fails to decode and says so
