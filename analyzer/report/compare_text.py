"""Plain-text comparison report, and the phrasing every comparison presenter shares."""

from __future__ import annotations

from ..compare.diff import Comparison, Delta, StragglerChange

LABELS = {
    "step_time_ms": "step time", "compute_ms": "compute", "exposed_comm_ms": "exposed comm",
    "exposed_wait_ms": "exposed wait", "exposed_transfer_ms": "exposed transfer", "overlap_pct": "overlap",
    "idle_ms": "idle", "busbw_gbps": "busbw", "caused_wait_ms": "wait caused by straggler",
}


def value(x: float | None, unit: str) -> str:
    if x is None:
        return "n/a"
    digits = 3 if unit == "ms" and abs(x) < 10 else 2 if unit == "GB/s" else 1
    return f"{x:,.{digits}f} {unit}"


def change(d: Delta) -> str:
    """``+1.234 ms (+12.0%)``; overlap moves in points."""
    if d.delta is None:
        return "n/a"
    unit = "pt" if d.unit == "%" else d.unit
    digits = 3 if d.unit == "ms" and abs(d.delta) < 10 else 2 if d.unit == "GB/s" else 1
    out = f"{d.delta:+,.{digits}f} {unit}"
    if d.delta_pct is not None and d.unit != "%":
        out += f" ({d.delta_pct:+.1f}%)"
    return out


def confidence(d: Delta) -> str:
    return "untestable (n<2)" if d.confidence is None else f"{100 * d.confidence:.1f}%"


def status(d: Delta) -> str:
    if d.regressed:
        return "REGRESSED"
    if d.exceeded:
        return "beyond threshold, not significant"
    if d.rule is None:
        return "reported"
    return "ok"


def label(d: Delta) -> str:
    """The metric's name; per parallelism dimension it leads: "TP exposed comm"."""
    name = LABELS.get(d.metric, d.metric)
    return f"{d.scope} {name}" if d.scope.isupper() else name


def describe(d: Delta) -> str:
    """One line naming the metric with before, after, delta, confidence and threshold."""
    rule = d.rule.spec() if d.rule else "none"
    return (f"{label(d)} [{d.metric}] ({d.scope}): {value(d.before, d.unit)} -> "
            f"{value(d.after, d.unit)}, {change(d)}, confidence {confidence(d)}, threshold {rule}, "
            f"n={d.n_before}/{d.n_after}")


def straggler_lines(s: StragglerChange) -> list[str]:
    return _straggler_lines(s) + _prediction_lines(s)


def _prediction_lines(s: StragglerChange) -> list[str]:
    p = s.prediction
    if p is None:
        return []
    return [f"Prediction check: fixing rank {p.rank} in BASE ({p.base_step_ms:,.3f} ms per step) was predicted to give "
            f"{p.predicted_step_ms:,.3f} ms; NEW measures {p.new_step_ms:,.3f} ms ({p.error_pct:+.1f}% off the prediction)."]


def _straggler_lines(s: StragglerChange) -> list[str]:
    if s.appeared:
        was = "none" if s.base_rank is None else f"rank {s.base_rank} ({s.base_kind})"
        line = f"Straggler appeared in NEW: rank {s.new_rank} ({s.new_kind}); base straggler: {was}."
        if s.caused_wait is not None:
            line += f" Wait it caused per step: {value(s.caused_wait.before, 'ms')} -> {value(s.caused_wait.after, 'ms')}"
            line += f" ({change(s.caused_wait)}, confidence {confidence(s.caused_wait)})."
        return [line]
    if s.resolved:
        return [f"Straggler resolved: base had rank {s.base_rank} ({s.base_kind}), NEW has none."]
    if s.new_rank is not None:
        return [f"Straggler unchanged: rank {s.new_rank} ({s.new_kind}) in both runs."]
    return ["No straggler in either run."]


def summary(c: Comparison) -> str:
    n = len(c.regressions)
    if n == 0:
        return "PASS: no significant regression beyond the thresholds."
    return f"FAIL: {n} regression{'s' if n != 1 else ''} (beyond threshold and significant at " \
           f"{100 * c.thresholds.confidence:g}% confidence)."


def run_line(source: dict) -> str:
    """Format, rank count and where the files are (one folder named once, not every rank file)."""
    paths = [str(p) for p in dict.fromkeys(source.get("paths", []))]
    folders = list(dict.fromkeys(p.rsplit("/", 1)[0] if "/" in p else "." for p in paths))
    where = ", ".join(paths) if len(paths) <= 1 or len(folders) > 1 else f"{folders[0]}/ ({len(paths)} files)"
    return f"{source.get('format')}, {len(source.get('ranks', []))} rank(s): {where}"


def render(c: Comparison) -> str:
    lines = [f"commscope compare  {summary(c)}", f"  base: {run_line(c.base)}", f"  new:  {run_line(c.new)}", ""]
    if c.regressions:
        lines.append("Regressions:")
        lines += [f"  - {describe(d)}" for d in c.regressions]
        lines.append("")
    lines += straggler_lines(c.straggler) + [""]
    lines.append("Overall (median over steps of the per-step mean across ranks):")
    lines += [f"  {_row(d)}" for d in c.overall]
    if c.per_rank:
        lines += ["", "Per rank (median over that rank's steps):"]
        lines += [f"  {_row(d)}" for d in c.per_rank if d.regressed or d.exceeded or d.metric == "step_time_ms"]
        lines.append("  (per-rank rows shown: step time, and any metric beyond its threshold; JSON has all)")
    if c.bandwidth:
        lines += ["", "Bus bandwidth per operation and size (median over instances):"]
        lines += [f"  {_row(d)}" for d in c.bandwidth]
    if c.dimensions:
        lines += ["", "Per parallelism dimension (median over ranks of the per-step value):"]
        lines += [f"  {_row(d)}" for d in c.dimensions]
    if c.notes:
        lines += [""] + [f"note: {n}" for n in c.notes]
    return "\n".join(lines) + "\n"


def _row(d: Delta) -> str:
    name = label(d) if d.scope.isupper() else f"{label(d)} ({d.scope})"
    return (f"{name:<34} {value(d.before, d.unit):>14} -> {value(d.after, d.unit):>14}  {change(d):<26} "
            f"conf {confidence(d):>7}  [{status(d)}]")
