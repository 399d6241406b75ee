"""PyTorch Flight Recorder dumps (one file per rank, pickle or JSON) -> one canonical table of entries.

A dump is what ``torch._C._distributed_c10d._dump_fr_trace()`` (pickle) or ``_dump_fr_trace_json()``
returns, or what the NCCL watchdog writes on a timeout (``TORCH_FR_DUMP_TEMP_FILE<rank>``, pickle):
``{"version": "2.N", "pg_config": {pg_name: {"name", "desc", "ranks": "[0, 1]"}}, "pg_status": {...},
"entries": [{record_id, pg_id, process_group: (name, desc), collective_seq_id, p2p_seq_id, op_id,
profiling_name: "nccl:all_reduce" | "gloo:send 0->1" | ..., input_sizes, input_dtypes, output_sizes,
output_dtypes, state: scheduled | started | completed, retired, time_created_ns,
time_discovered_started_ns, time_discovered_completed_ns, duration_ms, timeout_ms, is_p2p, frames}]}``.
The dump does not name its rank: it comes from the file name (``rank3.pkl``, ``nccl_trace_rank_3``),
as PyTorch's own ``fr_trace`` takes it.

A pickle from a user's disk is code. It is read by an unpickler that resolves no global at all: a dump
holds only dicts, lists, tuples, strings, numbers, booleans and None, which pickle builds without
looking anything up, so any reference to a class or function (``os.system``) is refused before it runs.
"""

from __future__ import annotations

import ast
import io
import math
import pickle
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ...comm_catalogue import op_from_collective_name
from ...errors import TraceError, UsageError
from ..kineto.tables import dtype_size
from ..source import GZIP_MAGIC, read_bytes

KNOWN_MAJOR = 2  # dump versions 2.0 .. 2.10 (torch 2.3 .. 2.13) share the fields read here
PICKLE_PROTO = b"\x80"

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
    "in_sizes": pl.Utf8,
    "out_sizes": pl.Utf8,
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


@dataclass(frozen=True)
class Dump:
    rank: int
    path: str
    encoding: str  # "pickle" | "json"
    version: str
    groups: dict[str, tuple[str, tuple[int, ...]]]  # pg name -> (desc, global member ranks), from pg_config
    entries: int


@dataclass(frozen=True)
class FlightRecords:
    entries: pl.DataFrame  # ENTRY_SCHEMA, sorted by rank, record_id
    dumps: tuple[Dump, ...]
    skipped: tuple[tuple[str, str], ...] = ()  # (path, reason): dumps that could not be read
    warnings: tuple[str, ...] = field(default_factory=tuple)


class _NoGlobals(pickle.Unpickler):
    """Builds containers and scalars only: every global (class, function) lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name} (a Flight Recorder dump holds no objects)")


def _load(data: bytes) -> object:
    # a corrupt length in a bytearray opcode makes CPython's unpickler fail with MemoryError and print a
    # SystemError through sys.excepthook on the way out; the MemoryError is reported, the stray line is not
    hook = sys.excepthook
    sys.excepthook = lambda *_: None
    try:
        return _NoGlobals(io.BytesIO(data)).load()
    finally:
        sys.excepthook = hook


def is_pickle(start: bytes) -> bool:
    return start[:1] == PICKLE_PROTO and start[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")


def looks_like_dump(start: bytes) -> bool:
    """Flight Recorder by content: a pickle of the dump's keys, or JSON whose entries carry seq ids."""
    if is_pickle(start):  # torch pickles the dump dict with "version" as its first key
        return b"version" in start[:64] and (b"entries" in start or b"pg_config" in start)
    text = start.lstrip()
    return text[:1] == b"{" and b'"entries"' in text and (b'"collective_seq_id"' in text or b'"pg_config"' in text
                                                         or b'"profiling_name"' in text)


def decode(path: Path) -> tuple[dict, str]:
    """The dump as plain Python data and its encoding; TraceError for anything that is not a readable dump."""
    data = read_bytes(path)
    encoding = "pickle" if data[:1] == PICKLE_PROTO else "json"
    if encoding == "pickle":
        try:
            doc = _load(data)
        except pickle.UnpicklingError as exc:
            raise TraceError(path, f"is not a plain Flight Recorder pickle: {exc}",
                             "it was not loaded; dumps from torch hold only dicts, lists and numbers") from None
        except Exception as exc:  # noqa: BLE001 - no code runs here (no globals): anything else is damaged data
            raise TraceError(path, f"is a truncated or corrupt pickle ({type(exc).__name__}: {exc})",
                             "copy the dump again") from None
    elif data[:2] == GZIP_MAGIC:
        raise TraceError(path, "could not be decompressed", "gunzip it first")
    else:
        try:
            doc = msgspec.json.decode(data)
        except (msgspec.DecodeError, ValueError) as exc:  # ValueError: bytes that are not UTF-8
            raise TraceError(path, f"is not valid JSON ({exc}); truncated?", "copy the dump again") from None
    if not isinstance(doc, dict) or "entries" not in doc or "version" not in doc:
        raise TraceError(path, "is not a Flight Recorder dump (no 'version' and 'entries' keys)",
                         "pass the files torch's _dump_fr_trace / the NCCL watchdog wrote")
    return doc, encoding


def check_version(path: Path, version: object) -> str:
    m = re.fullmatch(r"(\d+)\.(\d+)", str(version))
    if not m or int(m.group(1)) != KNOWN_MAJOR:
        raise TraceError(path, f"has Flight Recorder version {version!r}; commscope reads 2.x dumps",
                         "dump with torch 2.3 or later, or report the version")
    return str(version)


def parse_groups(path: Path, pg_config: object, cache: dict | None = None) -> dict[str, tuple[str, tuple[int, ...]]]:
    """pg_config -> {name: (desc, ranks)}; gloo leaves it empty (one entry named ""), which says nothing.
    ``cache``: member lists already parsed, by their text (every dump of a 4,096-rank job lists the world)."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    if not isinstance(pg_config, dict):
        return out
    cache = {} if cache is None else cache
    for key, cfg in pg_config.items():
        if not isinstance(cfg, dict):
            continue
        name = str(cfg.get("name", key))
        ranks = cfg.get("ranks", "[]")
        text = ranks if isinstance(ranks, str) else None
        members = cache.get(text) if text is not None else None
        if members is None:
            try:
                raw = _rank_list(ranks) if text is not None else ranks
                members = tuple(sorted(int(r) for r in raw))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise TraceError(path, f"pg_config of group {name!r} has unreadable ranks {str(ranks)[:60]!r}",
                                 "the dump is damaged; copy it again") from None
            if text is not None:
                cache[text] = members  # one tuple object per distinct list: later stages key on it cheaply
        if name and members:
            out[name] = (str(cfg.get("desc", "")), members)
    return out


def _rank_list(text: str) -> list:
    """"[0, 1, 2]" as torch writes it: JSON, parsed fast (a 4,096-rank world is 25 KB per dump); else a literal."""
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return ast.literal_eval(text)


_P2P_NAME = re.compile(r"^(?:\w+:)?(send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)")


def _name(profiling_name: str) -> tuple[str | None, int | None, int | None, str]:
    """"nccl:all_reduce" -> (all_reduce, None, None, nccl); "gloo:send 0->1" / "nccl:recv 1<-0" -> (op, src, dst,
    backend)."""
    backend = profiling_name.split(":", 1)[0] if ":" in profiling_name else ""
    m = _P2P_NAME.match(profiling_name)
    if not m:
        return op_from_collective_name(profiling_name.split(":", 1)[-1].split(" ")[0]), None, None, backend
    a, b = int(m.group(2)), int(m.group(4))
    src, dst = (a, b) if m.group(3) == "->" else (b, a)
    return m.group(1), src, dst, backend


def _bytes(sizes: object, dtypes: object) -> int | None:
    if not isinstance(sizes, list):
        return None
    size = dtype_size(dtypes[0]) if isinstance(dtypes, list) and dtypes else None
    if size is None:
        return None
    try:
        return sum(math.prod(int(d) for d in s) for s in sizes) * size
    except (TypeError, ValueError):
        return None


def _done(state: str, retired: bool, backend: str) -> bool:
    """Finished on this rank. NCCL (and the other event-backed backends) set ``state`` from the work's end
    event, also when the watchdog retires it, and retires timed-out work too: only "completed" is done.
    Gloo records no events (every entry stays "scheduled") and retires an entry when its work ends, so there
    ``retired`` is done. Gloo also retires work that failed because a peer went away: a dump taken after a
    peer exited shows the op it waited in as finished."""
    return state == "completed" or (backend == "gloo" and retired)


def _time(v: object) -> int | None:
    return int(v) if isinstance(v, (int, float)) and v > 0 else None  # JSON writes 0 for "not yet"


def _frames(frames: object) -> str | None:
    if not isinstance(frames, list) or not frames:
        return None
    return "\n".join(f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"
                     for f in frames if isinstance(f, dict))


_COLUMNS = tuple(ENTRY_SCHEMA)


def rows(path: Path, rank: int, entries: object) -> dict[str, list]:
    """Columns of one dump's entries; an entry without the keys every 2.x dump has fails the dump."""
    if not isinstance(entries, list):
        raise TraceError(path, "'entries' is not a list", "the dump is damaged; copy it again")
    cols: dict[str, list] = {c: [] for c in _COLUMNS}
    names: dict[str, tuple[str | None, int | None, int | None, str]] = {}
    for i, e in enumerate(entries):
        try:
            pg = e["process_group"]
            name = str(e["profiling_name"])
            state = str(e["state"])
            retired = bool(e.get("retired", False))
            op, src, dst, backend = names[name] if name in names else names.setdefault(name, _name(name))
            is_p2p = bool(e.get("is_p2p", src is not None)) or src is not None
            # dumps before 2.2 (torch 2.3) had one "seq_id" per group for collectives and send/recv alike
            seq = e.get("p2p_seq_id", e.get("seq_id")) if is_p2p else e.get("collective_seq_id", e.get("seq_id"))
            if seq is None and not is_p2p:
                raise KeyError("collective_seq_id")
            vals = (rank, int(e["record_id"]), str(pg[0]), str(pg[1]), int(seq) if seq is not None else None, is_p2p,
                    e.get("op_id"), op, name, src, dst,
                    _bytes(e.get("input_sizes"), e.get("input_dtypes")),
                    _bytes(e.get("output_sizes"), e.get("output_dtypes")),
                    (e.get("input_dtypes") or e.get("output_dtypes") or [None])[0],
                    str(e.get("input_sizes")), str(e.get("output_sizes")), state, retired, _done(state, retired, backend),
                    _time(e.get("time_created_ns")), _time(e.get("time_discovered_started_ns")),
                    _time(e.get("time_discovered_completed_ns")), e.get("duration_ms"), e.get("timeout_ms"),
                    _frames(e.get("frames")))
        except (KeyError, TypeError, IndexError, ValueError, AttributeError, RecursionError) as exc:
            raise TraceError(path, f"entry {i} lacks a Flight Recorder field or has a bad value ({exc!r})",
                             "the dump is damaged or not from torch; copy it again") from None
        for c, v in zip(_COLUMNS, vals):
            cols[c].append(v)
    return cols


def read(path: Path, rank: int, cache: dict | None = None) -> tuple[Dump, dict[str, list]]:
    doc, encoding = decode(path)
    version = check_version(path, doc.get("version"))
    groups = parse_groups(path, doc.get("pg_config"), cache)
    cols = rows(path, rank, doc["entries"])
    return Dump(rank, str(path), encoding, version, groups, len(cols["rank"])), cols


def table(parts: list[dict[str, list]]) -> pl.DataFrame:
    if not parts:
        return pl.DataFrame(schema=ENTRY_SCHEMA)
    merged = {c: [v for p in parts for v in p[c]] for c in _COLUMNS}
    return pl.DataFrame(merged, schema=ENTRY_SCHEMA, strict=False).sort("rank", "record_id")


def load(files: list[tuple[Path, int | None]], rank_map: dict[str, int] | None = None) -> FlightRecords:
    """Read every rank's dump. A dump that cannot be read is skipped and named (the others still answer);
    dumps that contradict each other (two claim one rank, one group with two memberships) are two jobs."""
    rank_map = rank_map or {}
    parts, dumps, skipped, warnings = [], [], [], []
    owner: dict[int, Path] = {}
    members: dict[str, tuple[int, ...]] = {}
    for path, hint in files:
        rank = rank_map.get(str(path), rank_map.get(path.name, hint))
        if rank is None:  # what is wrong with the content comes first, then the name
            try:
                read(path, -1, members)
                reason = "the file name does not say its rank (name it rank<N>.pkl or pass --rank-map FILE=RANK)"
            except TraceError as exc:
                reason = exc.problem + (f" ({exc.hint})" if exc.hint else "")
            skipped.append((str(path), reason))
            continue
        if rank in owner:
            raise UsageError(f"{owner[rank]} and {path} are both rank {rank}'s dump: dumps of two jobs or two "
                             "captures in one folder? Analyze one job's dumps at a time")
        try:
            dump, cols = read(path, rank, members)
        except TraceError as exc:
            skipped.append((str(path), f"{exc.problem}" + (f" ({exc.hint})" if exc.hint else "")))
            continue
        owner[rank] = path
        dumps.append(dump)
        parts.append(cols)
    if not dumps:
        first = skipped[0] if skipped else ("", "no dumps")
        raise TraceError(first[0], f"{first[1]}; no Flight Recorder dump could be read"
                         + (f" ({len(skipped)} skipped)" if len(skipped) > 1 else ""))
    _check_one_job(dumps)
    versions = sorted({d.version for d in dumps})
    if len(versions) > 1:
        warnings.append(f"dumps of {len(versions)} Flight Recorder versions ({', '.join(versions)}): ranks ran "
                        "different torch builds, or the folder mixes jobs")
    for path, reason in skipped:
        warnings.append(f"skipped {path}: {reason}")
    dumps.sort(key=lambda d: d.rank)
    return FlightRecords(table(parts), tuple(dumps), tuple(skipped), tuple(warnings))


def _check_one_job(dumps: list[Dump]) -> None:
    """One job has one world: every dump's default group lists the same members and includes its own rank.
    (Other groups may share a name with different members: torch's split_group names subgroups alike.)"""
    world: tuple[tuple[int, ...], Dump] | None = None
    as_set: dict[int, set[int]] = {}  # the reader shares one tuple per distinct member list
    for d in dumps:
        for desc, members in d.groups.values():
            if desc != "default_pg":
                continue
            if d.rank not in as_set.setdefault(id(members), set(members)):
                raise UsageError(f"{d.path}: its file name says rank {d.rank}, but its job's world is "
                                 f"{_short(members)}: a dump of another job? Analyze one job's dumps at a time")
            if world is not None and world[0] is not members and world[0] != members:
                raise UsageError(f"{world[1].path} and {d.path} come from jobs with different worlds "
                                 f"({_short(world[0])} vs {_short(members)}): analyze one job's dumps at a time")
            world = world or (members, d)


def _short(members: tuple[int, ...]) -> str:
    return f"{len(members)} ranks {members[0]}..{members[-1]}" if len(members) > 6 else str(list(members))
