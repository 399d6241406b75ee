"""A dump's entries -> columns of the canonical entry table, every field checked for its type and range.

Each field is read as what torch writes (ints, strings, lists of int lists, finite floats): a value of another
type or past int64 is never passed on (a nested list where a number belongs crashed the table builder; ``inf``
raised OverflowError). Identity fields (record and seq ids, the group, the op, the state) fail the dump when bad:
without them no entry can be placed. Measures (times, sizes, durations, timeouts) that are bad become unknown and
are counted (``Notes``), so the reader can say how many.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ...comm_catalogue import op_from_collective_name
from ...errors import TraceError
from ..kineto.tables import dtype_size

INT64_MAX = (1 << 63) - 1

ENTRY_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "record_id": pl.Int64,
    "pg": pl.Utf8,  # process_group[0]: the group's name (global, the same on every member)
    "pg_desc": pl.Utf8,  # process_group[1]: e.g. "mesh_tp", "default_pg", "undefined"
    "seq": pl.Int64,  # collective_seq_id (collectives) or p2p_seq_id (send/recv), per group and rank
    "is_p2p": pl.Boolean,
    "op_id": pl.Int64,
    "op": pl.Utf8,  # canonical op (all_reduce, all_gather, send, recv, barrier, coalesced, ...)
    "profiling_name": pl.Utf8,
    "src": pl.Int32,  # send/recv: group-local source and destination ranks from the profiling name
    "dst": pl.Int32,
    "in_bytes": pl.Int64,
    "out_bytes": pl.Int64,
    "dtype": pl.Utf8,
    "in_dtypes": pl.Utf8,  # every tensor's dtype, as listed ("Float,Float"): PyTorch's analyzer compares these
    "out_dtypes": pl.Utf8,
    "in_sizes": pl.Utf8,  # the sizes as listed ("[[1048576]]"): compared as PyTorch's analyzer does
    "out_sizes": pl.Utf8,
    "in_numel": pl.Int64,  # elements of the first tensor (all_gather / reduce_scatter checks)
    "out_numel": pl.Int64,
    "state": pl.Utf8,
    "retired": pl.Boolean,
    "done": pl.Boolean,  # the op finished on this rank (see _done: state for NCCL, retired for gloo)
    "created_ns": pl.Int64,  # wall clock (ns since the epoch) on the rank's host
    "started_ns": pl.Int64,
    "completed_ns": pl.Int64,
    "duration_ms": pl.Float64,
    "timeout_ms": pl.Int64,
    "frames": pl.Utf8,  # the stack, innermost first, one "name (file:line)" per line
}
COLUMNS = tuple(ENTRY_SCHEMA)


class Bad(ValueError):
    """An identity field that cannot be read: the dump fails."""


@dataclass
class Notes:
    """Measures read as unknown, by field: what the reader warns about."""

    bad: dict[str, int] = field(default_factory=dict)

    def count(self, name: str) -> None:
        self.bad[name] = self.bad.get(name, 0) + 1


def _id(v: object, name: str, optional: bool = False) -> int | None:
    """A record / seq / op id: an int in int64 (torch writes ints; a bool or float is not one)."""
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= INT64_MAX:
        raise Bad(f"{name} is {_brief(v)}, not an id")
    return v


def _text(v: object, name: str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool):  # some versions write a group's name as a number
        return str(v)
    raise Bad(f"{name} is {_brief(v)}, not text")


def _brief(v: object) -> str:
    """A value for a message without rendering all of it (a bad field may be a million-element list)."""
    if isinstance(v, (list, tuple, dict)):
        return f"a {type(v).__name__} of {len(v)}"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > INT64_MAX:
        return f"an integer of {len(str(abs(v))) if abs(v) < 10 ** 4000 else 'over 4,000'} digits"
    return repr(v)[:40]


def _time(v: object, name: str, notes: Notes) -> int | None:
    """ns since the epoch; 0 and None mean "not yet" (torch writes both)."""
    if v is None or v == 0 or isinstance(v, bool):
        return None
    if isinstance(v, int) and 0 < v <= INT64_MAX:
        return v
    if isinstance(v, float) and math.isfinite(v) and 0 < v < 9.2e18:
        return int(v)
    notes.count(name)
    return None


def _number(v: object, name: str, notes: Notes, integral: bool = False) -> float | int | None:
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= INT64_MAX:
        return int(v) if integral else float(v)
    notes.count(name)
    return None


def _numels(sizes: object, name: str, notes: Notes) -> tuple[list[int] | None, str | None]:
    """Elements per tensor, and the sizes as text; None where a size is not a list of non-negative ints."""
    if sizes is None:
        return None, None
    numels = []
    if type(sizes) is list:
        for s in sizes:
            if type(s) is not list:
                break
            n = 1
            for d in s:
                if type(d) is not int or not 0 <= d <= INT64_MAX:
                    break
                n *= d
            else:
                numels.append(n)
                continue
            break
        else:
            return numels, str(sizes) if len(sizes) <= 64 else f"{len(sizes)} tensors"
    notes.count(name)
    return None, None


def _dtypes(v: object, name: str, notes: Notes) -> list[str] | None:
    if v is None:
        return None
    if isinstance(v, list) and all(isinstance(d, str) and len(d) < 64 for d in v):
        return v
    notes.count(name)
    return None


def _bytes(numels: list[int] | None, dtypes: list[str] | None, name: str, notes: Notes) -> int | None:
    size = dtype_size(dtypes[0]) if dtypes else None
    if numels is None or size is None:
        return None
    total = sum(numels) * size
    if total > INT64_MAX:
        notes.count(name)
        return None
    return total


_P2P_NAME = re.compile(r"^(?:\w+:)?(send|recv)\s+(\d{1,9})\s*(->|<-)\s*(\d{1,9})")


def op_name(profiling_name: str) -> tuple[str | None, int | None, int | None, str]:
    """"nccl:all_reduce" -> (all_reduce, None, None, nccl); "gloo:send 0->1" / "nccl:recv 1<-0" -> (op, src, dst,
    backend)."""
    backend = profiling_name.split(":", 1)[0] if ":" in profiling_name else ""
    m = _P2P_NAME.match(profiling_name)
    if not m:
        return op_from_collective_name(profiling_name.split(":", 1)[-1].split(" ")[0]), None, None, backend
    a, b = int(m.group(2)), int(m.group(4))
    src, dst = (a, b) if m.group(3) == "->" else (b, a)
    return m.group(1), src, dst, backend


def done(state: str, retired: bool, backend: str) -> bool:
    """Finished on this rank. NCCL (and the other event-backed backends) set ``state`` from the work's end
    event, also when the watchdog retires it, and retires timed-out work too: only "completed" is done.
    Gloo records no events (every entry stays "scheduled") and retires an entry when its work ends, so there
    ``retired`` is done. Gloo also retires work that failed because a peer went away: a dump taken after a
    peer exited shows the op it waited in as finished."""
    return state == "completed" or (backend == "gloo" and retired)


_SCALAR = frozenset((str, int))


def _frames(frames: object) -> str | None:
    if type(frames) is not list or not frames:
        return None
    out = []
    for f in frames[:256]:
        if type(f) is dict:
            name, file, line = f.get("name", "?"), f.get("filename", "?"), f.get("line", "?")
            if type(name) in _SCALAR and type(file) in _SCALAR and type(line) in _SCALAR:
                out.append(f"{name} ({file}:{line})")
            else:
                out.append("? (?:?)")
    return "\n".join(out) or None


def rows(path: Path, rank: int, entries: object, notes: Notes | None = None) -> dict[str, list]:
    """Columns of one dump's entries; an entry without the keys every 2.x dump has, or with an identity field that
    is no id or text, fails the dump (TraceError)."""
    if not isinstance(entries, list):
        raise TraceError(path, "'entries' is not a list", "the dump is damaged; copy it again")
    notes = notes if notes is not None else Notes()
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    names: dict[str, tuple[str | None, int | None, int | None, str]] = {}
    for i, e in enumerate(entries):
        try:
            if not isinstance(e, dict):
                raise Bad(f"is {_brief(e)}, not a record")
            pg = e["process_group"]
            if not isinstance(pg, (list, tuple)) or len(pg) < 2:
                raise Bad(f"process_group is {_brief(pg)}, not (name, description)")
            name = _text(e["profiling_name"], "profiling_name")
            state = _text(e["state"], "state")
            retired = e.get("retired", False) is True
            op, src, dst, backend = names[name] if name in names else names.setdefault(name, op_name(name[:200]))
            flag = e.get("is_p2p", src is not None)
            is_p2p = flag is True or src is not None
            # dumps before 2.2 (torch 2.3) had one "seq_id" per group for collectives and send/recv alike
            seq = e.get("p2p_seq_id", e.get("seq_id")) if is_p2p else e.get("collective_seq_id", e.get("seq_id"))
            if seq is None and not is_p2p:
                raise KeyError("collective_seq_id")
            in_n, in_text = _numels(e.get("input_sizes"), "input_sizes", notes)
            out_n, out_text = _numels(e.get("output_sizes"), "output_sizes", notes)
            in_dt = _dtypes(e.get("input_dtypes"), "input_dtypes", notes)
            out_dt = _dtypes(e.get("output_dtypes"), "output_dtypes", notes)
            vals = (rank, _id(e["record_id"], "record_id"), _text(pg[0], "process_group name")[:200],
                    _text(pg[1], "process_group description")[:200], _id(seq, "seq id", optional=True), is_p2p,
                    _id(e.get("op_id"), "op_id", optional=True), op, name[:200], src, dst,
                    _bytes(in_n, in_dt, "input_sizes", notes), _bytes(out_n, out_dt or in_dt, "output_sizes", notes),
                    (in_dt or out_dt or [None])[0], ",".join(in_dt) if in_dt is not None else None,
                    ",".join(out_dt) if out_dt is not None else None, in_text, out_text,
                    _first(in_n, "input_sizes", notes), _first(out_n, "output_sizes", notes),
                    state[:40], retired, done(state, retired, backend),
                    _time(e.get("time_created_ns"), "time_created_ns", notes),
                    _time(e.get("time_discovered_started_ns"), "time_discovered_started_ns", notes),
                    _time(e.get("time_discovered_completed_ns"), "time_discovered_completed_ns", notes),
                    _number(e.get("duration_ms"), "duration_ms", notes),
                    _number(e.get("timeout_ms"), "timeout_ms", notes, integral=True), _frames(e.get("frames")))
        except (KeyError, TypeError, IndexError, ValueError, AttributeError, RecursionError) as exc:
            why = str(exc) if isinstance(exc, Bad) else f"lacks {exc}" if isinstance(exc, KeyError) else \
                type(exc).__name__
            raise TraceError(path, f"entry {i} {why} (not a Flight Recorder entry)",
                             "the dump is damaged or not from torch; copy it again") from None
        for c, v in zip(COLUMNS, vals):
            cols[c].append(v)
    return cols


def _first(numels: list[int] | None, name: str, notes: Notes) -> int | None:
    if not numels:
        return None
    if numels[0] > INT64_MAX:
        notes.count(name)
        return None
    return numels[0]


def table(parts: list[dict[str, list]]) -> pl.DataFrame:
    if not parts:
        return pl.DataFrame(schema=ENTRY_SCHEMA)
    merged = {c: [v for p in parts for v in p[c]] for c in COLUMNS}
    return pl.DataFrame(merged, schema=ENTRY_SCHEMA, strict=False).sort("rank", "record_id")


__all__ = ["COLUMNS", "ENTRY_SCHEMA", "Bad", "Notes", "done", "op_name", "rows", "table"]
