"""commscope: find where communication holds back distributed training and inference.

``analyzer.analyze(path)`` is the library entry point for notebooks and scripts. This module imports
nothing heavy (parse workers import the package): the work is imported when ``analyze`` is called.
"""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .analysis import Analysis
    from .hangs.analysis import HangAnalysis

__version__ = "0.1.0"


def analyze(*paths: str | PathLike[str], ranks: Iterable[int] | None = None, step_marker: str | None = None,
            jobs: int | None = None, cache: bool = True, rank_map: dict[str, int] | None = None,
            **limits: int) -> Analysis:
    """Analyze trace files or folders of ranks: the same ``Analysis`` that ``commscope analyze`` renders.

    Its tables (``ranks``, ``steps``, ``collectives``, ``bandwidth``, ``ranking``) are Polars DataFrames with the
    columns of the JSON report, times in ns (``compute_ns``); ``analyzer.analysis.units.ms_tables(a)`` gives them in ms
    under the report's names. ``verdict``, ``clock``, ``matching``, ``warnings`` and ``source`` are the rest of it.
    Keywords match the CLI options: ``ranks`` (keep only these), ``step_marker`` (a regular expression for step
    annotations), ``jobs`` (worker processes; default: the cores), ``cache`` (the Parquet cache), ``rank_map``
    (file name -> rank), and the input limits ``max_inflated_bytes``, ``max_inflate_ratio``, ``max_events``,
    ``max_json_depth``, ``max_ranks`` (``analyzer.ingest.limits``). Bad input raises ``analyzer.errors.CommscopeError``.
    """
    from pathlib import Path

    from .analysis import analyze as run_analysis
    from .errors import UsageError
    from .ingest.loader import LoadOptions, load

    if not paths:
        raise UsageError("analyze() needs at least one trace file or folder")
    if step_marker:  # linear time or refused (analyzer/patterns.py)
        from .patterns import check

        check(step_marker, "step_marker")
    from .ingest.limits import Limits

    try:
        caps = Limits(**{k: int(v) for k, v in limits.items()})
    except TypeError:
        raise UsageError(f"unknown keyword among {sorted(limits)}: the limits are {list(Limits.__annotations__)}"
                         ) from None
    opts = LoadOptions(rank_map=dict(rank_map or {}), step_marker=step_marker, jobs=jobs,
                       ranks=tuple(int(r) for r in ranks) if ranks is not None else None, cache=cache, limits=caps)
    return run_analysis(load([Path(p) for p in paths], opts))


def triage(*paths: str | PathLike[str], rank_map: dict[str, int] | None = None) -> HangAnalysis:
    """Hang triage of Flight Recorder dumps (files or folders of per-rank dumps): what ``commscope analyze``
    prints for them. ``.hang`` is the JSON report's ``hang`` dict (None: no group hangs); ``.result`` holds every
    stuck group, the process groups, the group x seq grid and unmatched send/recv."""
    from pathlib import Path

    from .errors import UsageError
    from .hangs.analysis import triage as run_triage

    found = run_triage([Path(p) for p in paths], dict(rank_map or {})) if paths else None
    if found is None:
        raise UsageError("triage() needs Flight Recorder dumps (pickle or JSON, one per rank)")
    return found


__all__ = ["analyze", "triage", "__version__"]
