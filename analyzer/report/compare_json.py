"""The comparison as JSON (``commscope.comparison/1``): every delta, the straggler change, the verdict."""

from __future__ import annotations

from ..compare.diff import Comparison, Delta
from .json import clean, dumps

SCHEMA = "commscope.comparison/1"


def delta_dict(d: Delta) -> dict:
    return clean({
        "metric": d.metric, "scope": d.scope, "unit": d.unit, "before": d.before, "after": d.after,
        "delta": d.delta, "delta_pct": d.delta_pct, "n_before": d.n_before, "n_after": d.n_after,
        "p_value": d.p_value, "confidence": d.confidence, "significant": d.significant,
        "threshold": d.rule.spec() if d.rule else None, "exceeded": d.exceeded, "regressed": d.regressed,
    })


def _source(s: dict) -> dict:
    return clean({"paths": list(dict.fromkeys(s.get("paths", []))), "format": s.get("format"),
                  "ranks": s.get("ranks"), "world_size": s.get("world_size")})


def to_dict(c: Comparison) -> dict:
    s = c.straggler
    th = c.thresholds
    return {
        "schema": SCHEMA,
        "passed": c.passed,
        "base": _source(c.base),
        "new": _source(c.new),
        "thresholds": {
            "confidence": th.confidence, "min_effect_pct_of_step": th.min_effect_pct_of_step,
            "straggler": th.straggler,
            "fail_on": {m: (r.spec() if r else None) for m, r in sorted(th.rules.items())},
        },
        "regressions": [delta_dict(d) for d in c.regressions],
        "overall": [delta_dict(d) for d in c.overall],
        "ranks": [delta_dict(d) for d in c.per_rank],
        "bandwidth": [delta_dict(d) for d in c.bandwidth],
        "dimensions": [delta_dict(d) for d in c.dimensions],
        "straggler": {
            "base": None if s.base_rank is None else {"rank": s.base_rank, "kind": s.base_kind},
            "new": None if s.new_rank is None else {"rank": s.new_rank, "kind": s.new_kind},
            "appeared": s.appeared, "resolved": s.resolved, "regressed": s.regressed,
            "caused_wait": None if s.caused_wait is None else delta_dict(s.caused_wait),
            "prediction": None if s.prediction is None else clean({
                "scenario": "no_straggler", "rank": s.prediction.rank, "base_step_time_ms": s.prediction.base_step_ms,
                "predicted_step_time_ms": s.prediction.predicted_step_ms,
                "new_step_time_ms": s.prediction.new_step_ms, "error_pct": s.prediction.error_pct}),
        },
        "notes": list(c.notes),
        "mismatches": list(c.mismatches),
    }


def render(c: Comparison) -> str:
    return dumps(to_dict(c)) + "\n"
