"""Units at the edge for presenters: the ms view of an ``Analysis`` (``analyzer.analysis.units``, which holds ns
inside) and ``num``, how a plain number reads in a table cell."""

from __future__ import annotations

from ..analysis.units import MsTables, ms, ms_dict, ms_frame, ms_name, ms_tables

__all__ = ["MsTables", "ms", "ms_dict", "ms_frame", "ms_name", "ms_tables", "num"]


def num(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}"
