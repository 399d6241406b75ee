"""Time ranges on the timeline's axis (ms from the first aligned GPU event): what a zoom may be.

The dashboard checks a client's zoom with these before a figure sees it, and the figures check again (a
figure is also drawn from code), so a range is finite, ordered and within int64 ns once converted.
"""

from __future__ import annotations

import math
from typing import Any

# a zoom is clipped to +-MAX_AXIS_MS (11.6 days) from the timeline's origin: every capture fits, and ns stay
# far inside int64 (a +-1e308 range overflowed the ms -> ns conversion)
MAX_AXIS_MS = 1e9


def as_float(value: Any) -> float | None:
    """A finite number (ints, floats, numeric strings); NaN, infinities and the rest are None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, str)):
        try:
            f = float(value)
        except (ValueError, OverflowError):
            return None
        return f if math.isfinite(f) else None
    return None


def window(lo: Any, hi: Any) -> tuple[float, float] | None:
    """A time range in ms on the timeline's axis: finite, clipped to +-MAX_AXIS_MS, not empty; else None."""
    lo, hi = as_float(lo), as_float(hi)
    if lo is None or hi is None:
        return None
    lo, hi = max(lo, -MAX_AXIS_MS), min(hi, MAX_AXIS_MS)
    return (lo, hi) if hi > lo else None
