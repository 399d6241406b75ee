"""Units at the edge for presenters: the ms view of an ``Analysis`` (``analyzer.analysis.units``, which holds ns
inside) and ``num``, how a plain number reads in a table cell."""

from __future__ import annotations

from ..analysis.units import MsTables, ms, ms_dict, ms_frame, ms_name, ms_tables

__all__ = ["MsTables", "duration", "ms", "ms_dict", "ms_frame", "ms_name", "ms_tables", "num", "time_unit"]


def num(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}"


def duration(ms_value: float | None) -> str:
    """A time for people, in the unit that keeps it short: 0.42 ms, 86.1 ms, 1,234.5 ms, 46.6 s, 1,557.5 s."""
    if ms_value is None:
        return "n/a"
    if abs(ms_value) >= 10_000:
        return f"{ms_value / 1000:,.1f} s"
    return f"{ms_value:,.1f} ms" if abs(ms_value) >= 10 else f"{ms_value:.2f} ms"


TABLE_MS_LIMIT = 100_000.0  # a table column of times switches from ms to s once a value reaches this many ms


def time_unit(values: list[float | None]) -> tuple[str, float]:
    """The unit a table column of times (given in ms) reads in, and the factor from ms: seconds once a value
    would need more than 5 digits before the point, so numbers fit their columns instead of being cut."""
    top = max((abs(v) for v in values if v is not None), default=0.0)
    return ("s", 1e-3) if top >= TABLE_MS_LIMIT else ("ms", 1.0)
