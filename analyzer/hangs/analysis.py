"""Flight Recorder dumps -> HangAnalysis: the hang triage result every presenter formats.

A Flight Recorder input has no GPU timeline, so it does not go through the trace stages (match, align,
graph, ...): its one metric is ``metrics.hang``. The result is its own small immutable type; the
presenters in ``report/hang.py`` and ``dashboards/hang.py`` read only it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..crossrank import groups as pgroups
from ..ingest.flight_recorder.reader import FlightRecords
from . import hang as hang_metric


@dataclass(frozen=True)
class HangAnalysis:
    """Hang triage of Flight Recorder dumps: what ``analyzer.triage`` returns.

    Attributes:
        source: What was read (paths, versions, encodings, entries).
        result: Every stuck group (roots first), the process groups, the group x seq grid, unmatched send/recv and
            the ranks without a dump.
        warnings: Dumps skipped, and why.
    """

    source: dict
    result: hang_metric.Hang
    warnings: tuple[str, ...]

    @property
    def hang(self) -> dict | None:
        """The root hang, as the JSON report's ``hang`` (None: no group hangs)."""
        return self.result.hang


def analyze_dumps(recs: FlightRecords, dims: pgroups.Options | None = None) -> HangAnalysis:
    ranks = [d.rank for d in recs.dumps]
    result = hang_metric.analyze(recs.entries, ranks, {d.rank: d.groups for d in recs.dumps}, dims)
    warnings = list(recs.warnings)
    dims = dims or pgroups.Options()
    warnings.extend(pgroups.layout_warnings(dims.layout, result.world_size))
    if recs.entries.height == 0:
        warnings.append("the dumps hold no entries: was TORCH_FR_BUFFER_SIZE (or TORCH_NCCL_TRACE_BUFFER_SIZE) set "
                        "before the process groups were created?")
    if result.missing_dumps:
        warnings.append(f"no dump from {len(result.missing_dumps)} of {result.world_size} ranks: what they were "
                        "doing is unknown; groups they belong to name them under no_dump")
    if any(d.encoding == "json" for d in recs.dumps) and result.hang and not result.hang["stacks"]:
        warnings.append("JSON dumps carry no stacks: dump pickles (_dump_fr_trace) for the culprit's stack")
    if not recs.dumps or all(not g for g in (d.groups for d in recs.dumps)):
        warnings.append("the dumps list no process-group members (gloo writes no pg_config): members are the ranks "
                        "whose dumps use each group, so a rank that never used a group is not known to belong")
    source = {
        "paths": [d.path for d in recs.dumps],
        "format": "flight_recorder",
        "ranks": ranks,
        "world_size": result.world_size,
        "skipped": [{"path": p, "reason": r} for p, r in recs.skipped],
        "versions": sorted({d.version for d in recs.dumps}),
        "encodings": sorted({d.encoding for d in recs.dumps}),
        "entries": recs.entries.height,
    }
    return HangAnalysis(source=source, result=result, warnings=tuple(warnings))


def triage(paths: list[Path], rank_map: dict[str, int] | None = None,
           dims: pgroups.Options | None = None, max_depth: int | None = None) -> HangAnalysis | None:
    """The hang analysis when the paths hold Flight Recorder dumps (told by content), else None (traces).
    ``max_depth``: the nesting a dump may have (``--max-json-depth``; default the limit's)."""
    from ..ingest.discover import flight_recorder_files
    from ..ingest.flight_recorder import reader as flight_recorder

    files = flight_recorder_files(paths)
    if not files:
        return None
    from ..ingest.limits import DEFAULT

    return analyze_dumps(flight_recorder.load([(f.path, f.rank_hint) for f in files], rank_map,
                                              max_depth or DEFAULT.max_json_depth), dims)
