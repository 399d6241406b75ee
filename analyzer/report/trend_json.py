"""Trend as JSON (``commscope.trend/1``): runs, change points, drifts and every series' points."""

from __future__ import annotations

from ..history.trend import Series, Trend, worse
from .json import clean, dumps

SCHEMA = "commscope.trend/1"


def _series(t: Trend, s: Series) -> dict:
    return {
        "metric": s.metric, "key": s.key, "scope": s.scope,
        "points": [{"run_id": r, "value": v} for r, v in zip(s.run_ids, s.values)],
        "shifts": [{"run_id": s.run_ids[sh.index], "run": t.positions.get(s.run_ids[sh.index]), "before": sh.before,
                    "after": sh.after, "delta": sh.delta, "delta_pct": sh.delta_pct, "p_value": sh.p_value,
                    "confidence": sh.confidence, "worse": worse(s.metric, sh.delta)} for sh in s.shifts],
        "drifts": [{"from_run_id": s.run_ids[d.start], "to_run_id": s.run_ids[d.end], "slope_per_run": d.slope,
                    "slope_pct_per_run": d.slope_pct, "total_pct": d.total_pct, "p_value": d.p_value,
                    "confidence": d.confidence} for d in s.drifts],
    }


def to_dict(t: Trend) -> dict:
    o = t.options
    series = [_series(t, s) for s in t.series]
    return clean({
        "schema": SCHEMA,
        "store": t.store,
        "filters": t.filters,
        "method": {"candidates": "ruptures.KernelCPD(linear)", "test": "trend+step regression t-test, Bonferroni",
                   "alpha": o.alpha, "min_shift_pct": o.min_shift_pct, "min_drift_pct": o.min_drift_pct,
                   "window": o.window, "min_size": o.min_size},
        "runs": [{**r, "labels": t.labels.get(r["run_id"], {})} for r in t.runs.to_dicts()],
        "changes": [{"metric": s["metric"], "key": s["key"], "scope": s["scope"], **sh}
                    for s in series for sh in s["shifts"]],
        "drifts": [{"metric": s["metric"], "key": s["key"], "scope": s["scope"], **d}
                   for s in series for d in s["drifts"]],
        "series": series,
    })


def render(t: Trend) -> str:
    return dumps(to_dict(t)) + "\n"
