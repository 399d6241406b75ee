"""Table cells and Markdown tables: the one rule every presenter (analysis, hang, trend, compare) writes with."""

from __future__ import annotations


def plain(x: object, digits: int = 1) -> str:
    """A plain-text table cell: numbers with thousands separators, booleans as yes/no, missing as a hyphen."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def cell(x: object, digits: int = 1) -> str:
    """One Markdown table cell: ``plain``'s, with missing as an en dash, lists comma-joined and pipes escaped."""
    if x is None:
        return "–"
    if isinstance(x, list):
        return ",".join(str(v) for v in x)
    return plain(x, digits).replace("|", "\\|")


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out
