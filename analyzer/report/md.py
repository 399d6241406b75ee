"""Markdown table cells and tables: the one rule every Markdown presenter (analysis, hang, trend) writes with."""

from __future__ import annotations


def cell(x: object, digits: int = 1) -> str:
    """One table cell: numbers with thousands separators, missing as an en dash, pipes escaped."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    if isinstance(x, list):
        return ",".join(str(v) for v in x)
    return str(x).replace("|", "\\|")


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out
