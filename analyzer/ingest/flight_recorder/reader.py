"""PyTorch Flight Recorder dumps (one file per rank, pickle or JSON) -> one canonical table of entries.

A dump is what ``torch._C._distributed_c10d._dump_fr_trace()`` (pickle) or ``_dump_fr_trace_json()``
returns, or what the NCCL watchdog writes on a timeout (``TORCH_FR_DUMP_TEMP_FILE<rank>``, pickle):
``{"version": "2.N", "pg_config": {pg_name: {"name", "desc", "ranks": "[0, 1]"}}, "pg_status": {...},
"entries": [{record_id, pg_id, process_group: (name, desc), collective_seq_id, p2p_seq_id, op_id,
profiling_name: "nccl:all_reduce" | "gloo:send 0->1" | ..., input_sizes, input_dtypes, output_sizes,
output_dtypes, state: scheduled | started | completed, retired, time_created_ns,
time_discovered_started_ns, time_discovered_completed_ns, duration_ms, timeout_ms, is_p2p, frames}]}``.
The dump does not name its rank: it comes from the file name (``rank3.pkl``, ``nccl_trace_rank_3``),
as PyTorch's own ``fr_trace`` takes it. Decoding (no code runs, nesting bounded) is ``decode``; the entries'
fields are ``entries``.

Rank numbers are bounded by what the dumps can hold: within the world a dump's ``pg_config`` lists, and below
``MAX_RANKS`` where none lists it (a file named ``rank3000000000.pkl`` made a 3-billion-rank world).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import polars as pl

from ...errors import TraceError, UsageError
from .decode import DEFAULT_DEPTH, check_version, decode, is_pickle, looks_like_dump
from .entries import ENTRY_SCHEMA, Notes, rows, table

MAX_RANKS = 1 << 20  # more ranks than any job has run (a number past it names no rank: a misnamed file)

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
        raw_name = cfg.get("name", key)
        name = raw_name[:200] if isinstance(raw_name, str) else str(raw_name)[:200] if isinstance(raw_name, int) else ""
        ranks = cfg.get("ranks", "[]")
        text = ranks if isinstance(ranks, str) else None
        members = cache.get(text) if text is not None else None
        if members is None:
            try:
                raw = _rank_list(ranks) if text is not None else ranks
                if not isinstance(raw, (list, tuple)) or not all(
                        isinstance(r, int) and not isinstance(r, bool) and 0 <= r < MAX_RANKS for r in raw):
                    raise ValueError
                members = tuple(sorted(raw))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                shown = text[:60] if text is not None else type(ranks).__name__
                raise TraceError(path, f"pg_config of group {name!r} has unreadable ranks {shown!r} (member "
                                 f"ranks are numbers from 0 to {MAX_RANKS - 1:,})",
                                 "the dump is damaged; copy it again") from None
            if text is not None:
                cache[text] = members  # one tuple object per distinct list: later stages key on it cheaply
        if name and members:
            desc = cfg.get("desc", "")
            out[name] = (desc[:200] if isinstance(desc, str) else "", members)
    return out


def _rank_list(text: str) -> list:
    """"[0, 1, 2]" as torch writes it: JSON, parsed fast (a 4,096-rank world is 25 KB per dump); else a literal."""
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        if len(text) > 1 << 24 or text.count("[") > 1:  # a literal of nested lists is no member list
            raise ValueError from None
        return ast.literal_eval(text)


def read(path: Path, rank: int, cache: dict | None = None, max_depth: int = DEFAULT_DEPTH,
         notes: Notes | None = None) -> tuple[Dump, dict[str, list]]:
    doc, encoding = decode(path, max_depth)
    version = check_version(path, doc.get("version"))
    groups = parse_groups(path, doc.get("pg_config"), cache)
    cols = rows(path, rank, doc["entries"], notes)
    return Dump(rank, str(path), encoding, version, groups, len(cols["rank"])), cols


def load(files: list[tuple[Path, int | None]], rank_map: dict[str, int] | None = None,
         max_depth: int = DEFAULT_DEPTH) -> FlightRecords:
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
                read(path, -1, members, max_depth)
                reason = "the file name does not say its rank (name it rank<N>.pkl or pass --rank-map FILE=RANK)"
            except TraceError as exc:
                reason = exc.problem + (f" ({exc.hint})" if exc.hint else "")
            skipped.append((str(path), reason))
            continue
        if not 0 <= rank < MAX_RANKS:
            raise UsageError(f"{path}: its name says rank {rank:,}, more than any job has (over {MAX_RANKS:,} "
                             "ranks): name each dump rank<N> with its rank, or pass --rank-map FILE=RANK")
        if rank in owner:
            raise UsageError(f"{owner[rank]} and {path} are both rank {rank}'s dump: dumps of two jobs or two "
                             "captures in one folder? Analyze one job's dumps at a time")
        notes = Notes()
        try:
            dump, cols = read(path, rank, members, max_depth, notes)
        except TraceError as exc:
            skipped.append((str(path), f"{exc.problem}" + (f" ({exc.hint})" if exc.hint else "")))
            continue
        if notes.bad:
            warnings.append(f"{path}: " + ", ".join(f"{n} {f}" for f, n in sorted(notes.bad.items()))
                            + " value(s) are not numbers torch writes (inf, NaN, past int64, wrong type): read as "
                            "unknown")
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


__all__ = ["ENTRY_SCHEMA", "MAX_RANKS", "Dump", "FlightRecords", "decode", "is_pickle", "load", "looks_like_dump",
           "parse_groups", "read", "rows", "table"]
