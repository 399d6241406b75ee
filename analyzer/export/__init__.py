"""Analysis -> one merged trace of every rank on the aligned clock (Perfetto protobuf or Chrome JSON).

``write_trace(analysis, selection, file, fmt)`` streams the trace into a binary file object one rank at
a time. The command that reproduces an export (``command_line``) is a view (``analyzer.views.selection``);
the ``export`` command itself (load, analyze, write) is ``analyzer.cli.compose.run_export``.
"""

from __future__ import annotations

from typing import IO

from ..analysis import Analysis
from ..views.selection import Selection, command_line
from .selection import parse_list, parse_window
from .tables import MAX_LANES, plan

FORMATS = ("pftrace", "json")

__all__ = ["FORMATS", "MAX_LANES", "Selection", "command_line", "parse_list", "parse_window", "write_trace"]


def write_trace(a: Analysis, sel: Selection, f: IO[bytes], fmt: str = "pftrace") -> dict:
    """Write the selection of ``a``; returns counts (ranks, slices, flow_slices, dropped)."""
    p = plan(a, sel)
    if fmt == "json":
        from .chrome_json import write
    else:
        from .perfetto import write
    return write(a, p, f)
