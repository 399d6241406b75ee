"""What to export, parsed from the command line: ranks, steps, an aligned time window (``Selection`` is a view:
``analyzer.views.selection``, shared with the report and the dashboard)."""

from __future__ import annotations

from .. import ranklist
from ..errors import UsageError
from ..views.selection import Selection

__all__ = ["Selection", "parse_list", "parse_window"]


def parse_list(value: str | None, what: str) -> tuple[int, ...] | None:
    """``"0,2,4-7"`` -> (0, 2, 4, 5, 6, 7)."""
    if not value:
        return None
    try:
        return ranklist.parse(value)
    except ValueError as exc:
        raise UsageError(f"--{what} {value!r}: {exc}; expected numbers like 0,2,4-7") from None


def parse_window(value: str | None) -> tuple[float, float] | None:
    """``"START:END"`` in ms (either side may be empty: open)."""
    if not value:
        return None
    a, sep, b = value.partition(":")
    try:
        lo = float(a) if a.strip() else float("-inf")
        hi = float(b) if b.strip() else float("inf")
    except ValueError:
        lo = hi = float("nan")
    if not sep or lo != lo or hi != hi or hi <= lo:
        raise UsageError(f"--window {value!r}: expected START:END in ms with START < END, e.g. 120:180")
    return lo, hi
