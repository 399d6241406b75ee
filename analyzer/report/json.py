"""The versioned JSON contract (``commscope.analysis/1``, declared in ``report/schema.py``).

Field names are part of the interface. Missing values are null, never NaN; rows are in a fixed order.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import numpy as np
import polars as pl

from ..analysis import Analysis
from ..metrics.stragglers import Verdict
from ..rules import NS_PER_MS, NS_PER_US
from ..views.communication import records as communication_records
from ..views.counterfactual import counterfactual_dict
from ..views.units import ms_dict, ms_frame, ms_tables
from ..views.whatif import critical_path_records, whatif_dict
from .schema import ANALYSIS, SCHEMA_ID, fields

SCHEMA = SCHEMA_ID

# The records' keys, in order, come from the declared contract (report/schema.py), which the docs render
_P = ANALYSIS["properties"]
RANK_FIELDS = tuple(f for f in fields(_P["ranks"]) if f != "step_time_ms")  # step_time_ms: nested, built below
STEP_FIELDS = fields(_P["steps"])
COLLECTIVE_FIELDS = fields(_P["collectives"])
PROCESS_GROUP_FIELDS = fields(_P["process_groups"])
DIMENSION_FIELDS = fields(_P["dimensions"])


def clean(value: Any) -> Any:
    """JSON-safe: NaN/inf -> null, numpy/polars scalars -> Python, floats rounded to the nanosecond in ms."""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return round(value, 6)
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) >= _COLUMNS_FROM:
            return _clean_many(value)
        return [clean(v) for v in value]
    if isinstance(value, pl.Series):
        return clean(value.to_list())
    return value


_COLUMNS_FROM = 16  # lists this long are cleaned a column at a time (records of thousands of ranks and steps)


def _clean_many(values: list | tuple) -> list:
    """``[clean(v) for v in values]``, the same values: floats (and nulls) rounded a column at a time with
    ``_numbers``; a list of records with the same keys, a key at a time (what else clean does, as clean does)."""
    first = values[0]
    if type(first) is dict and all(type(v) is dict and len(v) == len(first) for v in values):
        keys = tuple(first)
        if all(tuple(v) == keys for v in values):
            cols = [_clean_many([v[k] for v in values]) for k in keys]
            return [dict(zip(keys, row)) for row in zip(*cols)]
    # exactly float (a numpy float64 is one too, and round keeps its type); an int stays an int
    if all(type(v) is float or v is None for v in values):
        return _numbers(pl.Series(values, dtype=pl.Float64))
    return [clean(v) for v in values]


def _number(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) or math.isinf(v) else round(v, 6)


_SIX_DECIMALS = 10.0**6  # rounding to 6 decimals, not a unit


def _numbers(s: pl.Series) -> list[float | None]:
    """``[_number(v) for v in s]``, the same floats bit for bit, a column at a time: round(x, 6) is the
    double nearest k / 10^6 for k = x * 10^6 rounded, which numpy gives wherever x * 10^6 is not within
    rounding error of a half (those few, and huge values, go through ``round``)."""
    x = s.cast(pl.Float64).to_numpy()
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore", over="ignore"):
        f = x * _SIX_DECIMALS
        out = np.rint(f) / _SIX_DECIMALS
        # from 2^33 on a double's spacing exceeds 1e-6, so the 6-decimal rounding is within half a spacing of x and
        # round gives x back (absolute start times in ms: tens of thousands a report)
        whole = finite & (np.abs(x) >= 2.0**33)
        out[whole] = x[whole]
        near = finite & ~whole & ((np.abs(f - np.floor(f) - 0.5) < 1e-6) | (np.abs(f) > 2.0**50))
    for i in np.flatnonzero(near):
        out[i] = round(float(x[i]), 6)
    vals = out.tolist()
    for i in np.flatnonzero(~finite):
        vals[i] = None
    return vals


def _plain(dtype: pl.DataType) -> bool:
    """Values ``clean`` leaves as they are (member lists of thousands of ranks, per instance)."""
    return dtype.is_integer() or dtype in (pl.String, pl.Boolean)


def _records(df: pl.DataFrame, fields: tuple[str, ...]) -> list[dict]:
    """``clean`` of each row, done a column at a time (thousands of rows)."""
    cols = [f for f in fields if f in df.columns]
    if not cols:
        return [clean(r) for r in df.select(cols).to_dicts()]
    values = []
    for c in cols:
        s = df[c]
        if s.dtype.is_float():
            values.append(_numbers(s))
            continue
        vals = s.to_list()
        if not (_plain(s.dtype) or isinstance(s.dtype, pl.List) and _plain(s.dtype.inner)):
            vals = [clean(v) for v in vals]  # what clean changes: floats, at any depth
        values.append(vals)
    return [dict(zip(cols, row)) for row in zip(*values)]


def _verdict(v: Verdict) -> dict:
    return clean({
        "rank": v.rank, "kind": v.kind, "root_caused_wait_ms": v.root_caused_wait_ns / NS_PER_MS,
        "caused_wait_ms": v.caused_wait_ns / NS_PER_MS, "confidence": v.confidence, "chronic": v.chronic,
        "last_arrival_pct": v.last_arrival_pct, "steps_last": v.steps_last, "steps_seen": v.steps_seen,
        "idle_before_ms": v.idle_before_ns / NS_PER_MS, "compute_before_ms": v.compute_before_ns / NS_PER_MS,
        "instances_last": v.instances_last, "effect": v.effect,
        "saving_ms": None if v.saving_ns is None else v.saving_ns / NS_PER_MS, "saving_pct": v.saving_pct,
        "added_ms": None if v.added_ns is None else v.added_ns / NS_PER_MS,
        "chain": [{"via": list(c.via), "pg": list(c.pg), "groups": c.groups, "peers": c.peers,
                   "wait_ms": c.wait_ns / NS_PER_MS} for c in v.chain],
    })


def to_dict(a: Analysis) -> dict:
    t = ms_tables(a)  # the Analysis holds ns; the contract is ms
    ranks = []
    for row in t.ranks.to_dicts():
        rec = {k: row.get(k) for k in RANK_FIELDS}
        rec["step_time_ms"] = {"mean": row["step_time_mean_ms"], "p50": row["step_time_p50_ms"],
                               "max": row["step_time_max_ms"]}
        ranks.append(rec)
    ranks = clean(ranks)
    roots = [_verdict(v) for v in a.roots]
    ranking = clean([
        {"rank": r["rank"], "root_caused_wait_ms": r["root_caused_wait_ns"] / NS_PER_MS,
         "propagated_wait_ms": r["propagated_wait_ns"] / NS_PER_MS, "caused_wait_ms": r["caused_wait_ns"] / NS_PER_MS,
         "wait_ms": r["wait_ns"] / NS_PER_MS, "last_arrival_pct": r["last_arrival_pct"],
         "steps_last": r["steps_last"], "instances": r["instances"]}
        for r in a.ranking.to_dicts()
    ])
    fit = a.clock
    return {
        "schema": SCHEMA,
        "source": clean(a.source),
        "ranks": ranks,
        "steps": _records(t.steps, STEP_FIELDS),
        "collectives": _records(t.collectives, COLLECTIVE_FIELDS),
        "bandwidth": _records(t.bandwidth, tuple(t.bandwidth.columns)),
        "communication": _communication(a),
        "stragglers": {"verdict": roots[0] if roots else None, "roots": roots, "ranking": ranking,
                       "transfer_caused_wait_ms": _number(a.blame.transfer_caused_ns / NS_PER_MS) if a.blame else None,
                       **counterfactual_dict(a)},
        "clock": clean({
            "method": fit.method,
            "reference_rank": fit.reference,
            "offsets_us": {str(r): o / NS_PER_US for r, o in sorted(fit.offsets_ns.items())},
            "uncertainty_us": fit.uncertainty_ns / NS_PER_US if fit.uncertainty_ns is not None else None,
            "instances": fit.instances,
        }),
        "process_groups": _records(a.process_groups, PROCESS_GROUP_FIELDS) if a.process_groups is not None else [],
        "dimensions": _records(t.dimensions, DIMENSION_FIELDS) if t.dimensions is not None else [],
        "pipeline": _pipeline(a.pipeline),
        "experts": _experts(a.experts),
        "matching": clean(a.matching),
        "critical_path": clean(critical_path_records(a)),
        "whatif": clean(whatif_dict(a)),
        "inspector": _inspector(a),
        "warnings": list(a.warnings),
    }


def _communication(a: Analysis) -> list[dict]:
    """Per (rank, family, engine): the split of communication by library and engine (views/communication.py)."""
    df = communication_records(a)
    return [] if df is None else _records(df, fields(_P["communication"]))


PIPELINE_STAGE_FIELDS = fields(_P["pipeline"]["properties"]["stages"])


def _pipeline(p: dict | None) -> dict | None:
    if p is None:
        return None
    head = {k: p[k] for k in ("stage_source", "steps", "chains", "bottleneck_stage")}
    return clean({**head, "stages": _records(ms_frame(p["stages"]), PIPELINE_STAGE_FIELDS)})


def _inspector(a: Analysis) -> dict | None:
    """NCCL Inspector input: the tables of ``metrics.inspector`` (README: "Always-on NCCL Inspector logs")."""
    s = a.inspector
    if s is None:
        return None
    tables = {k: ms_frame(getattr(s, k).drop("comm", strict=False)) for k in
              ("communicators", "busbw", "bandwidth", "slow_links", "ranks", "dimensions", "outliers")}
    return {"verbose": s.verbose, "counts": clean(s.counts), "verdict": clean(ms_dict(s.verdict)),
            **{k: _records(df, tuple(df.columns)) for k, df in tables.items()}}


def _experts(e: dict | None) -> dict | None:
    if e is None:
        return None
    head = {k: e[k] for k in ("instances", "imbalance_p50", "imbalance_max", "top_receiver")}
    tables = {k: _records(ms_frame(e[k]), tuple(ms_frame(e[k]).columns)) for k in ("per_instance", "ranks", "peers")}
    return clean({**head, **tables})


def dumps(doc: dict) -> str:
    """The document indented by 2, ASCII only. msgspec encodes it (0.04 s against json.dumps' 0.23 s for the
    18 MB report of 4 x 500 MB hybrid_tp_dp) and indents it. It is json.dumps' text but for how some
    floats are spelled (``0.000025`` for ``2.5e-05``; both the same shortest round-trip value). Text with
    non-ASCII characters goes through json.dumps, which escapes them, so any terminal can print it."""
    raw = msgspec.json.encode(doc)
    if raw.isascii():
        return msgspec.json.format(raw, indent=2).decode("ascii")
    return msgspec.json.format(json.dumps(doc, allow_nan=False), indent=2)


def render(a: Analysis) -> str:
    return dumps(to_dict(a)) + "\n"
