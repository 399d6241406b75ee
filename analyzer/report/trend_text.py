"""Trend of stored runs as plain text and as Markdown (a job summary): change points, drifts, every series."""

from __future__ import annotations

import statistics

from ..history.trend import Series, Trend, worse
from ..views.units import num
from .md import cell, table


def _pct(x: float | None) -> str:
    return "" if x is None else f" ({x:+.1f}%)"


def run_ref(t: Trend, run_id: str) -> str:
    """'RUNID (#35, commit=abc)'."""
    pos = t.positions.get(run_id)
    labels = t.labels.get(run_id, {})
    extra = ", ".join(f"{k}={v}" for k, v in labels.items())
    return f"{run_id} (#{pos}{', ' + extra if extra else ''})"


def change_lines(t: Trend) -> list[str]:
    out = []
    for s, sh in t.changes():
        word = "worse" if worse(s.metric, sh.delta) else "better"
        out.append(f"{s.metric} [{s.scope}]: {num(sh.before)} -> {num(sh.after)}, {sh.delta:+,.3g}{_pct(sh.delta_pct)}"
                   f" from run {run_ref(t, s.run_ids[sh.index])}, confidence {100 * sh.confidence:.2f}% ({word})")
    return out


def drift_lines(t: Trend) -> list[str]:
    out = []
    for s, d in t.drifts():
        per = "" if d.slope_pct is None else f" ({d.slope_pct:+.2f}%/run, {d.total_pct:+.1f}% in all)"
        out.append(f"{s.metric} [{s.scope}]: drifts {d.slope:+,.3g}/run{per} over runs "
                   f"{run_ref(t, s.run_ids[d.start])} .. {run_ref(t, s.run_ids[d.end])}, confidence "
                   f"{100 * d.confidence:.2f}%")
    return out


def header(t: Trend) -> str:
    n = t.runs.height
    if n == 0:
        return f"commscope trend: no runs in {t.store}" + (" matching the filters" if _filtered(t) else "")
    first, last = t.runs.row(0, named=True), t.runs.row(n - 1, named=True)
    return (f"commscope trend: {n} run(s) in {t.store}, {first['run_id']} ({first['added_at']}) .. "
            f"{last['run_id']} ({last['added_at']})")


def _filtered(t: Trend) -> bool:
    f = t.filters
    return bool(f.get("since") or f.get("labels") or f.get("metrics"))


def method_line(t: Trend) -> str:
    o = t.options
    return (f"Change points: kernel change-point search (ruptures) confirmed by a trend + step regression t-test, "
            f"Bonferroni-adjusted p < {o.alpha:g}, shifts >= {o.min_shift_pct:g}% of the level; drifts: slope t-test, "
            f">= {o.min_drift_pct:g}% over the segment.")


def _row(s: Series) -> list:
    vals = [v for v in s.values if v is not None]
    med = statistics.median(vals) if vals else None
    return [s.metric, s.scope, len(vals), num(vals[0] if vals else None), num(vals[-1] if vals else None), num(med),
            len(s.shifts), len(s.drifts)]


HEADERS = ["metric", "scope", "runs", "first", "last", "median", "shifts", "drifts"]


def render(t: Trend) -> str:
    lines = [header(t), ""]
    ch, dr = change_lines(t), drift_lines(t)
    lines += ["Change points:"] + ([f"  {x}" for x in ch] or ["  none"]) + [""]
    lines += ["Drifts:"] + ([f"  {x}" for x in dr] or ["  none"]) + [""]
    if t.series:
        rows = [[str(c) for c in _row(s)] for s in t.series]
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
        fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" for i, w in enumerate(widths))
        lines += [fmt.format(*HEADERS)] + [fmt.format(*r) for r in rows] + [""]
    lines.append(method_line(t))
    return "\n".join(lines) + "\n"


def render_markdown(t: Trend) -> str:
    ch, dr = change_lines(t), drift_lines(t)
    icon = ":warning:" if any(worse(s.metric, sh.delta) for s, sh in t.changes()) else ":white_check_mark:"
    lines = [f"## commscope trend {icon}", "", header(t), ""]
    lines += ["### Change points", ""] + ([f"- {cell(x)}" for x in ch] or ["_none_"]) + [""]
    lines += ["### Drifts", ""] + ([f"- {cell(x)}" for x in dr] or ["_none_"]) + [""]
    if t.series:
        lines += ["<details><summary>Every series</summary>", ""]
        lines += table(HEADERS, [[cell(c) for c in _row(s)] for s in t.series]) + ["", "</details>", ""]
    lines += [f"_{method_line(t)}_"]
    return "\n".join(lines) + "\n"
