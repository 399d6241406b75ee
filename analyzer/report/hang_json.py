"""Hang triage in the JSON contract (``commscope.analysis/1``): the trace keys empty, ``hang`` filled.

A Flight Recorder input has no timeline, so ``ranks``, ``steps``, ``collectives`` ... are empty and the
answer is under ``hang`` (DESIGN's key) and ``flight_recorder`` (every stuck group, the group x seq grid,
unmatched send/recv, missing dumps). Times are wall-clock ns since the epoch where the key says ``_ns``.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ..hangs.analysis import HangAnalysis
from ..rules import NS_PER_S
from .json import SCHEMA, _records, clean, dumps
from .schema import ANALYSIS, fields
from .schema_inputs import FLIGHT_RECORDER, HANG

HANG_FIELDS = fields(HANG)  # the keys in order, from the declared contract (report/schema.py)
GROUP_FIELDS = fields(ANALYSIS["properties"]["process_groups"], "flight_recorder")
GRID_FIELDS = fields(FLIGHT_RECORDER["properties"]["grid"])
P2P_FIELDS = fields(FLIGHT_RECORDER["properties"]["p2p_unmatched"])
MISMATCH_FIELDS = fields(FLIGHT_RECORDER["properties"]["mismatches"])


def _hang(h: dict | None) -> dict | None:
    if h is None:
        return None
    since = datetime.fromtimestamp(h["since_ns"] / NS_PER_S, tz=timezone.utc) if h["since_ns"] else None
    full = {**h, "since_utc": since.isoformat(timespec="milliseconds") if since else None,
            "src": h.get("src"), "dst": h.get("dst"), "desync": bool(h.get("desync")),
            "completed": len(h["completed"])}  # a count: the members that finished it (thousands at scale)
    return clean({k: full.get(k) for k in HANG_FIELDS})


def to_dict(a: HangAnalysis) -> dict:
    r = a.result
    return {
        "schema": SCHEMA,
        "source": clean(a.source),
        "ranks": [], "steps": [], "collectives": [], "bandwidth": [],
        "stragglers": {"verdict": None, "roots": [], "ranking": []},
        "clock": {"method": "none", "offsets_us": {}, "uncertainty_us": None},
        "process_groups": _records(r.groups, GROUP_FIELDS),
        "dimensions": [], "pipeline": None, "experts": None, "matching": {}, "critical_path": [], "whatif": None,
        "hang": _hang(r.hang),
        "flight_recorder": {
            "stuck": [_hang(h) for h in r.stuck],
            "missing_dumps": list(r.missing_dumps),
            "p2p_unmatched": [clean({k: u.get(k) for k in P2P_FIELDS}) for u in r.p2p_unmatched],
            "grid": _records(r.grid, GRID_FIELDS),
            "mismatches": [clean({k: m.get(k) for k in MISMATCH_FIELDS}) for m in r.mismatches],
            "mismatch_count": r.mismatch_count,
        },
        "warnings": list(a.warnings),
    }


def render(a: HangAnalysis) -> str:
    return dumps(to_dict(a)) + "\n"
