"""Where the stages and the presenters are put together: what a command runs, beside the CLI.

Presenters (``report/``, ``export/``, ``dashboards/``) read an ``Analysis`` and the shared views, never the
readers and never each other. Three features need more than that, so they are assembled here and handed
in: the ``export`` command (load, analyze, write), the dashboard's Perfetto download (the export's
``write_trace`` given to the app) and the history page's full report of a stored run (load, analyze,
render HTML). Only the CLI, benchmarks and tests import this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis import Analysis, analyze
from ..export import write_trace
from ..export.selection import Selection, parse_list, parse_window
from ..export.tables import MAX_LANES
from ..ingest.loader import LoadOptions, load

if TYPE_CHECKING:  # the export command does not import Dash
    import dash


def run_export(paths: list[Path], output: Path, fmt: str | None, opts: LoadOptions, ranks: str | None = None,
               steps: str | None = None, window: str | None = None, host: bool = False) -> dict:
    """The ``export`` command: parse the selection (before the slow loading), analyze every rank, write.

    ``fmt`` None: JSON for ``*.json``, else Perfetto protobuf. A failed write leaves no partial file behind.
    """
    fmt = fmt or ("json" if output.suffix == ".json" else "pftrace")
    sel = Selection(ranks=parse_list(ranks, "ranks"), steps=parse_list(steps, "steps"), window_ms=parse_window(window),
                    host=host)
    a = analyze(load(paths, opts))
    tmp = output.with_name(output.name + ".part")
    try:
        with open(tmp, "wb") as f:
            counts = write_trace(a, sel, f, fmt)
        tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)
    return {**counts, "max_lanes": MAX_LANES, "skipped": [x["reason"] for x in a.source.get("skipped", [])]}


def dashboard_app(a: Analysis, **options: int) -> dash.Dash:
    """The dashboard as ``commscope dashboard`` serves it: with the Perfetto download (``options``:
    ``create_app``'s, e.g. ``max_request_bytes``)."""
    from dashboards.app import create_app

    return create_app(a, trace_writer=write_trace, **options)


def full_report(paths: list[Path]) -> str:
    """A stored run's full HTML report, analyzed again from its trace files (the history page's /run/<RUN>)."""
    from ..comm_catalogue import UserRules
    from ..report.html import render
    from .comm_rules import env_rules

    return render(analyze(load(paths, LoadOptions(comm_rules=UserRules(env_rules())))))


def history_app(target: str) -> dash.Dash:
    """The history page as ``commscope history dashboard`` serves it: a click on a run opens its full report."""
    from dashboards.history import create_app

    return create_app(target, open_run=full_report)
