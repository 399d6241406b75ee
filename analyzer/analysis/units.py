"""ms at the edge: ``Analysis`` holds ns; presenters, the run history and compare convert here, once, the same way.

``ms_frame`` turns an Analysis table's ``*_ns`` columns into the ``*_ms`` columns of the JSON contract
(``transfer_ns_p50`` -> ``transfer_ms_p50``), in place, so column order (and the JSON key order) stays;
``ms_tables(a)`` is every table of one Analysis so converted (once per Analysis: a dashboard converts on
its first request, not on every click). x / NS_PER_MS is the one conversion: done here instead of in the
analysis it gives the same float, so the JSON numbers do not move.

It sits beside the analysis (the constants are in ``rules``), not in ``views``: the run history and
``compare`` store and compare ms too, and they are upstream of the views (``views.trend`` draws the
history's trends). Presenters reach it through ``analyzer.views.units``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from ..rules import NS_PER_MS

if TYPE_CHECKING:
    from . import Analysis

_NS = re.compile(r"_ns(?=$|_)")


def ms_name(column: str) -> str:
    """``exposed_comm_ns`` -> ``exposed_comm_ms``; names without an ns unit stay."""
    return _NS.sub("_ms", column, count=1)


def ms_frame(df: pl.DataFrame) -> pl.DataFrame:
    """Every ``*_ns`` column as ``*_ms`` (float), where it stood; the other columns as they are."""
    return df.select([(pl.col(c) / NS_PER_MS).alias(ms_name(c)) if _NS.search(c) else pl.col(c)
                      for c in df.columns])


@dataclass(frozen=True)
class MsTables:
    """An Analysis's tables with times in ms, under the JSON report's column names."""

    ranks: pl.DataFrame
    steps: pl.DataFrame
    collectives: pl.DataFrame
    bandwidth: pl.DataFrame
    dimensions: pl.DataFrame | None


_CACHE: list[tuple[Analysis, MsTables]] = []


def ms_tables(a: Analysis) -> MsTables:
    """``a``'s tables in ms (kept for the last few Analyses: a dashboard serves one, tests build a few)."""
    for cached, t in _CACHE:
        if cached is a:
            return t
    t = MsTables(ranks=ms_frame(a.ranks), steps=ms_frame(a.steps), collectives=ms_frame(a.collectives),
                 bandwidth=ms_frame(a.bandwidth), dimensions=None if a.dimensions is None else ms_frame(a.dimensions))
    _CACHE.insert(0, (a, t))
    del _CACHE[4:]
    return t


def ms_dict(d: dict | None) -> dict | None:
    """A record's ``*_ns`` values as ``*_ms``, in place (key order stays); None stays None."""
    if d is None:
        return None
    return {ms_name(k) if _NS.search(k) else k: (None if v is None else v / NS_PER_MS) if _NS.search(k) else v
            for k, v in d.items()}


def ms(ns: float | None) -> float | None:
    """One value: ns -> ms (None stays None)."""
    return None if ns is None else ns / NS_PER_MS
