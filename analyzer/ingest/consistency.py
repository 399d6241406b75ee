"""Can these ranks be one job? Checked after reading, before any analysis: where they cannot, one clear line (exit 2).

Each check compares what the ranks declare about themselves, never a guess from the numbers:

- format: one job is profiled one way; an Nsight report in a folder of Kineto ranks is another capture;
- world size: every rank that states one (Kineto ``distributedInfo.world_size``) states the same, and no rank id
  is past it;
- process groups: a group name means the same members on every rank that lists it;
- start: the ranks' first GPU activity (on their clock base) lies within a day of each other.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ..errors import UsageError
from ..model import RankTrace
from ..ranklist import compact

MAX_START_SPREAD_NS = 86_400 * 10**9  # ranks of one job start within seconds; a day apart is another job
_HINT = "analyze each job's ranks on their own"


def _name(t: RankTrace) -> str:
    return Path(t.meta.source).name


def _listing(groups: dict[object, list[RankTrace]]) -> str:
    return "; ".join(f"{value} on rank(s) {compact(sorted(t.meta.rank for t in ts))}"
                     for value, ts in sorted(groups.items(), key=lambda kv: -len(kv[1])))


def check_job(traces: list[RankTrace]) -> list[str]:
    """Raise ``UsageError`` where the ranks cannot be one job; return warnings for what is only unusual."""
    _formats(traces)
    warnings = _world_size(traces)
    _process_groups(traces)
    _starts(traces)
    return warnings


def _formats(traces: list[RankTrace]) -> None:
    by_format: dict[object, list[RankTrace]] = defaultdict(list)
    for t in traces:
        by_format[t.meta.format].append(t)
    if len(by_format) > 1:
        few = min(by_format.values(), key=len)
        raise UsageError(f"the ranks come in {len(by_format)} formats ({_listing(by_format)}), so they are not one "
                         f"capture: e.g. {few[0].meta.source} ({_HINT})")


def _world_size(traces: list[RankTrace]) -> list[str]:
    by_size: dict[object, list[RankTrace]] = defaultdict(list)
    for t in traces:
        if t.meta.world_size:
            by_size[t.meta.world_size].append(t)
    if len(by_size) > 1:
        few = min(by_size.values(), key=len)
        raise UsageError(f"the ranks disagree on the world size ({_listing(by_size)}): e.g. {few[0].meta.source} "
                         f"comes from another job ({_HINT})")
    if not by_size:
        return []
    (size,) = by_size
    past = [t for t in traces if t.meta.rank >= size]  # type: ignore[operator]
    own = [t for t in past if t.meta.rank_source == "distributedInfo"]
    if own:  # the file contradicts itself (or its job): refused
        raise UsageError(f"rank {own[0].meta.rank} ({own[0].meta.source}) is past the world size {size} the "
                         f"traces declare (fix its rank with --rank-map {_name(own[0])}=RANK, or {_HINT})")
    # a rank the user or the file name gave: their word stands, said beside the traces'
    return [f"rank {t.meta.rank} ({_name(t)}, from {t.meta.rank_source}) is past the world size {size} the traces "
            "declare" for t in past]


def _process_groups(traces: list[RankTrace]) -> None:
    members: dict[str, dict[tuple[int, ...], list[RankTrace]]] = defaultdict(lambda: defaultdict(list))
    for t in traces:
        for pg in t.meta.process_groups:
            if pg.name and pg.ranks:
                members[pg.name][tuple(pg.ranks)].append(t)
    for name, seen in sorted(members.items()):
        if len(seen) > 1:
            listing = _listing({f"[{', '.join(map(str, k))}]": v for k, v in seen.items()})
            raise UsageError(f"process group {name!r} has different members on different ranks ({listing}): the "
                             f"traces come from different jobs ({_HINT})")


def _starts(traces: list[RankTrace]) -> None:
    starts = {}
    for t in traces:
        first = t.gpu["start_ns"].min() if t.gpu.height else None
        if first is not None:
            starts[t.meta.rank] = ((t.meta.clock_base_ns or 0) + int(first), t)  # type: ignore[arg-type]
    if len(starts) < 2:
        return
    lo = min(starts.values(), key=lambda v: v[0])
    hi = max(starts.values(), key=lambda v: v[0])
    spread = hi[0] - lo[0]
    if spread > MAX_START_SPREAD_NS:
        raise UsageError(f"rank {hi[1].meta.rank} ({hi[1].meta.source}) starts {spread / 86_400e9:.1f} days apart "
                         f"from rank {lo[1].meta.rank}: the traces come from different jobs ({_HINT})")

