"""Property-based fuzzing of the readers (issue #32, item 6): Hypothesis mutates a real rank, a generated trace, and
an Nsight export of it, and every outcome must keep the contract of ``tests/fuzz_contract.py``: exit 0 with the
unmutated input's numbers where the mutation is neutral (order, whitespace, BOM, compression), else a named warning
or one line of error; never a traceback, a hang, or a silent change. Example counts are small here; the long
campaign is ``benchmarks/fuzz_campaign.py``. (Op tables have no reader on this branch yet: nothing to fuzz.)"""

from __future__ import annotations

import copy
import gzip
import json
import math
import random
import sqlite3
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import fuzz_contract as fc
from tests import hostile_mutations as hm

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SCRATCH = Path(tempfile.mkdtemp(prefix="cs-fuzz-"))

# values no profiler writes where a number, a name or an object belongs
HOSTILE = st.sampled_from([None, math.nan, math.inf, -math.inf, -1, -1e30, 1e30, 10**30, "x", "", [], {}, True])
FIELDS = ("ts", "dur", "name", "ph", "args", "pid", "tid", "args.stream", "args.device", "args.correlation",
          "args.Collective name", "args.In msg nelems", "args.Process Group Ranks")


def _set(event: dict, field: str, value: Any) -> None:
    if field.startswith("args."):
        if isinstance(event.get("args"), dict):
            event["args"][field[5:]] = value
    else:
        event[field] = value


def _write(doc: dict, name: str, gz: bool, layout: str = "kineto", bom: bool = False, pad: int = 0) -> Path:
    if layout == "kineto":
        text = hm.kineto_text(doc)
    elif layout == "minified":
        text = json.dumps(doc, separators=(",", ":"))
    else:
        text = json.dumps(doc, indent=1)
    raw = (b"\xef\xbb\xbf" if bom else b"") + text.replace('"traceEvents": [', '"traceEvents": [' + " " * pad, 1).encode()
    path = SCRATCH / (name + (".pt.trace.json.gz" if gz else ".pt.trace.json"))
    path.write_bytes(gzip.compress(raw, 1) if gz else raw)
    return path


def _check(base: fc.Outcome, path: Path, neutral: bool) -> None:
    with fc.time_limit(120):
        got = fc.run([path])
    problem = fc.violation(base, got, neutral)
    assert problem is None, problem


# ------------------------------------------------------------------------------------------ a real rank


@cache
def _real_base() -> fc.Outcome:
    return fc.run([hm.RANK0])


def _gpu_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in ("kernel", "gpu_memcpy",
                                                                                      "gpu_memset")]


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), layout=st.sampled_from(["kineto", "minified", "indent"]), bom=st.booleans(),
       gz=st.booleans(), pad=st.integers(0, 1 << 16))
def test_real_rank_neutral_mutations_keep_every_number(seed: int, layout: str, bom: bool, gz: bool, pad: int) -> None:
    doc = hm.base()
    random.Random(seed).shuffle(doc["traceEvents"])
    _check(_real_base(), _write(doc, hm.STEM, gz, layout, bom, pad), neutral=True)


@SETTINGS
@given(picks=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(FIELDS), HOSTILE), min_size=1, max_size=3),
       gz=st.booleans())
def test_real_rank_hostile_values_are_refused_or_said(picks: list, gz: bool) -> None:
    doc = hm.base()
    events = _gpu_events(doc)
    for i, field, value in picks:
        _set(events[i % len(events)], field, copy.deepcopy(value))
    _check(_real_base(), _write(doc, hm.STEM, gz), neutral=False)


@SETTINGS
@given(cut=st.floats(0.0, 1.0), gz=st.booleans())
def test_real_rank_truncated_anywhere_is_one_line(cut: float, gz: bool) -> None:
    raw = gzip.decompress(hm.RANK0.read_bytes())
    raw = raw[: int(len(raw) * cut)]
    path = SCRATCH / (hm.STEM + (".pt.trace.json.gz" if gz else ".pt.trace.json"))
    path.write_bytes(gzip.compress(raw, 1) if gz else raw)
    with fc.time_limit(120):
        got = fc.run([path])
    assert got.kind == "error" and "\n" not in got.message and str(path) in got.message, got.message


# ------------------------------------------------------------------------------------------ generated traces


@cache
def _generated() -> Path:
    from sample_traces import generate

    out = SCRATCH / "generated"
    generate.main([str(out), "--ranks", "2", "--steps", "2", "--no-truth", "--seed", "3"])
    return next(out.glob("*rank0*.json"))


@cache
def _generated_base() -> fc.Outcome:
    return fc.run([_generated()])


@SETTINGS
@given(picks=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(FIELDS), HOSTILE), min_size=1, max_size=4),
       seed=st.integers(0, 2**32 - 1))
def test_generated_trace_hostile_values_are_refused_or_said(picks: list, seed: int) -> None:
    doc = json.loads(_generated().read_text())
    random.Random(seed).shuffle(doc["traceEvents"])  # order is neutral: only the values may change anything
    events = _gpu_events(doc)
    for i, field, value in picks:
        _set(events[i % len(events)], field, copy.deepcopy(value))
    _check(_generated_base(), _write(doc, "gen.rank0", gz=False), neutral=False)


@SETTINGS
@given(keys=st.lists(st.sampled_from(["traceEvents", "distributedInfo", "baseTimeNanoseconds", "deviceProperties",
                                      "schemaVersion"]), min_size=1, max_size=3, unique=True),
       value=HOSTILE)
def test_generated_trace_hostile_header_is_refused_or_said(keys: list, value: Any) -> None:
    doc = json.loads(_generated().read_text())
    for k in keys:
        doc[k] = copy.deepcopy(value)
    _check(_generated_base(), _write(doc, "gen.rank0", gz=False), neutral=False)


# ------------------------------------------------------------------------------------------ Nsight


@cache
def _nsys() -> Path:
    from sample_traces.nsys_writer import kineto_to_nsys

    return kineto_to_nsys([_generated()], SCRATCH / "gen.rank0.base.sqlite")[0]


@cache
def _nsys_base() -> fc.Outcome:
    return fc.run([_nsys()])


NSYS_TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL": ("start", '"end"', "deviceId", "streamId", "correlationId",
                                              "shortName", "demangledName", "globalPid"),
               "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", '"end"', "correlationId", "nameId", "globalTid"),
               "StringIds": ("value",)}
SQL_HOSTILE = st.sampled_from([-1, 2**62, -(2**62), "x", 1.5e300, 987654321, 0])


@SETTINGS
@given(picks=st.lists(st.tuples(st.sampled_from(sorted(NSYS_TABLES)), st.integers(0, 10**6), st.integers(0, 10),
                                SQL_HOSTILE), min_size=1, max_size=4))
def test_nsight_hostile_values_are_refused_or_said(picks: list) -> None:
    path = SCRATCH / "gen.rank0.sqlite"
    path.write_bytes(_nsys().read_bytes())
    with sqlite3.connect(path) as db:
        for table, row, col, value in picks:
            cols = NSYS_TABLES[table]
            have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
            column = cols[col % len(cols)]
            if column.strip('"') not in have:
                continue
            n = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            if n:
                db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = (SELECT rowid FROM {table} "
                           f"LIMIT 1 OFFSET ?)", (value, row % n))
    _check(_nsys_base(), path, neutral=False)
