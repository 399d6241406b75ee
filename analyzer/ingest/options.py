"""Options every reader takes (one signature for all formats)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .limits import DEFAULT, Limits


@dataclass(frozen=True)
class ReadOptions:
    rank_hint: int | None = None  # rank guessed from the file name by discover.py
    rank_map: dict[str, int] = field(default_factory=dict)  # file name or "file:pid" -> rank (--rank-map)
    step_marker: str | None = None  # regex over annotation names (--step-marker)
    layout: str | None = None  # op tables: parallel sizes, e.g. "tp=4,dp=4,pp=4" (else the meta file beside it)
    limits: Limits = DEFAULT  # what one file may cost (--max-inflated-size, --max-events, ...)
