"""ms at the edge: ``Analysis`` holds ns; every presenter converts here, once, the same way.

``ms_frame`` turns an Analysis table's ``*_ns`` columns into the ``*_ms`` columns of the JSON contract
(``transfer_ns_p50`` -> ``transfer_ms_p50``), in place, so column order (and the JSON key order) stays.
x / 1e6 is the one conversion: done here instead of in the analysis it gives the same float, so the
JSON numbers do not move. ``num`` is how a plain number reads in a table cell.
"""

from __future__ import annotations

import re

import polars as pl

from ..rules import NS_PER_MS

_NS = re.compile(r"_ns(?=$|_)")


def ms_name(column: str) -> str:
    """``exposed_comm_ns`` -> ``exposed_comm_ms``; names without an ns unit stay."""
    return _NS.sub("_ms", column, count=1)


def ms_frame(df: pl.DataFrame) -> pl.DataFrame:
    """Every ``*_ns`` column as ``*_ms`` (float), where it stood; the other columns as they are."""
    return df.select([(pl.col(c) / NS_PER_MS).alias(ms_name(c)) if _NS.search(c) else pl.col(c)
                      for c in df.columns])


def ms(ns: float | None) -> float | None:
    """One value: ns -> ms (None stays None)."""
    return None if ns is None else ns / NS_PER_MS


def num(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}"
