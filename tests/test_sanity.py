"""The GPU checks' fast tests (``ingest/sanity.py``): the numpy pre-checks that let ``check_gpu`` skip its Polars
forms when no rule fires must never miss a table where one does.

Random GPU tables with few distinct values (so duplicates, ties and overlaps are common) and nulls where the
canonical table allows them, against each rule written out row by row in plain Python.
"""

from __future__ import annotations

import random

import polars as pl

from analyzer.ingest import sanity
from analyzer.model import GPU_SCHEMA, conform


def _table(rng: random.Random, n: int) -> pl.DataFrame:
    def maybe(v: object, p: float = 0.1) -> object:
        return None if rng.random() < p else v

    rows: list[dict] = []
    for _ in range(n):
        if rows and rng.random() < 0.2:  # a writer's repeat, or a near one (another name, another correlation)
            rows.append({**rng.choice(rows), **rng.choice([{}, {"name": "c"}, {"correlation": 9}])})
            continue
        start = rng.randrange(0, 40)
        rows.append({"rank": rng.randrange(2), "device": maybe(rng.randrange(2)), "stream": maybe(rng.randrange(3)),
                     "start_ns": start, "end_ns": start + rng.randrange(0, 12), "name": maybe(rng.choice("ab")),
                     "kind": maybe(rng.choice(["compute", "comm", "sync"]), 0.05),
                     "correlation": maybe(rng.randrange(3))})
    return conform(pl.DataFrame(rows), GPU_SCHEMA)


def _repeats(g: pl.DataFrame) -> bool:
    keys = [tuple(r[k] for k in sanity._KEY) for r in g.iter_rows(named=True)]
    return len(set(keys)) < len(keys)


def _spans_next(g: pl.DataFrame) -> bool:
    """The clip's condition, row by row: on a stream, sorted by (start, end), an event (not a sync record) that
    ends after the next one starts and no earlier than it ends."""
    groups: dict[tuple, list[tuple[int, int]]] = {}
    for r in g.iter_rows(named=True):
        sync = r["kind"] == "sync"
        groups.setdefault((r["rank"], r["device"], r["stream"], sync), []).append((r["start_ns"], r["end_ns"]))
    for (_, _, stream, sync), spans in groups.items():
        if stream is None or sync:
            continue
        spans.sort()
        if any(e > s2 and e >= e2 for (_, e), (s2, e2) in zip(spans, spans[1:])):
            return True
    return False


def test_pre_checks_agree_with_the_rules() -> None:
    outcomes = {"repeats": 0, "spans": 0, "neither": 0}
    for seed in range(300):
        rng = random.Random(seed)
        g = _table(rng, rng.choice([0, 1, 2, 4, 8, 20, 60]))
        repeats, spans = _repeats(g), _spans_next(g)
        if repeats:
            assert sanity._may_repeat(g), seed
        assert sanity._any_spans_next(g) == spans, seed
        clipped, said = sanity._clip_stream_overlaps(g)
        assert bool(said) == spans, seed
        if not said:
            assert clipped.equals(g, null_equal=True), seed
        outcomes["repeats"] += repeats
        outcomes["spans"] += spans
        outcomes["neither"] += not (repeats or spans)
    assert min(outcomes.values()) >= 30, outcomes  # every case was exercised


def test_no_repeat_without_equal_numbers() -> None:
    """Rows that differ in a number are never candidates, rows equal in every number are (nulls equal nulls)."""
    base = {"rank": 0, "device": None, "stream": 1, "start_ns": 5, "end_ns": 9, "name": "a", "kind": "compute",
            "correlation": None}
    g = conform(pl.DataFrame([base, {**base, "name": "b"}]), GPU_SCHEMA)
    assert sanity._may_repeat(g)  # the names differ: unique decides (it keeps both)
    g = conform(pl.DataFrame([base, {**base, "correlation": 0}]), GPU_SCHEMA)
    assert not sanity._may_repeat(g)  # null and 0 are not the same value
