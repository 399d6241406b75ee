"""Presenting the counterfactual verdict: the JSON block and the sentence a person reads first."""

from __future__ import annotations

import math

from ..analysis import Analysis
from ..rules import NS_PER_MS
from ..whatif.counterfactual import AXES, Counterfactual, deciding


def _num(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) or math.isinf(x) else x


def counterfactual_dict(a: Analysis) -> dict:
    """``stragglers.slowdown``, ``slowdown_no_host``, ``attribution`` (per axis: key -> step time with that group
    put back, what it adds over the ideal run, its slowdown and share of the gap), ``m_w``, ``m_s``."""
    c = a.counterfactual
    if c is None:
        return {"slowdown": None, "slowdown_no_host": None, "attribution": None, "m_w": None, "m_s": None}
    out = _block(c)
    if c.study is not None:
        out["study"] = _block(c.study)
    return out


def _block(c: Counterfactual) -> dict:
    attribution = {}
    for ax in AXES:
        df = c.attribution.get(ax)
        attribution[ax] = {} if df is None else {
            str(r["key"]): {"step_time_ms": r["step_time_ns"] / NS_PER_MS, "added_ms": r["added_ns"] / NS_PER_MS,
                            "slowdown": _num(r["slowdown"]), "share": _num(r["share"])}
            for r in df.to_dicts()}
    return {
        "slowdown": _num(c.slowdown),
        "slowdown_no_host": _num(c.slowdown_no_host),
        "replay_step_time_ms": c.replay_ns / NS_PER_MS,
        "ideal_step_time_ms": c.ideal_ns / NS_PER_MS,
        "replay_no_host_step_time_ms": c.replay_no_host_ns / NS_PER_MS,
        "ideal_no_host_step_time_ms": c.ideal_no_host_ns / NS_PER_MS,
        "attribution": attribution,
        "m_w": _num(c.m_w), "m_s": _num(c.m_s), "m_w_ranks": list(c.workers),
    }


STAGE_SAID = 0.3  # M_S from which the lead says the gap to the ideal run is stage imbalance


def _ms(x: float) -> str:
    """Milliseconds for people: three significant figures, at most one decimal above 10 ms; seconds above 10 s."""
    if x >= 10_000:
        return f"{x / 1000:,.1f} s"
    return f"{x:,.0f} ms" if x >= 100 else f"{x:.1f} ms" if x >= 10 else f"{x:.2g} ms" if x >= 0.01 else "0 ms"


def lead(a: Analysis) -> str | None:
    """'Fixing rank 3 would cut the step by 43 ms (57%).' for the verdict; for a balanced job, how far it is from
    its ideal run. None without a counterfactual."""
    c, v = a.counterfactual, a.verdict
    if c is None:
        return None
    c = deciding(c)
    if v is not None and v.saving_ns is not None:
        pct = max(v.saving_pct or 0.0, 0.0)
        return (f"Fixing rank {v.rank} would cut the step by {_ms(max(v.saving_ns, 0.0) / NS_PER_MS)} "
                f"({pct:.0f}%): from {_ms(c.replay_ns / NS_PER_MS)} to {_ms((c.replay_ns - v.saving_ns) / NS_PER_MS)}.")
    if c.slowdown is None:
        return None
    text = (f"No single rank holds the job back: the step ({_ms(c.replay_ns / NS_PER_MS)}) is {c.slowdown:.2f}x its "
            f"ideal run ({_ms(c.ideal_ns / NS_PER_MS)})")
    neck = a.pipeline.get("bottleneck_stage") if a.pipeline else None
    if neck is not None and c.m_s is not None and c.m_s >= STAGE_SAID:
        # structure is not blame: a stage slower by design (the last computes the loss) is stage imbalance
        return text + (f"; stage imbalance explains {_pct(c.m_s)} of the gap: stage {neck} sets the pace by its own "
                       "work, not a straggler.")
    return text + ", spread over the ranks."



_WHERE = (("by_stage", "stage"), ("by_dp_replica", "DP replica"), ("by_op", "op"))


def _pct(x: float) -> str:
    return f"{0.0 if round(x * 100) == 0 else x:.0%}"  # never "-0%"


def where(a: Analysis) -> str | None:
    """Op tables: where the slowdown sits in the published study's model (whose numbers commscope reproduces on
    its traces): the stage, DP replica and op type whose measured times, put back into the ideal run, add the
    most, and the shares of the slowdown stage imbalance (M_S) and individual workers (M_W) explain."""
    c = a.counterfactual
    if c is None or c.study is None:
        return None
    src = c.study
    tops = []
    for ax, label in _WHERE:
        df = src.attribution.get(ax)
        if df is None or df.height < 2:  # one group: nothing stands out
            continue
        top = df.sort("added_ns", descending=True).row(0, named=True)
        if top["added_ns"] > 0:
            tops.append(f"{label} {top['key']} (+{_ms(top['added_ns'] / NS_PER_MS)})")
    if not tops:
        return None
    s = f", S {src.slowdown:.2f}x" if _num(src.slowdown) is not None else ""
    shares = [f"{label} {_pct(share)}" for label, share in (("stage imbalance explains", src.m_s),
                                                             ("individual workers", src.m_w)) if _num(share) is not None]
    return (f"In the study's model (launch delays removed{s}): put back into the ideal run, {tops[0]} adds the most "
            "per step" + (f", then {' and '.join(tops[1:])}" if len(tops) > 1 else "")
            + (f"; {', '.join(shares)} of the slowdown (M_S, M_W)" if shares else "") + ".")
