"""What a client sends, checked before a callback uses it: types, ranges and ids (pure; no Dash imports).

Every callback value comes from the browser, so any of them can be anything JSON allows (and NaN or
Infinity, which Python's JSON reader accepts). Each function here returns a value of the expected type,
or None (the callback's "nothing selected"), never raises: ranks and steps must be ones the Analysis has,
collectives must exist, zoom ranges must be finite, ordered and within ``analyzer.views.axis.MAX_AXIS_MS``.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from analyzer.analysis import Analysis
from analyzer.views.axis import as_float as as_float  # callbacks check clicked y values with it
from analyzer.views.axis import window  # zoom ranges: the rule the figures check too

MAX_INT = 1 << 62  # ranks, steps, sequence numbers and pages beyond this are not ids
MAX_LIST = 100_000  # longest list taken from a client (timeline lanes: one per rank and stream)


def as_int(value: Any) -> int | None:
    """An integer id: an int, an integral finite float or a decimal string; bools and the rest are None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -MAX_INT <= value <= MAX_INT else None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() and abs(value) <= MAX_INT else None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 20:
        return int(value)
    return None


def as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def first_point(click: Any) -> dict | None:
    """The first point of a plotly clickData, when it is one."""
    points = as_dict(click).get("points")
    if isinstance(points, list) and points and isinstance(points[0], dict):
        return points[0]
    return None


def str_list(value: Any) -> list[str]:
    """A checklist value: its strings (anything else is dropped)."""
    return [v for v in value[:MAX_LIST] if isinstance(v, str)] if isinstance(value, list) else []


def int_list(value: Any) -> list[int]:
    """A list of ids (the timeline's lanes); an element that is not an id becomes -1 so positions keep."""
    if not isinstance(value, list) or len(value) > MAX_LIST:
        return []
    return [-1 if (i := as_int(v)) is None else i for v in value]


def choice(value: Any, allowed: Any, default: str) -> str:
    """A dropdown or radio value from a fixed set (a dict or set of strings)."""
    return value if isinstance(value, str) and value in allowed else default


def sort_by(value: Any) -> list[dict]:
    """A DataTable sort_by: [{column_id: str, direction: asc|desc}], the first entry only."""
    if isinstance(value, list) and value and isinstance(value[0], dict) and isinstance(value[0].get("column_id"), str):
        d = value[0].get("direction")
        return [{"column_id": value[0]["column_id"], "direction": d if d in ("asc", "desc") else "asc"}]
    return []


def collective(a: Analysis, value: Any) -> dict | None:
    """{pg, seq} of a matched instance of this Analysis, else None."""
    v = as_dict(value)
    pg, seq = v.get("pg"), as_int(v.get("seq"))
    if not isinstance(pg, (str, int)) or isinstance(pg, bool) or seq is None:
        return None
    found = a.collectives.filter((pl.col("pg") == str(pg)) & (pl.col("seq") == seq)).height
    return {"pg": str(pg), "seq": seq} if found else None


class Known:
    """The ids of one Analysis a selection may name."""

    def __init__(self, a: Analysis) -> None:
        self.a = a
        self.ranks = {int(r) for r in a.source["ranks"]}
        self.steps = {int(s) for s in a.steps["step"].to_list()} if a.steps.height else set()

    def rank(self, value: Any) -> int | None:
        r = as_int(value)
        return r if r in self.ranks else None

    def step(self, value: Any) -> int | None:
        s = as_int(value)
        return s if s in self.steps else None

    def selection(self, value: Any) -> dict:
        """The selection store as the client sent it, with only known ranks, steps and collectives kept."""
        v = as_dict(value)
        return {"rank": self.rank(v.get("rank")), "step": self.step(v.get("step")),
                "collective": collective(self.a, v.get("collective")) if v.get("collective") is not None else None}


def zoom(relayout: Any) -> tuple[float, float] | str | None:
    """The zoomed x range of a plotly relayoutData, "reset" on autorange, None when it is not an x zoom.

    Ends are finite, the range is not empty, and it is clipped to +-MAX_AXIS_MS (views.axis)."""
    r = as_dict(relayout)
    if not r:
        return None
    if r.get("xaxis.autorange") is True:
        return "reset"
    lo, hi = r.get("xaxis.range[0]"), r.get("xaxis.range[1]")
    if lo is None and isinstance(r.get("xaxis.range"), list) and len(r["xaxis.range"]) == 2:
        lo, hi = r["xaxis.range"]
    return window(lo, hi)
