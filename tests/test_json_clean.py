"""The JSON report's rounding a column at a time (report/json.py ``_clean_many``) gives ``clean``'s values, one by one."""

from __future__ import annotations

import math

import numpy as np

from analyzer.report.json import _clean_many, clean


def _one_by_one(value: object) -> object:
    """clean's rule written out element by element (the reference)."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 6)
    if isinstance(value, dict):
        return {k: _one_by_one(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_one_by_one(v) for v in value]
    return value


def _same(x: object, y: object) -> bool:
    """Equal with the same types (1 and 1.0 differ in JSON text) and the same zero signs."""
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return list(x) == list(y) and all(_same(x[k], y[k]) for k in x)  # type: ignore[index]
    if isinstance(x, list):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))  # type: ignore[arg-type]
    if isinstance(x, float):
        return x == y and math.copysign(1, x) == math.copysign(1, y)  # type: ignore[arg-type]
    return x == y


def test_records_and_floats_cleaned_a_column_at_a_time_match_one_by_one() -> None:
    rng = np.random.default_rng(3)
    # ms values at every scale, halves of the 6th decimal (round's ties), huge, tiny, negative zero, NaN, inf, null
    floats = [float(v) for v in np.concatenate([rng.normal(0, 1e3, 300), rng.normal(0, 1e-5, 100),
                                                np.round(rng.normal(0, 100, 100), 6) + 5e-7, [2.0**60, -2.0**55],
                                                rng.uniform(1e9, 2.0**34, 100), 1.7e12 + rng.random(50),  # start times
                                                [2.0**33, np.nextafter(2.0**33, 0), -2.0**33]])]
    floats += [-0.0, 0.0, -1e-9, 1e-9, 0.0000005, 0.0000015, 2.5e-7, float("nan"), float("inf"), -float("inf"), None]
    rows = [{"rank": i, "ms": floats[i % len(floats)], "pct": floats[(7 * i) % len(floats)], "name": f"r{i}",
             "ok": bool(i % 2), "nested": {"mean": floats[(3 * i) % len(floats)], "n": i},
             "list": [floats[(5 * i + j) % len(floats)] for j in range(3)]} for i in range(2 * len(floats))]
    assert _same(_clean_many(rows), _one_by_one(rows))
    assert _same(clean(rows), _one_by_one(rows)) and _same(clean(floats), _one_by_one(floats))
    # ints among floats stay ints; records whose keys differ, or a mix of records and other values, element-wise
    mixed = [1, 2.5, None, 3] * 8
    assert _same(_clean_many(mixed), _one_by_one(mixed))
    ragged = rows[:20] + [{"rank": 1, "ms": 0.1234567}] + [{"ms": 1.0, "rank": 2}]
    assert _same(_clean_many(ragged), _one_by_one(ragged))
    assert _same(clean({"a": ragged + [3, "x", [0.1] * 20]}), _one_by_one({"a": ragged + [3, "x", [0.1] * 20]}))
